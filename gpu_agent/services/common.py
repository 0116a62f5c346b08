"""Helpers the fleet's service modules share: how times are written in messages and audit
rows, and the length check of the free text agents send."""

from __future__ import annotations

from datetime import UTC, datetime

from core.errors import ValidationFailed

MESSAGE_MAX = 2000  # an agent's message with a layout result or a probe result


def iso(value: datetime | None) -> str:
    """``value`` in UTC as ``2026-12-03T08:00:00Z`` ("never" for None)."""
    if value is None:
        return "never"
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_length(field_name: str, value: str, max_length: int) -> None:
    """400 naming ``field_name`` when ``value`` is longer than ``max_length``."""
    if len(value) > max_length:
        raise ValidationFailed.for_field(
            field_name, f"is {len(value)} characters long; at most {max_length} are allowed."
        )
