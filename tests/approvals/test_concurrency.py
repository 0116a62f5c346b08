"""Approvals under real concurrency on PostgreSQL: two threads, each with its own database
connection and its own transaction, released together by a barrier. No mocks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models import Sum

from approvals.choices import RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeRequest
from approvals.services import approval_policy, quota_request_approve
from core.errors import Conflict
from quotas.choices import GPU_RESOURCE
from quotas.models import Quota, QuotaSet, SyncOutbox
from tests.approvals.conftest import file, generation, item

pytestmark = pytest.mark.django_db(transaction=True)


def run_together(*calls: Callable[[], Any]) -> list[tuple[str, Any]]:
    """Run ``calls`` in threads released at the same moment; each closes its connection."""
    barrier = threading.Barrier(len(calls))
    results: list[tuple[str, Any]] = [("not run", None)] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = ("ok", call())
        except Exception as exc:
            results[index] = ("error", exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a thread hung: a deadlock?"
    return results


def approve(request_id: int, approver: Any) -> Callable[[], QuotaChangeRequest]:
    def call() -> QuotaChangeRequest:
        return quota_request_approve(
            request=QuotaChangeRequest.objects.get(pk=request_id), approver=approver
        )

    return call


def a100_guarantees(world: Any) -> Decimal:
    total = Quota.objects.filter(
        quota_set__cluster=world.a100, flavor=world.a100_gpu, resource=GPU_RESOURCE
    ).aggregate(total=Sum("guaranteed"))["total"]
    return total or Decimal(0)


def test_two_approvals_that_together_overcommit_a_flavor(on_postgres, world, admin2):
    # 6 + 4 + 2 = 12 of 16 A100s are guaranteed; each request adds 3: one fits, not both.
    team_a = file(world, items=[item(guaranteed=9, limit=10)])
    team_b = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=7, limit=7)]
    )
    assert team_a.required_approvals == team_b.required_approvals == 1
    approval_policy()
    generations = {t.pk: generation(t, world.a100) for t in (world.team_a, world.team_b)}
    outbox = SyncOutbox.objects.count()

    results = run_together(approve(team_a.pk, world.admin), approve(team_b.pk, admin2))

    outcomes = sorted(kind for kind, _ in results)
    assert outcomes == ["error", "ok"], results
    error = next(value for kind, value in results if kind == "error")
    assert isinstance(error, Conflict), repr(error)
    assert "does not fit" in error.message
    assert "does not allow overcommitting guarantees" in error.message
    assert list(error.fields) == ["items[0].guaranteed"]
    assert a100_guarantees(world) <= 16
    assert a100_guarantees(world) == 15
    statuses = sorted(
        QuotaChangeRequest.objects.filter(pk__in=[team_a.pk, team_b.pk]).values_list(
            "status", flat=True
        )
    )
    assert statuses == [RequestStatus.APPROVED, RequestStatus.PENDING]
    assert ApprovalDecision.objects.filter(request__in=[team_a, team_b]).count() == 1
    bumps = sum(generation(t, world.a100) - generations[t.pk] for t in (world.team_a, world.team_b))
    assert bumps == 1
    assert SyncOutbox.objects.count() == outbox + 1


def test_the_same_request_approved_twice_at_once_is_decided_once(on_postgres, world, admin2):
    request = file(world)
    assert request.required_approvals == 1
    approval_policy()
    before = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).generation
    outbox = SyncOutbox.objects.count()

    results = run_together(approve(request.pk, world.admin), approve(request.pk, admin2))

    assert sorted(kind for kind, _ in results) == ["error", "ok"], results
    error = next(value for kind, value in results if kind == "error")
    assert isinstance(error, Conflict), repr(error)
    assert "approved" in error.message
    assert ApprovalDecision.objects.filter(request=request).count() == 1
    assert generation(world.team_a, world.a100) == before + 1
    assert SyncOutbox.objects.count() == outbox + 1
    request.refresh_from_db()
    assert (request.status, request.approved_generation) == (RequestStatus.APPROVED, before + 1)
