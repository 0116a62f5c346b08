"""Celery tasks for alerts: the evaluation and one webhook delivery. Thin, idempotent; the
services enqueue them by name and never import this module."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from celery import shared_task

from alerts import services


@shared_task(name="alerts.tasks.evaluate", ignore_result=True)
def evaluate() -> dict[str, Any]:
    """Every minute (beat): the rules against the usage store; then re-send webhook
    deliveries no worker took."""
    summary = services.evaluate()
    services.deliveries_sweep()
    return asdict(summary)


@shared_task(bind=True, name="alerts.tasks.deliver_webhook", ignore_result=True, max_retries=None)
def deliver_webhook(self: Any, delivery_id: int) -> bool:
    """One webhook delivery; retried with the service's backoff until it gives up."""
    outcome = services.webhook_deliver(delivery_id=delivery_id)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return outcome.sent


@shared_task(name="alerts.tasks.evaluate_quotas_collected", ignore_result=True)
def evaluate_quotas_collected(
    cluster_id: int, tenant_ids: list[int], at: str | None = None
) -> dict[str, Any]:
    """Right after a collection commits (enqueued by name from ``usage``): the quota rules
    for the tenants it read, as of its reading (``at``, ISO 8601), so a hold does not wait for
    the roll-up and the beat."""
    now = datetime.fromisoformat(at) if at else None
    summary = services.evaluate_quotas_collected(
        cluster_id=cluster_id, tenant_ids=tenant_ids, now=now
    )
    return asdict(summary)
