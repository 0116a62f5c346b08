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


class StrictInputSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know (a typo must not pass silently)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
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
        return super().to_internal_value(data)


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
