"""Reads for quota advice: last month's usage per quota line, a cluster's recorded workloads
and quotas as replay input, the what-if of a request (cached), and suggestions."""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Max, Q, QuerySet, Sum
from django.utils import timezone

from advice import replay
from advice.models import Suggestion
from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from core.errors import ValidationFailed
from core.numbers import ascii_whole
from quotas.choices import FlavorKind, is_gpu_resource
from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor
from tenants.models import Tenant, User
from usage.choices import Metric, Resolution
from usage.models import Rollup, Workload
from usage.selectors import usage_peaks, workload_stats

WHAT_IF_DAYS_DEFAULT = 14
WHAT_IF_DAYS_MAX = 90
WHAT_IF_CACHE_S = 6 * 3600
# "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3" -> 80; MIG "3g.40gb" -> 40.
_GB = re.compile(r"(\d+)\s*gb", re.IGNORECASE)


def month_before(now: datetime) -> tuple[datetime, datetime]:
    """[first of last month, first of this month), UTC."""
    this_month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    last_month = (this_month - timedelta(days=1)).replace(day=1)
    return last_month, this_month


def flavor_memory_mib(flavor: ResourceFlavor) -> float | None:
    """A GPU's or MIG slice's memory from its name (the profile, else the model), in MiB."""
    text = flavor.mig_profile if flavor.kind == FlavorKind.MIG else flavor.gpu_model
    match = _GB.search(text or "")
    return float(match.group(1)) * 1024 if match else None


@dataclass
class LineUsage:
    """Last month's use of one flavor by one tenant: the daily peaks of GPUs in use (Kueue's
    flavorsUsage), mean GPU utilisation (%) and the peak memory used on one GPU (MiB)."""

    daily_peaks: list[tuple[datetime, float]] = field(default_factory=list)
    utilization_pct: float | None = None
    memory_peak_mib: float | None = None

    @property
    def peak(self) -> float:
        return max((value for _, value in self.daily_peaks), default=0.0)


def tenant_month_usage(
    *, tenant: Tenant, cluster: Cluster, start: datetime, end: datetime, now: datetime
) -> dict[int, LineUsage]:
    """Per flavor id, from daily rollups. Two queries."""
    out: dict[int, LineUsage] = defaultdict(LineUsage)
    peaks = usage_peaks(
        start=start,
        end=end,
        metric=Metric.QUOTA_USED,
        tenant_ids=[tenant.pk],
        cluster_ids=[cluster.pk],
        per_day=True,
        now=now,
    )
    for (_, _, flavor_id), days in peaks.items():
        out[flavor_id].daily_peaks = list(days)
    rows = (
        Rollup.objects.filter(
            resolution=Resolution.DAY,
            bucket__gte=start,
            bucket__lt=end,
            tenant_id=tenant.pk,
            cluster_id=cluster.pk,
            metric__in=[Metric.GPU_UTILIZATION, Metric.GPU_MEMORY_USED],
        )
        .values("flavor_id", "metric")
        .annotate(total=Sum("sum"), samples=Sum("samples"), peak=Max("max"))
    )
    for row in rows:
        line = out[row["flavor_id"]]
        if row["metric"] == Metric.GPU_UTILIZATION and row["samples"]:
            line.utilization_pct = row["total"] / row["samples"]
        elif row["metric"] == Metric.GPU_MEMORY_USED:
            line.memory_peak_mib = row["peak"]
    return dict(out)


def suggestion_list_for_tenant(*, tenant: Tenant) -> QuerySet[Suggestion]:
    """The tenant's suggestions, newest first (the caller has scoped ``tenant``)."""
    return (
        Suggestion.objects.filter(tenant=tenant)
        .select_related("cluster", "request", "created_by")
        .order_by("-created_at", "-id")
    )


def suggestions_open(*, tenant: Tenant) -> list[Suggestion]:
    """The latest suggestion per cluster that is still to be reviewed (its draft unsubmitted,
    or nothing to file): what the tenant page shows."""
    seen: set[int] = set()
    out = []
    for suggestion in suggestion_list_for_tenant(tenant=tenant):
        if suggestion.cluster_id in seen:
            continue
        seen.add(suggestion.cluster_id)
        if suggestion.request is None or suggestion.request.status == RequestStatus.DRAFT:
            out.append(suggestion)
    return out


# --- the what-if replay ------------------------------------------------------------------------


def _queue(quotas: dict[str, tuple[Decimal, Decimal, Decimal | None]], name: str) -> replay.Queue:
    return replay.Queue(
        name,
        {
            flavor: replay.FlavorQuota(
                float(g), float(limit - g), None if lending is None else float(lending)
            )
            for flavor, (g, limit, lending) in quotas.items()
        },
    )


def cluster_gpu_quotas(
    *, cluster: Cluster
) -> dict[str, dict[str, tuple[Decimal, Decimal, Decimal | None]]]:
    """tenant slug -> flavor name -> (guaranteed, limit, lending limit), GPU and MIG lines."""
    out: dict[str, dict[str, tuple[Decimal, Decimal, Decimal | None]]] = defaultdict(dict)
    for q in Quota.objects.filter(quota_set__cluster=cluster).select_related(
        "quota_set__tenant", "flavor"
    ):
        if is_gpu_resource(q.resource):
            out[q.quota_set.tenant.slug][q.flavor.name] = (q.guaranteed, q.limit, q.lending_limit)
    return dict(out)


@dataclass
class ReplayInput:
    """The replay's jobs, and per tenant slug the GPU-hours its workloads were recorded to use
    within the window (what the replay of the quotas in force should come back to)."""

    jobs: list[replay.Job]
    recorded_gpu_hours: dict[str, float]

    @property
    def window_jobs(self) -> int:
        return sum(1 for job in self.jobs if not job.running_at_start)


def replay_input(
    *, cluster: Cluster, start: datetime, end: datetime, default_flavor: dict[str, str]
) -> ReplayInput:
    """The cluster's recorded workloads as replay jobs: those created in [start, end), and
    those the window opened with (still running: ``running_at_start``, for the rest of their
    run; still waiting: created before ``start``, at most one window length before, so a
    workload the collector never saw finish does not wait for ever). Run time: admitted to
    finished; still running: to ``end``; never admitted: the median run time of the others
    (unknown otherwise). Flavor: the first it was admitted on, else the tenant's biggest
    guarantee (``default_flavor``). One query."""
    rows = list(
        Workload.objects.filter(
            cluster=cluster, created_at__gte=start - (end - start), created_at__lt=end,
            tenant__isnull=False,
        )
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .order_by("created_at", "pk")
        .values_list(
            "pk", "tenant__slug", "flavors", "gpus", "created_at", "admitted_at", "finished_at",
            "priority",
        )
    )  # fmt: skip
    runs = sorted(
        (f - a).total_seconds() for *_, a, f, _ in rows if a is not None and f is not None
    )
    typical = replay.percentile(runs, 0.5) or 3600.0
    jobs = []
    used: dict[str, float] = defaultdict(float)
    for pk, slug, flavors, gpus, created, admitted, finished, priority in rows:
        flavor = flavors[0] if flavors else default_flavor.get(slug)
        if not flavor or gpus <= 0:
            continue
        running_at_start = admitted is not None and admitted < start
        if created < start and admitted is None and finished is not None:
            continue  # gone before the window without running: nothing to replay
        if admitted is not None:
            stop = min(finished or end, end)
            used[slug] += float(gpus) * max((stop - max(admitted, start)).total_seconds(), 0) / 3600
            duration = (stop - max(admitted, start)).total_seconds()
            if not running_at_start:
                duration = ((finished or end) - admitted).total_seconds()
        else:
            duration = typical
        job = replay.Job(
            str(pk), slug, flavor, float(gpus), (created - start).total_seconds(),
            max(duration, 0.0), priority or 0, running_at_start,
        )  # fmt: skip
        jobs.append(job)
    return ReplayInput(jobs, dict(used))


def replay_jobs(
    *, cluster: Cluster, start: datetime, end: datetime, default_flavor: dict[str, str]
) -> list[replay.Job]:
    """``replay_input``'s jobs."""
    return replay_input(cluster=cluster, start=start, end=end, default_flavor=default_flavor).jobs


# Calibration: what the replay of the quotas in force gives against what was recorded. Two
# figures agree when they are within the tolerance (WHAT_IF_TOLERANCE_PCT of the recorded
# value) or within the floor, whichever is wider: waits a minute apart agree whatever their
# ratio, as do GPU-hours one apart.
CALIBRATION_FIGURES = (
    # key, label, unit of the values (s: seconds, shown in minutes), recorded field, replayed
    # field, floor
    ("wait_p50", "Queue wait p50", "s", "recorded_wait_p50_s", "wait_p50_s", 60.0),
    ("wait_p95", "Queue wait p95", "s", "recorded_wait_p95_s", "wait_p95_s", 60.0),
    ("gpu_hours", "GPU-hours used", "GPU-h", "recorded_gpu_hours", "used_gpu_hours", 1.0),
)


def tolerance_pct() -> int:
    return int(getattr(settings, "WHAT_IF_TOLERANCE_PCT", 25))


def _in_words(value: float, unit: str) -> str:
    """A figure as people read it: waits (seconds) in minutes, GPU-hours as they are."""
    if unit == "s":
        return f"{value / 60:.1f} min"
    return f"{value:.1f} {unit}"


def calibration(
    *, recorded: dict[str, float | None], before: dict[str, Any], tolerance: int
) -> tuple[list[dict[str, Any]], str]:
    """The recorded and the replayed-before figures side by side, each within tolerance or
    not (None where one side has no value: nothing to compare), and a sentence naming the
    figures that differ by more ("" when none does)."""
    rows = []
    off = []
    for key, label, unit, recorded_field, replayed_field, floor in CALIBRATION_FIGURES:
        was, replayed = recorded.get(recorded_field), before.get(replayed_field)
        within: bool | None = None
        difference_pct: float | None = None
        if was is not None and replayed is not None:
            within = abs(replayed - was) <= max(was * tolerance / 100, floor) + 1e-9
            difference_pct = None if was <= 0 else round((replayed - was) / was * 100, 1)
            if not within:
                off.append(
                    f"{label.lower()} {_in_words(replayed, unit)} replayed, "
                    f"{_in_words(was, unit)} recorded"
                )
        rows.append(
            {
                "figure": key,
                "name": label,
                "unit": unit,
                "recorded": was,
                "replayed": replayed,
                "difference_pct": difference_pct,
                "within_tolerance": within,
            }
        )
    note = ""
    if off:
        note = (
            f"The replay of the quotas in force differs from what was recorded by more than "
            f"{tolerance}% ({'; '.join(off)}): read its predictions as a direction, not as a "
            "forecast."
        )
    return rows, note


@dataclass
class TenantWhatIf:
    tenant: str
    is_requester: bool
    recorded_wait_p50_s: float | None
    recorded_wait_p95_s: float | None
    before: dict[str, Any]
    after: dict[str, Any]
    recorded_gpu_hours: float = 0.0
    calibration: list[dict[str, Any]] = field(default_factory=list)
    calibrated: bool = True  # every figure the replay of the record has is within tolerance
    calibration_note: str = ""  # in words, when not calibrated


@dataclass
class WhatIf:
    request_id: int
    cluster: str
    days: int
    start: datetime
    end: datetime
    workloads: int
    skipped_workloads: int
    replay_ms: float
    tenants: list[TenantWhatIf]
    changes: list[dict[str, Any]]
    tolerance_pct: int = 25


def _stats(stats: replay.QueueStats) -> dict[str, Any]:
    return {
        "workloads": stats.jobs,
        "admitted": stats.admitted,
        "waiting_at_end": stats.waiting_at_end,
        "never_fits": stats.never_fits,
        "wait_p50_s": stats.wait_p50_s,
        "wait_p95_s": stats.wait_p95_s,
        "utilisation_of_guarantee": stats.utilisation_of_guarantee,
        "guaranteed_gpu_hours": stats.guaranteed_gpu_hours,
        "used_gpu_hours": stats.used_gpu_hours,
        "borrowed_gpu_hours": stats.borrowed_gpu_hours,
        "borrowing_ratio": stats.borrowing_ratio,
        "preemptions": stats.preemptions,
    }


def _cache_key(request: QuotaChangeRequest, days: int, end: datetime) -> str:
    """What the replay depends on: the request (its id and filing time, so a restored or
    recreated database never meets an old entry), its items, every quota generation on the
    cluster, and the recorded workloads of the window (how many, and the latest change the
    collector made to one)."""
    generations = sorted(
        QuotaSet.objects.filter(cluster_id=request.cluster_id).values_list("pk", "generation")
    )
    items = sorted(
        (i.flavor_id, i.resource, str(i.guaranteed), str(i.limit), str(i.lending_limit))
        for i in request.items.all()
    )
    recorded = Workload.objects.filter(
        cluster_id=request.cluster_id,
        created_at__gte=end - timedelta(days=2 * days),  # the window and what it opened with
        created_at__lt=end,
    ).aggregate(n=Count("pk"), changed=Max("updated_at"))
    digest = hashlib.sha256(
        json.dumps([request.created_at, generations, items, recorded], default=str).encode()
    ).hexdigest()[:16]
    return f"advice:what-if:v2:{request.pk}:{days}:{end:%Y%m%d%H}:{digest}"


def what_if_days(raw: Any) -> int:
    """``days`` from a query string: 1..WHAT_IF_DAYS_MAX, default 14 (400 otherwise)."""
    if raw in (None, ""):
        return WHAT_IF_DAYS_DEFAULT
    days = ascii_whole(str(raw), max_digits=3)
    if days is None:
        raise ValidationFailed.for_field(
            "days", f"a whole number of days, 1 to {WHAT_IF_DAYS_MAX}."
        )
    if not 1 <= days <= WHAT_IF_DAYS_MAX:
        raise ValidationFailed.for_field("days", f"from 1 to {WHAT_IF_DAYS_MAX} days.")
    return days


def quota_request_what_if(
    *, request: QuotaChangeRequest, days: int = WHAT_IF_DAYS_DEFAULT, now: datetime | None = None
) -> WhatIf:
    """Replay the cluster's last ``days`` of workloads against the quotas in force (before)
    and with the request's GPU lines in place (after), for every tenant with quotas on the
    cluster (one cohort). Cached per request, quota generations, days and hour. The caller
    has scoped ``request`` (``quota_request_get_for_user``)."""
    now = now or timezone.now()
    end = now.replace(minute=0, second=0, microsecond=0)
    key = _cache_key(request, days, end)
    cached = cache.get(key)
    if isinstance(cached, WhatIf):
        return cached
    cluster = request.cluster
    start = end - timedelta(days=days)
    current = cluster_gpu_quotas(cluster=cluster)
    proposed = {slug: dict(lines) for slug, lines in current.items()}
    changes = []
    mine = proposed.setdefault(request.tenant.slug, {})
    for item in request.items.select_related("flavor"):
        if not is_gpu_resource(item.resource):
            continue
        before = current.get(request.tenant.slug, {}).get(item.flavor.name)
        mine[item.flavor.name] = (item.guaranteed, item.limit, item.lending_limit)
        changes.append(
            {
                "flavor": item.flavor.name,
                "guaranteed_before": float(before[0]) if before else 0.0,
                "limit_before": float(before[1]) if before else 0.0,
                "guaranteed_after": float(item.guaranteed),
                "limit_after": float(item.limit),
            }
        )
    default_flavor = {
        slug: max(lines, key=lambda name: lines[name][0])
        for slug, lines in proposed.items()
        if lines
    }
    given = replay_input(cluster=cluster, start=start, end=end, default_flavor=default_flavor)
    jobs = given.jobs
    horizon = (end - start).total_seconds()
    began = time.perf_counter()
    before_result = replay.replay(
        [_queue(lines, slug) for slug, lines in sorted(current.items())], jobs, horizon=horizon
    )
    after_result = replay.replay(
        [_queue(lines, slug) for slug, lines in sorted(proposed.items())], jobs, horizon=horizon
    )
    elapsed_ms = (time.perf_counter() - began) * 1000
    tenants = {t.slug: t.pk for t in Tenant.objects.filter(slug__in=list(proposed))}
    recorded = workload_stats(start=start, end=end, cluster_ids=[cluster.pk])
    tolerance = tolerance_pct()
    rows = []
    for slug in sorted(proposed, key=lambda s: (s != request.tenant.slug, s)):
        stats = recorded.get(tenants.get(slug, 0))
        empty = replay.QueueStats(slug)
        replayed_before = _stats(before_result.queues.get(slug, empty))
        was: dict[str, float | None] = {
            "recorded_wait_p50_s": stats.queue_wait_p50_s if stats else None,
            "recorded_wait_p95_s": stats.queue_wait_p95_s if stats else None,
            "recorded_gpu_hours": given.recorded_gpu_hours.get(slug, 0.0),
        }
        figures, note = calibration(recorded=was, before=replayed_before, tolerance=tolerance)
        rows.append(
            TenantWhatIf(
                slug,
                slug == request.tenant.slug,
                was["recorded_wait_p50_s"],
                was["recorded_wait_p95_s"],
                replayed_before,
                _stats(after_result.queues.get(slug, empty)),
                round(given.recorded_gpu_hours.get(slug, 0.0), 3),
                figures,
                not note,
                note,
            )
        )
    result = WhatIf(
        request.pk, cluster.name, days, start, end, given.window_jobs,
        after_result.skipped_jobs, round(elapsed_ms, 1), rows, changes, tolerance,
    )  # fmt: skip
    cache.set(key, result, WHAT_IF_CACHE_S)
    return result


def admission_times(
    *, cluster: Cluster, jobs: list[tuple[str, str, str, float, float, float]], horizon: float
) -> dict[str, float | None]:
    """When each of ``jobs`` (id, tenant slug, flavor name, GPUs, created and run time in
    seconds from the start) is first admitted under the cluster's quotas in force, by the
    replay's admission model (None: still waiting at ``horizon``). The demo's simulated month
    (``usage.demo``) is admitted this way, so its recorded history is one the quotas allow.
    A job the model would preempt is left out (absent from the answer) and the rest replayed
    again, until no job is preempted: every admitted job then runs its whole time at once, so
    the GPUs running at any moment stay within each tenant's limit and the cohort's quota
    (a preempted job, recorded from its first admission to its last finish, would count its
    GPUs twice while it waited to run again)."""
    quotas = cluster_gpu_quotas(cluster=cluster)
    queues = [_queue(lines, slug) for slug, lines in sorted(quotas.items())]
    kept = [replay.Job(*job) for job in jobs]
    while True:
        result = replay.replay(queues, kept, horizon=horizon)
        if not result.preempted:
            break
        kept = [job for job in kept if job.id not in result.preempted]
    return {job.id: result.admitted_at.get(job.id) for job in kept}


def what_if_for_user(*, what_if: WhatIf, user: User) -> WhatIf:
    """The replay as ``user`` may see it: platform admins every tenant of the cluster and the
    cohort's totals, others only the rows of tenants they belong to, and totals of those rows
    (how many workloads the cohort ran is the other tenants' business too). The other
    tenants' queues still weigh in the replay; their names and numbers are theirs (another
    tenant's data is never shown). A tenant's own workloads are never skipped (the request's
    tenant is always in the replay), so its count of skipped workloads is 0."""
    if user.is_platform_admin:
        return what_if
    visible = set(Tenant.objects.visible_to(user).values_list("slug", flat=True))
    rows = [row for row in what_if.tenants if row.tenant in visible]
    return replace(
        what_if,
        tenants=rows,
        workloads=sum(int(row.before["workloads"]) for row in rows),
        skipped_workloads=0,
    )


def what_if_as_dict(what_if: WhatIf) -> dict[str, Any]:
    return asdict(what_if)


def hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600


def ceil_units(value: float) -> Decimal:
    """Whole GPUs or MIG slices, rounding up (a tiny float excess is not a whole GPU more)."""
    return Decimal(math.ceil(round(value, 6)))
