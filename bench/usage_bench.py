"""Usage store benchmark (issue 6, "Speed" (a) and (b)), on PostgreSQL, in a database of its own
(``usage_bench``, dropped and created, migrated; dropped at the end).

(a) Ingest ``--rows`` (1,000,000) samples: through the project's path (``samples_write``: every
    row checked, pending buckets marked, ``COPY`` through psycopg 3) and, in the same run, a
    raw ``COPY`` of the same rows into the same table; rows/s and the ratio (target >= 0.5).
    Each is run twice, alternating, the table emptied in between; the best of each counts.
    ORM ``bulk_create`` of ``--orm-rows`` of the same rows for comparison.
(b) The tenant usage endpoint's 30-day query (``GET tenants/{slug}/usage/?step=PT1H`` over 30
    days, Django's test client in this process, ``--queries`` times on random tenants) with
    1,000,000 and then 10,000,000 raw samples (``--big``) of ``--tenants`` tenants, rolled up;
    the median times and their ratio (target <= 2: it reads rollups).

    .venv/bin/python bench/usage_bench.py [--part a|b|all] [--rows 1000000] [--big 10000000]
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
DB_NAME = "usage_bench"
sys.path.insert(0, str(ROOT / "bench"))
import benchdb  # noqa: E402
from figures import emit, figure  # noqa: E402 - the line bench/run.py reads


def setup(database_url: str, tmp: str) -> None:
    benchdb.setup(database_url, DB_NAME, tmp)
    benchdb.django_setup()


def make_rows(
    count: int, *, start: datetime, span: timedelta, tenants: int, seed: int
) -> list[Any]:
    from usage.choices import Metric

    rng = random.Random(seed)
    metrics = [int(m) for m in (Metric.QUOTA_USED, Metric.QUOTA_BORROWED, Metric.GPU_UTILIZATION,
                                Metric.GPUS_ALLOCATED)]  # fmt: skip
    step = span / count
    rows = []
    for i in range(count):
        tenant = rng.randint(1, tenants)
        rows.append(
            (start + step * i, metrics[i % 4], float(rng.randint(0, 16)), 1, tenant,
             1 + tenant % 4, None, None, None, None)
        )  # fmt: skip
    return rows


def empty() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE usage_sample, usage_pending_bucket, usage_rollup")


def part_a(rows_n: int, orm_n: int) -> dict[str, Any]:
    from django.db import connection, transaction

    from usage import services
    from usage.choices import Source
    from usage.models import Sample

    start = datetime.now(UTC) - timedelta(days=2)
    rows = make_rows(rows_n, start=start, span=timedelta(days=2), tenants=200, seed=1)
    services.partitions_ensure(days=[(start + timedelta(days=d)).date() for d in range(3)])

    def project() -> float:
        began = time.perf_counter()
        with transaction.atomic():
            services.samples_write(rows=rows)
        return time.perf_counter() - began

    def raw() -> float:
        began = time.perf_counter()
        with (
            transaction.atomic(),
            connection.cursor() as cursor,
            cursor.cursor.copy(services.COPY_SQL) as copy,
        ):
            for row in rows:
                copy.write_row((*row, Source.UNKNOWN))  # the project's COPY names the source
        return time.perf_counter() - began

    times: dict[str, list[float]] = {"project": [], "raw": []}
    for _ in range(2):
        for name, run in (("project", project), ("raw", raw)):
            empty()
            times[name].append(run())
            assert Sample.objects.count() == rows_n, name
    empty()
    subset = rows[:orm_n]
    began = time.perf_counter()
    with transaction.atomic():
        Sample.objects.bulk_create(
            [Sample(**dict(zip(services.COLUMNS, r, strict=True))) for r in subset],
            batch_size=5000,
        )
    orm_s = time.perf_counter() - began
    empty()
    project_rate = rows_n / min(times["project"])
    raw_rate = rows_n / min(times["raw"])
    return {
        "rows": rows_n,
        "project_rows_per_s": round(project_rate),
        "raw_copy_rows_per_s": round(raw_rate),
        "orm_bulk_create_rows_per_s": round(orm_n / orm_s),
        "ratio_project_to_raw_copy": round(project_rate / raw_rate, 3),
        "ratio_orm_to_raw_copy": round(orm_n / orm_s / raw_rate, 3),
        "times_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
    }


def _seed_world(tenants: int) -> tuple[Any, list[str]]:
    from decimal import Decimal

    from quotas.models import Cluster, ResourceFlavor
    from tenants.models import Tenant, User

    cluster = Cluster.objects.create(pk=1, name="bench")
    for i in range(1, 5):
        ResourceFlavor.objects.create(
            pk=i, cluster=cluster, name=f"gpu-{i}", kind="gpu", gpu_model=f"GPU {i}",
            gpu_weight=Decimal(i),
        )  # fmt: skip
    Tenant.objects.bulk_create(
        [
            Tenant(pk=i, slug=f"team-{i:04d}", display_name=f"Team {i}")
            for i in range(1, tenants + 1)
        ]
    )
    admin = User.objects.create(username="bench-admin", is_platform_admin=True)
    return admin, [f"team-{i:04d}" for i in range(1, tenants + 1)]


def _fill(total: int, *, start: datetime, tenants: int, seed: int, chunk: int = 500_000) -> float:
    from usage import services

    began = time.perf_counter()
    span = timedelta(days=30)
    for part in range(0, total, chunk):
        n = min(chunk, total - part)
        offset = span * part / total
        services.samples_write(
            rows=make_rows(
                n, start=start + offset, span=span * n / total, tenants=tenants, seed=seed + part
            )
        )
    return time.perf_counter() - began


def _time_queries(admin: Any, slugs: list[str], count: int, now: datetime) -> tuple[float, int]:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(admin)
    rng = random.Random(7)
    params = {
        "start": (now - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "step": "PT1H",
    }
    times, points = [], 0
    for _ in range(count + 3):
        slug = rng.choice(slugs)
        began = time.perf_counter()
        response = client.get(f"/api/v1/tenants/{slug}/usage/", params)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200, response.content[:300]
        points = max(points, sum(len(s["points"]) for s in response.json()["series"]))
    return statistics.median(times[3:]), points


def part_b(small: int, big: int, tenants: int, queries: int) -> dict[str, Any]:
    from usage import services

    admin, slugs = _seed_world(tenants)
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(days=30)
    fill_small = _fill(small, start=start, tenants=tenants, seed=10)
    began = time.perf_counter()
    services.rollups_run_all(now=now)
    roll_small = time.perf_counter() - began
    t_small, points = _time_queries(admin, slugs, queries, now)
    fill_big = _fill(big - small, start=start + timedelta(seconds=17), tenants=tenants, seed=99)
    began = time.perf_counter()
    services.rollups_run_all(now=now)
    roll_big = time.perf_counter() - began
    t_big, _ = _time_queries(admin, slugs, queries, now)
    return {
        "tenants": tenants,
        "raw_small": small,
        "raw_big": big,
        "query_ms_small": round(t_small * 1000, 1),
        "query_ms_big": round(t_big * 1000, 1),
        "ratio_big_to_small": round(t_big / t_small, 2),
        "points_per_answer": points,
        "fill_s": [round(fill_small, 1), round(fill_big, 1)],
        "rollup_s": [round(roll_small, 1), round(roll_big, 1)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument("--part", choices=["a", "b", "all"], default="all")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--orm-rows", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--queries", type=int, default=20)
    args = parser.parse_args(argv)
    failures = []
    figures: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        setup(args.database_url, tmp)
        try:
            if args.part in ("a", "all"):
                a = part_a(args.rows, args.orm_rows)
                print(f"(a) ingest {a['rows']:,} samples: project path {a['project_rows_per_s']:,} rows/s, "
                      f"raw COPY {a['raw_copy_rows_per_s']:,} rows/s, ORM bulk_create "
                      f"{a['orm_bulk_create_rows_per_s']:,} rows/s")  # fmt: skip
                print(f"    ratio project / raw COPY: {a['ratio_project_to_raw_copy']} (target >= 0.5); "
                      f"bulk_create / raw COPY: {a['ratio_orm_to_raw_copy']}; times {a['times_s']}")  # fmt: skip
                figures.append(
                    figure(
                        "ingest: project path rows/s vs raw COPY",
                        a["project_rows_per_s"],
                        "rows/s",
                        baseline=a["raw_copy_rows_per_s"],
                        target=0.5,
                    )
                )
                figures.append(
                    figure(
                        "ingest: ORM bulk_create rows/s vs raw COPY",
                        a["orm_bulk_create_rows_per_s"],
                        "rows/s",
                        baseline=a["raw_copy_rows_per_s"],
                    )
                )
                if a["ratio_project_to_raw_copy"] < 0.5:
                    failures.append("(a) ratio below 0.5")
            if args.part in ("b", "all"):
                b = part_b(args.small, args.big, args.tenants, args.queries)
                print(f"(b) 30-day usage query ({b['tenants']} tenants, step 1 h, {b['points_per_answer']} "
                      f"points): {b['query_ms_small']} ms at {b['raw_small']:,} raw samples, "
                      f"{b['query_ms_big']} ms at {b['raw_big']:,}; ratio {b['ratio_big_to_small']} "
                      f"(target <= 2); fill {b['fill_s']} s, rollups {b['rollup_s']} s")  # fmt: skip
                figures.append(
                    figure(
                        "30-day usage query ms at 10M vs 1M raw samples",
                        b["query_ms_big"],
                        "ms",
                        baseline=b["query_ms_small"],
                        target=2,
                        better="lower",
                    )
                )
                if b["ratio_big_to_small"] > 2:
                    failures.append("(b) ratio above 2")
        finally:
            benchdb.teardown(args.database_url, DB_NAME)
    emit("usage", figures)
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
