"""The portal's inbox: the signed-in user's notifications, newest first, and marking them read.

Views stay thin: the selectors read only the caller's own notifications (another user's answers
404), the service marks them read. The header's unread count comes from
``tenants.context_processors.inbox``.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from core.numbers import ascii_whole
from tenants import selectors as tenant_selectors
from tenants.api.base import caller
from tenants.models import Notification
from tenants.services import notifications_mark_read

PAGE_SIZE = 50


@dataclass(frozen=True)
class InboxEntry:
    notification: Notification
    link: str  # the portal page it is about; empty when none, or not a path of this site


def _portal_link(url: str) -> str:
    """Only a path on this site becomes a link (never another host or a ``javascript:`` URL)."""
    if url.startswith("/") and url_has_allowed_host_and_scheme(url, allowed_hosts=None):
        return url
    return ""


def _back_to_inbox(request: HttpRequest) -> HttpResponseRedirect:
    """The inbox page the form was posted from (``page`` in the form), else the first."""
    target = reverse("portal:inbox")
    page = request.POST.get("page", "")
    number = ascii_whole(page)  # nothing but ASCII digits reaches the URL
    if number is not None and number > 1:
        target = f"{target}?page={number}"
    return HttpResponseRedirect(target)


@login_required
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    notifications = tenant_selectors.notifications_for_user(user=caller(request))
    page = Paginator(notifications, PAGE_SIZE).get_page(request.GET.get("page"))
    entries = [InboxEntry(n, _portal_link(n.url)) for n in page.object_list]
    return render(request, "tenants/inbox.html", {"page": page, "entries": entries})


@login_required
@require_POST
def inbox_mark_read(request: HttpRequest, pk: int) -> HttpResponse:
    user = caller(request)
    notification = tenant_selectors.notification_get_for_user(user=user, pk=pk)
    notifications_mark_read(user=user, ids=[notification.pk])
    return _back_to_inbox(request)


@login_required
@require_POST
def inbox_mark_all_read(request: HttpRequest) -> HttpResponse:
    marked = notifications_mark_read(user=caller(request))
    if marked:
        messages.success(request, f"Marked {marked} notification{'s' if marked != 1 else ''} read.")
    return _back_to_inbox(request)
