"""Reads behind the usage dashboards, the workload profile report and showback.

Built on ``usage.selectors`` (rollups only, never raw samples for long ranges) and the
catalogue (clusters, flavors, quotas) and fleet (GPUs, MIG instances) models. Each function
runs a fixed number of queries whatever the number of tenants, flavors or samples (the pages
assert it). Amounts are GPUs (or MIG instances) of a flavor; ``units`` are amounts x the
flavor's ``gpu_weight`` (normalised GPU units, R5).

- ``period_resolve``: a range picked on a page or asked of the API (24 h, 7 d, 30 d or a
  custom start and end) -> ``Period``, or ValidationFailed (400) naming the limit.
- ``tenant_dashboard``: a tenant's use vs guaranteed vs limit per cluster and flavor, units,
  utilisation and the four rollout indicators (R21); ``tenant_filter_places``: the clusters
  and flavors its page's filter offers.
- ``admin_dashboard``: per-tenant shares of each flavor, guarantees vs capacity, a node x GPU
  utilisation heatmap, free MIG slices, top idle allocations, per cluster and summed (R22).
- ``workload_profile``: submissions by hour of week, GPUs per job, durations, peaks and mean
  utilisation for a period (R8, R18).
- ``showback``: GPU-hours per tenant and flavor for a month, priced per flavor-hour.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.db.models import (
    Avg,
    Count,
    F,
    FloatField,
    Max,
    OuterRef,
    Q,
    Subquery,
    Sum,
)
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from core.dates import OUT_OF_RANGE, in_range
from core.errors import NotFound, ValidationFailed
from dashboards.models import FlavorPrice
from gpu_agent.models import Gpu, MigInstance
from gpu_spec.mig.catalogue import GpuModel, load_catalogue
from gpu_spec.mig.layout import Placement, free_slices
from quotas.choices import GPU_RESOURCE, MIG_RESOURCE_PREFIX, FlavorKind, mig_resource
from quotas.models import Cluster, FlavorResource, Quota, ResourceFlavor
from quotas.selectors import fleet_capacities
from tenants.models import Tenant
from usage import selectors as usage_selectors
from usage.breakdown import Breakdown, BreakdownTable, apportion, usage_breakdown
from usage.buckets import bucket_start, retention
from usage.choices import RAW, Metric, Resolution
from usage.models import PrometheusGpu, Rollup, Sample, Workload

RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
RANGE_LABELS = {"24h": "24 hours", "7d": "7 days", "30d": "30 days", "custom": "custom"}
GPU_KINDS = (FlavorKind.GPU, FlavorKind.MIG)
# An allocation whose GPUs run under this mean utilisation counts as idle (the alert's 30%).
IDLE_BELOW_PCT = 30.0
TOP_IDLE = 10
TOP_TENANTS = 12  # tenants drawn one by one in the share charts; the rest are "others"
HEATMAP_WINDOW = timedelta(minutes=5)
# A GPU only the cluster's Prometheus shows stays on the heatmap this long after its last series.
PROMETHEUS_GPU_KEPT = timedelta(hours=1)
DURATION_BUCKETS: tuple[tuple[str, float], ...] = (
    ("< 10 min", 600),
    ("10-60 min", 3600),
    ("1-4 h", 4 * 3600),
    ("4-12 h", 12 * 3600),
    ("12-24 h", 86400),
    ("1-3 d", 3 * 86400),
    ("> 3 d", math.inf),
)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


# --- periods -----------------------------------------------------------------------------------


def step_for(span: timedelta) -> timedelta:
    """The step a range is drawn with: 5 minutes up to a day, hours up to 60 days, then days
    (the usage API's defaults, so a page and its API agree)."""
    if span <= timedelta(days=1):
        return timedelta(minutes=5)
    if span <= timedelta(days=60):
        return timedelta(hours=1)
    return timedelta(days=1)


@dataclass(frozen=True)
class Period:
    name: str  # "24h", "7d", "30d" or "custom"
    plan: usage_selectors.SeriesPlan

    @property
    def start(self) -> datetime:
        return self.plan.start

    @property
    def end(self) -> datetime:
        return self.plan.end

    @property
    def step(self) -> timedelta:
        return self.plan.step

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    @property
    def label(self) -> str:
        return RANGE_LABELS[self.name]

    @property
    def source(self) -> str:
        return self.plan.source

    @property
    def step_words(self) -> str:
        """The step as a person says it: "5 minutes", "1 hour", "1 day"."""
        return usage_selectors.length_words(int(self.step.total_seconds()))

    @property
    def source_words(self) -> str:
        """What the period is read from: "hourly usage totals", "raw usage samples"."""
        return usage_selectors.RESOLUTION_WORDS[self.plan.resolution]


def period_resolve(
    *,
    name: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    now: datetime | None = None,
    default: str = "7d",
) -> Period:
    """A preset range ending now, or a custom ``start``/``end`` (either may be left out: end
    defaults to now, start to a day before end). The step follows the span and the range is
    widened to whole steps. ValidationFailed (400) for start >= end, a start older than the
    step's rollups are kept, or an unknown range name."""
    now = now or timezone.now()
    custom = start is not None or end is not None or name == "custom"
    if not custom:
        name = name or default
        if name not in RANGES:
            raise ValidationFailed.for_field(
                "range", f"{name!r} is not one of {', '.join([*RANGES, 'custom'])}."
            )
        end = now
        start = now - RANGES[name]
    else:
        name = "custom"
        end = end or now
        start = start or end - timedelta(days=1)
        if start >= end:
            raise ValidationFailed.for_field("start", "start must be before end.")
    step = step_for(end - start)
    aligned_start = bucket_start(start, int(step.total_seconds()))
    aligned_end = bucket_start(end, int(step.total_seconds()))
    if aligned_end < end:
        aligned_end += step
    # A preset's start is rounded down to its step: never past what the rollups keep.
    if not custom and aligned_start < now - retention(_resolution(step)):
        aligned_start += step
    plan = usage_selectors.series_plan(start=aligned_start, end=aligned_end, step=step, now=now)
    return Period(name, plan)


def _resolution(step: timedelta) -> int:
    seconds = int(step.total_seconds())
    return next((int(r) for r in (86400, 3600, 300) if seconds % r == 0), RAW)


def _flavor_filter(cluster: str | None, flavor: str | None) -> list[ResourceFlavor]:
    """GPU and MIG flavors (with their cluster), narrowed by names; NotFound for a name that
    matches none."""
    flavors = ResourceFlavor.objects.filter(kind__in=GPU_KINDS).select_related("cluster")
    if cluster:
        flavors = flavors.filter(cluster__name=cluster)
    if flavor:
        flavors = flavors.filter(name=flavor)
    found = list(flavors.order_by("cluster__name", "name"))
    if not found and flavor:
        raise NotFound("No such GPU flavor.", fields={"flavor": ["no such GPU flavor"]})
    if not found and cluster and not Cluster.objects.filter(name=cluster).exists():
        raise NotFound("No such cluster.", fields={"cluster": ["no such cluster"]})
    return found


def tenant_filter_places(*, tenant: Tenant) -> dict[str, list[str]]:
    """The clusters ``tenant`` has quota on, each with its GPU and MIG flavors (names, sorted):
    what the tenant usage page's filter offers. One query."""
    rows = (
        ResourceFlavor.objects.filter(kind__in=GPU_KINDS, cluster__quota_sets__tenant=tenant)
        .values_list("cluster__name", "name")
        .distinct()
        .order_by("cluster__name", "name")
    )
    places: dict[str, list[str]] = {}
    for cluster, flavor in rows:
        places.setdefault(cluster, []).append(flavor)
    return places


def admin_filter_places() -> dict[str, list[str]]:
    """Every cluster, each with its GPU and MIG flavors (names, sorted; none for a cluster
    without any yet): what the admin usage page's filter offers. Two queries."""
    places: dict[str, list[str]] = {
        name: [] for name in Cluster.objects.order_by("name").values_list("name", flat=True)
    }
    rows = (
        ResourceFlavor.objects.filter(kind__in=GPU_KINDS)
        .values_list("cluster__name", "name")
        .order_by("cluster__name", "name")
    )
    for cluster, flavor in rows:
        places.setdefault(cluster, []).append(flavor)
    return places


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


# --- tenant dashboard --------------------------------------------------------------------------


@dataclass
class Indicators:
    """The four things to watch when a quota change rolls out (R21)."""

    mean_gpu_utilization: float | None
    queue_wait_p50_s: float | None
    queue_wait_p95_s: float | None
    evictions: int
    preemptions: int
    borrowing_ratio: float | None  # GPU-hours borrowed / GPU-hours used
    workloads_created: int
    workloads_admitted: int
    workloads_finished: int
    peak_used_units: float | None
    # Kueue's own mean admission wait (its histogram, through Prometheus): shown where the
    # portal has no workloads of its own to take percentiles of.
    queue_wait_mean_s: float | None = None


@dataclass
class TenantDashboard:
    tenant: Tenant
    period: Period
    series: list[usage_selectors.FlavorSeries]
    units: list[dict[str, Any]]  # per step: time, used, guaranteed, limit, borrowed (units)
    indicators: Indicators

    def rows(self) -> list[dict[str, Any]]:
        """Every point shown, one row per (cluster, flavor, step): the CSV download."""
        out = []
        for s in self.series:
            for p in s.points:
                row: dict[str, Any] = {"cluster": s.cluster, "flavor": s.flavor, "time": p.time}
                row |= {name: p.values.get(name) for name in SERIES_FIELDS}
                row["gpu_weight"] = s.gpu_weight
                for name in UNIT_FIELDS:
                    value = p.values.get(name)
                    row[f"{name}_units"] = None if value is None else value * s.gpu_weight
                out.append(row)
        return out


SERIES_FIELDS = ("used", "used_max", "guaranteed", "limit", "borrowed", "reserved", "allocated",
                 "gpu_utilization")  # fmt: skip
UNIT_FIELDS = ("used", "used_max", "guaranteed", "limit", "borrowed")
CSV_COLUMNS = ("cluster", "flavor", "time", *SERIES_FIELDS, "gpu_weight",
               *(f"{n}_units" for n in UNIT_FIELDS))  # fmt: skip


def tenant_dashboard(
    *, tenant: Tenant, period: Period, cluster: str | None = None, flavor: str | None = None
) -> TenantDashboard:
    """Four queries: flavors, the series (rollups), workload counts, queue waits."""
    flavors = _flavor_filter(cluster, flavor)
    series = usage_selectors.tenant_usage(tenant=tenant, flavors=flavors, plan=period.plan)
    cluster_ids = sorted({f.cluster_id for f in flavors}) if cluster else None
    stats = usage_selectors.workload_stats(
        start=period.start, end=period.end, tenant_ids=[tenant.pk], cluster_ids=cluster_ids
    ).get(tenant.pk, usage_selectors.WorkloadStats())
    units: dict[datetime, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    util_sum = used_sum = borrowed_sum = 0.0
    util_n = 0
    for s in series:
        for p in s.points:
            step = units[p.time]
            for name in ("used", "guaranteed", "limit", "borrowed"):
                value = p.values.get(name)
                if value is not None:
                    step[name] += value * s.gpu_weight
            used, borrowed = p.values.get("used"), p.values.get("borrowed")
            used_sum += (used or 0) * s.gpu_weight
            borrowed_sum += (borrowed or 0) * s.gpu_weight
            util = p.values.get("gpu_utilization")
            if util is not None:
                util_sum += util
                util_n += 1
    unit_rows: list[dict[str, Any]] = [{"time": t, **dict(v)} for t, v in sorted(units.items())]
    indicators = Indicators(
        mean_gpu_utilization=_mean(util_sum, util_n),
        queue_wait_p50_s=stats.queue_wait_p50_s,
        queue_wait_p95_s=stats.queue_wait_p95_s,
        evictions=stats.evictions,
        preemptions=stats.preemptions,
        borrowing_ratio=borrowed_sum / used_sum if used_sum else None,
        workloads_created=stats.created,
        workloads_admitted=stats.admitted,
        workloads_finished=stats.finished,
        peak_used_units=max((r.get("used", 0.0) for r in unit_rows), default=None),
        queue_wait_mean_s=stats.queue_wait_mean_s,
    )
    return TenantDashboard(tenant, period, series, unit_rows, indicators)


# --- admin dashboard ---------------------------------------------------------------------------


@dataclass
class FlavorCapacity:
    flavor: ResourceFlavor
    capacity: float
    guaranteed: float
    limit: float
    tenants: int
    # The flavor's use summed over its tenants at each step of the period (the step the page
    # draws): its mean over the steps with a reading and its highest step. One series, one
    # window, so the mean never exceeds the peak.
    used_mean: float = 0.0
    used_peak: float = 0.0

    @property
    def weight(self) -> float:
        return float(self.flavor.gpu_weight)


@dataclass
class IdleAllocation:
    cluster: str
    tenant: str
    flavor: str
    allocated: float  # mean GPUs held over the period
    utilization: float | None  # mean utilisation of those GPUs, %
    idle_gpu_hours: float


@dataclass
class GpuCell:
    node: str
    index: int
    uuid: str
    model: str
    utilization: float | None  # mean of the last minutes' samples, else the agent's last report
    mig: bool
    instances: int = 0
    free_slices: int | None = None
    memory_slices: int | None = None
    largest_free_profile: str = ""
    fragmented: bool = False
    from_prometheus: bool = False  # no node agent reports it: DCGM series only, no MIG layout


@dataclass
class ClusterView:
    cluster: Cluster
    flavors: list[FlavorCapacity] = field(default_factory=list)
    # flavor id -> tenant slug -> mean GPUs used over the period
    shares: dict[int, dict[str, float]] = field(default_factory=dict)
    gpus: list[GpuCell] = field(default_factory=list)
    # Every GPU utilisation sample of the cluster over the period (of the flavors shown), held
    # by a tenant or not: (count, sum). The samples the heatmap averages per GPU over its last
    # minutes, so over the same window the two agree; a tenant's page averages its own only.
    utilization_samples: tuple[int, float] = (0, 0.0)

    @property
    def utilization(self) -> float | None:
        """Mean GPU utilisation over the period, % (None: no sample)."""
        count, total = self.utilization_samples
        return total / count if count else None

    @property
    def utilization_now(self) -> float | None:
        """The heatmap's GPUs averaged: each GPU's last minutes (or its agent's last report),
        % (None: no GPU with a reading)."""
        readings = [g.utilization for g in self.gpus if g.utilization is not None]
        return sum(readings) / len(readings) if readings else None

    @property
    def capacity_units(self) -> float:
        return sum(f.capacity * f.weight for f in self.flavors)

    @property
    def guaranteed_units(self) -> float:
        return sum(f.guaranteed * f.weight for f in self.flavors)

    @property
    def limit_units(self) -> float:
        return sum(f.limit * f.weight for f in self.flavors)

    @property
    def used_units(self) -> float:
        return sum(f.used_mean * f.weight for f in self.flavors)

    @property
    def mig_gpus(self) -> list[GpuCell]:
        return [g for g in self.gpus if g.mig and not g.from_prometheus]

    @property
    def free_mig_slices(self) -> int:
        return sum(g.free_slices or 0 for g in self.gpus)

    @property
    def fragmented_gpus(self) -> int:
        return sum(1 for g in self.gpus if g.fragmented)


@dataclass
class AdminDashboard:
    period: Period
    clusters: list[ClusterView]
    tenant_units: dict[str, dict[str, float]]  # tenant -> cluster -> mean units used
    idle: list[IdleAllocation]

    @property
    def totals(self) -> dict[str, float]:
        return {
            "capacity_units": sum(c.capacity_units for c in self.clusters),
            "guaranteed_units": sum(c.guaranteed_units for c in self.clusters),
            "limit_units": sum(c.limit_units for c in self.clusters),
            "used_units": sum(c.used_units for c in self.clusters),
            "free_mig_slices": sum(c.free_mig_slices for c in self.clusters),
            "fragmented_gpus": sum(c.fragmented_gpus for c in self.clusters),
        }


def _count_resource(flavor: ResourceFlavor) -> str:
    return mig_resource(flavor.mig_profile) if flavor.kind == FlavorKind.MIG else GPU_RESOURCE


def _rollup_spans(period: Period) -> Q:
    """The rollup rows that cover the period once each: for an hourly period, the whole UTC
    days inside it from the daily rollups (24 times fewer rows: a 30-day admin dashboard
    reads about 30 rows a series instead of 720) and the hours at either edge. Exact, not an
    approximation: a day's rollup holds the count, sum and max of its hours."""
    resolution = (
        period.plan.resolution if period.plan.resolution != RAW else Resolution.FIVE_MINUTES
    )
    whole = Q(resolution=resolution, bucket__gte=period.start, bucket__lt=period.end)
    if resolution != Resolution.HOUR:
        return whole
    first_day = bucket_start(period.start, Resolution.DAY)
    if first_day < period.start:
        first_day += timedelta(days=1)
    last_day = bucket_start(period.end, Resolution.DAY)
    if last_day <= first_day:
        return whole
    return (
        Q(resolution=Resolution.HOUR, bucket__gte=period.start, bucket__lt=first_day)
        | Q(resolution=Resolution.DAY, bucket__gte=first_day, bucket__lt=last_day)
        | Q(resolution=Resolution.HOUR, bucket__gte=last_day, bucket__lt=period.end)
    )


def _period_aggregates(
    period: Period, metrics: Sequence[int], **filters: Any
) -> dict[tuple[int, int, int, int], tuple[int, float, float]]:
    """(cluster, tenant, flavor, metric) -> (samples, sum, max) over the period, from the
    rollups the period's step reads. One query."""
    rows = Rollup.objects.filter(
        _rollup_spans(period), metric__in=[int(m) for m in metrics], **filters
    )
    return {
        (r["cluster_id"], r["tenant_id"], r["flavor_id"], r["metric"]): (
            r["n"],
            r["total"],
            r["peak"],
        )
        for r in rows.order_by()
        .values("cluster_id", "tenant_id", "flavor_id", "metric")
        .annotate(n=Sum("samples"), total=Sum("sum"), peak=Max("max"))
    }


def _largest_free_profile(model: GpuModel, instances: list[Placement]) -> tuple[str, int]:
    """The largest profile that could still be created on the GPU, and its compute slices."""
    used = 0
    for placement in instances:
        used |= placement.mask
    spent = sum(
        model.profiles[p.profile].compute_slices for p in instances if p.profile in model.profiles
    )
    best, best_slices = "", 0
    for profile in model.profiles.values():
        if profile.media_extensions or profile.compute_slices > model.compute_slices - spent:
            continue
        for start in profile.placements:
            need = ((1 << profile.memory_slices) - 1) << start
            if used & need == 0 and profile.compute_slices > best_slices:
                best, best_slices = profile.name, profile.compute_slices
    return best, best_slices


def _gpu_cells(clusters: dict[int, ClusterView], now: datetime) -> None:
    """Every GPU of the clusters with its recent utilisation and, in MIG mode, its free
    memory slices and the largest profile still placeable; then the GPUs only the clusters'
    Prometheus shows (DCGM series, no node agent), with their utilisation. Four queries."""
    gpus = list(
        Gpu.objects.filter(node__cluster_id__in=list(clusters))
        .order_by("node__name", "index")
        .values(
            "pk", "uuid", "index", "name", "utilization_pct", "mig_mode_current",
            "node__name", "node__cluster_id",
        )
    )  # fmt: skip
    recent = dict(
        Sample.objects.filter(
            time__gte=now - HEATMAP_WINDOW,
            time__lte=now,
            metric=Metric.GPU_UTILIZATION,
            cluster_id__in=list(clusters),
            gpu_uuid__isnull=False,
        )
        .order_by()
        .values("gpu_uuid")
        .annotate(mean=Avg("value"))
        .values_list("gpu_uuid", "mean")
    )
    placements: dict[int, list[Placement]] = defaultdict(list)
    for gpu_id, profile, start, size in MigInstance.objects.filter(
        gpu_id__in=[g["pk"] for g in gpus if g["mig_mode_current"]]
    ).values_list("gpu_id", "profile", "start", "size"):
        placements[gpu_id].append(Placement(profile, start, size))
    catalogue = load_catalogue()
    for g in gpus:
        cell = GpuCell(
            node=g["node__name"],
            index=g["index"],
            uuid=g["uuid"],
            model=g["name"],
            utilization=recent.get(g["uuid"], g["utilization_pct"]),
            mig=g["mig_mode_current"],
        )
        model = catalogue.find_model(g["name"]) if cell.mig else None
        if model is not None:
            taken = placements.get(g["pk"], [])
            cell.instances = len(taken)
            cell.memory_slices = model.memory_slices
            cell.free_slices = len(free_slices(model, taken))
            cell.largest_free_profile, _ = _largest_free_profile(model, taken)
            largest = model.profiles.get(cell.largest_free_profile)
            # Fragmented: free memory that no single instance can take whole.
            cell.fragmented = bool(cell.free_slices) and (
                largest is None or largest.memory_slices < cell.free_slices
            )
        clusters[g["node__cluster_id"]].gpus.append(cell)
    reported = {g["uuid"] for g in gpus}
    seen = (
        PrometheusGpu.objects.filter(
            cluster_id__in=list(clusters), seen_at__gte=now - PROMETHEUS_GPU_KEPT
        )
        .exclude(uuid__in=reported)
        .order_by("cluster_id", "node", "index")
        .values_list("cluster_id", "node", "index", "uuid", "model", "mig")
    )
    for cluster_id, node, index, uuid, model_name, mig in seen:
        clusters[cluster_id].gpus.append(
            GpuCell(
                node=node, index=index, uuid=uuid, model=model_name, utilization=recent.get(uuid),
                mig=mig, from_prometheus=True,
            )
        )  # fmt: skip
    for view in clusters.values():
        view.gpus.sort(key=lambda c: (c.node, c.index))


def admin_dashboard(
    *,
    period: Period,
    cluster: str | None = None,
    flavor: str | None = None,
    now: datetime | None = None,
) -> AdminDashboard:
    """Every cluster (or one), every GPU flavor (or those of one name), in a fixed number of
    queries (about ten) whatever the number of tenants, flavors or GPUs."""
    now = now or timezone.now()
    views, flavors = _dashboard_places(cluster=cluster, flavor=flavor)
    by_flavor = _flavor_capacities(views, flavors)
    usage, slugs = _allocation_usage(period, views, by_flavor, every_flavor=not flavor)
    tenant_units = _add_usage(views, by_flavor, usage, slugs)
    for flavor_id, (mean, peak) in _flavor_use_steps(period, by_flavor).items():
        by_flavor[flavor_id].used_mean, by_flavor[flavor_id].used_peak = mean, peak
    idle = _idle_allocations(period, views, by_flavor, usage, slugs)
    _gpu_cells(views, now)
    return AdminDashboard(
        period,
        list(views.values()),
        {t: dict(v) for t, v in sorted(tenant_units.items())},
        idle[:TOP_IDLE],
    )


# (cluster, tenant, flavor) -> metric -> (samples, sum, max) over the period
_AllocationUsage = dict[tuple[int, int, int], dict[int, tuple[int, float, float]]]


def _dashboard_places(
    *, cluster: str | None, flavor: str | None
) -> tuple[dict[int, ClusterView], dict[int, ResourceFlavor]]:
    """The clusters shown (one by name, or all; 404 for a name that is none) and their GPU
    flavors (those of one name, or all); with a flavor, only the clusters that have it."""
    cluster_rows = Cluster.objects.order_by("name")
    if cluster:
        cluster_rows = cluster_rows.filter(name=cluster)
    views = {c.pk: ClusterView(c) for c in cluster_rows}
    if cluster and not views:
        raise NotFound("No such cluster.", fields={"cluster": ["no such cluster"]})
    flavor_rows = ResourceFlavor.objects.filter(cluster_id__in=list(views), kind__in=GPU_KINDS)
    if flavor:
        flavor_rows = flavor_rows.filter(name=flavor)
    flavors = {f.pk: f for f in flavor_rows.select_related("cluster").order_by("name")}
    if flavor:  # only the clusters that have it
        having = {f.cluster_id for f in flavors.values()}
        views = {pk: view for pk, view in views.items() if pk in having}
    return views, flavors


def _flavor_capacity(
    views: dict[int, ClusterView], flavors: dict[int, ResourceFlavor]
) -> dict[tuple[int, str], float]:
    """(flavor id, resource) -> capacity. A MIG flavor's capacity is what the fleet's GPUs
    are partitioned into, as the approval check counts it (what the fleet pushed into quotas), not the number
    typed in Django admin."""
    capacity = {
        (fr.flavor_id, fr.resource): float(fr.capacity)
        for fr in FlavorResource.objects.filter(flavor_id__in=list(flavors))
    }
    for view in views.values():
        mine = [f for f in flavors.values() if f.cluster_id == view.cluster.pk]
        for flavor_id, fleet in fleet_capacities(cluster=view.cluster, flavors=mine).items():
            flavor_row = flavors[flavor_id]
            capacity[(flavor_id, mig_resource(flavor_row.mig_profile))] = float(fleet.total)
    return capacity


def _flavor_capacities(
    views: dict[int, ClusterView], flavors: dict[int, ResourceFlavor]
) -> dict[int, FlavorCapacity]:
    """Per flavor, its capacity and the tenants' guarantees and limits on it, each added to
    its cluster's view."""
    capacity = _flavor_capacity(views, flavors)
    quota_rows = (
        Quota.objects.filter(flavor_id__in=list(flavors), resource__startswith="nvidia.com/")
        .order_by()
        .values("flavor_id", "resource")
        .annotate(
            g=Sum("guaranteed"), lim=Sum("limit"), n=Count("quota_set__tenant", distinct=True)
        )
    )
    quotas = {(r["flavor_id"], r["resource"]): r for r in quota_rows}
    by_flavor: dict[int, FlavorCapacity] = {}
    for row in flavors.values():
        resource = _count_resource(row)
        q = quotas.get((row.pk, resource), {})
        by_flavor[row.pk] = FlavorCapacity(
            row,
            capacity.get((row.pk, resource), 0.0),
            float(q.get("g") or 0),
            float(q.get("lim") or 0),
            int(q.get("n") or 0),
        )
        views[row.cluster_id].flavors.append(by_flavor[row.pk])
    return by_flavor


def _allocation_usage(
    period: Period,
    views: dict[int, ClusterView],
    by_flavor: dict[int, FlavorCapacity],
    *,
    every_flavor: bool = True,
) -> tuple[_AllocationUsage, dict[int, str]]:
    """The period's use, allocation and utilisation per tenant on each flavor shown, and the
    slugs of those tenants; adds every GPU utilisation sample of each cluster (a tenant's or
    a GPU no tenant held; with a flavor filter, that flavor's only) to its view."""
    aggregates = _period_aggregates(
        period,
        [Metric.QUOTA_USED, Metric.GPUS_ALLOCATED, Metric.GPU_UTILIZATION],
        cluster_id__in=list(views),
    )
    tenant_ids = {t for _, t, _, _ in aggregates if t}
    slugs = dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "slug"))
    usage: _AllocationUsage = defaultdict(dict)
    for (c, t, f, metric), value in aggregates.items():
        if metric == Metric.GPU_UTILIZATION and (every_flavor or f in by_flavor):
            count, total = views[c].utilization_samples
            views[c].utilization_samples = (count + value[0], total + value[1])
        if f in by_flavor and t in slugs:
            usage[(c, t, f)][metric] = value
    return usage, slugs


def _add_usage(
    views: dict[int, ClusterView],
    by_flavor: dict[int, FlavorCapacity],
    usage: _AllocationUsage,
    slugs: dict[int, str],
) -> dict[str, dict[str, float]]:
    """Adds each allocation's mean use to the cluster's shares; returns tenant -> cluster ->
    weighted GPUs used."""
    tenant_units: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (c, t, f), metrics in usage.items():
        fc = by_flavor[f]
        used = metrics.get(Metric.QUOTA_USED)
        if used is not None:
            mean = used[1] / used[0]
            views[c].shares.setdefault(f, {})[slugs[t]] = mean
            tenant_units[slugs[t]][views[c].cluster.name] += mean * fc.weight
    return tenant_units


def _flavor_use_steps(
    period: Period, by_flavor: dict[int, FlavorCapacity]
) -> dict[int, tuple[float, float]]:
    """Flavor id -> (mean, peak) of its use (Kueue's, ``QUOTA_USED``) summed over the
    tenants at each step of the period: each step's total is the tenants' means in that
    step's bucket added up, then the mean and the highest of those totals over the steps
    with a reading. Before, the mean was the tenants' means added up while the peak was the
    highest one tenant reached alone, so two tenants at 5 and 4 GPUs read "mean 9, peak 5".
    One query, grouped in the database twice (per flavor and step, then per flavor), so the
    rows read stay one per flavor whatever the number of steps or tenants."""
    if not by_flavor:
        return {}
    resolution = (
        period.plan.resolution if period.plan.resolution != RAW else Resolution.FIVE_MINUTES
    )
    steps = (
        Rollup.objects.filter(
            resolution=resolution,
            bucket__gte=period.start,
            bucket__lt=period.end,
            metric=int(Metric.QUOTA_USED),
            flavor_id__in=list(by_flavor),
            tenant_id__gt=0,
        )
        .order_by()
        .values("flavor_id", "bucket")
        .annotate(total=Sum(F("sum") / F("samples"), output_field=FloatField()))
    )
    inner, params = steps.query.sql_with_params()
    sql = (
        "SELECT per_step.flavor_id, SUM(per_step.total), COUNT(*), MAX(per_step.total) "  # noqa: S608 - the inner query is Django's, every value a parameter
        f"FROM ({inner}) per_step GROUP BY per_step.flavor_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {
            int(flavor_id): (float(total) / count, float(peak))
            for flavor_id, total, count, peak in cursor.fetchall()
            if count
        }


def _idle_allocations(
    period: Period,
    views: dict[int, ClusterView],
    by_flavor: dict[int, FlavorCapacity],
    usage: _AllocationUsage,
    slugs: dict[int, str],
) -> list[IdleAllocation]:
    """The allocations held below ``IDLE_BELOW_PCT`` utilisation (or with none measured),
    the most idle GPU-hours first."""
    idle = []
    for (c, t, f), metrics in usage.items():
        held = metrics.get(Metric.GPUS_ALLOCATED) or metrics.get(Metric.QUOTA_USED)
        util = metrics.get(Metric.GPU_UTILIZATION)
        if held is None or held[1] <= 0:
            continue
        allocated = held[1] / held[0]
        utilization = util[1] / util[0] if util else None
        if utilization is not None and utilization >= IDLE_BELOW_PCT:
            continue
        idle_share = 1 - (utilization or 0) / 100
        idle.append(
            IdleAllocation(
                views[c].cluster.name,
                slugs[t],
                by_flavor[f].flavor.name,
                allocated,
                utilization,
                allocated * idle_share * period.hours,
            )
        )
    idle.sort(key=lambda a: (-a.idle_gpu_hours, a.cluster, a.tenant, a.flavor))
    return idle


# --- workload profile --------------------------------------------------------------------------


@dataclass
class FlavorProfile:
    cluster: str
    flavor: str
    peak_used: float | None  # GPUs, the highest step of the period
    peak_memory_mib: float | None  # on one GPU or MIG instance
    mean_utilization: float | None


@dataclass
class WorkloadProfile:
    tenant: Tenant
    period: Period
    submissions: int
    by_hour_of_week: list[list[int]]  # [weekday Mon..Sun][hour 0..23], UTC
    gpus_per_job: list[tuple[float, int]]  # (GPUs, jobs), ascending
    duration_buckets: list[tuple[str, int]]
    duration_p50_s: float | None
    duration_p95_s: float | None
    duration_max_s: float | None
    queue_wait_p50_s: float | None
    queue_wait_p95_s: float | None
    peak_concurrent_gpus: float
    mean_utilization: float | None
    peak_memory_mib: float | None
    flavors: list[FlavorProfile]

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant.slug,
            "start": self.period.start,
            "end": self.period.end,
            "submissions": self.submissions,
            "submissions_by_hour_of_week": [
                {"weekday": WEEKDAYS[d], "hour": h, "count": n}
                for d, hours in enumerate(self.by_hour_of_week)
                for h, n in enumerate(hours)
                if n
            ],
            "gpus_per_job": [{"gpus": g, "jobs": n} for g, n in self.gpus_per_job],
            "durations": {
                "buckets": [{"label": label, "jobs": n} for label, n in self.duration_buckets],
                "p50_s": self.duration_p50_s,
                "p95_s": self.duration_p95_s,
                "max_s": self.duration_max_s,
            },
            "queue_wait_p50_s": self.queue_wait_p50_s,
            "queue_wait_p95_s": self.queue_wait_p95_s,
            "peak_concurrent_gpus": self.peak_concurrent_gpus,
            "mean_gpu_utilization": self.mean_utilization,
            "peak_memory_mib": self.peak_memory_mib,
            "flavors": [f.__dict__ for f in self.flavors],
        }


def _peak_concurrent(intervals: list[tuple[datetime, datetime, float]]) -> float:
    events = sorted(
        [(s, g) for s, _, g in intervals] + [(e, -g) for _, e, g in intervals],
        key=lambda ev: (ev[0], ev[1]),  # ends before starts at the same instant
    )
    running = peak = 0.0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


def workload_profile(*, tenant: Tenant, period: Period) -> WorkloadProfile:
    """Three queries: the workloads active in the period, the period's rollups (used,
    memory, utilisation) and the flavors' names."""
    start, end = period.start, period.end
    rows = list(
        Workload.objects.filter(tenant=tenant, created_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=start))
        .values_list("created_at", "admitted_at", "finished_at", "gpus", "queue_wait_s")
    )
    hour_of_week = [[0] * 24 for _ in range(7)]
    gpus: Counter[float] = Counter()
    durations: list[float] = []
    waits: list[float] = []
    intervals: list[tuple[datetime, datetime, float]] = []
    submissions = 0
    for created, admitted, finished, job_gpus, wait in rows:
        if admitted is not None and job_gpus:
            intervals.append((max(admitted, start), min(finished or end, end), job_gpus))
        if created < start:
            continue  # running in the period, submitted before it
        submissions += 1
        when = created.astimezone(UTC)
        hour_of_week[when.weekday()][when.hour] += 1
        gpus[float(job_gpus)] += 1
        if admitted is not None and finished is not None:
            durations.append((finished - admitted).total_seconds())
        if wait is not None and admitted is not None and start <= admitted < end:
            waits.append(wait)
    buckets: Counter[str] = Counter()
    for seconds in durations:
        buckets[next(label for label, upper in DURATION_BUCKETS if seconds < upper)] += 1
    aggregates = _period_aggregates(
        period,
        [Metric.QUOTA_USED, Metric.GPU_MEMORY_USED, Metric.GPU_UTILIZATION],
        tenant_id=tenant.pk,
    )
    names = {
        f.pk: f
        for f in ResourceFlavor.objects.filter(
            pk__in={f for _, _, f, _ in aggregates}
        ).select_related("cluster")
    }
    per_flavor: dict[int, dict[int, tuple[int, float, float]]] = defaultdict(dict)
    for (_, _, f, metric), value in aggregates.items():
        if f in names:
            per_flavor[f][metric] = value
    flavors = []
    util_n, util_sum = 0, 0.0
    for f, metrics in sorted(
        per_flavor.items(), key=lambda kv: (names[kv[0]].cluster.name, names[kv[0]].name)
    ):
        used, memory, util = (
            metrics.get(m)
            for m in (Metric.QUOTA_USED, Metric.GPU_MEMORY_USED, Metric.GPU_UTILIZATION)
        )
        if util:
            util_n += util[0]
            util_sum += util[1]
        flavors.append(
            FlavorProfile(
                names[f].cluster.name,
                names[f].name,
                used[2] if used else None,
                memory[2] if memory else None,
                util[1] / util[0] if util else None,
            )
        )
    return WorkloadProfile(
        tenant=tenant,
        period=period,
        submissions=submissions,
        by_hour_of_week=hour_of_week,
        gpus_per_job=sorted(gpus.items()),
        duration_buckets=[(label, buckets[label]) for label, _ in DURATION_BUCKETS],
        duration_p50_s=usage_selectors.percentile(durations, 0.5),
        duration_p95_s=usage_selectors.percentile(durations, 0.95),
        duration_max_s=max(durations, default=None),
        queue_wait_p50_s=usage_selectors.percentile(waits, 0.5),
        queue_wait_p95_s=usage_selectors.percentile(waits, 0.95),
        peak_concurrent_gpus=_peak_concurrent(intervals),
        mean_utilization=_mean(util_sum, util_n),
        peak_memory_mib=max(
            (f.peak_memory_mib for f in flavors if f.peak_memory_mib is not None), default=None
        ),
        flavors=flavors,
    )


# --- vGPU shares ---------------------------------------------------------------------------------


def vgpu_shares(
    *, start: datetime, end: datetime, tenant_ids: Sequence[int] | None = None
) -> list[tuple[str, usage_selectors.VgpuShareUse]]:
    """(tenant slug, its share of a vGPU flavor and use of it) for the usage page and the
    showback: GPU memory in GiB and compute in percent of a GPU. Four queries."""
    uses = usage_selectors.vgpu_share_use(start=start, end=end, tenant_ids=tenant_ids)
    slugs = dict(
        Tenant.objects.filter(pk__in={u.tenant_id for u in uses}).values_list("pk", "slug")
    )
    return [(slugs[u.tenant_id], u) for u in uses if u.tenant_id in slugs]


# --- showback ----------------------------------------------------------------------------------


@dataclass
class ShowbackRow:
    tenant: str
    cluster: str
    flavor: str
    gpu_hours: float
    unit_hours: float
    price: Decimal | None  # per flavor-hour; None: no price set
    currency: str

    @property
    def cost(self) -> Decimal | None:
        if self.price is None:
            return None
        return (Decimal(repr(self.gpu_hours)) * self.price).quantize(Decimal("0.01"))


@dataclass
class Showback:
    month: date
    start: datetime
    end: datetime
    rows: list[ShowbackRow]

    def totals(self) -> list[dict[str, Any]]:
        """Per tenant and currency: GPU-hours, unit-hours and cost (unpriced rows: no cost)."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self.rows:
            key = (row.tenant, row.currency)
            total = out.setdefault(
                key,
                {"tenant": row.tenant, "currency": row.currency, "gpu_hours": 0.0,
                 "unit_hours": 0.0, "cost": Decimal("0.00")},
            )  # fmt: skip
            total["gpu_hours"] += row.gpu_hours
            total["unit_hours"] += row.unit_hours
            if row.cost is not None:
                total["cost"] += row.cost
        return [out[k] for k in sorted(out)]


def parse_month(text: str | None, *, now: datetime | None = None) -> date:
    """``YYYY-MM`` -> its first day; none: the current month. ValidationFailed otherwise."""
    now = now or timezone.now()
    if not text:
        return date(now.year, now.month, 1)
    try:  # strptime reads other scripts' digits (Arabic-Indic ones): ASCII only
        if not text.isascii():
            raise ValueError(text)
        parsed = datetime.strptime(text, "%Y-%m").date()
    except ValueError:
        raise ValidationFailed.for_field("month", "a month as YYYY-MM is required.") from None
    if not in_range(parsed):  # December 9999 has no end to sum up to
        raise ValidationFailed.for_field("month", OUT_OF_RANGE)
    return parsed


def _month_bounds(month: date) -> tuple[datetime, datetime]:
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    following = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return start, datetime(following.year, following.month, 1, tzinfo=UTC)


def prices_for(
    *, flavor_ids: Sequence[int], start: datetime, end: datetime
) -> dict[int, FlavorPrice]:
    """Per flavor the price a month is charged at: the one in force on its first day, else the
    first one set during the month. One query."""
    chosen: dict[int, FlavorPrice] = {}
    for price in FlavorPrice.objects.filter(
        flavor_id__in=list(flavor_ids), valid_from__lt=end.date()
    ).order_by("flavor_id", "valid_from"):
        if price.valid_from <= start.date() or price.flavor_id not in chosen:
            chosen[price.flavor_id] = price  # the latest one by the 1st, else the first after
    return chosen


def showback(
    *, month: date, tenant_ids: Sequence[int] | None = None, now: datetime | None = None
) -> Showback:
    """GPU-hours (hourly means summed) per tenant, cluster and flavor for ``month``, priced.
    ValidationFailed for a month after the current one or older than the hourly rollups keep.
    Four queries."""
    now = now or timezone.now()
    start, end = _month_bounds(month)
    if start > now:
        raise ValidationFailed.for_field("month", "the month has not begun yet.")
    kept = retention(Resolution.HOUR)
    if start < now - kept:
        oldest = now - kept
        first = date(oldest.year, oldest.month, 1)
        if (oldest.day, oldest.time()) != (1, time(0)):  # that month lacks its first hours
            first = date(oldest.year + oldest.month // 12, oldest.month % 12 + 1, 1)
        raise ValidationFailed.for_field(
            "month",
            f"hourly usage totals are kept for {usage_selectors.kept_words(kept)}, so the "
            f"oldest month with every hour is {first:%B %Y}.",
        )
    hours = usage_selectors.gpu_hours(start=start, end=end, tenant_ids=tenant_ids)
    slugs = dict(
        Tenant.objects.filter(pk__in={h.tenant_id for h in hours}).values_list("pk", "slug")
    )
    flavors = {
        f.pk: f
        for f in ResourceFlavor.objects.filter(pk__in={h.flavor_id for h in hours}).select_related(
            "cluster"
        )
    }
    prices = prices_for(flavor_ids=list(flavors), start=start, end=end)
    rows = []
    for h in hours:
        flavor = flavors.get(h.flavor_id)
        if flavor is None or h.tenant_id not in slugs:
            continue
        price = prices.get(flavor.pk)
        rows.append(
            ShowbackRow(
                slugs[h.tenant_id],
                flavor.cluster.name,
                flavor.name,
                h.gpu_hours,
                h.unit_hours,
                price.price if price else None,
                price.currency if price else "",
            )
        )
    rows.sort(key=lambda r: (r.tenant, r.cluster, r.flavor))
    return Showback(month, start, end, rows)


def showback_breakdown(
    *, report: Showback, tenant: Tenant, now: datetime | None = None
) -> Breakdown:
    """The tenant's month of showback shared out (``usage.breakdown``, the same hourly rollups
    as the report). Four queries."""
    return usage_breakdown(
        tenant_id=tenant.pk,
        start=report.start,
        end=report.end,
        resolution=Resolution.HOUR,
        now=now or timezone.now(),
    )


def showback_parts(
    *, report: Showback, tenant: Tenant, by: str, breakdown: Breakdown | None = None
) -> ShowbackParts:
    """The tenant's showback per person or namespace: GPU-hours per part and cost per
    currency, the cents of each (cluster, flavor) row shared out so that the parts' costs add
    up to the report's. No query given ``breakdown`` (``showback_breakdown``), else four."""
    if breakdown is None:
        breakdown = showback_breakdown(report=report, tenant=tenant)
    parts = breakdown.parts(by)
    costs: list[dict[str, Decimal]] = [defaultdict(Decimal) for _ in parts]
    rows: list[dict[str, Any]] = []
    by_place = {(r.cluster, r.flavor): r for r in report.rows if r.tenant == tenant.slug}
    for place in breakdown.places:
        info = breakdown.flavors[place]
        row = by_place.get((info.cluster, info.name))
        hours = [p.hours.get(place, 0.0) for p in parts]
        shares: list[Decimal | None] = [None] * len(parts)
        if row is not None and row.price is not None and row.cost is not None:
            exact = [Decimal(repr(h)) * row.price for h in hours]
            priced = apportion(exact, total=row.cost)
            shares = list(priced)
            for i, cents in enumerate(priced):
                costs[i][row.currency] += cents
        for part, h, share in zip(parts, hours, shares, strict=True):
            rows.append(
                {
                    by: part.key,
                    "unattributed": part.key == "",
                    "cluster": info.cluster,
                    "flavor": info.name,
                    "gpu_hours": h,
                    "unit_hours": h * info.weight,
                    "price": row.price if row else None,
                    "currency": row.currency if row else "",
                    "cost": share,
                }
            )
    table = breakdown.table(by)
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for cost in costs:
        for currency, value in cost.items():
            totals[currency] += value
    table = replace(
        table,
        rows=[
            replace(line, costs=tuple(sorted(cost.items())))
            for line, cost in zip(table.rows, costs, strict=True)
        ],
        cost_totals=tuple(sorted(totals.items())),
        priced=True,
    )
    return ShowbackParts(by, breakdown, table, rows)


@dataclass
class ShowbackParts:
    by: str
    breakdown: Breakdown
    table: BreakdownTable
    rows: list[dict[str, Any]]  # per part and (cluster, flavor): the CSV and the API


PROFILE_WORKLOADS = 50  # workloads listed one by one on the profile; the rest summed in a row


def profile_person_parse(*, tenant: Tenant, value: str | None) -> str:
    """A submitter of the tenant's workloads, or "" for everyone; another name is a 400
    naming ``person`` with the choices. One query."""
    if not value:
        return ""
    people = usage_selectors.workload_filter_choices(tenant=tenant)["person"]
    if value not in people:
        listed = ", ".join(people) or "none yet"
        raise ValidationFailed.for_field(
            "person", f"Unknown person {value!r}; choose one of: {listed}.", choices=people
        )
    return value


@dataclass(frozen=True)
class WorkloadLine:
    name: str
    namespace: str
    cluster: str
    submitter: str
    state: str
    gpu_hours: Decimal
    unit_hours: Decimal
    utilization: float | None
    workloads: int = 1  # for the row summing the rest


@dataclass(frozen=True)
class WorkloadTable:
    lines: list[WorkloadLine]
    rest: WorkloadLine | None  # the workloads past PROFILE_WORKLOADS, summed
    gpu_hours: Decimal
    unit_hours: Decimal


def workload_table(
    breakdown: Breakdown,
    workloads: Sequence[Any],
    *,
    totals: tuple[Decimal, Decimal] | None = None,
) -> WorkloadTable:
    """The profile's per-workload lines (most GPU-hours first, the first PROFILE_WORKLOADS one
    by one and the rest in one row), rounded so that they add up to their total exactly:
    ``totals`` (GPU-hours, unit-hours) as shown elsewhere on the page (a person's row), else
    their own sum rounded."""
    shown, rest = list(workloads[:PROFILE_WORKLOADS]), list(workloads[PROFILE_WORKLOADS:])
    hours = [w.gpu_hours for w in shown] + [sum(w.gpu_hours for w in rest)]
    units = [breakdown.units(w.hours) for w in shown] + [
        sum(breakdown.units(w.hours) for w in rest)
    ]
    gpu = apportion(hours, total=totals[0] if totals else None)
    unit = apportion(units, total=totals[1] if totals else None)
    clusters = {c: info.cluster for (c, _), info in breakdown.flavors.items()}
    lines = [
        WorkloadLine(
            name=w.key,
            namespace=w.namespace,
            cluster=clusters.get(w.cluster_id, ""),
            submitter=w.submitter,
            state=w.state,
            gpu_hours=gpu[i],
            unit_hours=unit[i],
            utilization=w.utilization,
        )
        for i, w in enumerate(shown)
    ]
    other = (
        WorkloadLine("", "", "", "", "", gpu[-1], unit[-1], None, workloads=len(rest))
        if rest
        else None
    )
    return WorkloadTable(lines, other, sum(gpu, Decimal(0)), sum(unit, Decimal(0)))


def person_workloads(breakdown: Breakdown, people: BreakdownTable, person: str) -> WorkloadTable:
    """The workloads of ``person`` (everyone's for ""), adding up to the person's row of
    ``people`` as shown."""
    workloads = [w for w in breakdown.workloads if not person or w.submitter == person]
    shown = next(((r.gpu_hours, r.unit_hours) for r in people.rows if r.key == person), None)
    return workload_table(breakdown, workloads, totals=shown if person else None)


def tenant_breakdown(
    *,
    tenant: Tenant,
    period: Period,
    cluster: str | None = None,
    flavor: str | None = None,
    now: datetime | None = None,
) -> Breakdown:
    """The tenant's GPU-hours over the period at its step, per person, namespace and workload
    (``usage.breakdown``), narrowed like its usage page. Five queries at most."""
    cluster_ids = flavor_ids = None
    if cluster or flavor:
        flavors = _flavor_filter(cluster, flavor)
        flavor_ids = [f.pk for f in flavors]
        cluster_ids = sorted({f.cluster_id for f in flavors})
    return usage_breakdown(
        tenant_id=tenant.pk,
        start=period.start,
        end=period.end,
        resolution=period.plan.resolution,
        now=now or timezone.now(),
        cluster_ids=cluster_ids,
        flavor_ids=flavor_ids,
    )


def month_options(*, now: datetime | None = None, count: int = 13) -> list[str]:
    """The current month and the ones before it, newest first (``YYYY-MM``)."""
    now = now or timezone.now()
    year, month = now.year, now.month
    out = []
    for _ in range(count):
        out.append(f"{year:04d}-{month:02d}")
        year, month = (year - 1, 12) if month == 1 else (year, month - 1)
    return out


# --- the admins' tenants table -----------------------------------------------------------------

# Sortable columns: (key, what a person reads). Each sorts either way ("-key": largest first).
CONSOLE_SORTS: dict[str, str] = {
    "name": "name",
    "slug": "slug",
    "department": "department",
    "guaranteed": "guaranteed GPUs",
    "limit": "limit GPUs",
    "allocated": "allocated GPUs",
    "borrowed": "borrowed GPUs",
    "lent": "lent GPUs",
    "utilization": "mean GPU utilisation",
    "pending": "pending workloads",
    "requests": "open requests",
}
# Sorted by the database (and paged there): the tenant's own columns.
CONSOLE_DB_SORTS = {"name": "display_name", "slug": "slug", "department": "department_key"}
CONSOLE_PAGE_SIZES = (25, 50, 100, 200)
# The utilisation's period: whole UTC days before today, read from the daily usage totals
# (a row a day per series, so 10,000 tenants read fast); the tenant's profile over the same
# days gives the same mean.
CONSOLE_RANGES = {"7d": 7, "30d": 30}
CONSOLE_RANGE_LABELS = {"7d": "7 days", "30d": "30 days"}
CONSOLE_PAGE_SIZE = 50
# Workloads waiting for admission: pending, or evicted and queued again.
WAITING_STATES = ("pending", "evicted")


@dataclass
class ConsoleFlavor:
    """One GPU flavor of a tenant on one cluster: amounts in GPUs (or MIG instances) of the
    flavor; ``weight`` turns them into normalised GPU units."""

    cluster: str
    flavor: str
    resource: str
    weight: float
    guaranteed: float = 0.0
    limit: float = 0.0
    lending_limit: float | None = None
    allocated: float | None = None  # Kueue's use now; None: not reported
    borrowed: float | None = None
    lent: float = 0.0


@dataclass
class ConsoleRow:
    """A tenant in the admins' table. GPU figures are normalised GPU units (a MIG instance
    counts as its share of a GPU), summed over its flavors; ``flavors`` has the breakdown."""

    pk: int
    slug: str
    name: str
    department: str  # the department's slug: its own for a department, "" for neither
    is_department: bool
    teams: int
    cohort: str
    flavors: list[ConsoleFlavor] = field(default_factory=list)
    utilization: float | None = None  # mean over the period, %
    utilization_samples: tuple[int, float] = (0, 0.0)
    pending: int = 0
    requests: int = 0

    def _units(self, name: str) -> float | None:
        values = [getattr(f, name) for f in self.flavors]
        known = [v * f.weight for v, f in zip(values, self.flavors, strict=True) if v is not None]
        return sum(known) if known else None

    @property
    def kind(self) -> str:
        if self.is_department:
            return "department"
        return "team" if self.department else "tenant"

    @property
    def guaranteed(self) -> float:
        return self._units("guaranteed") or 0.0

    @property
    def limit(self) -> float:
        return self._units("limit") or 0.0

    @property
    def allocated(self) -> float | None:
        return self._units("allocated")

    @property
    def borrowed(self) -> float | None:
        return self._units("borrowed")

    @property
    def lent(self) -> float:
        return self._units("lent") or 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "name": self.name,
            "kind": self.kind,
            "department": self.department,
            "teams": self.teams,
            "guaranteed_gpus": self.guaranteed,
            "limit_gpus": self.limit,
            "allocated_gpus": self.allocated,
            "borrowed_gpus": self.borrowed,
            "lent_gpus": self.lent,
            "gpu_utilization_pct": self.utilization,
            "pending_workloads": self.pending,
            "open_requests": self.requests,
            "flavors": [f.__dict__ for f in self.flavors],
        }


@dataclass
class ConsoleTable:
    period: Period
    rows: list[ConsoleRow]  # the page shown (every row for a download)
    count: int  # rows matching the filters
    page: int
    page_size: int
    sort: str
    totals: dict[str, float | int | None]

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.count / self.page_size))

    @property
    def period_words(self) -> str:
        """ "the 7 days from 30 Nov to 6 Dec 2026 (UTC)"."""
        days = (self.period.end - self.period.start).days
        last = self.period.end - timedelta(days=1)
        return (
            f"the {days} day{'s' if days != 1 else ''} from {self.period.start.day} "
            f"{self.period.start:%b} to {last.day} {last:%b %Y} (UTC)"
        )


def console_period(days: int, *, now: datetime | None = None) -> Period:
    """The ``days`` whole days (UTC) before today's."""
    now = now or timezone.now()
    end = datetime.combine(now.astimezone(UTC).date(), time(0), tzinfo=UTC)
    return period_resolve(start=end - timedelta(days=days), end=end, now=now)


@dataclass(frozen=True)
class ConsoleChoices:
    """What the table's filters offer: department slugs, cluster names, GPU flavor names."""

    departments: list[str]
    clusters: list[str]
    flavors: list[str]


def console_choices() -> ConsoleChoices:
    """Three queries."""
    departments = (
        Tenant.objects.filter(archived_at__isnull=True, children__isnull=False)
        .values_list("slug", flat=True)
        .distinct()
        .order_by("slug")
    )
    flavors = (
        ResourceFlavor.objects.filter(kind__in=GPU_KINDS)
        .values_list("name", flat=True)
        .distinct()
        .order_by("name")
    )
    return ConsoleChoices(
        list(departments),
        list(Cluster.objects.order_by("name").values_list("name", flat=True)),
        list(flavors),
    )


def _console_check(name: str, value: str, choices: Sequence[str], what: str) -> None:
    if value and value not in choices:
        listed = ", ".join(choices) if choices else "there are none yet"
        raise ValidationFailed.for_field(name, f"{value!r} is not one of {what}: {listed}.")


def console_tenants(
    *,
    period: Period,
    choices: ConsoleChoices,
    department: str = "",
    cluster: str = "",
    flavor: str = "",
    search: str = "",
    sort: str = "name",
    page: int = 1,
    page_size: int = CONSOLE_PAGE_SIZE,
    every_row: bool = False,
    now: datetime | None = None,
) -> ConsoleTable:
    """Every tenant that is not archived (departments and their teams alike), with its quota
    (guaranteed and limit), Kueue's use now (allocated and borrowed, as the "My tenants" cards
    read it), what it lends (below), its mean GPU utilisation over ``period`` (the rollups the
    usage pages read), its workloads waiting for admission and its open quota requests.

    ``cluster`` and ``flavor`` narrow the figures to that place (and the rows to the tenants
    holding quota there); ``department`` to a department and its teams; ``search`` matches
    the slug or the name. ``sort`` is a key of ``CONSOLE_SORTS``, "-" first for descending.
    Sorted by name, slug or department, the database sorts and pages and the figures are read
    for the page's tenants only; sorted by a figure, the figures of every matching tenant are
    read and sorted here. The totals are over every matching tenant either way. A fixed number
    of queries whatever the number of tenants. ValidationFailed (400) naming the parameter and
    its choices for a value not offered.

    Lent: per flavor, the part of the tenant's unused guarantee (up to its lending limit) that
    the tenants of its cohort on that cluster borrow now, shared pro rata among the lenders;
    Kueue reports what each team borrows, not from whom."""
    _console_check("department", department, choices.departments, "the departments")
    _console_check("cluster", cluster, choices.clusters, "the clusters")
    _console_check("flavor", flavor, choices.flavors, "the GPU flavors")
    key = sort.removeprefix("-")
    if key not in CONSOLE_SORTS:
        options = ", ".join(f"{k}, -{k}" for k in CONSOLE_SORTS)
        raise ValidationFailed.for_field("sort", f"{sort!r} is not one of {options}.")
    descending = sort.startswith("-")
    tenants = Tenant.objects.filter(archived_at__isnull=True)
    if department:
        tenants = tenants.filter(Q(slug=department) | Q(parent__slug=department))
    if search:
        tenants = tenants.filter(Q(slug__icontains=search) | Q(display_name__icontains=search))
    places = Q(kind__in=GPU_KINDS)
    if cluster:
        places &= Q(cluster__name=cluster)
    if flavor:
        places &= Q(name=flavor)
    flavor_rows = {
        pk: (cluster_id, cluster_name, name, float(weight))
        for pk, cluster_id, cluster_name, name, weight in ResourceFlavor.objects.filter(
            places
        ).values_list("pk", "cluster_id", "cluster__name", "name", "gpu_weight")
    }
    if cluster or flavor:
        tenants = tenants.filter(quota_sets__quotas__flavor_id__in=list(flavor_rows)).distinct()
    cluster_ids = sorted({c for c, _, _, _ in flavor_rows.values()})
    lines, cohorts = _console_quotas(flavor_rows)
    for (t, f), values in _console_use_now(flavor_rows, set(lines), now=now).items():
        line = lines.get((t, f))
        if line is not None:
            line.allocated = values.get(Metric.QUOTA_USED)
            line.borrowed = values.get(Metric.QUOTA_BORROWED)
    _console_lent(lines, cohorts)
    in_db = key in CONSOLE_DB_SORTS
    # Every matching tenant (id, slug): read when sorted by a figure, or narrowed by name or
    # department; else all those holding quota on the flavors shown.
    every: list[tuple[int, str]] | None = None
    if not in_db or department or search:
        every = list(tenants.order_by().values_list("pk", "slug"))
        matching = {pk for pk, _ in every}
        lines = {k: v for k, v in lines.items() if k[0] in matching}
    else:
        matching = set(cohorts)
    samples: dict[int, tuple[int, float]] = {}
    utilization = (
        Rollup.objects.filter(
            _rollup_spans(period),
            metric=int(Metric.GPU_UTILIZATION),
            tenant_id__gt=0,
            flavor_id__in=list(flavor_rows),
        )
        .order_by()
        .values("tenant_id")
        .annotate(n=Sum("samples"), total=Sum("sum"))
        .values_list("tenant_id", "n", "total")
    )  # summed per tenant by the database: 10,000 rows rather than one per series
    for t, n, total in utilization:
        if t in matching:
            samples[t] = (n, total)
    waiting = _console_counts(
        Workload.objects.filter(state__in=WAITING_STATES, cluster_id__in=cluster_ids), tenants
    )
    open_requests = _console_counts(_open_requests(cluster), tenants)
    page_size = page_size if page_size in CONSOLE_PAGE_SIZES else CONSOLE_PAGE_SIZE
    count = len(every) if every is not None else tenants.count()
    pages = max(1, math.ceil(count / page_size))
    if not every_row and not 1 <= page <= pages:
        raise ValidationFailed.for_field("page", f"pages run from 1 to {pages}.")
    window = slice(None) if every_row else slice((page - 1) * page_size, page * page_size)
    figures = _console_figures(lines, samples, waiting, open_requests)
    teams = Coalesce(
        Subquery(
            Tenant.objects.filter(parent=OuterRef("pk"), archived_at__isnull=True)
            .order_by()
            .values("parent")
            .annotate(n=Count("pk"))
            .values("n")
        ),
        0,
    )
    fields = ("pk", "slug", "display_name", "parent__slug", "cohort", "teams")
    if in_db:
        ordered = tenants.annotate(department_key=Coalesce("parent__slug", "slug")).order_by(
            f"{'-' if descending else ''}{CONSOLE_DB_SORTS[key]}", "slug"
        )
        found = list(ordered[window].annotate(teams=teams).values_list(*fields))
    else:
        assert every is not None
        order = _console_order(every, figures, key, descending)[window]
        by_pk = {
            r[0]: r
            for r in Tenant.objects.filter(pk__in=order).annotate(teams=teams).values_list(*fields)
        }
        found = [by_pk[pk] for pk in order]
    rows = [
        ConsoleRow(pk, slug, name, parent or (slug if n else ""), bool(n), n, cohort)
        for pk, slug, name, parent, cohort, n in found
    ]
    by_row = {r.pk: r for r in rows}
    for (t, _), line in lines.items():
        if t in by_row:
            by_row[t].flavors.append(line)
    for row in rows:
        row.flavors.sort(key=lambda line: (line.cluster, line.flavor))
        row.utilization_samples = samples.get(row.pk, (0, 0.0))
        n, total = row.utilization_samples
        row.utilization = total / n if n else None
        row.pending = waiting.get(row.pk, 0)
        row.requests = open_requests.get(row.pk, 0)
    totals = _console_totals(figures, samples)
    return ConsoleTable(period, rows, count, page, page_size, sort, totals)


def _console_use_now(
    flavor_rows: dict[int, tuple[int, str, str, float]],
    wanted: set[tuple[int, int]],
    *,
    now: datetime | None = None,
) -> dict[tuple[int, int], dict[int, float]]:
    """(tenant id, flavor id) -> metric -> Kueue's use and borrowing now: the latest 5-minute
    mean in the last 15 minutes of each series, as ``usage.selectors.usage_now`` (the "My
    tenants" cards) reads it, for the quota lines ``wanted``.

    The window's newest bucket is found by a backward scan of the rollups' (resolution,
    bucket) index and its readings by equality on it (no sort over every reading of the
    window). Only when a wanted series has no reading in that bucket (one not reported, or
    the bucket being written) are the window's older readings of those tenants read too, the
    newest of each series counting. One query, two in that case; on SQLite as on PostgreSQL."""
    now = now or timezone.now()
    metrics = (int(Metric.QUOTA_USED), int(Metric.QUOTA_BORROWED))
    window = Rollup.objects.filter(
        resolution=Resolution.FIVE_MINUTES,
        bucket__gte=now - timedelta(minutes=15),
        bucket__lte=now,
        metric__in=metrics,
        flavor_id__in=list(flavor_rows),
        tenant_id__gt=0,
    ).order_by()
    newest = Subquery(window.order_by("-bucket").values("bucket")[:1])
    # The newest readings carry no time (parsing 20,000 timestamps costs more than the query).
    rows: list[tuple[int, int, int, datetime | None, float, int]] = [
        (t, f, m, None, total, n)
        for t, f, m, total, n in window.filter(bucket=newest).values_list(
            "tenant_id", "flavor_id", "metric", "sum", "samples"
        )
    ]
    if rows:
        seen = {(t, f, m) for t, f, m, _, _, _ in rows}
        missing = {t for t, f in wanted for m in metrics if (t, f, m) not in seen}
        if missing:
            older = window.filter(bucket__lt=newest)
            if len(missing) <= 1000:
                older = older.filter(tenant_id__in=sorted(missing))
            fields = ("tenant_id", "flavor_id", "metric", "bucket", "sum", "samples")
            rows.extend(r for r in older.values_list(*fields) if (r[0], r[1], r[2]) not in seen)
    latest: dict[tuple[int, int, int], datetime] = {}
    out: dict[tuple[int, int], dict[int, float]] = {}
    for tenant_id, flavor_id, metric, bucket, total, samples in rows:
        key = (tenant_id, flavor_id, metric)
        if bucket is not None:  # an older reading: the newest of its series counts
            if key in latest and latest[key] >= bucket:
                continue
            latest[key] = bucket
        out.setdefault((tenant_id, flavor_id), {})[metric] = total / samples
    return out


def _console_figures(
    lines: dict[tuple[int, int], ConsoleFlavor],
    samples: dict[int, tuple[int, float]],
    waiting: dict[int, int],
    open_requests: dict[int, int],
) -> dict[str, dict[int, float]]:
    """Column -> tenant id -> its figure in GPU units (a tenant missing: none, or 0 for a
    defaultdict), to sort by and to total."""
    guaranteed: dict[int, float] = defaultdict(float)
    limit: dict[int, float] = defaultdict(float)
    lent: dict[int, float] = defaultdict(float)
    allocated: dict[int, float] = {}
    borrowed: dict[int, float] = {}
    for (t, _), line in lines.items():
        w = line.weight
        guaranteed[t] += line.guaranteed * w
        limit[t] += line.limit * w
        lent[t] += line.lent * w
        if line.allocated is not None:
            allocated[t] = allocated.get(t, 0.0) + line.allocated * w
        if line.borrowed is not None:
            borrowed[t] = borrowed.get(t, 0.0) + line.borrowed * w
    return {
        "guaranteed": guaranteed,
        "limit": limit,
        "lent": lent,
        "allocated": allocated,
        "borrowed": borrowed,
        "utilization": {t: total / n for t, (n, total) in samples.items() if n},
        "pending": defaultdict(float, waiting),
        "requests": defaultdict(float, open_requests),
    }


def _console_order(
    every: list[tuple[int, str]], figures: dict[str, dict[int, float]], key: str, descending: bool
) -> list[int]:
    """Tenant ids by ``key`` (ties by slug); those without the figure last either way."""
    values = figures[key]
    known = [(values[pk], slug, pk) for pk, slug in every if pk in values or _zero(values)]
    unknown = sorted((slug, pk) for pk, slug in every if not (pk in values or _zero(values)))
    known.sort(key=lambda v: v[1])
    known.sort(key=lambda v: v[0], reverse=descending)  # stable: ties stay by slug
    return [pk for _, _, pk in known] + [pk for _, pk in unknown]


def _zero(values: dict[int, float]) -> bool:
    """Whether a tenant missing from ``values`` counts as 0 (not as unknown)."""
    return isinstance(values, defaultdict)


def _console_quotas(
    flavor_rows: dict[int, tuple[int, str, str, float]],
) -> tuple[dict[tuple[int, int], ConsoleFlavor], dict[int, str]]:
    """(tenant id, flavor id) -> the tenant's GPU quota line on the flavors shown, for every
    tenant not archived (what it lends depends on its cohort's other tenants, whatever the
    filter), and tenant id -> its cohort. One query."""
    out: dict[tuple[int, int], ConsoleFlavor] = {}
    cohorts: dict[int, str] = {}
    rows = (
        Quota.objects.filter(
            Q(resource=GPU_RESOURCE) | Q(resource__startswith=MIG_RESOURCE_PREFIX),
            quota_set__tenant__archived_at__isnull=True,
            flavor_id__in=list(flavor_rows),
        )
        .annotate(
            g=Cast("guaranteed", FloatField()),
            lim=Cast("limit", FloatField()),
            lend=Cast("lending_limit", FloatField()),
        )
        .values_list("quota_set__tenant_id", "quota_set__tenant__cohort", "flavor_id",
                     "resource", "g", "lim", "lend")
    )  # fmt: skip
    for tenant_id, cohort, flavor_id, resource, guaranteed, limit, lending in rows:
        _, cluster_name, name, weight = flavor_rows[flavor_id]
        cohorts[tenant_id] = cohort
        line = out.get((tenant_id, flavor_id))
        if line is None:  # the usual case: one GPU resource per flavor
            out[(tenant_id, flavor_id)] = ConsoleFlavor(
                cluster_name, name, resource, weight, guaranteed, limit, lending
            )
            continue
        line.guaranteed += guaranteed
        line.limit += limit
        if lending is not None:
            line.lending_limit = (line.lending_limit or 0.0) + lending
    return out, cohorts


def _console_lent(lines: dict[tuple[int, int], ConsoleFlavor], cohorts: dict[int, str]) -> None:
    """Sets each line's ``lent``: what its cohort borrows now on the flavor, shared among the
    cohort's tenants pro rata to what each could lend (its unused guarantee, up to its lending
    limit), never more than that."""
    lendable: dict[tuple[int, int], float] = {}
    groups: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    borrowed: dict[tuple[str, int], float] = defaultdict(float)
    for (t, f), line in lines.items():
        room = max(0.0, line.guaranteed - (line.allocated or 0.0))
        if line.lending_limit is not None:
            room = min(room, line.lending_limit)
        lendable[(t, f)] = room
        groups[(cohorts.get(t, ""), f)].append((t, f))
        borrowed[(cohorts.get(t, ""), f)] += line.borrowed or 0.0
    for group, keys in groups.items():
        room = sum(lendable[k] for k in keys)
        if room <= 0 or borrowed[group] <= 0:
            continue
        share = min(1.0, borrowed[group] / room)
        for k in keys:
            lines[k].lent = lendable[k] * share


def _console_totals(
    figures: dict[str, dict[int, float]], samples: dict[int, tuple[int, float]]
) -> dict[str, float | int | None]:
    """The table's totals over every matching tenant (not only the page shown); allocated
    and borrowed none when no tenant's use is reported."""
    totals: dict[str, float | int | None] = {
        name: sum(figures[name].values()) for name in ("guaranteed", "limit", "lent")
    }
    for name in ("allocated", "borrowed"):
        totals[name] = sum(figures[name].values()) if figures[name] else None
    n = sum(count for count, _ in samples.values())
    totals["utilization"] = sum(total for _, total in samples.values()) / n if n else None
    totals["pending"] = int(sum(figures["pending"].values()))
    totals["requests"] = int(sum(figures["requests"].values()))
    return totals


def _console_counts(rows: Any, tenants: Any) -> dict[int, int]:
    """Tenant id -> how many of ``rows`` are its, for every matching tenant. One query."""
    return dict(
        rows.filter(tenant__in=tenants.values("pk"))
        .order_by()
        .values("tenant_id")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "n")
    )


def _open_requests(cluster: str) -> Any:
    from approvals.choices import OPEN_STATUSES
    from approvals.models import QuotaChangeRequest

    rows = QuotaChangeRequest.objects.filter(status__in=OPEN_STATUSES)
    return rows.filter(cluster__name=cluster) if cluster else rows


CONSOLE_PARAMS = ("range", "department", "cluster", "flavor", "q", "sort", "page", "page_size",
                  "download")  # fmt: skip


def _console_int(params: Any, name: str, default: int, choices: Sequence[int] | None) -> int:
    text = params.get(name) or ""
    if not text:
        return default
    if not (text.isascii() and text.isdigit()):
        raise ValidationFailed.for_field(name, f"{text!r} is not a whole number.")
    value = int(text)
    if choices is not None and value not in choices:
        listed = ", ".join(str(c) for c in choices)
        raise ValidationFailed.for_field(name, f"{value} is not one of {listed}.")
    return value


def console_table(
    params: Any, *, every_row: bool = False, now: datetime | None = None
) -> tuple[ConsoleTable, ConsoleChoices]:
    """The table for a page's or the API's query string (``CONSOLE_PARAMS``; ``range`` the
    utilisation's period, 24h, 7d (the default) or 30d). ValidationFailed (400) naming the
    parameter, with its choices, for anything not offered."""
    unknown = sorted(set(params) - {*CONSOLE_PARAMS, "format"})
    if unknown:
        raise ValidationFailed.for_field(
            unknown[0], f"{unknown[0]!r} is not a filter here; use {', '.join(CONSOLE_PARAMS)}."
        )
    name = params.get("range") or "7d"
    if name not in CONSOLE_RANGES:
        listed = ", ".join(CONSOLE_RANGES)
        raise ValidationFailed.for_field("range", f"{name!r} is not one of {listed}.")
    period = console_period(CONSOLE_RANGES[name], now=now)
    choices = console_choices()
    table = console_tenants(
        period=period,
        choices=choices,
        department=params.get("department") or "",
        cluster=params.get("cluster") or "",
        flavor=params.get("flavor") or "",
        search=(params.get("q") or "").strip()[:200],
        sort=params.get("sort") or "name",
        page=_console_int(params, "page", 1, None),
        page_size=_console_int(params, "page_size", CONSOLE_PAGE_SIZE, CONSOLE_PAGE_SIZES),
        every_row=every_row,
        now=now,
    )
    return table, choices


# The download's columns: a header with its unit, and the row's value.
CONSOLE_CSV: tuple[tuple[str, str], ...] = (
    ("tenant", "slug"),
    ("name", "name"),
    ("kind", "kind"),
    ("department", "department"),
    ("guaranteed (GPUs)", "guaranteed_gpus"),
    ("limit (GPUs)", "limit_gpus"),
    ("allocated now (GPUs)", "allocated_gpus"),
    ("borrowed now (GPUs)", "borrowed_gpus"),
    ("lent now (GPUs)", "lent_gpus"),
    ("mean GPU utilisation (%)", "gpu_utilization_pct"),
    ("pending workloads", "pending_workloads"),
    ("open requests", "open_requests"),
    ("flavors (GPUs allocated / guaranteed / limit)", "flavors"),
)


def console_csv_rows(table: ConsoleTable) -> list[list[Any]]:
    """The header and every row of the download, figures rounded to 2 decimals."""
    out: list[list[Any]] = [[header for header, _ in CONSOLE_CSV]]
    for row in table.rows:
        data = row.as_dict()
        data["flavors"] = "; ".join(
            f"{f.cluster}/{f.flavor}: {_num(f.allocated)} / {_num(f.guaranteed)} / {_num(f.limit)}"
            for f in row.flavors
        )
        out.append(
            [
                round(v, 2) if isinstance(v, float) else ("" if v is None else v)
                for v in (data[key] for _, key in CONSOLE_CSV)
            ]
        )
    return out


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}".rstrip("0").rstrip(".")
