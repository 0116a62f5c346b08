"""Grants for a time under real concurrency on PostgreSQL: two approvals released together,
each in its own transaction. Two overlapping grants that only fit one at a time, or a grant
and a standing change that only fit one at a time: one is approved, the other refused naming
the rule (409), never both."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from approvals.services import quota_request_create, request_items_parse
from core.errors import Conflict
from quotas.models import Cluster, Grant
from tests.approvals.conftest import file, item
from tests.approvals.test_concurrency import approve, run_together

pytestmark = pytest.mark.django_db(transaction=True)


def _grant(world: Any, tenant: Any, lead: Any, guaranteed: int, start_in: timedelta) -> Any:
    start = timezone.now() + start_in
    return quota_request_create(
        tenant=tenant,
        cluster=world.a100,
        requester=lead,
        reason="a peak",
        items=request_items_parse(
            cluster=world.a100, raw_items=[item(guaranteed=guaranteed, limit=guaranteed)]
        ),
        starts_at=start,
        ends_at=start + timedelta(days=2),
        submit=True,
    )


@pytest.fixture
def roomy(world: Any) -> Any:
    Cluster.objects.filter(pk=world.a100.pk).update(elastic_cap_fraction=Decimal(1))
    world.a100.refresh_from_db()
    return world


def test_two_overlapping_grants_that_only_fit_one_at_a_time(on_postgres, roomy, admin2):
    world = roomy  # 12 of 16 A100s guaranteed: each grant adds 3
    first = _grant(world, world.team_a, world.alice, 3, timedelta(days=1))
    second = _grant(world, world.team_b, world.bob, 3, timedelta(days=2))

    results = run_together(approve(first.pk, world.admin), approve(second.pk, admin2))

    assert sorted(kind for kind, _ in results) == ["error", "ok"], results
    error = next(value for kind, value in results if kind == "error")
    assert isinstance(error, Conflict) and "items[0].guaranteed" in error.fields
    assert Grant.objects.count() == 1


def test_a_grant_and_a_standing_change_that_only_fit_one_at_a_time(on_postgres, roomy, admin2):
    world = roomy
    grant = _grant(world, world.team_a, world.alice, 3, timedelta(days=1))
    standing = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=7, limit=7)]
    )

    results = run_together(approve(grant.pk, world.admin), approve(standing.pk, admin2))

    assert sorted(kind for kind, _ in results) == ["error", "ok"], results
    error = next(value for kind, value in results if kind == "error")
    assert isinstance(error, Conflict) and "items[0].guaranteed" in error.fields
