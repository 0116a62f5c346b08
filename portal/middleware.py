"""Request-scoped context for services, and the security headers every response carries."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from tenants.choices import AuditSource
from tenants.services import audit_source


class AuditSourceMiddleware:
    """Tags every audit row a request writes with where it came from: the REST API, Django
    admin or the portal's pages."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/"):
            source = AuditSource.API
        elif request.path.startswith("/admin/"):
            source = AuditSource.ADMIN
        else:
            source = AuditSource.PORTAL
        token = audit_source.set(source)
        try:
            return self.get_response(request)
        finally:
            audit_source.reset(token)


def content_security_policy(directives: dict[str, list[str]]) -> str:
    """``{"script-src": ["'self'"]}`` -> ``"script-src 'self'"``, directives in the given order."""
    return "; ".join(
        " ".join([name, *sources]) if sources else name for name, sources in directives.items()
    )


class ContentSecurityPolicyMiddleware:
    """Sends ``settings.CONTENT_SECURITY_POLICY`` on every response that has none yet.

    The policy allows scripts from the portal's own origin only (no inline script, no ``on*=``
    handler, no ``eval``): page JavaScript lives in ``static/portal/*.js``, Swagger UI's start-up
    script is served as a file (``SpectacularSwaggerSplitView``), and charts load their library
    from ``static/``. A view that needs something else sets its own header, which is kept.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.header = "Content-Security-Policy"
        if getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", False):
            self.header = "Content-Security-Policy-Report-Only"
        self.policy = content_security_policy(settings.CONTENT_SECURITY_POLICY)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            "Content-Security-Policy" not in response.headers
            and "Content-Security-Policy-Report-Only" not in response.headers
        ):
            response.headers[self.header] = self.policy
        return response


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: ``REMOTE_ADDR``, or behind ``TRUSTED_PROXY_COUNT`` reverse proxies
    the address the outermost of them saw (the ``TRUSTED_PROXY_COUNT``-th entry from the right of
    ``X-Forwarded-For``; entries further left are the client's own claims and never trusted).
    Login lockouts (django-axes) key on it; the API throttles use DRF's ``NUM_PROXIES``, the same
    rule."""
    proxies = int(getattr(settings, "TRUSTED_PROXY_COUNT", 0))
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies > 0 and forwarded:
        hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
        if hops:
            return hops[-min(proxies, len(hops))]
    remote = request.META.get("REMOTE_ADDR")
    return str(remote) if remote else None


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """What a locked-out login gets (django-axes' ``AXES_LOCKOUT_CALLABLE``): 429 with
    ``Retry-After``; the API's error body under ``/api/``, else the login page's lockout page."""
    cool_off: timedelta = settings.AXES_COOLOFF_TIME
    seconds = int(cool_off.total_seconds())
    minutes = max(1, -(-seconds // 60))
    message = (
        f"Too many failed logins for this username from your address: locked for {minutes} "
        f"minute{'s' if minutes != 1 else ''}. Try again later, or ask a platform admin."
    )
    response: HttpResponse
    if request.path.startswith("/api/"):
        body = {"detail": message, "code": "locked_out", "fields": {}}
        response = JsonResponse(body, status=429)
    else:
        context = {"message": message, "minutes": minutes}
        response = render(request, "registration/locked_out.html", context, status=429)
    response.headers["Retry-After"] = str(seconds)
    return response
