"""Filing a request (a draft, or pending at once), its live check that stores nothing, its
submit and its cancel. A request that breaks a rule is refused whole."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeItem, QuotaChangeRequest
from approvals.services.checks import (
    RequestCheck,
    grant_request_check,
    quota_request_check,
    quota_request_check_stored,
    quota_request_tenant_changes,
    scheduling_fields,
)
from approvals.services.rules import (
    SCHEDULING_FIELDS,
    TENANT_FIELDS,
    line_of,
    quotas_in_force,
)
from approvals.services.transitions import (
    ensure_may_become,
    locked,
    quota_request_ensure_can_file,
    transition,
)
from core.errors import (
    Conflict,
    PermissionDenied,
    ValidationFailed,
)
from core.words import counted
from quotas.kube.bandwidth import pod_bandwidth_text
from quotas.models import (
    Cluster,
    ResourceFlavor,
    TierTemplate,
)
from quotas.quantity import format_quantity
from quotas.services import (
    QuotaItem,
    default_gpu_flavor,
    egress_rules_canonical,
    quota_item_parse,
    tier_items,
    tier_scheduling,
)
from tenants.models import Tenant, User
from tenants.services import (
    audit_record,
    audit_source,
    notify,
)


def request_changes(
    *,
    cluster: Cluster,
    raw_items: Sequence[Mapping[str, Any]],
    scheduling: Mapping[str, Any],
    tier: TierTemplate | None,
    tenant: Tenant | None = None,
) -> dict[str, Any]:
    """The ``items``, ``scheduling`` and ``tier`` of a request from its raw body. A tier change
    with no items is prefilled from the template (GPU, CPU and memory on the cluster's first
    whole-GPU flavor; scheduling and storage quotas the body leaves empty). Of the lines the
    tier fills in, those ``tenant`` holds already are left out: nobody wrote them, so they are
    not refused as changing nothing, and the tier change's real errors show."""
    items = request_items_parse(cluster=cluster, raw_items=raw_items)
    scheduling = dict(scheduling)
    if tier is not None and not raw_items:
        items = tier_items(tier=tier, gpu_flavor=default_gpu_flavor(cluster=cluster))
        if tenant is not None:
            current = quotas_in_force(tenant, cluster)[1]
            items = [item for item in items if current.get(line_of(item)) != item]
        for name, value in scheduling_fields(tier_scheduling(tier)).items():
            if scheduling.get(name) is None:
                scheduling[name] = value
    return {"items": items, "scheduling": scheduling, "tier": tier}


def request_items_parse(
    *, cluster: Cluster, raw_items: Sequence[Mapping[str, Any]]
) -> list[QuotaItem]:
    """Resolve flavor names on ``cluster`` and parse amounts; errors name ``items[i].field``."""
    names = {str(raw.get("flavor", "")) for raw in raw_items}
    flavors = {
        f.name: f for f in ResourceFlavor.objects.filter(name__in=names).select_related("cluster")
    }
    on_cluster = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster, name__in=names)}
    items: list[QuotaItem] = []
    errors: dict[str, list[str]] = {}
    for index, raw in enumerate(raw_items):
        prefix = f"items[{index}]."
        name = str(raw.get("flavor", ""))
        flavor = on_cluster.get(name) or flavors.get(name)
        if flavor is None:
            errors[f"{prefix}flavor"] = [f"no flavor {name!r} on cluster {cluster.name!r}"]
            continue
        try:
            items.append(
                quota_item_parse(
                    flavor=flavor,
                    resource=str(raw.get("resource", "")),
                    guaranteed=raw.get("guaranteed"),
                    limit=raw.get("limit"),
                    lending_limit=raw.get("lending_limit"),
                    field_prefix=prefix,
                )
            )
        except ValidationFailed as exc:
            for key, messages in exc.fields.items():
                errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationFailed(next(iter(errors.values()))[0], fields=errors)
    return items


REASON_REQUIRED = "a reason is required: say why the team needs it"


def quota_request_validate(
    *,
    actor: User,
    tenant: Tenant,
    cluster: Cluster,
    reason: str,
    raw_items: Sequence[Mapping[str, Any]],
    scheduling: Mapping[str, Any] | None = None,
    tier: TierTemplate | None = None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
) -> RequestCheck:
    """What filing this request would answer, storing nothing (the API's and the portal's
    live check). Who may file is enforced as for ``quota_request_create`` (404 / 403); every
    rule the request breaks comes back in ``errors`` instead of being raised. With
    ``starts_at`` or ``ends_at``: a grant for a time (``granting.grant_request_check``)."""
    quota_request_ensure_can_file(actor=actor, tenant=tenant)
    errors: dict[str, list[str]] = {} if reason.strip() else {"reason": [REASON_REQUIRED]}
    try:
        changes = request_changes(
            cluster=cluster,
            raw_items=raw_items,
            scheduling=scheduling or {},
            tier=tier,
            tenant=tenant,
        )
    except ValidationFailed as exc:
        return RequestCheck(errors={**errors, **exc.fields})
    if starts_at is not None or ends_at is not None:
        check = grant_request_check(
            tenant=tenant,
            cluster=cluster,
            items=changes["items"],
            starts_at=starts_at,
            ends_at=ends_at,
            others=_others(changes, isolation_level, production_priority, tenant_changes),
        )
        check.errors = {**errors, **check.errors}
        return check
    check = quota_request_check(
        tenant=tenant,
        cluster=cluster,
        items=changes["items"],
        scheduling=changes["scheduling"],
        isolation_level=isolation_level,
        production_priority=production_priority,
        tenant_changes=tenant_changes,
    )
    check.errors = {**errors, **check.errors}
    return check


def quota_request_create(**filing: Any) -> QuotaChangeRequest:
    """``quota_request_file``'s request (the callers that do not show its check)."""
    return quota_request_file(**filing).request


@dataclass(frozen=True)
class Filed:
    """A request just filed and its check, made once: the answer shows that check rather than
    running it again (the filing's own check, its submit and its answer ran it three times)."""

    request: QuotaChangeRequest
    check: RequestCheck


@transaction.atomic
def quota_request_file(
    *,
    tenant: Tenant,
    cluster: Cluster,
    requester: User,
    reason: str,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any] | None = None,
    submit: bool = False,
    tier: TierTemplate | None = None,
    replaces: QuotaChangeRequest | None = None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
) -> Filed:
    """File a request (a draft, or pending with ``submit``). Refused whole, storing nothing,
    when it breaks a rule. ``replaces``: a draft of the same tenant and cluster (a suggested
    change, say) that the new request supersedes; it is cancelled in the same transaction,
    so the old numbers and the new never wait side by side.

    The check runs once, on the tenant and cluster as they are now (read again: a caller's
    copy may predate a limit approved since), and serves the submit too. With ``starts_at``
    or ``ends_at`` it is a grant for a time: ``items`` are added on top of the standing lines
    over that window (``granting.grant_request_check``)."""
    quota_request_ensure_can_file(actor=requester, tenant=tenant)
    if not reason.strip():
        raise ValidationFailed.for_field("reason", REASON_REQUIRED)
    tenant = Tenant.objects.get(pk=tenant.pk)
    cluster = Cluster.objects.get(pk=cluster.pk)
    scheduling = dict(scheduling or {})
    grant = starts_at is not None or ends_at is not None
    if grant:
        now = timezone.now()
        starts_at = max(starts_at or now, now)
        check = grant_request_check(
            tenant=tenant,
            cluster=cluster,
            items=items,
            starts_at=starts_at,
            ends_at=ends_at,
            others=_others(
                {"scheduling": scheduling, "tier": tier},
                isolation_level,
                production_priority,
                tenant_changes,
            ),
            now=now,
        )
    else:
        check = quota_request_check(
            tenant=tenant,
            cluster=cluster,
            items=items,
            scheduling=scheduling,
            isolation_level=isolation_level,
            production_priority=production_priority,
            tenant_changes=tenant_changes,
        )
    check.raise_if_invalid()
    with transaction.atomic():
        replaced = _replaceable(replaces, tenant=tenant, cluster=cluster, actor=requester)
        request = _create(
            tenant=tenant, cluster=cluster, requester=requester, reason=reason, check=check,
            items=items, scheduling=scheduling, tier=tier, replaced=replaced,
            isolation_level=isolation_level, production_priority=production_priority,
            tenant_changes=tenant_changes or {}, starts_at=starts_at, ends_at=ends_at,
        )  # fmt: skip
        if submit:
            _submit(request, actor=requester, check=check)  # its own row: no lock to take
    return Filed(request, check)


def _replaceable(
    draft: QuotaChangeRequest | None, *, tenant: Tenant, cluster: Cluster, actor: User
) -> QuotaChangeRequest | None:
    """``draft`` locked, if a new request may supersede it: a draft still, of the same tenant
    and cluster, that ``actor`` could submit (its requester or a platform admin). 409 when it
    is no longer a draft (submitted or cancelled meanwhile), 400 naming ``replaces`` else."""
    if draft is None:
        return None
    draft = locked(draft)
    if draft.tenant_id != tenant.pk or draft.cluster_id != cluster.pk:
        raise ValidationFailed.for_field(
            "replaces", f"request #{draft.pk} is for another tenant or cluster"
        )
    if draft.requester_id != actor.pk and not actor.is_platform_admin:
        raise PermissionDenied("Only the draft's requester or a platform admin replaces it.")
    if draft.status != RequestStatus.DRAFT:
        raise Conflict(
            f"Request #{draft.pk} is {draft.status}, no longer a draft: it cannot be replaced.",
            fields={"replaces": [f"request #{draft.pk} is {draft.status}"]},
        )
    return draft


def _create(
    *,
    tenant: Tenant,
    cluster: Cluster,
    requester: User,
    reason: str,
    check: RequestCheck,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any],
    tier: TierTemplate | None,
    replaced: QuotaChangeRequest | None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
    starts_at: datetime | None = None,
    ends_at: datetime | None = None,
) -> QuotaChangeRequest:
    request = QuotaChangeRequest.objects.create(
        starts_at=starts_at,
        ends_at=ends_at,
        tenant=tenant,
        cluster=cluster,
        requester=requester,
        reason=reason.strip(),
        source=audit_source.get(),
        base_generation=check.base_generation,
        required_approvals=check.required_approvals,
        tier=tier,
        isolation_level=isolation_level,
        production_priority=production_priority,
        **{k: v for k, v in scheduling.items() if k in SCHEDULING_FIELDS}
        | _canonical_egress(scheduling),
        **_canonical_changes(tenant_changes or {}),
    )
    store_items(request, items)
    audit_record(
        actor=requester,
        action="quota_request.created",
        obj=request,
        tenant=tenant,
        object_id=f"#{request.pk}",
        after=_request_snapshot(request, check)
        | ({"replaces": f"#{replaced.pk}"} if replaced is not None else {}),
    )
    if replaced is not None:
        transition(
            replaced,
            RequestStatus.CANCELLED,
            actor=requester,
            decided_at=timezone.now(),
        )
    return request


def _others(
    changes: Mapping[str, Any],
    isolation_level: str,
    production_priority: bool | None,
    tenant_changes: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What a grant for a time must leave empty, by the field a body names it."""
    tier = changes.get("tier")
    return {
        **{k: v for k, v in (changes.get("scheduling") or {}).items() if k in SCHEDULING_FIELDS},
        **{k: v for k, v in (tenant_changes or {}).items() if k in TENANT_FIELDS},
        "isolation_level": isolation_level,
        "production_priority": production_priority,
        "tier": tier.name if tier is not None else None,
    }


def _canonical_egress(scheduling: Mapping[str, Any]) -> dict[str, Any]:
    """The egress exceptions as stored: canonical ("tcp" -> "TCP", 10.1.2.3/16 ->
    10.1.0.0/16), each once (the check passed: they read)."""
    if scheduling.get("egress_rules") is None:
        return {}
    return {"egress_rules": egress_rules_canonical(scheduling["egress_rules"])}


def _canonical_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The tenant changes as stored: a bandwidth cap in its canonical text ("1000M" -> "1G")."""
    values = {k: v for k, v in changes.items() if k in TENANT_FIELDS}
    if values.get("pod_bandwidth_max"):
        values["pod_bandwidth_max"] = pod_bandwidth_text(values["pod_bandwidth_max"])
    elif values.get("pod_bandwidth_max") is not None:
        values["pod_bandwidth_max"] = ""
    return values


def store_items(request: QuotaChangeRequest, items: Sequence[QuotaItem]) -> None:
    QuotaChangeItem.objects.bulk_create(
        QuotaChangeItem(
            request=request,
            flavor=i.flavor,
            resource=i.resource,
            guaranteed=i.guaranteed,
            limit=i.limit,
            lending_limit=i.lending_limit,
        )
        for i in items
    )


def _request_snapshot(request: QuotaChangeRequest, check: RequestCheck) -> dict[str, Any]:
    return {
        "cluster": request.cluster.name,
        "reason": request.reason,
        "items": [
            {
                "flavor": d.flavor,
                "resource": d.resource,
                "before": f"{format_quantity(d.guaranteed_before, d.resource)}/{format_quantity(d.limit_before, d.resource)}",
                "after": f"{format_quantity(d.guaranteed_after, d.resource)}/{format_quantity(d.limit_after, d.resource)}",
            }
            for d in check.diff
        ],
        "required_approvals": check.required_approvals,
        **(
            {"starts_at": request.starts_at.isoformat(), "ends_at": request.ends_at.isoformat()}
            if request.starts_at is not None and request.ends_at is not None
            else {}
        ),
        **({"tier": request.tier.name} if request.tier else {}),
        **({"isolation_level": request.isolation_level} if request.isolation_level else {}),
        **(
            {"production_priority": request.production_priority}
            if request.production_priority is not None
            else {}
        ),
        **{
            name: str(value)
            for name in (
                "max_gpus_per_pod",
                "max_cpu_per_pod",
                "max_memory_per_pod",
                "inference_gpus",
            )
            if (value := getattr(request, name)) is not None
        },
        **{k: str(v) for k, v in quota_request_tenant_changes(request).items()},
    }


@transaction.atomic
def quota_request_submit(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    """The requester (a lead of the tenant still: the role now, not when the draft was filed)
    or a platform admin submits a draft."""
    request = locked(request)
    if request.requester_id != actor.pk and not actor.is_platform_admin:
        raise PermissionDenied("Only the requester or a platform admin submits a draft.")
    quota_request_ensure_can_file(actor=actor, tenant=request.tenant)
    ensure_may_become(request, RequestStatus.PENDING)  # a decided one: 409, before its numbers
    check = quota_request_check_stored(request=request)
    check.raise_if_invalid()
    return _submit(request, actor=actor, check=check)


def _submit(request: QuotaChangeRequest, *, actor: User, check: RequestCheck) -> QuotaChangeRequest:
    """Pending, locked ``request`` with its ``check`` passed: the notices to the approvers."""
    transition(
        request,
        RequestStatus.PENDING,
        actor=actor,
        submitted_at=timezone.now(),
        base_generation=check.base_generation,
        required_approvals=check.required_approvals,
        needs_revalidation=False,
    )
    approvers = User.objects.filter(is_platform_admin=True, is_active=True).exclude(
        pk=actor.pk if request.requester_id is None else request.requester_id
    )
    notify(
        users=approvers,
        subject=f"Request #{request.pk} for {request.tenant.slug} on {request.cluster.name} awaits approval",
        body=f"{actor.get_username()} asks: {request.reason}\nIt needs {counted(request.required_approvals, 'approval')}.",
        url=f"/requests/{request.pk}/",
    )
    return request


@transaction.atomic
def quota_request_cancel(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    request = locked(request)
    if request.requester_id != actor.pk:
        raise PermissionDenied("Only the requester cancels a request; admins reject instead.")
    transition(request, RequestStatus.CANCELLED, actor=actor, decided_at=timezone.now())
    return request
