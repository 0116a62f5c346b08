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
    assert retried == [(services.SEND_NOTIFICATION_EMAIL_TASK, [by_user[bad.pk]])]


class BrokenForOneAddress(LocmemBackend):
    """The locmem outbox, crashing (not a network error) on admin2@example.com."""

    def send_messages(self, messages):  # type: ignore[no-untyped-def]
        if any("admin2@example.com" in m.to for m in messages):
            raise RuntimeError("a bug, not the network")
        return super().send_messages(messages)


def test_an_email_that_crashes_costs_the_others_nothing_and_is_not_retried(
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
    assert failed == [] and retried == []  # only network errors are worth a retry
    assert [m.to for m in mail.outbox] == [["admin@example.com"]]
    assert Notification.objects.get(pk=by_user[good.pk]).emailed_at is not None
