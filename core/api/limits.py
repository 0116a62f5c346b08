"""How large a body an endpoint reads: endpoints open to anonymous callers (the API's token
endpoint, an agent's registration, the login page) take at most
``settings.ANONYMOUS_BODY_MAX_BYTES`` (16 KiB unless set), refused with 413 before anything
parses the body.

The declared ``Content-Length`` is all that needs checking: Django reads no more of a body
than it declares (none without one).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The body is too large; nothing was read."
    default_code = "payload_too_large"


def declared_length(meta: Any) -> int:
    """The request's ``Content-Length`` (0 when absent or not a number, as Django reads it)."""
    raw = str(meta.get("CONTENT_LENGTH") or "").strip()
    return int(raw) if raw.isascii() and raw.isdigit() else 0


def too_large_message(limit: int) -> str:
    kib = f" ({limit // 1024} KiB)" if limit % 1024 == 0 else ""
    return f"The body is larger than {limit} bytes{kib}, this endpoint's limit; nothing was read."


def anonymous_body_too_large(meta: Any) -> str | None:
    """Why a body is refused on an endpoint open to anonymous callers, or None."""
    limit: int = settings.ANONYMOUS_BODY_MAX_BYTES
    return too_large_message(limit) if declared_length(meta) > limit else None


class AnonymousBodyLimit:
    """A DRF view mixin for endpoints anyone may call: a body over the anonymous limit is a 413
    before authentication, throttling or parsing."""

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        message = anonymous_body_too_large(request.META)
        if message is not None:
            raise PayloadTooLarge(message)
        super().initial(request, *args, **kwargs)  # type: ignore[misc]  # a mixin of APIView


class BodyLimit:
    """A DRF view mixin for an endpoint that reads at most ``body_max_bytes``: a larger body is
    a 413 naming the limit before authentication, throttling or parsing."""

    body_max_bytes: int

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        if declared_length(request.META) > self.body_max_bytes:
            raise PayloadTooLarge(too_large_message(self.body_max_bytes))
        super().initial(request, *args, **kwargs)  # type: ignore[misc]  # a mixin of APIView
