"""Celery tasks for tenants: notification emails. Thin, by id; a failed email is recorded on
its row and sent again by the sweep when due (``tenants.services.notification_send_email``)."""

from __future__ import annotations

from celery import shared_task

from tenants import services


@shared_task(name=services.SEND_NOTIFICATION_EMAIL_TASK, ignore_result=True)
def send_notification_email(notification_id: int) -> None:
    """One email (the previous release queued these for retries; the sweep retries now)."""
    services.notification_send_email(notification_id=notification_id)


@shared_task(name=services.SEND_NOTIFICATION_EMAILS_TASK, ignore_result=True)
def send_notification_emails(notification_ids: list[int]) -> None:
    services.notification_emails_send(notification_ids=notification_ids)


@shared_task(name=services.SWEEP_NOTIFICATION_EMAILS_TASK, ignore_result=True)
def sweep_notification_emails() -> None:
    services.notification_emails_sweep()
