"""Reads for tenant data. Each takes the actor and sees only what the actor may see."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import CharField, F, Func, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Concat

from core.errors import NotFound
from tenants.choices import JoinRequestState, MembershipRole
from tenants.models import (
    ApiToken,
    AuditEvent,
    JoinRequest,
    Membership,
    Namespace,
    Notification,
    Tenant,
    User,
)
from tenants.validators import DNS1123_LABEL_REGEX


def tenant_list_for_user(*, user: User, archived: bool | None = False) -> QuerySet[Tenant]:
    """The tenants ``user`` sees; archived ones only with ``archived=True`` (only those) or
    ``archived=None`` (all)."""
    tenants = Tenant.objects.visible_to(user).select_related("parent").order_by("slug")
    if archived is not None:
        tenants = tenants.filter(archived_at__isnull=not archived)
    return tenants


TENANT_ROW_FIELDS = (
    "id", "slug", "display_name", "description", "parent__slug", "cohort",
    "default_priority", "state", "isolation_level", "archived_at", "production_priority_allowed",
    "max_run_time_hours", "gpu_unit_cap", "pod_bandwidth_max",
    "created_at", "updated_at",
)  # fmt: skip


TENANT_ROW_TIMES = ("archived_at", "created_at", "updated_at")


class UtcIso(Func):
    """PostgreSQL writes an aware date-time as ``core.api.serializers.utc_iso`` does (and DRF's
    DateTimeField): "2026-12-07T22:11:28.241123Z", the fraction left out when it is zero; NULL
    stays NULL. The tenants page reads ~100 of them a page: parsing each into a datetime and
    writing it out again cost more than the page's query."""

    template = (
        "to_char(%(expressions)s AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN "
        "date_trunc('second', %(expressions)s) = %(expressions)s THEN '' ELSE "
        "to_char(%(expressions)s AT TIME ZONE 'UTC', '.US') END || 'Z'"
    )
    output_field = CharField()


def tenant_rows_for_user(*, user: User) -> QuerySet[Tenant, dict[str, Any]]:
    """The API's tenant list as plain rows: a page of 50 model instances (with their parents)
    cost more than the queries themselves. On PostgreSQL each row carries its namespace names
    (an array subquery); elsewhere ``with_namespace_names`` adds them in one more query."""
    rows = Tenant.objects.visible_to(user).order_by("slug")
    if connection.vendor == "postgresql":
        from django.contrib.postgres.expressions import ArraySubquery

        names = Namespace.objects.filter(tenant=OuterRef("pk")).order_by("name").values("name")
        times = {f"{name}_iso": UtcIso(F(name)) for name in TENANT_ROW_TIMES}
        rows = rows.annotate(namespace_names=ArraySubquery(names), **times)
        fields = [f for f in TENANT_ROW_FIELDS if f not in TENANT_ROW_TIMES]
        return rows.values(*fields, "namespace_names", *times)
    return rows.values(*TENANT_ROW_FIELDS)


def with_namespace_names(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adds ``namespace_names`` (sorted) to each tenant row that lacks them, in one query."""
    rows = list(rows)
    if all("namespace_names" in row for row in rows):
        return rows
    names: dict[int, list[str]] = {row["id"]: [] for row in rows}
    pairs = Namespace.objects.filter(tenant_id__in=names).order_by("name")
    for tenant_id, name in pairs.values_list("tenant_id", "name"):
        names[tenant_id].append(name)
    for row in rows:
        row["namespace_names"] = names[row["id"]]
    return rows


def tenant_get_for_user(*, user: User, slug: str) -> Tenant:
    """The tenant, or NotFound (404) when it does not exist *or* the user may not see it, so
    that tenant names do not leak (the message does not repeat the slug either)."""
    tenant = None
    if re.fullmatch(DNS1123_LABEL_REGEX, slug):  # no query for what cannot be a slug ("\x00")
        tenant = Tenant.objects.visible_to(user).filter(slug=slug).first()
    if tenant is None:
        raise NotFound("No such tenant, or it is not yours to see.")
    return tenant


TENANT_NOT_FOUND = "No such tenant, or it is not yours to see."
# Every 404 of an ask to join says this, whichever lookup failed (the team, the ask, the right
# to decide it), so that no answer tells another team's ask from one that does not exist.
JOIN_REQUEST_NOT_FOUND = "No such ask to join, or it is not yours to see."


def tenant_get_to_join(*, slug: str) -> Tenant:
    """The tenant a signed-in person asks to join, by the slug someone gave them: any tenant not
    archived (its slug and name are what the ask shows), else NotFound (404) as for a tenant
    one may not see. Nothing else of it is shown to someone outside it."""
    tenant = None
    if re.fullmatch(DNS1123_LABEL_REGEX, slug):
        tenant = Tenant.objects.not_archived().filter(slug=slug).first()
    if tenant is None:
        raise NotFound("No such tenant, or it is not yours to see.")
    return tenant


def join_request_tenant_for_user(
    *, user: User, slug: str, not_found: str = TENANT_NOT_FOUND
) -> Tenant:
    """The tenant of the join-request routes: one ``user`` sees (even archived, where its leads
    decide what waits), one they asked to join (even archived: they still withdraw), else one
    they may ask to join; NotFound (404) saying ``not_found`` otherwise."""
    try:
        return tenant_get_for_user(user=user, slug=slug)
    except NotFound:
        pass
    if re.fullmatch(DNS1123_LABEL_REGEX, slug):  # no query for what cannot be a slug
        asked = Tenant.objects.filter(slug=slug, join_requests__user=user).first()
        if asked is not None:
            return asked
        tenant = Tenant.objects.not_archived().filter(slug=slug).first()
        if tenant is not None:
            return tenant
    raise NotFound(not_found)


def join_request_ensure_reachable(*, user: User, tenant: Tenant, pk: int) -> None:
    """NotFound (404, the one answer of every missing ask) unless ``user`` may be told anything
    about ask ``pk`` of ``tenant``: a platform admin, someone in the team (a member or viewer is
    then refused with 403 saying their role), or the person who asked. Asked before a body is
    read, so that another team's ask answers as one that does not exist."""
    if user.is_platform_admin or Membership.objects.filter(tenant=tenant, user=user).exists():
        return
    if not JoinRequest.objects.filter(tenant=tenant, pk=pk, user=user).exists():
        raise NotFound(JOIN_REQUEST_NOT_FOUND)


def join_requests_for_user(*, user: User, tenant: Tenant) -> QuerySet[JoinRequest]:
    """The asks to join ``tenant`` that ``user`` sees: all of them for its leads and platform
    admins, their own for anyone else; newest first."""
    asks = JoinRequest.objects.filter(tenant=tenant).select_related("user", "decided_by")
    if not user_can_manage_tenant(user=user, tenant=tenant):
        asks = asks.filter(user=user)
    return asks.order_by("-created_at", "-id")


def join_request_get_for_user(*, user: User, tenant: Tenant, pk: int) -> JoinRequest:
    ask = join_requests_for_user(user=user, tenant=tenant).filter(pk=pk).first()
    if ask is None:
        raise NotFound(JOIN_REQUEST_NOT_FOUND)
    return ask


def join_requests_open(*, tenant: Tenant) -> QuerySet[JoinRequest]:
    """The asks waiting for a decision, oldest first (the team page's list for its leads)."""
    return (
        JoinRequest.objects.filter(tenant=tenant, state=JoinRequestState.OPEN)
        .select_related("user")
        .order_by("created_at", "id")
    )


def membership_role(*, user: User, tenant: Tenant) -> str | None:
    return (
        Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).first()
    )


def user_can_manage_tenant(*, user: User, tenant: Tenant) -> bool:
    """Platform admins, and the tenant's leads (who may file requests for it)."""
    return (
        user.is_platform_admin or membership_role(user=user, tenant=tenant) == MembershipRole.LEAD
    )


def namespace_list_for_tenant(*, tenant: Tenant) -> QuerySet[Namespace]:
    return Namespace.objects.filter(tenant=tenant).order_by("name")


def membership_list_for_tenant(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's members by username, each with ``added_by``: the username of whoever
    added them last (from the audit trail; "system" for a seed or a sign-in, None where the
    trail has no record), and ``created_at``, when."""
    added = AuditEvent.objects.filter(
        tenant=OuterRef("tenant"),
        action="membership.added",
        object_id=Concat(
            OuterRef("user__username"),
            Value("@"),
            OuterRef("tenant__slug"),
            output_field=CharField(),
        ),
    ).order_by("-created_at", "-id")
    return (
        Membership.objects.filter(tenant=tenant)
        .select_related("user")
        .annotate(added_by=Subquery(added.values("actor_username")[:1]))
        .order_by("user__username")
    )


def team_roles_to_give(*, user: User, tenant: Tenant) -> list[str]:
    """The roles ``user`` may give in ``tenant``'s team: every role for a platform admin, member
    and viewer for a lead, none for anyone else, and none in an archived tenant."""
    if tenant.archived_at is not None:
        return []
    if user.is_platform_admin:
        return list(MembershipRole.values)
    if membership_role(user=user, tenant=tenant) == MembershipRole.LEAD:
        return [MembershipRole.MEMBER, MembershipRole.VIEWER]
    return []


def api_token_list_for_user(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at")


def audit_events_for_user(*, user: User) -> QuerySet[AuditEvent]:
    """Admins see every event; others the events of tenants they belong to."""
    events = AuditEvent.objects.order_by("-created_at", "-id")
    if user.is_platform_admin:
        return events
    return events.filter(tenant__in=Tenant.objects.visible_to(user))


def notifications_for_user(*, user: User) -> QuerySet[Notification]:
    return Notification.objects.filter(user=user).order_by("-created_at", "-id")


def notification_get_for_user(*, user: User, pk: int) -> Notification:
    """One of the user's own notifications, or NotFound (404): another user's answers the same
    as one that does not exist."""
    notification = notifications_for_user(user=user).filter(pk=pk).first()
    if notification is None:
        raise NotFound("No such notification, or it is not yours.")
    return notification


def unread_notification_count(*, user: User) -> int:
    return Notification.objects.filter(user=user, read_at__isnull=True).count()
