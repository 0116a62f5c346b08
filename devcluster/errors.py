"""Kubernetes ``Status`` errors: every failure the stand-in answers is one of these."""

from __future__ import annotations

from typing import Any

# HTTP status -> the StatusReason a real API server sends with it.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """An error answered as a ``Status`` object with ``code`` as the HTTP status."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.message, reason=self.reason, details=self.details)


def status_body(
    code: int, message: str, *, reason: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def qualified(plural: str, group: str) -> str:
    """``clusterqueues.kueue.x-k8s.io`` or, for the core group, ``namespaces``."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> ApiError:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(404, f'{qualified(plural, group)} "{name}" not found', details=details)


def already_exists(plural: str, group: str, name: str) -> ApiError:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(
        409,
        f'{qualified(plural, group)} "{name}" already exists',
        reason="AlreadyExists",
        details=details,
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        details=details,
    )


def forbidden(plural: str, group: str, name: str, why: str) -> ApiError:
    """403 as admission plugins refuse: ``pods "p" is forbidden: <why>``."""
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(
        403, f'{qualified(plural, group)} "{name}" is forbidden: {why}', details=details
    )


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 with ``details.causes``; the message lists the causes as a real server does."""
    described = [
        f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes
    ]
    listed = described[0] if len(described) == 1 else "[" + ", ".join(described) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(422, f'{qualified_kind} "{name}" is invalid: {listed}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)
