"""Each change watched: once a quota change has landed in its cluster, the four rollout
indicators the source names (mean GPU utilisation, queue wait, evictions and preemptions,
borrowing) for the tenant on that cluster over the week before and the week after it applied
(the week after as it accrues: "3 of 7 days so far"), and the quota lines it replaced, which
a one-click draft asks to go back to.

Reads only, from what the portal keeps: the request's "applied" audit event (when it landed),
the usage rollups (GPU utilisation, Kueue's quota used and borrowed) and the Kueue Workload
rows (queue wait, evictions, preemptions). Four queries whatever the number of days, buckets
or workloads, each computing both weeks at once in the database (conditional aggregates).

It lives here, above approvals and usage (which may not import each other): the request page
shows it through approvals' panel hook and the API's request detail through its field hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count, Q, Sum
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from core.words import counted
from quotas.quantity import format_quantity
from quotas.services import QuotaItem
from tenants.models import AuditEvent, User
from tenants.selectors import user_can_manage_tenant
from usage.buckets import retention
from usage.choices import Metric, Resolution
from usage.models import Rollup, Workload

WATCH_DAYS = 7
WEEK = timedelta(days=WATCH_DAYS)
APPLIED_ACTION = f"quota_request.{RequestStatus.APPLIED}"


@dataclass(frozen=True)
class Indicator:
    """One indicator over both weeks: ``before`` and ``after`` are None where nothing was
    recorded; ``words`` says the difference ("mean GPU utilisation 41% → 63%")."""

    key: str
    name: str
    unit: str  # "percent", "seconds" or "count"
    before: float | None
    after: float | None
    before_text: str
    after_text: str
    words: str
    detail: str = ""


@dataclass(frozen=True)
class RevertLine:
    """A quota line as it was before the change (what the revert draft asks for)."""

    flavor: str
    resource: str
    guaranteed: Decimal
    limit: Decimal
    guaranteed_now: Decimal  # what the change set
    limit_now: Decimal

    @property
    def guaranteed_text(self) -> str:
        return format_quantity(self.guaranteed, self.resource)

    @property
    def limit_text(self) -> str:
        return format_quantity(self.limit, self.resource)

    @property
    def guaranteed_now_text(self) -> str:
        return format_quantity(self.guaranteed_now, self.resource)

    @property
    def limit_now_text(self) -> str:
        return format_quantity(self.limit_now, self.resource)


@dataclass(frozen=True)
class ChangeWatch:
    applied_at: datetime
    before_start: datetime
    after_end: datetime  # applied_at + a week, or now while the week accrues
    days_after: int  # whole days since it applied, at most WATCH_DAYS
    complete: bool  # the week after is over
    indicators: list[Indicator]
    any_data: bool
    resolution: str  # what the figures were read from, in words
    revert_lines: list[RevertLine] = field(default_factory=list)

    @property
    def days_words(self) -> str:
        if self.complete:
            return f"{WATCH_DAYS} of {WATCH_DAYS} days"
        return f"{self.days_after} of {WATCH_DAYS} days so far"

    @property
    def summary(self) -> str:
        """The differences in one line, for people: "mean GPU utilisation 41% → 63%; ..."."""
        if not self.any_data:
            return (
                "Nothing was recorded for the tenant on this cluster in the week before or "
                "since the change applied."
            )
        said = "; ".join(i.words for i in self.indicators) + "."
        return said[:1].upper() + said[1:]


def change_applied_at(*, request: QuotaChangeRequest) -> datetime | None:
    """When ``request`` landed in its cluster (its "applied" audit event), or None while it
    has not (any status but applied). One query, none for a request not applied."""
    if request.status != RequestStatus.APPLIED:
        return None
    return (
        AuditEvent.objects.filter(
            tenant_id=request.tenant_id, object_id=f"#{request.pk}", action=APPLIED_ACTION
        )
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )


def change_revert_lines(*, request: QuotaChangeRequest) -> list[RevertLine]:
    """The quota lines ``request`` replaced, as they were when it was approved ([] where they
    were not kept: requests approved before the portal kept them). Uses the items the
    request selectors load (no query when prefetched)."""
    out = []
    for item in request.items.all():
        if item.guaranteed_before is None or item.limit_before is None:
            return []
        out.append(
            RevertLine(
                item.flavor.name,
                item.resource,
                item.guaranteed_before,
                item.limit_before,
                item.guaranteed,
                item.limit,
            )
        )
    return out


def change_revert_items(*, request: QuotaChangeRequest) -> list[QuotaItem]:
    """``change_revert_lines`` as the items a request files (flavor rows, base units). The
    lending limit before the change was not kept: the draft leaves it unset."""
    return [
        QuotaItem(item.flavor, item.resource, item.guaranteed_before, item.limit_before)
        for item in request.items.all()
        if item.guaranteed_before is not None and item.limit_before is not None
    ]


def _resolution(start: datetime, now: datetime) -> int:
    """The finest rollup that still holds ``start`` (hourly for any recent change)."""
    for resolution in (Resolution.HOUR, Resolution.DAY):
        if start >= now - retention(resolution):
            return int(resolution)
    return int(Resolution.DAY)


RESOLUTION_WORDS = {Resolution.HOUR: "hourly usage totals", Resolution.DAY: "daily usage totals"}


def _rollup_figures(
    request: QuotaChangeRequest, start: datetime, applied: datetime, end: datetime, resolution: int
) -> dict[str, Any]:
    """Per week: GPU utilisation (sum and samples), GPUs used and borrowed (summed), and
    Kueue's admissions and their waits summed (its histogram, where Prometheus is read), from
    the tenant's rollups on the request's cluster. One query."""
    weeks = {"before": Q(bucket__lt=applied), "after": Q(bucket__gte=applied)}
    columns: dict[str, Any] = {}
    for week, when in weeks.items():
        util = when & Q(metric=Metric.GPU_UTILIZATION)
        columns[f"util_sum_{week}"] = Sum("sum", filter=util)
        columns[f"util_n_{week}"] = Sum("samples", filter=util)
        columns[f"used_{week}"] = Sum("sum", filter=when & Q(metric=Metric.QUOTA_USED))
        columns[f"borrowed_{week}"] = Sum("sum", filter=when & Q(metric=Metric.QUOTA_BORROWED))
        columns[f"admissions_{week}"] = Sum("sum", filter=when & Q(metric=Metric.ADMISSIONS))
        columns[f"admission_wait_{week}"] = Sum(
            "sum", filter=when & Q(metric=Metric.ADMISSION_WAIT)
        )
    return Rollup.objects.filter(
        resolution=resolution,
        tenant_id=request.tenant_id,
        cluster_id=request.cluster_id,
        metric__in=[
            Metric.GPU_UTILIZATION,
            Metric.QUOTA_USED,
            Metric.QUOTA_BORROWED,
            Metric.ADMISSIONS,
            Metric.ADMISSION_WAIT,
        ],
        bucket__gte=start,
        bucket__lt=end,
    ).aggregate(**columns)


def _workload_figures(
    request: QuotaChangeRequest, start: datetime, applied: datetime, end: datetime
) -> dict[str, Any]:
    """Per week, from the tenant's Kueue Workloads on the request's cluster: the workloads
    admitted in it and their mean queue wait (first admission minus creation), and the
    evictions and preemptions of the workloads active in it (Kueue counts them per workload;
    the same reading as the usage pages' ``workload_stats``). One query."""
    weeks = {"before": (start, applied), "after": (applied, end)}
    columns: dict[str, Any] = {}
    for week, (low, high) in weeks.items():
        admitted = Q(admitted_at__gte=low, admitted_at__lt=high, queue_wait_s__isnull=False)
        active = Q(created_at__lt=high) & (Q(finished_at__isnull=True) | Q(finished_at__gte=low))
        columns[f"admitted_{week}"] = Count("pk", filter=admitted)
        columns[f"wait_{week}"] = Avg("queue_wait_s", filter=admitted)
        columns[f"active_{week}"] = Count("pk", filter=active)
        columns[f"evictions_{week}"] = Sum("evictions", filter=active)
        columns[f"preemptions_{week}"] = Sum("preemptions", filter=active)
    return (
        Workload.objects.filter(
            tenant_id=request.tenant_id, cluster_id=request.cluster_id, created_at__lt=end
        )
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .aggregate(**columns)
    )


def _percent(value: float | None) -> str:
    return "no figures" if value is None else f"{value:.0f}%"


def wait_words(seconds: float | None) -> str:
    """A queue wait as people say it: "45 seconds", "12 minutes", "2.5 hours"."""
    if seconds is None:
        return "no figures"
    if seconds < 120:
        return counted(round(seconds), "second")
    if seconds < 2 * 3600:
        return counted(round(seconds / 60), "minute")
    return counted(round(seconds / 3600, 1), "hour")


def _indicator(
    key: str,
    name: str,
    unit: str,
    before: float | None,
    after: float | None,
    said: Callable[[float | None], str],
    detail: str = "",
) -> Indicator:
    if before is None and after is None:
        words = f"{name}: nothing recorded in either week"
    else:
        words = f"{name} {said(before)} → {said(after)}"
    return Indicator(key, name, unit, before, after, said(before), said(after), words, detail)


def change_watch(*, request: QuotaChangeRequest, now: datetime | None = None) -> ChangeWatch | None:
    """The four indicators before and after ``request`` applied, or None while it has not
    (the caller has already scoped ``request`` to the person asking). Four queries at most:
    when it applied, the rollups, the workloads (the quota lines come with the request)."""
    applied = change_applied_at(request=request)
    if applied is None:
        return None
    now = now or timezone.now()
    start = applied - WEEK
    end = min(applied + WEEK, max(now, applied))
    elapsed = max(now - applied, timedelta(0))
    days_after = min(WATCH_DAYS, math.floor(elapsed / timedelta(days=1)))
    resolution = _resolution(start, now)
    rollups = _rollup_figures(request, start, applied, end, resolution)
    workloads = _workload_figures(request, start, applied, end)

    def util(week: str) -> float | None:
        samples = rollups[f"util_n_{week}"]
        return rollups[f"util_sum_{week}"] / samples if samples else None

    def borrowing(week: str) -> float | None:
        used = rollups[f"used_{week}"]
        if used is None:
            return None
        borrowed = rollups[f"borrowed_{week}"] or 0.0
        return 100.0 * borrowed / used if used > 0 else 0.0

    def count(key: str, week: str) -> float | None:
        if not workloads[f"active_{week}"]:
            return None
        return float(workloads[f"{key}_{week}"] or 0)

    def wait(week: str) -> float | None:
        """The Workloads' mean wait; where none was recorded, Kueue's histogram's."""
        if workloads[f"wait_{week}"] is not None:
            return float(workloads[f"wait_{week}"])
        admitted = rollups[f"admissions_{week}"]
        waited = rollups[f"admission_wait_{week}"]
        return waited / admitted if admitted and waited is not None else None

    u_before, u_after = util("before"), util("after")
    w_before, w_after = wait("before"), wait("after")
    e_before, e_after = count("evictions", "before"), count("evictions", "after")
    p_before, p_after = count("preemptions", "before"), count("preemptions", "after")
    b_before, b_after = borrowing("before"), borrowing("after")

    def number(value: float | None) -> str:
        return "no figures" if value is None else f"{value:g}"

    admitted = (workloads["admitted_before"], workloads["admitted_after"])
    indicators = [
        _indicator("gpu_utilization", "mean GPU utilisation", "percent", u_before, u_after, _percent),
        _indicator(
            "queue_wait", "mean queue wait", "seconds", w_before, w_after, wait_words,
            detail=f"of {counted(admitted[0], 'workload')} admitted in the week before and "
            f"{counted(admitted[1], 'workload')} since",
        ),
        _indicator("evictions", "evictions", "count", e_before, e_after, number),
        _indicator("preemptions", "preemptions", "count", p_before, p_after, number),
        _indicator(
            "borrowing", "borrowing", "percent", b_before, b_after, _percent,
            detail="GPUs borrowed from the cohort, as a share of the GPUs in use",
        ),
    ]  # fmt: skip
    return ChangeWatch(
        applied_at=applied,
        before_start=start,
        after_end=end,
        days_after=days_after,
        complete=now >= applied + WEEK,
        indicators=indicators,
        any_data=any(i.before is not None or i.after is not None for i in indicators),
        resolution=RESOLUTION_WORDS[Resolution(resolution)],
        revert_lines=change_revert_lines(request=request),
    )


def change_revert_offered(*, user: User, change: QuotaChangeRequest, seen: ChangeWatch) -> bool:
    """Whether ``user`` is offered the one-click draft back to the previous numbers: the
    change applied, its previous lines were kept, and ``user`` files the tenant's requests
    (its leads and platform admins; members and viewers read the figures only)."""
    return bool(seen.revert_lines) and user_can_manage_tenant(user=user, tenant=change.tenant)
