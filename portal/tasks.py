"""Portal-wide Celery tasks. Thin: they record facts and call services."""

from __future__ import annotations

from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

HEARTBEAT_CACHE_KEY = "celery:worker-heartbeat"


@shared_task(name="portal.tasks.worker_heartbeat", ignore_result=True)
def worker_heartbeat() -> None:
    """Beat sends this every 30 s; the admin console shows when a worker last ran it."""
    cache.set(HEARTBEAT_CACHE_KEY, timezone.now(), timeout=24 * 3600)
