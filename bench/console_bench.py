"""Admins' tenants table benchmark (issue 33, item 3): the server time of
``GET /api/v1/console/tenants/`` and ``/console/tenants/`` at 10,000 tenants, on PostgreSQL,
in a database of its own (``console_bench``, dropped and created, migrated; dropped at the
end), against the trivial endpoint ``GET /api/v1/me/`` in the same run, and the number of SQL
queries at 10,000 tenants against that at 100.

The data, seeded in bulk (the same code at every size): one cluster with an A100 flavor
(weight 1) and an H100 flavor (weight 2); per tenant a quota set with the A100 (every 4th
tenant the H100 too), Kueue's use and borrowing over the last 15 minutes (5-minute rollups),
GPU utilisation over the last week (hourly rollups and the days they make up, as the roll-up
writes them); every 10th tenant a department of the next 5; every 3rd tenant two pending
workloads, every 7th an open quota request. First at ``--small`` tenants (query counts), then
grown to ``--tenants``: each case requested once to warm up, then ``--requests`` times with
Django's test client in this process as a platform admin (the whole request: middleware,
view, selector, serializer or template); the median is the figure.

Figures: the table's median server time at ``--tenants`` sorted by name (paged by the
database) and by allocated GPUs (every row's figures read and sorted), the API and the page
(target: under 0.3 s); each as a ratio against ``me/``; the query counts at ``--tenants`` vs
``--small`` (target: equal).

    .venv/bin/python bench/console_bench.py [--tenants 10000] [--small 100] [--requests 10]
        [--db-name console_bench]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import benchdb  # noqa: E402 - after the path is set
from bench.figures import emit, figure  # noqa: E402

DB_NAME = "console_bench"
TARGET_S = 0.3
BASELINE = ("me (baseline)", "/api/v1/me/")
CASES = [
    ("table API, sorted by name", "/api/v1/console/tenants/?sort=name"),
    ("table API, sorted by allocated GPUs", "/api/v1/console/tenants/?sort=-allocated"),
    ("table page, sorted by name", "/console/tenants/?sort=name"),
    ("table page, sorted by utilisation", "/console/tenants/?sort=-utilization"),
]
DAYS = 8  # of hourly utilisation: the week the table reads, and the hours before it


def world_create() -> None:
    from quotas.choices import GPU_RESOURCE, FlavorKind
    from quotas.models import Cluster, FlavorResource, ResourceFlavor
    from tenants.models import User

    cluster = Cluster.objects.create(
        name="bench", elastic_cap_fraction=Decimal(1), allow_guarantee_overcommit=True
    )
    for name, weight, model in (
        ("a100-80gb", 1, "NVIDIA A100-SXM4-80GB"),
        ("h100-80gb", 2, "NVIDIA H100 80GB HBM3"),
    ):
        flavor = ResourceFlavor.objects.create(
            cluster=cluster,
            name=name,
            kind=FlavorKind.GPU,
            gpu_model=model,
            gpu_weight=Decimal(weight),
            node_labels={"accelerator": name},
        )
        FlavorResource.objects.create(flavor=flavor, resource=GPU_RESOURCE, capacity=100_000)
    User.objects.create_user("bench-admin", is_platform_admin=True)


def tenants_add(count: int) -> None:
    """``count`` more tenants (numbered after those there are) with their quota, use,
    utilisation, pending workloads and open requests, in bulk."""
    from django.utils import timezone

    from approvals.choices import RequestStatus
    from approvals.models import QuotaChangeRequest
    from quotas.choices import GPU_RESOURCE
    from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor, TierTemplate
    from tests.dashboards.data import rollups_insert
    from usage.buckets import bucket_start
    from usage.choices import Metric, Resolution, WorkloadState
    from usage.models import Workload

    now = timezone.now()
    cluster = Cluster.objects.get(name="bench")
    a100, h100 = (
        ResourceFlavor.objects.get(cluster=cluster, name=n) for n in ("a100-80gb", "h100-80gb")
    )
    by_number = benchdb.tenants_numbered(count)
    tenants = list(by_number.values())
    tier = TierTemplate.objects.get(name="small")
    quota_sets = QuotaSet.objects.bulk_create(
        QuotaSet(tenant=t, cluster=cluster, tier=tier) for t in tenants
    )
    places = {t.pk: [a100, h100] if i % 4 == 0 else [a100] for i, t in by_number.items()}
    Quota.objects.bulk_create(
        Quota(quota_set=qs, flavor=f, resource=GPU_RESOURCE, guaranteed=4, limit=8)
        for qs in quota_sets
        for f in places[qs.tenant_id]
    )
    five = bucket_start(now, Resolution.FIVE_MINUTES)
    hour = bucket_start(now, Resolution.HOUR)
    hours = [hour - timedelta(hours=h) for h in range(1, DAYS * 24 + 1)]
    days: dict[Any, int] = {}
    for b in hours:
        day = bucket_start(b, Resolution.DAY)
        days[day] = days.get(day, 0) + 1
    rows: list[tuple] = []
    for i, t in by_number.items():
        for f in places[t.pk]:
            used, util = 1 + i % 5, 20 + i % 70
            for m in range(3):
                bucket = five - timedelta(minutes=5 * m)
                for metric, value in ((Metric.QUOTA_USED, used), (Metric.QUOTA_BORROWED, i % 2)):
                    rows.append(
                        (
                            int(Resolution.FIVE_MINUTES),
                            bucket,
                            int(metric),
                            cluster.pk,
                            t.pk,
                            f.pk,
                            5,
                            value * 5,
                            value,
                            value,
                        )
                    )
            key = (int(Metric.GPU_UTILIZATION), cluster.pk, t.pk, f.pk)
            rows.extend((int(Resolution.HOUR), b, *key, 12, util * 12, util, util) for b in hours)
            rows.extend(
                (int(Resolution.DAY), d, *key, 12 * n, util * 12 * n, util, util)
                for d, n in days.items()
            )
    rollups_insert(rows)
    Workload.objects.bulk_create(
        Workload(
            cluster=cluster,
            tenant=t,
            namespace=f"{t.slug}-training",
            name=f"job-{k}",
            uid=f"{t.slug}-{k}",
            gpus=1,
            state=WorkloadState.PENDING,
            created_at=now - timedelta(minutes=30),
            updated_at=now,
        )
        for i, t in by_number.items()
        if i % 3 == 0
        for k in range(2)
    )
    QuotaChangeRequest.objects.bulk_create(
        QuotaChangeRequest(tenant=t, cluster=cluster, reason="more", status=RequestStatus.PENDING)
        for i, t in by_number.items()
        if i % 7 == 0
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument(
        "--db-name", default=DB_NAME, help="the database it creates and drops (default %(default)s)"
    )
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--requests", type=int, default=10)
    args = parser.parse_args(argv)
    figures: list[dict[str, Any]] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        benchdb.setup(args.database_url, args.db_name, tmp)
        try:
            benchdb.django_setup()
            from django.conf import settings
            from django.db import connection
            from django.test import Client, override_settings

            from tenants.models import User

            storages = {
                **settings.STORAGES,
                "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
            }
            with override_settings(STORAGES=storages):
                world_create()
                tenants_add(args.small)
                client = Client()
                client.force_login(User.objects.get(username="bench-admin"))
                small = {url: benchdb.time_get(client, url, 1)[1] for _, url in CASES}
                began = time.perf_counter()
                tenants_add(args.tenants - args.small)
                with connection.cursor() as cursor:
                    cursor.execute("ANALYZE")
                print(f"{args.tenants} tenants seeded in {time.perf_counter() - began:.0f} s")
                base_s, _ = benchdb.time_get(client, BASELINE[1], args.requests)
                print(f"{BASELINE[0]}: {base_s * 1000:.1f} ms")
                for name, url in CASES:
                    seconds, queries = benchdb.time_get(client, url, args.requests)
                    print(
                        f"{name}: {seconds * 1000:.0f} ms, {queries} queries "
                        f"({small[url]} at {args.small} tenants)"
                    )
                    figures.append(
                        figure(
                            f"admins' {name}, {args.tenants} tenants: server time",
                            round(seconds, 4),
                            "s",
                            target=TARGET_S,
                            better="lower",
                        )
                    )
                    figures.append(
                        figure(
                            f"admins' {name}, {args.tenants} tenants, vs me/",
                            round(seconds, 4),
                            "s",
                            baseline=round(base_s, 4),
                            better="lower",
                        )
                    )
                    figures.append(
                        figure(
                            f"admins' {name}: queries at {args.tenants} vs {args.small} tenants",
                            queries,
                            "queries",
                            baseline=small[url],
                            target=1,
                            better="lower",
                        )
                    )
                    if seconds >= TARGET_S:
                        failures.append(f"{name}: {seconds * 1000:.0f} ms")
                    if queries != small[url]:
                        failures.append(f"{name}: {queries} queries, {small[url]} at {args.small}")
        finally:
            benchdb.teardown(args.database_url, args.db_name)
    emit("console", figures)
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
