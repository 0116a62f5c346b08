"""What an operator reads: every request leaves one log line (JSON in production) with the
request id its response carries in X-Request-ID, and /metrics, still behind its token or
networks, has the HTTP figures (django-prometheus) and the Celery figures read from the broker.
The worker's side (the id in a task's log lines, the runs it counts) is in
test_observability_worker.py; several gunicorn workers adding up in test_observability_gunicorn.py.
"""

from __future__ import annotations

import io
import json
import logging.config
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

from portal.logs import logging_config
from portal.observability import TASKS_KEY, broker_client, record_task
from portal.tasks import worker_heartbeat
from tests.conftest import World, require_service

ROOT = Path(django_settings.BASE_DIR)
HTTP_RESPONSES = "django_http_responses_total_by_status_view_method"


@contextmanager
def logs_as(log_format: str) -> Iterator[io.StringIO]:
    """The portal's logging in ``log_format``, its one handler writing to a buffer (where it
    would write to standard error); then the suite's logging again."""
    logging.config.dictConfig(logging_config(log_format, "INFO"))
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    handler.setStream(buffer)
    try:
        yield buffer
    finally:
        logging.config.dictConfig(django_settings.LOGGING)


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """Production's logging (JSON lines) for this test."""
    with logs_as("json") as buffer:
        yield buffer


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def request_lines(buffer: io.StringIO) -> list[dict[str, Any]]:
    return [r for r in json_lines(buffer.getvalue()) if r["logger"] == "portal.request"]


def scrape(client: Client, settings: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8"]
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def responses(figures: dict[Any, float], view: str, status: str) -> float:
    key = (f"{HTTP_RESPONSES}_total", (("method", "GET"), ("status", status), ("view", view)))
    return figures.get(key, 0.0)


@pytest.mark.django_db
def test_a_request_logs_one_json_line_with_the_id_its_response_carries(
    client: Client, json_logs: io.StringIO
) -> None:
    response = client.get("/login/?next=/secret-token-in-the-query")

    request_id = response["X-Request-ID"]
    assert len(request_id) == 32 and uuid.UUID(request_id)
    (line,) = request_lines(json_logs)
    assert line["request_id"] == request_id
    assert line["level"] == "INFO" and line["time"].endswith("Z")
    assert (line["method"], line["path"], line["status"], line["view"]) == (
        "GET", "/login/", 200, "login"
    )  # fmt: skip
    assert line["duration_seconds"] >= 0
    assert "secret-token" not in json.dumps(line), "the query string is not logged"


@pytest.mark.django_db
def test_djangos_own_request_lines_leave_the_query_string_out_too(
    client: Client, json_logs: io.StringIO
) -> None:
    response = client.get("/no-such-page/", {"reset_key": "s3cret-key"})
    assert response.status_code == 404
    lines = json_lines(json_logs.getvalue())
    (django_line,) = [line for line in lines if line["logger"] == "django.request"]
    assert django_line["message"] == "Not Found: /no-such-page/"
    assert django_line["status_code"] == 404
    assert django_line["request_id"] == response["X-Request-ID"]
    assert "s3cret-key" not in json_logs.getvalue()


@pytest.mark.django_db
def test_the_callers_request_id_is_kept_and_a_forged_one_replaced(
    client: Client, json_logs: io.StringIO
) -> None:
    given = str(uuid.uuid4())  # what an ingress controller or a client sends
    kept = client.get("/login/", HTTP_X_REQUEST_ID=given)
    assert kept["X-Request-ID"] == given
    forged = client.get("/login/", HTTP_X_REQUEST_ID='x"\n{"level": "INFO", "forged": true}')
    replaced = forged["X-Request-ID"]
    assert replaced != given and uuid.UUID(replaced)

    err = json_logs.getvalue()
    lines = request_lines(json_logs)
    assert [r["request_id"] for r in lines] == [given, replaced]
    assert all(line.startswith("{") for line in err.splitlines()), "every line is one object"
    assert "forged" not in err


@pytest.mark.django_db
def test_a_path_with_a_line_break_cannot_forge_a_log_line(client: Client) -> None:
    with logs_as("text") as buffer:
        client.get("/nowhere%0A2026-01-01 00:00:00,000 INFO portal.request [x]: forged")
    lines = buffer.getvalue().splitlines()
    # Ours and Django's "Not Found", each one line, the break written as \n.
    assert [line.split()[3] for line in lines] == ["portal.request", "django.request"], lines
    assert "GET /nowhere\\n2026-01-01" in lines[0]
    assert not any(line.startswith("2026-01-01") for line in lines)


def test_log_format_is_json_in_production_and_a_bad_one_is_refused() -> None:
    code = "from django.conf import settings; print(settings.LOGGING['handlers']['console']['formatter'])"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.production"}
    env.update(SECRET_KEY="k" * 50, LOG_FORMAT="")
    env.pop("LOG_FORMAT")
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "json"
    assert django_settings.LOGGING["handlers"]["console"]["formatter"] == "text"  # the suite's
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT='xml'"):
        logging_config("xml", "INFO")


def test_the_suites_text_lines_carry_the_request_id(client: Client, db: None) -> None:
    logger = logging.getLogger("portal.request")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    handler.addFilter(logging.getLogger().handlers[0].filters[0])
    logger.addHandler(handler)
    try:
        response = client.get("/login/")
    finally:
        logger.removeHandler(handler)
    (record,) = records
    assert record.request_id == response["X-Request-ID"]  # type: ignore[attr-defined]
    formatter = logging.getLogger().handlers[0].formatter
    assert formatter is not None
    assert f"[{response['X-Request-ID']}]: GET /login/ 200" in formatter.format(record)


@pytest.mark.django_db
def test_metrics_count_responses_by_view_method_and_status(
    client: Client, settings: Any, world: World
) -> None:
    before = scrape(client, settings)
    client.get("/login/")
    client.get("/login/")
    client.get("/no-such-page/")
    after = scrape(client, settings)

    assert responses(after, "login", "200") - responses(before, "login", "200") == 2
    assert (
        responses(after, "<unnamed view>", "404") - responses(before, "<unnamed view>", "404") == 1
    )
    latency = ("django_http_requests_latency_seconds_by_view_method_count",
               (("method", "GET"), ("view", "login")))  # fmt: skip
    assert after[latency] - before.get(latency, 0.0) == 2
    # The database gauges are still there: one endpoint, one registry read.
    assert any(name == "portal_quota_limit_gpus" for name, _ in after)


@pytest.mark.django_db
def test_the_http_figures_stay_behind_the_metrics_guard(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = "s3cret"
    settings.METRICS_ALLOWED_CIDRS = []
    refused = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert refused.status_code == 401
    assert b"django_http" not in refused.content
    allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert allowed.status_code == 200 and b"django_http_responses_total" in allowed.content


@pytest.fixture
def broker() -> redis.Redis:
    client = broker_client()
    require_service("Redis", client is not None, "the Celery broker is not REDIS_URL")
    assert client is not None
    return client


@pytest.mark.django_db
def test_metrics_read_task_runs_and_the_queue_backlog_from_the_broker(
    client: Client, settings: Any, broker: redis.Redis
) -> None:
    queue = f"test-{uuid.uuid4().hex[:12]}"
    settings.SYNC_QUEUE = queue  # a queue the portal sends to, no worker reads
    task = f"tests.task_{uuid.uuid4().hex[:8]}"
    try:
        for _ in range(3):
            worker_heartbeat.apply_async(queue=queue)
        record_task(task, "SUCCESS", 0.2)
        record_task(task, "SUCCESS", 3.0)
        record_task(task, "FAILURE", 700.0)
        figures = scrape(client, settings)
    finally:
        broker.delete(queue)
        fields = [f for f in broker.hkeys(TASKS_KEY) if task.encode() in f]
        broker.hdel(TASKS_KEY, *fields)

    assert figures[("portal_celery_broker_up", ())] == 1
    assert figures[("portal_celery_queue_length", (("queue", queue),))] == 3
    count = "portal_celery_tasks_total"
    assert figures[(count, (("state", "success"), ("task", task)))] == 2
    assert figures[(count, (("state", "failure"), ("task", task)))] == 1
    runtime = "portal_celery_task_runtime_seconds"

    def bucket(le: str) -> float:
        return figures[(f"{runtime}_bucket", (("le", le), ("task", task)))]

    assert (bucket("0.25"), bucket("5.0"), bucket("600.0"), bucket("+Inf")) == (1, 2, 2, 3)
    assert figures[(f"{runtime}_sum", (("task", task),))] == pytest.approx(703.2)
    assert figures[(f"{runtime}_count", (("task", task),))] == 3


@pytest.mark.django_db
def test_a_broker_that_does_not_answer_is_a_zero_not_an_error(
    client: Client, settings: Any, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portal import observability

    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    monkeypatch.setattr(observability, "broker_client", lambda: dead)
    figures = scrape(client, settings)
    assert figures[("portal_celery_broker_up", ())] == 0
    assert not any(name.startswith("portal_celery_queue") for name, _ in figures)


def send_heartbeat(request: HttpRequest) -> JsonResponse:
    worker_heartbeat.delay()
    return JsonResponse({"sent": True})


urlpatterns = [path("send-heartbeat", send_heartbeat)]


@pytest.mark.django_db
def test_a_task_run_eagerly_inside_the_request_leaves_its_line_the_id(
    client: Client, settings: Any, json_logs: io.StringIO
) -> None:
    """CELERY_TASK_ALWAYS_EAGER (debugging): django-guid clears the id when the task ends,
    inside the request; the response and the request's line still carry it."""
    from portal.celery import app

    settings.ROOT_URLCONF = __name__
    app.conf.task_always_eager = True
    try:
        response = client.get("/send-heartbeat")
    finally:
        app.conf.task_always_eager = False
    assert response.status_code == 200
    assert uuid.UUID(response["X-Request-ID"])
    (line,) = request_lines(json_logs)
    assert line["request_id"] == response["X-Request-ID"]
