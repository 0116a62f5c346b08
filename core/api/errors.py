"""One exception handler: every API error is JSON with a message and field-level detail.

Shape: ``{"detail": "...", "code": "...", "fields": {"field": ["why"]}}``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ApplicationError


def _field_name(prefix: str, key: object) -> str:
    """A nested field's path as the services name it: ``items[0].limit``. DRF reports a list's
    errors (nested serializers with ``many=True``, ``ListField``) as ``{index: errors}`` with
    int keys; a dict's keys (``DictField``, from JSON) are strings and join with a dot."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """Turn DRF's nested error detail into {"items[0].limit": ["..."]}, for every endpoint."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            out.update(_flatten(value, _field_name(prefix, key)))
    elif isinstance(detail, list) and detail and all(isinstance(d, dict | list) for d in detail):
        for index, value in enumerate(detail):
            out.update(_flatten(value, f"{prefix}[{index}]"))
    elif isinstance(detail, list):
        out.setdefault(prefix or "non_field_errors", []).extend(str(d) for d in detail)
    else:
        out.setdefault(prefix or "non_field_errors", []).append(str(detail))
    return out


def _summary(fields: dict[str, list[str]]) -> str:
    parts = [f"{name}: {msgs[0]}" for name, msgs in fields.items() if msgs]
    return "; ".join(parts) if parts else "Invalid input."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        body: dict[str, Any] = {"detail": exc.message, "code": exc.code, "fields": exc.fields}
        if exc.extra:
            body["extra"] = exc.extra
        return Response(body, status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        fields = (
            {k: [str(m) for m in v] for k, v in exc.message_dict.items()}
            if hasattr(exc, "error_dict")
            else {"non_field_errors": [str(m) for m in exc.messages]}
        )
        return Response(
            {"detail": _summary(fields), "code": "invalid", "fields": fields},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        response.data = {"detail": _summary(fields), "code": "invalid", "fields": fields}
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail
        code = getattr(detail, "code", exc.default_code)
        response.data = {"detail": str(detail), "code": code, "fields": {}}
    return response
