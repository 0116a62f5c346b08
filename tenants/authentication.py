"""Who calls: ``Authorization: Token <secret>`` for automation, checked against stored
digests, and the authenticated user behind a request (``caller``, for pages and the API)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions

from core.api.authentication import header_secret
from tenants.models import User
from tenants.services import api_token_authenticate


class HashedTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        secret = header_secret(request, self.keyword, shape="Token <secret>")
        if secret is None:
            return None
        token = api_token_authenticate(secret=secret)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return self.keyword


def caller(request: Any) -> User:
    """The authenticated user behind ``request`` (API or page). Views call this after their
    permission checks have refused anonymous callers; it refuses them again if one slips by."""
    user = request.user
    if not isinstance(user, User):
        raise exceptions.NotAuthenticated()
    return user
