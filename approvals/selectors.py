"""Reads for change requests. Each takes the actor and sees only what the actor may see."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Prefetch, Q, QuerySet

from approvals.choices import DecisionKind, RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeItem, QuotaChangeRequest
from core.errors import NotFound
from core.numbers import ascii_whole
from core.prepared import prepared_objects
from quotas.models import TenantSync
from tenants.models import AuditEvent, Tenant, User

NOT_VISIBLE = "No such request, or it is not yours to see."


def _visible(user: User) -> QuerySet[QuotaChangeRequest]:
    """Requests of the tenants ``user`` may see (the one scoping of this module). A platform
    admin's: all, with no ``tenant_id IN (every tenant)`` for PostgreSQL to join (10,000
    tenants made the approvals queue 1.55 times slower than 100)."""
    if user.is_authenticated and user.is_platform_admin:
        return QuotaChangeRequest.objects.all()
    return QuotaChangeRequest.objects.filter(tenant__in=Tenant.objects.visible_to(user))


def _visible_with_parts(user: User) -> QuerySet[QuotaChangeRequest]:
    """Requests of the tenants ``user`` may see, with their tenant, cluster, requester, tier,
    items and decisions loaded (three queries for any number of rows)."""
    return (
        _visible(user)
        .select_related("tenant", "cluster", "requester", "tier")
        .prefetch_related(
            Prefetch("items", queryset=QuotaChangeItem.objects.select_related("flavor")),
            Prefetch("decisions", queryset=ApprovalDecision.objects.select_related("approver")),
        )
    )


def quota_request_list_for_user(*, user: User) -> QuerySet[QuotaChangeRequest]:
    """Requests of the tenants ``user`` may see (admins: all), newest first, with what a list
    shows, in a constant number of queries."""
    return (
        _visible_with_parts(user)
        .annotate(approvals=Count("decisions", filter=Q(decisions__decision=DecisionKind.APPROVE)))
        .order_by("-created_at", "-id")
    )


def pending_tenant_slugs(*, user: User, named: str = "") -> list[str]:
    """The slugs of the tenants ``user`` may see that have a pending request, plus ``named``
    where such a tenant exists (the queue's tenant filter: a choice per tenant with something
    to approve, not one per tenant of the platform). One query, two with ``named``."""
    visible = Tenant.objects.visible_to(user)
    slugs = set(
        _visible(user)
        .filter(status=RequestStatus.PENDING)
        .order_by()
        .values_list("tenant__slug", flat=True)
        .distinct()
    )
    if named and named not in slugs and visible.filter(slug=named).exists():
        slugs.add(named)
    return sorted(slugs)


def quota_request_get_for_user(*, user: User, pk: int) -> QuotaChangeRequest:
    """The request, or 404 when it does not exist or belongs to a tenant ``user`` may not see."""
    # One row by its key: no GROUP BY over five joined tables to count its approvals (the
    # list's annotation), which took 4 ms of the 7 queries; they are counted from the
    # decisions loaded anyway.
    if user.is_authenticated and user.is_platform_admin:
        request = _with_parts_prepared(pk)
    else:
        request = _visible_with_parts(user).filter(pk=pk).first()
    if request is None:
        raise NotFound(NOT_VISIBLE)
    request.approvals = approvals_counted(request)  # type: ignore[attr-defined]
    return request


def _with_parts_prepared(pk: int) -> QuotaChangeRequest | None:
    """``_visible_with_parts(admin).filter(pk=pk).first()`` for a platform admin, who sees
    every request: the same three queries and objects, each statement compiled once per
    process (compiling them cost more than PostgreSQL took to answer)."""

    def build() -> QuerySet[QuotaChangeRequest]:
        rows = QuotaChangeRequest.objects.select_related("tenant", "cluster", "requester", "tier")
        return rows.filter(pk=pk).order_by("pk")[:1]

    found = prepared_objects("request-detail-admin", build, (pk,))
    if not found:
        return None
    request = found[0]
    parts = (
        ("items", QuotaChangeItem.objects.select_related("flavor")),
        ("decisions", ApprovalDecision.objects.select_related("approver")),
    )
    cache = request.__dict__.setdefault("_prefetched_objects_cache", {})
    for name, rows in parts:

        def part(rows: Any = rows) -> Any:
            return rows.filter(request_id=pk)

        related = prepared_objects(f"request-detail-{name}", part, (pk,))
        for row in related:  # as a prefetch leaves them: each knows its request
            row.request = request
        manager = getattr(request, name)
        cached = manager.get_queryset()
        cached._result_cache = related
        cached._prefetch_done = True
        cache[name] = cached
    return request


def quota_request_ids_closed(user: User, pks: set[int]) -> set[int]:
    """Of ``pks`` (requests the portal told ``user`` about), those that exist and ``user`` may
    no longer open (the inbox's check of its links; one query)."""
    seen = QuotaChangeRequest.objects.filter(pk__in=pks).exclude(pk__in=_visible(user).values("pk"))
    return set(seen.values_list("pk", flat=True))


def quota_request_visible(*, user: User, pk: int) -> QuotaChangeRequest:
    """The request's row alone (no parts), or 404 as ``quota_request_get_for_user`` answers."""
    request = _visible(user).filter(pk=pk).first()
    if request is None:
        raise NotFound(NOT_VISIBLE)
    return request


def approvals_counted(request: QuotaChangeRequest) -> int:
    """The approvals among ``request``'s decisions (prefetched by the selectors above: no query)."""
    return sum(1 for d in request.decisions.all() if d.decision == DecisionKind.APPROVE)


def quota_request_timeline(*, request: QuotaChangeRequest) -> QuerySet[AuditEvent]:
    """The request's audit events (filed, submitted, approvals, decision...), oldest first.
    The caller has already seen ``request`` through ``quota_request_get_for_user``."""
    return AuditEvent.objects.filter(
        tenant_id=request.tenant_id, object_id=f"#{request.pk}"
    ).order_by("created_at", "id")


def quota_request_timeline_list(*, request: QuotaChangeRequest) -> list[AuditEvent]:
    """``quota_request_timeline``'s events, its statement compiled once per process."""
    return prepared_objects(
        "request-timeline",
        lambda: quota_request_timeline(request=request),
        (f"#{request.pk}", request.tenant_id),
    )


def quota_request_push(*, request: QuotaChangeRequest) -> TenantSync | None:
    """Where the request's tenant stands on its cluster (the push's state and attempts)."""

    def build() -> QuerySet[TenantSync]:
        rows = TenantSync.objects.filter(tenant_id=request.tenant_id, cluster_id=request.cluster_id)
        return (rows if rows.ordered else rows.order_by("pk"))[:1]  # first()

    found = prepared_objects("request-push", build, (request.cluster_id, request.tenant_id))
    return found[0] if found else None


def quota_request_draft_for_form(
    *, user: User, tenant: Tenant, cluster_id: int, pk: str | None, drafts_only: bool = True
) -> QuotaChangeRequest | None:
    """The draft a request form starts from (``?from=`` / ``replaces``): None when ``pk`` is
    empty; 404 unless it is a request of ``tenant`` on the form's cluster that ``user`` sees
    (and, with ``drafts_only``, still a draft: the form's submit leaves that check to the
    service, which answers 409 for a draft submitted or cancelled meanwhile)."""
    if not pk:
        return None
    number = ascii_whole(pk)
    if number is None:
        raise NotFound("No such draft request.")
    rows = quota_request_list_for_user(user=user).filter(
        pk=number, tenant=tenant, cluster_id=cluster_id
    )
    request = (rows.filter(status=RequestStatus.DRAFT) if drafts_only else rows).first()
    if request is None:
        raise NotFound("No such draft request of this tenant on this cluster.")
    return request
