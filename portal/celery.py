"""The Celery app: all Celery wiring lives here, the beat schedule is defined once."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, signals
from celery.schedules import crontab

import portal.observability  # noqa: F401 - each task's outcome and run time, for /metrics

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.production")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "worker-heartbeat": {"task": "portal.tasks.worker_heartbeat", "schedule": 30.0},
    "sweep-outbox": {"task": "quotas.tasks.sweep_outbox", "schedule": 60.0},
    # Notification emails no worker sent (the broker was down) or due again after a failure.
    "sweep-notification-emails": {
        "task": "tenants.tasks.sweep_notification_emails",
        "schedule": 60.0,
    },
    "expire-quota-requests": {"task": "approvals.tasks.expire_requests", "schedule": 3600.0},
    # Grants for a time: started and withdrawn when due (each step pushed through the outbox).
    "grants-tick": {"task": "approvals.tasks.grants_tick", "schedule": 60.0},
    # Drift repair: re-apply what was changed by hand in the clusters.
    "reconcile-clusters": {"task": "quotas.tasks.reconcile_clusters", "schedule": 300.0},
    # GPU fleet: nodes whose agent stopped reporting; desired MIG layouts past their deadline.
    "gpu-agent-mark-stale-nodes": {"task": "gpu_agent.tasks.mark_stale_nodes", "schedule": 30.0},
    # What each cluster's Node objects confirm of the nodes' GPUs (fleet capacity counts that).
    "gpu-agent-read-cluster-nodes": {
        "task": "gpu_agent.tasks.read_cluster_nodes",
        "schedule": 60.0,
    },
    "gpu-agent-fail-overdue-layouts": {
        "task": "gpu_agent.tasks.fail_overdue_layouts",
        "schedule": 60.0,
    },
    # The MIG planner's proposal per cluster (stored only when it changed); stuck probes.
    "gpu-agent-refresh-plan-proposals": {
        "task": "gpu_agent.tasks.refresh_plan_proposals",
        "schedule": 60.0,
    },
    "gpu-agent-fail-overdue-probes": {
        "task": "gpu_agent.tasks.fail_overdue_probes",
        "schedule": 60.0,
    },
    # MIG through the GPU Operator: ConfigMap and node labels out, state labels back.
    "gpu-agent-operator-sync": {"task": "gpu_agent.tasks.operator_sync", "schedule": 30.0},
    # Time-sliced GPUs: node labels naming the device plugin's sharing config, plugin restarts.
    "gpu-agent-time-slicing-sync": {"task": "gpu_agent.tasks.time_slicing_sync", "schedule": 60.0},
    # Usage: the clusters' state as samples, rollups of what changed, retention + partitions.
    "usage-collect-clusters": {"task": "usage.tasks.collect_clusters", "schedule": 60.0},
    "usage-roll-up": {"task": "usage.tasks.roll_up", "schedule": 60.0},
    "usage-enforce-retention": {"task": "usage.tasks.enforce_retention", "schedule": 3600.0},
    # Alerts: the rules against the usage store (warn, hold new work, suspend idle workloads).
    "alerts-evaluate": {"task": "alerts.tasks.evaluate", "schedule": 60.0},
    # Quota suggestions from last month's usage (R20): the first of the month, 03:00 UTC.
    "advice-compute-suggestions": {
        "task": "advice.tasks.compute_suggestions",
        "schedule": crontab(minute=0, hour=3, day_of_month=1),
    },
}


@signals.setup_logging.connect
def _log_as_django_does(loglevel: Any = None, **_: Any) -> None:
    """The worker and beat log through the settings' ``LOGGING`` (portal.logs: JSON or text,
    with the id of the request that sent the task), not in Celery's own format, from the level
    their ``--loglevel`` names (as before: Celery's default is WARNING)."""
    import logging
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)


@signals.task_prerun.connect
@signals.task_postrun.connect
def _database_connections_as_after_a_request(sender: Any = None, **_: Any) -> None:
    """A worker's task ends as a web request does: Django's ``close_old_connections`` closes a
    connection past ``CONN_MAX_AGE`` or left unusable by an error, and keeps the others for
    the next task (``CELERY_DB_REUSE_MAX`` keeps Celery's fixup from closing them every time).
    Not for an eager task: it runs inside the caller's request, maybe in its transaction."""
    if sender is None or getattr(sender.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()
