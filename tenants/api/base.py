"""Base views for routes under ``/api/v1/tenants/{tenant_slug}/``.

The tenant is resolved through the scoping selector before the permission checks, so a nested
endpoint answers 404 to every method, reads and writes alike, for a tenant the caller may not
see ("another tenant's slug answers 404, not 403"), before any of its own code runs.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

from tenants.authentication import caller as caller  # where views of every app import it from
from tenants.models import Tenant
from tenants.selectors import tenant_get_for_user


class IsPlatformAdmin(BasePermission):
    message = "Only platform admins may do this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(
            request.user and request.user.is_authenticated and request.user.is_platform_admin
        )


class ReadMembersWriteAdmins(BasePermission):
    """Anyone who can see the object reads it; only platform admins change it."""

    message = "Only platform admins may change this."

    def has_permission(self, request: Any, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or request.user.is_platform_admin


class TenantScopedMixin:
    """Resolves ``self.tenant`` from the URL's ``tenant_slug`` for the requesting user.

    Authentication comes first (401 for anonymous callers), then the tenant (404 when the
    caller may not see it), then the permissions (403 for a member who may not do this)."""

    tenant_url_kwarg = "tenant_slug"
    tenant: Tenant

    def check_permissions(self, request: Any) -> None:
        slug = self.kwargs.get(self.tenant_url_kwarg)  # type: ignore[attr-defined]
        if slug is not None and request.user.is_authenticated:
            self.tenant = tenant_get_for_user(user=request.user, slug=slug)
        super().check_permissions(request)  # type: ignore[misc]
        if slug is not None and not hasattr(self, "tenant"):  # a view open to anonymous callers
            self.tenant = tenant_get_for_user(user=request.user, slug=slug)
