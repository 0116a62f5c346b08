"""Under gunicorn, with several worker processes, every scrape of /metrics counts the requests
of all of them (prometheus_client's multiprocess mode, set up by gunicorn.conf.py), not those
of the one worker the scrape reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests
from django.conf import settings as django_settings
from django.db import connection
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from tests.redis_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("on_postgres")]

ROOT = Path(django_settings.BASE_DIR)
REQUESTS = 40


def login_responses(base: str) -> float:
    response = requests.get(f"{base}/metrics", timeout=10)
    assert response.status_code == 200, response.text[:500]
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if (
                sample.name == "django_http_responses_total_by_status_view_method_total"
                and sample.labels.get("view") == "login"
                and sample.labels.get("status") == "200"
            ):
                return sample.value
    return 0.0


def served_by(metrics_dir: Path) -> dict[str, float]:
    """Per worker process (its file), how many login answers it counted."""
    counts = {}
    for path in metrics_dir.glob("counter_*.db"):
        for key, value, _, _ in MmapedDict.read_all_values_from_file(str(path)):
            _, sample, labels, _ = json.loads(key)
            if sample.endswith("by_status_view_method_total") and labels.get("view") == "login":
                counts[path.name] = counts.get(path.name, 0.0) + value
    return counts


def test_every_scrape_counts_the_requests_of_all_gunicorn_workers(
    transactional_db: None, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "ALLOWED_HOSTS": "127.0.0.1",
        "METRICS_ALLOWED_CIDRS": "127.0.0.0/8",
        "DATA_DIR": str(tmp_path / "data"),
        "TMPDIR": str(tmp_path),  # where gunicorn.conf.py makes the metrics directory
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.pop("PORTAL_GUNICORN_OWN_METRICS_DIR", None)
    parts = urlsplit(os.environ["DATABASE_URL"])
    env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{connection.settings_dict['NAME']}"))
    log = (tmp_path / "gunicorn.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "2", "--worker-class", "sync", "--timeout", "60"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base}/livez", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet, or still importing
                pass
            assert server.poll() is None, (tmp_path / "gunicorn.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "gunicorn did not answer"
            time.sleep(0.2)

        # Batches of concurrent sign-in pages until both workers have served some (on a busy
        # machine the second worker may boot after the first batch).
        (metrics_dir,) = tmp_path.glob("portal-prometheus-*")
        sent = 0
        deadline = time.monotonic() + 60
        with ThreadPoolExecutor(max_workers=8) as pool:
            while True:
                statuses = list(
                    pool.map(lambda _: requests.get(f"{base}/login/", timeout=30).status_code,
                             range(REQUESTS))
                )  # fmt: skip
                assert statuses == [200] * REQUESTS
                sent += REQUESTS
                per_worker = served_by(metrics_dir)
                if len([n for n in per_worker.values() if n > 0]) == 2:
                    break
                assert time.monotonic() < deadline, f"one worker served all: {per_worker}"

        # Every scrape, whichever worker answers it, counts every worker's answers.
        scrapes = [login_responses(base) for _ in range(6)]
        assert scrapes == [sent] * 6
        assert sum(served_by(metrics_dir).values()) == sent
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    # gunicorn removes the directory it made when it stops.
    assert not list(tmp_path.glob("portal-prometheus-*"))


def test_an_operators_directory_is_emptied_of_an_earlier_gunicorns_values(
    tmp_path: Path,
) -> None:
    stale = tmp_path / "counter_12345.db"
    stale.write_bytes(b"\0" * 16)
    env: dict[str, Any] = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    env.pop("PORTAL_GUNICORN_OWN_METRICS_DIR", None)
    code = (
        "import runpy; config = runpy.run_path('gunicorn.conf.py'); config['on_starting'](None);"
        "import os; print(os.environ['PROMETHEUS_MULTIPROC_DIR'])"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(tmp_path)
    assert not stale.exists()
