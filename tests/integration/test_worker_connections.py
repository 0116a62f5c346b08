"""A real worker keeps its PostgreSQL connection from one task to the next, as gunicorn's
workers keep theirs between requests (``CONN_MAX_AGE``). Celery's Django fixup closed it after
every task, so each task opened a new one (a sixth of the worker's busy time in py-spy's samples
during the load test, mostly waiting for it, and a new PostgreSQL backend per task)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from tenants.models import Notification, User
from tenants.services import SEND_NOTIFICATION_EMAILS_TASK
from tenants.tasks import send_notification_emails

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("on_postgres")]

TIMEOUT_S = 30


def worker_backends() -> list[tuple[int, datetime]]:
    """The other client connections to this test database: the worker's (pid, start)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, backend_start FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend' ORDER BY pid"
        )
        return [(int(pid), start) for pid, start in cursor.fetchall()]


def wait_until_done(log: Path, count: int) -> None:
    """The worker's log says ``count`` of these tasks succeeded (it logs after postrun)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        done = [
            line for line in text.splitlines()
            if f"Task {SEND_NOTIFICATION_EMAILS_TASK}[" in line and " succeeded in " in line
        ]  # fmt: skip
        if len(done) >= count:
            return
        time.sleep(0.1)
    pytest.fail(f"{count} task(s) not done within {TIMEOUT_S} s:\n{text[-3000:]}")


def test_the_worker_keeps_its_database_connection_between_tasks(
    start_worker, isolation: str, worker_log: Path
) -> None:
    reader = User.objects.create_user("mail-reader", email="reader@example.com")
    first, second = (Notification.objects.create(user=reader, subject=s) for s in ("one", "two"))
    start_worker()

    send_notification_emails.apply_async([[first.pk]], queue=isolation)
    wait_until_done(worker_log, 1)
    first.refresh_from_db()
    assert first.emailed_at is not None  # the task read and wrote the database
    after_first = worker_backends()
    assert len(after_first) == 1, after_first  # still open once the task is over

    send_notification_emails.apply_async([[second.pk]], queue=isolation)
    wait_until_done(worker_log, 2)
    second.refresh_from_db()
    assert second.emailed_at is not None
    assert worker_backends() == after_first  # the same backend served the second task
