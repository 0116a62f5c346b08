"""Usage data for the dashboards, written in bulk as the rollups would hold it.

On ``world`` (tests/conftest.py), over the last 30 days, hourly (and for the last day also
5-minute) rollups:

- team-a on demo-a100 (a100-80gb, weight 1): 8 GPUs used (peak 9), 6 guaranteed, 10 limit,
  2 borrowed, 8 allocated, 50 % utilisation, 60,000 MiB peak memory;
- team-a on demo-h100 (h100-80gb, weight 2): 2 used, 4 guaranteed, 6 limit, 80 %;
- team-b on demo-a100: 3 used and allocated, 4 guaranteed, 6 limit, 10 % (an idle allocation).

So over any range team-a's mean utilisation is (50 + 80) / 2 = 65 %, its borrowing ratio
2 / (8 + 2 x 2) = 1/6, its peak use 8 + 2 x 2 = 12 units. Workloads: team-a's five (queue
waits 60, 120, 180, 240 and 600 s; 1 eviction, 2 preemptions), submitted on known hours.
One node on demo-h100 with a whole GPU (35 % now) and a MIG GPU holding a 3g.40gb and a
1g.10gb (free slices 4, 5 and 7 of 8; the largest profile that still fits: 2g.20gb).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from gpu_agent.models import Gpu, MigInstance, Node
from tests.conftest import World
from usage import services as usage_services
from usage.choices import Metric, Resolution, WorkloadState
from usage.models import Rollup, Workload

M = Metric
SERIES = {
    # (tenant, flavor attr on World): {metric: (avg, max)}
    ("team_a", "a100_gpu"): {
        M.QUOTA_USED: (8, 9), M.QUOTA_GUARANTEED: (6, 6), M.QUOTA_LIMIT: (10, 10),
        M.QUOTA_BORROWED: (2, 3), M.GPUS_ALLOCATED: (8, 9), M.GPU_UTILIZATION: (50, 90),
        M.GPU_MEMORY_USED: (40_000, 60_000),
    },
    ("team_a", "h100_gpu"): {
        M.QUOTA_USED: (2, 2), M.QUOTA_GUARANTEED: (4, 4), M.QUOTA_LIMIT: (6, 6),
        M.QUOTA_BORROWED: (0, 0), M.GPUS_ALLOCATED: (2, 2), M.GPU_UTILIZATION: (80, 95),
        M.GPU_MEMORY_USED: (20_000, 30_000),
    },
    ("team_b", "a100_gpu"): {
        M.QUOTA_USED: (3, 3), M.QUOTA_GUARANTEED: (4, 4), M.QUOTA_LIMIT: (6, 6),
        M.QUOTA_BORROWED: (0, 0), M.GPUS_ALLOCATED: (3, 3), M.GPU_UTILIZATION: (10, 20),
        M.GPU_MEMORY_USED: (5_000, 6_000),
    },
}  # fmt: skip
WAITS = [60, 120, 180, 240, 600]
MIG_UUID = "GPU-00000000-0000-0000-0000-00000000a001"
WHOLE_UUID = "GPU-00000000-0000-0000-0000-00000000a000"


@dataclass
class UsageData:
    world: World
    now: datetime
    workloads: list[Workload]


ROLLUP_COLUMNS = (
    "resolution", "bucket", "metric", "cluster_id", "tenant_id", "flavor_id", "samples", "sum",
    "min", "max",
)  # fmt: skip


def rollup_values(
    world: World, *, now: datetime, days: int = 30, series: dict | None = None
) -> list[tuple]:
    """The rollup rows of ``series`` (default ``SERIES``), as tuples in ``ROLLUP_COLUMNS``
    order: hourly over ``days``, the days those hours make up, and 5-minute for the last day."""
    hour = usage_services.bucket_start(now, Resolution.HOUR)
    five = usage_services.bucket_start(now, Resolution.FIVE_MINUTES)
    rows: list[tuple] = []
    for (tenant_attr, flavor_attr), metrics in (series or SERIES).items():
        tenant, flavor = getattr(world, tenant_attr), getattr(world, flavor_attr)
        for metric, (avg, peak) in metrics.items():
            key = (int(metric), flavor.cluster_id, tenant.pk, flavor.pk)
            hours = [hour - timedelta(hours=h) for h in range(1, days * 24 + 1)]
            rows.extend((int(Resolution.HOUR), b, *key, 12, avg * 12, avg, peak) for b in hours)
            # The days those hours make up, as the roll-up writes them (count, sum, max).
            by_day: dict[datetime, int] = defaultdict(int)
            for b in hours:
                by_day[usage_services.bucket_start(b, Resolution.DAY)] += 1
            for day, count in by_day.items():
                rows.append(
                    (int(Resolution.DAY), day, *key, 12 * count, avg * 12 * count, avg, peak)
                )
            for m in range(1, 24 * 12 + 1):
                rows.append(
                    (int(Resolution.FIVE_MINUTES), five - timedelta(minutes=5 * m), *key, 5,
                     avg * 5, avg, peak)
                )  # fmt: skip
    return rows


def rollups_insert(rows: list[tuple]) -> None:
    """Store ``rollup_values`` rows as ``Rollup.objects.bulk_create`` would (``source`` left to
    its database default), but fast: one ``COPY`` on PostgreSQL, one prepared INSERT run for
    every row (``executemany``) elsewhere. ``bulk_create`` spends ~6 s on a month of rows
    (model instances, ~5000-row statements parsed again and again), which every dashboard test
    paid in its setup."""
    columns = ", ".join(ROLLUP_COLUMNS)
    table = Rollup._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        adapt = functools.lru_cache(maxsize=None)(connection.ops.adapt_datetimefield_value)
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(ROLLUP_COLUMNS))})",  # noqa: S608 - constant SQL; every value is a parameter
            [(row[0], adapt(row[1]), *row[2:]) for row in rows],
        )


def write_usage_data(world: World) -> UsageData:
    now = timezone.now()
    rollups_insert(rollup_values(world, now=now))
    workloads = []
    for i, wait in enumerate(WAITS):
        created = now - timedelta(days=1, hours=i)
        workloads.append(
            Workload(
                cluster=world.a100, tenant=world.team_a, namespace="team-a-training",
                name=f"job-{i}", uid=f"uid-{i}", gpus=[1, 2, 2, 4, 8][i], flavors=["a100-80gb"],
                state=WorkloadState.FINISHED, created_at=created,
                admitted_at=created + timedelta(seconds=wait),
                finished_at=created + timedelta(seconds=wait) + timedelta(hours=2),
                queue_wait_s=wait, evictions=1 if i == 0 else 0, preemptions=2 if i == 1 else 0,
                updated_at=now,
            )
        )  # fmt: skip
    Workload.objects.bulk_create(workloads)
    node = Node.objects.create(name="gpu-node-1", cluster=world.h100, last_report_at=now)
    Gpu.objects.create(
        node=node, uuid=WHOLE_UUID, index=0, name="NVIDIA H100 80GB HBM3",
        memory_total_mib=81559, utilization_pct=20, last_seen_at=now,
    )  # fmt: skip
    mig = Gpu.objects.create(
        node=node, uuid=MIG_UUID, index=1, name="NVIDIA H100 80GB HBM3",
        memory_total_mib=81559, mig_mode_current=True, last_seen_at=now,
    )  # fmt: skip
    MigInstance.objects.create(
        gpu=mig, gi_id=1, profile="3g.40gb", start=0, size=4, busy=True, tenant=world.team_a,
        observed_at=now,
    )  # fmt: skip
    MigInstance.objects.create(
        gpu=mig, gi_id=2, profile="1g.10gb", start=6, size=1, observed_at=now
    )
    # The whole GPU's recent utilisation comes from raw samples (35 %), not the agent's 20 %.
    usage_services.samples_write(
        rows=[
            (now - timedelta(minutes=m), int(Metric.GPU_UTILIZATION), float(v), world.h100.pk,
             world.team_a.pk, world.h100_gpu.pk, node.pk, WHOLE_UUID, None, None)
            for m, v in ((1, 30), (2, 40))
        ]
    )  # fmt: skip
    return UsageData(world, now, workloads)
