"""Deciding a request: a reject, an approval (with enough of them the change is applied: the
decision, the next quota set generation, the audit rows and the outbox row in one
transaction), the expiry of pending ones, and the auto-approved requests the system files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from approvals.choices import OPEN_STATUSES, DecisionKind, RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeItem, QuotaChangeRequest
from approvals.services.checks import (
    quota_request_check_stored,
    quota_request_items,
    quota_request_scheduling,
    quota_request_tenant_changes,
)
from approvals.services.filing import store_items
from approvals.services.policy import approval_policy
from approvals.services.rules import SCHEDULING_FIELDS, merged_scheduling, quotas_in_force
from approvals.services.transitions import ensure_can_decide, locked, transition
from core.errors import (
    Conflict,
    ValidationFailed,
)
from quotas.models import (
    Cluster,
    TierTemplate,
)
from quotas.services import (
    QuotaItem,
    outbox_record,
    quota_set_write,
    quota_sets_resync,
)
from tenants.choices import AuditSource
from tenants.models import Tenant, User
from tenants.services import (
    audit_record,
    tenant_isolation_level_set,
    tenant_limits_set,
    tenant_production_priority_set,
)


def _decide(request: QuotaChangeRequest, approver: User, kind: str, comment: str) -> None:
    if request.status != RequestStatus.PENDING:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; only a pending request can be decided.",
            fields={"status": [f"{request.status} is already final or not submitted"]},
        )
    if request.decisions.filter(approver=approver).exists():
        raise Conflict(
            f"You have already decided on request #{request.pk}; a second approver must be someone else.",
            fields={"approver": ["already decided"]},
        )
    ApprovalDecision.objects.create(
        request=request, approver=approver, decision=kind, comment=comment
    )


@transaction.atomic
def quota_request_reject(
    *, request: QuotaChangeRequest, approver: User, comment: str = ""
) -> QuotaChangeRequest:
    request = locked(request)
    ensure_can_decide(actor=approver, request=request)
    _decide(request, approver, DecisionKind.REJECT, comment)
    transition(request, RequestStatus.REJECTED, actor=approver, decided_at=timezone.now())
    return request


@transaction.atomic
def quota_request_approve(
    *, request: QuotaChangeRequest, approver: User, comment: str = ""
) -> QuotaChangeRequest:
    """Record an approval; with enough of them, apply the change: the decision, the next
    quota set generation, the audit rows and the outbox row commit together or not at all.
    A rule broken now (capacity taken meanwhile) is a 409 naming it."""
    request = locked(request)
    ensure_can_decide(actor=approver, request=request)
    _decide(request, approver, DecisionKind.APPROVE, comment)
    approvals = request.decisions.filter(decision=DecisionKind.APPROVE).count()
    if approvals < request.required_approvals:
        audit_record(
            actor=approver,
            action="quota_request.approval_recorded",
            obj=request,
            tenant=request.tenant,
            object_id=f"#{request.pk}",
            after={"approvals": approvals, "required": request.required_approvals},
        )
        return request
    _apply(request, actor=approver)
    return request


def _apply(request: QuotaChangeRequest, *, actor: User | None) -> None:
    if request.tenant.gpu_unit_cap is not None or quota_request_tenant_changes(request):
        # The cap spans clusters, whose quota sets lock one by one: approvals for the tenant
        # on two clusters take turns here, so the second counts what the first wrote.
        request.tenant = Tenant.objects.select_for_update().get(pk=request.tenant_id)
    items = quota_request_items(request)
    check = quota_request_check_stored(request=request)
    check.raise_if_invalid(error=Conflict)
    quota_set, current = quotas_in_force(request.tenant, request.cluster)
    merged = {**current, **{(i.flavor.pk, i.resource): i for i in items}}
    try:
        written = quota_set_write(
            tenant=request.tenant,
            cluster=request.cluster,
            items=list(merged.values()),
            scheduling=merged_scheduling(quota_set, quota_request_scheduling(request)),
            actor=actor,
            tier=request.tier,
            reason=f"request #{request.pk}: {request.reason}",
        )
    except ValidationFailed as exc:  # a concurrent approval took the capacity first
        # Checked again under the cluster lock, the errors name the request's own items
        # (``exc`` numbers the merged quota set's lines).
        errors = quota_request_check_stored(request=request).errors or exc.fields
        raise Conflict(next(iter(errors.values()))[0], fields=errors) from exc
    # What it changed, as it stood when approved: the request keeps showing "6 -> 8".
    lines = list(request.items.all())
    for line in lines:
        before = current.get((line.flavor_id, line.resource))
        line.guaranteed_before = before.guaranteed if before else Decimal(0)
        line.limit_before = before.limit if before else Decimal(0)
    QuotaChangeItem.objects.bulk_update(lines, ["guaranteed_before", "limit_before"])
    if request.isolation_level:
        tenant_isolation_level_set(
            tenant=request.tenant,
            isolation_level=request.isolation_level,
            actor=actor,
            reason=f"request #{request.pk}: {request.reason}",
        )
    if request.production_priority is not None:
        tenant_production_priority_set(
            tenant=request.tenant,
            allowed=request.production_priority,
            actor=actor,
            reason=f"request #{request.pk}: {request.reason}",
        )
        # A tenant attribute every cluster compiles: push the tenant's other clusters too.
        quota_sets_resync(tenant=request.tenant, actor=actor, exclude=request.cluster)
    limits = quota_request_tenant_changes(request)
    if limits:
        tenant_limits_set(
            tenant=request.tenant,
            changes=limits,
            actor=actor,
            reason=f"request #{request.pk}: {request.reason}",
        )
        if "pod_bandwidth_max" in limits:
            # R27: its namespaces carry the cap on every cluster: push the others too.
            quota_sets_resync(tenant=request.tenant, actor=actor, exclude=request.cluster)
    transition(
        request,
        RequestStatus.APPROVED,
        actor=actor,
        decided_at=timezone.now(),
        approved_generation=written.generation,
    )
    outbox_record(quota_set=written)
    # Older open requests for this tenant and cluster were checked against numbers that are
    # no longer in force: they must be checked again before anyone approves them.
    QuotaChangeRequest.objects.filter(
        tenant=request.tenant, cluster=request.cluster, status__in=OPEN_STATUSES
    ).exclude(pk=request.pk).update(needs_revalidation=True)


@transaction.atomic
def quota_requests_expire(*, now: Any = None) -> int:
    """Pending requests older than the policy allows become expired. Safe to run twice."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=approval_policy().pending_expires_after_days)
    expired = 0
    for request in QuotaChangeRequest.objects.filter(
        status=RequestStatus.PENDING, submitted_at__lt=cutoff
    ).select_related("tenant"):
        try:
            transition(request, RequestStatus.EXPIRED, actor=None, decided_at=now)
            expired += 1
        except Conflict:
            continue  # decided meanwhile
    return expired


@transaction.atomic
def quota_request_grant(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any],
    reason: str,
    actor: User | None,
    tier: TierTemplate | None = None,
    production_priority: bool | None = None,
) -> QuotaChangeRequest:
    """A change the system makes (onboarding, seed data): an auto-approved request with
    source "system", applied like any approval (generation, audit, outbox), so the audit trail
    has no gap. Raises Conflict, naming the rule, when it does not fit."""
    request = QuotaChangeRequest.objects.create(
        tenant=tenant,
        cluster=cluster,
        requester=actor,
        source=AuditSource.SYSTEM,
        reason=reason,
        status=RequestStatus.PENDING,
        submitted_at=timezone.now(),
        tier=tier,
        production_priority=production_priority,
        **{k: v for k, v in scheduling.items() if k in SCHEDULING_FIELDS},
    )
    store_items(request, items)
    _apply(request, actor=actor)
    return request
