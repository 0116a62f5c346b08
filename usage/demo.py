"""A simulated month of usage for the demo (``manage.py demo``): Kueue workload lifecycles
admitted under the tenants' GPU quotas (the caller's admission model), and samples every 10
minutes for each tenant's GPU quotas derived from them: the GPUs in use at each step are those
of the workloads running then, so no step exceeds a tenant's limit or the cluster's quota, and
the workload profile's peak concurrency, the usage pages and the fleet's use read one history.
Utilisation follows the load (``gpu_spec.demo_load``, whose plan gives the demo's simulated GPUs
the level each tenant's last week had: ``tenant_recent_utilisation``). From a fixed seed,
written through ``samples_write`` and rolled up. team-a's A100 work grows in the last week and
its use climbs past 80% of its limit (the warning alert has something to find); team-b's GPUs
on the first cluster show no activity for the last four days (the idle rule has something to
find). Departments (tenants with no namespace of their own: a pool and a cap for their teams)
run nothing themselves.
Idempotent: a store that already has workloads is left alone.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from django.db.models import Max, Sum
from django.utils import timezone

from gpu_spec import demo_load
from quotas.choices import GPUCORES_RESOURCE, GPUMEM_RESOURCE, FlavorKind, is_gpu_resource
from quotas.models import Cluster, Quota
from quotas.vgpu import MIB
from tenants.models import Membership, Namespace
from usage import services
from usage.choices import Metric, Resolution, Source, WorkloadState
from usage.models import Rollup, Workload

STEP = timedelta(minutes=10)
DAYS = 30
SEED = 20261203
IDLE_TAIL = timedelta(days=4, hours=2)  # team-b's quiet end on the first cluster
BUSY_DAYS = 7  # team-a's busy last week


def _steps_running(
    intervals: list[tuple[datetime, datetime, float]], start: datetime, steps: int
) -> list[float]:
    """GPUs running at each step ``start + i * STEP`` (a workload runs at t when admitted <= t
    < finished), by a sweep over the steps where workloads start and end."""
    delta = [0.0] * (steps + 1)
    for admitted, finished, gpus in intervals:
        first = max(math.ceil((admitted - start) / STEP), 0)
        stop = min(math.ceil((finished - start) / STEP), steps)
        if first < stop:
            delta[first] += gpus
            delta[stop] -= gpus
    running, out = 0.0, []
    for i in range(steps):
        running += delta[i]
        out.append(round(running, 3))
    return out


def demo_month_fill(*, admit: Admission, now: datetime | None = None, seed: int = SEED) -> int:
    """Fill the month, the workloads admitted by ``admit``; returns the samples written (0
    when already filled)."""
    if Workload.objects.exists():
        return 0
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    rng = random.Random(seed)  # noqa: S311 - simulated demo data, not secrets
    start = now - timedelta(days=DAYS)
    quotas = [
        q
        for q in Quota.objects.select_related(
            "quota_set__tenant", "quota_set__cluster", "flavor"
        ).order_by("quota_set__cluster__name", "quota_set__tenant__slug", "flavor__name")
        if is_gpu_resource(q.resource)
        and q.flavor.kind != FlavorKind.VGPU  # their use is HAMi's figures (_vgpu_rows)
        and q.limit > 0
        and q.quota_set.tenant.namespaces.exists()  # a department runs nothing itself
    ]
    workloads = _workloads(rng, quotas, start, now, admit)
    running: dict[tuple[int, int, int], list[tuple[datetime, datetime, float]]] = defaultdict(list)
    for flavor_id, w in workloads:
        if w.admitted_at is not None and w.tenant_id is not None:
            key = (w.cluster_id, w.tenant_id, flavor_id)
            running[key].append((w.admitted_at, w.finished_at or now, w.gpus))
    rows: list[services.SampleRow] = []
    steps = int((now - start) / STEP)
    first_cluster = min((q.quota_set.cluster.name for q in quotas), default="")
    for q in quotas:
        tenant, cluster, flavor = q.quota_set.tenant, q.quota_set.cluster, q.flavor
        guaranteed, limit = float(q.guaranteed), float(q.limit)
        # team-b's GPUs on the first cluster go quiet for the last days: the idle notebook
        # devcluster.kueue_sim keeps there is what holds them.
        idle = tenant.slug == "team-b" and flavor.kind == "gpu" and cluster.name == first_cluster
        base = (cluster.pk, tenant.pk, flavor.pk, None, None, None, None)
        used_at = _steps_running(running[(cluster.pk, tenant.pk, flavor.pk)], start, steps)
        for i, used in enumerate(used_at):
            t = start + i * STEP
            level = demo_load.utilisation_level(used / limit)
            util = min(100.0, max(0.0, level + rng.gauss(0, 8))) if used else 0.0
            if idle and now - t < IDLE_TAIL:
                util = 0.0
            metrics = [
                (Metric.QUOTA_GUARANTEED, guaranteed),
                (Metric.QUOTA_LIMIT, limit),
                (Metric.QUOTA_USED, used),
                (Metric.QUOTA_BORROWED, max(used - guaranteed, 0.0)),
                (Metric.GPUS_ALLOCATED, float(round(used))),
            ]
            # Utilisation is read off the GPUs a tenant's pods hold (DCGM): with none held
            # there is nothing to read, and writing 0 would drag the month's mean down to
            # a figure no GPU showed (the advice's low-utilisation rule reads that mean).
            if used or (idle and now - t < IDLE_TAIL):
                metrics.append((Metric.GPU_UTILIZATION, round(util, 1)))
            rows.extend((t, metric, value, *base) for metric, value in metrics)
    rows.extend(_vgpu_rows(rng, start, steps, running))
    written = services.samples_write(rows=rows, source=Source.DEMO)
    Workload.objects.bulk_create([w for _, w in workloads], batch_size=1000)
    services.rollups_run_all(now=now)
    services.retention_enforce(now=now)
    return written


# The memory-heavy lab of the demo's shared T4 (the source's example: about 30% of its compute
# share in use, its GPU memory share nearly full): what the memory-first suggestion is for.
MEMORY_HEAVY = "lab-nlp"


def _vgpu_rows(
    rng: random.Random,
    start: datetime,
    steps: int,
    running: Mapping[tuple[int, int, int], list[tuple[datetime, datetime, float]]],
) -> list[services.SampleRow]:
    """GPU memory and compute its containers use of each tenant's vGPU shares (HAMi's
    per-container figures, summed), at each step where its vGPU work runs: memory in MiB up to
    its ``nvidia.com/gpumem`` limit, compute in percent points up to its ``nvidia.com/gpucores``
    limit (HAMi-core caps both in the container)."""
    shares: dict[tuple[int, int, int], dict[str, Quota]] = defaultdict(dict)
    for q in Quota.objects.filter(
        flavor__kind=FlavorKind.VGPU, resource__in=[GPUMEM_RESOURCE, GPUCORES_RESOURCE]
    ).select_related("quota_set__tenant", "quota_set__cluster", "flavor"):
        if q.limit > 0 and q.quota_set.tenant.namespaces.exists():
            key = (q.quota_set.cluster_id, q.quota_set.tenant_id, q.flavor_id)
            shares[key][q.resource] = q
    rows: list[services.SampleRow] = []
    for key in sorted(shares):
        memory, cores = shares[key].get(GPUMEM_RESOURCE), shares[key].get(GPUCORES_RESOURCE)
        if memory is None or cores is None:
            continue
        heavy = memory.quota_set.tenant.slug == MEMORY_HEAVY
        memory_mib, cores_pct = float(memory.limit) / MIB, float(cores.limit)
        intervals = running.get(key, [])
        busy = _steps_running(intervals, start, steps) if intervals else [1.0] * steps
        cluster_id, tenant_id, flavor_id = key
        base = (cluster_id, tenant_id, flavor_id, None, None, None, None)
        for i, used in enumerate(busy):
            if not used:
                continue
            t = start + i * STEP
            memory_share = (0.9 if heavy else 0.55) + rng.gauss(0, 0.04)
            cores_share = (0.3 if heavy else 0.6) + rng.gauss(0, 0.08)
            mib = round(memory_mib * min(1.0, max(0.05, memory_share)), 1)
            pct = round(cores_pct * min(1.0, max(0.0, cores_share)), 1)
            rows.append((t, Metric.VGPU_MEMORY_USED, mib, *base))
            rows.append((t, Metric.VGPU_CORES_USED, pct, *base))
    return rows


def tenant_recent_utilisation(
    *, cluster_id: int, tenant_id: int, flavor_id: int, days: int = BUSY_DAYS
) -> float | None:
    """The mean GPU utilisation (%) of the tenant's GPUs of ``flavor`` on the cluster over the
    last ``days`` of its simulated month (hourly rollups, samples weighted), as its usage page
    reads it; None where it ran nothing there. For the demo's load plan, which gives the
    simulated GPUs the same level (``gpu_spec.demo_load``)."""
    series = Rollup.objects.filter(
        resolution=Resolution.HOUR,
        metric=Metric.GPU_UTILIZATION,
        source=Source.DEMO,
        cluster_id=cluster_id,
        tenant_id=tenant_id,
        flavor_id=flavor_id,
    )
    last = series.aggregate(last=Max("bucket"))["last"]
    if last is None:
        return None
    totals = series.filter(bucket__gt=last - timedelta(days=days)).aggregate(
        total=Sum("sum"), samples=Sum("samples")
    )
    if not totals["samples"]:
        return None
    return float(totals["total"]) / int(totals["samples"])


# A demo job as its admission sees it: id, tenant slug, flavor name, GPUs, and its creation
# and run time in seconds from the start of the month.
DemoJob = tuple[str, str, str, float, float, float]
# When each job is first admitted (seconds from the start) on a cluster, under its quotas;
# jobs never admitted before the horizon are left out. The portal's demo command passes
# ``advice.selectors.admission_times`` (the what-if's admission model).
Admission = Callable[[Cluster, list[DemoJob], float], Mapping[str, float | None]]


def _people(tenant_ids: set[int]) -> dict[int, list[str]]:
    """Each tenant's leads and members (who submit jobs), by username."""
    out: dict[int, list[str]] = defaultdict(list)
    for tenant_id, username in (
        Membership.objects.filter(tenant_id__in=tenant_ids, role__in=["lead", "member"])
        .order_by("user__username")
        .values_list("tenant_id", "user__username")
    ):
        out[tenant_id].append(username)
    return dict(out)


def _namespaces(tenant_ids: set[int]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = defaultdict(set)
    for tenant_id, name in Namespace.objects.filter(tenant_id__in=tenant_ids).values_list(
        "tenant_id", "name"
    ):
        out[tenant_id].add(name)
    return dict(out)


def _workloads(
    rng: random.Random, quotas: list[Quota], start: datetime, now: datetime, admit: Admission
) -> list[tuple[int, Workload]]:
    """About 10 jobs a day per tenant and flavor of 1-8 GPUs for 20 minutes to 4 hours (for
    team-a in its busy last week about 24 a day of 1 to 8 hours), admitted under the quotas (``admit``): queue waits
    come from the load, as Kueue's would, so replaying the month against the same quotas
    (the what-if) reproduces them. A few evictions and preemptions are marked at random."""
    planned: dict[Cluster, list[tuple[DemoJob, Workload]]] = defaultdict(list)
    flavor_of: dict[str, int] = {}
    people = _people({q.quota_set.tenant_id for q in quotas})
    namespaces = _namespaces({q.quota_set.tenant_id for q in quotas})
    for q in quotas:
        tenant, cluster = q.quota_set.tenant, q.quota_set.cluster
        training = f"{tenant.slug}-training"
        # Every fourth job runs in the tenant's inference namespace, where it has one (so the
        # usage pages have namespaces to tell apart; the rng's draws stay as they were).
        inference = f"{tenant.slug}-inference"
        if inference not in namespaces.get(tenant.pk, ()):
            inference = training
        # Who submitted each job: the team's people in turn (the rng's draws stay as they were).
        submitters = people.get(tenant.pk) or [f"{tenant.slug}-workloads"]
        # Jobs that fit; the big ones (8 GPUs) come with team-a's busy week.
        sizes = [g for g in (1, 1, 2, 2, 4) if g <= q.limit] or [1]
        busy_sizes = [g for g in (1, 2, 4, 8) if g <= q.limit] or [1]
        for day in range(DAYS):
            busy = tenant.slug == "team-a" and DAYS - day <= BUSY_DAYS
            # team-a's quieter weeks before it stay clear of its limit.
            calm = rng.randint(4, 8) if tenant.slug == "team-a" else rng.randint(6, 14)
            for j in range(rng.randint(20, 28) if busy else calm):
                created = start + timedelta(days=day, minutes=rng.randint(0, 24 * 60 - 1))
                if created >= now:
                    continue
                run = timedelta(minutes=rng.randint(60 if busy else 20, (8 if busy else 4) * 60))
                evictions = 1 if rng.random() < 0.06 else 0
                preemptions = evictions if rng.random() < 0.7 else 0
                uid = f"demo-{cluster.name}-{q.flavor.pk}-{tenant.slug}-{day}-{j}"
                flavor_of[uid] = q.flavor.pk
                gpus = float(rng.choice(busy_sizes if busy else sizes))
                job = (uid, tenant.slug, q.flavor.name, gpus,
                       (created - start).total_seconds(), run.total_seconds())  # fmt: skip
                planned[cluster].append(
                    (
                        job,
                        Workload(
                            cluster=cluster,
                            tenant=tenant,
                            namespace=inference if (day + j) % 4 == 3 else training,
                            name=f"job-{q.flavor.name}-{day:02d}-{j:02d}",
                            uid=uid,
                            queue_name="default",
                            cluster_queue=tenant.slug,
                            gpus=gpus,
                            flavors=[q.flavor.name],
                            state=WorkloadState.PENDING,
                            created_at=created,
                            evictions=evictions,
                            preemptions=preemptions,
                            updated_at=now,
                            job_kind="Job",
                            job_name=f"{q.flavor.name}-{day:02d}-{j:02d}",
                            submitter=submitters[(day + j) % len(submitters)],
                            submitter_source="annotation"
                            if tenant.pk in people
                            else "service-account",
                            resources=[
                                {"flavor": q.flavor.name, "resource": q.resource, "amount": gpus}
                            ],
                        ),
                    )
                )
    objects = []
    horizon = (now - start).total_seconds()
    for cluster, pairs in planned.items():
        admitted = admit(cluster, [job for job, _ in pairs], horizon)
        for job, workload in pairs:
            if job[0] not in admitted:
                continue  # the admission model would preempt it: left out of the history
            when = admitted[job[0]]
            if when is not None:
                workload.admitted_at = start + timedelta(seconds=when)
                workload.queue_wait_s = (workload.admitted_at - workload.created_at).total_seconds()
                run = timedelta(seconds=job[5])
                if workload.admitted_at + run < now:
                    workload.finished_at = workload.admitted_at + run
                workload.state = (
                    WorkloadState.FINISHED if workload.finished_at else WorkloadState.ADMITTED
                )
                if workload.evictions:
                    workload.evicted_at = workload.admitted_at + run / 2
            else:
                workload.evictions = workload.preemptions = 0
            objects.append((flavor_of[job[0]], workload))
    return objects
