"""Grants for a time through requests: a request with ``starts_at`` and ``ends_at`` asks for
its lines to be added on top of the standing quota for that window (``quotas.Grant``), not
written in its place. Its check (``grant_request_check``): the window (an end after the start,
not in the past, no longer than the policy allows), lines only (no other change rides on a
grant), and capacity over the whole window: the standing guarantees of every tenant plus the
most that other grants add at any one moment of the window (``quotas.selectors.grant_peaks``)
must leave room for it. Approving one schedules the grant (``grant_apply``), started at once
when its window has begun; the beat (``grants_tick``) starts, withdraws and ends grants and
tells leads ahead of an end; a lead asks to extend one with a new request
(``grant_extend``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from approvals.models import QuotaChangeItem, QuotaChangeRequest
from approvals.services.checks import grant_request_check_stored, quota_request_items
from approvals.services.filing import quota_request_file
from approvals.services.policy import approval_policy
from core.errors import Conflict, NotFound, ValidationFailed
from quotas.choices import GrantState
from quotas.models import Cluster, Grant, QuotaSet
from quotas.services import (
    QuotaItem,
    grant_schedule,
    grant_start,
    grants_confirm_ended,
    grants_notify_ending,
    grants_start_due,
    grants_withdraw_due,
)
from tenants.models import User
from tenants.selectors import membership_role


def grant_apply(
    request: QuotaChangeRequest, *, quota_set: QuotaSet, actor: User | None
) -> int | None:
    """Schedule the grant of an approved request (locked, with its quota set and the
    cluster's row locked by the caller), checked again under the locks (409 naming the rule
    when capacity was taken meanwhile); started at once when its window has begun. The quota
    set generation that added it, or None while it waits for its start."""
    now = timezone.now()
    check = grant_request_check_stored(request=request, now=now)
    check.raise_if_invalid(error=Conflict)
    # What it added to, as it stood when approved: the request keeps showing "6 -> 8".
    befores = {(d.flavor, d.resource): d for d in check.diff}
    rows = list(request.items.select_related("flavor"))
    for row in rows:
        line = befores[(row.flavor.name, row.resource)]
        row.guaranteed_before, row.limit_before = line.guaranteed_before, line.limit_before
    QuotaChangeItem.objects.bulk_update(rows, ["guaranteed_before", "limit_before"])
    assert request.ends_at is not None
    grant = grant_schedule(
        tenant=request.tenant,
        cluster=request.cluster,
        items=quota_request_items(request),
        starts_at=max(request.starts_at or now, now),
        ends_at=request.ends_at,
        request_number=request.pk,
        reason=request.reason,
        actor=actor,
    )
    if grant.starts_at > now:
        return None
    grant_start(grant, now=now, quota_set=quota_set)
    return grant.started_generation


def _started(grant: Grant) -> None:
    """A grant started by the beat: its request follows the push of that generation
    (approved -> applying -> applied), as an approval's does."""
    if grant.request_number is not None:
        QuotaChangeRequest.objects.filter(
            pk=grant.request_number, approved_generation__isnull=True
        ).update(approved_generation=grant.started_generation)


def grants_tick(*, now: datetime | None = None) -> dict[str, int]:
    """The beat's pass (every minute; safe to run twice, and from two workers): withdraw the
    grants whose end has come, start those whose start has come, end those whose
    withdrawal the cluster has, and tell leads of ends within the policy's notice."""
    now = now or timezone.now()
    # Ends before starts: a grant that follows another (an extension) never has both counted
    # in the cluster at once.
    withdrawn = grants_withdraw_due(now=now)
    started = grants_start_due(now=now, on_started=_started)
    ended = grants_confirm_ended(now=now)
    days = approval_policy().grant_end_notice_days
    told = grants_notify_ending(within=timedelta(days=days), now=now) if days else []
    return {
        "started": len(started),
        "withdrawn": len(withdrawn),
        "ended": len(ended),
        "told": len(told),
    }


def grant_list_for_user(*, user: User, cluster: Cluster | None = None) -> QuerySet[Grant]:
    """The grants ``user`` may see: a platform admin's all, anyone else's those of tenants
    they lead or belong to."""
    grants = Grant.objects.select_related("tenant", "cluster").prefetch_related("lines__flavor")
    if cluster is not None:
        grants = grants.filter(cluster=cluster)
    if not user.is_platform_admin:
        grants = grants.filter(tenant__memberships__user=user).distinct()
    return grants.order_by("starts_at", "pk")


def grant_get_for_user(*, user: User, pk: int) -> Grant:
    grant = grant_list_for_user(user=user).filter(pk=pk).first()
    if grant is None:
        raise NotFound("No such grant, or it is not yours to see.")
    return grant


@transaction.atomic
def grant_extend(
    *, grant: Grant, actor: User, ends_at: datetime | None, reason: str, submit: bool = True
) -> QuotaChangeRequest:
    """A lead's ask to extend a grant: a new request for the same lines from its end to
    ``ends_at``, checked and decided like any (the grant itself is not changed)."""
    if membership_role(user=actor, tenant=grant.tenant) is None and not actor.is_platform_admin:
        raise NotFound("No such grant, or it is not yours to see.")
    if grant.state not in (GrantState.SCHEDULED, GrantState.ACTIVE):
        raise Conflict(
            f"Grant {grant.pk} is {grant.state}: only a scheduled or active grant is extended.",
            fields={"state": [f"{grant.state} cannot be extended"]},
        )
    if ends_at is None:
        raise ValidationFailed.for_field("ends_at", "say until when")
    lines = [
        QuotaItem(line.flavor, line.resource, line.guaranteed, line.limit)
        for line in grant.lines.select_related("flavor")
    ]
    return quota_request_file(
        tenant=grant.tenant,
        cluster=grant.cluster,
        requester=actor,
        reason=reason or f"extend grant {grant.pk} (request #{grant.request_number})",
        items=lines,
        submit=submit,
        starts_at=grant.ends_at,
        ends_at=ends_at,
    ).request
