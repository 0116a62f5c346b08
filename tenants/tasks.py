from __future__ import annotations

from celery import shared_task

from tenants import services


@shared_task(
    name=services.SEND_NOTIFICATION_EMAIL_TASK,
    ignore_result=True,
    autoretry_for=(OSError,),  # SMTP down, connection refused: try again later
    retry_backoff=30,
    retry_backoff_max=3600,
    max_retries=8,
)
def send_notification_email(notification_id: int) -> None:
    services.notification_send_email(notification_id=notification_id)


@shared_task(name=services.SEND_NOTIFICATION_EMAILS_TASK, ignore_result=True)
def send_notification_emails(notification_ids: list[int]) -> None:
    services.notification_emails_send(notification_ids=notification_ids)
