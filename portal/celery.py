"""The Celery app: all Celery wiring lives here, the beat schedule is defined once."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

app.conf.beat_schedule = {
    "worker-heartbeat": {"task": "portal.tasks.worker_heartbeat", "schedule": 30.0},
    "sweep-outbox": {"task": "quotas.tasks.sweep_outbox", "schedule": 60.0},
    "expire-quota-requests": {"task": "approvals.tasks.expire_requests", "schedule": 3600.0},
    # Drift repair: re-apply what was changed by hand in the clusters.
    "reconcile-clusters": {"task": "approvals.tasks.reconcile_clusters", "schedule": 300.0},
    # GPU fleet: nodes whose agent stopped reporting; desired MIG layouts past their deadline.
    "gpu-agent-mark-stale-nodes": {"task": "gpu_agent.tasks.mark_stale_nodes", "schedule": 30.0},
    "gpu-agent-fail-overdue-layouts": {
        "task": "gpu_agent.tasks.fail_overdue_layouts",
        "schedule": 60.0,
    },
}
