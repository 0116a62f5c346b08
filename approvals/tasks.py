from __future__ import annotations

from celery import shared_task

from approvals import services


@shared_task(name="approvals.tasks.expire_requests", ignore_result=True)
def expire_requests() -> None:
    services.quota_requests_expire()
