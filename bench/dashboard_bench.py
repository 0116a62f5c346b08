"""Dashboards benchmark (issue 6, "Speed" (b) and (c) for the pages), on PostgreSQL, in a
database of its own (``dash_bench``, dropped and created, migrated; dropped at the end).

The world: 2 clusters with 4 GPU flavors, ``--tenants`` (200) tenants each with a quota set,
50 GPU nodes of 8 GPUs, and ``--small`` (1,000,000) raw samples over 30 days through the
project's ingest path (``samples_write``, ``COPY``), rolled up. Then, with Django's test client
in this process (the whole page: view, selectors, charts, template):

- the tenant dashboard's 30-day page (``/tenants/{slug}/usage/?range=30d``, hourly steps) on
  random tenants, and its CSV;
- the admin dashboard (``/usage/?range=30d``: every tenant's share of every flavor, guarantees
  vs capacity, the 400-GPU heatmap, idle allocations);

median times of ``--pages`` requests each, and the queries per page. Then ``--big`` - ``--small``
more raw samples (10,000,000 in all), rolled up, and the same again: the ratios big / small are
the figures (target <= 2 each: the pages read rollups, never raw samples for long ranges).

    .venv/bin/python bench/dashboard_bench.py [--small 1000000] [--big 10000000] [--tenants 200]

``DASH_BENCH_SLOWEST=5`` prints each page's five slowest queries (the last request of each).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import benchdb  # noqa: E402 - after the path is set
from bench.figures import emit, figure  # noqa: E402

DB_NAME = os.environ.get("DASH_BENCH_DB", "dash_bench")  # its own database
FLAVORS = 4
NODES, GPUS_PER_NODE = 50, 8


def setup(database_url: str, tmp: str) -> None:
    benchdb.setup(database_url, DB_NAME, tmp)
    # Production static files (the manifest the pages' {% static %} reads), plotly.js included.
    benchdb.manage("collectstatic")
    benchdb.django_setup()


def seed(tenants: int) -> tuple[Any, list[str], list[tuple[int, int]]]:
    """Clusters, flavors with capacity, tenants with quotas, GPU nodes. Returns the admin,
    the tenant slugs and (cluster id, flavor id) pairs."""
    from decimal import Decimal

    from django.utils import timezone

    from gpu_agent.models import Gpu, Node
    from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor
    from tenants.models import Tenant, User

    clusters = [Cluster.objects.create(name=f"bench-{i}") for i in (1, 2)]
    flavors = []
    for i in range(FLAVORS):
        cluster = clusters[i % 2]
        flavor = ResourceFlavor.objects.create(
            cluster=cluster, name=f"gpu-{i}", kind="gpu", gpu_model="NVIDIA H100 80GB HBM3",
            gpu_weight=Decimal(1 + i % 2),
        )  # fmt: skip
        FlavorResource.objects.create(
            flavor=flavor, resource="nvidia.com/gpu", capacity=Decimal(tenants * 4)
        )
        flavors.append(flavor)
    rows = Tenant.objects.bulk_create(
        [Tenant(slug=f"team-{i:04d}", display_name=f"Team {i}") for i in range(1, tenants + 1)]
    )
    quota_sets = QuotaSet.objects.bulk_create(
        [QuotaSet(tenant=t, cluster=c) for t in rows for c in clusters]
    )
    Quota.objects.bulk_create(
        [
            Quota(quota_set=qs, flavor=f, resource="nvidia.com/gpu", guaranteed=Decimal(2),
                  limit=Decimal(4))
            for qs in quota_sets
            for f in flavors
            if f.cluster_id == qs.cluster_id
        ]
    )  # fmt: skip
    now = timezone.now()
    nodes = Node.objects.bulk_create(
        [
            Node(name=f"node-{i:03d}", cluster=clusters[i % 2], last_report_at=now)
            for i in range(NODES)
        ]
    )
    Gpu.objects.bulk_create(
        [
            Gpu(node=n, uuid=f"GPU-{n.pk:04d}-{g}", index=g, name="NVIDIA H100 80GB HBM3",
                memory_total_mib=81559, utilization_pct=(n.pk * 7 + g * 13) % 100, last_seen_at=now)
            for n in nodes
            for g in range(GPUS_PER_NODE)
        ]
    )  # fmt: skip
    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    return admin, [t.slug for t in rows], [(f.cluster_id, f.pk) for f in flavors]


def fill(total: int, *, start: datetime, tenant_ids: list[int], flavors: list[tuple[int, int]],
         seed_value: int, chunk: int = 500_000) -> float:  # fmt: skip
    """About ``total`` raw samples over 30 days from ``start`` through the ingest path, as
    agents and the collector send them: every series (a tenant on its flavor, six metrics)
    sampled at a regular interval, so more samples mean denser series, not more series."""
    from usage import services
    from usage.choices import Metric

    metrics = [int(m) for m in (Metric.QUOTA_USED, Metric.QUOTA_BORROWED, Metric.GPU_UTILIZATION,
                                Metric.GPUS_ALLOCATED, Metric.QUOTA_GUARANTEED, Metric.QUOTA_LIMIT)]  # fmt: skip
    series = [(t, *flavors[i % len(flavors)], m) for i, t in enumerate(tenant_ids) for m in metrics]
    rounds = max(1, total // len(series))
    interval = timedelta(days=30) / rounds
    rng = random.Random(seed_value)
    began = time.perf_counter()
    rows: list[Any] = []
    for k in range(rounds):
        when = start + interval * k
        for tenant_id, cluster_id, flavor_id, metric in series:
            high = 100 if metric == Metric.GPU_UTILIZATION else 8
            rows.append((when, metric, float(rng.randint(0, high)), cluster_id, tenant_id,
                         flavor_id, None, None, None, None))  # fmt: skip
        if len(rows) >= chunk:
            services.samples_write(rows=rows)
            rows = []
    services.samples_write(rows=rows)
    return time.perf_counter() - began


SLOWEST = int(os.environ.get("DASH_BENCH_SLOWEST", "0"))  # print a page's N slowest queries


def _print_slowest(url: str, captured: list[dict[str, str]]) -> None:
    ranked = sorted(captured, key=lambda q: -float(q["time"]))[:SLOWEST]
    print(f"  slowest queries of {url}:")
    for q in ranked:
        print(f"    {float(q['time']) * 1000:7.1f} ms  {q['sql'][:300]}")


def time_pages(client: Any, urls: list[str], count: int) -> tuple[float, int]:
    """Median seconds of ``count`` requests (after 2 warm-ups) and the most queries one made."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times, queries = [], 0
    for i in range(count + 2):
        url = urls[i % len(urls)]
        with CaptureQueriesContext(connection) as captured:
            began = time.perf_counter()
            response = client.get(url)
            elapsed = time.perf_counter() - began
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        if i >= 2:
            times.append(elapsed)
            queries = max(queries, len(captured.captured_queries))
        if SLOWEST and i == count + 1:
            _print_slowest(url, captured.captured_queries)
    return statistics.median(times), queries


PROFILE = int(os.environ.get("DASH_BENCH_PROFILE", "0"))  # print each page's N costliest calls


def _profile(client: Any, url: str) -> None:
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    client.get(url)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(PROFILE)
    print(f"  profile of {url}:\n{out.getvalue()}")


def measure(admin: Any, slugs: list[str], pages: int) -> dict[str, Any]:
    from django.test import Client

    client = Client()
    client.force_login(admin)
    rng = random.Random(3)
    picked = [rng.choice(slugs) for _ in range(pages + 2)]
    if PROFILE:
        _profile(client, f"/tenants/{picked[0]}/usage/?range=30d")
        _profile(client, "/usage/?range=30d")
    tenant_s, tenant_q = time_pages(
        client, [f"/tenants/{s}/usage/?range=30d" for s in picked], pages
    )
    csv_s, _ = time_pages(
        client, [f"/tenants/{s}/usage/?range=30d&download=csv" for s in picked], max(3, pages // 2)
    )
    admin_s, admin_q = time_pages(client, ["/usage/?range=30d"], max(3, pages // 3))
    return {"tenant_ms": tenant_s * 1000, "tenant_queries": tenant_q, "csv_ms": csv_s * 1000,
            "admin_ms": admin_s * 1000, "admin_queries": admin_q}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--pages", type=int, default=10)
    args = parser.parse_args(argv)
    failures: list[str] = []
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        setup(args.database_url, tmp)
        try:
            from tenants.models import Tenant
            from usage import services

            admin, slugs, flavors = seed(args.tenants)
            tenant_ids = list(Tenant.objects.values_list("pk", flat=True))
            now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            start = now - timedelta(days=30)
            results = []
            written = 0
            for total, seed_value in ((args.small, 10), (args.big, 99)):
                fill_s = fill(total - written, start=start + timedelta(seconds=seed_value),
                              tenant_ids=tenant_ids, flavors=flavors, seed_value=seed_value)  # fmt: skip
                written = total
                began = time.perf_counter()
                services.rollups_run_all()
                roll_s = time.perf_counter() - began
                result = measure(admin, slugs, args.pages) | {"raw": total}
                results.append(result)
                print(f"{total:>12,} raw samples (fill {fill_s:.0f} s, rollups {roll_s:.0f} s): "
                      f"tenant 30-day page {result['tenant_ms']:.0f} ms ({result['tenant_queries']} "
                      f"queries), its CSV {result['csv_ms']:.0f} ms, admin page with "
                      f"{args.tenants} tenants {result['admin_ms']:.0f} ms "
                      f"({result['admin_queries']} queries)", flush=True)  # fmt: skip
            small, big = results
            for key, name in (("tenant_ms", "tenant dashboard 30-day page"),
                              ("admin_ms", f"admin dashboard, {args.tenants} tenants, 30 days")):  # fmt: skip
                ratio = big[key] / small[key]
                print(f"{name}: {small[key]:.0f} ms at {small['raw']:,}, {big[key]:.0f} ms at "
                      f"{big['raw']:,} raw samples: ratio {ratio:.2f} (target <= 2)")  # fmt: skip
                figures.append(
                    figure(
                        f"{name}, ms at {big['raw']:,} vs {small['raw']:,} raw samples",
                        round(big[key], 1),
                        "ms",
                        baseline=round(small[key], 1),
                        target=2,
                        better="lower",
                    )
                )
                if ratio > 2:
                    failures.append(f"{name}: ratio {ratio:.2f} above 2")
            if small["tenant_queries"] != big["tenant_queries"]:
                failures.append("the tenant page's query count grew with the data")
            if small["admin_queries"] != big["admin_queries"]:
                failures.append("the admin page's query count grew with the data")
        finally:
            benchdb.teardown(args.database_url, DB_NAME)
    emit("dashboard", figures)
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
