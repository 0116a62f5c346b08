"""A task a request sends logs, in a real Celery worker with production's JSON lines, the id of
that request (the one its response carried in X-Request-ID), and the worker's run of it is
counted on /metrics (read from the broker).

The request goes through the portal's whole middleware chain; its view, defined here, sends
the heartbeat task to the test's own queue (the real views send theirs to queues other tests
share).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

from portal.tasks import worker_heartbeat
from tests.integration.conftest import (  # noqa: F401 - the real worker's fixtures
    isolation,
    redis_url,
    start_worker,
    worker_log,
)

pytestmark = [pytest.mark.integration]

TIMEOUT_S = 30


def send_heartbeat(request: HttpRequest) -> JsonResponse:
    worker_heartbeat.apply_async(queue=request.GET["queue"])
    return JsonResponse({"sent": True})


urlpatterns = [path("send-heartbeat", send_heartbeat)]


def heartbeat_runs(client: Client) -> float:
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == "portal_celery_tasks_total" and sample.labels == {
                "task": "portal.tasks.worker_heartbeat",
                "state": "success",
            }:
                return sample.value
    return 0.0


def worker_lines(log: Path, request_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        mine = [line for line in lines if line.get("request_id") == request_id]
        if any("succeeded" in line["message"] for line in mine):
            return mine
        if time.monotonic() > deadline:
            pytest.fail(
                f"no line of the task with request id {request_id}; the log:\n{text[-4000:]}"
            )
        time.sleep(0.2)


def test_a_task_sent_by_a_request_logs_its_request_id_in_the_worker(
    start_worker: Any,  # noqa: F811
    isolation: str,  # noqa: F811
    worker_log: Path,  # noqa: F811
    client: Client,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8"]
    monkeypatch.setenv("LOG_FORMAT", "json")  # the worker's environment: production's lines
    runs_before = heartbeat_runs(client)
    settings.ROOT_URLCONF = __name__
    response = client.get("/send-heartbeat", {"queue": isolation})
    assert response.status_code == 200
    request_id = response["X-Request-ID"]

    start_worker()
    lines = worker_lines(worker_log, request_id)

    (succeeded,) = [line for line in lines if "succeeded" in line["message"]]
    assert succeeded["logger"] == "celery.app.trace"
    assert succeeded["task_name"] == "portal.tasks.worker_heartbeat"
    assert succeeded["task_id"] and succeeded["level"] == "INFO"
    # Lines of the worker's own (start, connection) carry no request id: null, not another's.
    text = worker_log.read_text()
    others = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any(line["request_id"] is None for line in others)
    # The worker counted the run where /metrics reads it.
    settings.ROOT_URLCONF = "portal.urls"
    deadline = time.monotonic() + TIMEOUT_S
    while heartbeat_runs(client) < runs_before + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert heartbeat_runs(client) == runs_before + 1
