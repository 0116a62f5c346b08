"""Celery tasks for approvals: the expiry of pending requests, and the upgrade alias of the
delivery task the quotas app now owns. Thin, by id, idempotent."""

from __future__ import annotations

from celery import Task, shared_task

from approvals import services
from quotas.tasks import PUSH_MAX_RETRIES, outbox_deliver_or_retry


@shared_task(name="approvals.tasks.expire_requests", ignore_result=True)
def expire_requests() -> None:
    services.quota_requests_expire()


@shared_task(name="approvals.tasks.grants_tick", ignore_result=True)
def grants_tick() -> None:
    """Grants for a time: start, withdraw and end those due; tell leads of ends ahead."""
    services.grants_tick()


# Upgrade only: the push moved to quotas (``quotas.tasks.deliver_outbox``). Deliveries queued
# by the previous release under this name, before its workers stopped, are still taken and
# pushed the same way. Remove one release later, when no such message can be left. (The old
# reconcile tasks need no alias: the beat starts a new full pass every 5 minutes.)
@shared_task(
    bind=True,
    name="approvals.tasks.deliver_outbox",
    ignore_result=True,
    acks_late=True,
    max_retries=PUSH_MAX_RETRIES,
)
def deliver_outbox(self: Task, outbox_id: int) -> None:
    outbox_deliver_or_retry(self, outbox_id)
