"""The part every token scheme shares: reading ``Authorization: <keyword> <secret>``."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions


def header_secret(request: Any, keyword: str, *, shape: str) -> str | None:
    """The secret after ``keyword`` in the Authorization header; None when the header is for
    another scheme (so the next authentication class can try). A malformed header is refused
    with ``shape`` ("Token <secret>") in the message."""
    header = authentication.get_authorization_header(request).split()
    if not header or header[0].lower() != keyword.lower().encode():
        return None
    if len(header) != 2:
        raise exceptions.AuthenticationFailed(f"Invalid Authorization header: expected '{shape}'.")
    try:
        return str(header[1].decode())
    except UnicodeError as exc:
        raise exceptions.AuthenticationFailed("Invalid token characters.") from exc
