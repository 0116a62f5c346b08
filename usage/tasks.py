"""Celery tasks for the usage store: thin, idempotent (safe to run twice or concurrently)."""

from __future__ import annotations

from celery import shared_task

from usage import collector, services


@shared_task(name="usage.tasks.collect_clusters", ignore_result=True)
def collect_clusters() -> int:
    """Every minute: one task per Kubernetes cluster, so an unreachable one holds up none."""
    ids = collector.collectable_cluster_ids()
    for cluster_id in ids:
        collect_cluster.delay(cluster_id)
    return len(ids)


@shared_task(name="usage.tasks.collect_cluster", ignore_result=True)
def collect_cluster(cluster_id: int) -> int:
    return collector.cluster_collect_by_id(cluster_id=cluster_id).samples


@shared_task(name="usage.tasks.roll_up", ignore_result=True)
def roll_up() -> dict[str, int]:
    """5-minute, hourly and daily rollups of what changed since the last run."""
    return services.rollups_run_all()


@shared_task(name="usage.tasks.enforce_retention", ignore_result=True)
def enforce_retention() -> dict[str, int]:
    """Drop what each resolution no longer keeps; create raw partitions ahead."""
    return services.retention_enforce()
