"""Writes for tenants, namespaces, memberships and API tokens. Every write is audited."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from core.tasks import enqueue
from tenants.choices import (
    AuditSource,
    EmailState,
    IsolationLevel,
    JoinRequestState,
    MembershipRole,
    NamespacePurpose,
    Priority,
    TenantState,
)
from tenants.models import (
    JOIN_REQUEST_MESSAGE_MAX,
    JOIN_REQUEST_REASON_MAX,
    MEMBERSHIP_SOURCE_MANUAL,
    ApiToken,
    AuditEvent,
    JoinRequest,
    Membership,
    Namespace,
    NamespaceReservation,
    Notification,
    Tenant,
    User,
)
from tenants.namespaces import PORTAL_NAMESPACE_DEFAULT, reserved_reason
from tenants.selectors import JOIN_REQUEST_NOT_FOUND
from tenants.validators import DNS1123_LABEL_MAX, TENANT_SLUG_MAX, dns1123_label

# Where the current change comes from (portal, API, admin); set per request by
# portal.middleware.AuditSourceMiddleware, "system" elsewhere (Celery, commands).
audit_source: ContextVar[str] = ContextVar("audit_source", default=AuditSource.SYSTEM)

logger = logging.getLogger(__name__)

API_TOKEN_BYTES = 30
API_TOKEN_PREFIX_LEN = 8


# What other apps keep derived from a tenant (quotas: the objects pushed to its clusters) is
# refreshed through these, called inside the writing transaction when a tenant, its
# namespaces or its members change. Registered in the other apps' AppConfig.ready(), so this
# app imports none of them.
TENANT_CHANGED: list[Callable[..., object]] = []


def _tenant_changed(tenant: Tenant, actor: User | None) -> None:
    for hook in TENANT_CHANGED:
        hook(tenant=tenant, actor=actor)


def audit_record(
    *,
    actor: User | None,
    action: str,
    obj: Any,
    tenant: Tenant | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    object_id: str | None = None,
) -> AuditEvent:
    """Append an audit row; call it inside the transaction of the change it records.
    ``object_id`` defaults to the object's slug, name or primary key."""
    event = audit_event(
        actor=actor,
        action=action,
        obj=obj,
        tenant=tenant,
        before=before,
        after=after,
        object_id=object_id,
    )
    event.save(force_insert=True)
    return event


def audit_event(
    *,
    actor: User | None,
    action: str,
    obj: Any,
    tenant: Tenant | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    object_id: str | None = None,
) -> AuditEvent:
    """The row ``audit_record`` appends, not saved: for a caller that writes several of them
    in one insert (``AuditEvent.objects.bulk_create``), in the transaction of the change."""
    return AuditEvent(
        actor=actor if actor is not None and actor.pk else None,
        actor_username=actor.get_username() if actor is not None else "system",
        action=action,
        object_type=type(obj).__name__,
        object_id=object_id
        or str(getattr(obj, "slug", None) or getattr(obj, "name", None) or obj.pk),
        tenant=tenant,
        tenant_slug=tenant.slug if tenant else "",
        source=audit_source.get(),
        before=before,
        after=after,
    )


def _check_label(field: str, value: str, max_length: int) -> None:
    from django.core.exceptions import ValidationError

    if not value:
        raise ValidationFailed.for_field(field, "This field is required.")
    if len(value) > max_length:
        raise ValidationFailed.for_field(
            field, f"{value!r} is {len(value)} characters long; at most {max_length} are allowed."
        )
    try:
        dns1123_label(value)
    except ValidationError as exc:
        raise ValidationFailed.for_field(field, f"{value!r} {exc.messages[0]}.") from exc


def _tenant_snapshot(tenant: Tenant) -> dict[str, Any]:
    return {
        "slug": tenant.slug,
        "display_name": tenant.display_name,
        "parent": tenant.parent.slug if tenant.parent else None,
        "cohort": tenant.cohort,
        "state": tenant.state,
        "default_priority": tenant.default_priority,
        "archived": tenant.archived_at is not None,
    }


@transaction.atomic
def tenant_create(
    *,
    slug: str,
    display_name: str,
    actor: User | None,
    parent: Tenant | None = None,
    cohort: str = "",
    description: str = "",
    default_priority: str = Priority.DEFAULT,
    namespaces: Iterable[tuple[str, str]] | None = None,
) -> Tenant:
    """Create a tenant and its namespaces (default: ``<slug>-training``, ``<slug>-inference``)."""
    _check_label("slug", slug, TENANT_SLUG_MAX)
    if cohort:
        _check_label("cohort", cohort, DNS1123_LABEL_MAX)
    if not display_name.strip():
        raise ValidationFailed.for_field("display_name", "This field may not be blank.")
    if Tenant.objects.filter(slug=slug).exists():
        raise ValidationFailed.for_field("slug", f"A tenant with slug {slug!r} already exists.")
    if namespaces is None:
        namespaces = [
            (f"{slug}-training", NamespacePurpose.TRAINING),
            (f"{slug}-inference", NamespacePurpose.INFERENCE),
        ]
        for name, _purpose in namespaces:
            reason = namespace_reserved_reason(name)
            if reason:
                raise ValidationFailed.for_field(
                    "slug",
                    f"{reason}: a tenant's namespaces are named after its slug, and the "
                    "portal never gives a tenant that one. Choose a slug that does not begin "
                    "like a system namespace (kube-, openshift-).",
                )
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(
                slug=slug,
                display_name=display_name.strip(),
                parent=parent,
                cohort=cohort,
                description=description,
                default_priority=default_priority,
            )
    except IntegrityError as exc:  # a concurrent create of the same slug
        raise ValidationFailed.for_field(
            "slug", f"A tenant with slug {slug!r} already exists."
        ) from exc
    for name, purpose in namespaces:
        namespace_create(tenant=tenant, name=name, purpose=purpose, actor=actor)
    audit_record(
        actor=actor,
        action="tenant.created",
        obj=tenant,
        tenant=tenant,
        after=_tenant_snapshot(tenant),
    )
    return tenant


@transaction.atomic
def tenant_update(
    *,
    tenant: Tenant,
    actor: User | None,
    display_name: str | None = None,
    description: str | None = None,
    state: str | None = None,
    default_priority: str | None = None,
) -> Tenant:
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = _tenant_snapshot(tenant)
    if display_name is not None:
        if not display_name.strip():
            raise ValidationFailed.for_field("display_name", "This field may not be blank.")
        tenant.display_name = display_name.strip()
    if description is not None:
        tenant.description = description
    if state is not None:
        if state not in TenantState.values:
            raise ValidationFailed.for_field(
                "state", f"{state!r} is not one of {TenantState.values}."
            )
        tenant.state = state
    if default_priority is not None:
        if default_priority not in Priority.values:
            raise ValidationFailed.for_field(
                "default_priority", f"{default_priority!r} is not one of {Priority.values}."
            )
        if (
            default_priority == Priority.PRODUCTION
            and default_priority != tenant.default_priority
            and not tenant.production_priority_allowed
        ):
            raise ValidationFailed.for_field(
                "default_priority",
                f"{tenant.slug} may not use the production priority: it is granted through a "
                "request a platform admin approves.",
            )
        tenant.default_priority = default_priority
    tenant.save()
    after = _tenant_snapshot(tenant)
    if after != before:
        audit_record(
            actor=actor,
            action="tenant.updated",
            obj=tenant,
            tenant=tenant,
            before=before,
            after=after,
        )
        _tenant_changed(tenant, actor)
    return tenant


def tenant_ensure_not_archived(*, tenant: Tenant, doing: str) -> None:
    """409 when ``tenant`` is archived (as the database says now, not the instance in hand):
    ``doing`` says what it no longer does ("gets no new quotas")."""
    if Tenant.objects.filter(pk=tenant.pk, archived_at__isnull=False).exists():
        raise Conflict(
            f"Tenant {tenant.slug} is archived, so it {doing}; "
            "a platform admin unarchives it first.",
            fields={"tenant": [f"{tenant.slug} is archived"]},
        )


@transaction.atomic
def tenant_archive(*, tenant: Tenant, actor: User | None) -> Tenant:
    """Archive a team that no longer works here: its quotas, requests, usage and audit trail
    stay, its page still opens, but lists leave it out, it gets no new quotas and nothing is
    pushed for it (the objects in its clusters stay as they are), and identity groups mapped
    to it are ignored at sign-in. A department is archived after its teams. Audited."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if tenant.archived_at is not None:
        raise Conflict(
            f"Tenant {tenant.slug} is already archived.",
            fields={"archived": ["already archived"]},
        )
    teams = list(
        tenant.children.filter(archived_at__isnull=True)
        .order_by("slug")
        .values_list("slug", flat=True)
    )
    if teams:
        raise Conflict(
            f"Tenant {tenant.slug} still has teams that are not archived "
            f"({', '.join(teams)}): archive them first.",
            fields={"archived": [f"teams not archived: {', '.join(teams)}"]},
        )
    before = _tenant_snapshot(tenant)
    tenant.archived_at = timezone.now()
    tenant.save(update_fields=["archived_at", "updated_at"])
    audit_record(
        actor=actor,
        action="tenant.archived",
        obj=tenant,
        tenant=tenant,
        before=before,
        after=_tenant_snapshot(tenant),
    )
    return tenant


@transaction.atomic
def tenant_unarchive(*, tenant: Tenant, actor: User | None) -> Tenant:
    """Bring an archived tenant back: it shows in lists again, may get new quotas, its mapped
    groups count from each member's next sign-in, and what is in force is pushed again (so
    anything that changed while it was archived reaches its clusters). Audited."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    if tenant.archived_at is None:
        raise Conflict(
            f"Tenant {tenant.slug} is not archived.", fields={"archived": ["not archived"]}
        )
    parent = tenant.parent
    if parent is not None and parent.archived_at is not None:
        raise Conflict(
            f"Tenant {tenant.slug} belongs to {parent.slug}, which is archived: "
            f"unarchive {parent.slug} first.",
            fields={"archived": [f"{parent.slug} is archived"]},
        )
    before = _tenant_snapshot(tenant)
    tenant.archived_at = None
    tenant.save(update_fields=["archived_at", "updated_at"])
    audit_record(
        actor=actor,
        action="tenant.unarchived",
        obj=tenant,
        tenant=tenant,
        before=before,
        after=_tenant_snapshot(tenant),
    )
    _tenant_changed(tenant, actor)
    return tenant


@transaction.atomic
def tenant_isolation_level_set(
    *, tenant: Tenant, isolation_level: str, actor: User | None, reason: str
) -> Tenant:
    """R23: the tenant's isolation level, as an approved request sets it (the approvals app
    checks the tenant's quotas fit it first; nothing else calls this). Audited."""
    if isolation_level not in IsolationLevel.values:
        raise ValidationFailed.for_field(
            "isolation_level", f"{isolation_level!r} is not one of {IsolationLevel.values}."
        )
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = tenant.isolation_level
    if before == isolation_level:
        return tenant
    tenant.isolation_level = isolation_level
    tenant.save(update_fields=["isolation_level", "updated_at"])
    audit_record(
        actor=actor,
        action="tenant.isolation_level_changed",
        obj=tenant,
        tenant=tenant,
        before={"isolation_level": before},
        after={"isolation_level": isolation_level, "reason": reason},
    )
    return tenant


def _plain(value: Any) -> str:
    """8, 2.5: a number as people write it (no trailing zeros, no exponent)."""
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value else "0"
    return str(value)


@transaction.atomic
def tenant_limits_set(
    *, tenant: Tenant, changes: Mapping[str, Any], actor: User | None, reason: str
) -> Tenant:
    """The tenant-wide limits an approved request sets (the approvals app checks them first;
    nothing else calls this): ``max_run_time_hours`` and ``gpu_unit_cap``, where 0 removes
    one, and ``pod_bandwidth_max`` (R27, a canonical quantity), where "" removes it. Audited."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    bandwidth = changes.get("pod_bandwidth_max")
    if bandwidth is not None and bandwidth != tenant.pod_bandwidth_max:
        before["pod_bandwidth_max"] = tenant.pod_bandwidth_max or None
        after["pod_bandwidth_max"] = bandwidth or None
        tenant.pod_bandwidth_max = bandwidth
    for name in ("max_run_time_hours", "gpu_unit_cap"):
        if changes.get(name) is None:
            continue
        value = changes[name] or None  # 0 removes it
        old = getattr(tenant, name)
        if old == value:
            continue
        before[name] = None if old is None else _plain(old)
        after[name] = None if value is None else _plain(value)
        setattr(tenant, name, value)
    if not after:
        return tenant
    tenant.save(update_fields=[*after, "updated_at"])
    audit_record(
        actor=actor,
        action="tenant.limits_changed",
        obj=tenant,
        tenant=tenant,
        before=before,
        after={**after, "reason": reason},
    )
    return tenant


@transaction.atomic
def tenant_production_priority_set(
    *, tenant: Tenant, allowed: bool, actor: User | None, reason: str
) -> Tenant:
    """R15: grant or withdraw the production priority class, as an approved request does (the
    approvals app checks the request first and pushes the tenant's clusters; nothing else
    calls this). Audited."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    before = tenant.production_priority_allowed
    if before == allowed:
        return tenant
    tenant.production_priority_allowed = allowed
    tenant.save(update_fields=["production_priority_allowed", "updated_at"])
    audit_record(
        actor=actor,
        action="tenant.production_priority_granted"
        if allowed
        else "tenant.production_priority_withdrawn",
        obj=tenant,
        tenant=tenant,
        before={"production_priority_allowed": before},
        after={"production_priority_allowed": allowed, "reason": reason},
    )
    return tenant


def system_namespace_reason(name: str, *, extra: Iterable[tuple[str, str]] = ()) -> str | None:
    """Why ``name`` is a system namespace or the portal's own (``PORTAL_NAMESPACE``), or
    matches one of the (pattern, why) pairs in ``extra``, in words; None when it is none."""
    portal = getattr(settings, "PORTAL_NAMESPACE", PORTAL_NAMESPACE_DEFAULT)
    return reserved_reason(name, portal_namespace=portal, extra=extra)


def namespace_reserved_reason(name: str) -> str | None:
    """Why ``name`` may not be a tenant's namespace (a system namespace, the portal's own, or
    one a cluster reserves: ``NamespaceReservation``, which the quotas app keeps in line with
    its clusters), in words; None when it may."""
    rules = NamespaceReservation.objects.order_by("source", "position").values_list(
        "pattern", "reason"
    )
    return system_namespace_reason(name, extra=rules)


@transaction.atomic
def namespace_reservations_set(*, source: str, rules: Iterable[tuple[str, str]]) -> bool:
    """Make ``rules`` ((pattern, why) pairs, in the order they are read) every namespace
    ``source`` reserves, replacing what it reserved before; no rules clears it. Repeated
    patterns are kept once (the first). Rows are written only when something changed; True
    when something did. Called by the app that owns the source (quotas: ``cluster:<id>``)."""
    wanted: dict[str, str] = {}
    for pattern, why in rules:
        pattern = pattern.strip()
        if pattern and pattern not in wanted:
            wanted[pattern] = why[:500]
    rows = list(NamespaceReservation.objects.select_for_update().filter(source=source))
    current = [(row.pattern, row.reason) for row in sorted(rows, key=lambda r: r.position)]
    if current == list(wanted.items()):
        return False
    NamespaceReservation.objects.filter(source=source).delete()
    NamespaceReservation.objects.bulk_create(
        NamespaceReservation(source=source, pattern=pattern, reason=why, position=position)
        for position, (pattern, why) in enumerate(wanted.items())
    )
    return True


def _check_not_reserved(*, tenant: Tenant, name: str, field: str = "name") -> None:
    reason = namespace_reserved_reason(name)
    if reason:
        raise ValidationFailed.for_field(
            field,
            f"{reason}: the portal never gives it to a tenant nor writes into it. "
            f"Give {tenant.slug} a namespace of its own, such as {tenant.slug}-training.",
        )


@transaction.atomic
def namespace_create(*, tenant: Tenant, name: str, purpose: str, actor: User | None) -> Namespace:
    """Give ``tenant`` a namespace: a DNS-1123 label no tenant has, and no system namespace
    nor one a cluster reserves (400 naming ``name``). The next push writes its objects there;
    a namespace that already exists on a cluster without the portal's labels waits for a
    platform admin to adopt it (``namespace_adopt``). An archived tenant gets none (409): the
    next reconcile would write it, though nothing else of the tenant is pushed."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()  # against a racing archive
    tenant_ensure_not_archived(tenant=tenant, doing="gets no new namespaces")
    _check_label("name", name, DNS1123_LABEL_MAX)
    _check_not_reserved(tenant=tenant, name=name)
    if purpose not in NamespacePurpose.values:
        raise ValidationFailed.for_field(
            "purpose", f"{purpose!r} is not one of {NamespacePurpose.values}."
        )
    if Namespace.objects.filter(name=name).exists():
        raise ValidationFailed.for_field("name", f"Namespace {name!r} is already taken.")
    try:
        with transaction.atomic():
            namespace = Namespace.objects.create(tenant=tenant, name=name, purpose=purpose)
    except IntegrityError as exc:
        raise ValidationFailed.for_field("name", f"Namespace {name!r} is already taken.") from exc
    audit_record(
        actor=actor,
        action="namespace.created",
        obj=namespace,
        tenant=tenant,
        after={"name": name, "purpose": purpose},
    )
    _tenant_changed(tenant, actor)
    return namespace


def _tenant_namespace(*, tenant: Tenant, name: str, lock: bool = False) -> Namespace:
    rows = Namespace.objects.select_related("adopted_by").filter(tenant=tenant, name=name)
    if lock:
        rows = rows.select_for_update(of=("self",))
    namespace = rows.first()
    if namespace is None:
        raise NotFound(f"{tenant.slug} has no namespace {name!r}.")
    return namespace


@transaction.atomic
def namespace_remove(*, tenant: Tenant, name: str, actor: User | None) -> None:
    """Take ``name`` away from ``tenant`` (platform admins). The next push deletes what the
    portal wrote in it (its ResourceQuotas, LimitRange, NetworkPolicy, ServiceAccount,
    RoleBindings and LocalQueue: only objects carrying the portal's labels) and takes the
    portal's labels off the namespace; the namespace itself and whatever users put in it stay.
    A tenant keeps at least one namespace (409): its quota is locked on them. Audited."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises namespace changes
    namespace = _tenant_namespace(tenant=tenant, name=name, lock=True)
    if not Namespace.objects.filter(tenant=tenant).exclude(pk=namespace.pk).exists():
        raise Conflict(
            f"{name} is the only namespace of {tenant.slug}: a tenant keeps at least one, "
            "where its quota is enforced. Add another namespace first, or archive the tenant.",
            fields={"name": [f"the only namespace of {tenant.slug}"]},
        )
    after = {"portal_objects": "deleted at the next push; the namespace itself stays"}
    if namespace.quota_share is not None:
        # The shares of the others no longer add up to 100%: back to an even split.
        after["shares"] = "even"
    audit_record(
        actor=actor,
        action="namespace.removed",
        obj=namespace,
        tenant=tenant,
        before={
            "name": name,
            "purpose": namespace.purpose,
            "share": _share_text(namespace.quota_share),
            "adopted": namespace.adopted_at is not None,
        },
        after=after,
    )
    namespace.delete()
    if "shares" in after:
        Namespace.objects.filter(tenant=tenant).update(quota_share=None)
    _tenant_changed(tenant, actor)


def namespace_adoption_check(*, tenant: Tenant, name: str) -> Namespace:
    """The namespace of ``tenant`` a platform admin may adopt, checked without changing
    anything: 404 when the tenant has no such namespace, 400 when it is reserved, 409 when it
    is adopted already or the tenant is archived."""
    namespace = _tenant_namespace(tenant=tenant, name=name)
    tenant_ensure_not_archived(tenant=tenant, doing="has no namespace adopted")
    _check_not_reserved(tenant=tenant, name=name)
    if namespace.adopted_at is not None:
        by = namespace.adopted_by.username if namespace.adopted_by else "someone"
        raise Conflict(
            f"{name} was adopted by {by} on {namespace.adopted_at:%Y-%m-%d %H:%M} UTC: "
            "the push labels it and writes into it already.",
            fields={"name": ["adopted already"]},
        )
    return namespace


@transaction.atomic
def namespace_adopt(*, tenant: Tenant, name: str, actor: User) -> Namespace:
    """A platform admin adopts ``name``: the namespace existed on a cluster before the portal
    and the admin agrees that the portal labels it and writes its objects there (what it
    writes: ``quotas.sync.namespace_adoption_preview``, which the portal's page and API show). Recorded on the namespace and audited; the next
    push does it. Refused (nothing changes) as ``namespace_adoption_check`` says."""
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    namespace = namespace_adoption_check(tenant=tenant, name=name)
    namespace.adopted_at = timezone.now()
    namespace.adopted_by = actor
    namespace.save(update_fields=["adopted_at", "adopted_by"])
    audit_record(
        actor=actor,
        action="namespace.adopted",
        obj=namespace,
        tenant=tenant,
        before={"name": name, "adopted": False},
        after={"name": name, "adopted": True, "adopted_at": namespace.adopted_at.isoformat()},
    )
    _tenant_changed(tenant, actor)
    return namespace


SHARE_PLACES = Decimal("0.01")


@transaction.atomic
def namespace_shares_set(
    *, tenant: Tenant, shares: Mapping[str, Decimal] | None, actor: User | None
) -> list[Namespace]:
    """Set the percentage of the tenant's limit each of its namespaces holds on clusters that
    split limits across namespaces. ``shares`` names every namespace of the tenant and adds up
    to 100; None or ``{}`` goes back to an even split. Bad input changes nothing."""
    namespaces = list(Namespace.objects.select_for_update().filter(tenant=tenant).order_by("name"))
    by_name = {namespace.name: namespace for namespace in namespaces}
    wanted: dict[str, Decimal | None] = {name: None for name in by_name}
    if shares:
        for name, share in shares.items():
            field = f"shares.{name}"
            if name not in by_name:
                raise ValidationFailed.for_field(field, f"{tenant.slug} has no namespace {name!r}.")
            if not isinstance(share, Decimal) or not share.is_finite():
                raise ValidationFailed.for_field(field, "Give a percentage, such as 40 or 12.5.")
            if share <= 0 or share > 100:
                raise ValidationFailed.for_field(
                    field, f"{share}% is not a share: give more than 0% and at most 100%."
                )
            if share != share.quantize(SHARE_PLACES):
                raise ValidationFailed.for_field(
                    field, f"{share}% has more than two decimal places."
                )
            wanted[name] = share
        missing = [name for name, share in wanted.items() if share is None]
        if missing:
            raise ValidationFailed.for_field(
                f"shares.{missing[0]}",
                f"Namespace {missing[0]} has no share: give every namespace of "
                f"{tenant.slug} a share, or none for an even split.",
            )
        total = sum((share or Decimal(0) for share in wanted.values()), Decimal(0))
        if total != 100:
            listed = ", ".join(f"{name} {share.normalize():f}%" for name, share in shares.items())
            raise ValidationFailed.for_field(
                f"shares.{namespaces[-1].name}",
                f"The shares add up to {total.normalize():f}% ({listed}), not 100%.",
            )
    before = {n.name: _share_text(n.quota_share) for n in namespaces}
    for namespace in namespaces:
        namespace.quota_share = wanted[namespace.name]
    Namespace.objects.bulk_update(namespaces, ["quota_share"])
    after = {n.name: _share_text(n.quota_share) for n in namespaces}
    if before != after:
        audit_record(
            actor=actor,
            action="namespace.shares_set",
            obj=tenant,
            tenant=tenant,
            before=before,
            after=after,
        )
        _tenant_changed(tenant, actor)
    return namespaces


def _share_text(share: Decimal | None) -> str:
    return "even" if share is None else f"{share.normalize():f}%"


def _ensure_another_lead(*, tenant: Tenant, membership: Membership) -> None:
    """An active tenant keeps at least one lead: someone must be able to file its requests."""
    if membership.role != MembershipRole.LEAD or tenant.state != TenantState.ACTIVE:
        return
    others = Membership.objects.filter(tenant=tenant, role=MembershipRole.LEAD).exclude(
        pk=membership.pk
    )
    if not others.exists():
        raise Conflict(
            f"{membership.user.username} is the only lead of {tenant.slug}; add another lead first.",
            fields={"username": ["the tenant's only lead cannot be removed or demoted"]},
        )


@transaction.atomic
def membership_set(*, tenant: Tenant, user: User, role: str, actor: User | None) -> Membership:
    """Add ``user`` to ``tenant`` with ``role``, or change the role of an existing member."""
    if role not in MembershipRole.values:
        raise ValidationFailed.for_field("role", f"{role!r} is not one of {MembershipRole.values}.")
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises lead changes
    membership, created = Membership.objects.get_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    before = None if created else {"user": user.username, "role": membership.role}
    if not created and membership.role == role:
        return membership
    if not created:
        _ensure_another_lead(tenant=tenant, membership=membership)
        membership.role = role
        membership.source = MEMBERSHIP_SOURCE_MANUAL  # a hand edit: group sync leaves it
        membership.save(update_fields=["role", "source"])
    audit_record(
        actor=actor,
        action="membership.added" if created else "membership.role_changed",
        obj=membership,
        object_id=f"{user.username}@{tenant.slug}",
        tenant=tenant,
        before=before,
        after={"user": user.username, "role": role},
    )
    _tenant_changed(tenant, actor)  # RBAC bindings follow the members
    return membership


@transaction.atomic
def membership_remove(*, tenant: Tenant, user: User, actor: User | None) -> None:
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises lead changes
    membership = Membership.objects.filter(tenant=tenant, user=user).first()
    if membership is None:
        raise NotFound(f"{user.username} is not a member of this tenant.")
    _ensure_another_lead(tenant=tenant, membership=membership)
    audit_record(
        actor=actor,
        action="membership.removed",
        obj=membership,
        object_id=f"{user.username}@{tenant.slug}",
        tenant=tenant,
        before={"user": user.username, "role": membership.role},
    )
    membership.delete()
    _tenant_changed(tenant, actor)


# --- team management: leads manage their own team --------------------------------------------

# The roles a lead gives and takes away; only platform admins make, change or remove leads.
LEAD_MANAGED_ROLES = (MembershipRole.MEMBER, MembershipRole.VIEWER)
TEAM_ADD_EXISTING = "existing"
TEAM_ADD_ANY = "any"


def team_ensure_can_manage(*, actor: User, tenant: Tenant) -> None:
    """A lead of ``tenant`` or a platform admin manages its members: 404 for a tenant the
    actor cannot see, 403 for a member or viewer, 409 while the tenant is archived."""
    if actor.is_platform_admin:
        tenant_ensure_not_archived(tenant=tenant, doing="keeps the team it had")
        return
    role = Membership.objects.filter(tenant=tenant, user=actor).values_list("role", flat=True)
    current = role.first()
    if current is None:
        raise NotFound("No such tenant, or it is not yours to see.")
    if current != MembershipRole.LEAD:
        raise PermissionDenied(
            f"Only a lead of {tenant.slug} or a platform admin manages its members; "
            f"you are a {current}."
        )
    tenant_ensure_not_archived(tenant=tenant, doing="keeps the team it had")


def _ensure_lead_may(
    *, actor: User, tenant: Tenant, username: str, role: str, current: str | None = None
) -> None:
    """Leads give and take away the member and viewer roles only: making someone a lead, or
    changing or removing a lead (themselves included), is for platform admins (403)."""
    if actor.is_platform_admin:
        return
    if current == MembershipRole.LEAD:
        raise PermissionDenied(
            f"{username} is a lead of {tenant.slug}: only a platform admin changes or removes "
            "a lead.",
            fields={"username": ["leads change and remove members and viewers only"]},
        )
    if role not in LEAD_MANAGED_ROLES:
        raise PermissionDenied(
            f"Only a platform admin makes someone a lead of {tenant.slug}; "
            "a lead adds members and viewers.",
            fields={"role": ["leads give the member and viewer roles only"]},
        )


def _check_role(role: str) -> None:
    if role not in MembershipRole.values:
        choices = ", ".join(MembershipRole.values)
        raise ValidationFailed.for_field("role", f"{role!r} is not a role: give one of {choices}.")


def team_user_for_add(*, username: str, actor: User) -> User:
    """The account ``username`` names, within the limit ``TEAM_ADD_USERS`` sets: "existing"
    (the default) only finds accounts the portal knows; "any" also creates a local account with
    no password for a new name (audited). Bad input raises a 400 naming ``username``."""
    from django.contrib.auth.validators import UnicodeUsernameValidator
    from django.core.exceptions import ValidationError

    username = username.strip()
    if not username:
        raise ValidationFailed.for_field("username", "This field is required.")
    user = User.objects.filter(username=username).first()
    if user is not None:
        if not user.is_active:
            raise ValidationFailed.for_field(
                "username", f"{username}'s account is deactivated; a platform admin can restore it."
            )
        return user
    if settings.TEAM_ADD_USERS != TEAM_ADD_ANY:
        raise ValidationFailed.for_field(
            "username",
            f"No user {username!r} is known to the portal: they sign in once first, "
            "or a platform admin creates the account.",
        )
    field = User._meta.get_field("username")
    if len(username) > (field.max_length or 150):
        raise ValidationFailed.for_field(
            "username", f"A username has at most {field.max_length} characters."
        )
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        raise ValidationFailed.for_field(
            "username", f"{username!r} is not a username: {exc.messages[0]}"
        ) from exc
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username)  # no usable password
    except IntegrityError:  # created at the same moment by someone else
        return User.objects.get(username=username)
    audit_record(
        actor=actor,
        action="user.created",
        obj=user,
        object_id=username,
        after={"username": username, "password": "none (signs in through the company)"},
    )
    return user


def _team_notify(*, user: User, actor: User, subject: str, body: str, url: str = "") -> None:
    if user.pk != actor.pk:  # nobody is told what they did themselves
        notify(users=[user], subject=subject, body=body, url=url)


@transaction.atomic
def team_member_add(*, tenant: Tenant, username: str, role: str, actor: User) -> Membership:
    """A lead adds a member or viewer to her tenant; a platform admin adds any role. Someone
    who already belongs is a 409 (change their role instead); the person added is told."""
    team_ensure_can_manage(actor=actor, tenant=tenant)
    _check_role(role)
    _ensure_lead_may(actor=actor, tenant=tenant, username=username, role=role)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises team changes
    user = team_user_for_add(username=username, actor=actor)
    existing = Membership.objects.filter(tenant=tenant, user=user).first()
    if existing is not None:
        raise Conflict(
            f"{user.username} is already a {existing.role} of {tenant.slug}; "
            "change their role instead.",
            fields={"username": [f"already a {existing.role} of {tenant.slug}"]},
        )
    membership = _team_membership_create(tenant=tenant, user=user, role=role, actor=actor)
    _tenant_changed(tenant, actor)  # RBAC bindings follow the members
    return membership


def _team_membership_create(
    *, tenant: Tenant, user: User, role: str, actor: User, join_request: JoinRequest | None = None
) -> Membership:
    """The membership a lead or an admin gives (one by one, several at once, or approving an
    ask to join): audited as ``membership.added``, the person told, and any open ask of theirs
    to join the tenant closed as approved (they are in). The caller refreshes what follows the
    members (``_tenant_changed``) once."""
    membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    after: dict[str, Any] = {"user": user.username, "role": role}
    if join_request is not None:
        after["join_request"] = join_request.pk
    audit_record(
        actor=actor,
        action="membership.added",
        obj=membership,
        object_id=f"{user.username}@{tenant.slug}",
        tenant=tenant,
        after=after,
    )
    if join_request is None:
        _team_notify(
            user=user,
            actor=actor,
            subject=f"You were added to {tenant.slug} as a {role}",
            body=f"{actor.username} added you to {tenant.display_name} ({tenant.slug}) "
            f"as a {role}.",
            url=f"/tenants/{tenant.slug}/",
        )
    now = timezone.now()
    for ask in JoinRequest.objects.filter(tenant=tenant, user=user, state=JoinRequestState.OPEN):
        if join_request is not None and ask.pk == join_request.pk:
            continue
        ask.state, ask.decided_at, ask.decided_by = JoinRequestState.APPROVED, now, actor
        ask.reason = f"added by {actor.username}"
        ask.save(update_fields=["state", "decided_at", "decided_by", "reason"])
        audit_record(
            actor=actor,
            action="join_request.approved",
            obj=ask,
            tenant=tenant,
            before={"user": user.username, "state": JoinRequestState.OPEN},
            after={"user": user.username, "state": ask.state, "reason": ask.reason},
        )
    return membership


def _team_membership(*, tenant: Tenant, username: str) -> Membership:
    membership = (
        Membership.objects.select_related("user")
        .filter(tenant=tenant, user__username=username)
        .first()
    )
    if membership is None:
        raise NotFound(f"{username} is not a member of {tenant.slug}.")
    return membership


def team_change_check(
    *, tenant: Tenant, username: str, actor: User, role: str | None = None
) -> Membership:
    """What ``actor`` may do to ``username``'s membership, checked without changing anything:
    a new ``role``, or (None) removal. Returns the membership; raises 404 (not a member),
    403 (not the actor's to change), 400 (no such role) or 409 (the only lead). The pages ask
    this before their confirmation; the services ask it again inside their transaction."""
    team_ensure_can_manage(actor=actor, tenant=tenant)
    if role is not None:
        _check_role(role)
    membership = _team_membership(tenant=tenant, username=username)
    _ensure_lead_may(
        actor=actor,
        tenant=tenant,
        username=username,
        role=membership.role if role is None else role,
        current=membership.role,
    )
    if role != membership.role:
        _ensure_another_lead(tenant=tenant, membership=membership)
    return membership


@transaction.atomic
def team_member_role_change(*, tenant: Tenant, username: str, role: str, actor: User) -> Membership:
    """A lead turns a member into a viewer or back; a platform admin changes any role, never
    leaving an active tenant without a lead (409). The person is told."""
    team_ensure_can_manage(actor=actor, tenant=tenant)
    _check_role(role)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises lead changes
    membership = team_change_check(tenant=tenant, username=username, actor=actor, role=role)
    if membership.role == role:
        return membership
    before = {"user": username, "role": membership.role}
    membership.role = role
    membership.source = MEMBERSHIP_SOURCE_MANUAL  # a hand edit: sign-in's group sync leaves it
    membership.save(update_fields=["role", "source"])
    audit_record(
        actor=actor,
        action="membership.role_changed",
        obj=membership,
        object_id=f"{username}@{tenant.slug}",
        tenant=tenant,
        before=before,
        after={"user": username, "role": role},
    )
    _team_notify(
        user=membership.user,
        actor=actor,
        subject=f"You are now a {role} of {tenant.slug}",
        body=f"{actor.username} changed your role in {tenant.slug} "
        f"from {before['role']} to {role}.",
        url=f"/tenants/{tenant.slug}/",
    )
    _tenant_changed(tenant, actor)
    return membership


@transaction.atomic
def team_member_remove(*, tenant: Tenant, username: str, actor: User) -> None:
    """A lead removes a member or viewer; a platform admin anyone but an active tenant's only
    lead (409). Access ends at once (pages and tokens look memberships up on every request);
    the person removed is told."""
    team_ensure_can_manage(actor=actor, tenant=tenant)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises lead changes
    membership = team_change_check(tenant=tenant, username=username, actor=actor)
    audit_record(
        actor=actor,
        action="membership.removed",
        obj=membership,
        object_id=f"{username}@{tenant.slug}",
        tenant=tenant,
        before={"user": username, "role": membership.role},
    )
    _team_notify(
        user=membership.user,
        actor=actor,
        subject=f"You were removed from {tenant.slug}",
        body=f"{actor.username} removed you from {tenant.display_name} ({tenant.slug}); "
        f"you were a {membership.role}.",
    )
    membership.delete()
    _tenant_changed(tenant, actor)


# --- asking to join a team, and adding several people at once ------------------------------


def _join_text(field: str, value: str, limit: int) -> str:
    value = value.strip()
    if len(value) > limit:
        raise ValidationFailed.for_field(
            field, f"At most {limit} characters; this one has {len(value)}."
        )
    return value


def _join_deciders(tenant: Tenant) -> list[User]:
    """Who decides ``tenant``'s asks to join: its leads, or, for a team without one, the
    platform admins."""
    leads = list(
        User.objects.filter(
            memberships__tenant=tenant, memberships__role=MembershipRole.LEAD, is_active=True
        )
    )
    return leads or list(User.objects.filter(is_platform_admin=True, is_active=True))


@transaction.atomic
def join_request_create(*, tenant: Tenant, user: User, message: str = "") -> JoinRequest:
    """``user`` asks to join ``tenant`` (one not archived; the caller looked it up by slug):
    409 when they already belong or already have an ask waiting; a message over
    ``JOIN_REQUEST_MESSAGE_MAX`` characters is a 400 naming ``message``. Its leads (or, for a
    team without one, the platform admins) are told. Audited."""
    message = _join_text("message", message, JOIN_REQUEST_MESSAGE_MAX)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises team changes
    if tenant.archived_at is not None:
        raise NotFound("No such tenant, or it is not yours to see.")
    role = Membership.objects.filter(tenant=tenant, user=user).values_list("role", flat=True)
    current = role.first()
    if current is not None:
        raise Conflict(
            f"You are already a {current} of {tenant.slug}.",
            fields={"tenant": [f"already a {current} of {tenant.slug}"]},
        )
    if JoinRequest.objects.filter(tenant=tenant, user=user, state=JoinRequestState.OPEN).exists():
        raise Conflict(
            f"You already asked to join {tenant.slug}; its leads have not answered yet. "
            "Withdraw that ask to send another.",
            fields={"tenant": ["an ask to join is already waiting"]},
        )
    try:
        with transaction.atomic():
            ask = JoinRequest.objects.create(tenant=tenant, user=user, message=message)
    except IntegrityError as exc:  # the same ask sent twice at once
        raise Conflict(
            f"You already asked to join {tenant.slug}.",
            fields={"tenant": ["an ask to join is already waiting"]},
        ) from exc
    audit_record(
        actor=user,
        action="join_request.created",
        obj=ask,
        tenant=tenant,
        after={"user": user.username, "state": ask.state, "message": message},
    )
    said = f"\n\nTheir message: {message}" if message else ""
    notify(
        users=[u for u in _join_deciders(tenant) if u.pk != user.pk],
        subject=f"{user.username} asks to join {tenant.slug}",
        body=f"{user.get_full_name() or user.username} ({user.username}) asks to join "
        f"{tenant.display_name} ({tenant.slug}). Approve or refuse it on the team page.{said}",
        url=f"/tenants/{tenant.slug}/team/",
    )
    return ask


def _join_request_locked(*, tenant: Tenant, pk: int) -> JoinRequest | None:
    return (
        JoinRequest.objects.select_for_update()
        .select_related("user")
        .filter(tenant=tenant, pk=pk)
        .first()
    )


def _join_request_closed(ask: JoinRequest) -> Conflict:
    return Conflict(
        f"This ask to join is no longer waiting: it was {ask.state}.",
        fields={"state": [ask.state]},
        state=ask.state,
    )


@transaction.atomic
def join_request_decide(
    *, tenant: Tenant, pk: int, actor: User, approve: bool, reason: str = ""
) -> JoinRequest:
    """A lead of ``tenant`` (or a platform admin) approves an ask to join, which makes the
    person a member (never a lead: that stays an admin's change), or refuses it, with an
    optional reason; the person is told. Nobody decides their own ask (403); a member or
    viewer gets 403 saying their role, anyone else 404 (as for a team they cannot see); an
    ask no longer waiting, someone already in the team, or an archived tenant: 409. Audited."""
    reason = _join_text("reason", reason, JOIN_REQUEST_REASON_MAX)
    ask = _join_request_locked(tenant=tenant, pk=pk)
    if ask is not None and ask.user_id == actor.pk and not actor.is_platform_admin:
        raise PermissionDenied(
            f"Nobody decides their own ask to join; a lead of {tenant.slug} does.",
            fields={"id": ["your own ask"]},
        )
    try:
        team_ensure_can_manage(actor=actor, tenant=tenant)
    except NotFound as exc:  # the same answer as for an ask that does not exist
        raise NotFound(JOIN_REQUEST_NOT_FOUND) from exc
    if ask is None:
        raise NotFound(JOIN_REQUEST_NOT_FOUND)
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises team changes
    if ask.state != JoinRequestState.OPEN:
        raise _join_request_closed(ask)
    person = ask.user
    before = {"user": person.username, "state": ask.state}
    if approve:
        existing = Membership.objects.filter(tenant=tenant, user=person).first()
        if existing is not None:
            raise Conflict(
                f"{person.username} is already a {existing.role} of {tenant.slug}; "
                "refuse or leave this ask.",
                fields={"id": [f"already a {existing.role}"]},
            )
        if not person.is_active:
            raise Conflict(
                f"{person.username}'s account is deactivated; refuse this ask.",
                fields={"id": ["account deactivated"]},
            )
    ask.state = JoinRequestState.APPROVED if approve else JoinRequestState.REFUSED
    ask.decided_at, ask.decided_by, ask.reason = timezone.now(), actor, reason
    ask.save(update_fields=["state", "decided_at", "decided_by", "reason"])
    audit_record(
        actor=actor,
        action=f"join_request.{ask.state}",
        obj=ask,
        tenant=tenant,
        before=before,
        after={"user": person.username, "state": ask.state, "reason": reason},
    )
    because = f" Their reason: {reason}" if reason else ""
    if approve:
        _team_membership_create(
            tenant=tenant, user=person, role=MembershipRole.MEMBER, actor=actor, join_request=ask
        )
        _team_notify(
            user=person,
            actor=actor,
            subject=f"You are now a member of {tenant.slug}",
            body=f"{actor.username} approved your ask to join {tenant.display_name} "
            f"({tenant.slug}); you are a member.{because}",
            url=f"/tenants/{tenant.slug}/",
        )
        _tenant_changed(tenant, actor)  # RBAC bindings follow the members
    else:
        _team_notify(
            user=person,
            actor=actor,
            subject=f"Your ask to join {tenant.slug} was refused",
            body=f"{actor.username} refused your ask to join {tenant.display_name} "
            f"({tenant.slug}).{because}",
            url=f"/tenants/{tenant.slug}/join/",
        )
    return ask


@transaction.atomic
def join_request_withdraw(*, tenant: Tenant, pk: int, actor: User) -> JoinRequest:
    """The person who asked takes their ask back while it waits (409 once decided); anyone
    else's ask answers 404. Audited."""
    ask = _join_request_locked(tenant=tenant, pk=pk)
    if ask is None or ask.user_id != actor.pk:
        raise NotFound(JOIN_REQUEST_NOT_FOUND)
    if ask.state != JoinRequestState.OPEN:
        raise _join_request_closed(ask)
    ask.state, ask.decided_at, ask.decided_by = JoinRequestState.WITHDRAWN, timezone.now(), actor
    ask.save(update_fields=["state", "decided_at", "decided_by"])
    audit_record(
        actor=actor,
        action="join_request.withdrawn",
        obj=ask,
        tenant=tenant,
        before={"user": actor.username, "state": JoinRequestState.OPEN},
        after={"user": actor.username, "state": ask.state},
    )
    return ask


# Adding several people at once: what became of each line.
TEAM_BULK_MAX = 200
TEAM_BULK_ENTRY_MAX = 254  # an email address's longest
ADDED = "added"
ALREADY_MEMBER = "already-member"
NO_SUCH_PERSON = "no-such-person"
AMBIGUOUS_EMAIL = "ambiguous-email"
DEACTIVATED = "deactivated"
NOT_A_USERNAME = "not-a-username"
LISTED_TWICE = "listed-twice"

# The summary's words for each outcome: (one, many), in the order the summary says them.
BULK_OUTCOME_WORDS = {
    ADDED: ("person added", "people added"),
    ALREADY_MEMBER: ("already a member", "already members"),
    NO_SUCH_PERSON: ("not known to the portal", "not known to the portal"),
    AMBIGUOUS_EMAIL: ("email shared by several people", "emails shared by several people"),
    DEACTIVATED: ("deactivated account", "deactivated accounts"),
    NOT_A_USERNAME: ("not a username or email", "not usernames or emails"),
    LISTED_TWICE: ("listed twice", "listed twice"),
}


@dataclass(frozen=True)
class BulkAddResult:
    entry: str  # the line as given
    outcome: str  # one of BULK_OUTCOME_WORDS
    message: str  # in words, for that line
    username: str = ""  # the account it named, where one was found


def team_bulk_entries(text: str) -> list[str]:
    """A pasted list as entries: one per line or separated by commas (or semicolons), blanks
    dropped, each trimmed."""
    return [p.strip() for p in text.replace(";", ",").replace("\n", ",").split(",") if p.strip()]


def team_bulk_summary(results: Sequence[BulkAddResult]) -> str:
    """ "2 people added, 1 already a member": each outcome counted, in words."""
    counts: dict[str, int] = {}
    for result in results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
    parts = []
    for outcome, (one, many) in BULK_OUTCOME_WORDS.items():
        if counts.get(outcome):
            parts.append(f"{counts[outcome]} {one if counts[outcome] == 1 else many}")
    return ", ".join(parts) or "Nobody listed"


def _bulk_person(entry: str, actor: User) -> tuple[User | None, BulkAddResult | None]:
    """The account an entry names, or what stops it: a username first, else (with an @) the
    one active account with that email."""
    if len(entry) > TEAM_BULK_ENTRY_MAX:
        return None, BulkAddResult(
            entry[:TEAM_BULK_ENTRY_MAX], NOT_A_USERNAME, "too long for a username or an email"
        )
    if "@" in entry and not User.objects.filter(username=entry).exists():
        found = list(User.objects.filter(email__iexact=entry).order_by("username")[:3])
        active = [u for u in found if u.is_active]
        if len(active) > 1:
            return None, BulkAddResult(
                entry,
                AMBIGUOUS_EMAIL,
                f"several people have this email ({', '.join(u.username for u in active)}); "
                "give the username",
            )
        if active:
            return active[0], None
        if found:
            return None, BulkAddResult(
                entry,
                DEACTIVATED,
                f"{found[0].username}'s account is deactivated",
                found[0].username,
            )
        return None, BulkAddResult(
            entry, NO_SUCH_PERSON, "nobody with this email is known to the portal"
        )
    try:
        return team_user_for_add(username=entry, actor=actor), None
    except ValidationFailed as exc:
        if User.objects.filter(username=entry, is_active=False).exists():
            return None, BulkAddResult(entry, DEACTIVATED, exc.message, entry)
        if "not a username" in exc.message or "at most" in exc.message:
            return None, BulkAddResult(entry, NOT_A_USERNAME, exc.message)
        return None, BulkAddResult(entry, NO_SUCH_PERSON, exc.message)


@transaction.atomic
def team_members_add_many(
    *, tenant: Tenant, entries: Sequence[str], actor: User, role: str = MembershipRole.MEMBER
) -> list[BulkAddResult]:
    """A lead (or an admin) adds several people at once, by username or email, each with
    ``role`` (a lead gives member or viewer). Each entry is answered on its own: added, already
    a member, not known, an email several people share, a deactivated account, not a username,
    listed twice; the valid ones are added (each whole, audited and told, as one by one) and
    the rest change nothing. More than ``TEAM_BULK_MAX`` entries, or none, is a 400 naming
    ``people``, and nothing changes."""
    team_ensure_can_manage(actor=actor, tenant=tenant)
    _check_role(role)
    _ensure_lead_may(actor=actor, tenant=tenant, username="", role=role)
    if not entries:
        raise ValidationFailed.for_field("people", "List at least one username or email.")
    if len(entries) > TEAM_BULK_MAX:
        raise ValidationFailed.for_field(
            "people",
            f"At most {TEAM_BULK_MAX} people at once; this list has {len(entries)}.",
        )
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)  # serialises team changes
    results: list[BulkAddResult] = []
    seen: set[str] = set()
    added = 0
    for raw in entries:
        entry = raw.strip()
        if entry.lower() in seen:
            results.append(BulkAddResult(entry, LISTED_TWICE, "listed above already"))
            continue
        seen.add(entry.lower())
        person, refused = _bulk_person(entry, actor)
        if refused is not None or person is None:
            results.append(refused or BulkAddResult(entry, NO_SUCH_PERSON, "not known"))
            continue
        if person.username.lower() in seen and person.username.lower() != entry.lower():
            results.append(
                BulkAddResult(entry, LISTED_TWICE, "listed above already", person.username)
            )
            continue
        seen.add(person.username.lower())
        existing = Membership.objects.filter(tenant=tenant, user=person).first()
        if existing is not None:
            results.append(
                BulkAddResult(
                    entry,
                    ALREADY_MEMBER,
                    f"{person.username} is already a {existing.role}",
                    person.username,
                )
            )
            continue
        with transaction.atomic():  # each person whole, or not at all
            _team_membership_create(tenant=tenant, user=person, role=role, actor=actor)
        added += 1
        results.append(
            BulkAddResult(entry, ADDED, f"{person.username} added as a {role}", person.username)
        )
    if added:
        _tenant_changed(tenant, actor)  # RBAC bindings follow the members, once
    return results


# --- API tokens ---------------------------------------------------------------------------


def _digest(secret: str) -> str:
    # Tokens are 240 random bits, so a fast hash is enough (no dictionary to attack).
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def api_token_create(
    *, user: User, name: str = "", ttl: timedelta | None = None
) -> tuple[ApiToken, str]:
    """Issue a token; the secret is returned once and only its digest is stored."""
    secret = secrets.token_urlsafe(API_TOKEN_BYTES)
    ttl = ttl or timedelta(days=settings.API_TOKEN_TTL_DAYS)
    token = ApiToken.objects.create(
        user=user,
        name=name[:100],
        prefix=secret[:API_TOKEN_PREFIX_LEN],
        digest=_digest(secret),
        expires_at=timezone.now() + ttl,
    )
    audit_record(
        actor=user,
        action="api_token.created",
        obj=token,
        object_id=token.prefix,
        after={"prefix": token.prefix, "expires_at": token.expires_at.isoformat()},
    )
    return token, secret


def api_token_authenticate(*, secret: str) -> ApiToken | None:
    """The token for ``secret`` if it is valid now (not revoked, not expired), else None."""
    now = timezone.now()
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=_digest(secret), revoked_at__isnull=True, expires_at__gt=now)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=5):
        # Coarse on purpose: a write per request would make every API call a write.
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


@transaction.atomic
def api_token_revoke(*, token: ApiToken, actor: User) -> ApiToken:
    updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db()
    if updated:
        audit_record(
            actor=actor,
            action="api_token.revoked",
            obj=token,
            object_id=token.prefix,
            after={"prefix": token.prefix},
        )
    return token


# --- notifications --------------------------------------------------------------------------


def notify(
    *, users: Iterable[User], subject: str, body: str = "", url: str = ""
) -> list[Notification]:
    """Put a notification in each user's inbox and send it by email after commit. Call it
    inside the transaction of the change it is about: no change, no notification."""
    rows = Notification.objects.bulk_create(
        Notification(user=user, subject=subject[:200], body=body, url=url)
        for user in {u.pk: u for u in users if u.is_active}.values()
    )
    ids = [row.pk for row in rows]
    if ids:
        transaction.on_commit(lambda: _enqueue_emails(ids))
    return rows


SEND_NOTIFICATION_EMAIL_TASK = "tenants.tasks.send_notification_email"
SEND_NOTIFICATION_EMAILS_TASK = "tenants.tasks.send_notification_emails"
SWEEP_NOTIFICATION_EMAILS_TASK = "tenants.tasks.sweep_notification_emails"

# A failed email is tried again after 1, 2, 4 ... minutes (at most an hour apart), 8 times in
# all (about two hours); then it is failed, its last error kept. An email not sent two days
# after its notification (the workers stopped that long) is no longer news: failed, said so.
NOTIFICATION_EMAIL_MAX_ATTEMPTS = 8
NOTIFICATION_EMAIL_BACKOFF = timedelta(minutes=1)
NOTIFICATION_EMAIL_BACKOFF_MAX = timedelta(hours=1)
NOTIFICATION_EMAIL_GIVE_UP_AFTER = timedelta(days=2)
# The task queued after commit takes the email first; the sweep, only once this has passed.
NOTIFICATION_EMAIL_SWEEP_GRACE = timedelta(minutes=1)
# A claimed email whose worker died while sending is due again after this.
NOTIFICATION_EMAIL_CLAIM = timedelta(minutes=10)


def _enqueue_emails(ids: list[int]) -> None:
    """One task for the emails of one change (a request's five approvers: one message on the
    queue, not five). A broker that is down loses nothing: the rows are pending and the
    sweep sends them."""
    try:
        enqueue(SEND_NOTIFICATION_EMAILS_TASK, [ids])
    except Exception:
        logger.warning("notifications %s: emails not enqueued, the sweep sends them", ids)


def notification_emails_send(*, notification_ids: Sequence[int]) -> list[int]:
    """Send each notification's email once, one after another, so one failing address costs
    no other email. Returns the ids that failed and wait for a retry (the sweep sends them
    when due)."""
    failed = []
    for notification_id in notification_ids:
        if notification_send_email(notification_id=notification_id).retry_in is not None:
            failed.append(notification_id)
    return failed


@dataclass(frozen=True)
class EmailOutcome:
    sent: bool
    retry_in: float | None = None  # seconds until it is due again; None: done or not due
    error: str = ""


def notification_email_retry_delay(attempts: int) -> timedelta:
    """The wait after the ``attempts``-th failure: 1, 2, 4 ... minutes, at most an hour."""
    return min(
        NOTIFICATION_EMAIL_BACKOFF * 2 ** max(attempts - 1, 0), NOTIFICATION_EMAIL_BACKOFF_MAX
    )


def _email_due(now: datetime) -> Q:
    return Q(email_next_attempt_at__isnull=True) | Q(
        email_next_attempt_at__lte=now + timedelta(seconds=1)
    )


def notification_send_email(*, notification_id: int, now: datetime | None = None) -> EmailOutcome:
    """Send one notification's email if it is pending and due (a retry after success sends
    nothing). Claimed with a conditional update, so two workers never send it at once. Any
    failure of the mail server, a network error or another, is recorded and tried again
    after a growing delay, up to ``NOTIFICATION_EMAIL_MAX_ATTEMPTS``; then the email is
    failed, its last error kept. A user without an address has none to send."""
    now = now or timezone.now()
    pending = Notification.objects.filter(
        pk=notification_id, email_state=EmailState.PENDING, emailed_at__isnull=True
    )
    claimed = pending.filter(_email_due(now)).update(
        email_attempts=F("email_attempts") + 1,
        email_next_attempt_at=now + NOTIFICATION_EMAIL_CLAIM,
    )
    if not claimed:
        return EmailOutcome(sent=False)
    notification = Notification.objects.select_related("user").get(pk=notification_id)
    if not notification.user.email:
        pending.update(email_state=EmailState.NO_ADDRESS, email_next_attempt_at=None)
        return EmailOutcome(sent=False)
    link = f"\n\n{settings.PORTAL_URL.rstrip('/')}{notification.url}" if notification.url else ""
    try:
        send_mail(
            subject=f"[GPU portal] {notification.subject}",
            message=f"{notification.body}{link}",
            from_email=None,
            recipient_list=[notification.user.email],
        )
    except Exception as exc:  # whatever the mail server or its client raised: kept, retried
        return _email_failed(notification, f"{type(exc).__name__}: {exc}"[:500], now)
    pending.update(
        email_state=EmailState.SENT,
        emailed_at=timezone.now(),
        email_next_attempt_at=None,
        email_error="",
    )
    return EmailOutcome(sent=True)


def _email_failed(notification: Notification, error: str, now: datetime) -> EmailOutcome:
    row = Notification.objects.filter(pk=notification.pk, email_state=EmailState.PENDING)
    if notification.email_attempts >= NOTIFICATION_EMAIL_MAX_ATTEMPTS:
        row.update(email_state=EmailState.FAILED, email_next_attempt_at=None, email_error=error)
        logger.warning(
            "notification %s: email failed %s times, given up: %s",
            notification.pk, notification.email_attempts, error,
        )  # fmt: skip
        return EmailOutcome(sent=False, error=error)
    delay = notification_email_retry_delay(notification.email_attempts)
    row.update(email_next_attempt_at=now + delay, email_error=error)
    logger.warning(
        "notification %s: email failed (attempt %s), again in %s: %s",
        notification.pk, notification.email_attempts, delay, error,
    )  # fmt: skip
    return EmailOutcome(sent=False, retry_in=delay.total_seconds(), error=error)


def notification_emails_sweep(*, now: datetime | None = None) -> list[int]:
    """Every minute (Celery beat): queue the pending emails no worker sent (the broker was
    down, a worker died) and those due again after a failure, as one task; record as failed
    those older than ``NOTIFICATION_EMAIL_GIVE_UP_AFTER``. Safe to run twice: the claim sends
    each email once. Returns the ids queued."""
    now = now or timezone.now()
    pending = Notification.objects.filter(email_state=EmailState.PENDING, emailed_at__isnull=True)
    too_old = now - NOTIFICATION_EMAIL_GIVE_UP_AFTER
    stale = pending.filter(created_at__lt=too_old)
    stale.filter(user__email="").update(
        email_state=EmailState.NO_ADDRESS, email_next_attempt_at=None
    )
    given_up = stale.update(
        email_state=EmailState.FAILED,
        email_next_attempt_at=None,
        email_error=f"not sent within {NOTIFICATION_EMAIL_GIVE_UP_AFTER.days} days "
        "of the notification; given up",
    )
    if given_up:
        logger.warning("%s notification emails not sent in time, given up", given_up)
    due = pending.filter(
        Q(email_next_attempt_at__isnull=True, created_at__lt=now - NOTIFICATION_EMAIL_SWEEP_GRACE)
        | Q(email_next_attempt_at__lte=now)
    )
    ids = list(due.order_by("pk").values_list("pk", flat=True)[:1000])
    if ids:
        try:
            enqueue(SEND_NOTIFICATION_EMAILS_TASK, [ids])
        except Exception:
            logger.warning("notification emails %s not enqueued, swept again", ids)
    return ids


def notifications_mark_read(*, user: User, ids: Iterable[int] | None = None) -> int:
    rows = Notification.objects.filter(user=user, read_at__isnull=True)
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    return rows.update(read_at=timezone.now())
