"""The portal's inbox (the signed-in user's notifications, newest first, and marking them
read) and a tenant's team page (its people; leads and admins add, change and remove them).

Views stay thin: the selectors read only the caller's own notifications (another user's answers
404), the service marks them read. The header's unread count comes from
``tenants.context_processors.inbox``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core import errors
from core.numbers import ascii_whole
from core.pages import error_text
from tenants import selectors as tenant_selectors
from tenants.authentication import caller
from tenants.choices import JoinRequestState, MembershipRole
from tenants.links import PageChecks, closed_links
from tenants.models import JOIN_REQUEST_MESSAGE_MAX, Notification, Tenant
from tenants.namespaces import AdoptionPreview
from tenants.services import (
    TEAM_BULK_MAX,
    BulkAddResult,
    join_request_create,
    join_request_decide,
    join_request_withdraw,
    namespace_adopt,
    namespace_adoption_check,
    notifications_mark_read,
    team_bulk_entries,
    team_bulk_summary,
    team_change_check,
    team_ensure_can_manage,
    team_member_add,
    team_member_remove,
    team_member_role_change,
    team_members_add_many,
)

PAGE_SIZE = 50


@dataclass(frozen=True)
class InboxEntry:
    notification: Notification
    link: str  # the portal page it is about; empty when none, not of this site, or closed
    closed: str = ""  # why the page it was about no longer opens for its reader


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
def inbox(request: HttpRequest, page_checks: PageChecks | None = None) -> HttpResponse:
    """A user's notifications; a link whose page its reader may no longer open is left out and
    says why (``page_checks``: the checks of other apps' pages, handed in by the portal's URLs)."""
    notifications = tenant_selectors.notifications_for_user(user=caller(request))
    page = Paginator(notifications, PAGE_SIZE).get_page(request.GET.get("page"))
    links = {n.pk: _portal_link(n.url) for n in page.object_list}
    paths = [link for link in links.values() if link]
    closed = closed_links(user=caller(request), paths=paths, page_checks=page_checks)
    entries = [
        InboxEntry(n, "", closed[links[n.pk]])
        if links[n.pk] in closed
        else InboxEntry(n, links[n.pk])
        for n in page.object_list
    ]
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


# --- the team page: a tenant's people, and (leads, admins) adding, changing, removing ------


class TeamAddForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=MembershipRole.choices)

    def __init__(self, *args: Any, roles: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        role = self.fields["role"]
        assert isinstance(role, forms.ChoiceField)  # declared above; narrows the type
        role.choices = [(v, label) for v, label in MembershipRole.choices if v in roles]
        role.initial = MembershipRole.MEMBER


class TeamBulkForm(forms.Form):
    people = forms.CharField(widget=forms.Textarea, strip=True, max_length=200 * 256)
    role = forms.ChoiceField(choices=MembershipRole.choices)

    def __init__(self, *args: Any, roles: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        role = self.fields["role"]
        assert isinstance(role, forms.ChoiceField)  # declared above; narrows the type
        role.choices = [(v, label) for v, label in MembershipRole.choices if v in roles]
        role.initial = MembershipRole.MEMBER


def _team_page(
    request: HttpRequest,
    tenant: Tenant,
    form: TeamAddForm | None = None,
    status: int = 200,
    *,
    bulk_form: TeamBulkForm | None = None,
    bulk_results: list[BulkAddResult] | None = None,
    person_caps: Callable[..., list[Any]] | None = None,
) -> HttpResponse:
    user = caller(request)
    roles = tenant_selectors.team_roles_to_give(user=user, tenant=tenant)
    context = {
        "asks": tenant_selectors.join_requests_open(tenant=tenant) if roles else [],
        "bulk_form": bulk_form or TeamBulkForm(roles=roles),
        "bulk_results": bulk_results,
        "bulk_summary": team_bulk_summary(bulk_results) if bulk_results is not None else "",
        "bulk_max": TEAM_BULK_MAX,
        "tenant": tenant,
        "members": tenant_selectors.membership_list_for_tenant(tenant=tenant),
        "roles": [(v, label) for v, label in MembershipRole.choices if v in roles],
        "can_manage": bool(roles),
        "is_admin": user.is_platform_admin,
        "form": form or TeamAddForm(roles=roles),
        "add_users": settings.TEAM_ADD_USERS,
        # Each capped person's cap and use (R14), from the apps above (portal/pages.py).
        "caps": person_caps(tenant=tenant) if person_caps is not None else None,
    }
    return render(request, "tenants/team.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def team(
    request: HttpRequest, slug: str, person_caps: Callable[..., list[Any]] | None = None
) -> HttpResponse:
    """GET: the tenant's people (and, composed by the portal, each capped person's cap and
    use). POST: add one (a lead: members and viewers; an admin: any role); a refused add
    shows the reason beside the field, with the service's status."""
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    if request.method == "GET":
        return _team_page(request, tenant, person_caps=person_caps)
    team_ensure_can_manage(actor=user, tenant=tenant)
    form = TeamAddForm(
        request.POST, roles=tenant_selectors.team_roles_to_give(user=user, tenant=tenant)
    )
    if not form.is_valid():
        return _team_page(request, tenant, form, status=400)
    username, role = form.cleaned_data["username"], form.cleaned_data["role"]
    try:
        team_member_add(tenant=tenant, username=username, role=role, actor=user)
    except (errors.PermissionDenied, errors.NotFound):
        raise  # the page for it
    except errors.ApplicationError as exc:
        field = next((f for f in exc.fields if f in form.fields), "username")
        form.add_error(field, error_text(exc))
        return _team_page(request, tenant, form, status=exc.status_code)
    messages.success(request, f"{username} is now a {role} of {tenant.slug}.")
    return redirect("portal:tenant-team", slug=tenant.slug)


@login_required
@require_http_methods(["GET", "POST"])
def team_bulk_add(request: HttpRequest, slug: str) -> HttpResponse:
    """POST: add several people at once (a pasted list of usernames or emails, one per line
    or comma-separated); the team page shows what became of each line. A list too long, or
    empty, shows the reason beside the field (400) and adds nobody. GET: the team page."""
    if request.method == "GET":
        return team(request, slug)
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    team_ensure_can_manage(actor=user, tenant=tenant)
    roles = tenant_selectors.team_roles_to_give(user=user, tenant=tenant)
    form = TeamBulkForm(request.POST, roles=roles)
    if not form.is_valid():
        return _team_page(request, tenant, status=400, bulk_form=form)
    try:
        results = team_members_add_many(
            tenant=tenant,
            entries=team_bulk_entries(form.cleaned_data["people"]),
            role=form.cleaned_data["role"],
            actor=user,
        )
    except (errors.PermissionDenied, errors.NotFound):
        raise  # the page for it
    except errors.ApplicationError as exc:
        field = next((f for f in exc.fields if f in form.fields), "people")
        form.add_error(field, error_text(exc))
        return _team_page(request, tenant, status=exc.status_code, bulk_form=form)
    fresh = TeamBulkForm(roles=roles)
    return _team_page(request, tenant, bulk_form=fresh, bulk_results=results)


@login_required
@require_http_methods(["GET", "POST"])
def team_join_decision(request: HttpRequest, slug: str, pk: int, decision: str) -> HttpResponse:
    """POST: a lead (or an admin) approves or refuses an ask to join, with an optional reason;
    back to the team page, which says what happened. GET: the team page, where it starts."""
    if request.method == "GET":
        return team(request, slug)
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    approve = decision == "approve"
    ask = join_request_decide(
        tenant=tenant,
        pk=pk,
        actor=user,
        approve=approve,
        reason=request.POST.get("reason", ""),
    )
    who = ask.user.username
    if approve:
        messages.success(request, f"{who} is now a member of {tenant.slug}.")
    else:
        messages.success(request, f"{who}'s ask to join {tenant.slug} was refused.")
    return redirect("portal:tenant-team", slug=tenant.slug)


class JoinForm(forms.Form):
    message = forms.CharField(
        widget=forms.Textarea, required=False, strip=True, max_length=JOIN_REQUEST_MESSAGE_MAX
    )


def _join_page(
    request: HttpRequest, tenant: Tenant, form: JoinForm | None = None, status: int = 200
) -> HttpResponse:
    user = caller(request)
    asks = list(tenant_selectors.join_requests_for_user(user=user, tenant=tenant).filter(user=user))
    context = {
        "tenant": tenant,
        "role": tenant_selectors.membership_role(user=user, tenant=tenant),
        "asks": asks,
        "waiting": next((a for a in asks if a.state == JoinRequestState.OPEN), None),
        "form": form or JoinForm(),
        "message_max": JOIN_REQUEST_MESSAGE_MAX,
    }
    return render(request, "tenants/join.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def team_join(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: ask to join the tenant a slug names (any signed-in person; a tenant archived or
    unknown is a 404), with the asker's own asks to it. POST: send the ask (an optional message);
    its leads are told. One already waiting, or being in the team already: 409, said so."""
    user = caller(request)
    if request.method == "GET":  # also where one's asks to an archived team still show
        return _join_page(
            request, tenant_selectors.join_request_tenant_for_user(user=user, slug=slug)
        )
    tenant = tenant_selectors.tenant_get_to_join(slug=slug)
    form = JoinForm(request.POST)
    if not form.is_valid():
        return _join_page(request, tenant, form, status=400)
    try:
        join_request_create(tenant=tenant, user=user, message=form.cleaned_data["message"])
    except errors.NotFound:
        raise
    except errors.ApplicationError as exc:
        form.add_error("message" if "message" in exc.fields else None, error_text(exc))
        return _join_page(request, tenant, form, status=exc.status_code)
    messages.success(request, f"Your ask to join {tenant.slug} was sent to its leads.")
    return redirect("portal:tenant-join", slug=tenant.slug)


@login_required
@require_http_methods(["GET", "POST"])
def team_join_withdraw(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """POST: the asker takes their ask back while it waits (anyone else's: 404). GET: the join
    page, where it starts; outside the team, another's ask answers 404 as a missing one."""
    user = caller(request)
    tenant = tenant_selectors.join_request_tenant_for_user(
        user=user, slug=slug, not_found=tenant_selectors.JOIN_REQUEST_NOT_FOUND
    )
    tenant_selectors.join_request_ensure_reachable(user=user, tenant=tenant, pk=pk)
    if request.method == "GET":
        return _join_page(request, tenant)
    join_request_withdraw(tenant=tenant, pk=pk, actor=user)
    messages.success(request, f"Your ask to join {tenant.slug} was withdrawn.")
    return redirect("portal:tenant-join", slug=tenant.slug)


def _confirmed_change(
    request: HttpRequest, slug: str, username: str, *, role: str | None
) -> HttpResponse:
    """Both team changes ask first: a POST without ``confirm=yes`` shows what will happen
    (after the same checks as the change, so a refusal shows at once) and changes nothing."""
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    membership = team_change_check(tenant=tenant, username=username, actor=user, role=role)
    if request.POST.get("confirm") != "yes":
        context = {"tenant": tenant, "membership": membership, "role": role}
        return render(request, "tenants/team_confirm.html", context)
    if role is None:
        team_member_remove(tenant=tenant, username=username, actor=user)
        messages.success(request, f"{username} was removed from {tenant.slug}.")
    else:
        team_member_role_change(tenant=tenant, username=username, role=role, actor=user)
        messages.success(request, f"{username} is now a {role} of {tenant.slug}.")
    return redirect("portal:tenant-team", slug=tenant.slug)


@login_required
@require_http_methods(["GET", "POST"])
def team_member_role(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """POST: change a role (after a confirmation). GET (a bookmarked or reloaded confirmation):
    the team page, where the change starts; outsiders get 404 as on every tenant route."""
    if request.method == "GET":
        return team(request, slug)
    role = request.POST.get("role", "")  # checked by the service: 400 naming role
    return _confirmed_change(request, slug, username, role=role)


@login_required
@require_http_methods(["GET", "POST"])
def team_member_removal(request: HttpRequest, slug: str, username: str) -> HttpResponse:
    """POST: remove someone (after a confirmation). GET: the team page, as above."""
    if request.method == "GET":
        return team(request, slug)
    return _confirmed_change(request, slug, username, role=None)


@login_required
@require_http_methods(["GET", "POST"])
def namespace_adoption(
    request: HttpRequest, slug: str, name: str, *, preview: AdoptionPreview
) -> HttpResponse:
    """Adopting a namespace that existed on a cluster before the portal (platform admins).
    GET (and a POST without ``confirm=yes``): what the push would write there, cluster by
    cluster, and a button to confirm; changes nothing. POST with ``confirm=yes``: adopt it
    (audited); the next push labels it and writes. Anyone else gets 403, whichever tenant
    the URL names (asked before the tenant is looked up, as the console's pages do)."""
    user = caller(request)
    if not user.is_platform_admin:
        raise errors.PermissionDenied("Only a platform admin adopts a namespace.")
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    namespace = namespace_adoption_check(tenant=tenant, name=name)
    if request.method == "POST" and request.POST.get("confirm") == "yes":
        namespace_adopt(tenant=tenant, name=name, actor=user)
        messages.success(
            request, f"{name} is adopted: the next push labels it and writes the portal's objects."
        )
        return redirect("portal:tenant-detail", slug=tenant.slug)
    context = {
        "tenant": tenant,
        "namespace": namespace,
        "clusters": preview(tenant=tenant, namespace=namespace),
    }
    return render(request, "tenants/namespace_adopt.html", context)
