"""Reads of the usage store, for the API, dashboards, alerts, suggestions and showback.

Every function reads rollups, never raw samples for long ranges (raw only for steps under
5 minutes within the raw retention, and for ``gpu_utilization_now``'s last minutes). Amounts
are GPUs (or MIG instances) of the flavor; ``units`` is amount x the flavor's ``gpu_weight``
(normalised GPU units, R5). Times are aware UTC datetimes.

- ``series_plan(start=, end=, step=, now=)`` -> ``SeriesPlan``: which resolution a range and
  step read (the coarsest rollup whose width divides the step), or ValidationFailed (400) for
  a bad step, start > end, too many points, or a start older than that resolution keeps
  (the message names the limit and the step that would work).
- ``usage_series(tenant_ids=, cluster_ids=, flavor_ids=, metrics=, start=, end=, step=, now=)``
  -> ``list[SeriesPoint]``: per (cluster, tenant, flavor, metric, step bucket) avg / min /
  max / samples. One query. ``tenant_ids=None`` means all tenants (admin views); ``[]`` none.
- ``tenant_usage(tenant=, start=, end=, step=, cluster_ids=, flavor_ids=)`` -> ``list[FlavorSeries]``:
  what ``GET tenants/{slug}/usage/`` shows: per cluster and flavor, points with used (avg and
  peak), guaranteed, limit, borrowed, reserved, allocated and GPU utilisation, plus units.
- ``usage_now(tenant_ids=, cluster_ids=)`` -> ``{(cluster, tenant, flavor): {metric: value}}``:
  the latest 5-minute bucket of each series in the last 15 minutes (current use, for alerts).
- ``quota_used_now(tenant_ids=)`` -> ``{(tenant, cluster name, flavor name): used}``: the same
  for Kueue's use only, by name (the "My tenants" cards).
- ``usage_peaks(start=, end=, metric=, tenant_ids=, cluster_ids=, per_day=False)`` ->
  ``{(cluster, tenant, flavor): peak}`` or, per day, ``{key: [(day, peak), ...]}`` (the daily
  peaks suggestions take 80% of, R19), from daily rollups (hourly inside their retention).
- ``gpu_hours(start=, end=, metric=QUOTA_USED, tenant_ids=, cluster_ids=)`` ->
  ``list[GpuHours]`` per (cluster, tenant, flavor): the hourly means summed (showback), and
  normalised unit-hours.
- ``workload_stats(start=, end=, tenant_ids=, cluster_ids=)`` -> ``dict[tenant_id, WorkloadStats]``:
  workloads created, admitted and finished in the range, queue wait p50 / p95 (seconds,
  first admission minus creation, for workloads admitted in the range), evictions and
  preemptions (of workloads active in the range).
- ``gpu_utilization_now(cluster_id=, window=)`` -> per (node, GPU uuid, gi_id) the mean
  utilisation and memory in the last minutes (the admin heatmap), from raw samples.
- ``rollup_freshness()`` -> each resolution's watermark and last run.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Max, Q, QuerySet, Sum
from django.utils import timezone

from core.errors import NotFound, ValidationFailed
from quotas import vgpu
from quotas.choices import (
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MIG_RESOURCE_PREFIX,
    FlavorKind,
)
from quotas.kube.job_caps import JOB_SLOTS_FLAVOR
from quotas.models import Cluster, Quota, ResourceFlavor
from quotas.quantity import QuantityError, parse_quantity, to_display
from quotas.selectors import (
    EffectiveQuota,
    person_cap_lines,
    person_cap_targets,
    tenant_effective_quotas,
)
from tenants.choices import MembershipRole
from tenants.models import Tenant
from tenants.selectors import membership_list_for_tenant
from usage.buckets import EPOCH, RESOLUTION_NAMES, retention
from usage.choices import RAW, Metric, Resolution, Source, WorkloadState
from usage.models import (
    PrometheusSource,
    Rollup,
    RollupState,
    Sample,
    VolumeRoom,
    Workload,
    WorkloadReading,
)

MAX_POINTS = 5000
MIN_STEP = timedelta(seconds=60)
MAX_STEP = timedelta(days=366)
RESOLUTIONS = (Resolution.DAY, Resolution.HOUR, Resolution.FIVE_MINUTES)
# What the tenant usage endpoint shows, by field name.
TENANT_SERIES = {
    "used": Metric.QUOTA_USED,
    "guaranteed": Metric.QUOTA_GUARANTEED,
    "limit": Metric.QUOTA_LIMIT,
    "borrowed": Metric.QUOTA_BORROWED,
    "reserved": Metric.QUOTA_RESERVED,
    "allocated": Metric.GPUS_ALLOCATED,
    "gpu_utilization": Metric.GPU_UTILIZATION,
}


# The figures of a tenant's series as the usage page names them.
FIELD_WORDS = {
    "used": "GPUs in use",
    "allocated": "GPUs requested by running pods",
    "gpu_utilization": "GPU utilisation",
    "reserved": "GPUs reserved",
    "borrowed": "GPUs borrowed",
    "guaranteed": "guaranteed GPUs",
    "limit": "GPU limit",
}


def length_words(seconds: int) -> str:
    """A length of time as a person says it: "1 day", "5 minutes", "90 seconds"."""
    for unit, word in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        if seconds % unit == 0:
            count = seconds // unit
            return f"{count} {word}{'' if count == 1 else 's'}"
    return f"{seconds} seconds"  # pragma: no cover - every whole number divides by 1


# What each resolution holds, as a person names it ("read from the hourly usage totals").
RESOLUTION_WORDS = {
    RAW: "raw usage samples",
    Resolution.FIVE_MINUTES: "usage totals per 5 minutes",
    Resolution.HOUR: "hourly usage totals",
    Resolution.DAY: "daily usage totals",
}


def kept_words(kept: timedelta) -> str:
    """How long something is kept: "30 days", "1 day", "36 hours", "400 days (about 1 year)"."""
    said = length_words(int(kept.total_seconds()))
    years = round(kept.days / 365)
    if kept.days >= 365:
        said += f" (about {years} year{'' if years == 1 else 's'})"
    return said


def _too_old(
    *, resolution: int, step_seconds: int, kept: timedelta, start: datetime, now: datetime
) -> str:
    """Why ``start`` is too old for a step: what the step reads, how long that is kept, the
    earliest start it allows and, where one reaches back to ``start``, a coarser step."""
    earliest = now - kept
    said = (
        f"{RESOLUTION_WORDS[resolution].capitalize()} are kept for {kept_words(kept)}, so a "
        "range in steps of "
        f"{length_words(step_seconds)} can start on {earliest:%Y-%m-%d} at {earliest:%H:%M} UTC "
        "at the earliest."
    )
    coarser = [r for r in RESOLUTIONS if r > resolution and start >= now - retention(r)]
    if coarser:  # RESOLUTIONS go coarsest first: the last is the finest that reaches back
        said += (
            f" Use a step of {length_words(int(coarser[-1]))} (or a multiple of it) to reach "
            "further back."
        )
    return said


@dataclass(frozen=True)
class SeriesPlan:
    start: datetime
    end: datetime
    step: timedelta
    resolution: int  # RAW or a Resolution

    @property
    def source(self) -> str:
        return RESOLUTION_NAMES[self.resolution]


def series_plan(
    *, start: datetime, end: datetime, step: timedelta, now: datetime | None = None
) -> SeriesPlan:
    """The resolution a range and step read, or ValidationFailed saying what to change."""
    now = now or timezone.now()
    if start >= end:
        raise ValidationFailed.for_field("start", "start must be before end.")
    seconds = step.total_seconds()
    if step < MIN_STEP or step > MAX_STEP or seconds != int(seconds):
        raise ValidationFailed.for_field(
            "step",
            f"a whole number of seconds from {int(MIN_STEP.total_seconds())} to "
            f"{int(MAX_STEP.total_seconds())} (1 year).",
        )
    resolution = next((int(r) for r in RESOLUTIONS if int(seconds) % int(r) == 0), RAW)
    if resolution == RAW and seconds > Resolution.FIVE_MINUTES:
        raise ValidationFailed.for_field(
            "step", "a step of 5 minutes or more must be a multiple of 5 minutes."
        )
    kept = retention(resolution)
    if start < now - kept:
        raise ValidationFailed.for_field(
            "start",
            _too_old(
                resolution=resolution, step_seconds=int(seconds), kept=kept, start=start, now=now
            ),
        )
    points = (end - start) / step
    if points > MAX_POINTS:
        raise ValidationFailed.for_field(
            "step",
            f"{math.ceil(points)} points; at most {MAX_POINTS} per series: use a step of at "
            f"least {length_words(math.ceil((end - start).total_seconds() / MAX_POINTS / 300) * 300)}.",
        )
    return SeriesPlan(start, end, step, resolution)


@dataclass
class SeriesPoint:
    cluster_id: int
    tenant_id: int
    flavor_id: int
    metric: int
    time: datetime
    samples: int
    sum: float
    min: float
    max: float
    source: int = 0  # a usage.choices.Source (the highest among the points merged)

    @property
    def avg(self) -> float:
        return self.sum / self.samples if self.samples else 0.0


def _ids(values: Sequence[int] | None) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def usage_series(
    *,
    start: datetime,
    end: datetime,
    step: timedelta,
    metrics: Iterable[int],
    tenant_ids: Sequence[int] | None = None,
    cluster_ids: Sequence[int] | None = None,
    flavor_ids: Sequence[int] | None = None,
    now: datetime | None = None,
    plan: SeriesPlan | None = None,
) -> list[SeriesPoint]:
    """Points per (cluster, tenant, flavor, metric, step bucket), oldest first. One query."""
    plan = plan or series_plan(start=start, end=end, step=step, now=now)
    metrics = [int(m) for m in metrics]
    if plan.resolution == RAW:
        rows = _raw_rows(plan, metrics, _ids(tenant_ids), _ids(cluster_ids), _ids(flavor_ids))
    else:
        rows = _rollup_rows(plan, metrics, _ids(tenant_ids), _ids(cluster_ids), _ids(flavor_ids))
    step_s = int(plan.step.total_seconds())
    origin = int((plan.start - EPOCH).total_seconds())
    points: dict[tuple[int, int, int, int, int], SeriesPoint] = {}
    for cluster_id, tenant_id, flavor_id, metric, when, count, total, low, high, source in rows:
        offset = (int((when - EPOCH).total_seconds()) - origin) // step_s
        key = (cluster_id, tenant_id, flavor_id, metric, offset)
        point = points.get(key)
        if point is None:
            points[key] = SeriesPoint(
                cluster_id, tenant_id, flavor_id, metric,
                plan.start + timedelta(seconds=offset * step_s), count, total, low, high, source,
            )  # fmt: skip
        else:
            point.samples += count
            point.sum += total
            point.min = min(point.min, low)
            point.max = max(point.max, high)
            point.source = max(point.source, source)
    return sorted(points.values(), key=lambda p: (p.time, p.cluster_id, p.flavor_id, p.metric))


def _rollup_rows(
    plan: SeriesPlan,
    metrics: list[int],
    tenant_ids: list[int] | None,
    cluster_ids: list[int] | None,
    flavor_ids: list[int] | None,
) -> Iterable[tuple[Any, ...]]:
    rows = Rollup.objects.filter(
        resolution=plan.resolution, bucket__gte=plan.start, bucket__lt=plan.end, metric__in=metrics
    )
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=cluster_ids)
    if flavor_ids is not None:
        rows = rows.filter(flavor_id__in=flavor_ids)
    return rows.order_by().values_list(
        "cluster_id",
        "tenant_id",
        "flavor_id",
        "metric",
        "bucket",
        "samples",
        "sum",
        "min",
        "max",
        "source",
    )


def _raw_rows(
    plan: SeriesPlan,
    metrics: list[int],
    tenant_ids: list[int] | None,
    cluster_ids: list[int] | None,
    flavor_ids: list[int] | None,
) -> Iterable[tuple[Any, ...]]:
    rows = Sample.objects.filter(time__gte=plan.start, time__lt=plan.end, metric__in=metrics)
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=cluster_ids)
    if flavor_ids is not None:
        rows = rows.filter(flavor_id__in=flavor_ids)
    for (
        cluster_id,
        tenant_id,
        flavor_id,
        metric,
        when,
        value,
        source,
    ) in rows.order_by().values_list(
        "cluster_id", "tenant_id", "flavor_id", "metric", "time", "value", "source"
    ):
        yield (
            cluster_id or 0,
            tenant_id or 0,
            flavor_id or 0,
            metric,
            when,
            1,
            value,
            value,
            value,
            source,
        )


@dataclass
class FlavorPoint:
    time: datetime
    values: dict[str, float | None]  # field -> avg; "used_max" the peak


@dataclass
class FlavorSeries:
    cluster: str
    flavor: str
    gpu_weight: float
    points: list[FlavorPoint] = field(default_factory=list)
    # field -> where its latest figure came from (a usage.choices.Source label).
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def source_lines(self) -> list[tuple[str, str]]:
        """(what, where from) for the page, in the order of ``FIELD_WORDS``."""
        return [
            (words, self.sources[name])
            for name, words in FIELD_WORDS.items()
            if self.sources.get(name)
        ]


def tenant_usage(
    *,
    tenant: Tenant,
    flavors: Sequence[ResourceFlavor],
    plan: SeriesPlan,
) -> list[FlavorSeries]:
    """The tenant's series per cluster and flavor (``flavors``: the ones to show, with their
    clusters loaded). Steps without samples are left out. One query."""
    by_id = {f.pk: f for f in flavors}
    step_s = int(plan.step.total_seconds())
    aligned = int((plan.start - EPOCH).total_seconds()) % step_s == 0
    if plan.resolution != RAW and step_s == plan.resolution and aligned:
        return _tenant_usage_pivoted(tenant=tenant, by_id=by_id, plan=plan)
    return _tenant_usage_merged(tenant=tenant, by_id=by_id, plan=plan)


def _tenant_usage_merged(
    *, tenant: Tenant, by_id: Mapping[int, ResourceFlavor], plan: SeriesPlan
) -> list[FlavorSeries]:
    """``tenant_usage`` for any plan: the points of ``usage_series`` (raw samples, or rollups
    merged into steps longer than a bucket or not aligned to one) grouped per flavor."""
    points = usage_series(
        start=plan.start,
        end=plan.end,
        step=plan.step,
        metrics=TENANT_SERIES.values(),
        tenant_ids=[tenant.pk],
        flavor_ids=list(by_id),
        plan=plan,
    )
    names = {int(m): name for name, m in TENANT_SERIES.items()}
    out: dict[int, FlavorSeries] = {}
    steps: dict[tuple[int, datetime], FlavorPoint] = {}
    for p in points:
        flavor = by_id.get(p.flavor_id)
        if flavor is None:
            continue
        series = out.get(flavor.pk)
        if series is None:
            series = out[flavor.pk] = FlavorSeries(
                flavor.cluster.name, flavor.name, float(flavor.gpu_weight)
            )
        point = steps.get((flavor.pk, p.time))
        if point is None:
            point = steps[(flavor.pk, p.time)] = FlavorPoint(p.time, {})
            series.points.append(point)
        name = names[p.metric]
        point.values[name] = p.avg
        # An unrecorded source (samples older than the column) says nothing.
        series.sources[name] = Source(p.source).label if p.source in Source.values[1:] else ""
        if p.metric == Metric.QUOTA_USED:
            point.values["used_max"] = p.max
    return sorted(out.values(), key=lambda s: (s.cluster, s.flavor))


_PIVOT_ORDER = sorted(TENANT_SERIES, key=lambda name: int(TENANT_SERIES[name]))  # as read


def _tenant_usage_pivoted(
    *, tenant: Tenant, by_id: Mapping[int, ResourceFlavor], plan: SeriesPlan
) -> list[FlavorSeries]:
    """``tenant_usage`` when each step is one rollup bucket (the dashboards' steps): the
    metrics pivoted in SQL, one row per flavor and step with every metric's samples, sum and
    source as columns, so the rows read and the Python work are one per point drawn (not one
    per metric), whatever the number of raw samples behind them. The same series as the
    general path: a rollup row is unique per (resolution, bucket, metric, cluster, tenant,
    flavor), and a flavor has one cluster."""
    columns: dict[str, Any] = {}
    for name, metric in TENANT_SERIES.items():
        only = Q(metric=int(metric))
        columns[f"{name}__n"] = Sum("samples", filter=only)
        columns[f"{name}__sum"] = Sum("sum", filter=only)
        columns[f"{name}__source"] = Max("source", filter=only)
    columns["used__max"] = Max("max", filter=Q(metric=int(Metric.QUOTA_USED)))
    rows = (
        Rollup.objects.filter(
            resolution=plan.resolution,
            bucket__gte=plan.start,
            bucket__lt=plan.end,
            metric__in=[int(m) for m in TENANT_SERIES.values()],
            tenant_id=tenant.pk,
            flavor_id__in=list(by_id),
        )
        .order_by()
        .values("flavor_id", "bucket")
        .annotate(**columns)
        .order_by("bucket", "flavor_id")
    )
    labels = {value: Source(value).label for value in Source.values[1:]}
    out: dict[int, FlavorSeries] = {}
    for row in rows:
        flavor = by_id[row["flavor_id"]]
        series = out.get(flavor.pk)
        if series is None:
            series = out[flavor.pk] = FlavorSeries(
                flavor.cluster.name, flavor.name, float(flavor.gpu_weight)
            )
        values: dict[str, float | None] = {}
        for name in _PIVOT_ORDER:
            count = row[f"{name}__n"]
            if count is None:
                continue  # no sample of this metric in the step
            values[name] = row[f"{name}__sum"] / count if count else 0.0
            # An unrecorded source (samples older than the column) says nothing.
            series.sources[name] = labels.get(row[f"{name}__source"], "")
            if name == "used":
                values["used_max"] = row["used__max"]
        series.points.append(FlavorPoint(row["bucket"], values))
    return sorted(out.values(), key=lambda s: (s.cluster, s.flavor))


def usage_now(
    *,
    tenant_ids: Sequence[int] | None = None,
    cluster_ids: Sequence[int] | None = None,
    metrics: Iterable[int] | None = None,
    now: datetime | None = None,
    within: timedelta = timedelta(minutes=15),
) -> dict[tuple[int, int, int], dict[int, float]]:
    """The latest 5-minute value (mean) of each series seen in the last ``within`` (of
    ``metrics``, all for None)."""
    now = now or timezone.now()
    rows = Rollup.objects.filter(
        resolution=Resolution.FIVE_MINUTES, bucket__gte=now - within, bucket__lte=now
    )
    if metrics is not None:
        rows = rows.filter(metric__in=[int(m) for m in metrics])
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=_ids(tenant_ids))
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=_ids(cluster_ids))
    latest: dict[tuple[int, int, int], dict[int, tuple[datetime, float]]] = defaultdict(dict)
    for cluster_id, tenant_id, flavor_id, metric, bucket, count, total in rows.values_list(
        "cluster_id", "tenant_id", "flavor_id", "metric", "bucket", "samples", "sum"
    ):
        seen = latest[(cluster_id, tenant_id, flavor_id)].get(metric)
        if seen is None or bucket > seen[0]:
            latest[(cluster_id, tenant_id, flavor_id)][metric] = (bucket, total / count)
    return {key: {m: v for m, (_, v) in values.items()} for key, values in latest.items()}


def quota_used_now(
    *, tenant_ids: Sequence[int], now: datetime | None = None
) -> dict[tuple[int, str, str], float]:
    """Kueue's use now (``QUOTA_USED``: the latest 5-minute mean in the last 15 minutes) per
    (tenant id, cluster name, flavor name), in GPUs or MIG instances of the flavor: the "8 of
    10 GPUs" of the "My tenants" cards. A series without a recent reading is left out (unknown,
    not 0). Two queries whatever the number of tenants (one when nothing was read)."""
    latest = usage_now(tenant_ids=tenant_ids, metrics=[Metric.QUOTA_USED], now=now)
    flavors = ResourceFlavor.objects.filter(pk__in=sorted({f for _, _, f in latest}))
    names = {pk: (cluster, name) for pk, name, cluster in flavors.values_list(
        "pk", "name", "cluster__name"
    )}  # fmt: skip
    out: dict[tuple[int, str, str], float] = {}
    for (_, tenant_id, flavor_id), values in latest.items():
        if flavor_id in names:
            out[(tenant_id, *names[flavor_id])] = values[Metric.QUOTA_USED]
    return out


def _peak_resolution(start: datetime, now: datetime, per_day: bool) -> int:
    if per_day or start < now - retention(Resolution.HOUR):
        return Resolution.DAY
    return Resolution.HOUR


def usage_peaks(
    *,
    start: datetime,
    end: datetime,
    metric: int = Metric.QUOTA_USED,
    tenant_ids: Sequence[int] | None = None,
    cluster_ids: Sequence[int] | None = None,
    per_day: bool = False,
    now: datetime | None = None,
) -> dict[tuple[int, int, int], Any]:
    """Peak of ``metric`` per (cluster, tenant, flavor) over the range, or per day."""
    now = now or timezone.now()
    resolution = _peak_resolution(start, now, per_day)
    rows = Rollup.objects.filter(
        resolution=resolution, metric=metric, bucket__gte=start, bucket__lt=end
    )
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=_ids(tenant_ids))
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=_ids(cluster_ids))
    if per_day:
        days: dict[tuple[int, int, int], list[tuple[datetime, float]]] = defaultdict(list)
        for c, t, f, bucket, high in rows.order_by("bucket").values_list(
            "cluster_id", "tenant_id", "flavor_id", "bucket", "max"
        ):
            days[(c, t, f)].append((bucket, high))
        return dict(days)
    grouped = rows.values("cluster_id", "tenant_id", "flavor_id").annotate(peak=Max("max"))
    return {(r["cluster_id"], r["tenant_id"], r["flavor_id"]): r["peak"] for r in grouped}


@dataclass
class GpuHours:
    cluster_id: int
    tenant_id: int
    flavor_id: int
    gpu_hours: float
    unit_hours: float


def gpu_hours(
    *,
    start: datetime,
    end: datetime,
    metric: int = Metric.QUOTA_USED,
    tenant_ids: Sequence[int] | None = None,
    cluster_ids: Sequence[int] | None = None,
) -> list[GpuHours]:
    """GPU-hours per (cluster, tenant, flavor): each hour's mean summed (hourly rollups)."""
    rows = Rollup.objects.filter(
        resolution=Resolution.HOUR, metric=metric, bucket__gte=start, bucket__lt=end
    )
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=_ids(tenant_ids))
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=_ids(cluster_ids))
    totals: dict[tuple[int, int, int], float] = defaultdict(float)
    for c, t, f, count, total in rows.values_list(
        "cluster_id", "tenant_id", "flavor_id", "samples", "sum"
    ):
        totals[(c, t, f)] += total / count
    weights = dict(
        ResourceFlavor.objects.filter(pk__in={f for _, _, f in totals}).values_list(
            "pk", "gpu_weight"
        )
    )
    return [
        GpuHours(c, t, f, hours, hours * float(weights.get(f, 1)))
        for (c, t, f), hours in sorted(totals.items())
    ]


@dataclass
class WorkloadStats:
    created: int = 0
    admitted: int = 0
    finished: int = 0
    evictions: int = 0
    preemptions: int = 0
    queue_wait_p50_s: float | None = None
    queue_wait_p95_s: float | None = None
    # From Kueue's admission wait histogram through Prometheus (5-minute rollups): the mean
    # wait of the workloads admitted in the period. None where nothing was read.
    queue_wait_mean_s: float | None = None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def workload_stats(
    *,
    start: datetime,
    end: datetime,
    tenant_ids: Sequence[int] | None = None,
    cluster_ids: Sequence[int] | None = None,
) -> dict[int, WorkloadStats]:
    """Per tenant id: counts, queue wait percentiles (from the Workload objects), the mean
    queue wait (from Kueue's histogram, where Prometheus is read), evictions and preemptions.
    Three queries."""
    rows = Workload.objects.filter(tenant__isnull=False)
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=_ids(tenant_ids))
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=_ids(cluster_ids))
    active = rows.filter(created_at__lt=end).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=start)
    )
    out: dict[int, WorkloadStats] = defaultdict(WorkloadStats)
    for r in active.values("tenant_id").annotate(
        created=Count("pk", filter=Q(created_at__gte=start)),
        admitted=Count("pk", filter=Q(admitted_at__gte=start, admitted_at__lt=end)),
        finished=Count("pk", filter=Q(finished_at__gte=start, finished_at__lt=end)),
        evictions=Sum("evictions"),
        preemptions=Sum("preemptions"),
    ):
        stats = out[r["tenant_id"]]
        stats.created, stats.admitted, stats.finished = r["created"], r["admitted"], r["finished"]
        stats.evictions, stats.preemptions = r["evictions"] or 0, r["preemptions"] or 0
    waits: dict[int, list[float]] = defaultdict(list)
    for tenant_id, wait in rows.filter(
        admitted_at__gte=start, admitted_at__lt=end, queue_wait_s__isnull=False
    ).values_list("tenant_id", "queue_wait_s"):
        if wait is not None:
            waits[tenant_id].append(wait)
    for tenant_id, values in waits.items():
        out[tenant_id].queue_wait_p50_s = percentile(values, 0.5)
        out[tenant_id].queue_wait_p95_s = percentile(values, 0.95)
    # Over more than a day the hourly totals (12 times fewer rows: the 30-day page stays as
    # fast at 10 times the data); the current hour is then left out, as in GPU-hours.
    coarse = end - start > timedelta(days=1)
    kueue = Rollup.objects.filter(
        resolution=Resolution.HOUR if coarse else Resolution.FIVE_MINUTES,
        bucket__gte=start,
        bucket__lt=end,
        metric__in=[Metric.ADMISSIONS, Metric.ADMISSION_WAIT],
    )
    if tenant_ids is not None:
        kueue = kueue.filter(tenant_id__in=_ids(tenant_ids))
    if cluster_ids is not None:
        kueue = kueue.filter(cluster_id__in=_ids(cluster_ids))
    totals: dict[int, dict[int, float]] = defaultdict(dict)
    for tenant_id, metric, total in (
        kueue.order_by().values("tenant_id", "metric").annotate(total=Sum("sum"))
    ).values_list("tenant_id", "metric", "total"):
        totals[tenant_id][metric] = total or 0.0
    for tenant_id, by_metric in totals.items():
        admitted = by_metric.get(Metric.ADMISSIONS, 0.0)
        if admitted > 0 and Metric.ADMISSION_WAIT in by_metric:
            out[tenant_id].queue_wait_mean_s = by_metric[Metric.ADMISSION_WAIT] / admitted
    return dict(out)


def gpu_utilization_now(
    *, cluster_id: int, now: datetime | None = None, window: timedelta = timedelta(minutes=5)
) -> list[dict[str, Any]]:
    """Per (node, GPU uuid, gi_id): mean utilisation and memory over the last ``window``."""
    now = now or timezone.now()
    rows = Sample.objects.filter(
        cluster_id=cluster_id,
        time__gte=now - window,
        time__lte=now,
        metric__in=[Metric.GPU_UTILIZATION, Metric.GPU_MEMORY_USED],
    ).values_list("node_id", "gpu_uuid", "gi_id", "mig_profile", "tenant_id", "metric", "value")
    cells: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for node_id, uuid, gi_id, profile, tenant_id, metric, value in rows:
        cell = cells.setdefault(
            (node_id, uuid, gi_id),
            {"node_id": node_id, "gpu_uuid": uuid, "gi_id": gi_id, "mig_profile": profile,
             "tenant_id": tenant_id, "util": [], "memory": []},
        )  # fmt: skip
        cell["util" if metric == Metric.GPU_UTILIZATION else "memory"].append(value)
    out = []
    for cell in cells.values():
        util, memory = cell.pop("util"), cell.pop("memory")
        cell["utilization_pct"] = sum(util) / len(util) if util else None
        cell["memory_used_mib"] = sum(memory) / len(memory) if memory else None
        out.append(cell)
    return sorted(out, key=lambda c: (c["node_id"] or 0, c["gpu_uuid"] or "", c["gi_id"] or -1))


def rollup_freshness() -> dict[str, dict[str, datetime | None]]:
    return {
        RESOLUTION_NAMES[s.resolution]: {
            "rolled_until": s.rolled_until,
            "last_run_at": s.last_run_at,
        }
        for s in RollupState.objects.all()
    }


def prometheus_sources() -> QuerySet[PrometheusSource]:
    """Every cluster's Prometheus source with its cluster (platform admins only)."""
    return PrometheusSource.objects.select_related("cluster").order_by("cluster__name")


def volume_room(*, tenant_id: int, cluster_id: int) -> list[VolumeRoom]:
    """The tenant's volumes on the cluster with their free space, fullest first."""
    return list(
        VolumeRoom.objects.filter(tenant_id=tenant_id, cluster_id=cluster_id).order_by(
            "available_bytes", "namespace", "claim"
        )
    )


# Workloads (the tenant's workloads page and API) ----------------------------------------------

WORKLOAD_STATES = ("pending", "admitted", "running", "suspended", "finished", "evicted")
_STATE_FILTERS = {
    "pending": Q(state=WorkloadState.PENDING),
    "admitted": Q(state=WorkloadState.ADMITTED, running=False),
    "running": Q(state=WorkloadState.ADMITTED, running=True),
    "suspended": Q(state=WorkloadState.INACTIVE),
    "finished": Q(state=WorkloadState.FINISHED),
    "evicted": Q(state=WorkloadState.EVICTED),
}
# Kueue's words on a pending workload (the QuotaReserved condition's message).
PENDING_QUOTA = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^,\s]+), "
    r"(?P<more>[0-9.]+[a-zA-Z]*) more needed"
)
PENDING_CANNOT_FIT = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^,\s]+), .*?"
    r"maximum capacity \((?:(?P<asked>[0-9.]+[a-zA-Z]*) > )?(?P<capacity>[0-9.]+[a-zA-Z]*)\)"
)
PENDING_HELD = re.compile(r"ClusterQueue \S+ is (inactive|stopped|held)|stopPolicy", re.IGNORECASE)
STALE_AFTER = timedelta(minutes=5)


def workload_state(workload: Workload) -> str:
    """The state a lead reads: pending, admitted, running, suspended, finished, evicted."""
    if workload.state == WorkloadState.FINISHED:
        return "finished"
    if workload.state == WorkloadState.INACTIVE or not workload.active:
        return "suspended"
    if workload.state == WorkloadState.ADMITTED:
        return "running" if workload.running else "admitted"
    return str(workload.state)


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min"


def _amount_words(amount: float | Decimal, resource: str, flavor: ResourceFlavor | None) -> str:
    """'4 H100 GPUs', '2 MIG 1g.10gb instances', '64 GiB of memory', '8 CPU cores'."""
    value = float(amount)
    number = f"{value:g}"
    if resource == GPU_RESOURCE:
        model = (flavor.gpu_model if flavor is not None else "") or (
            flavor.name if flavor is not None else ""
        )
        return f"{number} {model} GPU{'' if value == 1 else 's'}".replace("  ", " ")
    if resource.startswith(MIG_RESOURCE_PREFIX):
        profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
        return f"{number} MIG {profile} instance{'' if value == 1 else 's'}"
    if resource == "memory":
        return f"{value / 2**30:g} GiB of memory"
    if resource == "cpu":
        return f"{number} CPU core{'' if value == 1 else 's'}"
    return f"{number} {resource}"


def _quantity(text: str) -> float:
    try:
        return float(parse_quantity(text))
    except (QuantityError, TypeError, ValueError):
        return 0.0


@dataclass(frozen=True)
class WorkloadNeed:
    """What a waiting workload needs, as a quota line: the change a request would ask for."""

    cluster: str
    flavor: str
    resource: str
    guaranteed_before: Decimal
    limit_before: Decimal
    guaranteed: Decimal
    limit: Decimal


@dataclass
class WorkloadRow:
    workload: Workload
    cluster: str
    state: str
    stale: bool
    duration: str  # "ran 3 h 20 min", "waiting 12 min"
    reason: str  # in words, for pending work
    need: WorkloadNeed | None  # for "Ask for what this needs"
    gpus_by_flavor: list[dict[str, Any]] = field(default_factory=list)

    @property
    def may_suspend(self) -> bool:
        return self.state in ("pending", "admitted", "running", "evicted")

    @property
    def may_resume(self) -> bool:
        return self.state == "suspended"


@dataclass(frozen=True)
class ClusterReading:
    name: str
    stale: bool
    failing_since: datetime | None
    last_success_at: datetime | None
    error: str


@dataclass(frozen=True)
class WorkloadFilters:
    state: str = ""
    person: str = ""
    cluster: str = ""


def workload_filter_choices(*, tenant: Tenant) -> dict[str, list[str]]:
    """The values each filter takes: states, the people seen submitting, the clusters."""
    people = (
        Workload.objects.filter(tenant=tenant)
        .exclude(submitter="")
        .order_by("submitter")
        .values_list("submitter", flat=True)
        .distinct()
    )
    clusters = Cluster.objects.order_by("name").values_list("name", flat=True)
    return {"state": list(WORKLOAD_STATES), "person": list(people), "cluster": list(clusters)}


def workload_filters_parse(*, tenant: Tenant, params: Mapping[str, str]) -> WorkloadFilters:
    """The filters of a query string; a value that is none of the choices is a 400 naming the
    field and listing them."""
    choices = workload_filter_choices(tenant=tenant)
    values = {}
    for name in ("state", "person", "cluster"):
        value = str(params.get(name) or "")
        if value and value not in choices[name]:
            listed = ", ".join(choices[name]) or "none yet"
            raise ValidationFailed.for_field(
                name, f"Unknown {name} {value!r}; choose one of: {listed}.", choices=choices[name]
            )
        values[name] = value
    return WorkloadFilters(**values)


def workload_list_for_tenant(
    *, tenant: Tenant, filters: WorkloadFilters = WorkloadFilters()
) -> QuerySet[Workload]:
    """The tenant's workloads on every cluster, newest first, filtered."""
    rows = Workload.objects.filter(tenant=tenant).select_related("cluster")
    if filters.state:
        rows = rows.filter(_STATE_FILTERS[filters.state])
    if filters.person:
        rows = rows.filter(submitter=filters.person)
    if filters.cluster:
        rows = rows.filter(cluster__name=filters.cluster)
    return rows.order_by("-created_at", "-pk")


def workload_get_for_tenant(*, tenant: Tenant, pk: int) -> Workload:
    found = Workload.objects.filter(tenant=tenant, pk=pk).select_related("cluster").first()
    if found is None:
        raise NotFound("No such workload of this tenant.")
    return found


def cluster_readings(*, now: datetime | None = None) -> list[ClusterReading]:
    """How the last reading of each cluster's workloads went: stale where it fails, or where
    nothing read it for a while (the collector runs every minute)."""
    now = now or timezone.now()
    out = []
    for reading in WorkloadReading.objects.select_related("cluster").order_by("cluster__name"):
        late = reading.last_success_at is None or reading.last_success_at < now - STALE_AFTER
        out.append(
            ClusterReading(
                name=reading.cluster.name,
                stale=reading.failing_since is not None or late,
                failing_since=reading.failing_since or (reading.last_success_at if late else None),
                last_success_at=reading.last_success_at,
                error=reading.last_error,
            )
        )
    return out


def workload_rows(
    *, tenant: Tenant, workloads: Iterable[Workload], now: datetime | None = None
) -> list[WorkloadRow]:
    """The page's rows: state, how long it ran or waited, why it waits (in words, with the
    tenant's quota figures) and what a request would need to ask for."""
    now = now or timezone.now()
    workloads = list(workloads)
    stale = {r.name for r in cluster_readings(now=now) if r.stale}
    quotas = {
        (qs.cluster_name, item.flavor_name, item.resource): item
        for qs in tenant_effective_quotas(tenant=tenant)
        for item in qs.items
    }
    cluster_ids = {w.cluster_id for w in workloads}
    flavors = {
        (f.cluster_id, f.name): f for f in ResourceFlavor.objects.filter(cluster_id__in=cluster_ids)
    }
    used: dict[tuple[int, str, str], float] = defaultdict(float)
    for held in Workload.objects.filter(
        tenant=tenant, cluster_id__in=cluster_ids, state=WorkloadState.ADMITTED
    ).values_list("cluster_id", "resources"):
        for line in held[1] or []:
            used[(held[0], line.get("flavor", ""), line.get("resource", ""))] += float(
                line.get("amount") or 0
            )
    rows = []
    for w in workloads:
        state = workload_state(w)
        if state == "finished":
            end = w.finished_at or w.updated_at
            duration = f"ran {_duration((end - (w.admitted_at or w.created_at)).total_seconds())}"
        elif state in ("admitted", "running"):
            duration = f"running for {_duration((now - (w.admitted_at or now)).total_seconds())}"
        else:
            duration = f"waiting for {_duration((now - w.created_at).total_seconds())}"
        reason, need = "", None
        if state in ("pending", "evicted"):
            reason, need = _pending_words(tenant, w, quotas, flavors, used)
        gpus_by_flavor = [
            {
                "flavor": line.get("flavor", ""),
                "resource": line.get("resource", ""),
                "amount": line.get("amount"),
                "words": _amount_words(
                    line.get("amount") or 0,
                    line.get("resource", ""),
                    flavors.get((w.cluster_id, line.get("flavor", ""))),
                ),
            }
            for line in w.resources or []
        ]
        rows.append(
            WorkloadRow(
                workload=w,
                cluster=w.cluster.name,
                state=state,
                stale=w.cluster.name in stale,
                duration=duration,
                reason=reason,
                need=need,
                gpus_by_flavor=gpus_by_flavor,
            )
        )
    return rows


def _asked(w: Workload, resource: str) -> float:
    return sum(
        float(x.get("amount") or 0) for x in w.resources or [] if x.get("resource") == resource
    )


def _pending_words(
    tenant: Tenant,
    w: Workload,
    quotas: Mapping[tuple[str, str, str], EffectiveQuota],
    flavors: Mapping[tuple[int, str], ResourceFlavor],
    used: Mapping[tuple[int, str, str], float],
) -> tuple[str, WorkloadNeed | None]:
    """Kueue's message turned into a lead's words, and what a request would ask for."""
    message = w.pending_message
    cluster = w.cluster.name
    match = PENDING_QUOTA.search(message)
    if match and match["flavor"] == JOB_SLOTS_FLAVOR:
        # The running-job cap (quotas.kube.job_caps): Kueue counts a job's pods as its slots.
        slots = _quantity(match["more"])
        return (
            f"waiting for {slots:g} more running-job slot{'' if slots == 1 else 's'}: "
            f"{tenant.slug} is at its cap on running jobs on {cluster} (Kueue counts each pod "
            "of a job as one)",
            None,
        )
    if match:
        flavor_name, resource = match["flavor"], match["resource"]
        more = Decimal(str(_quantity(match["more"])))
        flavor = flavors.get((w.cluster_id, flavor_name))
        quota = quotas.get((cluster, flavor_name, resource))
        in_use = used.get((w.cluster_id, flavor_name, resource), 0.0)
        waiting = f"waiting for {_amount_words(more, resource, flavor)} more"
        if quota is None:
            return (
                f"{waiting}; {tenant.slug} has no quota for {resource} on flavor {flavor_name} "
                f"of {cluster}",
                WorkloadNeed(cluster, flavor_name, resource, Decimal(0), Decimal(0), more, more),
            )
        uses = f"{tenant.slug} uses {in_use:g} of {quota.limit:g}"
        if quota.limit <= quota.guaranteed:
            why = (
                f"borrowing is not possible because its limit equals its guarantee "
                f"({quota.guaranteed:g})"
            )
        elif Decimal(str(in_use)) + more > quota.limit:
            why = (
                f"borrowing is not possible because that would take it past its limit of "
                f"{quota.limit:g} ({quota.guaranteed:g} guaranteed, up to "
                f"{quota.borrowing_limit:g} borrowed)"
            )
        else:
            why = (
                "borrowing is not possible because the other teams sharing this flavor use "
                "what they could lend"
            )
        # Past the limit: both raised by what is missing (the borrowing room kept); within
        # it: the guarantee raised to hold it all, so nothing need be borrowed.
        total = Decimal(str(in_use)) + more
        if total > quota.limit:
            delta = total - quota.limit
            guaranteed, limit = quota.guaranteed + delta, quota.limit + delta
        else:
            guaranteed, limit = max(quota.guaranteed, total), quota.limit
        need = None
        if (guaranteed, limit) != (quota.guaranteed, quota.limit):
            need = WorkloadNeed(
                cluster, flavor_name, resource, quota.guaranteed, quota.limit, guaranteed, limit
            )
        else:
            why = (
                f"it is within {tenant.slug}'s guarantee: Kueue takes back what was lent "
                "(preempting) or waits for it to be returned"
            )
        return f"{waiting}; {uses}; {why}", need
    if match := PENDING_CANNOT_FIT.search(message):
        flavor_name, resource = match["flavor"], match["resource"]
        flavor = flavors.get((w.cluster_id, flavor_name))
        asked = Decimal(str(_quantity(match["asked"]) if match["asked"] else _asked(w, resource)))
        capacity = _quantity(match["capacity"])
        quota = quotas.get((cluster, flavor_name, resource))
        words = (
            f"cannot fit: it asks for {_amount_words(asked, resource, flavor)} and "
            f"{tenant.slug}'s quota on {cluster} allows at most {capacity:g}"
        )
        g, lim = (quota.guaranteed, quota.limit) if quota else (Decimal(0), Decimal(0))
        return words, WorkloadNeed(cluster, flavor_name, resource, g, lim, g, max(lim, asked))
    if PENDING_HELD.search(message):
        gpu = next(
            (q for key, q in quotas.items() if key[0] == cluster and key[2] == GPU_RESOURCE),
            None,
        )
        words = (
            f"held: {cluster} takes no new work of {tenant.slug} for now (an admin or an alert "
            "stopped its queue)"
        )
        if gpu is None:
            return words, None
        wanted = Decimal(str(_asked(w, GPU_RESOURCE)))
        holding = Decimal(str(used.get((w.cluster_id, gpu.flavor_name, GPU_RESOURCE), 0.0)))
        guaranteed = max(gpu.guaranteed, holding + wanted)
        return words, WorkloadNeed(
            cluster, gpu.flavor_name, GPU_RESOURCE, gpu.guaranteed, gpu.limit,
            guaranteed, max(gpu.limit, guaranteed),
        )  # fmt: skip
    if message:
        return f"Kueue says: {message}", None
    if not w.active:
        return "suspended", None
    return "waiting for Kueue to consider it", None


# --- per-person caps (R14): each capped person's use against their cap -----------------------


@dataclass(frozen=True)
class PersonCapUse:
    """One cap line of a person with what their admitted work holds of it now."""

    subject: str  # quotas.choices.CapSubject
    username: str
    cluster: str
    flavor: str
    resource: str
    cap: Decimal
    used: Decimal
    cluster_queue: str

    @property
    def percent(self) -> int:
        return int(self.used * 100 / self.cap) if self.cap else (100 if self.used else 0)

    @property
    def who(self) -> str:
        """Whom it holds, in words."""
        if self.subject == "pipeline":
            return "the team's pipeline account"
        if self.subject == "default":
            return "every other member (default)"
        return self.username

    def _text(self, amount: Decimal) -> str:
        if self.resource == GPU_RESOURCE:
            return f"{amount:f}".rstrip("0").rstrip(".") + (" GPU" if amount == 1 else " GPUs")
        if self.resource.startswith(MIG_RESOURCE_PREFIX):
            shown = f"{amount:f}".rstrip("0").rstrip(".")
            return f"{shown} MIG instance" + ("" if amount == 1 else "s")
        return to_display(amount, self.resource)

    @property
    def cap_text(self) -> str:
        return self._text(self.cap)

    @property
    def used_text(self) -> str:
        return self._text(self.used)


def person_cap_use(*, tenant: Tenant) -> list[PersonCapUse]:
    """Each cap of ``tenant`` (members', the pipeline account's, the default's) beside what
    the person's admitted Kueue workloads hold on that flavor (read by the collector from the
    person's own ClusterQueue). Two queries."""
    lines = person_cap_lines(tenant=tenant)
    queues = {line.cluster_queue for line in lines if line.cluster_queue}
    used: dict[tuple[str, str, str, str], Decimal] = defaultdict(Decimal)
    rows = Workload.objects.filter(
        tenant=tenant, cluster_queue__in=queues, state=WorkloadState.ADMITTED
    ).values_list("cluster__name", "cluster_queue", "resources")
    for cluster, queue, resources in rows:
        for item in resources or []:
            key = (cluster, queue, str(item.get("flavor") or ""), str(item.get("resource") or ""))
            used[key] += Decimal(str(item.get("amount") or 0))
    return [
        PersonCapUse(
            subject=line.subject,
            username=line.username,
            cluster=line.cluster,
            flavor=line.flavor,
            resource=line.resource,
            cap=line.amount,
            used=used.get(
                (line.cluster, line.cluster_queue, line.flavor, line.resource), Decimal(0)
            ),
            cluster_queue=line.cluster_queue,
        )
        for line in lines
    ]


def person_cap_targets_for_page(*, tenant: Tenant) -> list[tuple[str, str]]:
    """The lines a cap may be set on, as (form value "cluster/flavor/resource", words)."""
    return [
        (f"{cluster}/{flavor}/{resource}", f"{cluster} · {flavor} · {resource}")
        for cluster, flavor, resource in person_cap_targets(tenant=tenant)
    ]


def person_cap_members(*, tenant: Tenant) -> list[str]:
    """Who may be capped: the tenant's leads and members (viewers submit nothing)."""
    return [
        m.user.username
        for m in membership_list_for_tenant(tenant=tenant)
        if m.role != MembershipRole.VIEWER
    ]


# --- vGPU shares (HAMi): GPU memory and compute per tenant ---------------------------------


@dataclass(frozen=True)
class VgpuShareUse:
    """One tenant's share of a vGPU flavor and what its containers used of it over a period:
    memory in bytes (its ``nvidia.com/gpumem`` quota) and MiB (the readings), compute in
    percent points of a GPU (its ``nvidia.com/gpucores`` quota and the readings)."""

    tenant_id: int
    cluster: str
    flavor: str
    memory_limit: Decimal | None  # bytes
    cores_limit: Decimal | None  # percent points of a GPU
    memory_mean_mib: float | None
    memory_peak_mib: float | None
    cores_mean: float | None
    flavor_id: int = 0
    cluster_id: int = 0

    @staticmethod
    def _percent(used: float | None, of: float | None) -> str:
        if used is None or not of:
            return ""
        return f"{used / of * 100:.0f}%"

    @property
    def memory_limit_text(self) -> str:
        return "—" if self.memory_limit is None else vgpu.gib_text(self.memory_limit)

    @property
    def cores_limit_text(self) -> str:
        return "—" if self.cores_limit is None else vgpu.cores_text(self.cores_limit)

    def _mib_text(self, mib: float | None) -> str:
        return "—" if mib is None else vgpu.gib_text(Decimal(repr(mib)) * vgpu.MIB)

    @property
    def memory_mean_text(self) -> str:
        return self._mib_text(self.memory_mean_mib)

    @property
    def memory_peak_text(self) -> str:
        return self._mib_text(self.memory_peak_mib)

    @property
    def memory_mean_share(self) -> str:
        """The mean memory used as a percent of the share ("" where either is unknown)."""
        limit = None if self.memory_limit is None else float(self.memory_limit) / vgpu.MIB
        return self._percent(self.memory_mean_mib, limit)

    @property
    def memory_peak_share(self) -> str:
        limit = None if self.memory_limit is None else float(self.memory_limit) / vgpu.MIB
        return self._percent(self.memory_peak_mib, limit)

    @property
    def cores_mean_text(self) -> str:
        return "—" if self.cores_mean is None else f"{self.cores_mean:.0f}% of a GPU"

    @property
    def cores_mean_share(self) -> str:
        return self._percent(
            self.cores_mean, None if self.cores_limit is None else float(self.cores_limit)
        )


def vgpu_share_use(
    *,
    start: datetime,
    end: datetime,
    tenant_ids: Sequence[int] | None = None,
    resolution: int = Resolution.HOUR,
) -> list[VgpuShareUse]:
    """Per tenant and vGPU flavor: its GPU memory and compute quotas and what its containers
    used of them between ``start`` and ``end`` (means weighted by samples, the memory's highest
    bucket mean as its peak), from the rollups of ``resolution``. Three queries; one where
    the tenants asked for hold no vGPU share."""
    quotas: dict[tuple[int, int], dict[str, Decimal]] = defaultdict(dict)
    flavors: dict[int, ResourceFlavor] = {}
    lines = Quota.objects.filter(
        flavor__kind=FlavorKind.VGPU, resource__in=[GPUMEM_RESOURCE, GPUCORES_RESOURCE]
    ).select_related("flavor__cluster", "quota_set")
    if tenant_ids is not None:
        lines = lines.filter(quota_set__tenant_id__in=_ids(tenant_ids))
    for q in lines:
        quotas[(q.quota_set.tenant_id, q.flavor_id)][q.resource] = q.limit
        flavors[q.flavor_id] = q.flavor
    if tenant_ids is not None and not quotas:
        return []  # no share to hold its use against (one query for a tenant without vGPU)
    rows = Rollup.objects.filter(
        resolution=resolution,
        metric__in=[Metric.VGPU_MEMORY_USED, Metric.VGPU_CORES_USED],
        bucket__gte=start,
        bucket__lt=end,
    )
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=_ids(tenant_ids))
    used: dict[tuple[int, int], dict[int, tuple[float, int, float]]] = defaultdict(dict)
    for row in rows.values("tenant_id", "flavor_id", "metric").annotate(
        total=Sum("sum"), samples=Sum("samples"), peak=Max("max")
    ):
        key = (row["tenant_id"], row["flavor_id"])
        used[key][row["metric"]] = (row["total"], row["samples"], row["peak"])
    missing = {f for _, f in used if f not in flavors}
    flavors.update(
        (f.pk, f)
        for f in ResourceFlavor.objects.filter(pk__in=missing, kind=FlavorKind.VGPU).select_related(
            "cluster"
        )
    )
    out = []
    for key in sorted(set(quotas) | set(used)):
        tenant_id, flavor_id = key
        flavor = flavors.get(flavor_id)
        if flavor is None:
            continue
        figures = used.get(key, {})
        memory = figures.get(Metric.VGPU_MEMORY_USED)
        cores = figures.get(Metric.VGPU_CORES_USED)
        out.append(
            VgpuShareUse(
                tenant_id=tenant_id,
                cluster=flavor.cluster.name,
                flavor=flavor.name,
                memory_limit=quotas.get(key, {}).get(GPUMEM_RESOURCE),
                cores_limit=quotas.get(key, {}).get(GPUCORES_RESOURCE),
                memory_mean_mib=memory[0] / memory[1] if memory and memory[1] else None,
                memory_peak_mib=memory[2] if memory else None,
                cores_mean=cores[0] / cores[1] if cores and cores[1] else None,
                flavor_id=flavor_id,
                cluster_id=flavor.cluster_id,
            )
        )
    return sorted(out, key=lambda u: (u.tenant_id, u.cluster, u.flavor))
