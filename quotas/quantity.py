"""Kubernetes resource quantities ("500m", "64Gi", "2e3") as exact Decimals, and the text
Kubernetes writes for them.

Pure standard library so it can be imported without Django. The accepted syntax is the
Kubernetes grammar::

    <quantity> ::= <signedNumber><suffix>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E
                 | e<signedInteger> | E<signedInteger>

The suffix also picks the quantity's *format*, which Kubernetes keeps and writes back in
(apimachinery ``resource.Quantity``): BinarySI (Ki..Ei), DecimalExponent (e3) or DecimalSI
(everything else). ``format_as`` writes a value in a format exactly as ``Quantity.String()``
does; ``canonical`` is that for a parsed string ("1000" -> "1k", "1024Mi" -> "1Gi").

Two things Kubernetes does silently are refused here instead, since they would change a quota
behind the user's back: a value finer than 1n is rounded up to the next nano, and a value
above 2^63-1 is capped there when it has a binary suffix (a decimal one is kept, but its
64-bit accessors such as ``Value()`` overflow).
"""

import re
from decimal import ROUND_HALF_UP, ROUND_UP, Context, Decimal, Inexact, InvalidOperation, Overflow
from functools import lru_cache
from typing import Final, Literal

__all__ = [
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

QuantityFormat = Literal["DecimalSI", "BinarySI", "DecimalExponent"]
DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

MAX_LENGTH: Final = 64
MAX_VALUE: Final = Decimal(2**63 - 1)
_NANO_PLACES: Final = 9
_NANO: Final = Decimal("1E-9")

_BINARY_SI: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_BINARY_SUFFIX: Final = {power: suffix for suffix, power in _BINARY_SI.items()} | {0: ""}
_DECIMAL_SI: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_SUFFIX: Final = {exponent: suffix for suffix, exponent in _DECIMAL_SI.items()}
_NUMBER_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_EXPONENT_RE: Final = re.compile(r"[eE]([+-]?[0-9]+)")
# Wide enough for 64 digits times 1024**6, with every rounding trapped: arithmetic stays exact.
_CTX: Final = Context(prec=120, traps=[Inexact, InvalidOperation, Overflow])
_ROUNDING: Final = Context(prec=120, rounding=ROUND_UP, traps=[InvalidOperation, Overflow])
_OBJECT_COUNTS: Final = frozenset(
    {
        "pods",
        "persistentvolumeclaims",
        "jobs",
        "services",
        "secrets",
        "configmaps",
        "replicationcontrollers",
        "resourcequotas",
        "services.loadbalancers",
        "services.nodeports",
    }
)

_Kind = Literal["cpu", "bytes", "count", "percent", "other"]


class QuantityError(ValueError):
    """A value that is not a valid (or not an acceptable) Kubernetes quantity."""


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= MAX_LENGTH else value[:20] + "...")
    return str(value)


def _bad(value: object, reason: str, field: str | None = None) -> QuantityError:
    where = f"{field}: " if field else ""
    return QuantityError(f"{where}{_shown(value)} is not a Kubernetes quantity: {reason}")


def _suffix_hint(suffix: str) -> str:
    head, rest = suffix[:1].upper(), suffix[1:].lower()
    if head and head in "KMGTPE" and rest in {"", "b", "i", "ib"}:
        return f"use {head}i or {'k' if head == 'K' else head}"
    return "valid suffixes are Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent such as e3"


def _decimal_places(value: Decimal) -> int:
    """Digits after the point that are not trailing zeros (0 for whole numbers)."""
    _, digits, exponent = value.as_tuple()
    if value == 0 or not isinstance(exponent, int):  # zero, or not finite (checked elsewhere)
        return 0
    trailing = len(digits) - len("".join(map(str, digits)).rstrip("0"))
    return max(0, -(exponent + trailing))


def _too_large(fmt: QuantityFormat) -> str:
    """What Kubernetes does with a value above 2^63-1 in this format (ParseQuantity)."""
    if fmt == BINARY_SI:
        return (
            f"it is larger than 2^63-1 ({MAX_VALUE}); Kubernetes caps a binary-suffixed "
            f"quantity there, so it would silently store {MAX_VALUE} instead"
        )
    return (
        f"it is larger than 2^63-1 ({MAX_VALUE}); Kubernetes would store this decimal value "
        "as written, but its 64-bit accessors (Value(), MilliValue()) overflow on it"
    )


def _too_fine(value: Decimal, fmt: QuantityFormat) -> str:
    """What Kubernetes does with a value finer than 1n: it rounds it up, away from zero."""
    if value.adjusted() < -_NANO_PLACES:
        rounded = _NANO.copy_sign(value)
    else:
        rounded = value.quantize(_NANO, context=_ROUNDING)
    direction = "up" if value > 0 else "away from zero"
    return (
        f"it is finer than 1n (0.000000001); Kubernetes would round it {direction} to "
        f"{format_as(rounded, fmt)}"
    )


def _checked(
    value: Decimal, original: object, fmt: QuantityFormat = DECIMAL_SI, field: str | None = None
) -> Decimal:
    """Refuse what Kubernetes would cap or round; return a canonical Decimal."""
    if not value.is_finite():
        raise _bad(original, "NaN and Infinity are not quantities", field)
    if abs(value) > MAX_VALUE:
        raise _bad(original, _too_large(fmt), field)
    if _decimal_places(value) > _NANO_PLACES:
        raise _bad(original, _too_fine(value, fmt), field)
    if value == 0:
        return Decimal(0)
    value = value.normalize(_CTX)  # "1.50" -> "1.5", but "64000" -> "6.4E+4", so:
    return value.quantize(Decimal(1), context=_CTX) if _decimal_places(value) == 0 else value


# Pages and the API parse and write the same few quantities over and over ("8", "64Gi"): the
# results (immutable) are remembered. A refusal raises, and is not remembered.
@lru_cache(maxsize=4096)
def _parse_text(text: str, field: str | None) -> tuple[Decimal, QuantityFormat]:
    if not text:
        raise _bad(text, "it is empty", field)
    if len(text) > MAX_LENGTH:
        raise _bad(text, f"it is {len(text)} characters long (at most {MAX_LENGTH})", field)
    if any(char.isspace() for char in text):
        raise _bad(text, "it contains whitespace", field)
    if not text.isascii():
        raise _bad(text, "it contains non-ASCII characters (digits must be 0-9)", field)
    match = _NUMBER_RE.match(text)
    if match is None:
        raise _bad(text, "it must start with a number, as in '500m' or '64Gi'", field)
    mantissa, suffix = Decimal(match.group()), text[match.end() :]
    fmt: QuantityFormat
    if suffix in _DECIMAL_SI:
        exponent, factor, fmt = _DECIMAL_SI[suffix], 1, DECIMAL_SI
    elif suffix in _BINARY_SI:
        exponent, factor, fmt = 0, 1024 ** _BINARY_SI[suffix], BINARY_SI
    elif exponent_match := _EXPONENT_RE.fullmatch(suffix):
        exponent, factor, fmt = int(exponent_match.group(1)), 1, DECIMAL_EXPONENT
    elif suffix.startswith("."):
        raise _bad(text, "it has more than one decimal point", field)
    elif suffix[:1] in ("e", "E") and suffix[1:2] in ("", "+", "-", ".", *"0123456789"):
        raise _bad(
            text,
            f"bad exponent {suffix!r}: e or E must be followed by a whole number, as in '2e3'",
            field,
        )
    else:
        raise _bad(text, f"unknown suffix {suffix!r} ({_suffix_hint(suffix)})", field)
    mantissa = _CTX.multiply(mantissa, Decimal(factor))  # at most 64 digits times 1024**6
    if mantissa != 0:
        magnitude = mantissa.adjusted() + exponent
        if magnitude > MAX_VALUE.adjusted():
            raise _bad(text, _too_large(fmt), field)
        if magnitude < -_NANO_PLACES:  # too small to scale by exponent exactly: it is tiny
            raise _bad(text, _too_fine(_NANO.copy_sign(mantissa) / 10, fmt), field)
        mantissa = mantissa.scaleb(exponent, _CTX)
    return _checked(mantissa, text, fmt, field), fmt


def parse_quantity(value: str | int | Decimal, *, field: str | None = None) -> Decimal:
    """Parse a Kubernetes quantity exactly; negative values are valid syntax and accepted.
    ``field`` names the value in error messages."""
    if isinstance(value, bool):
        raise _bad(value, "booleans are not quantities", field)
    if isinstance(value, float):
        raise _bad(value, "floats are inexact; pass a string such as '0.5' or a Decimal", field)
    if isinstance(value, str):
        return _parse_text(value, field)[0]
    if isinstance(value, int):
        return _checked(Decimal(value), value, DECIMAL_SI, field)
    if isinstance(value, Decimal):
        return _checked(value, value, DECIMAL_SI, field)
    raise _bad(value, f"expected a string, int or Decimal, got {type(value).__name__}", field)


def quantity_format(text: str) -> QuantityFormat:
    """The format Kubernetes gives a parsed quantity string: BinarySI for Ki..Ei (DecimalSI
    when the value lies strictly between -1 and 1), DecimalExponent for e3/E3, else DecimalSI."""
    amount, fmt = _parse_text(text, None)
    return DECIMAL_SI if fmt == BINARY_SI and 0 < abs(amount) < 1 else fmt


def parse_nonnegative_quantity(value: str | int | Decimal, *, field: str = "value") -> Decimal:
    """Like parse_quantity, but a negative amount is refused."""
    amount = parse_quantity(value, field=field)
    if amount < 0:
        shown = value if isinstance(value, str) else str(value)
        raise QuantityError(f"{field}: {shown} is negative: a quota cannot be below 0")
    return amount


def _kind(resource: str) -> _Kind:
    name = resource.removeprefix("requests.").removeprefix("limits.")
    if name == "cpu":
        return "cpu"
    if name == "memory" or name.endswith("storage") or name.startswith("hugepages-"):
        return "bytes"
    if name == "nvidia.com/gpumem":  # HAMi's GPU memory: stored in bytes, pushed in MiB
        return "bytes"
    if name == "nvidia.com/gpucores":  # HAMi's compute: percent points of one GPU
        return "percent"
    if name in _OBJECT_COUNTS or name.startswith("count/"):
        return "count"
    if "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io"):
        return "count"  # extended resources (nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...)
    return "other"


def parse_resource_amount(resource: str, value: str | int | Decimal) -> Decimal:
    """Parse a quota amount for one resource, enforcing what that resource can hold."""
    amount = parse_nonnegative_quantity(value, field=resource)
    shown = value if isinstance(value, str) else str(value)
    kind, places = _kind(resource), _decimal_places(amount)
    if kind == "count" and places:
        raise QuantityError(f"{resource} must be a whole number, got {shown}")
    if kind == "percent" and places:
        raise QuantityError(f"{resource} must be a whole number of percent of a GPU, got {shown}")
    if kind == "bytes" and places:
        raise QuantityError(f"{resource} must be a whole number of bytes, got {shown}")
    if kind == "cpu" and places > 3:
        millicores = amount.quantize(Decimal("0.001"), context=_ROUNDING)
        raise QuantityError(
            f"{resource} must be a multiple of 1m (a thousandth of a core), got {shown}; "
            "Kubernetes counts cpu in whole millicores (MilliValue()) and would round it up "
            f"to {format_as(millicores, DECIMAL_SI)}"
        )
    return amount


# --- writing: what resource.Quantity.String() writes ------------------------------------------


def _base10(value: Decimal) -> tuple[int, int]:
    """value (non-zero, positive) as mantissa * 10**exponent with an integer mantissa and the
    largest exponent that is a multiple of 3 (AsCanonicalBytes)."""
    _, digits, exponent = value.normalize(_CTX).as_tuple()
    assert isinstance(exponent, int)  # finite: checked by parse_quantity
    mantissa, shift = int("".join(map(str, digits))), exponent % 3
    return mantissa * 10**shift, exponent - shift


def _base1024(count: int) -> tuple[int, int]:
    """count (positive) as mantissa * 1024**power with the largest power
    (AsCanonicalBase1024Bytes)."""
    power = 0
    while count % 1024 == 0:
        count, power = count // 1024, power + 1
    return count, power


def format_as(amount: Decimal | int, fmt: QuantityFormat) -> str:
    """The text Kubernetes' ``Quantity.String()`` writes for amount held in format fmt.

    No precision is lost and no fraction is written: the suffix is the largest one that leaves
    a whole mantissa. DecimalSI uses n u m "" k M G T P E ("1k", "1500m"), DecimalExponent uses
    e<multiple of 3> ("1e3", "1500e-3"), BinarySI uses Ki..Ei ("1Gi", "1536Mi"); a BinarySI value
    below 1024 in magnitude or with a fraction is written as DecimalSI ("512", "500m"), and
    one that is not a whole multiple of 1024 in plain digits ("1025", "5000000000")."""
    try:
        return _format_remembered(amount, fmt)
    except TypeError:  # not hashable (a list, a signalling NaN): refused below, as before
        return _format(amount, fmt)


@lru_cache(maxsize=4096, typed=True)  # typed: True is refused, not taken for 1
def _format_remembered(amount: Decimal | int, fmt: QuantityFormat) -> str:
    return _format(amount, fmt)


def _format(amount: Decimal | int, fmt: QuantityFormat) -> str:
    value = parse_quantity(amount)
    if value == 0:
        return "0"
    sign, value = ("-" if value < 0 else ""), abs(value)
    if fmt == BINARY_SI:
        if value >= 1024 and _decimal_places(value) == 0:
            mantissa, power = _base1024(int(value))
            return f"{sign}{mantissa}{_BINARY_SUFFIX[power]}"
        fmt = DECIMAL_SI
    mantissa, exponent = _base10(value)
    if fmt == DECIMAL_SI:  # within 1n .. 2^63-1 the exponent is one of the suffixes
        return f"{sign}{mantissa}{_DECIMAL_SUFFIX[exponent]}"
    return f"{sign}{mantissa}{f'e{exponent}' if exponent else ''}"


def canonical(value: str | int | Decimal, *, field: str | None = None) -> str:
    """The canonical text of a quantity in the format it was written in, as Kubernetes
    re-emits it: "1000" -> "1k", "1024Mi" -> "1Gi", "0.5" -> "500m", "1e3" -> "1e3". An int or
    Decimal is a plain number (DecimalSI). Refuses what ``parse_quantity`` refuses."""
    if isinstance(value, str):
        amount, fmt = _parse_text(value, field)
        return format_as(amount, fmt)
    return format_as(parse_quantity(value, field=field), DECIMAL_SI)


_FAST_DIGITS: Final = 18  # apimachinery's maxInt64Factors


def _kept_as_written(text: str) -> bool:
    """Whether ``ParseQuantity`` keeps ``text`` itself as the string it later writes.

    Its fast path takes a small integer mantissa and keeps the input when it judges it
    canonical: for BinarySI an integer of at most a few digits whose low three bits are not
    all zero ("3Mi", but not "1024Mi"); for the decimal formats a scale that is a multiple of 3,
    digits not ending in "000" and not starting with 0 (once leading zeros are dropped). That
    check misses a sign ("+1"), leading zeros ("007", "01Gi") and a fraction of 3, 6 or 9
    digits ("1.500", kubernetes/kubernetes#138165), which are then kept as written."""
    if text == "0":
        return True
    match = _NUMBER_RE.match(text)
    if match is None:
        return False
    number, suffix = match.group().lstrip("+-"), text[match.end() :]
    whole, _, fraction = number.partition(".")
    whole = whole.lstrip("0") or "0"
    if suffix in _BINARY_SI:
        power = 10 * _BINARY_SI[suffix]
        if fraction or 15 - len(whole) - power * 3 // 10 - 1 < 0:
            return False
        return (int(whole) << power) <= MAX_VALUE and int(whole) & 0x07 != 0
    if suffix in _DECIMAL_SI:
        exponent = _DECIMAL_SI[suffix]
    elif exponent_match := _EXPONENT_RE.fullmatch(suffix):
        exponent = int(exponent_match.group(1))
    else:
        return False
    shifted, scale = whole + fraction, exponent - len(fraction)
    if _FAST_DIGITS - len(shifted) < 0 or scale < -_NANO_PLACES:
        return False
    return scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


def stored_text(value: str | int | Decimal, *, field: str | None = None) -> str:
    """The text a Kubernetes API server stores and ``kubectl get`` shows for a quantity sent
    as value: ``canonical``, except where ``ParseQuantity`` keeps the text as written
    ("+1", "1.500"; see ``_kept_as_written``)."""
    text = canonical(value, field=field)
    if isinstance(value, str) and _kept_as_written(value):
        return value
    return text


def format_quantity(amount: Decimal | int, resource: str = "") -> str:
    """The text the portal sends Kubernetes for amount of resource (base units), and what
    Kubernetes stores and shows for it (a fixed point of ``canonical``).

    Counts, cpu and other resources are DecimalSI ("16", "1k", "500m"). Bytes are BinarySI
    where a binary suffix is exact ("64Gi", "1000Ki"), unless the DecimalSI mantissa is the
    rounder number, with fewer significant digits ("64G" rather than "62500000Ki", "1E" rather
    than "976562500000000Ki"); otherwise DecimalSI ("1k", "5G", "1025"), because Kubernetes
    reads plain digits back as DecimalSI. parse_quantity gives amount back."""
    value = parse_quantity(amount)
    decimal = format_as(value, DECIMAL_SI)
    if _kind(resource) == "bytes":
        binary = format_as(value, BINARY_SI)
        if binary.endswith("i") and _significant(binary) <= _significant(decimal):
            return binary
    return decimal


def _significant(text: str) -> int:
    """Significant digits of a written mantissa: "1000Ki" -> 1, "1024k" -> 4."""
    return len(text.lstrip("-").rstrip("EPTGMkmunKi").rstrip("0"))


def _plain(value: Decimal) -> str:
    return format(value, "f") if _decimal_places(value) else str(int(value))


def _rounded_for_people(value: Decimal) -> Decimal:
    """Three significant figures at most, and never more than two decimals: 567.97 -> 568,
    62.5 -> 62.5, 9.765 -> 9.77 (a whole number above 100 stays whole: 1023)."""
    places = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def to_display(amount: str | int | Decimal, resource: str) -> str:
    """Human text for pages: '64 GiB', '62.5 TiB', '0.5 cores', '16'. Bytes are shown in the
    largest binary unit that leaves at least 1, to three significant figures at most; cpu in
    cores; counts (GPUs, pods) as the number itself."""
    value = parse_quantity(amount)
    kind = _kind(resource)
    if kind == "cpu":
        return f"{_plain(value)} {'core' if value == 1 else 'cores'}"
    if kind == "percent":
        return f"{_plain(value)}% of a GPU"
    if kind != "bytes":
        return _plain(value)
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    power = 0
    while power < len(units) - 1 and abs(value) >= 1024 ** (power + 1):
        power += 1
    shown = _rounded_for_people(value / Decimal(1024**power))
    if abs(shown) >= 1024 and power < len(units) - 1:  # 1023.7 GiB reads as 1 TiB, not 1024 GiB
        power += 1
        shown = _rounded_for_people(value / Decimal(1024**power))
    return f"{_plain(_checked(shown, shown))} {units[power]}"


def counted_text(count: int | Decimal, word: str) -> str:
    """A whole count and its unit word, singular or plural: "1 GPU", "2 GPUs", "0 pods"."""
    number = _plain(parse_quantity(count))
    return f"{number} {word if number == '1' else word + 's'}"
