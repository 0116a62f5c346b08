"""Who may do what to a request, and its moves from one status to the next: each a
conditional update (or under the row lock), audited, and told to the requester."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from django.db import connection
from django.db.models import Case, Exists, F, Field, OuterRef, Q, Subquery, Value, When

from approvals.choices import OPEN_STATUSES, TRANSITIONS, DecisionKind, RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeRequest
from core.errors import (
    Conflict,
    NotFound,
    PermissionDenied,
)
from core.prepared import prepared_objects, prepared_update
from quotas.choices import SyncBackend
from tenants.choices import MembershipRole
from tenants.models import AuditEvent, Tenant, User
from tenants.selectors import membership_role
from tenants.services import (
    audit_event,
    notify,
)

# What the requester is told when their request becomes one of these ({cluster}: its cluster).
DECISION_NOTICES: dict[str, str] = {
    RequestStatus.APPROVED: "was approved",
    RequestStatus.REJECTED: "was rejected",
    RequestStatus.EXPIRED: "expired unanswered",
    RequestStatus.APPLIED: "was applied in {cluster}",
    RequestStatus.FAILED: "could not be applied in {cluster}",
}


def quota_request_ensure_can_file(*, actor: User, tenant: Tenant) -> None:
    """A lead of ``tenant`` or a platform admin files its requests: 404 for a tenant the
    actor cannot see, 403 for a member or viewer."""
    if actor.is_platform_admin:
        return
    role = membership_role(user=actor, tenant=tenant)
    if role is None:
        raise NotFound("No such tenant, or it is not yours to see.")
    if role != MembershipRole.LEAD:
        raise PermissionDenied(
            f"Only a lead of {tenant.slug} or a platform admin files its requests; you are a {role}."
        )


def ensure_can_decide(*, actor: User, request: QuotaChangeRequest) -> None:
    if not actor.is_platform_admin:
        raise PermissionDenied("Only platform admins approve or reject requests.")
    if request.requester_id == actor.pk:
        raise PermissionDenied("Nobody approves or rejects their own request: another admin must.")


def ensure_may_become(request: QuotaChangeRequest, to: str) -> None:
    """409 unless ``to`` may follow the request's status now."""
    if to not in TRANSITIONS[request.status]:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; it cannot become {to}.",
            fields={"status": [f"{request.status} -> {to} is not allowed"]},
        )


def locked(request: QuotaChangeRequest, *, for_approval: bool = False) -> QuotaChangeRequest:
    """The request's row, locked for the caller's transaction, with its tenant, cluster,
    requester and tier.

    ``for_approval``: the open requests of its tenant on its cluster are locked with it, in
    the order of their ids, in the same statement, and it comes with
    ``tenant_is_department`` (whether other tenants name its tenant as parent). An approval
    that applies marks those requests to be checked again, after it has locked the quota
    set: were they not locked first, two approvals of one tenant on one cluster would each
    hold its request and wait for the other's (a deadlock)."""
    query = QuotaChangeRequest.objects.select_for_update(of=("self",)).select_related(
        "tenant", "cluster", "requester", "tier"
    )
    if not for_approval:
        try:
            return query.get(pk=request.pk)
        except QuotaChangeRequest.DoesNotExist as exc:
            raise NotFound(NOT_FOUND) from exc

    def build() -> Any:
        this = QuotaChangeRequest.objects.filter(pk=request.pk)
        children = Tenant.objects.filter(parent_id=OuterRef("tenant_id"))
        return (
            query.filter(
                Q(pk=request.pk) | Q(status__in=OPEN_STATUSES),
                tenant_id=Subquery(this.values("tenant_id")),
                cluster_id=Subquery(this.values("cluster_id")),
            )
            .annotate(tenant_is_department=Exists(children))
            .order_by("pk")
        )

    # Compiled once per process (the statement is the same for every approval).
    rows = prepared_objects(
        "approval-locked", build, (1, request.pk, *OPEN_STATUSES, *[request.pk] * 2)
    )
    found = next((row for row in rows if row.pk == request.pk), None)
    if found is None:
        raise NotFound(NOT_FOUND)
    return found


NOT_FOUND = "No such request, or it is not yours to see."


def transition(request: QuotaChangeRequest, to: str, *, actor: User | None, **fields: Any) -> None:
    """Move ``request`` to ``to`` if that is legal from its status now (conditional update)."""
    ensure_may_become(request, to)
    updated = QuotaChangeRequest.objects.filter(pk=request.pk, status=request.status).update(
        status=to, **fields
    )
    if updated != 1:
        request.refresh_from_db()
        raise Conflict(
            f"Request #{request.pk} changed meanwhile; it is now {request.status}.",
            fields={"status": [f"now {request.status}"]},
        )
    _moved(request, to, actor=actor, fields=fields).save(force_insert=True)


def transition_approved(
    request: QuotaChangeRequest,
    *,
    actor: User | None,
    decisions: Sequence[ApprovalDecision],
    audit: Sequence[AuditEvent],
    **fields: Any,
) -> None:
    """``transition(request, APPROVED)`` for a change just applied, in fewer statements: one
    UPDATE moves the request and marks its tenant's other open requests on the cluster to be
    checked again (their checks read numbers no longer in force), the notice quotes
    ``decisions`` (read already, the new one with them), and the audit rows ``audit`` and the
    request's own are written in one INSERT. The caller holds the request's row lock (or
    has just created it): its status cannot change meanwhile."""
    to = RequestStatus.APPROVED
    ensure_may_become(request, to)

    def build() -> tuple[Any, dict[str, Any]]:
        this = Q(pk=request.pk)
        model = QuotaChangeRequest._meta
        moved = {
            name: Case(
                When(this, then=Value(value)),
                default=F(name),
                output_field=cast("Field[Any, Any]", model.get_field(name)),
            )
            for name, value in fields.items()
        }
        rows = QuotaChangeRequest.objects.filter(
            (this & Q(status=request.status))
            | (
                Q(
                    tenant_id=request.tenant_id,
                    cluster_id=request.cluster_id,
                    status__in=OPEN_STATUSES,
                )
                & ~this
            )
        )
        return rows, {
            "status": Case(When(this, then=Value(to)), default=F("status")),
            "needs_revalidation": Case(
                When(this, then=F("needs_revalidation")), default=Value(True)
            ),
            **moved,
        }

    # Compiled once per process for each set of fields (its parameters, in order: the SET
    # clause's, then the WHERE clause's).
    model = QuotaChangeRequest._meta
    moved = [
        p
        for name, value in fields.items()
        for p in (request.pk, _field(model, name).get_db_prep_value(value, connection))
    ]
    where = (request.pk, request.status, request.cluster_id, *OPEN_STATUSES, request.tenant_id)
    params = (request.pk, to, request.pk, True, *moved, *where, request.pk)
    prepared_update(("request-approved", *fields), build, params)
    AuditEvent.objects.bulk_create(
        [*audit, _moved(request, to, actor=actor, fields=fields, decisions=decisions)]
    )


def _field(model: Any, name: str) -> Field[Any, Any]:
    return cast("Field[Any, Any]", model.get_field(name))


def _moved(
    request: QuotaChangeRequest,
    to: str,
    *,
    actor: User | None,
    fields: Mapping[str, Any],
    decisions: Sequence[ApprovalDecision] | None = None,
) -> AuditEvent:
    """After the request's row moved to ``to``: the request object too, the requester told,
    and the audit row returned (not saved)."""
    before = request.status
    request.status = to
    for name, value in fields.items():
        setattr(request, name, value)
    if (
        to in DECISION_NOTICES
        and request.requester is not None
        and request.requester_id != getattr(actor, "pk", None)
    ):
        what = DECISION_NOTICES[to].format(cluster=request.cluster.name)
        notify(
            users=[request.requester],
            subject=f"Request #{request.pk} for {request.tenant.slug} {what}",
            body=_notice_body(request, to, decisions),
            url=f"/requests/{request.pk}/",
        )
    return audit_event(
        actor=actor,
        action=f"quota_request.{to}",
        obj=request,
        tenant=request.tenant,
        object_id=f"#{request.pk}",
        before={"status": before},
        after={"status": to, **_jsonable(fields)},
    )


def _notice_body(
    request: QuotaChangeRequest, to: str, decisions: Sequence[ApprovalDecision] | None = None
) -> str:
    """What the requester reads with the news: the approvers' comments on a decision, where
    the change stands in the cluster, the cluster's message on a failure, and their reason.
    ``decisions``: the request's, with their approvers, when the caller read them already."""
    cluster = request.cluster.name
    parts: list[str] = []
    if to in (RequestStatus.APPROVED, RequestStatus.REJECTED):
        kind = DecisionKind.APPROVE if to == RequestStatus.APPROVED else DecisionKind.REJECT
        if decisions is None:
            decisions = list(request.decisions.filter(decision=kind).select_related("approver"))
        for decision in sorted(decisions, key=lambda d: (d.created_at, d.pk or 0)):
            if decision.decision != kind:
                continue
            said = decision.comment.strip() or "(no comment)"
            verb = "Approved" if kind == DecisionKind.APPROVE else "Rejected"
            parts.append(f"{verb} by {decision.approver.get_username()}: {said}")
    if to == RequestStatus.APPROVED:
        if request.cluster.backend == SyncBackend.NONE:
            parts.append(f"The new quotas are in force ({cluster} is kept in the portal only).")
        else:
            parts.append(
                f"The new quotas are being pushed to {cluster}. "
                f"You will be told when they are applied in {cluster}."
            )
    elif to == RequestStatus.APPLIED:
        parts.append(f"The new quotas are in force in {cluster}.")
    elif to == RequestStatus.FAILED:
        parts.append(
            f"{cluster} did not accept the new quotas: {request.failure_message or 'no reason given'}"
            "\nA platform admin can retry the push once the cause is fixed."
        )
    parts.append(f"Your reason: {request.reason}")
    return "\n\n".join(parts)


def _jsonable(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in fields.items()}
