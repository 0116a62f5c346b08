"""Kubernetes resource quantities as the API server reads, adds and prints them.

A :class:`Quantity` keeps its exact value and the format it was written in (``DecimalSI``,
``BinarySI``, ``DecimalExponent``); ``str()`` is Kubernetes' canonical form (``"500m"``,
``"1k"``, ``"256Mi"``), which is what admission messages and ``status.used`` show. Values finer
than 1n are rounded up, as the API server does. Standard library only.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation, localcontext
from typing import Any

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX = {power: suffix for suffix, power in _BINARY.items()}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[a-zA-Z]*)$")
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    pass


@dataclass(frozen=True)
class Quantity:
    value: Decimal
    format: str = DECIMAL_SI

    @classmethod
    def parse(cls, text: Any) -> Quantity:
        """``"500m"``, ``"64Gi"``, ``2``; :class:`QuantityError` for anything else."""
        if isinstance(text, Quantity):
            return text
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise QuantityError(f"quantities must match the regular expression: {text!r}")
        return _parsed(text)

    @classmethod
    def _parse(cls, text: str | int | float) -> Quantity:
        raw = str(text).strip()
        match = _QUANTITY.match(raw)
        if match is None:
            raise QuantityError(
                f"quantities must match the regular expression "
                f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {raw!r}"
            )
        number, suffix = match.groups()
        with localcontext() as context:
            context.prec = 80
            try:
                mantissa = Decimal(number)
            except InvalidOperation as error:  # pragma: no cover - the pattern allows no other
                raise QuantityError(f"not a quantity: {raw!r}") from error
            if suffix in _BINARY:
                return cls(_round_nano(mantissa * 1024 ** _BINARY[suffix]), BINARY_SI)
            if suffix in _DECIMAL:
                return cls(_round_nano(mantissa.scaleb(_DECIMAL[suffix])), DECIMAL_SI)
            if suffix[:1] in ("e", "E"):
                return cls(_round_nano(mantissa.scaleb(int(suffix[1:]))), DECIMAL_EXPONENT)
        raise QuantityError(f"unable to parse quantity's suffix: {raw!r}")

    @classmethod
    def of(cls, value: Decimal | int, format: str = DECIMAL_SI) -> Quantity:
        return cls(Decimal(value), format)

    def __add__(self, other: Quantity) -> Quantity:
        # Go's Quantity.Add keeps the receiver's format unless the receiver is zero.
        return Quantity(self.value + other.value, self.format if self.value else other.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.format if self.value else other.format)

    def __str__(self) -> str:
        return canonical(self.value, self.format)

    def milli_value(self) -> int:
        """Go's ``MilliValue()``: thousandths, rounded up."""
        return int((self.value * 1000).to_integral_value(rounding=ROUND_CEILING))

    def int_value(self) -> int:
        """Go's ``Value()``: whole units, rounded up."""
        return int(self.value.to_integral_value(rounding=ROUND_CEILING))


# Quantities are immutable: the stand-in's quota admission reads every quota's spec.hard on
# every write in its namespace, so the same few texts are parsed over and over. typed=True
# keeps 1 and 1.0 apart (their formats print differently).
@functools.lru_cache(maxsize=4096, typed=True)
def _parsed(text: str | int | float) -> Quantity:
    return Quantity._parse(text)


def _round_nano(value: Decimal) -> Decimal:
    if value == value.quantize(_NANO, rounding=ROUND_CEILING):
        return value
    return value.quantize(_NANO, rounding=ROUND_CEILING)


def _strip_factors(integer: int, base: int, limit: int) -> tuple[int, int]:
    exponent = 0
    while integer and integer % base == 0 and exponent < limit:
        integer //= base
        exponent += 1
    return integer, exponent


def canonical(value: Decimal, format: str = DECIMAL_SI) -> str:
    """Kubernetes' canonical text: the largest exact suffix, ``m``/``u``/``n`` below one."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = abs(value)
    whole = value == value.to_integral_value()
    if format == BINARY_SI and whole and value >= 1024:
        mantissa, power = _strip_factors(int(value), 1024, 6)
        return f"{sign}{mantissa}{_BINARY_SUFFIX.get(power, '')}"
    # Decimal: mantissa * 10**exponent with the exponent a multiple of 3, from -9 up.
    nanos = int(value.scaleb(9).to_integral_value(rounding=ROUND_CEILING))
    mantissa, exponent = _strip_factors(nanos, 10, 27)
    exponent -= 9
    shift = exponent % 3  # lower the exponent to a multiple of 3
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if format == DECIMAL_EXPONENT:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    while exponent > 18:
        mantissa, exponent = mantissa * 1000, exponent - 3
    return f"{sign}{mantissa}{_DECIMAL_SUFFIX[exponent]}"


ResourceList = dict[str, Quantity]


def resource_list(raw: Any) -> ResourceList:
    """A ``requests``/``limits``/``hard`` map as quantities (unparseable values are skipped:
    the stand-in does not validate Pods and PVCs)."""
    result: ResourceList = {}
    for name, text in (raw or {}).items() if isinstance(raw, dict) else ():
        try:
            result[str(name)] = Quantity.parse(text)
        except QuantityError:
            continue
    return result


def add(total: ResourceList, more: ResourceList) -> ResourceList:
    result = dict(total)
    for name, quantity in more.items():
        result[name] = result[name] + quantity if name in result else quantity
    return result


def maximum(current: ResourceList, other: ResourceList) -> ResourceList:
    result = dict(current)
    for name, quantity in other.items():
        if name not in result or quantity.value > result[name].value:
            result[name] = quantity
    return result


def pretty(resources: ResourceList) -> str:
    """``a=1,b=2`` in key order, as quota messages print resource lists."""
    return ",".join(f"{name}={resources[name]}" for name in sorted(resources))
