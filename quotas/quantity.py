"""Kubernetes resource quantities ("500m", "64Gi", "2e3") as exact Decimals.

Pure standard library so it can be imported without Django. The accepted syntax is the
Kubernetes grammar::

    <quantity> ::= <signedNumber><suffix>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E
                 | e<signedInteger> | E<signedInteger>

Kubernetes silently caps values above 2**63-1 and rounds values finer than 1n up; both would
change a quota behind the user's back, so they are refused here instead.
"""

import re
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow
from typing import Final, Literal

__all__ = [
    "QuantityError",
    "format_quantity",
    "parse_nonnegative_quantity",
    "parse_quantity",
    "parse_resource_amount",
    "to_display",
]

MAX_LENGTH: Final = 64
MAX_VALUE: Final = Decimal(2**63 - 1)
_NANO_PLACES: Final = 9

_BINARY_SI: Final = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
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
_NUMBER_RE: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_EXPONENT_RE: Final = re.compile(r"[eE]([+-]?[0-9]+)")
# Wide enough for 64 digits times 1024**6, with every rounding trapped: arithmetic stays exact.
_CTX: Final = Context(prec=120, traps=[Inexact, InvalidOperation, Overflow])
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

_Kind = Literal["cpu", "bytes", "count", "other"]


class QuantityError(ValueError):
    """A value that is not a valid (or not an acceptable) Kubernetes quantity."""


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value if len(value) <= MAX_LENGTH else value[:20] + "...")
    return str(value)


def _bad(value: object, reason: str) -> QuantityError:
    return QuantityError(f"{_shown(value)} is not a Kubernetes quantity: {reason}")


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


def _checked(value: Decimal, original: object) -> Decimal:
    """Refuse what Kubernetes would cap or round; return a canonical Decimal."""
    if not value.is_finite():
        raise _bad(original, "NaN and Infinity are not quantities")
    if abs(value) > MAX_VALUE:
        raise _bad(original, "it is larger than 2^63-1, where Kubernetes caps quantities")
    if _decimal_places(value) > _NANO_PLACES:
        raise _bad(original, "it is finer than 1n (0.000000001); Kubernetes would round it up")
    if value == 0:
        return Decimal(0)
    value = value.normalize(_CTX)  # "1.50" -> "1.5", but "64000" -> "6.4E+4", so:
    return value.quantize(Decimal(1), context=_CTX) if _decimal_places(value) == 0 else value


def _parse_text(text: str) -> Decimal:
    if not text:
        raise _bad(text, "it is empty")
    if len(text) > MAX_LENGTH:
        raise _bad(text, f"it is {len(text)} characters long (at most {MAX_LENGTH})")
    if any(char.isspace() for char in text):
        raise _bad(text, "it contains whitespace")
    if not text.isascii():
        raise _bad(text, "it contains non-ASCII characters (digits must be 0-9)")
    match = _NUMBER_RE.match(text)
    if match is None:
        raise _bad(text, "it must start with a number, as in '500m' or '64Gi'")
    mantissa, suffix = Decimal(match.group()), text[match.end() :]
    if suffix in _DECIMAL_SI:
        exponent, factor = _DECIMAL_SI[suffix], 1
    elif suffix in _BINARY_SI:
        exponent, factor = 0, 1024 ** _BINARY_SI[suffix]
    elif exponent_match := _EXPONENT_RE.fullmatch(suffix):
        exponent, factor = int(exponent_match.group(1)), 1
    elif suffix.startswith("."):
        raise _bad(text, "it has more than one decimal point")
    elif suffix[:1] in ("e", "E") and suffix[1:2] in ("", "+", "-", ".", *"0123456789"):
        raise _bad(
            text, f"bad exponent {suffix!r}: e or E must be followed by a whole number, as in '2e3'"
        )
    else:
        raise _bad(text, f"unknown suffix {suffix!r} ({_suffix_hint(suffix)})")
    if mantissa != 0:
        magnitude = mantissa.adjusted() + exponent
        if magnitude > MAX_VALUE.adjusted():
            raise _bad(text, "it is larger than 2^63-1, where Kubernetes caps quantities")
        if magnitude < -_NANO_PLACES:
            raise _bad(text, "it is finer than 1n (0.000000001); Kubernetes would round it up")
        mantissa = _CTX.multiply(mantissa.scaleb(exponent, _CTX), Decimal(factor))
    return _checked(mantissa, text)


def parse_quantity(value: str | int | Decimal) -> Decimal:
    """Parse a Kubernetes quantity exactly; negative values are valid syntax and accepted."""
    if isinstance(value, bool):
        raise _bad(value, "booleans are not quantities")
    if isinstance(value, float):
        raise _bad(value, "floats are inexact; pass a string such as '0.5' or a Decimal")
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, int):
        return _checked(Decimal(value), value)
    if isinstance(value, Decimal):
        return _checked(value, value)
    raise _bad(value, f"expected a string, int or Decimal, got {type(value).__name__}")


def parse_nonnegative_quantity(value: str | int | Decimal, *, field: str = "value") -> Decimal:
    """Like parse_quantity, but a negative amount is refused."""
    amount = parse_quantity(value)
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
    if kind == "bytes" and places:
        raise QuantityError(f"{resource} must be a whole number of bytes, got {shown}")
    if kind == "cpu" and places > 3:
        raise QuantityError(
            f"{resource} must be a multiple of 1m (a thousandth of a core), got {shown}; "
            "Kubernetes would round it up"
        )
    return amount


def _scaled(amount: Decimal, places: int, suffix: str) -> str | None:
    scaled = amount.scaleb(places, _CTX)
    return f"{int(scaled)}{suffix}" if _decimal_places(scaled) == 0 else None


def _largest_exact(count: int, units: dict[str, int]) -> str:
    for suffix, unit in sorted(units.items(), key=lambda item: -item[1]):
        if count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)


def _format_bytes(count: int) -> str:
    """Largest exact binary suffix; a decimal one only where it is shorter (10**18 -> '1E')."""
    binary = _largest_exact(count, {suffix: 1024**power for suffix, power in _BINARY_SI.items()})
    decimal = _largest_exact(count, {s: 10**p for s, p in _DECIMAL_SI.items() if p > 0})
    return decimal if len(decimal) < len(binary) else binary


def format_quantity(amount: Decimal | int, resource: str = "") -> str:
    """Canonical Kubernetes text for amount; parse_quantity gives the same value back."""
    value = parse_quantity(amount)
    if value == 0:
        return "0"
    sign, value = ("-" if value < 0 else ""), abs(value)
    kind, whole = _kind(resource), _decimal_places(value) == 0
    if whole and kind == "bytes":
        return sign + _format_bytes(int(value))
    if whole:
        return sign + str(int(value))
    if kind == "cpu" and (millicores := _scaled(value, 3, "m")):
        return sign + millicores
    suffixed = (_scaled(value, places, suffix) for places, suffix in ((3, "m"), (6, "u"), (9, "n")))
    candidates = [format(value, "f"), *(text for text in suffixed if text)]
    return sign + min(candidates, key=len)


def _plain(value: Decimal) -> str:
    return format(value, "f") if _decimal_places(value) else str(int(value))


def to_display(amount: str | int | Decimal, resource: str) -> str:
    """Human text for pages: '64 GiB', '0.5 cores', '16'."""
    value = parse_quantity(amount)
    kind = _kind(resource)
    if kind == "cpu":
        return f"{_plain(value)} {'core' if value == 1 else 'cores'}"
    if kind != "bytes":
        return _plain(value)
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
    power = 0
    while power < len(units) - 1 and abs(value) >= 1024 ** (power + 1):
        power += 1
    shown = (value / Decimal(1024**power)).quantize(Decimal("0.01"))
    return f"{_plain(_checked(shown, shown))} {units[power]}"
