"""Helpers the fleet's service modules share: how times are written in messages and audit
rows, and the length check of the free text agents send."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from core.errors import ValidationFailed
from tenants.models import AuditEvent

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


def node_audit_id(name: str) -> str:
    """The audit log's object id for node ``name``: the name, or for a name longer than the
    audit log's column (a node name may have 253 characters, the column 200) its start and a
    hash of the whole, so that two long names never share an id."""
    limit = AuditEvent._meta.get_field("object_id").max_length or 200
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    return f"{name[: limit - len(digest) - 1]}~{digest}"
