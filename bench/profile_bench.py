"""Workload profile page benchmark (issue 16, "Speed a person feels"): the server time of
``/tenants/team-a/profile/`` on the demo's month, on PostgreSQL, in a database of its own
(``profile_bench``, dropped and created, migrated; dropped at the end).

The data: ``manage.py demo`` (two clusters, three tenants, a simulated month of samples rolled
up and about 2,000 workloads admitted under the quotas). Then, with Django's test client in this
process as team-a's lead (the whole page: view, selector, charts, template), the 24-hour,
7-day and 30-day pages, each requested once to warm up and then ``--pages`` times: the median
is the figure (target: under 0.3 s). The baseline, measured in the same run, is the same
30-day page reading the period from hourly rollups only (what the dashboards read before whole
days came from the daily rollups): the ratio says what that plan saves.

Static files: the page's ``{% static %}`` names come from the plain storage here (production
reads them from the manifest ``collectstatic`` writes: a dictionary lookup), so the benchmark
does not spend minutes compressing the static files.

    .venv/bin/python bench/profile_bench.py [--pages 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import benchdb  # noqa: E402 - after the path is set
from bench.figures import emit, figure  # noqa: E402

DB_NAME = "profile_bench"
TARGET_S = 0.3
URL = "/tenants/team-a/profile/?range={}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument("--pages", type=int, default=10)
    args = parser.parse_args(argv)
    figures: list[dict[str, Any]] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        benchdb.setup(args.database_url, DB_NAME, tmp)
        try:
            began = time.perf_counter()
            subprocess.run(
                [sys.executable, "manage.py", "demo", "--verbosity=0"],
                cwd=ROOT,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            print(f"demo month built in {time.perf_counter() - began:.0f} s", flush=True)
            benchdb.django_setup()
            from django.conf import settings
            from django.db.models import Q
            from django.test import Client, override_settings

            from dashboards import selectors
            from tenants.models import User
            from usage.choices import Resolution
            from usage.models import Workload

            storages = {
                **settings.STORAGES,
                "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
            }
            with override_settings(STORAGES=storages):
                client = Client()
                client.force_login(User.objects.get(username="alice"))
                print(f"{Workload.objects.count()} workloads in the demo month", flush=True)
                results = {}
                for name in ("24h", "7d", "30d"):
                    seconds, queries = benchdb.time_get(client, URL.format(name), args.pages)
                    results[name] = seconds
                    print(f"profile page, {name}: {seconds * 1000:.0f} ms ({queries} queries)")
                    if name == "30d":
                        figures.append(
                            figure(
                                "workload profile page, demo month, 30 days: server time",
                                round(seconds, 4),
                                "s",
                                target=TARGET_S,
                                better="lower",
                            )
                        )
                        if seconds >= TARGET_S:
                            failures.append(f"30-day profile page {seconds:.3f} s")

                def hourly_only(period: Any) -> Q:
                    return Q(
                        resolution=Resolution.HOUR,
                        bucket__gte=period.start,
                        bucket__lt=period.end,
                    )

                plan = selectors._rollup_spans
                selectors._rollup_spans = hourly_only  # type: ignore[assignment]
                try:
                    baseline, _ = benchdb.time_get(client, URL.format("30d"), args.pages)
                finally:
                    selectors._rollup_spans = plan  # type: ignore[assignment]
                print(f"profile page, 30d, hourly rollups only: {baseline * 1000:.0f} ms")
                figures.append(
                    figure(
                        "workload profile page, 30 days: daily-rollup plan vs hourly only",
                        round(results["30d"], 4),
                        "s",
                        baseline=round(baseline, 4),
                        better="lower",
                    )
                )
        finally:
            benchdb.teardown(args.database_url, DB_NAME)
    emit("profile", figures)
    print("PASS" if not failures else "FAIL: " + "; ".join(failures))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
