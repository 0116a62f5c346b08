"""Filters every list endpoint shares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django import forms
from django_filters import filters
from django_filters.fields import IsoDateTimeField


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, turned into UTC before it reaches the database: PostgreSQL refuses
    offsets beyond +-15:59 that Python accepts, and a time near year 1 or 9999 may not exist
    in UTC. Both are bad input (400 naming the parameter), never a server error."""

    def clean(self, value: Any) -> datetime | None:
        cleaned = super().clean(value)
        if cleaned is None:
            return None
        try:
            return cleaned.astimezone(UTC)
        except OverflowError as exc:
            raise forms.ValidationError("This time is outside the supported range.") from exc


class UtcIsoDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField
