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
from django.core.exceptions import ValidationError
from django.utils import timezone

from alerts import services
from alerts.choices import DeliveryState
from alerts.models import Webhook, WebhookDelivery
from alerts.tasks import deliver_webhook
from tests.alerts.conftest import use_now
from tests.pages import logged_in


class Targets:
    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()


@pytest.fixture
def targets(settings: Any) -> Iterator[tuple[str, Targets]]:
    """/ok answers 204; /flaky 500 the first time; /slow hangs 3 s the first time; /moved
    redirects to /ok (302). Its address is on the webhook allow-list (it is a loopback one)."""
    state = Targets()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's name
            with state.lock:
                state.calls[f"GET {self.path}"] = state.calls.get(f"GET {self.path}", 0) + 1
            self.send_response(204)
            self.end_headers()

        def do_POST(self) -> None:  # http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                count = state.calls[self.path] = state.calls.get(self.path, 0) + 1
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", "/ok")
                self.end_headers()
                return
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

    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
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
    assert slow.retry_in == 30 and slow.error == "the endpoint did not answer"
    flaky = services.webhook_deliver(delivery_id=_deliveries("flaky").pk)
    assert flaky.retry_in == 30 and flaky.error == "the endpoint answered 500"
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


# --- what a webhook may point at -------------------------------------------------------------

INTERNAL = [
    "http://127.0.0.1:5432/",
    "http://localhost:8000/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:6379/",
    "http://[::ffff:127.0.0.1]/",
    "http://10.0.0.5/hook",
    "http://192.168.1.1/",
    "http://0.0.0.0:80/",
    "http://224.0.0.1/",
    "http://[fd00:ec2::254]/",
    "http://100.100.100.200/",
    # IPv4 inside IPv6: NAT64 (RFC 6052, and the local-use 64:ff9b:1::/48), 6to4, IPv4-mapped
    # and -compatible, Teredo; each reaches the IPv4 address it carries.
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
    "http://[64:ff9b::10.0.0.5]/",
    "http://[64:ff9b:1::7f00:1]/",
    "http://[64:ff9b:1:7f00:1::]/",
    "http://[2002:7f00:1::]/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[2002:c0a8:101::]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[::127.0.0.1]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
]


@pytest.mark.parametrize("url", [*INTERNAL, "https://user:pw@hooks.example.com/x"])
def test_internal_addresses_and_credentials_in_the_url_are_refused_when_saved(world, url):
    with pytest.raises(ValidationError) as refused:
        Webhook(name="probe", url=url).full_clean()
    assert list(refused.value.message_dict) == ["url"]


def test_the_admin_form_says_why_a_webhook_url_is_refused(world):
    admin = logged_in(world.admin)
    response = admin.post(
        "/admin/alerts/webhook/add/",
        {"name": "probe", "url": "http://169.254.169.254/", "format": "json", "enabled": "on",
         "min_severity": "info"},
    )  # fmt: skip
    assert response.status_code == 200  # the form again, with the error
    assert "not a public address" in response.content.decode()
    assert not Webhook.objects.exists()


def test_the_admin_form_refuses_loopback_written_as_nat64_or_6to4(world):
    admin = logged_in(world.admin)
    for url in ("http://[64:ff9b::7f00:1]:8000/", "http://[2002:7f00:1::]/"):
        response = admin.post(
            "/admin/alerts/webhook/add/",
            {"name": "probe", "url": url, "format": "json", "enabled": "on",
             "min_severity": "info"},
        )  # fmt: skip
        assert response.status_code == 200, url  # the form again, with the error
        assert "not a public address" in response.content.decode(), url
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(
    "url", ["http://[64:ff9b::808:808]/", "http://[2002:808:808::]/", "http://[::ffff:8.8.8.8]/"]
)
def test_a_public_ipv4_address_inside_ipv6_may_be_saved(world, url):
    Webhook(name="public", url=url).full_clean()


def test_the_allow_list_admits_an_internal_address_written_inside_ipv6(world, settings):
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    Webhook(name="ok", url="http://[64:ff9b::7f00:1]/").full_clean()
    settings.WEBHOOK_ALLOWED_HOSTS = ["64:ff9b::/96"]
    Webhook(name="ok", url="http://[64:ff9b::7f00:1]/").full_clean()
    with pytest.raises(ValidationError):
        Webhook(name="ok", url="http://[2002:7f00:1::]/").full_clean()


def test_the_allow_list_admits_the_internal_hosts_it_names(world, settings):
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1", "10.0.0.0/8", "localhost"]
    for url in ("http://127.0.0.1:8080/", "http://10.1.2.3/hook", "http://localhost/hook"):
        Webhook(name="ok", url=url).full_clean()
    with pytest.raises(ValidationError):
        Webhook(name="ok", url="http://192.168.1.1/").full_clean()
    with pytest.raises(ValidationError):  # credentials are refused whatever the host
        Webhook(name="ok", url="http://u:p@127.0.0.1/").full_clean()


def test_a_public_name_that_does_not_resolve_yet_may_be_saved(world):
    Webhook(name="later", url="https://hooks.invalid/x").full_clean()


def test_a_stored_internal_url_is_not_contacted_when_sending(world, targets, settings):
    """Stored before URLs were checked, or a name that resolves to loopback at send time
    (DNS rebinding): the address is checked when sending, and nothing is sent."""
    base, state = targets
    settings.WEBHOOK_ALLOWED_HOSTS = []
    port = base.rsplit(":", 1)[1]
    for name, url in (("literal", f"{base}/ok"), ("rebound", f"http://localhost:{port}/ok")):
        hook = Webhook.objects.create(name=name, url=url)
        delivery = WebhookDelivery.objects.create(webhook=hook, event="fired", payload={})
        outcome = services.webhook_deliver(delivery_id=delivery.pk)
        delivery.refresh_from_db()
        assert delivery.state == DeliveryState.FAILED, name
        assert outcome.retry_in is None
        assert "not a public address" in delivery.last_error
    assert state.calls == {}


def test_a_redirect_is_a_failed_delivery_and_is_not_followed(world, targets):
    base, state = targets
    hook = Webhook.objects.create(name="moved", url=f"{base}/moved")
    delivery = WebhookDelivery.objects.create(webhook=hook, event="fired", payload={"x": 1})
    outcome = services.webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert not outcome.sent and outcome.retry_in is None
    assert (delivery.state, delivery.last_status) == (DeliveryState.FAILED, 302)
    assert delivery.last_error == "the endpoint answered 302 (a redirect, not followed)"
    assert state.calls == {"/moved": 1}  # no GET /ok, no POST /ok


def test_the_stored_error_does_not_tell_whether_a_port_is_open(world, settings):
    settings.WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    hook = Webhook.objects.create(name="closed", url="http://127.0.0.1:9/")
    delivery = WebhookDelivery.objects.create(webhook=hook, event="fired", payload={})
    outcome = services.webhook_deliver(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert outcome.error == delivery.last_error == "the endpoint did not answer"
    assert delivery.last_status is None
