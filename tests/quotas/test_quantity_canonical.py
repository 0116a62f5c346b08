"""The text Kubernetes writes for a quantity (apimachinery resource.Quantity.String()), and the
refusals that say what Kubernetes would have done instead.

Cases marked "k8s" restate rows of apimachinery's own tests (quantity_test.go:
TestQuantityParseEmit, TestQuantityString, TestQuantityParse, TestQuantityNeg) as behaviour:
input -> what String() prints. The rest are this portal's cases, worked out by the rules in
quantity.go (format kept; largest exponent that keeps an integer mantissa).
"""

from decimal import Decimal

import pytest

from quotas.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    QuantityError,
    QuantityFormat,
    canonical,
    format_as,
    format_quantity,
    parse_quantity,
    parse_resource_amount,
    quantity_format,
    stored_text,
)

KI, MI, GI = 1024, 1024**2, 1024**3
MAX = 2**63 - 1

# --- canonical(text): parse, keep the format, write canonical ----------------------------------

CANONICAL = [
    # k8s TestQuantityParseEmit
    ("1Ki", "1Ki"),
    ("1Mi", "1Mi"),
    ("1Gi", "1Gi"),
    ("1024Mi", "1Gi"),
    ("1000M", "1G"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    # k8s TestQuantityString, alternate spellings -> canonical
    ("307200Ki", "300Mi"),
    ("1025024Mi", "1001Gi"),
    ("1024Gi", "1Ti"),
    ("5000m", "5"),
    ("0.5", "500m"),
    ("0.001T", "1G"),
    ("1000u", "1m"),
    ("1.08", "1080m"),
    ("1080000000n", "1080m"),
    (".001e12", "1e9"),
    ("0.001e0", "1e-3"),
    ("1000e-12", "1e-9"),
    ("00", "0"),
    # k8s TestQuantityString, canonical strings print themselves
    ("6Ki", "6Ki"),
    ("300M", "300M"),
    ("1234567M", "1234567M"),
    ("1234567m", "1234567m"),
    ("1025", "1025"),
    ("80e-3", "80e-3"),
    ("300e6", "300e6"),
    ("1080n", "1080n"),
    ("80u", "80u"),
    ("1E", "1E"),
    # k8s TestQuantityParse values, printed by the same rules
    ("100.035k", "100035"),
    ("0.0005k", "500m"),
    ("1.2e3", "1200"),
    ("1.3E+6", "1300e3"),
    ("5.444T", "5444G"),
    ("40.1T", "40100G"),
    ("2.5P", "2500T"),
    ("100.035Ki", "102435840m"),  # BinarySI with a fraction: DecimalSI, nothing lost
    ("0.5Mi", "512Ki"),
    ("0.05Gi", "53687091200m"),
    (".0001k", "100m"),
    ("1.", "1"),
    ("1.G", "1G"),
    # the brief's and the portal's own
    ("1000", "1k"),
    ("5000000000", "5G"),
    ("1536", "1536"),  # DecimalSI: no factor of 10 to move into a suffix
    ("1.5Ki", "1536"),  # BinarySI, not a whole multiple of 1024: plain digits
    ("1.5Gi", "1536Mi"),
    ("64Mi", "64Mi"),
    ("65536Ki", "64Mi"),
    ("0.5Ki", "512"),  # BinarySI below 1024: written as DecimalSI
    ("1000Ki", "1000Ki"),
    ("2000", "2k"),
    ("16", "16"),
    ("1500m", "1500m"),
    ("1.5", "1500m"),
    ("100m", "100m"),
    ("0.1", "100m"),
    ("1e3", "1e3"),  # DecimalExponent stays one
    ("1e4", "10e3"),
    ("1.5e-3", "1500e-6"),
    ("2E0", "2"),
    ("1e18", "1e18"),
    ("1000P", "1E"),
    ("-1000", "-1k"),
    ("+1Gi", "1Gi"),
    ("007", "7"),
    ("-0", "0"),
    ("0Gi", "0"),
    (str(MAX), str(MAX)),
    ("8191Pi", "8191Pi"),
]


@pytest.mark.parametrize(("text", "expected"), CANONICAL)
def test_canonical_text_is_what_kubernetes_prints(text: str, expected: str) -> None:
    assert canonical(text) == expected
    assert parse_quantity(expected) == parse_quantity(text)  # nothing lost
    assert canonical(expected) == expected  # and it is a fixed point


@pytest.mark.parametrize(
    "text",
    ["1Ki", "1024Mi", "1000M", ".001Ki", "1.08", "1.5Gi", "1000", "1e4"],
)
def test_negatives_print_with_a_minus_and_the_same_digits(text: str) -> None:
    """k8s TestQuantityParseEmit runs every row negated too."""
    assert canonical("-" + text) == "-" + canonical(text)


@pytest.mark.parametrize(
    ("value", "expected"), [(1000, "1k"), (16, "16"), (Decimal("0.25"), "250m")]
)
def test_numbers_are_decimal_si(value: int | Decimal, expected: str) -> None:
    """A JSON number reaches Kubernetes as plain digits: DecimalSI."""
    assert canonical(value) == expected


# --- format_as: a value in a given format --------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "fmt", "expected"),
    [
        # k8s TestQuantityString: decQuantity(...) in a format -> String()
        (GI, BINARY_SI, "1Gi"),
        (300 * MI, BINARY_SI, "300Mi"),
        (1001 * GI, BINARY_SI, "1001Gi"),
        (5, BINARY_SI, "5"),
        (Decimal("0.5"), BINARY_SI, "500m"),
        (Decimal("1234.567"), BINARY_SI, "1234567m"),
        (1025, BINARY_SI, "1025"),
        (0, BINARY_SI, "0"),
        (10**9, DECIMAL_SI, "1G"),
        (3000, DECIMAL_SI, "3k"),
        (Decimal("0.08"), DECIMAL_SI, "80m"),
        (Decimal("0.000000001"), DECIMAL_SI, "1n"),
        (10**9, DECIMAL_EXPONENT, "1e9"),
        (Decimal("0.001"), DECIMAL_EXPONENT, "1e-3"),
        (Decimal("0.08"), DECIMAL_EXPONENT, "80e-3"),
        (3000, DECIMAL_EXPONENT, "3e3"),
        (0, DECIMAL_EXPONENT, "0"),
        # k8s TestBinarySIZeroExponentString, TestQuantityNeg
        (2000, BINARY_SI, "2000"),
        (-2000, BINARY_SI, "-2000"),
        (Decimal("-9.01"), DECIMAL_SI, "-9010m"),
        # the portal's
        (1023, BINARY_SI, "1023"),
        (-GI, BINARY_SI, "-1Gi"),
        (5 * 10**9, BINARY_SI, "5000000000"),
        (5 * 10**9, DECIMAL_SI, "5G"),
        (7 * 1024**6, BINARY_SI, "7Ei"),
        (MAX, BINARY_SI, str(MAX)),
        (9 * 10**18, DECIMAL_SI, "9E"),
        (Decimal("1.5"), DECIMAL_EXPONENT, "1500e-3"),
        (Decimal("123.456789"), DECIMAL_SI, "123456789u"),
    ],
)
def test_format_as(amount: Decimal | int, fmt: QuantityFormat, expected: str) -> None:
    assert format_as(amount, fmt) == expected
    assert parse_quantity(expected) == amount


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("1Gi", BINARY_SI),
        ("0.5Ki", BINARY_SI),
        (".5Ki", BINARY_SI),
        ("0.0005Ki", DECIMAL_SI),  # BinarySI between -1 and 1 becomes DecimalSI (ParseQuantity)
        ("1e3", DECIMAL_EXPONENT),
        ("1E3", DECIMAL_EXPONENT),
        ("1E", DECIMAL_SI),  # exa, not an exponent
        ("16", DECIMAL_SI),
        ("500m", DECIMAL_SI),
    ],
)
def test_quantity_format_follows_the_suffix(text: str, fmt: QuantityFormat) -> None:
    assert quantity_format(text) == fmt


# --- stored_text: what an API server keeps --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # ParseQuantity keeps the input when its fast path thinks it canonical; that misses a
        # sign and a fraction of 3n digits (kubernetes/kubernetes#138165, pinned upstream).
        ("+1", "+1"),
        ("1.500", "1.500"),
        ("1.001", "1.001"),
        ("1.000001", "1.000001"),
        ("1.441k", "1.441k"),
        ("+1Gi", "+1Gi"),
        ("007", "007"),  # leading zeros are dropped before the check, kept in the text
        ("01Gi", "01Gi"),
        # and re-emits everything else canonically
        ("1.000", "1"),
        ("1024Mi", "1Gi"),  # low bits all zero: not kept
        ("1000", "1k"),  # ends in 000: not kept
        ("0.5", "500m"),  # starts with 0: not kept
        ("1.5", "1500m"),  # scale -1: not kept
        ("1.5Gi", "1536Mi"),  # fraction in BinarySI: slow path
        ("3Mi", "3Mi"),
        ("1e4", "10e3"),
        ("-0", "0"),
        ("0", "0"),
    ],
)
def test_stored_text(text: str, expected: str) -> None:
    assert stored_text(text) == expected


# --- format_quantity: what the compiler writes is what Kubernetes stores ------------------------


def _amounts() -> list[Decimal]:
    amounts = []
    for mantissa in (1, 3, 5, 8, 15, 16, 64, 125, 999, 1000, 1024, 1536, 4096, 65536, 123456789):
        for power in range(0, 13):
            amounts.append(Decimal(mantissa * 10**power))
            amounts.append(Decimal(mantissa * 1024**power) if power <= 5 else Decimal(mantissa))
        for places in range(1, 10):
            amounts.append(Decimal(mantissa).scaleb(-places))
    return [a for a in amounts if abs(a) <= MAX and a == a.quantize(Decimal("1E-9"))]


@pytest.mark.parametrize("resource", ["memory", "requests.storage", "cpu", "nvidia.com/gpu", ""])
def test_format_quantity_is_a_fixed_point_of_kubernetes(resource: str) -> None:
    """Sent to Kubernetes, what format_quantity writes comes back unchanged."""
    for amount in _amounts():
        text = format_quantity(amount, resource)
        assert parse_quantity(text) == amount, (amount, text)
        assert canonical(text) == text, (amount, resource, text)
        assert stored_text(text) == text, (amount, resource, text)


@pytest.mark.parametrize(
    ("amount", "resource", "expected"),
    [
        (1000, "nvidia.com/gpu", "1k"),
        (Decimal("0.5"), "requests.cpu", "500m"),
        (1000, "requests.cpu", "1k"),
        (64 * GI, "requests.memory", "64Gi"),
        (5 * 10**9, "requests.memory", "5G"),
        (1536, "requests.memory", "1536"),
        (1000 * KI, "requests.storage", "1000Ki"),
        (110, "pods", "110"),
        (4000, "pods", "4k"),
    ],
)
def test_compiler_amounts(amount: Decimal | int, resource: str, expected: str) -> None:
    assert format_quantity(amount, resource) == expected


# --- refusals say what Kubernetes would do --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "8Ei",
            "memory: '8Ei' is not a Kubernetes quantity: it is larger than 2^63-1 "
            "(9223372036854775807); Kubernetes caps a binary-suffixed quantity there, so it "
            "would silently store 9223372036854775807 instead",
        ),
        (
            "10E",
            "memory: '10E' is not a Kubernetes quantity: it is larger than 2^63-1 "
            "(9223372036854775807); Kubernetes would store this decimal value as written, but "
            "its 64-bit accessors (Value(), MilliValue()) overflow on it",
        ),
        (
            "1e19",
            "memory: '1e19' is not a Kubernetes quantity: it is larger than 2^63-1 "
            "(9223372036854775807); Kubernetes would store this decimal value as written, but "
            "its 64-bit accessors (Value(), MilliValue()) overflow on it",
        ),
    ],
)
def test_too_large_says_what_kubernetes_does_with_that_form(text: str, expected: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount("memory", text)
    assert str(raised.value) == expected


@pytest.mark.parametrize(
    ("text", "rounded"),
    [
        ("0.5n", "1n"),
        ("3.001n", "4n"),  # k8s TestQuantityParse: "3.001n" -> 4n
        ("0.00000012345", "124n"),  # k8s: 124n
        ("0.000000000001Ki", "2n"),  # k8s TestQuantityParseEmit: 2n
        ("1.1E-9", "2e-9"),  # k8s: DecimalExponent, 2e-9
        ("0.5e-9", "1e-9"),
        ("1e-99999999999999999999", "1e-9"),
    ],
)
def test_too_fine_says_what_kubernetes_rounds_it_to(text: str, rounded: str) -> None:
    with pytest.raises(QuantityError) as raised:
        parse_quantity(text, field="spec.hard.requests.cpu")
    assert str(raised.value) == (
        f"spec.hard.requests.cpu: {text!r} is not a Kubernetes quantity: it is finer than 1n "
        f"(0.000000001); Kubernetes would round it up to {rounded}"
    )


def test_a_negative_too_fine_value_rounds_away_from_zero() -> None:
    with pytest.raises(QuantityError, match="round it away from zero to -124n"):
        parse_quantity("-0.00000012345")


def test_cpu_finer_than_a_millicore_says_what_it_becomes() -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount("requests.cpu", "1500u")
    assert str(raised.value) == (
        "requests.cpu must be a multiple of 1m (a thousandth of a core), got 1500u; Kubernetes "
        "counts cpu in whole millicores (MilliValue()) and would round it up to 2m"
    )


def test_syntax_errors_name_the_resource() -> None:
    with pytest.raises(QuantityError) as raised:
        parse_resource_amount("limits.memory", "12GB")
    assert str(raised.value) == (
        "limits.memory: '12GB' is not a Kubernetes quantity: unknown suffix 'GB' (use Gi or G)"
    )


def test_canonical_refuses_with_the_field_name() -> None:
    with pytest.raises(QuantityError, match=r"^nominalQuota: '9Ei' .*caps a binary-suffixed"):
        canonical("9Ei", field="nominalQuota")
