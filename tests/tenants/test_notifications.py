"""Approvers hear of new requests, requesters of decisions: in the inbox, and by email sent in
Celery after commit. A failing mail server delays an email, never a decision."""

from __future__ import annotations

import pytest
from django.core import mail
from django.core.mail.backends.locmem import EmailBackend as LocmemBackend

from approvals.services import (
    quota_request_approve,
    quota_request_create,
    quota_request_reject,
    request_items_parse,
)
from portal.celery import app as celery_app
from quotas.choices import SyncBackend
from quotas.models import Cluster
from tenants.models import Notification
from tests.factories import UserFactory


@pytest.fixture
def eager_celery():
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = False


def _file(world, guaranteed=7, limit=10):
    items = request_items_parse(
        cluster=world.a100,
        raw_items=[{"flavor": "a100-80gb", "resource": "nvidia.com/gpu",
                    "guaranteed": guaranteed, "limit": limit}],
    )  # fmt: skip
    return quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice,
        reason="bigger runs", items=items, submit=True,
    )  # fmt: skip


def test_approvers_are_told_of_a_new_request_in_the_inbox_and_by_email(
    world, eager_celery, django_capture_on_commit_callbacks
):
    second_admin = UserFactory(username="admin2", is_platform_admin=True)
    with django_capture_on_commit_callbacks(execute=True):
        request = _file(world)
    inbox = Notification.objects.filter(url=f"/requests/{request.pk}/")
    assert {n.user for n in inbox} == {world.admin, second_admin}  # not alice, not bob
    assert all("awaits approval" in n.subject and n.read_at is None for n in inbox)
    assert all(n.body.endswith("It needs 1 approval.") for n in inbox)  # not "approval(s)"
    assert sorted(m.to[0] for m in mail.outbox) == ["admin2@example.com", "admin@example.com"]
    assert f"/requests/{request.pk}/" in mail.outbox[0].body
    assert all(n.emailed_at is not None for n in inbox.all())


@pytest.mark.parametrize(("decide", "word"), [(quota_request_approve, "approved"),
                                              (quota_request_reject, "rejected")])  # fmt: skip
def test_the_requester_is_told_of_the_decision(
    world, eager_celery, django_capture_on_commit_callbacks, decide, word
):
    request = _file(world)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        decide(request=request, approver=world.admin, comment="ok")
    notice = Notification.objects.get(user=world.alice, subject__contains=f"was {word}")
    assert notice.subject == f"Request #{request.pk} for team-a was {word}"
    assert ["alice@example.com"] in [m.to for m in mail.outbox]
    assert {tuple(m.to) for m in mail.outbox} == {("alice@example.com",)}  # nobody else


@pytest.mark.parametrize("decide", [quota_request_approve, quota_request_reject])
def test_the_decision_notice_carries_the_approvers_comment(world, decide):
    request = _file(world)

    decide(request=request, approver=world.admin, comment="The cohort has room until June.")

    notice = Notification.objects.filter(user=world.alice).order_by("pk").first()
    assert notice is not None
    verb = "Approved" if decide is quota_request_approve else "Rejected"
    assert f"{verb} by admin: The cohort has room until June." in notice.body
    assert "bigger runs" in notice.body  # the reason it answers


def test_an_approval_notice_says_the_quotas_are_pushed_not_yet_in_force(world):
    Cluster.objects.filter(pk=world.a100.pk).update(backend=SyncBackend.KUBERNETES)
    request = _file(world)

    quota_request_approve(request=request, approver=world.admin)

    notice = Notification.objects.get(user=world.alice)
    assert notice.subject == f"Request #{request.pk} for team-a was approved"
    assert "You will be told when they are applied in demo-a100." in notice.body
    assert "in force" not in notice.body


def test_a_failing_mail_server_delays_the_email_not_the_decision(
    world, eager_celery, django_capture_on_commit_callbacks, settings
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    request = _file(world)
    with django_capture_on_commit_callbacks(execute=True):
        quota_request_approve(request=request, approver=world.admin)
    request.refresh_from_db()
    # The decision stands (and, the tasks being eager here, the push ran too).
    assert request.status == "applied"
    assert request.decided_at is not None
    notice = Notification.objects.get(user=world.alice, subject__endswith="was approved")
    assert notice.emailed_at is None and notice.email_attempts >= 1  # the task will retry


def test_no_change_no_notification(world, django_capture_on_commit_callbacks):
    with pytest.raises(Exception), django_capture_on_commit_callbacks(execute=True):  # noqa: B017
        _file(world, guaranteed=12, limit=12)  # breaks the elastic cap: nothing is filed
    assert not Notification.objects.exists()


class RefusingOneAddress(LocmemBackend):
    """The locmem outbox, with a mail server that refuses admin2@example.com."""

    def send_messages(self, messages):  # type: ignore[no-untyped-def]
        if any("admin2@example.com" in m.to for m in messages):
            raise ConnectionRefusedError("refused")
        return super().send_messages(messages)


def test_the_emails_of_one_change_go_on_the_queue_as_one_task(world, monkeypatch):
    from tenants import services

    sent = []
    monkeypatch.setattr(services, "enqueue", lambda name, args: sent.append((name, args)))
    admins = [world.admin, UserFactory(email="admin3@example.com"), world.alice]
    rows = services.notify(users=admins, subject="three people, one message")
    services._enqueue_emails([row.pk for row in rows])  # what the commit runs
    assert sent == [(services.SEND_NOTIFICATION_EMAILS_TASK, [[row.pk for row in rows]])]


def test_one_failing_address_costs_no_other_email_and_is_retried_apart(
    world, settings, monkeypatch
):
    from tenants import services

    settings.EMAIL_BACKEND = f"{__name__}.RefusingOneAddress"
    retried = []
    monkeypatch.setattr(services, "enqueue", lambda name, args: retried.append((name, args)))
    bad, good = UserFactory(username="admin2", is_platform_admin=True), world.admin
    assert bad.email == "admin2@example.com"
    rows = services.notify(users=[bad, good], subject="one of two")
    by_user = {row.user_id: row.pk for row in rows}
    failed = services.notification_emails_send(notification_ids=[by_user[bad.pk], by_user[good.pk]])
    assert failed == [by_user[bad.pk]]
    assert [m.to for m in mail.outbox] == [["admin@example.com"]]
    bad_notice, good_notice = (Notification.objects.get(pk=by_user[u.pk]) for u in (bad, good))
    assert good_notice.emailed_at is not None
    assert bad_notice.emailed_at is None and bad_notice.email_attempts == 1
    # Retried apart: due again after a backoff, when the sweep queues it alone.
    assert retried == []
    assert bad_notice.email_state == "pending" and "refused" in bad_notice.email_error
    due = bad_notice.email_next_attempt_at
    assert services.notification_emails_sweep(now=due) == [by_user[bad.pk]]
    assert retried == [(services.SEND_NOTIFICATION_EMAILS_TASK, [[by_user[bad.pk]]])]


class BrokenForOneAddress(LocmemBackend):
    """The locmem outbox, crashing (not a network error) on admin2@example.com."""

    def send_messages(self, messages):  # type: ignore[no-untyped-def]
        if any("admin2@example.com" in m.to for m in messages):
            raise RuntimeError("a bug, not the network")
        return super().send_messages(messages)


def test_an_email_that_crashes_costs_the_others_nothing_and_is_retried_later(
    world, settings, monkeypatch
):
    from tenants import services

    settings.EMAIL_BACKEND = f"{__name__}.BrokenForOneAddress"
    retried = []
    monkeypatch.setattr(services, "enqueue", lambda name, args: retried.append((name, args)))
    bad, good = UserFactory(username="admin2", is_platform_admin=True), world.admin
    rows = services.notify(users=[bad, good], subject="one of two")
    by_user = {row.user_id: row.pk for row in rows}
    failed = services.notification_emails_send(notification_ids=[by_user[bad.pk], by_user[good.pk]])
    # Not only network errors: any failure is kept on the row and tried again when due
    # (by the sweep: nothing is queued now), never dropped.
    assert failed == [by_user[bad.pk]] and retried == []
    assert [m.to for m in mail.outbox] == [["admin@example.com"]]
    assert Notification.objects.get(pk=by_user[good.pk]).emailed_at is not None
    crashed = Notification.objects.get(pk=by_user[bad.pk])
    assert crashed.email_state == "pending" and crashed.email_next_attempt_at is not None
    assert crashed.email_error == "RuntimeError: a bug, not the network"


# --- what is not sent is not lost: the sweep, retries with backoff, the last failure kept ------


class BrokerDown(Exception):
    pass


def _broker_down(name, args):  # type: ignore[no-untyped-def]
    raise BrokerDown("the broker is down")


def test_emails_made_while_the_broker_was_down_are_sent_by_the_sweep(
    world, eager_celery, monkeypatch, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from portal.celery import app
    from tenants import services

    monkeypatch.setattr(services, "enqueue", _broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        rows = services.notify(users=[world.alice, world.bob], subject="while the broker slept")
    assert mail.outbox == []
    assert all(row.email_state == "pending" for row in Notification.objects.all())
    monkeypatch.undo()
    assert services.notification_emails_sweep() == []  # a moment's grace: the task may run yet
    swept = services.notification_emails_sweep(now=timezone.now() + timedelta(minutes=2))
    assert sorted(swept) == sorted(row.pk for row in rows)
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "bob@example.com"]
    assert set(Notification.objects.values_list("email_state", flat=True)) == {"sent"}
    assert services.notification_emails_sweep(now=timezone.now() + timedelta(minutes=5)) == []
    beat = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert services.SWEEP_NOTIFICATION_EMAILS_TASK in beat


class FailingTwice(LocmemBackend):
    """A mail server that answers an SMTP error (not a network one) twice, then takes mail."""

    failures = 0

    def send_messages(self, messages):  # type: ignore[no-untyped-def]
        if FailingTwice.failures < 2:
            FailingTwice.failures += 1
            raise RuntimeError("451 4.3.0 try again later")
        return super().send_messages(messages)


def test_a_mail_failing_otherwise_than_the_network_is_retried_with_backoff(world, settings):
    from datetime import timedelta

    from django.utils import timezone

    from tenants import services

    settings.EMAIL_BACKEND = f"{__name__}.FailingTwice"
    FailingTwice.failures = 0
    (row,) = services.notify(users=[world.alice], subject="retry me")
    start = timezone.now()
    outcome = services.notification_send_email(notification_id=row.pk, now=start)
    row.refresh_from_db()
    assert not outcome.sent and outcome.retry_in
    assert row.email_state == "pending" and row.email_attempts == 1
    assert "451 4.3.0" in row.email_error
    first_delay = row.email_next_attempt_at - start
    # Not due yet: the sweep leaves it; once due it sends it again, later the next time.
    assert services.notification_emails_sweep(now=start + first_delay / 2) == []
    due = start + first_delay + timedelta(seconds=1)
    assert services.notification_emails_sweep(now=due) == [row.pk]
    services.notification_send_email(notification_id=row.pk, now=due)
    row.refresh_from_db()
    assert row.email_attempts == 2 and row.email_next_attempt_at - due > first_delay
    later = row.email_next_attempt_at + timedelta(seconds=1)
    assert services.notification_send_email(notification_id=row.pk, now=later).sent
    row.refresh_from_db()
    assert (row.email_state, row.email_error) == ("sent", "")
    assert row.emailed_at is not None and [m.to for m in mail.outbox] == [["alice@example.com"]]


def test_after_the_last_attempt_the_failure_is_recorded_not_dropped(world, settings):
    from datetime import timedelta

    from django.utils import timezone

    from tenants import services

    settings.EMAIL_BACKEND = f"{__name__}.BrokenForOneAddress"
    bad = UserFactory(username="admin2", email="admin2@example.com")
    (row,) = services.notify(users=[bad], subject="never deliverable")
    when = timezone.now()
    for _ in range(services.NOTIFICATION_EMAIL_MAX_ATTEMPTS):
        services.notification_send_email(notification_id=row.pk, now=when)
        row.refresh_from_db()
        when = (row.email_next_attempt_at or when) + timedelta(seconds=1)
    assert row.email_state == "failed"
    assert row.email_attempts == services.NOTIFICATION_EMAIL_MAX_ATTEMPTS
    assert "RuntimeError: a bug, not the network" in row.email_error
    assert row.email_next_attempt_at is None
    assert services.notification_emails_sweep(now=when + timedelta(days=1)) == []
    assert mail.outbox == []


def test_the_sweep_gives_up_on_mail_too_old_to_send_and_says_so(world):
    from datetime import timedelta

    from django.utils import timezone

    from tenants import services

    (old,) = services.notify(users=[world.alice], subject="from long ago")
    Notification.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - services.NOTIFICATION_EMAIL_GIVE_UP_AFTER - timedelta(hours=1)
    )
    assert services.notification_emails_sweep() == []
    old.refresh_from_db()
    assert old.email_state == "failed" and "not sent within" in old.email_error
    assert mail.outbox == []
