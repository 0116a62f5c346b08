"""Webhooks: the evaluation only writes delivery rows (never waits on a target); each
delivery is sent on its own with retries and backoff; a target that answers 500 or times out
is retried and does not hold up the others. A local HTTP server plays the targets."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from alerts import services
from alerts.choices import DeliveryState
from alerts.models import Webhook, WebhookDelivery
from alerts.tasks import deliver_webhook
from tests.alerts.conftest import use_now


class Targets:
    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()


@pytest.fixture
def targets() -> Iterator[tuple[str, Targets]]:
    """/ok answers 204; /flaky 500 the first time; /slow hangs 3 s the first time."""
    state = Targets()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                count = state.calls[self.path] = state.calls.get(self.path, 0) + 1
            if self.path == "/slow" and count == 1:
                time.sleep(3)
            if self.path == "/flaky" and count == 1:
                self.send_response(500)
                self.end_headers()
                return
            with state.lock:
                state.received.append((self.path, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def _deliveries(name: str) -> WebhookDelivery:
    return WebhookDelivery.objects.get(webhook__name=name)


def test_a_failing_target_is_retried_with_backoff_and_holds_up_no_other(
    world, targets, settings, django_capture_on_commit_callbacks
):
    base, state = targets
    settings.ALERT_WEBHOOK_TIMEOUT_S = 0.5
    settings.ALERT_WEBHOOK_BACKOFF_S = 30
    for name, fmt in (("ok", "json"), ("flaky", "slack"), ("slow", "json")):
        Webhook.objects.create(name=name, url=f"{base}/{name}", format=fmt)
    now = timezone.now()
    use_now(world, world.team_a, 9, now=now)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        started = time.monotonic()
        services.evaluate(now=now)
        evaluated_in = time.monotonic() - started

    assert state.calls == {}  # the evaluation sent nothing itself
    assert evaluated_in < 0.5
    assert WebhookDelivery.objects.filter(state=DeliveryState.PENDING).count() == 3
    assert callbacks  # enqueued after commit, one task per delivery

    started = time.monotonic()
    slow = services.webhook_deliver(delivery_id=_deliveries("slow").pk)
    assert time.monotonic() - started < 2  # bounded by the timeout, not the target's 3 s
    assert slow.retry_in == 30 and "timed out" in slow.error
    flaky = services.webhook_deliver(delivery_id=_deliveries("flaky").pk)
    assert flaky.retry_in == 30 and flaky.error == "HTTP 500"
    ok = services.webhook_deliver(delivery_id=_deliveries("ok").pk)
    assert ok.sent
    assert [path for path, _ in state.received] == ["/ok"]
    # Not due yet: a duplicate task does nothing.
    assert services.webhook_deliver(delivery_id=_deliveries("flaky").pk).retry_in is None
    assert state.calls["/flaky"] == 1

    later = timezone.now() + timedelta(seconds=31)
    assert services.webhook_deliver(delivery_id=_deliveries("flaky").pk, now=later).sent
    assert services.webhook_deliver(delivery_id=_deliveries("slow").pk, now=later).sent
    flaky_row = _deliveries("flaky")
    assert flaky_row.state == DeliveryState.SENT and flaky_row.attempts == 2
    bodies = dict(state.received)
    assert bodies["/ok"]["event"] == "fired"
    assert bodies["/ok"]["alert"]["tenant"] == "team-a"
    assert bodies["/ok"]["alert"]["rule"] == "quota-warning"
    assert bodies["/flaky"]["text"].startswith("[WARNING] quota-warning fired: team-a demo-a100")
    assert bodies["/flaky"]["blocks"][0]["type"] == "section"


def test_backoff_doubles_up_to_a_cap_and_gives_up(world, targets, settings):
    base, _state = targets
    settings.ALERT_WEBHOOK_BACKOFF_S = 30
    settings.ALERT_WEBHOOK_BACKOFF_MAX_S = 100
    settings.ALERT_WEBHOOK_MAX_ATTEMPTS = 1
    assert [services.retry_delay(n) for n in (1, 2, 3, 4)] == [30, 60, 100, 100]
    hook = Webhook.objects.create(name="flaky", url=f"{base}/flaky")
    delivery = WebhookDelivery.objects.create(webhook=hook, event="fired", payload={"x": 1})
    outcome = services.webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert outcome.retry_in is None and delivery.state == DeliveryState.FAILED
    assert delivery.last_status == 500


def test_the_task_retries_until_the_target_answers(world, targets, settings):
    base, state = targets
    settings.ALERT_WEBHOOK_BACKOFF_S = 1
    hook = Webhook.objects.create(name="flaky", url=f"{base}/flaky")
    delivery = WebhookDelivery.objects.create(webhook=hook, event="fired", payload={"x": 1})
    # Eager mode runs Celery's retry at once (countdown ignored); the backoff of 1 s is within
    # the claim's 1 s of slack, so the second attempt is due and goes through.
    deliver_webhook.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.SENT and delivery.attempts == 2
    assert state.calls["/flaky"] == 2


def test_the_sweep_resends_what_no_worker_took(world, settings):
    hook = Webhook.objects.create(name="gone", url="http://127.0.0.1:9/")
    delivery = WebhookDelivery.objects.create(webhook=hook, event="fired", payload={})
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        created_at=timezone.now() - timedelta(minutes=5)
    )
    settings.CELERY_TASK_ALWAYS_EAGER = False
    assert services.deliveries_sweep() == [delivery.pk]
