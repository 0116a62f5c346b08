"""HTTP and Celery figures for ``/metrics`` (the one guarded endpoint, ``usage.metrics``).

HTTP: django-prometheus' middleware (settings: ``MIDDLEWARE``) counts requests and responses by
view, method and status and times them. Its series live in the web process; under gunicorn,
whose workers are separate processes, prometheus_client's multiprocess mode adds them up across
the workers: ``gunicorn.conf.py`` gives every gunicorn a fresh ``PROMETHEUS_MULTIPROC_DIR``, where
each worker writes its values, and ``http_families`` reads them all back at scrape time.

Celery: a task runs in a worker, another process and usually another pod, that Prometheus does
not scrape. No maintained library exports task figures in-process (the maintained
``celery-exporter`` is a separate service that needs every worker to send task events), so each
worker adds its tasks' outcomes and run times to a Redis hash on the broker, from Celery's
``task_prerun`` / ``task_postrun`` signals, and ``/metrics`` reads that hash and the queues'
lengths (the backlog) from the broker at scrape time. With a broker other than Redis (the
demo's filesystem broker, the suite's in-memory one) there are no Celery figures.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import redis
from celery import current_app, signals
from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

logger = logging.getLogger(__name__)

# The Redis hash the workers add to and /metrics reads: "count|<task>|<state>",
# "sum|<task>" and "bucket|<task>|<upper bound>" (counts per bucket, not cumulative).
TASKS_KEY = "portal:metrics:celery-tasks"
# Upper bounds of the task run-time histogram, in seconds (+Inf is added).
RUNTIME_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
REDIS_SCHEMES = {"redis", "rediss", "unix"}
CALL_TIMEOUT_S = 2.0
# kombu's Redis transport keeps a queue's messages of priority > 0 in lists named after it.
PRIORITY_SEPARATOR = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
HTTP_PREFIX = "django_http_"

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()
_started: dict[str, float] = {}


def http_families() -> Iterable[Any]:
    """django-prometheus' HTTP families: of every gunicorn worker where
    ``PROMETHEUS_MULTIPROC_DIR`` is set, else of this process."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        families = registry.collect()
    else:
        families = REGISTRY.collect()
    return [family for family in families if family.name.startswith(HTTP_PREFIX)]


def broker_client() -> redis.Redis | None:
    """A client of the Celery broker when it is Redis (one per URL, kept), else None."""
    url = str(current_app.conf.broker_url or "")
    if urlsplit(url).scheme.split("+")[0] not in REDIS_SCHEMES:
        return None
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis.Redis.from_url(
                url, socket_connect_timeout=CALL_TIMEOUT_S, socket_timeout=CALL_TIMEOUT_S
            )
    return client


def queue_names() -> list[str]:
    """The queues the portal sends tasks to: Celery's default one, the pushes' (SYNC_QUEUE)
    and any configured in ``CELERY_TASK_QUEUES``."""
    conf = current_app.conf
    names = {conf.task_default_queue, settings.SYNC_QUEUE}
    names |= {queue.name for queue in conf.task_queues or ()}
    return sorted(name for name in names if name)


def record_task(name: str, state: str, seconds: float) -> None:
    """Adds one run of the task ``name`` that ended in ``state`` after ``seconds``."""
    client = broker_client()
    if client is None:
        return
    bound = next((b for b in RUNTIME_BUCKETS if seconds <= b), None)
    pipe = client.pipeline(transaction=False)
    pipe.hincrby(TASKS_KEY, f"count|{name}|{state.lower()}", 1)
    pipe.hincrbyfloat(TASKS_KEY, f"sum|{name}", seconds)
    pipe.hincrby(TASKS_KEY, f"bucket|{name}|{'+Inf' if bound is None else repr(bound)}", 1)
    try:
        pipe.execute()
    except redis.RedisError as error:  # a figure lost, never a task failed for it
        logger.warning("Celery task metrics not recorded: %s", type(error).__name__)


@signals.task_prerun.connect
def _task_started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task_id and not getattr(task.request, "is_eager", False):
        _started[task_id] = time.monotonic()


@signals.task_postrun.connect
def _task_ended(
    task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any
) -> None:
    started = _started.pop(task_id, None) if task_id else None
    if started is None or task is None:
        return
    record_task(task.name, state or "unknown", time.monotonic() - started)


def celery_families() -> Iterable[Any]:
    """Task outcomes and run times (from the workers' hash) and the queues' backlog, read from
    the broker now; nothing when it is not Redis."""
    client = broker_client()
    if client is None:
        return []
    up = GaugeMetricFamily(
        "portal_celery_broker_up", "1 when the Celery broker (Redis) answered this scrape."
    )
    queues = queue_names()
    try:
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(TASKS_KEY)
        for queue in queues:
            pipe.llen(queue)
            for step in PRIORITY_STEPS:
                pipe.llen(f"{queue}{PRIORITY_SEPARATOR}{step}")
        answers = pipe.execute()
    except redis.RedisError as error:
        logger.warning("Celery figures not read from the broker: %s", type(error).__name__)
        up.add_metric([], 0.0)
        return [up]
    up.add_metric([], 1.0)
    length = GaugeMetricFamily(
        "portal_celery_queue_length",
        "Tasks waiting in the queue for a worker (all priorities).",
        labels=["queue"],
    )
    per_queue = 1 + len(PRIORITY_STEPS)
    for i, queue in enumerate(queues):
        length.add_metric([queue], float(sum(answers[1 + i * per_queue : 1 + (i + 1) * per_queue])))
    return [up, length, *_task_families(answers[0])]


def _task_families(fields: dict[bytes, bytes]) -> Iterable[Any]:
    counts: dict[tuple[str, str], float] = {}
    sums: dict[str, float] = {}
    buckets: dict[str, dict[str, float]] = {}
    for raw_field, raw_value in fields.items():
        kind, _, rest = raw_field.decode().partition("|")
        value = float(raw_value)
        if kind == "count":
            name, _, state = rest.rpartition("|")
            counts[(name, state)] = value
        elif kind == "sum":
            sums[rest] = value
        elif kind == "bucket":
            name, _, bound = rest.rpartition("|")
            buckets.setdefault(name, {})[bound] = value
    total = CounterMetricFamily(
        "portal_celery_tasks",
        "Celery tasks the workers ran, by task and how each ended (success, failure, retry).",
        labels=["task", "state"],
    )
    for (name, state), value in sorted(counts.items()):
        total.add_metric([name, state], value)
    runtime = HistogramMetricFamily(
        "portal_celery_task_runtime_seconds",
        "How long the workers' Celery tasks ran, by task.",
        labels=["task"],
    )
    for name, per_bound in sorted(buckets.items()):
        cumulative = 0.0
        points = []
        for bound in (*(repr(b) for b in RUNTIME_BUCKETS), "+Inf"):
            cumulative += per_bound.get(bound, 0.0)
            points.append((bound, cumulative))
        runtime.add_metric([name], points, sum_value=sums.get(name, 0.0))
    return [total, runtime]
