"""Domain errors. Services raise these; one DRF exception handler maps them to 400 / 404 / 409.

This module (like ``core/api/``) is plumbing that imports no app, so every app may use it.
"""

from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    """A business rule refused the operation. ``fields`` maps a field to its messages."""

    status_code = 400
    code = "invalid"

    def __init__(
        self, message: str, *, fields: dict[str, list[str]] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields or {}
        self.extra = extra

    @classmethod
    def for_field(cls, field: str, message: str, **extra: Any) -> ApplicationError:
        return cls(message, fields={field: [message]}, **extra)


class ValidationFailed(ApplicationError):
    code = "invalid"


class NotFound(ApplicationError):
    status_code = 404
    code = "not_found"


class Conflict(ApplicationError):
    status_code = 409
    code = "conflict"


class PermissionDenied(ApplicationError):
    status_code = 403
    code = "permission_denied"
