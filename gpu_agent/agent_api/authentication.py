"""``Authorization: Bearer <node token>`` for the agents' endpoints, and nowhere else.

Node tokens live in their own table: the API's default authentication (user tokens sent as
``Token <secret>``, sessions) never finds them, and the agents' endpoints use only this class,
so a user's token or session is refused there (401 / 403) and a node's token elsewhere (401).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions
from rest_framework.permissions import BasePermission

from core.api.authentication import header_secret
from gpu_agent.models import Node, NodeToken
from gpu_agent.services.nodes import node_token_authenticate


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"
    with_work = False  # also read the node's open work (``node_token_authenticate``)

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        secret = header_secret(request, self.keyword, shape="Bearer <node token>")
        if secret is None:
            return None
        token = node_token_authenticate(secret=secret, with_work=self.with_work)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked node token.")
        # No user: the request is bound to the node (request.auth); every user-facing
        # permission (IsAuthenticated, IsPlatformAdmin) refuses it.
        return AnonymousUser(), token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="agent"'


class NodeTokenWithWorkAuthentication(NodeTokenAuthentication):
    """The report endpoint's: the token lookup also reads the node's open work, so that a
    quiet node's report needs no query of its own."""

    with_work = True


class IsNodeAgent(BasePermission):
    message = "Only a node's agent (with its node token) may call this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return isinstance(request.auth, NodeToken)


def calling_node(request: Any) -> Node:
    """The node whose token authenticated ``request`` (after ``IsNodeAgent``)."""
    token = request.auth
    if not isinstance(token, NodeToken):
        raise exceptions.NotAuthenticated()
    return token.node
