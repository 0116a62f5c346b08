"""Dashboards benchmark (issue 6, "Speed" (b) and (c) for the pages; issue 19, item 3: flat in
data size), on PostgreSQL, in two databases of its own (``dash_bench_small`` and
``dash_bench_big``, dropped and created, migrated; dropped at the end).

The world, the same in both: 2 clusters with 4 GPU flavors, ``--tenants`` (200) tenants each
with a quota set, 50 GPU nodes of 8 GPUs. Then raw samples over 30 days through the project's
ingest path (``samples_write``, ``COPY``), rolled up by the project's rollups: ``--small``
(1,000,000) in one database, ``--big`` (10,000,000) in the other; the same series (a tenant on
its flavor, six metrics), sampled 10 times as densely in the big one. Then, with Django's test
client in this process (the whole page: view, selectors, charts, template), in ``--rounds``
(4) rounds alternating between the two databases (so a change in the machine's load hits both
alike):

- the tenant dashboard's 30-day page (``/tenants/{slug}/usage/?range=30d``, hourly steps) on
  random tenants, and its CSV;
- the admin dashboard (``/usage/?range=30d``: every tenant's share of every flavor, guarantees
  vs capacity, the 400-GPU heatmap, idle allocations);

the median wall-clock time of every request of a page over all rounds (and the CPU time of
this process: the Python side), and the queries per page. The figures: big / small for each
page, target <= 1.3 (the pages read rollups, a bounded number of points, never raw samples for
long ranges); the query counts must not grow.

    .venv/bin/python bench/dashboard_bench.py [--small 1000000] [--big 10000000] [--tenants 200]

``DASH_BENCH_DB`` names the databases' prefix (``dash_bench``); ``DASH_BENCH_SLOWEST=5`` prints
each page's five slowest queries (the last request of each); ``DASH_BENCH_PROFILE=25`` prints
the 25 costliest calls of each page's first request.
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


TARGET = 1.3  # the big database's page time / the small one's


def setup(database_url: str, tmp: str, name: str) -> None:
    benchdb.setup(database_url, name, tmp)
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


def time_pages(client: Any, urls: list[str], count: int) -> tuple[list[float], list[float], int]:
    """Seconds of ``count`` requests (after 2 warm-ups): wall clock, and CPU of this process
    (view, selectors, charts, template: the Python side; the database's work is in the wall
    clock only); and the most queries one made."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times, cpus, queries = [], [], 0
    for i in range(count + 2):
        url = urls[i % len(urls)]
        with CaptureQueriesContext(connection) as captured:
            cpu, began = time.process_time(), time.perf_counter()
            response = client.get(url)
            elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
        if i >= 2:
            times.append(elapsed)
            cpus.append(cpu)
            queries = max(queries, len(captured.captured_queries))
        if SLOWEST and i == count + 1:
            _print_slowest(url, captured.captured_queries)
    return times, cpus, queries


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


def measure(client: Any, slugs: list[str], pages: int, round_: int) -> dict[str, Any]:
    """One round on the database in use: the tenant page on random tenants, its CSV, the
    admin page. Lists of seconds (wall and CPU) and the most queries per page."""
    rng = random.Random(round_)
    picked = [rng.choice(slugs) for _ in range(pages + 2)]
    if PROFILE and round_ == 0:
        _profile(client, f"/tenants/{picked[0]}/usage/?range=30d")
        _profile(client, "/usage/?range=30d")
    out: dict[str, Any] = {}
    for key, urls, count in (
        ("tenant", [f"/tenants/{s}/usage/?range=30d" for s in picked], pages),
        ("csv", [f"/tenants/{s}/usage/?range=30d&download=csv" for s in picked], max(3, pages // 2)),
        ("admin", ["/usage/?range=30d"], max(3, pages // 3)),
    ):  # fmt: skip
        out[f"{key}_s"], out[f"{key}_cpu_s"], out[f"{key}_queries"] = time_pages(
            client, urls, count
        )
    return out


def use(name: str) -> None:
    """Point this process's default database at ``name`` (one of the bench's two)."""
    from django.db import connections

    connections["default"].close()
    connections["default"].settings_dict["NAME"] = name


def build(
    name: str, total: int, tenants: int, seed_value: int, start: datetime
) -> tuple[Any, list[str]]:
    """The world and ``total`` raw samples in database ``name``, rolled up; a logged-in client
    (its session lives in that database) and the tenant slugs."""
    from django.db import connection
    from django.test import Client

    from tenants.models import Tenant
    from usage import services

    use(name)
    admin, slugs, flavors = seed(tenants)
    tenant_ids = list(Tenant.objects.values_list("pk", flat=True))
    fill_s = fill(total, start=start + timedelta(seconds=seed_value), tenant_ids=tenant_ids,
                  flavors=flavors, seed_value=seed_value)  # fmt: skip
    began = time.perf_counter()
    services.rollups_run_all()
    roll_s = time.perf_counter() - began
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("SELECT resolution, count(*) FROM usage_rollup GROUP BY 1 ORDER BY 1")
        rollups = ", ".join(f"{n:,} at {r} s" for r, n in cursor.fetchall())
    print(f"{name}: {total:,} raw samples through the ingest path in {fill_s:.0f} s, rolled up in "
          f"{roll_s:.0f} s (rollup rows: {rollups})", flush=True)  # fmt: skip
    client = Client()
    client.force_login(admin)
    return client, slugs


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
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    args = parser.parse_args(argv)
    failures: list[str] = []
    figures: list[dict[str, Any]] = []
    names = {"small": f"{DB_NAME}_small", "big": f"{DB_NAME}_big"}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            benchdb.setup(args.database_url, names["small"], tmp)
            setup(args.database_url, tmp, names["big"])  # this process starts on "big"
            now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            start = now - timedelta(days=30)
            clients = {
                size: build(names[size], total, args.tenants, seed_value, start)
                for size, total, seed_value in (("small", args.small, 10), ("big", args.big, 99))
            }
            runs: dict[str, dict[str, list[float]]] = {"small": {}, "big": {}}
            queries: dict[str, dict[str, int]] = {"small": {}, "big": {}}
            for round_ in range(args.rounds):  # alternating, so drift in load hits both alike
                order = ("small", "big") if round_ % 2 == 0 else ("big", "small")
                for size in order:
                    use(names[size])
                    client, slugs = clients[size]
                    for key, value in measure(client, slugs, args.pages, round_).items():
                        if key.endswith("_queries"):
                            queries[size][key] = max(queries[size].get(key, 0), value)
                        else:
                            runs[size].setdefault(key, []).extend(value)
            med = {size: {k: statistics.median(v) * 1000 for k, v in runs[size].items()}
                   for size in runs}  # fmt: skip
            for size, total in (("small", args.small), ("big", args.big)):
                m, q = med[size], queries[size]
                print(f"{total:>12,} raw samples: tenant 30-day page {m['tenant_s']:.0f} ms "
                      f"(CPU {m['tenant_cpu_s']:.0f} ms, {q['tenant_queries']} queries), its CSV "
                      f"{m['csv_s']:.0f} ms, admin page with {args.tenants} tenants "
                      f"{m['admin_s']:.0f} ms (CPU {m['admin_cpu_s']:.0f} ms, "
                      f"{q['admin_queries']} queries)", flush=True)  # fmt: skip
            small, big = med["small"], med["big"]
            for key, name in (("tenant_s", "tenant dashboard 30-day page"),
                              ("admin_s", f"admin dashboard, {args.tenants} tenants, 30 days")):  # fmt: skip
                ratio = big[key] / small[key]
                cpu_key = key.replace("_s", "_cpu_s")
                print(f"{name}: {small[key]:.0f} ms at {args.small:,}, {big[key]:.0f} ms at "
                      f"{args.big:,} raw samples: ratio {ratio:.2f} (target <= {TARGET}); CPU "
                      f"ratio {big[cpu_key] / small[cpu_key]:.2f}")  # fmt: skip
                figures.append(
                    figure(
                        f"{name}, ms at {args.big:,} vs {args.small:,} raw samples",
                        round(big[key], 1),
                        "ms",
                        baseline=round(small[key], 1),
                        target=TARGET,
                        better="lower",
                    )
                )
                if ratio > TARGET:
                    failures.append(f"{name}: ratio {ratio:.2f} above {TARGET}")
            for key in ("tenant_queries", "admin_queries"):
                if queries["small"][key] != queries["big"][key]:
                    failures.append(
                        f"the {key.split('_')[0]} page's query count grew with the data"
                    )
        finally:
            benchdb.teardown(args.database_url, names["small"])
            benchdb.teardown(args.database_url, names["big"])
    emit("dashboard", figures)
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
