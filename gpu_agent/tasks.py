"""Celery tasks for the GPU fleet: thin, idempotent (safe to run twice or concurrently)."""

from __future__ import annotations

from celery import shared_task

from gpu_agent import services


@shared_task(name="gpu_agent.tasks.mark_stale_nodes", ignore_result=True)
def mark_stale_nodes() -> int:
    """Nodes whose agent missed its reports (``AGENT_STALE_AFTER_S``) become stale."""
    return len(services.nodes_mark_stale())


@shared_task(name="gpu_agent.tasks.fail_overdue_layouts", ignore_result=True)
def fail_overdue_layouts() -> int:
    """Desired layouts not applied by their deadline fail, with the reason."""
    return len(services.layouts_fail_overdue())
