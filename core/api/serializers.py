"""Serializer base classes shared by every app's API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers


class StrictInputSerializer(serializers.Serializer):
    """An input serializer that refuses fields it does not know (a typo must not pass silently)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown field: this endpoint does not accept it."] for name in unknown}
                )
        return super().to_internal_value(data)


def utc_iso(value: datetime) -> str:
    """What DRF's DateTimeField writes for an aware datetime (UTC, "Z"), without its per-call
    work; for hand-written ``to_representation`` on hot read paths."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
