"""The load test's short variant in CI: locust, headless for 15 s, drives people and agents
(``bench/locustfile.py``) against gunicorn (the agents on a server of their own, as the
``portal-agent-api`` Deployment runs them), PostgreSQL, Redis, a Celery worker and the stand-in
cluster; no error, and every approval an admin was answered 200 for is in the database, applied
and pushed to the cluster. No latency is checked here (timings vary with the machine's load).

The full run (50 users, 1,000 agents, 2 minutes, with the latency targets) is
``bench/load_bench.py`` without arguments (``make bench`` runs it too); its figures are in
bench/README.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import require_service

ROOT = Path(settings.BASE_DIR)


@pytest.mark.integration
def test_a_short_crowd_gets_no_errors_and_loses_no_approval() -> None:
    require_service(
        "PostgreSQL", connection.vendor == "postgresql", "DATABASE_URL is not PostgreSQL"
    )
    redis_url = os.environ.get("REDIS_URL", "")
    require_service("Redis", bool(redis_url), "REDIS_URL is not set")
    params = connection.get_connection_params()
    server = f"postgres://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}/postgres"
    # A Redis database of its own (the load test empties it): the highest one that no worker of
    # this run (pytest-xdist: REDIS_URL's database + the worker's number) uses.
    base, _, db = redis_url.rpartition("/")
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    first = int(db or 0) - index
    used = range(first, first + int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    own = f"{base}/{max(n for n in range(16) if n not in used)}"
    done = subprocess.run(
        [sys.executable, "bench/load_bench.py", "--users", "12", "--agents", "100",
         "--seconds", "15", "--no-latency", "--db-name", f"load_ci_{os.getpid()}", "--database-url", server,
         "--redis-url", own, "--ingest-workers", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_FIGURES ")), None)
    assert line, out[-4000:]
    figures = {f["figure"]: f for f in json.loads(line.removeprefix("BENCH_FIGURES "))["figures"]}
    assert figures["errors"]["value"] == 0, out[-4000:]
    assert figures["approvals lost"]["value"] == 0, out[-4000:]
    assert figures["approvals applied"]["value"] > 0, out[-4000:]
    # The agents spoke protocol 2 through locust and were answered (no rate asserted).
    assert figures["agent reports answered / due"]["value"] > 0, out[-4000:]
    # ... by the agents' own server (as the agent-api Deployment runs them), which did the work:
    # 100 agents reporting for 15 s cost it well over a hundredth of a core.
    assert figures["agent ingest (gunicorn) CPU / wall"]["value"] >= 0.01, out[-4000:]
    assert done.returncode == 0, out[-4000:]
