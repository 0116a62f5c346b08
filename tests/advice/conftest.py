"""Usage fixtures for quota advice: daily rollups of last month and recorded workloads,
written in bulk as the usage store holds them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from advice.selectors import month_before
from quotas.models import Cluster, ResourceFlavor
from tenants.models import Tenant
from usage.choices import Metric, Resolution, WorkloadState
from usage.models import Rollup, Workload


def last_month(now: datetime | None = None) -> tuple[datetime, datetime]:
    return month_before(now or timezone.now())


def daily_rollups(
    *,
    tenant: Tenant,
    cluster: Cluster,
    flavor: ResourceFlavor,
    peaks: Sequence[float],
    utilization: float | None = None,
    memory_peak_mib: float | None = None,
    now: datetime | None = None,
) -> None:
    """One daily rollup per value of ``peaks`` from the first of last month: QUOTA_USED with
    that max (mean half of it), and GPU utilisation / memory when given."""
    start, _ = last_month(now)
    rows = []
    base = {"cluster_id": cluster.pk, "tenant_id": tenant.pk, "flavor_id": flavor.pk}
    for index, peak in enumerate(peaks):
        day = start + timedelta(days=index)
        rows.append(
            Rollup(resolution=Resolution.DAY, bucket=day, metric=Metric.QUOTA_USED, samples=288,
                   sum=288 * peak / 2, min=0, max=peak, **base)
        )  # fmt: skip
        if utilization is not None:
            rows.append(
                Rollup(resolution=Resolution.DAY, bucket=day, metric=Metric.GPU_UTILIZATION,
                       samples=100, sum=100 * utilization, min=0, max=100, **base)
            )  # fmt: skip
        if memory_peak_mib is not None:
            rows.append(
                Rollup(resolution=Resolution.DAY, bucket=day, metric=Metric.GPU_MEMORY_USED,
                       samples=100, sum=100 * memory_peak_mib / 2, min=0, max=memory_peak_mib,
                       **base)
            )  # fmt: skip
    Rollup.objects.bulk_create(rows)


def workload(
    *,
    cluster: Cluster,
    tenant: Tenant,
    name: str,
    gpus: float,
    flavor: str,
    created: datetime,
    admitted: datetime | None,
    finished: datetime | None,
    priority: int = 0,
) -> Workload:
    return Workload(
        cluster=cluster,
        tenant=tenant,
        namespace=f"{tenant.slug}-training",
        name=name,
        uid=f"uid-{name}",
        queue_name="default",
        cluster_queue=tenant.slug,
        priority=priority,
        gpus=gpus,
        flavors=[flavor],
        state=WorkloadState.FINISHED if finished else WorkloadState.ADMITTED,
        created_at=created,
        admitted_at=admitted,
        finished_at=finished,
        queue_wait_s=(admitted - created).total_seconds() if admitted else None,
        updated_at=created,
    )


def two_recorded_jobs(world: Any) -> None:
    """Two days ago, team-a ran 10 GPUs for 2 h from T; team-b 4 GPUs for 1 h from T+30 min
    (on demo-a100: team-a's big job borrows, and is preempted when team-b's arrives)."""
    t = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    Workload.objects.bulk_create(
        [
            workload(cluster=world.a100, tenant=world.team_a, name="a-big", gpus=10,
                     flavor=world.a100_gpu.name, created=t, admitted=t,
                     finished=t + timedelta(hours=2)),
            workload(cluster=world.a100, tenant=world.team_b, name="b-own", gpus=4,
                     flavor=world.a100_gpu.name, created=t + timedelta(minutes=30),
                     admitted=t + timedelta(minutes=30), finished=t + timedelta(minutes=90)),
        ]
    )  # fmt: skip
