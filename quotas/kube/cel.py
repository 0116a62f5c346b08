"""CEL expressions, evaluated by a real CEL engine (cel-python), and the CRD rule engine.

Pure Python, no Django and no app imports: validate.py, the applier and the API stand-in use it.

* ``evaluate(expression, variables)`` compiles an expression once (cached by its text) and
  runs it on JSON-like variables, returning plain Python. cel-python implements the CEL
  standard definitions (``size``, ``contains``, ``startsWith``, ``endsWith``, ``matches`` (RE2),
  ``has``, ``all``, ``exists``, ``exists_one``, ``filter``, ``map``, ``in``, conversions);
  this module adds what Kubernetes' CEL environment has and cel-python lacks:
  heterogeneous equality and cross-type numeric comparison (``1 == 1.0``, ``'a' == 1`` is
  false), the Kubernetes string library (``lowerAscii``, ``upperAscii``, ``trim``,
  ``replace``, ``split``, ``join``, ``indexOf``, ``lastIndexOf`` (an offset at or past the
  end finds nothing, a negative one is an error, as cel-go's), ``substring``, ``charAt``,
  ``strings.quote``, ``format`` with %s, %d, %f, %.Nf, %b, %o, %x, %X and %%)
  and list library (``isSorted``, ``sum``, ``max``, ``indexOf``, ``lastIndexOf``; cel-python
  has ``min``),
  the quantity library (``quantity``, ``isQuantity``, ``sign``, ``isInteger``, ``asInteger``,
  ``asApproximateFloat``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``add``, ``sub``;
  parsed by ``quotas.quantity``, standard library only, which refuses the amounts finer than
  1n or above 2^63-1 that Kubernetes would round or cap),
  and, in ``quotas.kube.cel_library``: the semver library (``semver``, ``isSemver``, with the
  optional normalize flag, ``major``, ``minor``, ``patch``, ``compareTo``, ``isGreaterThan``,
  ``isLessThan``), the sets library (``sets.contains``, ``sets.equivalent``,
  ``sets.intersects``), the regex library (``find``, ``findAll``, Go's rule for empty
  matches) and CEL's own conversions where cel-python's differ (``string(10.0)`` is "10",
  ``string(true)`` "true", times and durations as Go writes them; ``duration('0')``);
  and ``hasValue`` / ``value`` / ``orValue`` on an optional ``oldSelf``. A function neither
  has is a compile error, as it is for the API server's type checker, and so is a literal
  argument of the wrong type to ``quantity``, ``isQuantity``, ``semver`` or ``isSemver``
  (other type errors show when the rule runs). Not provided: the ``url``, ``ip``/``cidr``,
  ``authorizer``, ``math``, ``base64`` and ``lists.range`` libraries, ``format``'s %e clause
  and %s of a list or map (an error saying so), ``reverse``, and optional syntax
  (``a.?b``), which cel-python cannot parse. ``matches``, ``find`` and ``findAll`` use RE2,
  as Go does; a constant pattern RE2 refuses is a compile error.
* ``crd_rules`` and ``check_crd_rules`` run a CRD's ``x-kubernetes-validations`` on an object
  the way the API server does (k8s.io/apiextensions-apiserver ``schema/cel``): schema defaults
  are applied first; each rule runs with ``self`` bound to every value its schema node
  describes (each list item, each map value), never on an absent or null value; values are
  typed by the schema (``number`` is a double; ``format: date``, ``date-time``, ``duration``
  and ``byte`` strings are timestamps, durations and bytes; a ``set`` or ``map`` list compares
  equal in any order, and ``+`` on it merges: a set adds the items it lacks, a map list
  replaces the items with the same keys); a transition rule (one that uses ``oldSelf``) runs only on an update where the old
  value can be correlated (object fields, map values unless the map is atomic, and
  ``x-kubernetes-list-type: map`` items by their keys; items of other lists never), unless
  it says ``optionalOldSelf``; on an update a failure of a rule that does not use ``oldSelf``
  is dropped where the value (or its nearest correlated ancestor) is unchanged, as the API
  server's validation ratcheting does (it only warns then).
* A rule's outcome on a value is remembered (``RuleMemo``, bounded): the same rule at the same
  schema node on an equal ``self`` (and ``oldSelf``) gives the same answer, and a first sync
  applies thousands of objects whose parts are alike (a flavor's resources, a toleration).
"""

from __future__ import annotations

import base64
import datetime
import functools
import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions, celstr

from quotas.kube.cel_library import Semver, library, regex_error, semver_compare
from quotas.quantity import QuantityError, format_as, parse_quantity, quantity_format
from quotas.quantity import canonical as quantity_canonical

__all__ = [
    "CelError",
    "MapKey",
    "Rule",
    "Violation",
    "check_crd_rules",
    "check_schema_rules",
    "compile_check",
    "crd_rules",
    "evaluate",
    "schema_rules",
]

_ENVIRONMENT: Final = celpy.Environment()
# Handled by cel-python's parser or evaluator itself ("min" is its list reduction).
_MACROS: Final = frozenset({"has", "all", "exists", "exists_one", "map", "filter", "dyn", "min"})
_REASONS: Final = {
    None: "Invalid value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}


class CelError(ValueError):
    """A CEL expression that does not compile or fails to evaluate; the message names it.

    ``detail`` is the reason alone ("no such key: effect"), without the expression."""

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


class MapKey(str):
    """A map key in a violation's path (shown as ``[key]``), not a field name."""

    __slots__ = ()


# --------------------------------------------------------------------------- values


class _UnorderedList(celtypes.ListType):
    """A ``x-kubernetes-list-type: set`` or ``map`` list: equal to a list with the same items
    in any order, as in the API server's CEL."""

    def merged(self, other: list[Any]) -> _UnorderedList:
        """``self + other`` for a set: the items of ``other`` not already in it appended."""
        out = list(self)
        for item in other:
            if not any(_equal(item, present) for present in out):
                out.append(item)
        return _UnorderedList(out)


class _MapList(_UnorderedList):
    """A ``x-kubernetes-list-type: map`` list: ``+`` replaces the items whose keys the right
    side has (in place) and appends the others, as the API server's ``UnstructuredList``."""

    def __init__(self, items: Any = (), keys: Sequence[str] = ()) -> None:
        super().__init__(items)
        self.keys = tuple(keys)

    def _key(self, item: Any) -> tuple[Any, ...] | None:
        if not isinstance(item, Mapping):
            return None
        return tuple(_canonical(_from_cel(item.get(key))) for key in self.keys)

    def merged(self, other: list[Any]) -> _MapList:
        out = list(self)
        where = {self._key(item): index for index, item in enumerate(out)}
        for item in other:
            index = where.get(self._key(item))
            if index is None:
                where[self._key(item)] = len(out)
                out.append(item)
            else:
                out[index] = item
        return _MapList(out, self.keys)


def _cel_add(left: Any, right: Any) -> Any:
    if isinstance(left, _UnorderedList) and isinstance(right, list):
        return left.merged(right)
    return _typed(base_functions["_+_"](left, right))


class _Optional:
    """An optional value (``oldSelf`` of an ``optionalOldSelf`` rule)."""

    __slots__ = ("present", "wrapped")

    def __init__(self, wrapped: Any = None, *, present: bool) -> None:
        self.wrapped, self.present = wrapped, present


def _is_number(value: Any) -> bool:
    """A CEL int, uint or double (cel-python's arithmetic may answer a plain int or float)."""
    return isinstance(value, int | float) and not isinstance(value, bool | celtypes.BoolType)


def _plain_number(value: Any) -> int | float:
    return float(value) if isinstance(value, float) else int(value)


def _typed(value: Any) -> Any:
    """cel-python's string concatenation answers a plain ``str`` (and bytes' a plain
    ``bytes``), not its StringType: the same CEL type, so equal to a literal."""
    if isinstance(value, str) and not isinstance(value, celtypes.StringType):
        return celtypes.StringType(value)
    if isinstance(value, bytes) and not isinstance(value, celtypes.BytesType):
        return celtypes.BytesType(value)
    return value


def _equal(left: Any, right: Any) -> bool:
    """CEL heterogeneous equality: values of different types are unequal, numbers compare by
    value, lists item by item (in any order for set and map lists), maps key by key."""
    left, right = _typed(left), _typed(right)
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, celtypes.BoolType) or isinstance(right, celtypes.BoolType):
        return type(left) is type(right) and bool(left) == bool(right)
    if _is_number(left) and _is_number(right):
        return _plain_number(left) == _plain_number(right)
    if isinstance(left, list) and isinstance(right, list):
        if len(left) != len(right):
            return False
        if isinstance(left, _UnorderedList) or isinstance(right, _UnorderedList):
            remaining = list(right)
            for item in left:
                match = next((i for i, other in enumerate(remaining) if _equal(item, other)), None)
                if match is None:
                    return False
                del remaining[match]
            return True
        return all(_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return len(left) == len(right) and all(
            key in right and _equal(value, right[key]) for key, value in left.items()
        )
    if type(left) is not type(right):
        return False
    try:
        return bool(left == right)
    except TypeError:
        return False


def _cel_eq(left: Any, right: Any) -> Any:
    if isinstance(left, CELEvalError):
        return left
    if isinstance(right, CELEvalError):
        return right
    return celtypes.BoolType(_equal(left, right))


def _cel_ne(left: Any, right: Any) -> Any:
    result = _cel_eq(left, right)
    return result if isinstance(result, CELEvalError) else celtypes.BoolType(not result)


def _ordering(name: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    fallback = base_functions[name]

    def function(left: Any, right: Any) -> Any:
        if _is_number(left) and _is_number(right):
            return celtypes.BoolType(compare(_plain_number(left), _plain_number(right)))
        return fallback(left, right)

    return function


def _cel_in(item: Any, container: Any) -> Any:
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, list):
        return celtypes.BoolType(any(_equal(item, other) for other in container))
    if isinstance(container, dict):
        return celtypes.BoolType(any(_equal(item, key) for key in container))
    return base_functions["_in_"](item, container)


def _string(value: Any, function: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{function}() applies to a string, not {type(value).__name__}")
    return str(value)


def _int(value: Any, function: str) -> int:
    if not isinstance(value, celtypes.IntType) or isinstance(value, celtypes.BoolType):
        raise TypeError(f"{function}() takes an int here, not {type(value).__name__}")
    return int(value)


def _list_index(target: list[Any], needle: Any, offset: Any, reverse: bool) -> celtypes.IntType:
    """The Kubernetes list library's ``indexOf`` / ``lastIndexOf``: no offset overload."""
    if offset is not None:
        raise TypeError("no such overload: a list's indexOf() and lastIndexOf() take no offset")
    order = range(len(target) - 1, -1, -1) if reverse else range(len(target))
    return celtypes.IntType(next((i for i in order if _equal(target[i], needle)), -1))


def _index_of(target: Any, needle: Any, offset: Any = None) -> celtypes.IntType:
    """cel-go's strings extension: an empty needle answers the offset itself; a negative
    offset is an error, one at or past the end finds nothing (-1)."""
    if isinstance(target, list):
        return _list_index(target, needle, offset, reverse=False)
    text, sub = _string(target, "indexOf"), _string(needle, "indexOf")
    start = 0 if offset is None else _int(offset, "indexOf")
    if sub == "":
        return celtypes.IntType(start)
    if start < 0:
        raise ValueError(f"index out of range: {start}")
    return celtypes.IntType(text.find(sub, start) if start < len(text) else -1)


def _last_index_of(target: Any, needle: Any, offset: Any = None) -> celtypes.IntType:
    """As ``_index_of``, searching backwards from the offset (the last index by default)."""
    if isinstance(target, list):
        return _list_index(target, needle, offset, reverse=True)
    text, sub = _string(target, "lastIndexOf"), _string(needle, "lastIndexOf")
    if offset is None:
        return celtypes.IntType(text.rfind(sub))
    end = _int(offset, "lastIndexOf")
    if sub == "":
        return celtypes.IntType(end)
    if end < 0:
        raise ValueError(f"index out of range: {end}")
    return celtypes.IntType(text.rfind(sub, 0, end + len(sub)) if end < len(text) else -1)


def _substring(target: Any, start: Any, end: Any = None) -> celtypes.StringType:
    text = _string(target, "substring")
    first = _int(start, "substring")
    last = len(text) if end is None else _int(end, "substring")
    if end is not None and first > last:
        raise ValueError(f"invalid substring range. start: {first}, end: {last}")
    for index in (first, last):
        if not 0 <= index <= len(text):
            raise ValueError(f"index out of range: {index}")
    return celtypes.StringType(text[first:last])


def _char_at(target: Any, index: Any) -> celtypes.StringType:
    text, position = _string(target, "charAt"), _int(index, "charAt")
    if not 0 <= position <= len(text):
        raise ValueError(f"index out of range: {position}")
    return celtypes.StringType(text[position : position + 1])


def _replace(target: Any, old: Any, new: Any, count: Any = None) -> celtypes.StringType:
    text = _string(target, "replace")
    limit = -1 if count is None else _int(count, "replace")
    return celtypes.StringType(
        text.replace(_string(old, "replace"), _string(new, "replace"), limit)
    )


def _split(target: Any, separator: Any, count: Any = None) -> celtypes.ListType:
    text, sep = _string(target, "split"), _string(separator, "split")
    limit = -1 if count is None else _int(count, "split")
    if limit == 0:
        return celtypes.ListType()
    if sep == "":
        parts = list(text) if limit < 0 else [*text[: limit - 1], text[limit - 1 :]]
        parts = [part for part in parts if part] if limit > 0 else parts
    else:
        parts = text.split(sep, limit - 1 if limit > 0 else -1)
    return celtypes.ListType(celtypes.StringType(part) for part in parts)


def _join(target: Any, separator: Any = None) -> celtypes.StringType:
    if not isinstance(target, list):
        raise TypeError(f"join() applies to a list of strings, not {type(target).__name__}")
    sep = "" if separator is None else _string(separator, "join")
    return celtypes.StringType(sep.join(_string(item, "join") for item in target))


def _numbers(target: Any, function: str) -> list[Any]:
    if not isinstance(target, list):
        raise TypeError(f"{function}() applies to a list, not {type(target).__name__}")
    return list(target)


def _less(left: Any, right: Any) -> bool:
    if _is_number(left) and _is_number(right):
        return _plain_number(left) < _plain_number(right)
    if type(left) is not type(right):
        raise TypeError(f"cannot compare {type(left).__name__} with {type(right).__name__}")
    return bool(left < right)


def _is_sorted(target: Any) -> celtypes.BoolType:
    items = _numbers(target, "isSorted")
    return celtypes.BoolType(all(not _less(b, a) for a, b in itertools.pairwise(items)))


def _sum(target: Any) -> Any:
    items = _numbers(target, "sum")
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return celtypes.DoubleType(total) if isinstance(total, float) else _typed(total)


def _extreme(function: str, pick_left: Callable[[Any, Any], bool]) -> Callable[..., Any]:
    def run(target: Any) -> Any:
        items = _numbers(target, function)
        if not items:
            raise ValueError(f"{function}() of an empty list")
        best = items[0]
        for item in items[1:]:
            if not pick_left(best, item):
                best = item
        return best

    return run


def _has_value(target: Any) -> celtypes.BoolType:
    if not isinstance(target, _Optional):
        raise TypeError("hasValue() applies to an optional value")
    return celtypes.BoolType(target.present)


def _value(target: Any) -> Any:
    if not isinstance(target, _Optional):
        raise TypeError("value() applies to an optional value")
    if not target.present:
        raise ValueError("optional.none() dereference")
    return target.wrapped


def _or_value(target: Any, default: Any) -> Any:
    if not isinstance(target, _Optional):
        raise TypeError("orValue() applies to an optional value")
    return target.wrapped if target.present else default


def _size(target: Any) -> celtypes.IntType:
    if isinstance(target, _Optional) or not isinstance(target, str | bytes | list | dict):
        raise TypeError(
            f"size() applies to a string, bytes, list or map, not {type(target).__name__}"
        )
    return celtypes.IntType(len(target))


# --------------------------------------------------------------------------- quantity library


class _Quantity:
    """A Kubernetes quantity as the API server's CEL quantity library has it
    (k8s.io/apiserver/pkg/cel/library/quantity.go): an exact amount, equal to another quantity
    of the same amount however written (``quantity('1Gi') == quantity('1024Mi')``), shown in
    its canonical text."""

    __slots__ = ("amount", "text")

    def __init__(self, amount: Decimal, text: str) -> None:
        self.amount, self.text = amount, text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Quantity) and self.amount == other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    def __str__(self) -> str:
        return self.text


def _quantity_of(text: Any) -> _Quantity:
    """``quantity(string)``: an error where ``resource.ParseQuantity`` refuses the text."""
    string = _string(text, "quantity")
    try:
        amount = parse_quantity(string)
        shown = quantity_canonical(string)
    except QuantityError as error:
        raise ValueError(f"invalid quantity {string!r}: {error}") from error
    return _Quantity(amount, shown)


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        _quantity_of(text)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _a_quantity(value: Any, function: str) -> _Quantity:
    if not isinstance(value, _Quantity):
        raise TypeError(f"{function}() applies to a quantity, not {type(value).__name__}")
    return value


def _quantity_compare(target: Any, other: Any) -> int:
    """``compareTo`` of two quantities, or of two semvers (the semver library's method)."""
    if isinstance(target, Semver):
        return semver_compare(target, other)
    left = _a_quantity(target, "compareTo").amount
    right = _a_quantity(other, "compareTo").amount
    return (left > right) - (left < right)


def _quantity_integer(target: Any) -> celtypes.IntType:
    """``asInteger()``: an error unless the amount is whole and fits an int64."""
    amount = _a_quantity(target, "asInteger").amount
    if amount != amount.to_integral_value() or not -(2**63) <= amount < 2**63:
        raise ValueError(f"cannot convert value to integer: {target} is not a whole int64")
    return celtypes.IntType(int(amount))


def _quantity_arithmetic(function: str, sign: int) -> Callable[[Any, Any], _Quantity]:
    """``add`` / ``sub`` of a quantity or an int; the result in the left side's format, as
    ``Quantity.Add`` keeps it."""

    def run(target: Any, other: Any) -> _Quantity:
        left = _a_quantity(target, function)
        if isinstance(other, celtypes.IntType) and not isinstance(other, celtypes.BoolType):
            right = Decimal(int(other))
        else:
            right = _a_quantity(other, function).amount
        amount = left.amount + sign * right
        try:
            shown = format_as(parse_quantity(amount), quantity_format(left.text))
        except QuantityError as error:
            raise ValueError(f"{function}(): {error}") from error
        return _Quantity(amount, shown)

    return run


_QUANTITY_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _quantity_of,
    "isQuantity": _is_quantity,
    "sign": lambda q: celtypes.IntType(_quantity_compare(q, _Quantity(Decimal(0), "0"))),
    "isInteger": lambda q: celtypes.BoolType(
        _a_quantity(q, "isInteger").amount == q.amount.to_integral_value()
    ),
    "asInteger": _quantity_integer,
    "asApproximateFloat": lambda q: celtypes.DoubleType(
        float(_a_quantity(q, "asApproximateFloat").amount)
    ),
    "compareTo": lambda q, other: celtypes.IntType(_quantity_compare(q, other)),
    "isGreaterThan": lambda q, other: celtypes.BoolType(_quantity_compare(q, other) > 0),
    "isLessThan": lambda q, other: celtypes.BoolType(_quantity_compare(q, other) < 0),
    "add": _quantity_arithmetic("add", 1),
    "sub": _quantity_arithmetic("sub", -1),
}


_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "_==_": _cel_eq,
    "_!=_": _cel_ne,
    "_<_": _ordering("_<_", lambda a, b: a < b),
    "_<=_": _ordering("_<=_", lambda a, b: a <= b),
    "_>_": _ordering("_>_", lambda a, b: a > b),
    "_>=_": _ordering("_>=_", lambda a, b: a >= b),
    "_in_": _cel_in,
    "_+_": _cel_add,
    "size": _size,
    "lowerAscii": lambda s: celtypes.StringType(
        "".join(c.lower() if c.isascii() else c for c in _string(s, "lowerAscii"))
    ),
    "upperAscii": lambda s: celtypes.StringType(
        "".join(c.upper() if c.isascii() else c for c in _string(s, "upperAscii"))
    ),
    "trim": lambda s: celtypes.StringType(_string(s, "trim").strip()),
    "replace": _replace,
    "split": _split,
    "join": _join,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": _char_at,
    "isSorted": _is_sorted,
    "sum": _sum,
    "max": _extreme("max", lambda best, item: not _less(best, item)),
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
    **_QUANTITY_FUNCTIONS,
    **library(_equal),
}
_KNOWN_FUNCTIONS: Final = frozenset({*base_functions, *_FUNCTIONS, *_MACROS})


def _to_cel(value: Any, schema: Mapping[str, Any] | None = None) -> Any:
    """A JSON-like value as a CEL value, typed by its structural schema when one is given."""
    schema = schema or {}
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        if schema.get("type") == "number":
            return celtypes.DoubleType(value)
        if not -(2**63) <= value < 2**63:
            raise CelError(f"{value} does not fit a CEL int (64 bits)")
        return celtypes.IntType(value)
    if isinstance(value, float):
        if schema.get("type") == "integer" and value.is_integer():
            return celtypes.IntType(int(value))
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return _typed_string(
            value, schema.get("format") if schema.get("type") == "string" else None
        )
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        additional = additional if isinstance(additional, Mapping) else None
        return celtypes.MapType(
            {
                celtypes.StringType(str(key)): _to_cel(item, properties.get(key, additional))
                for key, item in value.items()
            }
        )
    if isinstance(value, list | tuple):
        return _list_to_cel(value, schema)
    raise CelError(f"cannot pass a {type(value).__name__} to CEL: use JSON-like values")


def _list_to_cel(value: Sequence[Any], schema: Mapping[str, Any]) -> celtypes.ListType:
    """A list as CEL has it: a ``set`` or ``map`` list type compares (and adds) by its kind."""
    items = schema.get("items") if isinstance(schema.get("items"), Mapping) else None
    converted = [_to_cel(item, items) for item in value]
    if schema.get("x-kubernetes-list-type") == "map":
        return _MapList(converted, schema.get("x-kubernetes-list-map-keys") or ())
    if schema.get("x-kubernetes-list-type") == "set":
        return _UnorderedList(converted)
    return celtypes.ListType(converted)


def _typed_string(value: str, string_format: Any) -> Any:
    try:
        if string_format == "date-time":
            return celtypes.TimestampType(value)
        if string_format == "date":
            day = datetime.date.fromisoformat(value)
            return celtypes.TimestampType(day.year, day.month, day.day, tzinfo=datetime.UTC)
        if string_format == "duration":
            return celtypes.DurationType(value)
        if string_format == "byte":
            return celtypes.BytesType(base64.b64decode(value, validate=True))
    except (ValueError, TypeError):
        pass  # a malformed value stays a string; the schema check reports it
    return celtypes.StringType(value)


def _from_cel(value: Any) -> Any:
    """A CEL result as plain Python: bool, int, float, str, bytes, list, dict or None."""
    if isinstance(value, CELEvalError):
        raise value
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, celtypes.TimestampType | celtypes.DurationType):
        return str(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, list):
        return [_from_cel(item) for item in value]
    if isinstance(value, dict):
        return {_from_cel(key): _from_cel(item) for key, item in value.items()}
    if isinstance(value, _Optional):
        return _from_cel(value.wrapped) if value.present else None
    return str(value)


# --------------------------------------------------------------------------- compile and run


def _called_names(ast: lark.Tree) -> Iterator[str]:
    for node in ast.iter_subtrees():
        if node.data in ("ident_arg", "member_dot_arg", "dot_ident_arg"):
            token = next((child for child in node.children if isinstance(child, lark.Token)), None)
            if token is not None:
                yield str(token)


def _uses_variable(ast: lark.Tree, name: str) -> bool:
    return any(
        isinstance(child, lark.Token) and child.type == "IDENT" and child == name
        for node in ast.iter_subtrees()
        if node.data == "ident"
        for child in node.children
    )


_NAMESPACED: Final = frozenset(name for name in _FUNCTIONS if "." in name)
_NAMESPACES: Final = frozenset(name.split(".")[0] for name in _NAMESPACED)
# Global functions whose first argument must be a string: a literal of another type is a
# compile error, as the API server's type checker reports it.
_STRING_ARGUMENT: Final = frozenset({"quantity", "isQuantity", "semver", "isSemver"})
_REGEX_METHODS: Final = frozenset({"matches", "find", "findAll"})
_PASS_THROUGH: Final = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication"}
    | {"unary", "member", "primary"}
)
_LITERAL_TYPES: Final = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "BOOL_LIT": "bool",
    "NULL_LIT": "null_type",
}


def _namespace_call(node: lark.Tree) -> str | None:
    """``sets.contains`` in ``sets.contains(a, b)``: a call of a namespaced function, which
    cel-python parses as a method of a variable named ``sets``."""
    target = node.children[0]
    while isinstance(target, lark.Tree) and target.data in ("member", "primary"):
        if len(target.children) != 1:
            return None
        target = target.children[0]
    if not (isinstance(target, lark.Tree) and target.data == "ident"):
        return None
    namespace = str(target.children[0])
    return f"{namespace}.{node.children[1]}" if namespace in _NAMESPACES else None


def _long_string(token: lark.Token) -> lark.Token:
    """cel-python drops the line breaks of a triple-quoted string; as escapes they stay."""
    text = str(token)
    if token.type != "MLSTRING_LIT" or text[:1] in "rR":
        return token
    escaped = text.replace("\r", "\\r").replace("\n", "\\n")
    return lark.Token.new_borrow_pos(token.type, escaped, token)


def _rewritten(ast: lark.Tree) -> lark.Tree:
    """Namespaced calls turned into calls of their qualified names; long strings mended."""
    for node in list(ast.iter_subtrees()):
        if node.data == "member_dot_arg" and (name := _namespace_call(node)) is not None:
            call = lark.Tree("ident_arg", [lark.Token("IDENT", name), *node.children[2:]])
            node.data, node.children = "primary", [call]
        elif node.data == "literal" and isinstance(node.children[0], lark.Token):
            node.children[0] = _long_string(node.children[0])
    return ast


def _literal_type(tree: Any) -> str | None:
    """The CEL type of an argument that is a literal (``[1, 2]`` is a list), else None."""
    while isinstance(tree, lark.Tree) and tree.data in _PASS_THROUGH and len(tree.children) == 1:
        tree = tree.children[0]
    if not isinstance(tree, lark.Tree):
        return None
    if tree.data in ("list_lit", "map_lit"):
        return tree.data.removesuffix("_lit")
    if tree.data == "literal" and isinstance(tree.children[0], lark.Token):
        return _LITERAL_TYPES.get(tree.children[0].type)
    return None


def _regex_errors(ast: lark.Tree) -> list[str]:
    """A constant pattern RE2 refuses is a compile error, as the API server compiles it then."""
    errors = []
    for node in ast.iter_subtrees():
        if node.data != "member_dot_arg" or str(node.children[1]) not in _REGEX_METHODS:
            continue
        arguments = node.children[2].children if len(node.children) > 2 else []
        if not arguments or _literal_type(arguments[0]) != "string":
            continue
        token = next(arguments[0].find_data("literal")).children[0]
        if isinstance(token, lark.Token) and (error := regex_error(str(celstr(token)))):
            errors.append(error)
    return errors


def _type_errors(ast: lark.Tree) -> list[str]:
    errors = _regex_errors(ast)
    for node in ast.iter_subtrees():
        if node.data != "ident_arg" or str(node.children[0]) not in _STRING_ARGUMENT:
            continue
        arguments = node.children[1].children if len(node.children) > 1 else []
        kind = _literal_type(arguments[0]) if arguments else None
        if kind not in (None, "string"):
            errors.append(
                f"found no matching overload for '{node.children[0]}' applied to '({kind})'"
            )
    return errors


@functools.lru_cache(maxsize=4096)
def _compiled(expression: str) -> tuple[Any, bool]:
    """(program, uses oldSelf) for an expression; CelError when it does not compile."""
    try:
        ast = _ENVIRONMENT.compile(expression)
    except Exception as error:  # cel-python raises CELParseError and lark errors
        detail = "syntax error: " + " ".join(str(error).split())
        raise CelError(f"compile error in {expression!r}: {detail}", detail=detail) from error
    ast = _rewritten(ast)
    if type_errors := _type_errors(ast):
        detail = "; ".join(type_errors)
        raise CelError(f"compile error in {expression!r}: {detail}", detail=detail)
    unknown = sorted({name for name in _called_names(ast) if name not in _KNOWN_FUNCTIONS})
    if unknown:
        detail = (
            f"undeclared reference to {', '.join(repr(name) for name in unknown)} (neither "
            "cel-python nor this module's Kubernetes library has it)"
        )
        raise CelError(f"compile error in {expression!r}: {detail}", detail=detail)
    program = _ENVIRONMENT.program(ast, functions=_FUNCTIONS)
    return program, _uses_variable(ast, "oldSelf")


def compile_check(expression: str) -> None:
    """Raise CelError when ``expression`` does not compile (syntax, unknown function)."""
    _compiled(expression)


def _run(expression: str, activation: Mapping[str, Any]) -> Any:
    program, _ = _compiled(expression)
    try:
        result = program.evaluate(dict(activation))
    except CELEvalError as error:
        result = error
    except (RecursionError, TypeError, ValueError, KeyError, AttributeError) as error:
        raise CelError(f"{error} evaluating {expression!r}", detail=str(error)) from error
    if isinstance(result, CELEvalError):
        detail = _eval_error_text(result)
        raise CelError(f"{detail} evaluating {expression!r}", detail=detail)
    return result


_NO_SUCH_MEMBER: Final = re.compile(r"no such member in mapping: '(.*)'")


def _eval_error_text(error: CELEvalError) -> str:
    """cel-python's error as the API server words it where they differ ("no such key: x")."""
    args = error.args
    head = str(args[0]) if args else "evaluation error"
    if match := _NO_SUCH_MEMBER.fullmatch(head):
        return f"no such key: {match.group(1)}"
    cause = args[2] if len(args) > 2 and isinstance(args[2], tuple) and args[2] else None
    if cause is not None and head != "no such overload":
        head = f"{head}: {cause[0]!s}"
    return head


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """Compile ``expression`` (cached by its text) and evaluate it with ``variables`` (JSON-like
    values), returning plain Python. CelError on a compile or evaluation error."""
    activation = {name: _to_cel(value) for name, value in variables.items()}
    return _from_cel(_run(expression, activation))


# --------------------------------------------------------------------------- CRD rules


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry and where it sits in the schema."""

    location: str  # schema path: "spec.resourceGroups[*]", "spec.nodeLabels{*}", "" for root
    rule: str
    message: str | None = None
    message_expression: str | None = None
    reason: str | None = None
    field_path: str | None = None
    optional_old_self: bool = False

    @property
    def transition(self) -> bool:
        """Whether the rule uses ``oldSelf`` (False when it does not compile)."""
        try:
            return _compiled(self.rule)[1]
        except CelError:
            return "oldSelf" in self.rule

    @property
    def error_text(self) -> str:
        """How the API server names the rule in an evaluation error: its message, or itself."""
        return self.message.strip() if self.message and self.message.strip() else self.rule.strip()

    @property
    def default_message(self) -> str:
        """The message the API server shows when the rule fails."""
        if self.message and self.message.strip():
            return self.message.strip()
        return f"failed rule: {self.rule.strip()}"


@dataclass(frozen=True)
class Violation:
    """A rule that failed (or could not be evaluated) at one place in an object."""

    path: tuple[str | int, ...]  # field names, list indexes, MapKey map keys
    rule: Rule
    message: str
    reason: str  # "Invalid value", "Forbidden", "Required value", "Duplicate value"
    shown_value: str  # '"object"', '"array"', '"gpu"', '3': what "Invalid value" shows

    @property
    def field(self) -> str:
        """The Kubernetes field path: ``spec.tolerations[0]``, ``spec.nodeLabels[zone]``."""
        out = ""
        for part in self.path:
            if isinstance(part, int | MapKey):
                out += f"[{part}]"
            else:
                out += f".{part}" if out else str(part)
        return out

    @property
    def detail(self) -> str:
        """What follows the field path in the API server's message."""
        if self.reason in ("Forbidden", "Required value"):
            return f"{self.reason}: {self.message}"
        if self.reason == "Duplicate value":
            return f"{self.reason}: {self.shown_value}"
        return f"{self.reason}: {self.shown_value}: {self.message}"

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}" if self.field else self.detail


def _rules_at(node: Mapping[str, Any], location: str) -> list[Rule]:
    found = []
    for entry in node.get("x-kubernetes-validations") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("rule"), str):
            found.append(
                Rule(
                    location=location,
                    rule=entry["rule"],
                    message=entry.get("message"),
                    message_expression=entry.get("messageExpression"),
                    reason=entry.get("reason"),
                    field_path=entry.get("fieldPath"),
                    optional_old_self=bool(entry.get("optionalOldSelf")),
                )
            )
    for sub in node.get("allOf") or []:
        if isinstance(sub, Mapping):
            found.extend(_rules_at(sub, location))
    return found


def _child(location: str, name: str) -> str:
    return f"{location}.{name}" if location else name


def schema_rules(schema: Mapping[str, Any], location: str = "") -> list[Rule]:
    """Every rule in a structural schema, parents before children."""
    rules = _rules_at(schema, location)
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, Mapping):
            rules.extend(schema_rules(sub, _child(location, name)))
    if isinstance(schema.get("items"), Mapping):
        rules.extend(schema_rules(schema["items"], f"{location}[*]"))
    if isinstance(schema.get("additionalProperties"), Mapping):
        rules.extend(schema_rules(schema["additionalProperties"], f"{location}{{*}}"))
    return rules


def _version_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any]:
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: Mapping[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    kind = crd["spec"]["names"]["kind"]
    raise KeyError(f"the {kind} CRD has no version {version!r}")


def crd_rules(crd: Mapping[str, Any], version: str) -> list[Rule]:
    """Every ``x-kubernetes-validations`` rule of one version of a CRD."""
    return schema_rules(_version_schema(crd, version))


def check_crd_rules(
    crd: Mapping[str, Any],
    version: str,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None = None,
    *,
    transition_only: bool = False,
) -> list[Violation]:
    """The rules of ``crd`` at ``version`` that ``obj`` breaks; with ``old`` (the stored
    object) transition rules run too. ``transition_only`` keeps just those (what an update
    adds to the checks of a create)."""
    return check_schema_rules(
        _version_schema(crd, version), obj, old, transition_only=transition_only
    )


def check_schema_rules(
    schema: Mapping[str, Any],
    obj: Any,
    old: Any = None,
    *,
    transition_only: bool = False,
) -> list[Violation]:
    """``check_crd_rules`` for a structural schema."""
    value = _with_defaults(obj, schema)
    old_value = _with_defaults(old, schema) if old is not None else None
    walker = _Walker(transition_only=transition_only, update=old is not None)
    walker.walk(schema, value, old_value, (), "", unchanged=old is not None and value == old_value)
    return walker.found


def _with_defaults(value: Any, schema: Mapping[str, Any] | None) -> Any:
    """A copy of ``value`` with the schema's defaults filled in where fields are absent."""
    if not isinstance(schema, Mapping):
        return value
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        out = dict(value)
        for name, sub in properties.items():
            if name not in out and isinstance(sub, Mapping) and "default" in sub:
                out[name] = sub["default"]
        for key, item in out.items():
            sub = properties.get(key, additional if isinstance(additional, Mapping) else None)
            out[key] = _with_defaults(item, sub)
        return out
    if isinstance(value, list):
        return [_with_defaults(item, schema.get("items")) for item in value]
    return value


def _list_key(item: Any, keys: Sequence[str]) -> tuple[Any, ...] | None:
    if not isinstance(item, Mapping):
        return None
    return tuple(repr(item.get(key)) for key in keys)


Outcome = tuple[str | None, str | None]  # (failure message, evaluation error text)


def _canonical(value: Any) -> str | None:
    """Equal JSON-like values give equal text (keys sorted; 1 and 1.0 and true stay apart);
    None for anything JSON cannot write, which is then not remembered."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None


def _memo_key(
    rule: Rule, schema: Mapping[str, Any], value_text: str | None, old: Any, transition: bool
) -> tuple[Any, ...] | None:
    if value_text is None:
        return None
    old_text: str | None = ""
    if transition:
        old_text = "absent" if old is None else _canonical(old)
        if old_text is None:
            return None
    return (rule, id(schema), value_text, old_text)


class RuleMemo:
    """Outcomes of rules on values, at most ``size`` of them (the oldest go first). An entry
    holds its schema node so that the node's ``id`` in the key cannot be reused by another
    while the entry lives."""

    def __init__(self, size: int = 8192) -> None:
        self.size = size
        self._entries: dict[tuple[Any, ...], tuple[Mapping[str, Any], Outcome]] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple[Any, ...], schema: Mapping[str, Any]) -> Outcome | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] is not schema:
            self.misses += 1
            return None
        self.hits += 1
        return entry[1]

    def put(self, key: tuple[Any, ...], schema: Mapping[str, Any], outcome: Outcome) -> None:
        with self._lock:
            while len(self._entries) >= self.size:
                self._entries.pop(next(iter(self._entries)))
            self._entries[key] = (schema, outcome)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)


RULE_MEMO: Final = RuleMemo()


class _Walker:
    def __init__(self, *, transition_only: bool, update: bool) -> None:
        self.transition_only, self.update = transition_only, update
        self.found: list[Violation] = []

    def walk(
        self,
        schema: Mapping[str, Any],
        value: Any,
        old: Any,
        path: tuple[str | int, ...],
        location: str,
        *,
        unchanged: bool,
    ) -> None:
        if value is None:
            return  # rules run on present, non-null values only
        rules = _rules_at(schema, location)
        if rules:
            self._check(schema, rules, value, old, path, unchanged=unchanged)
        if isinstance(value, Mapping):
            self._walk_map(schema, value, old, path, location, unchanged=unchanged)
        elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
            self._walk_list(schema, value, old, path, location, unchanged=unchanged)

    def _walk_map(
        self,
        schema: Mapping[str, Any],
        value: Mapping[str, Any],
        old: Any,
        path: tuple[str | int, ...],
        location: str,
        *,
        unchanged: bool,
    ) -> None:
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        correlatable = isinstance(old, Mapping) and schema.get("x-kubernetes-map-type") != "atomic"
        for key, item in value.items():
            sub = properties.get(key)
            step: str | int = key
            where = _child(location, key)
            if sub is None and isinstance(additional, Mapping):
                sub, step, where = additional, MapKey(key), f"{location}{{*}}"
            if not isinstance(sub, Mapping):
                continue
            old_item = old.get(key) if correlatable else None
            self.walk(
                sub,
                item,
                old_item,
                (*path, step),
                where,
                unchanged=(old_item == item) if old_item is not None else unchanged,
            )

    def _walk_list(
        self,
        schema: Mapping[str, Any],
        value: list[Any],
        old: Any,
        path: tuple[str | int, ...],
        location: str,
        *,
        unchanged: bool,
    ) -> None:
        items = schema["items"]
        keys = schema.get("x-kubernetes-list-map-keys") or []
        old_by_key: dict[tuple[Any, ...], Any] = {}
        if schema.get("x-kubernetes-list-type") == "map" and keys and isinstance(old, list):
            for old_item in old:
                if (identity := _list_key(old_item, keys)) is not None:
                    old_by_key.setdefault(identity, old_item)
        for index, item in enumerate(value):
            identity = _list_key(item, keys) if old_by_key else None
            old_item = old_by_key.get(identity) if identity is not None else None
            self.walk(
                items,
                item,
                old_item,
                (*path, index),
                f"{location}[*]",
                unchanged=(old_item == item) if old_item is not None else unchanged,
            )

    def _check(
        self,
        schema: Mapping[str, Any],
        rules: list[Rule],
        value: Any,
        old: Any,
        path: tuple[str | int, ...],
        *,
        unchanged: bool,
    ) -> None:
        node_type = str(schema.get("type", ""))
        shown = _shown_value(value, node_type)
        cel_self: Any = None
        value_text = _canonical(value)
        for rule in rules:
            try:
                transition = _compiled(rule.rule)[1]
            except CelError as error:
                text = f"rule compile error: {error.detail}"
                self.found.append(Violation(path, rule, text, "Invalid value", f'"{node_type}"'))
                continue
            if self.transition_only and not transition:
                continue
            if transition and old is None and not rule.optional_old_self:
                continue  # nothing to compare with: a create, or an uncorrelatable value
            key = _memo_key(rule, schema, value_text, old if transition else None, transition)
            outcome = RULE_MEMO.get(key, schema) if key is not None else None
            if outcome is None:
                try:
                    if cel_self is None:
                        cel_self = _to_cel(value, schema)
                    outcome = self._outcome(rule, schema, cel_self, old, transition)
                except CelError as error:  # a value CEL cannot hold: an integer past 64 bits
                    outcome = (None, error.detail)
                if key is not None:
                    RULE_MEMO.put(key, schema, outcome)
            failure, error_detail = outcome
            if error_detail is not None:
                self.found.append(
                    Violation(
                        path,
                        rule,
                        f"{error_detail} evaluating rule: {rule.error_text}",
                        "Invalid value",
                        f'"{node_type}"',
                    )
                )
                continue
            if failure is None:
                continue
            if self.update and not transition and unchanged:
                continue  # ratcheting: an unchanged value keeps passing on update
            where = path + _field_path_steps(rule.field_path, schema)
            self.found.append(
                Violation(where, rule, failure, _REASONS.get(rule.reason, "Invalid value"), shown)
            )

    def _outcome(
        self, rule: Rule, schema: Mapping[str, Any], cel_self: Any, old: Any, transition: bool
    ) -> Outcome:
        """Run one rule: (None, None) when it holds, (message, None) when it fails, (None,
        error text) when it cannot be evaluated."""
        activation = {"self": cel_self}
        if transition:
            old_cel = _to_cel(old, schema) if old is not None else None
            activation["oldSelf"] = (
                _Optional(old_cel, present=old is not None) if rule.optional_old_self else old_cel
            )
        try:
            result = _run(rule.rule, activation)
        except CelError as error:
            return None, error.detail
        if isinstance(result, celtypes.BoolType) and bool(result):
            return None, None
        return self._message(rule, activation), None

    @staticmethod
    def _message(rule: Rule, activation: Mapping[str, Any]) -> str:
        if rule.message_expression:
            try:
                text = _from_cel(_run(rule.message_expression, activation))
            except CelError:
                text = None
            if isinstance(text, str) and text.strip() and "\n" not in text.strip():
                return text.strip()
        return rule.default_message


def _shown_value(value: Any, node_type: str) -> str:
    """How ``field.Invalid`` prints the value: the type for objects and lists, else the value."""
    if isinstance(value, Mapping | list) or node_type in ("object", "array"):
        return f'"{node_type or ("object" if isinstance(value, Mapping) else "array")}"'
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_FIELD_PATH_TOKEN: Final = re.compile(r"\.([^.\[\]]+)|\['((?:[^'\\]|\\.)*)'\]")


def _field_path_steps(field_path: str | None, schema: Mapping[str, Any]) -> tuple[str | int, ...]:
    """A rule's ``fieldPath`` (``.spec.x``, ``['a.b']``) as path steps relative to its node."""
    if not field_path:
        return ()
    steps: list[str | int] = []
    node: Any = schema
    for match in _FIELD_PATH_TOKEN.finditer(field_path):
        name = match.group(1) if match.group(1) is not None else match.group(2)
        properties = node.get("properties") if isinstance(node, Mapping) else None
        if properties and name in properties:
            steps.append(name)
            node = properties[name]
        else:
            steps.append(MapKey(name))
            node = node.get("additionalProperties") if isinstance(node, Mapping) else None
    return tuple(steps)
