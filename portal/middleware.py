"""Request-scoped context for services."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

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
