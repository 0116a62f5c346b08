"""One rate limit for the whole API, counted per caller in the cache (Redis in production).

Who calls decides the bucket and its rate (``settings.API_THROTTLE_RATES``):

* a token whose model is named in ``settings.API_THROTTLE_AUTH_SCOPES`` (an automation user's
  API token: ``token``; a GPU node's token: ``agent``): one bucket per token;
* a signed-in browser session: ``user``, one bucket per user;
* anyone else (the few endpoints open to anonymous callers): ``anon``, one bucket per client
  address (``core.http.client_ip``: behind ``TRUSTED_PROXY_COUNT`` reverse proxies, read from
  ``X-Forwarded-For``).

It is the default throttle class, so every endpoint, including ones added later, is limited
without naming it; a view with its own ``throttle_classes`` (the login endpoint) replaces it.
Over the limit the answer is 429 with ``Retry-After`` (seconds) and the project's error body.
Like the rest of ``core/api/`` it imports no app: token models are named by their label.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from core.http import client_ip


def caller_scope(request: Any) -> tuple[str, str]:
    """(scope, identity) of the bucket a request counts against; the identity is empty for an
    anonymous caller, whose address is used."""
    auth = request.auth
    label = getattr(getattr(auth, "_meta", None), "label", None)
    if label is not None:
        scope = settings.API_THROTTLE_AUTH_SCOPES.get(label)
        if scope is not None:
            return scope, f"{label}:{auth.pk}"
    user = request.user
    if user is not None and user.is_authenticated:
        return "user", f"user:{user.pk}"
    return "anon", ""


class ApiRateThrottle(SimpleRateThrottle):
    cache_format = "throttle_%(scope)s_%(ident)s"

    def __init__(self) -> None:  # the rate depends on the caller: chosen per request
        self.rate: str | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        if not settings.API_THROTTLE_ENABLED:
            return True
        self.scope, ident = caller_scope(request)
        self.rate = settings.API_THROTTLE_RATES.get(self.scope)
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self.ident = ident or self.get_ident(request)
        return super().allow_request(request, view)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.ident}

    def get_ident(self, request: Any) -> str:
        return client_ip(request) or ""


class LoginRateThrottle(SimpleRateThrottle):
    """Password checks per client address (``settings.LOGIN_THROTTLE_RATE``), whatever the
    username: one bucket for the API's token endpoint and the login page, so that spraying
    usernames from one address gets that many answers a minute and no more. django-axes locks a
    username and address pair after a few failures; this limits the pairs one address may try.

    A Django ``HttpRequest`` will do (the login page): only ``META`` is read."""

    scope = "login"
    cache_format = "throttle_%(scope)s_%(ident)s"

    def get_rate(self) -> str:
        rate: str = settings.LOGIN_THROTTLE_RATE
        return rate

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def allow_attempt(self, request: Any) -> bool:
        """For a Django view (the login pages): counts the attempt like ``allow_request``."""
        no_view: Any = None  # nothing here reads the view
        return bool(self.allow_request(request, no_view))

    def get_ident(self, request: Any) -> str:
        return client_ip(request) or ""
