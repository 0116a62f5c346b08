"""Celery tasks for quota advice: thin, idempotent (recomputing replaces unsubmitted drafts)."""

from __future__ import annotations

from celery import shared_task

from advice import services


@shared_task(name="advice.tasks.compute_suggestions", ignore_result=True)
def compute_suggestions() -> int:
    """Beat, on the first of the month: last month's suggestions for every active tenant."""
    return services.suggestions_compute_all()
