"""Celery tasks for quotas: the push (an outbox row's delivery, the sweep that re-sends rows
no worker took) and drift repair (a full pass per cluster). Thin, idempotent, by id."""

from __future__ import annotations

import random

from celery import Task, shared_task
from django.db import InterfaceError, OperationalError

from quotas import services, sync
from quotas.kube.applier import RetryableError

# Retries of a push to an unreachable or busy cluster: exponential backoff with jitter,
# capped; after the last one the sweep hands the row out again.
PUSH_MAX_RETRIES = 8
PUSH_BACKOFF_CAP_S = 300


def outbox_deliver_or_retry(task: Task, outbox_id: int) -> None:
    """The body of a delivery task: push, and retry later when the cluster or the database
    was unreachable for a moment (nothing was lost: the outbox row is still open)."""
    try:
        sync.outbox_deliver(outbox_id=outbox_id)
    except (RetryableError, OperationalError, InterfaceError) as exc:
        delay = min(PUSH_BACKOFF_CAP_S, 2**task.request.retries)
        jitter = random.uniform(0.5, 1.5)  # noqa: S311 - spreading retries, not a secret
        raise task.retry(exc=exc, countdown=delay * jitter) from exc


@shared_task(
    bind=True,
    name="quotas.tasks.deliver_outbox",
    ignore_result=True,
    acks_late=True,
    max_retries=PUSH_MAX_RETRIES,
)
def deliver_outbox(self: Task, outbox_id: int) -> None:
    outbox_deliver_or_retry(self, outbox_id)


@shared_task(name="quotas.tasks.sweep_outbox", ignore_result=True)
def sweep_outbox() -> None:
    services.outbox_sweep()


@shared_task(name="quotas.tasks.reconcile_clusters", ignore_result=True)
def reconcile_clusters() -> None:
    """Drift repair: a full pass over every cluster, each in its own task, so that one
    unreachable cluster does not hold up the others."""
    for cluster_id in sync.clusters_to_reconcile():
        reconcile_cluster.delay(cluster_id)


@shared_task(name="quotas.tasks.reconcile_cluster", ignore_result=True)
def reconcile_cluster(cluster_id: int) -> None:
    sync.cluster_reconcile_by_id(cluster_id=cluster_id)
