"""Template context for every portal page."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from tenants import selectors as tenant_selectors
from tenants.models import User


def inbox(request: HttpRequest) -> dict[str, object]:
    """``inbox_unread_count``: the signed-in user's unread notifications, for the header.

    Lazy: the COUNT query runs once, and only when a template reads the value; an anonymous
    visitor (or a request without a user, as on some error pages) costs no query at all."""

    def unread() -> int:
        user = getattr(request, "user", None)
        if not isinstance(user, User):  # AnonymousUser, or no auth middleware ran
            return 0
        return tenant_selectors.unread_notification_count(user=user)

    return {"inbox_unread_count": SimpleLazyObject(unread)}


def address_tenant(request: HttpRequest) -> dict[str, object]:
    """``address_tenant``: the tenant the page's address names (its ``slug``), when the user
    may see it, else None: the way back an error page offers ("Back to Team A").

    Lazy, as above: only a template that reads it (the error pages) costs the query, and a
    tenant the user may not see is None, as one that does not exist."""

    def tenant() -> object:
        user = getattr(request, "user", None)
        match = getattr(request, "resolver_match", None)
        slug = match.kwargs.get("slug") if match is not None else None
        if not isinstance(user, User) or not isinstance(slug, str):
            return None
        return (
            tenant_selectors.tenant_list_for_user(user=user, archived=None)
            .filter(slug=slug)
            .first()
        )

    return {"address_tenant": SimpleLazyObject(tenant)}
