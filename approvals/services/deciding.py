"""Deciding a request: a reject, an approval (with enough of them the change is applied: the
decision, the next quota set generation, the audit rows and the outbox row in one
transaction), the expiry of pending ones, and the auto-approved requests the system files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

from django.db import IntegrityError, connection, transaction
from django.db.models import (
    Case,
    DecimalField,
    F,
    Field,
    Func,
    OuterRef,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Cast
from django.utils import timezone

from approvals.choices import DecisionKind, RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeItem, QuotaChangeRequest
from approvals.services.checks import (
    ReadAlready,
    quota_request_check,
    quota_request_check_stored,
    quota_request_scheduling,
    quota_request_tenant_changes,
)
from approvals.services.filing import store_items
from approvals.services.granting import grant_apply
from approvals.services.policy import approval_policy
from approvals.services.rules import SCHEDULING_FIELDS, merged_scheduling
from approvals.services.transitions import (
    ensure_can_decide,
    locked,
    transition,
    transition_approved,
)
from core.errors import (
    Conflict,
)
from core.prepared import prepared_objects, prepared_update
from quotas.choices import GRANT_HOLDING_STATES
from quotas.models import (
    Cluster,
    FlavorResource,
    Quota,
    QuotaSet,
    ResourceFlavor,
    TierTemplate,
)
from quotas.selectors import flavor_capacities_and_guarantees, flavor_capacity_query
from quotas.services import (
    QuotaItem,
    cluster_lock,
    outbox_record,
    quota_set_lock,
    quota_set_store,
    quota_sets_resync,
)
from tenants.choices import AuditSource
from tenants.models import AuditEvent, Tenant, User
from tenants.services import (
    audit_record,
    tenant_isolation_level_set,
    tenant_limits_set,
    tenant_production_priority_set,
)


def _ensure_pending(request: QuotaChangeRequest) -> None:
    if request.status != RequestStatus.PENDING:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; only a pending request can be decided.",
            fields={"status": [f"{request.status} is already final or not submitted"]},
        )


def _decided_twice(request: QuotaChangeRequest) -> Conflict:
    return Conflict(
        f"You have already decided on request #{request.pk}; a second approver must be someone else.",
        fields={"approver": ["already decided"]},
    )


def _decide(
    request: QuotaChangeRequest, approver: User, kind: str, comment: str
) -> list[ApprovalDecision]:
    """Record ``approver``'s decision on the locked ``request``: its decisions, the new one
    last (with their approvers, for the requester's notice), in one read and one insert."""
    _ensure_pending(request)
    decisions = list(request.decisions.select_related("approver"))
    if any(d.approver_id == approver.pk for d in decisions):
        raise _decided_twice(request)
    decisions.append(
        ApprovalDecision.objects.create(
            request=request, approver=approver, decision=kind, comment=comment
        )
    )
    return decisions


def _decide_alone(request: QuotaChangeRequest, approver: User, comment: str) -> ApprovalDecision:
    """Record ``approver``'s approval of the locked ``request``, which needs one: it applies
    whatever was decided before, so the decisions are read later, with its lines. A second
    decision of the same approver breaks the table's constraint (one per approver): 409, and
    the transaction rolls back."""
    _ensure_pending(request)
    try:
        return ApprovalDecision.objects.create(
            request=request, approver=approver, decision=DecisionKind.APPROVE, comment=comment
        )
    except IntegrityError as exc:
        raise _decided_twice(request) from exc


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
    request = locked(request, for_approval=True)
    ensure_can_decide(actor=approver, request=request)
    if request.required_approvals <= 1:  # this approval applies it
        _apply(request, actor=approver, decision=_decide_alone(request, approver, comment))
        return request
    decisions = _decide(request, approver, DecisionKind.APPROVE, comment)
    approvals = sum(1 for d in decisions if d.decision == DecisionKind.APPROVE)
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
    _apply(request, actor=approver, decisions=decisions)
    return request


def _apply(
    request: QuotaChangeRequest,
    *,
    actor: User | None,
    decisions: Sequence[ApprovalDecision] | None = None,
    decision: ApprovalDecision | None = None,
) -> None:
    """Apply the (locked, or just filed) request: the quota set's row and the cluster's are
    locked in one statement (every write of a quota set on the cluster takes the cluster's,
    so two approvals cannot both pass a check that only one fits), then one read of the
    capacities, the guarantees, the request's lines and those in force, the one check, and the
    writes. Nine statements whatever the number of lines (ten with a MIG line): the locks,
    the read, the lines, the quota set, the lines' "before" values, the request and its
    siblings, the notice, the audit rows (one insert) and the outbox row. A grant for a time
    (``ends_at``) is scheduled instead (``_apply_grant``)."""
    if request.ends_at is not None:
        _apply_grant(request, actor=actor, decisions=decisions, decision=decision)
        return
    tenant_changes = quota_request_tenant_changes(request)
    if request.tenant.gpu_unit_cap is not None or tenant_changes:
        # The cap spans clusters, whose quota sets lock one by one: approvals for the tenant
        # on two clusters take turns here, so the second counts what the first wrote.
        request.tenant = Tenant.objects.select_for_update().get(pk=request.tenant_id)
    tenant, cluster = request.tenant, request.cluster
    if tenant.archived_at is not None:  # refused by a rule of the check, which names it
        quota_request_check_stored(request=request).raise_if_invalid(error=Conflict)
    # The cluster's row with the quota set's, in one statement, after the reads that need no
    # lock; held for the read of the lines, the capacities, the check and the writes.
    quota_set, created = quota_set_lock(tenant=tenant, cluster=cluster, with_cluster=True)
    if created:
        cluster_lock(cluster)
    in_force = None if created else quota_set
    rows = _capacities_and_lines(request, cluster, in_force, decisions=decision is not None)
    item_rows, line_rows, decided = _rows_of(rows, in_force, decisions=decision is not None)
    if item_rows is None:  # a line without a capacity: read on their own
        item_rows, line_rows, decided = _rows(request, in_force, decisions=decision is not None)
    capacities, elsewhere, flavors = flavor_capacities_and_guarantees(
        cluster=cluster, rows=rows, checked={r[1] for r in (*item_rows, *line_rows)}
    )
    missing = {r[1] for r in (*item_rows, *line_rows)} - set(flavors)
    if missing:  # a flavor without capacities, which the check refuses by name
        flavors = {**flavors, **ResourceFlavor.objects.select_related("cluster").in_bulk(missing)}
    items = sorted(
        (QuotaItem(flavors[r[1]], r[2], r[3], r[4], r[5]) for r in item_rows),
        key=lambda i: (i.flavor.name, i.resource),
    )
    current = {(r[1], r[2]): QuotaItem(flavors[r[1]], r[2], r[3], r[4], r[5]) for r in line_rows}
    check = quota_request_check(
        tenant=tenant,
        cluster=cluster,
        items=items,
        scheduling=quota_request_scheduling(request),
        isolation_level=request.isolation_level,
        production_priority=request.production_priority,
        tenant_changes=tenant_changes,
        read=ReadAlready(
            quota_set=in_force,
            current=current,
            department=getattr(request, "tenant_is_department", None),
            capacities=capacities,
            guaranteed_elsewhere=elsewhere,
        ),
    )
    check.raise_if_invalid(error=Conflict)  # e.g. a concurrent approval took the capacity
    merged = {**current, **{(i.flavor.pk, i.resource): i for i in items}}
    reason = f"request #{request.pk}: {request.reason}"
    audit = [
        quota_set_store(
            quota_set=quota_set,
            created=created,
            current=current,
            items=list(merged.values()),
            scheduling=merged_scheduling(in_force, quota_request_scheduling(request)),
            actor=actor,
            tier=request.tier,
            reason=reason,
        )
    ]
    # What it changed, as it stood when approved: the request keeps showing "6 -> 8".
    _befores_store(
        [
            (
                pk,
                before.guaranteed if before else Decimal(0),
                before.limit if before else Decimal(0),
            )
            for pk, flavor_id, resource, *_ in item_rows
            for before in [current.get((flavor_id, resource))]
        ]
    )
    if request.isolation_level or request.production_priority is not None or tenant_changes:
        AuditEvent.objects.bulk_create(audit)  # before the tenant's own rows, as it happened
        audit = []
    if request.isolation_level:
        tenant_isolation_level_set(
            tenant=tenant, isolation_level=request.isolation_level, actor=actor, reason=reason
        )
    if request.production_priority is not None:
        tenant_production_priority_set(
            tenant=tenant, allowed=request.production_priority, actor=actor, reason=reason
        )
        # A tenant attribute every cluster compiles: push the tenant's other clusters too.
        quota_sets_resync(tenant=tenant, actor=actor, exclude=cluster)
    if tenant_changes:
        tenant_limits_set(tenant=tenant, changes=tenant_changes, actor=actor, reason=reason)
        if "pod_bandwidth_max" in tenant_changes:
            # R27: its namespaces carry the cap on every cluster: push the others too.
            quota_sets_resync(tenant=tenant, actor=actor, exclude=cluster)
    if decision is not None:  # the one approval it needed: others are read only if there are
        others = decided > 1
        decisions = list(request.decisions.select_related("approver")) if others else [decision]
    if decisions is None:  # filed by the system: nobody decided
        decisions = []
    # Older open requests for this tenant and cluster were checked against numbers that are
    # no longer in force: they must be checked again before anyone approves them (marked in
    # the same statement).
    transition_approved(
        request,
        actor=actor,
        decisions=decisions,
        audit=audit,
        decided_at=timezone.now(),
        approved_generation=quota_set.generation,
    )
    outbox_record(quota_set=quota_set)


def _apply_grant(
    request: QuotaChangeRequest,
    *,
    actor: User | None,
    decisions: Sequence[ApprovalDecision] | None,
    decision: ApprovalDecision | None,
) -> None:
    """Apply an approved grant for a time (the request locked): under the quota set's and
    the cluster's locks, its check again and the grant scheduled, started at once when its
    window has begun (the next generation and its outbox row); the request approved with
    that generation (None while it waits: the beat sets it when it starts)."""
    quota_set, created = quota_set_lock(
        tenant=request.tenant, cluster=request.cluster, with_cluster=True
    )
    if created:
        cluster_lock(request.cluster)
    generation = grant_apply(request, quota_set=quota_set, actor=actor)
    if decision is not None:
        decisions = list(request.decisions.select_related("approver"))
    transition_approved(
        request,
        actor=actor,
        decisions=decisions or [],
        audit=[],
        decided_at=timezone.now(),
        approved_generation=generation,
    )


def _befores_store(befores: Sequence[tuple[int, Decimal, Decimal]]) -> None:
    """The request's lines' "before" values (line id, guaranteed, limit) in one UPDATE, as
    ``bulk_update`` writes them, the statement compiled once per process for each number of
    lines (none: no statement, as ``bulk_update`` does)."""
    if not befores:
        return
    fields = ("guaranteed_before", "limit_before")
    model = QuotaChangeItem._meta

    def build() -> tuple[Any, dict[str, Any]]:
        values = {}
        for n, name in enumerate(fields, start=1):
            field = cast("Field[Any, Any]", model.get_field(name))
            whens = [When(pk=row[0], then=Value(row[n], output_field=field)) for row in befores]
            case = Case(*whens, output_field=field)
            casted = connection.features.requires_casted_case_in_updates  # as bulk_update does
            values[name] = Cast(case, output_field=field) if casted else case
        return QuotaChangeItem.objects.filter(pk__in=[row[0] for row in befores]), values

    params: list[Any] = []
    for n, name in enumerate(fields, start=1):
        field = cast("Field[Any, Any]", model.get_field(name))
        params += [
            p for row in befores for p in (row[0], field.get_db_prep_value(row[n], connection))
        ]
    params += [row[0] for row in befores]
    prepared_update(("request-befores", len(befores)), build, params)


def _capacities_and_lines(
    request: QuotaChangeRequest, cluster: Cluster, in_force: QuotaSet | None, *, decisions: bool
) -> list[FlavorResource]:
    """``flavor_capacity_rows`` read with ``_lines_read_with``: the statement compiled once
    per process for each shape (a quota set in force or not, decisions counted or not)."""

    def build() -> Any:
        annotations = _lines_read_with(request, in_force, decisions=decisions)
        return flavor_capacity_query(cluster, in_force, annotations)

    params: list[Any] = [*GRANT_HOLDING_STATES, Decimal(0)]
    if in_force is not None:
        params.append(in_force.pk)
    params += [*[request.pk] * 4, 1, request.pk]  # the request's line, and the count's
    if in_force is not None:
        params += [*[in_force.pk] * 4, 1, in_force.pk]  # the line in force: the same
    if decisions:
        params += [1, request.pk]
    params.append(cluster.pk)
    key = ("approval-capacities", in_force is not None, decisions)
    return prepared_objects(key, build, params)


def _lines_read_with(
    request: QuotaChangeRequest, quota_set: QuotaSet | None, *, decisions: bool
) -> dict[str, Any]:
    """What an approval reads with the cluster's capacities (``flavor_capacity_rows``), on
    each flavor resource: the request's line on it and the line in force (``quota_set``'s),
    and how many lines (and decisions) there are in all, to tell whether each was found."""
    annotations: dict[str, Any] = {}
    parts: list[tuple[str, Any]] = [("item", QuotaChangeItem.objects.filter(request_id=request.pk))]
    if quota_set is not None:
        parts.append(("line", Quota.objects.filter(quota_set=quota_set)))
    for name, rows in parts:
        same = rows.filter(flavor_id=OuterRef("flavor_id"), resource=OuterRef("resource"))
        for field in ("pk", "guaranteed", "limit", "lending_limit"):
            annotations[f"a_{name}_{field}"] = Subquery(same.order_by().values(field)[:1])
        annotations[f"a_{name}_count"] = _count(rows)
    if decisions:
        annotations["a_decision_count"] = _count(
            ApprovalDecision.objects.filter(request_id=request.pk)
        )
    return annotations


def _count(rows: Any) -> Subquery:
    counted = rows.order_by().annotate(one=Value(1)).values("one")
    return Subquery(counted.annotate(n=Func(F("one"), function="COUNT")).values("n"))


def _rows_of(
    rows: Sequence[Any], quota_set: QuotaSet | None, *, decisions: bool
) -> tuple[list[Row] | None, list[Row], int]:
    """The request's lines, those in force and (a count of) its decisions from
    ``flavor_capacity_rows`` read with ``_lines_read_with``; None for the lines when one was
    not found there (on a flavor resource the cluster does not have: the check names it)."""
    items: list[Row] = []
    lines: list[Row] = []
    for fr in rows:
        for name, found in (("item", items), ("line", lines)):
            pk = getattr(fr, f"a_{name}_pk", None)
            if pk is not None:
                found.append(
                    (
                        pk,
                        fr.flavor_id,
                        fr.resource,
                        getattr(fr, f"a_{name}_guaranteed"),
                        getattr(fr, f"a_{name}_limit"),
                        getattr(fr, f"a_{name}_lending_limit"),
                    )
                )
    first = rows[0] if rows else None
    item_count = getattr(first, "a_item_count", None)
    line_count = getattr(first, "a_line_count", 0) if quota_set is not None else 0
    if first is None or len(items) != item_count or len(lines) != (line_count or 0):
        return None, [], 0
    return items, lines, (getattr(first, "a_decision_count", 0) or 0) if decisions else 0


Row = tuple[int, int, str, Decimal, Decimal, Decimal | None]  # pk, flavor, resource, amounts


def _rows(
    request: QuotaChangeRequest, quota_set: QuotaSet | None, *, decisions: bool
) -> tuple[list[Row], list[Row], int]:
    """In one query: the request's lines, those in force of ``quota_set`` (locked; None: it
    has none) and, with ``decisions``, how many decisions it has."""
    fields = ("pk", "flavor_id", "resource", "guaranteed", "limit", "lending_limit")
    mine = QuotaChangeItem.objects.filter(request_id=request.pk).order_by()
    query = mine.annotate(part=Value(0)).values_list("part", *fields)
    if quota_set is not None:
        lines = Quota.objects.filter(quota_set=quota_set).order_by()
        query = query.union(lines.annotate(part=Value(1)).values_list("part", *fields), all=True)
    if decisions:
        none = Value(None, output_field=DecimalField())
        made = ApprovalDecision.objects.filter(request_id=request.pk).order_by()
        made = made.annotate(part=Value(2), g=none, l=none, ll=none)
        query = query.union(
            made.values_list("part", "pk", "approver_id", "decision", "g", "l", "ll"), all=True
        )
    parts: tuple[list[Row], list[Row], list[Row]] = ([], [], [])
    for part, *row in query:
        parts[part].append(tuple(row))
    return parts[0], parts[1], len(parts[2])


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
