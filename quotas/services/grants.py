"""Grants for a time: a temporary change on top of a tenant's standing quota on one cluster.

A grant's lines (``GrantLine``) are added to the standing lines while it is active: the
loader (``quotas.loader.tenant_specs``) feeds the compiler standing + active grants, so the
compiler stays pure and a standing change made while a grant runs stays when it ends.

Its steps, each a new quota set generation pushed through the outbox (``outbox_record``,
retried like any push and never lost) and each audited, as an approval is:

* ``grant_schedule``: an approved request makes it (``grant.scheduled``);
* ``grants_start_due``: at ``starts_at`` its lines are added (``grant.started``);
* ``grants_withdraw_due``: at ``ends_at`` they are withdrawn (``grant.withdrawn``); the grant
  is *ending* until the cluster has observed that generation;
* ``grants_pushed`` / ``grants_confirm_ended``: the cluster has it, the grant has ended
  (``grant.ended``).

The steps run from a beat task every minute; each is idempotent (a grant is taken under its
row's lock, skipping rows another worker holds, and moved only from the state it was read in).

Capacity: ``grant_peaks`` is the most that other grants add at any one moment of a window (a
sweep over their starts and ends), so two grants that overlap in time must fit together and
one that does not overlap does not count. A standing change, which lasts, is checked against
every grant still holding capacity as if they all overlapped (``grants_promised``: an upper
bound, one subquery)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from quotas.choices import GrantState
from quotas.models import Cluster, Grant, GrantLine, QuotaSet, TenantSync
from quotas.quantity import format_quantity
from quotas.services.outbox import outbox_record, quota_set_repush
from quotas.services.rules import QuotaItem
from tenants.choices import MembershipRole
from tenants.models import Tenant, User
from tenants.services import audit_record, notify

Key = tuple[int, str]  # (flavor id, resource)


def _lines_json(lines: Iterable[GrantLine | QuotaItem]) -> list[dict[str, str]]:
    return [
        {
            "flavor": line.flavor.name,
            "resource": line.resource,
            "guaranteed": format_quantity(line.guaranteed, line.resource),
            "limit": format_quantity(line.limit, line.resource),
        }
        for line in lines
    ]


def _grant_json(grant: Grant, lines: Iterable[GrantLine | QuotaItem]) -> dict[str, Any]:
    return {
        "request": f"#{grant.request_number}" if grant.request_number else None,
        "starts_at": grant.starts_at.isoformat(),
        "ends_at": grant.ends_at.isoformat(),
        "state": grant.state,
        "lines": _lines_json(lines),
    }


def _object_id(grant: Grant) -> str:
    return f"grant {grant.pk} {grant.tenant.slug}@{grant.cluster.name}"


def _audit(grant: Grant, action: str, *, before: dict[str, Any], after: dict[str, Any]) -> None:
    """One step of ``grant``'s life in the audit trail, by the portal itself (the beat)."""
    audit_record(
        actor=None,
        action=action,
        obj=grant,
        tenant=grant.tenant,
        object_id=_object_id(grant),
        before=before,
        after=after,
    )


def grant_schedule(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    starts_at: datetime,
    ends_at: datetime,
    request_number: int | None,
    reason: str,
    actor: User | None,
) -> Grant:
    """Write a grant (scheduled) in the caller's transaction, which checked it under the
    quota set's and the cluster's locks; ``grant_start`` adds it when it is due."""
    grant = Grant.objects.create(
        tenant=tenant,
        cluster=cluster,
        request_number=request_number,
        reason=reason,
        starts_at=starts_at,
        ends_at=ends_at,
    )
    GrantLine.objects.bulk_create(
        GrantLine(
            grant=grant,
            flavor=item.flavor,
            resource=item.resource,
            guaranteed=item.guaranteed,
            limit=item.limit,
        )
        for item in items
    )
    audit_record(
        actor=actor,
        action="grant.scheduled",
        obj=grant,
        tenant=tenant,
        object_id=_object_id(grant),
        after=_grant_json(grant, items) | {"reason": reason},
    )
    return grant


def grant_start(grant: Grant, *, now: datetime, quota_set: QuotaSet | None = None) -> Grant:
    """Add a scheduled grant (locked) to its tenant's quota: the quota set's next generation
    (created, if the tenant had none on the cluster), pushed through the outbox, audited.
    ``quota_set``: the caller's, locked already (an approval of a grant that starts now)."""
    if quota_set is None:
        quota_set = _locked_set(grant, create=True)
    else:
        quota_set_repush(quota_set)
    if quota_set is None:  # archived tenant: nothing is pushed for it
        return _close_unpushed(grant, now=now, why="the tenant is archived")
    grant.state = GrantState.ACTIVE
    grant.started_generation = quota_set.generation
    grant.started_at = now
    grant.save(update_fields=["state", "started_generation", "started_at"])
    _audit(
        grant,
        "grant.started",
        before={"state": GrantState.SCHEDULED},
        after=_grant_json(grant, grant.lines.select_related("flavor"))
        | {"generation": quota_set.generation},
    )
    return grant


def _locked_set(grant: Grant, *, create: bool) -> QuotaSet | None:
    """The grant's quota set, locked, at its next generation with an outbox row (None: the
    tenant is archived). Created at generation 1 when the tenant has none and ``create``."""
    if Tenant.objects.filter(pk=grant.tenant_id, archived_at__isnull=False).exists():
        return None
    quota_set = (
        QuotaSet.objects.select_for_update()
        .select_related("tenant", "cluster")
        .filter(tenant_id=grant.tenant_id, cluster_id=grant.cluster_id)
        .first()
    )
    if quota_set is None:
        if not create:
            return None
        quota_set = QuotaSet.objects.create(tenant_id=grant.tenant_id, cluster_id=grant.cluster_id)
        outbox_record(quota_set=quota_set)
        return quota_set
    quota_set_repush(quota_set)
    return quota_set


def _close_unpushed(grant: Grant, *, now: datetime, why: str) -> Grant:
    before = grant.state
    grant.state = GrantState.ENDED
    grant.ended_at = now
    grant.save(update_fields=["state", "ended_at"])
    _audit(
        grant,
        "grant.ended",
        before={"state": before},
        after={"state": GrantState.ENDED, "note": f"never pushed: {why}"},
    )
    return grant


def grant_withdraw(grant: Grant, *, now: datetime) -> Grant:
    """Withdraw an active grant (locked) at its end: the next generation without its lines,
    pushed through the outbox and audited; the grant is *ending* until the cluster has it."""
    quota_set = _locked_set(grant, create=False)
    if quota_set is None:  # archived tenant or no quota set left: nothing to withdraw there
        return _close_unpushed(grant, now=now, why="nothing left to push for the tenant")
    grant.state = GrantState.ENDING
    grant.ending_generation = quota_set.generation
    grant.save(update_fields=["state", "ending_generation"])
    _audit(
        grant,
        "grant.withdrawn",
        before={"state": GrantState.ACTIVE},
        after=_grant_json(grant, grant.lines.select_related("flavor"))
        | {"generation": quota_set.generation},
    )
    return grant


def _due(states: Sequence[str], **when: Any) -> list[int]:
    return list(
        Grant.objects.filter(state__in=states, **when)
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )


def _take(pk: int, state: str) -> Grant | None:
    """The grant, locked, if it is still in ``state`` and no other worker holds it."""
    return (
        Grant.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("tenant", "cluster")
        .filter(pk=pk, state=state)
        .first()
    )


def grants_start_due(
    *, now: datetime | None = None, on_started: Callable[[Grant], object] | None = None
) -> list[Grant]:
    """Start every scheduled grant whose start has come, each in its own transaction (one
    that failed leaves the others started); one whose end passed too is closed unpushed.
    ``on_started``: called with each grant started, in its transaction."""
    now = now or timezone.now()
    started = []
    for pk in _due([GrantState.SCHEDULED], starts_at__lte=now):
        with transaction.atomic():
            grant = _take(pk, GrantState.SCHEDULED)
            if grant is None:
                continue
            if grant.ends_at <= now:
                _close_unpushed(grant, now=now, why="its window passed before it started")
                continue
            grant = grant_start(grant, now=now)
            if grant.state == GrantState.ACTIVE:
                started.append(grant)
                if on_started is not None:
                    on_started(grant)
    return started


def grants_withdraw_due(*, now: datetime | None = None) -> list[Grant]:
    """Withdraw every active grant whose end has come, each in its own transaction."""
    now = now or timezone.now()
    withdrawn = []
    for pk in _due([GrantState.ACTIVE], ends_at__lte=now):
        with transaction.atomic():
            grant = _take(pk, GrantState.ACTIVE)
            if grant is not None:
                withdrawn.append(grant_withdraw(grant, now=now))
    return withdrawn


def _end(grants: Iterable[Grant], *, now: datetime) -> list[Grant]:
    ended = []
    for grant in grants:
        moved = Grant.objects.filter(pk=grant.pk, state=GrantState.ENDING).update(
            state=GrantState.ENDED, ended_at=now
        )
        if not moved:
            continue  # another worker ended it first
        _audit(
            grant,
            "grant.ended",
            before={"state": GrantState.ENDING},
            after={"state": GrantState.ENDED, "generation": grant.ending_generation},
        )
        ended.append(grant)
    return ended


def grants_pushed(*, tenant_id: int, cluster_id: int, generation: int) -> list[Grant]:
    """The cluster has observed ``generation`` of the tenant's quotas: its grants withdrawn
    at or before it have ended (the push hook, in the transaction that records the push)."""
    ending = Grant.objects.filter(
        tenant_id=tenant_id,
        cluster_id=cluster_id,
        state=GrantState.ENDING,
        ending_generation__lte=generation,
    ).select_related("tenant", "cluster")
    return _end(list(ending), now=timezone.now())


def grants_on_push(*, tenant_id: int, cluster_id: int, generation: int, outcome: Any) -> None:
    """``quotas.sync.PUSHED`` hook (registered in quotas/apps.py): a push that landed ends the
    grants it withdrew; one that failed leaves them ending, retried like any push."""
    if outcome.ok:
        grants_pushed(tenant_id=tenant_id, cluster_id=cluster_id, generation=generation)


@transaction.atomic
def grants_confirm_ended(*, now: datetime | None = None) -> list[Grant]:
    """Every ending grant whose withdrawal the cluster has observed has ended (what the push
    hook does, again from the beat: a hook that did not run is caught up)."""
    applied = TenantSync.objects.filter(
        tenant_id=OuterRef("tenant_id"),
        cluster_id=OuterRef("cluster_id"),
        applied_generation__gte=OuterRef("ending_generation"),
    )
    ending = Grant.objects.filter(Q(state=GrantState.ENDING), Exists(applied))
    return _end(list(ending.select_related("tenant", "cluster")), now=now or timezone.now())


@transaction.atomic
def grants_notify_ending(*, within: timedelta, now: datetime | None = None) -> list[Grant]:
    """Tell the tenant's leads, once, that a grant ends within ``within``; they can ask to
    extend it (a new request that starts when it ends)."""
    now = now or timezone.now()
    due = list(
        Grant.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(
            state__in=[GrantState.SCHEDULED, GrantState.ACTIVE],
            ends_at__lte=now + within,
            ends_at__gt=now,
            end_notice_sent_at__isnull=True,
        )
        .select_related("tenant", "cluster")
        .prefetch_related("lines__flavor")
    )
    for grant in due:
        leads = User.objects.filter(
            memberships__tenant_id=grant.tenant_id, memberships__role=MembershipRole.LEAD
        )
        lines = ", ".join(
            f"{line['guaranteed']}/{line['limit']} {line['resource']} on {line['flavor']}"
            for line in _lines_json(grant.lines.all())
        )
        notify(
            users=leads,
            subject=(
                f"A grant of {grant.tenant.slug} on {grant.cluster.name} ends "
                f"{timezone.localtime(grant.ends_at):%Y-%m-%d %H:%M}"
            ),
            body=(
                f"The extra quota ({lines}) is withdrawn then; the standing quota stays. "
                "A lead can ask to extend it from the grants page."
            ),
            url=f"/tenants/{grant.tenant.slug}/grants/",
        )
        grant.end_notice_sent_at = now
    Grant.objects.bulk_update(due, ["end_notice_sent_at"])
    return due
