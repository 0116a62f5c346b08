"""Base views for routes under ``/api/v1/tenants/{tenant_slug}/``.

The tenant is resolved in ``initial()`` through the scoping selector, so a nested endpoint
answers 404 for a tenant the caller may not see before any of its own code runs.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission

from tenants.models import Tenant
from tenants.selectors import tenant_get_for_user


class IsPlatformAdmin(BasePermission):
    message = "Only platform admins may do this."

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_platform_admin)


class ReadMembersWriteAdmins(BasePermission):
    """Anyone who can see the object reads it; only platform admins change it."""

    message = "Only platform admins may change this."

    def has_permission(self, request: Any, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in ("GET", "HEAD", "OPTIONS") or request.user.is_platform_admin


class TenantScopedMixin:
    """Resolves ``self.tenant`` from the URL's ``tenant_slug`` for the requesting user."""

    tenant_url_kwarg = "tenant_slug"
    tenant: Tenant

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        self.tenant = tenant_get_for_user(user=request.user, slug=kwargs[self.tenant_url_kwarg])
