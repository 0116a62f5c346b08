"""Bodies of the agent endpoints are at most 1 MiB (PROTOCOL.md): larger ones are refused
with 413 before anything is parsed or stored. A number without a fraction (``1.0``, ``1e3``)
is read as the integer it is: the report's JSON Schema counts it as one, and it is stored as
one."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.utils.json import strict_constant

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


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


class LimitedJSONParser(JSONParser):
    """JSON, read up to the limit: a body without (or with a lying) Content-Length that runs
    past it is refused too. As DRF's parser otherwise (strict: no NaN or Infinity), and a
    400 for a document nested too deeply."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        data = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(data) > MAX_BODY_BYTES:
            raise PayloadTooLarge()
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return json.loads(
                data.decode(encoding), parse_float=_number, parse_constant=strict_constant
            )
        except RecursionError as exc:
            raise ParseError("JSON parse error - the document is nested too deeply.") from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
