"""Kubernetes' CEL libraries that cel-python lacks, beyond the strings, lists and quantity
functions in ``quotas.kube.cel``: semver, sets, regex (``find`` / ``findAll``),
``strings.quote``, ``format`` and CEL's own conversions to string (``string(10.0)`` is
"10", as Go prints it) and to duration (``duration('0')``).

Pure Python: cel-python's value types and the standard library only. ``library(equal)``
builds the function table; ``equal`` is CEL's heterogeneous equality from ``quotas.kube.cel``
(passed in, so that this module does not import it back).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

import re2
from celpy import celtypes

__all__ = ["Semver", "go_float", "library", "regex_error"]

Equal = Callable[[Any, Any], bool]


def _text(value: Any, function: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"no such overload: {function}() applies to a string")
    return str(value)


# --------------------------------------------------------------------------- Go number text


def _digits(value: float) -> tuple[str, int]:
    """The shortest decimal digits of a finite, non-zero double and the position of the
    decimal point (``0.012`` is ("12", -1))."""
    _sign, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    text = "".join(str(digit) for digit in digits)
    return text, len(text) + int(exponent)


def _fixed(digits: str, point: int) -> str:
    if point <= 0:
        return "0." + "0" * -point + digits
    if point >= len(digits):
        return digits + "0" * (point - len(digits))
    return f"{digits[:point]}.{digits[point:]}"


def _scientific(digits: str, point: int) -> str:
    exponent = point - 1
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"


def go_float(value: float, *, verb: str = "g") -> str:
    """A double as Go's ``strconv.FormatFloat(v, verb, -1, 64)`` writes it, for ``g``
    (what CEL's ``string(double)`` gives) and ``f``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0"
    digits, point = _digits(value)
    if verb == "g" and not -4 <= point - 1 < 6:  # Go's shortest %g switches at 1e-4 and 1e6
        return sign + _scientific(digits, point)
    return sign + _fixed(digits, point)


def _go_timestamp(value: datetime.datetime) -> str:
    """RFC 3339 with the fraction trimmed of zeros, as Go's ``time.RFC3339Nano``."""
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    offset = value.utcoffset() or datetime.timedelta(0)
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _go_duration(value: datetime.timedelta) -> str:
    seconds = Decimal(value.days * 86400 + value.seconds) + Decimal(value.microseconds) / 10**6
    text = format(seconds.normalize(), "f")
    return f"{text}s"


def cel_string(value: Any) -> celtypes.StringType:
    """``string(x)``: CEL's text of a value (``true``, ``10`` for 10.0, RFC 3339 times)."""
    if isinstance(value, celtypes.BoolType):
        return celtypes.StringType("true" if value else "false")
    if isinstance(value, float):
        return celtypes.StringType(go_float(float(value)))
    if isinstance(value, datetime.datetime):
        return celtypes.StringType(_go_timestamp(value))
    if isinstance(value, datetime.timedelta):
        return celtypes.StringType(_go_duration(value))
    if isinstance(value, bytes):
        return celtypes.StringType(bytes(value).decode("utf-8"))
    if isinstance(value, list | dict | type) or value is None:
        raise TypeError(f"no such overload: string() of {type(value).__name__}")
    return celtypes.StringType(value)


def cel_duration(value: Any) -> celtypes.DurationType:
    """``duration(x)``: Go's duration text, where a bare zero ("0") is allowed."""
    if isinstance(value, str) and str(value).lstrip("+-") == "0":
        return celtypes.DurationType(0)
    return celtypes.DurationType(value)


# --------------------------------------------------------------------------- semver


class Semver:
    """A semantic version (k8s.io/apiserver/pkg/cel/library/semverlib.go, blang/semver):
    equal to another with the same precedence (build metadata is ignored)."""

    __slots__ = ("build", "major", "minor", "patch", "pre")

    def __init__(self, core: tuple[int, int, int], pre: tuple[str, ...], build: str) -> None:
        self.major, self.minor, self.patch = core
        self.pre, self.build = pre, build

    def compare(self, other: Semver) -> int:
        left, right = (self.major, self.minor, self.patch), (other.major, other.minor, other.patch)
        if left != right:
            return -1 if left < right else 1
        return _compare_pre(self.pre, other.pre)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        pre = "-" + ".".join(self.pre) if self.pre else ""
        build = "+" + self.build if self.build else ""
        return f"{self.major}.{self.minor}.{self.patch}{pre}{build}"


def _compare_identifier(left: str, right: str) -> int:
    if left.isdigit() and right.isdigit():
        a, b = int(left), int(right)
    elif left.isdigit() or right.isdigit():
        return -1 if left.isdigit() else 1  # numeric identifiers sort first
    else:
        a, b = left, right  # type: ignore[assignment]
    return (a > b) - (a < b)


def _compare_pre(left: tuple[str, ...], right: tuple[str, ...]) -> int:
    if not left or not right:
        return (not left) - (not right)  # a release is above its pre-releases
    for a, b in zip(left, right, strict=False):
        if (result := _compare_identifier(a, b)) != 0:
            return result
    return (len(left) > len(right)) - (len(left) < len(right))


_IDENTIFIER: Final = re.compile(r"[0-9A-Za-z-]+")


def _number(part: str, name: str) -> int:
    if not part.isascii() or not part.isdigit():
        raise ValueError(f"Invalid character(s) found in {name} number {part!r}")
    if len(part) > 1 and part.startswith("0"):
        raise ValueError(f"{name.capitalize()} number must not contain leading zeroes {part!r}")
    return int(part)


def _identifiers(text: str, what: str) -> tuple[str, ...]:
    parts = tuple(text.split("."))
    for part in parts:
        if not _IDENTIFIER.fullmatch(part):
            raise ValueError(f"Invalid character(s) found in {what} {part!r}")
        if what == "prerelease" and part.isdigit() and len(part) > 1 and part[0] == "0":
            raise ValueError(f"Numeric PreRelease version must not contain leading zeroes {part!r}")
    return parts


def parse_semver(text: str) -> Semver:
    """``semver.Parse``: MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], no "v", no leading zeros."""
    if not text:
        raise ValueError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    rest, _, build = parts[2].partition("+")
    patch, dash, pre = rest.partition("-")
    core = (_number(parts[0], "major"), _number(parts[1], "minor"), _number(patch, "patch"))
    return Semver(
        core,
        _identifiers(pre, "prerelease") if dash else (),
        ".".join(_identifiers(build, "build")) if "+" in parts[2] else "",
    )


def _normalized(text: str) -> str:
    """semverlib's ``normalizeAndParse``: no "v", no leading zeros, missing parts as 0."""
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            parts[index] = trimmed if trimmed[:1].isdigit() else "0" + trimmed
    if len(parts) < 3:
        if any(mark in parts[-1] for mark in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _bool(value: Any, function: str) -> bool:
    if not isinstance(value, celtypes.BoolType):
        raise TypeError(f"no such overload: {function}() takes a bool as its second argument")
    return bool(value)


def _semver_of(text: Any, normalize: Any = None) -> Semver:
    string = _text(text, "semver")
    if normalize is not None and _bool(normalize, "semver"):
        string = _normalized(string)
    return parse_semver(string)


def _is_semver(text: Any, normalize: Any = None) -> celtypes.BoolType:
    _text(text, "isSemver")
    try:
        _semver_of(text, normalize)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _a_semver(value: Any, function: str) -> Semver:
    if not isinstance(value, Semver):
        raise TypeError(f"no such overload: {function}() applies to a semver")
    return value


def _semver_part(name: str) -> Callable[[Any], celtypes.IntType]:
    return lambda value: celtypes.IntType(getattr(_a_semver(value, name), name))


def semver_compare(target: Any, other: Any) -> int:
    return _a_semver(target, "compareTo").compare(_a_semver(other, "compareTo"))


# --------------------------------------------------------------------------- sets


def _list(value: Any, function: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"no such overload: {function}() applies to lists")
    return list(value)


def _sets(equal: Equal) -> dict[str, Callable[..., Any]]:
    def contains(left: Any, right: Any) -> celtypes.BoolType:
        items = _list(left, "sets.contains")
        wanted = _list(right, "sets.contains")
        return celtypes.BoolType(all(any(equal(a, b) for a in items) for b in wanted))

    def equivalent(left: Any, right: Any) -> celtypes.BoolType:
        return celtypes.BoolType(bool(contains(left, right)) and bool(contains(right, left)))

    def intersects(left: Any, right: Any) -> celtypes.BoolType:
        items = _list(left, "sets.intersects")
        others = _list(right, "sets.intersects")
        return celtypes.BoolType(any(equal(a, b) for a in items for b in others))

    return {"sets.contains": contains, "sets.equivalent": equivalent, "sets.intersects": intersects}


# --------------------------------------------------------------------------- regex


def regex_error(pattern: str) -> str | None:
    """Why RE2 (Go's regexp syntax, as cel-python's ``matches``) refuses a pattern, or None."""
    try:
        re2.compile(pattern)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        text = reason.decode() if isinstance(reason, bytes) else str(reason)
        return f"error parsing regexp: {text}"
    return None


def _regex(pattern: Any, function: str) -> Any:
    text = _text(pattern, function)
    if (error := regex_error(text)) is not None:
        raise ValueError(f"Illegal regex: {error}")
    return re2.compile(text)


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    match = _regex(pattern, "find").search(_text(text, "find"))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    """Go's ``FindAllString``: an empty match right after the previous match is skipped."""
    string, regex = _text(text, "findAll"), _regex(pattern, "findAll")
    count = -1 if limit is None else int(limit)
    found: list[celtypes.StringType] = []
    previous_end = -1
    for match in regex.finditer(string):
        if count >= 0 and len(found) >= count:
            break
        if match.start() == match.end() == previous_end:
            continue
        found.append(celtypes.StringType(match.group(0)))
        previous_end = match.end()
    return celtypes.ListType(found)


# --------------------------------------------------------------------------- strings.quote


_QUOTED: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def _quote(text: Any) -> celtypes.StringType:
    """``strings.quote``: in double quotes, CEL's escape sequences written out."""
    string = _text(text, "strings.quote")
    body = "".join(
        "\ufffd" if 0xD800 <= ord(char) <= 0xDFFF else _QUOTED.get(char, char) for char in string
    )
    return celtypes.StringType(f'"{body}"')


# --------------------------------------------------------------------------- format


_CLAUSE: Final = re.compile(r"%(?:\.(\d+))?(.)", re.DOTALL)


def _integer(value: Any, verb: str) -> int:
    if isinstance(value, celtypes.BoolType) or not isinstance(value, int):
        raise ValueError(f"format: %{verb} applies to integers, not {type(value).__name__}")
    return int(value)


def _radix(value: Any, verb: str) -> str:
    if verb in "xX" and isinstance(value, str | bytes):
        data = str(value).encode() if isinstance(value, str) else bytes(value)
        text = data.hex()
    elif verb == "b" and isinstance(value, celtypes.BoolType):
        text = "1" if value else "0"
    else:
        number = _integer(value, verb)
        text = format(number, {"b": "b", "o": "o", "x": "x", "X": "x"}[verb])
    return text.upper() if verb == "X" else text


def _fixed_clause(value: Any, precision: str | None) -> str:
    if isinstance(value, str) and str(value) in ("NaN", "Infinity", "-Infinity"):
        value = float({"Infinity": "inf", "-Infinity": "-inf"}.get(str(value), "nan"))
    if isinstance(value, celtypes.BoolType) or not isinstance(value, int | float):
        raise ValueError(f"format: %f applies to numbers, not {type(value).__name__}")
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    return f"{number:.{6 if precision is None else int(precision)}f}"


def _string_clause(value: Any) -> str:
    if isinstance(value, list | dict):
        raise ValueError("format: %s of a list or map is not supported here")
    if value is None:
        return "null"
    if isinstance(value, type):
        return str(value.__name__).removesuffix("Type").lower()
    return str(cel_string(value))


def _clause(verb: str, precision: str | None, value: Any) -> str:
    if verb == "s":
        return _string_clause(value)
    if verb == "d":
        return str(_integer(value, verb))
    if verb == "f":
        return _fixed_clause(value, precision)
    if verb in "boxX":
        return _radix(value, verb)
    raise ValueError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')


def _format(template: Any, arguments: Any) -> celtypes.StringType:
    """``'...'.format([...])`` (cel-go's strings extension): %s, %d, %f, %.Nf, %b, %o, %x,
    %X and %%; %e (Go writes it locale-dependently) is refused as unsupported."""
    text, values = _text(template, "format"), _list(arguments, "format")
    out, position, index = [], 0, 0
    for match in _CLAUSE.finditer(text):
        out.append(text[position : match.start()])
        position = match.end()
        precision, verb = match.groups()
        if verb == "%" and precision is None:
            out.append("%")
            continue
        if verb == "e":
            raise ValueError("format: the %e clause is not supported")
        if index >= len(values):
            raise ValueError(f"index {index} out of range")
        out.append(_clause(verb, precision, values[index]))
        index += 1
    out.append(text[position:])
    return celtypes.StringType("".join(out))


# --------------------------------------------------------------------------- table


def library(equal: Equal) -> dict[str, Callable[..., Any]]:
    """The functions this module adds, by CEL name (namespaced ones with their dot)."""
    return {
        "semver": _semver_of,
        "isSemver": _is_semver,
        "major": _semver_part("major"),
        "minor": _semver_part("minor"),
        "patch": _semver_part("patch"),
        "find": _find,
        "findAll": _find_all,
        "strings.quote": _quote,
        "format": _format,
        "string": cel_string,
        "duration": cel_duration,
        **_sets(equal),
    }
