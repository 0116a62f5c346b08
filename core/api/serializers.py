"""Serializer base classes shared by every app's API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.settings import api_settings

from core.dates import OUT_OF_RANGE, in_range

# An error names at most this many unknown fields (the first in sorted order) and counts the
# rest: a body of 200,000 made-up keys must not buy an answer ten times its size.
UNKNOWN_FIELDS_LISTED = 20


# DRF's number fields read text with int(), float() and Decimal(), which take any script's
# digits: "\u0663" (Arabic-Indic) or "\uff13" (fullwidth) would be read as 3.
NUMBER_FIELDS = (serializers.IntegerField, serializers.FloatField, serializers.DecimalField)
NOT_ASCII_NUMBER = "A number in ASCII digits (0-9) is required."


def _not_ascii(value: Any) -> bool:
    return isinstance(value, str) and not value.isascii()


def non_ascii_numbers(fields: Any, data: dict[Any, Any]) -> dict[str, Any]:
    """The errors of the number fields (and lists and maps of numbers) in ``data`` given as
    text with other than ASCII characters, by field as DRF reports them."""
    errors: dict[str, Any] = {}
    for name, field in fields.items():
        if field.read_only or name not in data:
            continue
        value = data[name]
        child = getattr(field, "child", None)
        if isinstance(field, NUMBER_FIELDS):
            if _not_ascii(value):
                errors[name] = [NOT_ASCII_NUMBER]
        elif isinstance(child, NUMBER_FIELDS) and isinstance(value, list):
            items = {i: [NOT_ASCII_NUMBER] for i, item in enumerate(value) if _not_ascii(item)}
            if items:
                errors[name] = items
        elif isinstance(child, NUMBER_FIELDS) and isinstance(value, dict):
            entries = {k: [NOT_ASCII_NUMBER] for k, item in value.items() if _not_ascii(item)}
            if entries:
                errors[name] = entries
    return errors


class StrictInputSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know (a typo must not pass
    silently) and numbers written in other than ASCII digits."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return super().to_internal_value(data)
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            errors: dict[str, list[str]] = {
                name: ["Unknown field: this endpoint does not accept it."]
                for name in unknown[:UNKNOWN_FIELDS_LISTED]
            }
            rest = len(unknown) - UNKNOWN_FIELDS_LISTED
            if rest > 0:
                errors[api_settings.NON_FIELD_ERRORS_KEY] = [
                    f"{rest} more unknown fields not listed."
                ]
            raise serializers.ValidationError(errors)
        not_ascii = non_ascii_numbers(self.fields, data)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not_ascii and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **not_ascii}) from exc
            raise
        if not_ascii:
            raise serializers.ValidationError(not_ascii)
        return value


def utc_iso(value: datetime) -> str:
    """What DRF's DateTimeField writes for an aware datetime (UTC, "Z"), without its per-call
    work; for hand-written ``to_representation`` on hot read paths."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


@extend_schema_field({"type": "integer", "deprecated": True})
class DeprecatedIntegerField(serializers.IntegerField):
    """An integer output field kept under its old name for API v1 clients: the OpenAPI
    document marks it ``deprecated`` (its help text names the field that replaces it, which
    carries the same value). Additive changes keep ``/api/v1/``: the old name stays until a
    v2 drops it."""


class BoundedDateTimeField(serializers.DateTimeField):
    """A date-time input from 1970 to 2999 (``core.dates``): year 9999 or 1 is a 400 naming
    the field, never an overflow in the arithmetic after it."""

    def to_internal_value(self, value: Any) -> datetime:
        parsed = super().to_internal_value(value)
        if not in_range(parsed):
            raise serializers.ValidationError(OUT_OF_RANGE, code="out_of_range")
        return parsed
