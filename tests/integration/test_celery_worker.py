"""A real Celery worker against Redis runs the portal's tasks, and the broker keeps what is sent
while no worker is up.

Each test gets its own queue and its own cache key prefix, shared by the test process (through
``settings``) and the worker (through its environment), so parallel runs and a developer's own
worker on the same Redis do not see each other's messages or heartbeats.
"""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.cache import cache
from django.utils import timezone

from portal.tasks import HEARTBEAT_CACHE_KEY, worker_heartbeat

pytestmark = [pytest.mark.integration]

BASE_DIR = Path(django_settings.BASE_DIR)
DELIVERY_TIMEOUT_S = 30


def wait_for_heartbeat(worker: subprocess.Popen[bytes], log_path: Path) -> Any:
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        beat = cache.get(HEARTBEAT_CACHE_KEY)
        if beat is not None:
            return beat
        if worker.poll() is not None:
            break
        time.sleep(0.1)
    log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
    state = f"exited with {worker.returncode}" if worker.poll() is not None else "still running"
    pytest.fail(f"no heartbeat within {DELIVERY_TIMEOUT_S} s; the worker {state}. Its log:\n{log}")


def assert_recent_aware(beat: Any, sent_at: datetime) -> None:
    assert isinstance(beat, datetime), f"heartbeat is {beat!r}"
    assert timezone.is_aware(beat)
    assert sent_at - timedelta(seconds=1) <= beat <= timezone.now() + timedelta(seconds=1)


def assert_worker_ran_it(log_path: Path) -> None:
    """The worker's own log says it ran the task (it logs after the task has returned)."""
    deadline = time.monotonic() + 5
    while True:
        log = log_path.read_text(errors="replace")
        ran = [line for line in log.splitlines() if "Task portal.tasks.worker_heartbeat[" in line]
        if any(" succeeded in " in line for line in ran) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len([line for line in ran if " succeeded in " in line]) == 1, log


def queued(redis_url: str, queue: str) -> int:
    return int(redis.Redis.from_url(redis_url).llen(queue))


def test_worker_runs_the_heartbeat_task(start_worker, isolation: str, worker_log: Path) -> None:
    assert cache.get(HEARTBEAT_CACHE_KEY) is None
    worker = start_worker()
    sent_at = timezone.now()
    worker_heartbeat.apply_async(queue=isolation)

    beat = wait_for_heartbeat(worker, worker_log)

    assert_recent_aware(beat, sent_at)
    assert_worker_ran_it(worker_log)
    assert worker.poll() is None, "the worker died after running the task"


def test_a_task_sent_while_no_worker_runs_waits_in_the_broker(
    start_worker, isolation: str, redis_url: str, worker_log: Path
) -> None:
    sent_at = timezone.now()
    worker_heartbeat.apply_async(queue=isolation)
    time.sleep(0.5)
    assert queued(redis_url, isolation) == 1, "the message is not waiting in Redis"
    assert cache.get(HEARTBEAT_CACHE_KEY) is None, "something ran the task without our worker"

    worker = start_worker()
    beat = wait_for_heartbeat(worker, worker_log)

    assert_recent_aware(beat, sent_at)
    assert beat >= sent_at
    assert_worker_ran_it(worker_log)
    assert queued(redis_url, isolation) == 0
