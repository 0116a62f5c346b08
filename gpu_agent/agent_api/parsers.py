"""Bodies of the agent endpoints are at most 1 MiB (PROTOCOL.md): larger ones are refused
with 413 before anything is parsed or stored."""

from __future__ import annotations

import io
from typing import Any

from rest_framework import status
from rest_framework.exceptions import APIException

from core.api.limits import declared_length
from core.api.parsers import JSONParser

MAX_BODY_BYTES = 1024 * 1024


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = f"The body is larger than {MAX_BODY_BYTES} bytes (1 MiB); nothing was stored."
    default_code = "payload_too_large"


def check_content_length(request: Any) -> None:
    """Refuse a declared body over the limit before reading it."""
    if declared_length(request.META) > MAX_BODY_BYTES:
        raise PayloadTooLarge()


class LimitedJSONParser(JSONParser):
    """JSON, read up to the limit: a body without (or with a lying) Content-Length that runs
    past it is refused too."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(data) > MAX_BODY_BYTES:
            raise PayloadTooLarge()
        return super().parse(io.BytesIO(data), media_type, parser_context)
