"""Fixtures of the integration tests: a real Celery worker on the test's own queue.

Each test gets its own queue and its own cache key prefix, shared by the test process (through
``settings``) and the worker (through its environment), so parallel runs and a developer's own
worker on the same Redis do not see each other's messages or heartbeats.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import cache
from django.db import connection

from portal.celery import app as celery_app
from portal.tasks import HEARTBEAT_CACHE_KEY
from tests.conftest import require_service

BASE_DIR = Path(django_settings.BASE_DIR)


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("REDIS_URL", "")
    require_service("Redis", bool(url), "REDIS_URL is not set")
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except redis.RedisError as exc:
        require_service("Redis", False, f"{url} does not answer: {exc}")
    assert url == django_settings.CELERY_BROKER_URL, "the suite's broker is not REDIS_URL"
    assert not celery_app.conf.task_always_eager, "CELERY_TASK_ALWAYS_EAGER would bypass the worker"
    return url


@pytest.fixture
def isolation(redis_url: str, settings) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """A unique name: the queue the test uses and the cache key prefix of test and worker."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    settings.CACHES = {
        "default": {**django_settings.CACHES["default"], "KEY_PREFIX": name},
    }
    yield name
    cache.delete(HEARTBEAT_CACHE_KEY)
    client = redis.Redis.from_url(redis_url)
    stale = [
        *client.scan_iter(match=f"{name}*"),  # the queue (and its priority lists)
        f"_kombu.binding.{name}",
        f"_kombu.binding_permanent.{name}",
    ]
    client.delete(*stale)


def worker_env(name: str, redis_url: str, data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",  # the suite's, as this process's
        "REDIS_URL": redis_url,
        "CACHE_KEY_PREFIX": name,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    if connection.vendor == "postgresql":
        # The worker works on this run's test database, not the one DATABASE_URL names.
        parts = urlsplit(os.environ["DATABASE_URL"])
        test_db = connection.settings_dict["NAME"]
        env["DATABASE_URL"] = urlunsplit(parts._replace(path=f"/{test_db}"))
    else:
        # SQLite's test database is in this process's memory: the worker gets its own, empty
        # file under data_dir (the heartbeat does not touch the database).
        env.pop("DATABASE_URL", None)
    return env


@pytest.fixture
def worker_log(tmp_path: Path) -> Path:
    return tmp_path / "worker.log"


@pytest.fixture
def start_worker(
    transactional_db: None, isolation: str, redis_url: str, tmp_path: Path, worker_log: Path
) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """``start_worker()`` -> a running ``celery worker`` on the test's queue; stopped at teardown.

    ``transactional_db``: what the test writes is committed, so the worker (another process on
    the same test database) sees it.
    """
    workers: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            f"--queues={isolation}",
            f"--hostname={isolation}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ]
        with worker_log.open("ab") as log:
            worker = subprocess.Popen(
                command,
                cwd=BASE_DIR,
                env=worker_env(isolation, redis_url, tmp_path),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        stop(worker)


def stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)  # warm shutdown
    try:
        worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(timeout=10)
