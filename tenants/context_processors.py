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
