"""Request-scoped context for services, the security headers every response carries, and the
one log line each request leaves."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django_guid.context import guid
from django_prometheus.middleware import (
    PrometheusAfterMiddleware as LibraryPrometheusAfterMiddleware,
)

from core.api.limits import anonymous_body_too_large, declared_length, too_large_message
from core.api.throttling import LoginRateThrottle
from core.http import client_ip as core_client_ip
from tenants.choices import AuditSource
from tenants.services import audit_source

request_log = logging.getLogger("portal.request")
# Asked every few seconds by the kubelet, Prometheus and browsers: logged only when they fail.
QUIET_PATHS = ("/livez", "/readyz", "/healthz", "/metrics", "/static/", "/favicon.ico")


class RequestLogMiddleware:
    """One log line per request, after its response: method, path (without the query string,
    which may carry a token), status, view and seconds taken, with the request id the log
    filter adds (``portal.logs``). A successful probe, scrape or static file is not logged."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        request_id = getattr(request, "correlation_id", None)
        if request_id is not None and guid.get() != request_id:
            # An eager task (CELERY_TASK_ALWAYS_EAGER, debugging) ran inside the request and
            # django-guid cleared the id when it ended: the response and the lines still to
            # come carry the request's again.
            guid.set(request_id)
        status = response.status_code
        if status < 400 and request.path.startswith(QUIET_PATHS):
            return response
        seconds = time.perf_counter() - started
        match = request.resolver_match
        # A decoded path may hold a line break: escaped, it cannot forge a second line.
        path = request.path.encode("unicode_escape").decode("ascii")
        request_log.info(
            "%s %s %s %.3fs",
            request.method,
            path,
            status,
            seconds,
            extra={
                "method": request.method,
                "path": path,
                "status": status,
                "view": match.view_name if match is not None else None,
                "duration_seconds": round(seconds, 6),
            },
        )
        return response


class PrometheusAfterMiddleware(LibraryPrometheusAfterMiddleware):
    """django-prometheus' per-view counts, with the method label always one of HTTP's (the
    library labels its latency histogram with the method as the client sent it: any word would
    make new series)."""

    def label_metric(self, metric: Any, request: Any, response: Any = None, **labels: Any) -> Any:
        if "method" in labels:
            labels["method"] = self._method(request)
        return super().label_metric(metric, request, response, **labels)


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


class ApiBodyLimitMiddleware:
    """Under ``/api/``, a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413 in the API's error
    shape, naming the limit, before anything reads it: Django's own refusal
    (``RequestDataTooBig`` once something reads the body) is the pages' HTML 400."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit: int | None = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if (
            limit is not None
            and request.path.startswith("/api/")
            and declared_length(request.META) > limit
        ):
            body = {"detail": too_large_message(limit), "code": "payload_too_large", "fields": {}}
            return JsonResponse(body, status=413)
        return self.get_response(request)


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
    """django-axes' ``AXES_CLIENT_IP_CALLABLE``: ``core.http.client_ip``, the one rule."""
    return core_client_ip(request)


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


LOGIN_VIEWS = frozenset({"login", "admin:login"})  # the login page and Django admin's


class LoginLimitsMiddleware:
    """The login pages' limits, checked before CSRF reads the form: a POST body over
    ``ANONYMOUS_BODY_MAX_BYTES`` is a 413, and past ``LOGIN_THROTTLE_RATE`` attempts from one
    address (the API token endpoint's bucket too) the answer is 429 with ``Retry-After``, no
    password checked, whatever the username."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in LOGIN_VIEWS:
            return None
        too_large = anonymous_body_too_large(request.META)
        if too_large is not None:
            return _login_refused(request, "Request too large", too_large, status=413)
        throttle = LoginRateThrottle()
        if throttle.allow_attempt(request):
            return None
        seconds = max(1, int(-(-(throttle.wait() or 1) // 1)))
        message = (
            f"Too many login attempts from your address: try again in {seconds} "
            f"second{'s' if seconds != 1 else ''}."
        )
        response = _login_refused(request, "Too many login attempts", message, status=429)
        response.headers["Retry-After"] = str(seconds)
        return response


def _login_refused(request: HttpRequest, title: str, message: str, *, status: int) -> HttpResponse:
    context = {"title": title, "message": message}
    return render(request, "registration/refused.html", context, status=status)
