"""The change-request services: approval writes everything together or nothing, expiry, the
approval policy, the live check."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeRequest
from approvals.services import (
    approval_policy,
    approval_policy_update,
    quota_request_approve,
    quota_request_check_stored,
    quota_request_validate,
    quota_requests_expire,
)
from core.errors import Conflict, PermissionDenied, ValidationFailed
from quotas.models import SyncOutbox
from tenants.models import AuditEvent
from tests.approvals.conftest import database_state, file, generation, gpu_quota, item


def test_approval_writes_decision_generation_audit_and_outbox_together(
    world, django_capture_on_commit_callbacks
):
    request = file(world)
    before = database_state()
    with django_capture_on_commit_callbacks() as callbacks:
        approved = quota_request_approve(request=request, approver=world.admin, comment="ok")
    assert approved.status == RequestStatus.APPROVED
    after = database_state()
    assert after["decisions"] == before["decisions"] + 1
    assert generation(world.team_a, world.a100) == 2 == approved.approved_generation
    assert gpu_quota(world, world.team_a) == (8, 10)
    assert after["outbox"] == before["outbox"] + 1
    outbox = SyncOutbox.objects.get(tenant=world.team_a, cluster=world.a100, generation=2)
    assert outbox.completed_at is None
    new_events = AuditEvent.objects.order_by("-id")[: after["audit"] - before["audit"]]
    assert {e.action for e in new_events} == {"quota_set.written", "quota_request.approved"}
    # the push and the requester's email are enqueued only once the transaction commits
    assert len(callbacks) >= 1


def test_a_rule_broken_at_approval_is_a_conflict_naming_it_and_writes_nothing(world):
    team_a = file(world, items=[item(guaranteed=9, limit=10)])
    team_b = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=6, limit=6)]
    )
    quota_request_approve(request=team_b, approver=world.admin)
    state = database_state()
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=team_a, approver=world.admin)
    assert "does not fit" in refused.value.message
    assert "does not allow overcommitting guarantees" in refused.value.message
    assert list(refused.value.fields) == ["items[0].guaranteed"]
    assert database_state() == state
    team_a.refresh_from_db()
    assert team_a.status == RequestStatus.PENDING
    assert not ApprovalDecision.objects.filter(request=team_a).exists()


def test_expiry_turns_old_pending_requests_into_expired_ones_once(world):
    pending = file(world)
    draft = file(world, submit=False, reason="a draft does not expire")
    approved = file(world, items=[item(guaranteed=7, limit=10)], reason="decided")
    quota_request_approve(request=approved, approver=world.admin)
    assert quota_requests_expire() == 0  # nothing is old yet
    later = timezone.now() + timedelta(days=approval_policy().pending_expires_after_days + 1)
    assert quota_requests_expire(now=later) == 1
    assert quota_requests_expire(now=later) == 0  # safe to run twice
    statuses = dict(QuotaChangeRequest.objects.values_list("pk", "status"))
    assert statuses[pending.pk] == RequestStatus.EXPIRED
    assert statuses[draft.pk] == RequestStatus.DRAFT
    assert statuses[approved.pk] == RequestStatus.APPROVED
    event = AuditEvent.objects.get(action="quota_request.expired")
    assert (event.object_id, event.actor_username) == (f"#{pending.pk}", "system")
    with pytest.raises(Conflict):
        quota_request_approve(request=pending, approver=world.admin)


def test_expiry_follows_the_policy(world):
    pending = file(world)
    approval_policy_update(actor=world.admin, pending_expires_after_days=1)
    assert quota_requests_expire(now=timezone.now() + timedelta(hours=25)) == 1
    pending.refresh_from_db()
    assert pending.status == RequestStatus.EXPIRED


def test_the_policy_is_audited_and_keeps_its_ranges(world):
    policy = approval_policy_update(actor=world.admin, two_approvers_above_gpu_units=Decimal("16"))
    assert policy.two_approvers_above_gpu_units == 16
    event = AuditEvent.objects.get(action="approval_policy.updated")
    assert event.before["two_approvers_above_gpu_units"] == "8.000"
    assert event.after["two_approvers_above_gpu_units"] == "16"
    audit = AuditEvent.objects.count()
    for bad in ({"two_approvers_above_capacity_fraction": Decimal("1.5")},
                {"pending_expires_after_days": 0}, {"colour": "red"}):  # fmt: skip
        with pytest.raises(ValidationFailed):
            approval_policy_update(actor=world.admin, **bad)
    assert approval_policy().two_approvers_above_gpu_units == 16
    assert AuditEvent.objects.count() == audit


def test_validate_collects_every_problem_and_stores_nothing(world):
    state = database_state()
    check = quota_request_validate(
        actor=world.alice,
        tenant=world.team_a,
        cluster=world.a100,
        reason=" ",
        raw_items=[item(guaranteed=6, limit=12)],
    )
    assert set(check.errors) == {"reason", "items[0].limit"}
    assert database_state() == state
    with pytest.raises(PermissionDenied):
        quota_request_validate(
            actor=world.carol, tenant=world.team_a, cluster=world.a100, reason="x", raw_items=[]
        )


def test_the_stored_check_reports_the_diff_against_the_quotas_in_force(world):
    request = file(world, items=[item(guaranteed=7, limit=9)])
    check = quota_request_check_stored(request=request)
    line = check.diff[0]
    assert (line.guaranteed_before, line.limit_before) == (6, 10)
    assert (line.guaranteed_after, line.limit_after) == (7, 9)
    assert (line.gpu_units_before, line.gpu_units_after) == (10, 9)
    assert check.warnings and "goes down" in check.warnings[0]


def test_raising_only_the_guarantee_counts_towards_the_two_approver_threshold(world):
    # team-a on demo-h100: 4 / 6 H100 (weight 2). Guarantee 4 -> 6 under the same limit is
    # +4 GPU units; with the threshold at 3 units it needs two approvers.
    approval_policy_update(actor=world.admin, two_approvers_above_gpu_units=Decimal("3"))
    approval_policy_update(actor=world.admin, two_approvers_above_capacity_fraction=Decimal("1"))
    request = file(
        world,
        cluster=world.h100,
        items=[item(flavor="h100-80gb", guaranteed=6, limit=6)],
    )
    check = quota_request_check_stored(request=request)
    assert check.gpu_units_increase == 4
    assert request.required_approvals == 2
