"""A database of a benchmark's own for the in-process benchmarks (``usage``, ``dashboard``):
dropped and created on the PostgreSQL server the benchmark was given, migrated with
production settings (the usage store keeping a month of raw samples), Django set up in this
process; dropped again at the end."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _admin_url(url: str) -> str:
    return url.rsplit("/", 1)[0] + "/postgres"


def manage(*args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args, "--noinput", "--verbosity=0"], cwd=ROOT, check=True
    )


def setup(database_url: str, name: str, tmp: str) -> None:
    import psycopg

    with psycopg.connect(_admin_url(database_url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    os.environ.update(
        {
            "DATABASE_URL": _admin_url(database_url).rsplit("/", 1)[0] + f"/{name}",
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "testserver,127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "DATA_DIR": tmp,
            "REDIS_URL": "",
            "USAGE_RETENTION_RAW_DAYS": "60",  # the benchmarks write a month of raw samples
            "DJANGO_SETTINGS_MODULE": "portal.settings.production",
        }
    )
    manage("migrate")


def django_setup() -> None:
    import django

    django.setup()


def teardown(database_url: str, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(_admin_url(database_url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def tenants_numbered(count: int) -> dict[int, Any]:
    """``count`` more tenants (``team-NNNNN``, numbered after those there are), in bulk; every
    10th a department of the next 5. The tenants by number, in order."""
    from tenants.models import Tenant

    first = Tenant.objects.count()
    numbers = range(first, first + count)
    tenants = Tenant.objects.bulk_create(
        Tenant(slug=f"team-{i:05d}", display_name=f"Team {i:05d}") for i in numbers
    )
    by_number = dict(zip(numbers, tenants, strict=True))
    children = [t for i, t in by_number.items() if 1 <= i % 10 <= 5 and i - i % 10 in by_number]
    for tenant in children:
        tenant.parent = by_number[int(tenant.slug[5:]) // 10 * 10]
    Tenant.objects.bulk_update(children, ["parent"])
    return by_number


def time_get(client: Any, url: str, count: int) -> tuple[float, int]:
    """Median seconds of ``count`` GETs of ``url`` after one to warm up, and the queries of one."""
    import statistics
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    assert client.get(url).status_code == 200, url
    times = []
    for _ in range(count):
        began = time.perf_counter()
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        times.append(time.perf_counter() - began)
        assert response.status_code == 200, url
    return statistics.median(times), len(queries.captured_queries)
