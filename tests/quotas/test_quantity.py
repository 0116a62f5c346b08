"""Tests for quotas.quantity: Kubernetes quantity parsing, validation and formatting."""

import ast
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from quotas import quantity
from quotas.quantity import (
    BINARY_SI,
    QuantityError,
    format_as,
    format_quantity,
    parse_nonnegative_quantity,
    parse_quantity,
    parse_resource_amount,
    to_display,
)

KI, MI, GI, TI, PI, EI = (1024**power for power in range(1, 7))
MAX = 2**63 - 1

# --- parse_quantity: accepted syntax ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1n", Decimal("0.000000001")),
        ("1u", Decimal("0.000001")),
        ("500m", Decimal("0.5")),
        ("1", Decimal(1)),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1G", Decimal(10**9)),
        ("1T", Decimal(10**12)),
        ("1P", Decimal(10**15)),
        ("1E", Decimal(10**18)),
        ("1Ki", Decimal(KI)),
        ("1Mi", Decimal(MI)),
        ("64Gi", Decimal(64 * GI)),
        ("1Ti", Decimal(TI)),
        ("1Pi", Decimal(PI)),
        ("1Ei", Decimal(EI)),
        ("7Ei", Decimal(7 * EI)),
        ("1.5Gi", Decimal(1536 * MI)),
        ("0.5Ki", Decimal(512)),
        ("250m", Decimal("0.25")),
        ("1500m", Decimal("1.5")),
        ("100u", Decimal("0.0001")),
        ("3n", Decimal("0.000000003")),
    ],
)
def test_every_suffix(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2e3", Decimal(2000)),
        ("2E3", Decimal(2000)),
        ("2e+3", Decimal(2000)),
        ("2E+3", Decimal(2000)),
        ("2e-3", Decimal("0.002")),
        ("2E-3", Decimal("0.002")),
        ("1.5e2", Decimal(150)),
        ("-1e3", Decimal(-1000)),
        ("1e0", Decimal(1)),
        ("1e9", Decimal(10**9)),
        ("1e-9", Decimal("0.000000001")),
        ("9e18", Decimal(9 * 10**18)),
        (".5e1", Decimal(5)),
        ("5.e1", Decimal(50)),
        ("+5e-1", Decimal("0.5")),
        ("0e999999999", Decimal(0)),
        ("1e007", Decimal(10**7)),
    ],
)
def test_exponent_forms(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


def test_capital_e_alone_is_exa_not_an_exponent() -> None:
    assert parse_quantity("2E") == 2 * 10**18
    assert parse_quantity("2E1") == 20


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5", Decimal("1.5")),
        ("+1", Decimal(1)),
        ("+1.5Gi", Decimal(1536 * MI)),
        (".5", Decimal("0.5")),
        ("+.5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("-1", Decimal(-1)),
        ("-500m", Decimal("-0.5")),
        ("-1Gi", Decimal(-GI)),
        ("0", Decimal(0)),
        ("-0", Decimal(0)),
        ("0.000", Decimal(0)),
        ("007", Decimal(7)),
        ("0.100", Decimal("0.1")),
        (str(MAX), Decimal(MAX)),
        ("-" + str(MAX), Decimal(-MAX)),
        ("0" * 63 + "1", Decimal(1)),  # exactly 64 characters
    ],
)
def test_number_forms(text: str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, Decimal(0)),
        (16, Decimal(16)),
        (-3, Decimal(-3)),
        (MAX, Decimal(MAX)),
        (Decimal("1.5"), Decimal("1.5")),
        (Decimal("64E9"), Decimal(64 * 10**9)),
        (Decimal("-0"), Decimal(0)),
        (Decimal("0.000000001"), Decimal("1E-9")),
    ],
)
def test_int_and_decimal_pass_through(value: int | Decimal, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("64Gi", "68719476736"),
        ("500m", "0.5"),
        ("1.50", "1.5"),
        ("2e3", "2000"),
        ("-0", "0"),
        ("1k", "1000"),
        ("100u", "0.0001"),
    ],
)
def test_parsed_decimals_are_canonical(text: str, canonical: str) -> None:
    """No exponent notation and no trailing zeros, so str() of the result is readable."""
    assert str(parse_quantity(text)) == canonical


# --- parse_quantity: rejections --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("", "it is empty"),
        ("12GB", "unknown suffix 'GB' (use Gi or G)"),
        ("12gb", "unknown suffix 'gb' (use Gi or G)"),
        ("1GiB", "unknown suffix 'GiB' (use Gi or G)"),
        ("1MB", "unknown suffix 'MB' (use Mi or M)"),
        ("1K", "unknown suffix 'K' (use Ki or k)"),
        ("1KB", "unknown suffix 'KB' (use Ki or k)"),
        ("1EB", "unknown suffix 'EB' (use Ei or E)"),
        ("1ki", "unknown suffix 'ki' (use Ki or k)"),
        ("1mi", "unknown suffix 'mi' (use Mi or M)"),
        ("1Gb", "use Gi or G"),
        ("1x", "unknown suffix 'x' (valid suffixes are"),
        ("0x10", "unknown suffix 'x10'"),
        ("1.5.3", "more than one decimal point"),
        ("5..", "more than one decimal point"),
        ("Gi", "must start with a number"),
        ("abc", "must start with a number"),
        ("-", "must start with a number"),
        ("+", "must start with a number"),
        (".", "must start with a number"),
        ("+-1", "must start with a number"),
        ("--1", "must start with a number"),
        ("e3", "must start with a number"),
        ("1 Gi", "contains whitespace"),
        (" 1", "contains whitespace"),
        ("1 ", "contains whitespace"),
        ("1\n", "contains whitespace"),
        ("1\t", "contains whitespace"),
        ("1\u00a0Gi", "contains whitespace"),
        ("1e", "bad exponent 'e'"),
        ("1E+", "bad exponent 'E+'"),
        ("1e-", "bad exponent 'e-'"),
        ("1e1.5", "bad exponent 'e1.5'"),
        ("1e3Gi", "bad exponent 'e3Gi'"),
        ("1Gi1", "unknown suffix 'Gi1'"),
        ("1mm", "unknown suffix 'mm'"),
        ("1m ", "contains whitespace"),
        ("\u0661\u0662", "non-ASCII"),  # Arabic-Indic digits
        ("\uff11\uff12", "non-ASCII"),  # full-width digits
        ("\u0967Gi", "non-ASCII"),  # Devanagari digit
        ("1\u00b2", "non-ASCII"),  # superscript two
        ("1" * 65, "65 characters long (at most 64)"),
        ("1" * 10_000, "10000 characters long"),
        ("9223372036854775808", "larger than 2^63-1"),
        ("-9223372036854775808", "larger than 2^63-1"),
        ("8Ei", "larger than 2^63-1"),
        ("10E", "larger than 2^63-1"),
        ("1e19", "larger than 2^63-1"),
        ("1e99999999999999999999", "larger than 2^63-1"),
        ("1e-10", "finer than 1n"),
        ("0.1n", "finer than 1n"),
        ("1.5n", "finer than 1n"),
        ("0.0000000001", "finer than 1n"),
        ("1e-99999999999999999999", "finer than 1n"),
        ("NaN", "must start with a number"),
        ("Infinity", "must start with a number"),
        ("inf", "must start with a number"),
    ],
)
def test_rejections_explain_what_is_wrong(value: str, fragment: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(value)
    message = str(raised.value)
    assert fragment in message
    assert "is not a Kubernetes quantity" in message


def test_documented_example_message() -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity("12GB")
    assert str(raised.value) == (
        "'12GB' is not a Kubernetes quantity: unknown suffix 'GB' (use Gi or G)"
    )


def test_long_input_is_not_echoed_in_full() -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity("9" * 5000)
    assert len(str(raised.value)) < 200


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (True, "booleans are not quantities"),
        (False, "booleans are not quantities"),
        (1.5, "floats are inexact"),
        (2.0, "floats are inexact"),
        (float("nan"), "floats are inexact"),
        (Decimal("NaN"), "NaN and Infinity"),
        (Decimal("sNaN"), "NaN and Infinity"),
        (Decimal("Infinity"), "NaN and Infinity"),
        (Decimal("-Infinity"), "NaN and Infinity"),
        (Decimal(2**63), "larger than 2^63-1"),
        (2**63, "larger than 2^63-1"),
        (-(2**63), "larger than 2^63-1"),
        (Decimal("1E-10"), "finer than 1n"),
        (Decimal("1E+999999"), "larger than 2^63-1"),
        (Decimal("1E-999999"), "finer than 1n"),
        (None, "expected a string, int or Decimal, got NoneType"),
        ([1], "got list"),
        (b"1", "got bytes"),
    ],
)
def test_rejects_non_quantity_types(value: object, fragment: str) -> None:
    with pytest.raises(QuantityError, match="is not a Kubernetes quantity") as raised:
        parse_quantity(value)  # type: ignore[arg-type]
    assert fragment in str(raised.value)


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)
    with pytest.raises(ValueError):
        parse_quantity("12GB")


def test_decimal_with_many_trailing_zeros_is_exact() -> None:
    assert parse_quantity(Decimal("1." + "0" * 200)) == 1
    assert parse_quantity(Decimal("0.5" + "0" * 200)) == Decimal("0.5")


# --- parse_nonnegative_quantity --------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-0", "1", "500m", "64Gi", 0, 3, Decimal("0.5")])
def test_nonnegative_accepts_zero_and_positive(value: str | int | Decimal) -> None:
    assert parse_nonnegative_quantity(value) == parse_quantity(value)


@pytest.mark.parametrize("value", ["-1", "-500m", "-1Gi", "-1e3", -1, Decimal("-0.5")])
def test_nonnegative_rejects_negatives(value: str | int | Decimal) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_nonnegative_quantity(value, field="requests.cpu")
    message = str(raised.value)
    assert message.startswith(f"requests.cpu: {value} is negative")
    assert "a quota cannot be below 0" in message


def test_nonnegative_default_field_name_and_syntax_errors() -> None:
    with pytest.raises(QuantityError, match=r"^value: -1 is negative"):
        parse_nonnegative_quantity("-1")
    with pytest.raises(QuantityError, match="unknown suffix"):
        parse_nonnegative_quantity("1GB")


# --- parse_resource_amount -------------------------------------------------------------------

COUNT_RESOURCES = [
    "nvidia.com/gpu",
    "requests.nvidia.com/gpu",
    "limits.nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-3g.40gb",
    "amd.com/gpu",
    "example.org/widget",
    "pods",
    "count/pods",
    "count/jobs.batch",
    "count/deployments.apps",
    "persistentvolumeclaims",
    "gold.storageclass.storage.k8s.io/persistentvolumeclaims",
    "jobs",
    "services",
    "configmaps",
]
BYTE_RESOURCES = [
    "memory",
    "requests.memory",
    "limits.memory",
    "storage",
    "requests.storage",
    "ephemeral-storage",
    "requests.ephemeral-storage",
    "limits.ephemeral-storage",
    "gold.storageclass.storage.k8s.io/requests.storage",
    "hugepages-2Mi",
    "requests.hugepages-1Gi",
]
CPU_RESOURCES = ["cpu", "requests.cpu", "limits.cpu"]


@pytest.mark.parametrize("resource", COUNT_RESOURCES)
@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", 0), ("1", 1), ("16", 16), (8, 8), ("2k", 2000), ("1e2", 100), ("4000m", 4)],
)
def test_counts_accept_whole_numbers(resource: str, value: str | int, expected: int) -> None:
    assert parse_resource_amount(resource, value) == expected


@pytest.mark.parametrize("resource", COUNT_RESOURCES)
@pytest.mark.parametrize("value", ["1.5", "500m", "0.1", Decimal("2.5")])
def test_counts_reject_fractions(resource: str, value: str | Decimal) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount(resource, value)
    assert str(raised.value) == f"{resource} must be a whole number, got {value}"


def test_gpu_fraction_message_matches_brief() -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount("nvidia.com/gpu", "1.5")
    assert str(raised.value) == "nvidia.com/gpu must be a whole number, got 1.5"


@pytest.mark.parametrize("resource", CPU_RESOURCES)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1m", "0.001"),
        ("500m", "0.5"),
        ("0.5", "0.5"),
        ("1500m", "1.5"),
        ("8", "8"),
        ("0.001", "0.001"),
        ("1000u", "0.001"),
        ("2e-3", "0.002"),
        ("0", "0"),
        (4, "4"),
    ],
)
def test_cpu_accepts_millicore_precision(resource: str, value: str | int, expected: str) -> None:
    assert parse_resource_amount(resource, value) == Decimal(expected)


@pytest.mark.parametrize("resource", CPU_RESOURCES)
@pytest.mark.parametrize("value", ["0.0001", "100u", "1500u", "1n", "0.5001", Decimal("1.0005")])
def test_cpu_rejects_below_millicore(resource: str, value: str | Decimal) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount(resource, value)
    message = str(raised.value)
    assert message.startswith(f"{resource} must be a multiple of 1m")
    assert f"got {value}" in message
    assert "round it up" in message


@pytest.mark.parametrize("resource", BYTE_RESOURCES)
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.5Gi", 1536 * MI),
        ("64Gi", 64 * GI),
        ("1Ti", TI),
        ("100", 100),
        ("500M", 500 * 10**6),
        ("0.5Ki", 512),
        ("1k", 1000),
        ("0", 0),
        (2**40, TI),
        ("1e3", 1000),
    ],
)
def test_bytes_accept_whole_bytes(resource: str, value: str | int, expected: int) -> None:
    assert parse_resource_amount(resource, value) == expected


@pytest.mark.parametrize("resource", BYTE_RESOURCES)
@pytest.mark.parametrize("value", ["0.5", "500m", "1.5", "0.1Ki", "1n", Decimal("10.25")])
def test_bytes_reject_fractional_bytes(resource: str, value: str | Decimal) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount(resource, value)
    assert str(raised.value) == f"{resource} must be a whole number of bytes, got {value}"


@pytest.mark.parametrize("resource", COUNT_RESOURCES + BYTE_RESOURCES + CPU_RESOURCES + ["x"])
@pytest.mark.parametrize("value", ["-1", "-500m", -2])
def test_every_resource_rejects_negatives(resource: str, value: str | int) -> None:
    with pytest.raises(QuantityError, match="a quota cannot be below 0") as raised:
        parse_resource_amount(resource, value)
    assert str(raised.value).startswith(f"{resource}: {value} is negative")


@pytest.mark.parametrize("resource", ["", "example", "kubernetes.io/something"])
def test_unknown_resources_allow_any_nonnegative_quantity(resource: str) -> None:
    assert parse_resource_amount(resource, "0.0001") == Decimal("0.0001")
    assert parse_resource_amount(resource, "1n") == Decimal("1E-9")


def test_resource_amount_reports_syntax_errors_first() -> None:
    with pytest.raises(QuantityError, match="unknown suffix 'GB'"):
        parse_resource_amount("memory", "12GB")


# --- format_quantity -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (64 * GI, "memory", "64Gi"),
        (TI, "memory", "1Ti"),
        (1024**4, "memory", "1Ti"),
        (256 * 1024**3, "memory", "256Gi"),
        (256 * 1024**3, "requests.storage", "256Gi"),
        (1536 * MI, "memory", "1536Mi"),
        (parse_quantity("1.5Gi"), "memory", "1536Mi"),
        (100, "memory", "100"),
        (1, "memory", "1"),
        (0, "memory", "0"),
        (KI, "memory", "1Ki"),
        (EI, "ephemeral-storage", "1Ei"),
        (7 * EI, "storage", "7Ei"),
        (500 * 10**6, "memory", "500M"),
        (1000, "memory", "1k"),
        (10**18, "memory", "1E"),  # "976562500000000Ki" is exact too, but absurd
        (2 * 10**9, "storage", "2G"),
        (1025, "memory", "1025"),
        (MAX, "memory", str(MAX)),
        (-GI, "memory", "-1Gi"),
        (Decimal("0.5"), "memory", "500m"),  # BinarySI below 1024 is written as DecimalSI
        (5 * 10**9, "memory", "5G"),  # not a multiple of 1024: Kubernetes would read digits
        (64 * 10**9, "storage", "64G"),  # "62500000Ki" is exact too, but longer
        (2000, "memory", "2k"),
        (8, "cpu", "8"),
        (Decimal("0.5"), "cpu", "500m"),
        (Decimal("1.5"), "cpu", "1500m"),
        (Decimal("0.001"), "cpu", "1m"),
        (Decimal("0.25"), "requests.cpu", "250m"),
        (Decimal("1000"), "cpu", "1k"),
        (Decimal("-0.5"), "cpu", "-500m"),
        (Decimal("0.0001"), "cpu", "100u"),
        (0, "cpu", "0"),
        (16, "nvidia.com/gpu", "16"),
        (Decimal("16.000"), "nvidia.com/gpu", "16"),
        (10**6, "pods", "1M"),
        (1000, "nvidia.com/gpu", "1k"),
        (1500, "nvidia.com/gpu", "1500"),
        (16000, "nvidia.com/mig-1g.10gb", "16k"),
        (2 * GI, "count/pods", str(2 * GI)),
        (5, "", "5"),
        (Decimal("0.5"), "", "500m"),
        (Decimal("0.001"), "", "1m"),
        (Decimal("0.000001"), "", "1u"),
        (Decimal("0.000000001"), "", "1n"),
        (Decimal("0.000000123"), "", "123n"),
        (Decimal("1.25"), "", "1250m"),
        (Decimal("0.0005"), "", "500u"),
        (Decimal("12.000000001"), "", "12000000001n"),
        (Decimal(10**18), "", "1E"),
        (Decimal("-0.001"), "", "-1m"),
        (Decimal("1E+3"), "", "1k"),
    ],
)
def test_format_quantity(amount: Decimal | int, resource: str, expected: str) -> None:
    text = format_quantity(amount, resource)
    assert text == expected
    assert parse_quantity(text) == amount


@pytest.mark.parametrize("text", ["500m", "64Gi", "1Ti"])
def test_format_keeps_the_canonical_examples(text: str) -> None:
    resource = "cpu" if text.endswith("m") else "memory"
    assert format_quantity(parse_quantity(text), resource) == text


@pytest.mark.parametrize("amount", [True, 1.5, Decimal("NaN"), Decimal(2**63), Decimal("1E-10")])
def test_format_refuses_what_cannot_round_trip(amount: object) -> None:
    with pytest.raises(QuantityError):
        format_quantity(amount)  # type: ignore[arg-type]


# --- round trips -----------------------------------------------------------------------------

ROUND_TRIP_TEXTS = [
    "0",
    "1",
    "500m",
    "64Gi",
    "1Ti",
    "1.5Gi",
    "1536Mi",
    "100",
    "2e3",
    "1E",
    "1Ei",
    "7Ei",
    "+1",
    ".5",
    "5.",
    "-1",
    "-1.5Gi",
    "250m",
    "100u",
    "1n",
    "123456789n",
    "1.000000001",
    "999Pi",
    "1e-9",
    "3e18",
    "0.5Ki",
    str(MAX),
    "-" + str(MAX),
    "12345.678901234",
]
RESOURCES = ["", "cpu", "memory", "storage", "nvidia.com/gpu", "pods", "example"]


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
@pytest.mark.parametrize("resource", RESOURCES)
def test_round_trip_table(text: str, resource: str) -> None:
    amount = parse_quantity(text)
    formatted = format_quantity(amount, resource)
    assert parse_quantity(formatted) == amount
    assert format_quantity(parse_quantity(formatted), resource) == formatted  # stable


def _generated_amounts() -> list[Decimal]:
    """A few thousand deterministic values: many mantissas at every scale, both signs."""
    amounts = []
    seed = 12345
    for index in range(3000):
        seed = (seed * 1103515245 + 12345) % 2**31  # small linear congruential generator
        mantissa = seed % 10 ** (1 + index % 12)
        places = index % 19 - 9  # 1e-9 .. 1e9
        amount = Decimal(mantissa).scaleb(places)
        if index % 7 == 0:
            amount = Decimal(mantissa * 1024 ** (index % 5))
        if abs(amount) > MAX:
            continue
        amounts.append(-amount if index % 3 == 0 else amount)
    return amounts


GENERATED = _generated_amounts()


def test_generated_values_cover_a_wide_range() -> None:
    assert len(GENERATED) > 2500
    assert any(amount.as_tuple().exponent == -9 for amount in GENERATED)  # type: ignore[operator]
    assert any(abs(amount) > 10**15 for amount in GENERATED)


@pytest.mark.parametrize("resource", RESOURCES)
def test_round_trip_generated_values(resource: str) -> None:
    for amount in GENERATED:
        formatted = format_quantity(amount, resource)
        assert parse_quantity(formatted) == amount, (amount, resource, formatted)
        assert len(formatted) <= 64
        assert format_quantity(parse_quantity(formatted), resource) == formatted


def test_round_trip_every_suffix_and_exponent() -> None:
    suffixes = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
    suffixes += [f"e{exponent}" for exponent in range(-9, 10)]
    checked = 0
    for suffix in suffixes:
        for number in ["0", "1", "3", "7.5", "12", "999", ".25", "4."]:
            try:
                amount = parse_quantity(number + suffix)
            except QuantityError:
                continue  # finer than 1n or above 2^63-1, checked elsewhere
            for resource in RESOURCES:
                assert parse_quantity(format_quantity(amount, resource)) == amount
            checked += 1
    assert checked > 200


def test_parse_resource_amount_round_trips_through_format() -> None:
    for resource, text in [
        ("memory", "1.5Gi"),
        ("cpu", "1500m"),
        ("nvidia.com/gpu", "16"),
        ("requests.storage", "500M"),
        ("cpu", "8"),
    ]:
        amount = parse_resource_amount(resource, text)
        assert parse_resource_amount(resource, format_quantity(amount, resource)) == amount


# --- to_display ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        ("64Gi", "memory", "64 GiB"),
        (64 * GI, "requests.memory", "64 GiB"),
        ("1.5Gi", "memory", "1.5 GiB"),
        ("1Ti", "storage", "1 TiB"),
        ("512Mi", "ephemeral-storage", "512 MiB"),
        ("100", "memory", "100 B"),
        ("0", "memory", "0 B"),
        ("1Ki", "memory", "1 KiB"),
        ("1000", "memory", "1000 B"),
        ("2000", "memory", "1.95 KiB"),
        ("1Ei", "memory", "1 EiB"),
        ("500m", "cpu", "0.5 cores"),
        ("1", "cpu", "1 core"),
        ("8", "limits.cpu", "8 cores"),
        ("1500m", "cpu", "1.5 cores"),
        ("0", "cpu", "0 cores"),
        ("16", "nvidia.com/gpu", "16"),
        (Decimal(4), "pods", "4"),
        ("1k", "", "1000"),
        ("250m", "", "0.25"),
    ],
)
def test_to_display(amount: str | int | Decimal, resource: str, expected: str) -> None:
    assert to_display(amount, resource) == expected


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        ("64000Gi", "memory", "62.5 TiB"),  # a capacity, in the largest unit a person reads
        ("609852613404", "memory", "568 GiB"),  # Kueue's flavorsUsage reports plain bytes
        ("1280Gi", "memory", "1.25 TiB"),
        ("10000Mi", "memory", "9.77 GiB"),
        ("1023Gi", "memory", "1023 GiB"),
        ("1", "nvidia.com/gpu", "1"),
    ],
)
def test_to_display_rounds_to_three_figures_at_most(
    amount: str, resource: str, expected: str
) -> None:
    assert to_display(amount, resource) == expected


def test_to_display_rejects_bad_input() -> None:
    with pytest.raises(QuantityError, match="unknown suffix 'GB'"):
        to_display("12GB", "memory")


# --- module hygiene --------------------------------------------------------------------------


def test_module_uses_only_the_standard_library() -> None:
    tree = ast.parse(Path(quantity.__file__).read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module is not None
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_public_api() -> None:
    assert sorted(quantity.__all__) == [
        "BINARY_SI",
        "DECIMAL_EXPONENT",
        "DECIMAL_SI",
        "QuantityError",
        "QuantityFormat",
        "canonical",
        "counted_text",
        "format_as",
        "format_quantity",
        "parse_nonnegative_quantity",
        "parse_quantity",
        "parse_resource_amount",
        "quantity_format",
        "stored_text",
        "to_display",
    ]


def test_remembered_results_answer_like_the_first_time_and_refusals_still_refuse() -> None:
    assert [format_as(Decimal(64 * GI), BINARY_SI) for _ in range(2)] == ["64Gi", "64Gi"]
    assert format_as(1, BINARY_SI) == "1"  # remembered for 1 ...
    for bad in (True, Decimal("sNaN"), [1]):  # ... and True is not taken for it
        with pytest.raises(QuantityError, match="is not a Kubernetes quantity"):
            format_as(bad, BINARY_SI)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(QuantityError, match="cpu: "):
            parse_quantity("8 cores", field="cpu")
