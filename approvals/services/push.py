"""What the push says (hooks of ``quotas.sync``, registered in approvals/apps.py): a request
is applied once the cluster has observed its approved generation, failed when the cluster
refused it for good; a failed one pushed again, and a dry run of what approving would do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services.checks import quota_request_scheduling
from approvals.services.transitions import locked, transition
from core.errors import (
    Conflict,
    PermissionDenied,
)
from quotas import sync
from quotas.kube.spec import QuotaSpec
from quotas.services import (
    outbox_reopen,
)
from tenants.models import User
from tenants.services import (
    audit_record,
)


def _requests_up_to(
    tenant_id: int, cluster_id: int, generation: int, statuses: Sequence[str]
) -> list[QuotaChangeRequest]:
    """The tenant's requests in ``statuses`` whose approved generation is at most
    ``generation``: a push of the state in force covers every older approval."""
    return list(
        QuotaChangeRequest.objects.filter(
            tenant_id=tenant_id,
            cluster_id=cluster_id,
            status__in=statuses,
            approved_generation__lte=generation,
        ).select_related("tenant", "requester")
    )


def _move(requests: Sequence[QuotaChangeRequest], to: str, **fields: Any) -> None:
    for request in requests:
        try:
            transition(request, to, actor=None, **fields)
        except Conflict:
            continue  # another worker moved it first: fine, it is where it should be


def quota_requests_push_started(*, tenant_id: int, cluster_id: int, generation: int) -> None:
    """A push of the tenant's quotas up to ``generation`` starts: its approved requests are
    applying (``quotas.sync.PUSH_STARTED``)."""
    _move(
        _requests_up_to(tenant_id, cluster_id, generation, [RequestStatus.APPROVED]),
        RequestStatus.APPLYING,
    )


def quota_requests_pushed(
    *, tenant_id: int, cluster_id: int, generation: int, outcome: sync.PushOutcome
) -> None:
    """A push ended (``quotas.sync.PUSHED``, in the transaction that records it): the
    requests whose approved generation the cluster has now observed are applied; a push the
    cluster refused for good fails them with its message; one to be retried leaves them
    applying."""
    if outcome.ok:
        _move(
            _requests_up_to(
                tenant_id,
                cluster_id,
                generation,
                [RequestStatus.APPROVED, RequestStatus.APPLYING, RequestStatus.FAILED],
            ),
            RequestStatus.APPLIED,
            failure_message="",
        )
    elif not outcome.retryable:
        _move(
            _requests_up_to(
                tenant_id, cluster_id, generation, [RequestStatus.APPROVED, RequestStatus.APPLYING]
            ),
            RequestStatus.FAILED,
            failure_message=outcome.message[:2000],
        )


@transaction.atomic
def quota_request_retry(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    """Push a failed request's quota set again (after the cluster or the portal was fixed)."""
    if not actor.is_platform_admin:
        raise PermissionDenied("Only platform admins retry a push.")
    request = locked(request)
    if request.status != RequestStatus.FAILED:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; only a failed push is retried.",
            fields={"status": [f"{request.status} cannot be retried"]},
        )
    row = outbox_reopen(tenant=request.tenant, cluster=request.cluster)
    if row is None:  # pragma: no cover - an approval always writes one
        raise Conflict(f"Request #{request.pk} has nothing to push.")
    audit_record(
        actor=actor,
        action="quota_request.retried",
        obj=request,
        tenant=request.tenant,
        object_id=f"#{request.pk}",
        before={"status": request.status, "failure_message": request.failure_message},
    )
    return request


def quota_request_dry_run(*, request: QuotaChangeRequest, server: bool = True) -> sync.DryRun:
    """What approving ``request`` would change in the cluster, object by object (computed
    from the compiler), and the cluster's own verdict from a server-side dry run."""
    return sync.change_dry_run(
        tenant=request.tenant,
        cluster=request.cluster,
        items=[
            QuotaSpec(i.flavor.name, i.resource, i.guaranteed, i.limit, i.lending_limit)
            for i in request.items.select_related("flavor")
        ],
        scheduling=quota_request_scheduling(request),
        server=server,
        added=request.ends_at is not None,  # a grant adds its lines, for a time
    )
