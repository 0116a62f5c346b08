"""``Authorization: Token <secret>`` for automation, checked against stored digests."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions

from tenants.services import api_token_authenticate


class HashedTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: expected 'Token <secret>'."
            )
        try:
            secret = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid token characters.") from exc
        token = api_token_authenticate(secret=secret)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return self.keyword
