"""A simulated month of usage for the demo (``manage.py demo``): samples every 10 minutes for
each tenant's GPU quotas (used with a daily rhythm, borrowing above the guarantee, pods'
GPUs, utilisation, pending workloads) and Kueue workload lifecycles admitted under the quotas (the caller's
admission model), from a fixed seed,
written through ``samples_write`` and rolled up. team-a's A100 use climbs past 80% of its
limit in the last days (the warning alert has something to find); team-b's GPUs on the first
cluster show no activity for the last four days (the idle rule has something to find).
Idempotent: a store that already has workloads is left alone.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from django.utils import timezone

from quotas.choices import is_gpu_resource
from quotas.models import Cluster, Quota
from usage import services
from usage.choices import Metric, Source, WorkloadState
from usage.models import Workload

STEP = timedelta(minutes=10)
DAYS = 30
SEED = 20261203
IDLE_TAIL = timedelta(days=4, hours=2)  # team-b's quiet end on the first cluster


def _load(rng: random.Random, t: datetime, now: datetime, *, limit: float, share: float,
          rising: bool) -> float:  # fmt: skip
    """GPUs in use at ``t``: a working-day rhythm around ``share`` of the limit, noise, and
    for a rising tenant a climb to ~90% of the limit over the last week, kept under 95% (the
    demo starts with a warning, not with new work held at 100%)."""
    hour = t.hour + t.minute / 60
    daily = 0.55 + 0.45 * math.sin((hour - 8) / 24 * 2 * math.pi)
    weekday = 1.0 if t.weekday() < 5 else 0.6
    level = share * daily * weekday
    top = 1.0
    if rising:
        days_left = (now - t).total_seconds() / 86400
        if days_left < 7:
            level = max(level, 0.85 - days_left * 0.02 + 0.05 * daily)
            top = 0.95
    value = limit * level + rng.gauss(0, limit * 0.03)
    return round(min(max(value, 0.0), limit * top), 2)


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
        for q in Quota.objects.select_related("quota_set__tenant", "quota_set__cluster", "flavor")
        if is_gpu_resource(q.resource) and q.limit > 0
    ]
    rows: list[services.SampleRow] = []
    steps = int((now - start) / STEP)
    first_cluster = min((q.quota_set.cluster.name for q in quotas), default="")
    for q in quotas:
        tenant, cluster, flavor = q.quota_set.tenant, q.quota_set.cluster, q.flavor
        guaranteed, limit = float(q.guaranteed), float(q.limit)
        rising = tenant.slug == "team-a" and flavor.kind == "gpu"
        # team-b's GPUs on the first cluster go quiet for the last days: the idle notebook
        # devcluster.kueue_sim keeps there is what holds them.
        idle = tenant.slug == "team-b" and flavor.kind == "gpu" and cluster.name == first_cluster
        share = 0.55 if tenant.slug == "team-a" else 0.4
        base = (cluster.pk, tenant.pk, flavor.pk, None, None, None, None)
        for i in range(steps):
            t = start + i * STEP
            used = _load(rng, t, now, limit=limit, share=share, rising=rising)
            util = min(100.0, max(0.0, 30 + 50 * used / limit + rng.gauss(0, 8))) if used else 0.0
            if idle and now - t < IDLE_TAIL:
                util = 0.0
            rows.extend(
                (t, metric, value, *base)
                for metric, value in (
                    (Metric.QUOTA_GUARANTEED, guaranteed),
                    (Metric.QUOTA_LIMIT, limit),
                    (Metric.QUOTA_USED, used),
                    (Metric.QUOTA_BORROWED, max(used - guaranteed, 0.0)),
                    (Metric.GPUS_ALLOCATED, float(round(used))),
                    (Metric.GPU_UTILIZATION, round(util, 1)),
                )
            )
    written = services.samples_write(rows=rows, source=Source.DEMO)
    _workloads(rng, quotas, start, now, admit)
    services.rollups_run_all(now=now)
    services.retention_enforce(now=now)
    return written


# A demo job as its admission sees it: id, tenant slug, flavor name, GPUs, and its creation
# and run time in seconds from the start of the month.
DemoJob = tuple[str, str, str, float, float, float]
# When each job is first admitted (seconds from the start) on a cluster, under its quotas;
# jobs never admitted before the horizon are left out. The portal's demo command passes
# ``advice.selectors.admission_times`` (the what-if's admission model).
Admission = Callable[[Cluster, list[DemoJob], float], Mapping[str, float]]


def _workloads(
    rng: random.Random, quotas: list[Quota], start: datetime, now: datetime, admit: Admission
) -> None:
    """About 10 jobs a day per tenant and flavor (16 for team-a in its busy last week) of
    1-8 GPUs for 20 minutes to 4 hours, admitted under the quotas (``admit``): queue waits
    come from the load, as Kueue's would, so replaying the month against the same quotas
    (the what-if) reproduces them. A few evictions and preemptions are marked at random."""
    planned: dict[Cluster, list[tuple[DemoJob, Workload]]] = defaultdict(list)
    for q in quotas:
        tenant, cluster = q.quota_set.tenant, q.quota_set.cluster
        namespace = f"{tenant.slug}-training"
        sizes = [g for g in (1, 1, 2, 2, 4, 8) if g <= q.limit] or [1]  # jobs that fit
        for day in range(DAYS):
            busy = tenant.slug == "team-a" and DAYS - day <= 7
            for j in range(rng.randint(12, 20) if busy else rng.randint(6, 14)):
                created = start + timedelta(days=day, minutes=rng.randint(0, 24 * 60 - 1))
                if created >= now:
                    continue
                run = timedelta(minutes=rng.randint(20, 4 * 60))
                evictions = 1 if rng.random() < 0.06 else 0
                preemptions = evictions if rng.random() < 0.7 else 0
                uid = f"demo-{cluster.name}-{q.flavor.pk}-{tenant.slug}-{day}-{j}"
                gpus = float(rng.choice(sizes))
                job = (uid, tenant.slug, q.flavor.name, gpus,
                       (created - start).total_seconds(), run.total_seconds())  # fmt: skip
                planned[cluster].append(
                    (
                        job,
                        Workload(
                            cluster=cluster,
                            tenant=tenant,
                            namespace=namespace,
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
                        ),
                    )
                )
    objects = []
    horizon = (now - start).total_seconds()
    for cluster, pairs in planned.items():
        admitted = admit(cluster, [job for job, _ in pairs], horizon)
        for job, workload in pairs:
            if job[0] in admitted:
                workload.admitted_at = start + timedelta(seconds=admitted[job[0]])
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
            objects.append(workload)
    Workload.objects.bulk_create(objects, batch_size=1000)
