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

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from approvals.models import QuotaChangeRequest
from approvals.services.checks import (
    DiffLine,
    RequestCheck,
    quota_request_items,
    shares_per_gpu,
)
from approvals.services.policy import approval_policy
from approvals.services.rules import SCHEDULING_FIELDS, TENANT_FIELDS, line_of, quotas_in_force
from core.errors import Conflict, NotFound, ValidationFailed
from quotas.choices import GrantState
from quotas.models import Cluster, Grant, QuotaSet
from quotas.quantity import format_quantity
from quotas.selectors import Peak, flavor_capacities, grant_peaks, guarantees_by_flavor
from quotas.services import (
    QuotaItem,
    elastic_cap,
    grant_schedule,
    grant_start,
    grants_confirm_ended,
    grants_notify_ending,
    grants_start_due,
    grants_withdraw_due,
)
from tenants.models import Tenant, User
from tenants.selectors import membership_role

GRANT_ONLY = "a grant for a time adds quota lines only: file this change as a standing request"


def grant_window_errors(
    *, starts_at: datetime | None, ends_at: datetime | None, now: datetime | None = None
) -> dict[str, list[str]]:
    """The window's errors, each on its field: an end is required with a start, after it,
    not in the past, and the window no longer than the policy's ``grant_max_days``."""
    now = now or timezone.now()
    if ends_at is None:
        return {"ends_at": ["a grant for a time needs an end"]} if starts_at is not None else {}
    start = starts_at or now
    if ends_at <= start:
        return {"ends_at": ["the end must come after the start"]}
    if ends_at <= now:
        return {"ends_at": ["the end is in the past"]}
    longest = approval_policy().grant_max_days
    if ends_at - start > timedelta(days=longest):
        days = "day" if longest == 1 else "days"
        return {"ends_at": [f"the window is longer than the {longest} {days} the policy allows"]}
    return {}


def grant_request_check(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    starts_at: datetime | None,
    ends_at: datetime | None,
    others: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    exclude: Grant | None = None,
) -> RequestCheck:
    """The one validation of a grant for a time (filing, its live check, submit, approval).
    ``items`` are what it adds on top of the standing lines; ``others`` the request's other
    fields, which must be empty. ``starts_at`` None or past: it starts when approved."""
    now = now or timezone.now()
    quota_set, current = quotas_in_force(tenant, cluster)
    check = RequestCheck(base_generation=quota_set.generation if quota_set else 0)
    check.errors.update(grant_window_errors(starts_at=starts_at, ends_at=ends_at, now=now))
    for name, value in (others or {}).items():
        if value is not None and value != "":
            check.errors[name] = [GRANT_ONLY]
    if not items:
        check.errors["items"] = ["a grant for a time needs at least one quota line"]
    if check.errors:
        return check
    assert ends_at is not None  # noqa: S101 - grant_window_errors refused it otherwise
    start = max(starts_at or now, now)
    _capacity(check, tenant, cluster, items, start, ends_at, current, exclude)
    return check


_NONE = Peak()


def _capacity(
    check: RequestCheck,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    start: datetime,
    end: datetime,
    current: Mapping[tuple[int, str], QuotaItem],
    exclude: Grant | None,
) -> None:
    capacities = flavor_capacities(cluster=cluster)
    standing = guarantees_by_flavor(cluster=cluster, with_grants=False)
    keys = [line_of(item) for item in items]
    others = grant_peaks(cluster=cluster, keys=keys, starts_at=start, ends_at=end, exclude=exclude)
    own = grant_peaks(
        cluster=cluster, keys=keys, starts_at=start, ends_at=end, tenant=tenant, exclude=exclude
    )
    department = tenant.children.exists()
    policy = approval_policy()
    two = False
    seen: set[tuple[int, str]] = set()
    for index, item in enumerate(items):
        key, prefix = line_of(item), f"items[{index}]."
        what = f"{item.resource} on {item.flavor.name}"
        if item.flavor.cluster_id != cluster.pk or key not in capacities:
            check.errors[f"{prefix}resource"] = [f"{cluster.name} has no {what}"]
            continue
        if key in seen:
            check.errors[f"{prefix}resource"] = [f"{what} is listed twice"]
            continue
        seen.add(key)
        if item.lending_limit is not None:
            check.errors[f"{prefix}lending_limit"] = [
                "a grant for a time adds guaranteed and limit only; it lends nothing"
            ]
            continue
        if item.limit <= 0:
            check.errors[f"{prefix}limit"] = [f"{what}: the grant adds nothing"]
            continue
        capacity = capacities[key].amount
        taken = (standing.get(key) or Decimal(0)) + others.get(key, _NONE).guaranteed
        if not cluster.allow_guarantee_overcommit and taken + item.guaranteed > capacity:
            check.errors[f"{prefix}guaranteed"] = [
                f"{what}: {format_quantity(item.guaranteed, item.resource)} more guaranteed "
                f"does not fit over this window: standing guarantees and other grants hold "
                f"up to {format_quantity(taken, item.resource)} of "
                f"{format_quantity(capacity, item.resource)} on {cluster.name} then"
            ]
            continue
        before = current.get(key)
        g0 = (before.guaranteed if before else Decimal(0)) + own.get(key, _NONE).guaranteed
        l0 = (before.limit if before else Decimal(0)) + own.get(key, _NONE).limit
        cap = elastic_cap(
            capacity=capacity, fraction=cluster.elastic_cap_fraction, resource=item.resource
        )
        if (department and l0 + item.limit > capacity) or (
            not department and l0 + item.limit > cap
        ):
            bound = capacity if department else cap
            check.errors[f"{prefix}limit"] = [
                f"{what}: a limit of {format_quantity(l0 + item.limit, item.resource)} with "
                f"the grant is above the {format_quantity(bound, item.resource)} a tenant "
                f"may hold on {cluster.name}"
            ]
            continue
        check.diff.append(
            DiffLine(
                item.flavor.name,
                item.resource,
                g0,
                l0,
                g0 + item.guaranteed,
                l0 + item.limit,
                item.flavor.gpu_weight,
                shares_per_gpu(item.flavor, item.resource),
            )
        )
        if capacity and item.limit > capacity * policy.two_approvers_above_capacity_fraction:
            two = True
    if check.gpu_units_increase > policy.two_approvers_above_gpu_units:
        two = True
    check.required_approvals = 2 if two else 1


def request_others(request: QuotaChangeRequest) -> dict[str, Any]:
    """The stored request's fields a grant must leave empty."""
    names = (*SCHEDULING_FIELDS, *TENANT_FIELDS, "isolation_level", "production_priority")
    values = {name: getattr(request, name) for name in names}
    values["tier"] = request.tier_id
    return values


def grant_request_check_stored(*, request: QuotaChangeRequest, now: datetime | None = None) -> RequestCheck:
    return grant_request_check(
        tenant=request.tenant,
        cluster=request.cluster,
        items=quota_request_items(request),
        starts_at=request.starts_at,
        ends_at=request.ends_at,
        others=request_others(request),
        now=now,
    )


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
    assert request.ends_at is not None  # noqa: S101 - the check refused it otherwise
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
    """The beat's pass (every minute; safe to run twice, and from two workers): start the
    grants whose start has come, withdraw those whose end has come, end those whose
    withdrawal the cluster has, and tell leads of ends within the policy's notice."""
    now = now or timezone.now()
    started = grants_start_due(now=now, on_started=_started)
    withdrawn = grants_withdraw_due(now=now)
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
    from approvals.services.filing import quota_request_file

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
