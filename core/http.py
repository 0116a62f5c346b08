"""Who is calling: the client's address, the one rule every per-address limit uses."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def client_ip(request: Any) -> str | None:
    """The client's address: ``REMOTE_ADDR``, or behind ``TRUSTED_PROXY_COUNT`` reverse proxies
    the address the outermost of them saw (the ``TRUSTED_PROXY_COUNT``-th entry from the right of
    ``X-Forwarded-For``; entries further left are the client's own claims and never trusted).
    Login lockouts (django-axes), the login rate limit and the API's anonymous rate limit key on
    it. Any object with ``META`` will do (a Django or a DRF request)."""
    proxies = int(getattr(settings, "TRUSTED_PROXY_COUNT", 0))
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies > 0 and forwarded:
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            return hops[-min(proxies, len(hops))]
    remote = request.META.get("REMOTE_ADDR")
    return str(remote) if remote else None
