"""Celery tasks for quotas: thin, idempotent, by id."""

from __future__ import annotations

from celery import shared_task

from quotas import services


@shared_task(name="quotas.tasks.sweep_outbox", ignore_result=True)
def sweep_outbox() -> None:
    services.outbox_sweep()
