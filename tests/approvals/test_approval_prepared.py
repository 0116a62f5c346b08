"""An approval's statements are compiled once per process (core.prepared, issue 36): after a
first approval they are remembered, and a later one, of another tenant or request, writes and
answers only its own rows."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import approval_policy
from core import prepared
from tests.approvals.conftest import URL, file, gpu_quota, item

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the statements are prepared on PostgreSQL"
)


@pytest.fixture
def fresh(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(prepared, "_STATEMENTS", {})


def remembered() -> dict[str, bool]:
    """The statements seen so far, by name: whether each is remembered (not left to the ORM)."""
    names = {}
    for (_, kind), statement in prepared._STATEMENTS.items():
        if isinstance(kind, tuple) and len(kind) == 2 and kind[0] in ("objects", "update"):
            key = kind[1]
            name = key if isinstance(key, str) else "/".join(map(str, key[:2]))
            names[name] = statement is not None
    return names


def test_a_second_approval_reuses_the_statements_and_touches_only_its_rows(world, api_as, fresh):
    approval_policy()
    first = file(world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=5)])
    assert (
        api_as(world.admin).post(f"{URL}{first.pk}/approve/", {}, format="json").status_code == 200
    )
    statements = remembered()
    for name in (
        "approval-locked",
        "approval-capacities/True",
        "quota-set-lock/True",
        "request-approved/decided_at",
        "request-befores/1",
        "request-detail-admin",
        "request-detail-items",
        "request-detail-decisions",
        "request-timeline",
        "request-push",
    ):
        assert statements.get(name), (name, statements)

    # team-a: one request approved, another of its on the cluster left to be checked again,
    # team-b's open request untouched.
    mine = file(world, items=[item(guaranteed=7, limit=10)])
    sibling = file(world, items=[item(guaranteed=8, limit=10)])
    other = file(world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=6)])
    count = len(prepared._STATEMENTS)
    answer = api_as(world.admin).post(f"{URL}{mine.pk}/approve/", {"comment": "ok"}, format="json")

    assert answer.status_code == 200, answer.content
    assert len(prepared._STATEMENTS) == count  # nothing compiled again
    body = answer.json()
    assert (body["id"], body["tenant"], body["status"]) == (mine.pk, "team-a", "approved")
    assert [(d["approver"], d["comment"]) for d in body["decisions"]] == [("admin", "ok")]
    assert body["approvals"] == 1
    assert [(i["flavor"], i["guaranteed"]) for i in body["items"]] == [("a100-80gb", "7")]
    assert body["timeline"][-1]["action"] == "quota_request.approved"
    assert gpu_quota(world, world.team_a) == (Decimal(7), Decimal(10))
    assert QuotaChangeRequest.objects.get(pk=sibling.pk).needs_revalidation
    assert not QuotaChangeRequest.objects.get(pk=other.pk).needs_revalidation
    assert QuotaChangeRequest.objects.get(pk=other.pk).status == RequestStatus.PENDING
    befores = mine.items.values_list("guaranteed_before", "limit_before")
    assert list(befores) == [(Decimal(6), Decimal(10))]


def test_a_remembered_admin_read_does_not_open_requests_to_others(world, api_as, fresh):
    approval_policy()
    request = file(world, items=[item(guaranteed=7, limit=10)])
    assert api_as(world.admin).get(f"{URL}{request.pk}/").status_code == 200
    # bob leads team-b: team-a's request is not his to see, nor to approve.
    assert api_as(world.bob).get(f"{URL}{request.pk}/").status_code == 404
    assert (
        api_as(world.bob).post(f"{URL}{request.pk}/approve/", {}, format="json").status_code == 404
    )
    assert api_as(world.admin).post(f"{URL}999999/approve/", {}, format="json").status_code == 404
