"""Who used what: a tenant's GPU use over a period broken down per person, per namespace and
per workload, with the same totals as the tenant's own figure.

The tenant's figure is what its pages already show: GPU-hours from Kueue's quota use of the
tenant (``Metric.QUOTA_USED``, the rollups), each bucket's mean times its length, summed (for
a month at the hourly resolution: showback's figure). Kueue does not say which workload held
what, so each bucket is shared out among the workloads that held quota in it (their admitted
GPUs of the bucket's flavor times the part of the bucket they ran in, from the ``Workload``
rows the collector keeps): where they claim no more than the tenant used, each gets its claim
and the rest is *unattributed*; where they claim more (the collector saw a workload late, or
it was evicted between readings), the claims are scaled down to what was used. So every
bucket's parts add up to the tenant's figure for it, and so do the period's: per person, per
namespace and per workload, each with an explicit unattributed remainder (key ``""``).
A person is the workload's submitter (``Workload.submitter``: the portal's admission policy's
annotation, else the pods' service account); a workload without one is unattributed among
people but still counted under its namespace.

Utilisation, where the node agents report it, is the mean of each hour's busiest GPU of the
workload (``WorkloadActivity``), weighted by GPU-hours.

Set-based reads that run on SQLite and PostgreSQL alike: four queries whatever the number of
workloads, buckets or flavors; the sharing out is done in Python over the rows read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from django.db.models import Avg, Count, Q, Subquery

from core.errors import ValidationFailed
from quotas.choices import is_gpu_resource
from quotas.models import ResourceFlavor
from usage.buckets import bucket_start
from usage.choices import RAW, Metric, Resolution, WorkloadState
from usage.models import Rollup, Workload, WorkloadActivity

UNATTRIBUTED = ""
WORKLOAD_FIELDS = ("pk", "cluster_id", "uid", "namespace", "name", "submitter", "job_kind",
                   "state", "admitted_at", "finished_at", "evicted_at", "resources", "flavors",
                   "gpus")  # fmt: skip
BREAKDOWN_BY = ("person", "namespace")
# (cluster id, flavor id)
Place = tuple[int, int]


@dataclass
class Part:
    """One person's, namespace's or workload's share: GPU-hours per (cluster, flavor)."""

    key: str  # username, namespace or workload name; "" for the unattributed remainder
    hours: dict[Place, float] = field(default_factory=lambda: defaultdict(float))
    # GPU-hours weighted utilisation: (sum of utilisation x GPU-hours, GPU-hours with a reading)
    utilization_weighted: float = 0.0
    utilization_hours: float = 0.0
    workloads: int = 0

    @property
    def gpu_hours(self) -> float:
        return sum(self.hours.values())

    @property
    def utilization(self) -> float | None:
        if not self.utilization_hours:
            return None
        return self.utilization_weighted / self.utilization_hours


@dataclass
class WorkloadPart(Part):
    workload_id: int = 0
    cluster_id: int = 0
    namespace: str = ""
    submitter: str = ""
    job_kind: str = ""
    state: str = ""
    admitted_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class FlavorInfo:
    cluster: str
    name: str
    weight: float


@dataclass
class Breakdown:
    """A tenant's GPU-hours over ``start``..``end`` and its parts. Every mapping of parts sums,
    per (cluster, flavor), to ``total`` (within float rounding)."""

    start: datetime
    end: datetime
    resolution: int
    total: dict[Place, float]
    people: dict[str, Part]
    namespaces: dict[str, Part]
    workloads: list[WorkloadPart]
    flavors: dict[Place, FlavorInfo]

    @property
    def places(self) -> list[Place]:
        """The (cluster, flavor) pairs with use, ordered by cluster and flavor name."""
        return sorted(
            (p for p, hours in self.total.items() if hours > 0),
            key=lambda p: (self.flavors[p].cluster, self.flavors[p].name),
        )

    @property
    def gpu_hours(self) -> float:
        return sum(self.total.values())

    @property
    def unit_hours(self) -> float:
        return self.units(self.total)

    def units(self, hours: Mapping[Place, float]) -> float:
        return sum(h * self.flavors[p].weight for p, h in hours.items() if p in self.flavors)

    def parts(self, by: str) -> list[Part]:
        """People or namespaces, most GPU-hours first, the unattributed remainder last (always
        present, 0 when everything is attributed, so the rows visibly add up)."""
        source = self.people if by == "person" else self.namespaces
        named = sorted(
            (p for k, p in source.items() if k != UNATTRIBUTED),
            key=lambda p: (-p.gpu_hours, p.key),
        )
        return [*named, source.get(UNATTRIBUTED) or Part(UNATTRIBUTED)]

    def rows(self, by: str) -> list[dict[str, Any]]:
        """One row per part and (cluster, flavor) with use: what the API and CSV give."""
        out = []
        for part in self.parts(by):
            for place in self.places:
                hours = part.hours.get(place, 0.0)
                info = self.flavors[place]
                out.append(
                    {
                        by: part.key,
                        "unattributed": part.key == UNATTRIBUTED,
                        "cluster": info.cluster,
                        "flavor": info.name,
                        "gpu_hours": hours,
                        "unit_hours": hours * info.weight,
                    }
                )
        return out

    def total_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "cluster": self.flavors[p].cluster,
                "flavor": self.flavors[p].name,
                "gpu_hours": self.total[p],
                "unit_hours": self.total[p] * self.flavors[p].weight,
            }
            for p in self.places
        ]

    def table(self, by: str, places: int = 2) -> BreakdownTable:
        """The page's table: rounded so that the shown parts add up to the shown total exactly
        (largest remainder, column by column)."""
        parts = self.parts(by)
        columns = self.places
        cells: list[list[Decimal]] = [[] for _ in parts]
        for place in columns:
            shares = apportion([p.hours.get(place, 0.0) for p in parts], places=places)
            for row, value in zip(cells, shares, strict=True):
                row.append(value)
        gpu = apportion([p.gpu_hours for p in parts], places=places)
        units = apportion([self.units(p.hours) for p in parts], places=places)
        total = sum(gpu, Decimal(0))
        rows = [
            BreakdownRow(
                key=p.key,
                cells=cells[i],
                gpu_hours=gpu[i],
                unit_hours=units[i],
                share=(p.gpu_hours / self.gpu_hours) if self.gpu_hours else None,
                utilization=p.utilization,
                workloads=p.workloads,
            )
            for i, p in enumerate(parts)
        ]
        column_totals = [sum((r.cells[j] for r in rows), Decimal(0)) for j in range(len(columns))]
        return BreakdownTable(
            by=by,
            columns=[self.flavors[p] for p in columns],
            rows=rows,
            column_totals=column_totals,
            gpu_hours=total,
            unit_hours=sum(units, Decimal(0)),
        )


@dataclass(frozen=True)
class BreakdownRow:
    key: str
    cells: list[Decimal]
    gpu_hours: Decimal
    unit_hours: Decimal
    share: float | None
    utilization: float | None
    workloads: int
    costs: tuple[tuple[str, Decimal], ...] = ()  # (currency, cost), on showback


@dataclass(frozen=True)
class BreakdownTable:
    by: str
    columns: list[FlavorInfo]
    rows: list[BreakdownRow]
    column_totals: list[Decimal]
    gpu_hours: Decimal
    unit_hours: Decimal
    cost_totals: tuple[tuple[str, Decimal], ...] = ()
    priced: bool = False


def apportion(
    values: Sequence[float | Decimal], *, places: int = 2, total: Decimal | None = None
) -> list[Decimal]:
    """``values`` rounded to ``places`` decimals so that they add up to ``total`` (by default
    their own sum rounded the same way), by largest remainder: a table whose rows add up to
    its total to the last digit."""
    quantum = Decimal(1).scaleb(-places)
    exact = [v if isinstance(v, Decimal) else Decimal(repr(max(v, 0.0))) for v in values]
    target = (sum(exact, Decimal(0)) if total is None else total).quantize(quantum)
    floors = [v.quantize(quantum, rounding=ROUND_FLOOR) for v in exact]
    missing = int((target - sum(floors, Decimal(0))) / quantum)
    order = sorted(range(len(values)), key=lambda i: (floors[i] - exact[i], i))
    for i in order[: max(missing, 0)]:
        floors[i] += quantum
    # A given total below the parts' floors (float noise): taken from the largest parts.
    for i in sorted(range(len(values)), key=lambda i: -floors[i])[: max(-missing, 0)]:
        floors[i] -= quantum
    return floors


def breakdown_by_parse(value: str | None, *, name: str = "by") -> str:
    """``person`` or ``namespace``; anything else is a 400 naming the field with the choices."""
    value = value or "person"
    if value not in BREAKDOWN_BY:
        raise ValidationFailed.for_field(
            name,
            f"Unknown breakdown {name}={value!r}; choose one of: {', '.join(BREAKDOWN_BY)}.",
            choices=list(BREAKDOWN_BY),
        )
    return value


def _held_until(w: Mapping[str, Any], now: datetime) -> datetime | None:
    """When a workload stopped holding quota: finished, evicted and not admitted again, or
    still holding now."""
    if w["finished_at"] is not None:
        return min(w["finished_at"], now)
    if w["state"] == WorkloadState.ADMITTED:
        return now
    evicted = w["evicted_at"]
    if evicted is not None and evicted > w["admitted_at"]:
        return evicted
    return None


def _held(w: Mapping[str, Any], flavor_ids: Mapping[tuple[int, str], int]) -> dict[int, float]:
    """GPUs (or MIG instances) a workload holds per flavor id: its admitted GPU lines, else
    (an older row without them) its GPUs on its only flavor."""
    out: dict[int, float] = defaultdict(float)
    for line in w["resources"] or []:
        flavor_id = flavor_ids.get((w["cluster_id"], str(line.get("flavor") or "")))
        if flavor_id is not None and is_gpu_resource(str(line.get("resource") or "")):
            try:
                out[flavor_id] += max(float(line.get("amount") or 0), 0.0)
            except (TypeError, ValueError):
                continue
    if not out and w["gpus"] and len(w["flavors"] or []) == 1:
        flavor_id = flavor_ids.get((w["cluster_id"], str(w["flavors"][0])))
        if flavor_id is not None:
            out[flavor_id] = float(w["gpus"])
    return dict(out)


def usage_breakdown(
    *,
    tenant_id: int,
    start: datetime,
    end: datetime,
    resolution: int,
    now: datetime,
    cluster_ids: Sequence[int] | None = None,
    flavor_ids: Sequence[int] | None = None,
) -> Breakdown:
    """The tenant's GPU-hours over [start, end) at ``resolution`` (RAW reads the 5-minute
    rollups), per (cluster, flavor), shared out per person, namespace and workload. Four
    queries."""
    if resolution == RAW:
        resolution = Resolution.FIVE_MINUTES
    width = timedelta(seconds=resolution)
    bucket_hours = resolution / 3600
    rollups = Rollup.objects.filter(
        resolution=resolution,
        metric=Metric.QUOTA_USED,
        tenant_id=tenant_id,
        bucket__gte=start,
        bucket__lt=end,
    )
    if cluster_ids is not None:
        rollups = rollups.filter(cluster_id__in=list(cluster_ids))
    if flavor_ids is not None:
        rollups = rollups.filter(flavor_id__in=list(flavor_ids))
    used: dict[tuple[int, int, datetime], float] = {}
    total: dict[Place, float] = defaultdict(float)
    for cluster_id, flavor_id, bucket, samples, value in rollups.values_list(
        "cluster_id", "flavor_id", "bucket", "samples", "sum"
    ):
        hours = max(value / samples, 0.0) * bucket_hours
        used[(cluster_id, flavor_id, bucket)] = hours
        total[(cluster_id, flavor_id)] += hours

    # Those that may have held quota in the range: finished in it, or not finished and either
    # admitted now or evicted in it (an older eviction held nothing since).
    workloads = Workload.objects.filter(
        Q(finished_at__gt=start)
        | Q(finished_at__isnull=True, state=WorkloadState.ADMITTED)
        | Q(finished_at__isnull=True, evicted_at__gt=start),
        tenant_id=tenant_id,
        admitted_at__isnull=False,
        admitted_at__lt=end,
    )
    if cluster_ids is not None:
        workloads = workloads.filter(cluster_id__in=list(cluster_ids))
    rows = list(workloads.order_by("pk").values(*WORKLOAD_FIELDS))
    flavor_rows = ResourceFlavor.objects.filter(
        Q(pk__in={f for _, f in total}) | Q(cluster_id__in={w["cluster_id"] for w in rows})
    ).select_related("cluster")
    flavors = {
        (f.cluster_id, f.pk): FlavorInfo(f.cluster.name, f.name, float(f.gpu_weight))
        for f in flavor_rows
    }
    for place in total:  # a flavor since removed: still counted, by its id
        flavors.setdefault(place, FlavorInfo(str(place[0]), f"flavor {place[1]}", 1.0))
    flavor_by_name = {(c, info.name): f for (c, f), info in flavors.items()}
    activity = {
        (c, uid): (float(mean or 0), n)
        for c, uid, mean, n in WorkloadActivity.objects.filter(
            bucket__gte=bucket_start(start, Resolution.HOUR),
            bucket__lt=end,
            workload_uid__in=Subquery(workloads.values("uid")),
        )
        .order_by()
        .values("cluster_id", "workload_uid")
        .annotate(mean=Avg("peak_utilization"), n=Count("pk"))
        .values_list("cluster_id", "workload_uid", "mean", "n")
    }

    # Each workload's claim on each bucket it held quota in.
    claims: dict[tuple[int, int, datetime], list[tuple[int, float]]] = defaultdict(list)
    for index, w in enumerate(rows):
        until = _held_until(w, now)
        if until is None:
            continue
        begin, finish = max(w["admitted_at"], start), min(until, end)
        if begin >= finish:
            continue
        for flavor_id, gpus in _held(w, flavor_by_name).items():
            if flavor_ids is not None and flavor_id not in flavor_ids:
                continue
            bucket = bucket_start(begin, resolution)
            while bucket < finish:
                overlap = min(finish, bucket + width) - max(begin, bucket)
                claims[(w["cluster_id"], flavor_id, bucket)].append(
                    (index, gpus * overlap.total_seconds() / 3600)
                )
                bucket += width

    held: list[dict[Place, float]] = [defaultdict(float) for _ in rows]
    unattributed: dict[Place, float] = defaultdict(float)
    for key, hours in used.items():
        wanted = claims.get(key, [])
        claimed = sum(c for _, c in wanted)
        scale = min(1.0, hours / claimed) if claimed > 0 else 0.0
        for index, claim in wanted:
            held[index][key[:2]] += claim * scale
        unattributed[key[:2]] += max(hours - claimed * scale, 0.0)

    people: dict[str, Part] = {}
    namespaces: dict[str, Part] = {}
    parts: list[WorkloadPart] = []
    for index, w in enumerate(rows):
        if not held[index]:
            continue
        part = WorkloadPart(
            key=w["name"],
            workload_id=w["pk"],
            cluster_id=w["cluster_id"],
            namespace=w["namespace"],
            submitter=w["submitter"],
            job_kind=w["job_kind"],
            state=w["state"],
            admitted_at=w["admitted_at"],
            finished_at=w["finished_at"],
            workloads=1,
        )
        part.hours.update(held[index])
        reading = activity.get((w["cluster_id"], w["uid"]))
        if reading is not None:
            part.utilization_weighted = reading[0] * part.gpu_hours
            part.utilization_hours = part.gpu_hours
        parts.append(part)
        for group, key in ((people, w["submitter"]), (namespaces, w["namespace"])):
            _add(group.setdefault(key, Part(key)), part)
    for group in (people, namespaces):
        rest = group.setdefault(UNATTRIBUTED, Part(UNATTRIBUTED))
        for place, hours in unattributed.items():
            rest.hours[place] += hours
    parts.sort(key=lambda p: (-p.gpu_hours, p.key, p.workload_id))
    return Breakdown(
        start=start,
        end=end,
        resolution=resolution,
        total=dict(total),
        people=people,
        namespaces=namespaces,
        workloads=parts,
        flavors=flavors,
    )


def _add(into: Part, part: Part) -> None:
    for place, hours in part.hours.items():
        into.hours[place] += hours
    into.utilization_weighted += part.utilization_weighted
    into.utilization_hours += part.utilization_hours
    into.workloads += part.workloads
