"""Celery tasks for approvals: thin, by id, idempotent."""

from __future__ import annotations

import random

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError

from approvals import services
from quotas.kube.applier import RetryableError

# Retries of a push to an unreachable or busy cluster: exponential backoff with jitter,
# capped; after the last one the sweep hands the row out again.
PUSH_MAX_RETRIES = 8
PUSH_BACKOFF_CAP_S = 300


@shared_task(name="approvals.tasks.expire_requests", ignore_result=True)
def expire_requests() -> None:
    services.quota_requests_expire()


@shared_task(
    bind=True,
    name="approvals.tasks.deliver_outbox",
    ignore_result=True,
    acks_late=True,
    max_retries=PUSH_MAX_RETRIES,
)
def deliver_outbox(self: Task, outbox_id: int) -> None:
    try:
        services.outbox_deliver(outbox_id=outbox_id)
    except (RetryableError, OperationalError, InterfaceError) as exc:
        # The cluster or the database was unreachable for a moment: nothing was lost (the
        # outbox row is still open), so try again later.
        delay = min(PUSH_BACKOFF_CAP_S, 2**self.request.retries)
        jitter = random.uniform(0.5, 1.5)  # noqa: S311 - spreading retries, not a secret
        raise self.retry(exc=exc, countdown=delay * jitter) from exc


@shared_task(name="approvals.tasks.reconcile_clusters", ignore_result=True)
def reconcile_clusters() -> None:
    """Drift repair: a full pass over every cluster, each in its own task, so that one
    unreachable cluster does not hold up the others."""
    for cluster_id in services.clusters_to_reconcile():
        reconcile_cluster.delay(cluster_id)


@shared_task(name="approvals.tasks.reconcile_cluster", ignore_result=True)
def reconcile_cluster(cluster_id: int) -> None:
    services.cluster_reconcile(cluster_id=cluster_id)
