"""Filing, validating, listing, reading and approving requests run a number of SQL queries
that does not grow with the tenants and flavors on the cluster (issue 3, "Speed")."""

from __future__ import annotations

from decimal import Decimal

from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.services import approval_policy
from quotas.choices import GPU_RESOURCE
from quotas.models import FlavorResource
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.services import tenant_create
from tests.approvals.conftest import URL, body, file, item
from tests.factories import gpu_flavor

EXTRA_FLAVORS = 8
EXTRA_TENANTS = 30


def grow(world) -> None:  # type: ignore[no-untyped-def]
    """8 more flavors on demo-a100 and 30 more tenants holding quotas on all of them, each
    with a pending request; team-a gets lines on the new flavors too."""
    flavors = [gpu_flavor(world.a100, f"extra-{i}", gpus=1000) for i in range(EXTRA_FLAVORS)]
    FlavorResource.objects.filter(flavor__in=flavors).update(capacity=Decimal(1000))
    for i in range(EXTRA_TENANTS):
        tenant = tenant_create(slug=f"grown-{i:02d}", display_name=f"Grown {i}", actor=None)
        quota_set_write(
            tenant=tenant,
            cluster=world.a100,
            items=[QuotaItem(f, GPU_RESOURCE, Decimal(1), Decimal(2)) for f in flavors],
            scheduling=SchedulingQuotas(),
            actor=None,
        )
        file(
            world,
            tenant=tenant,
            requester=world.admin,
            items=[item(flavor="extra-0", guaranteed=2, limit=3)],
        )


def count(call) -> int:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as context:
        response = call()
    assert response.status_code in (200, 201), response.content
    return len(context.captured_queries)


def test_list_and_detail_queries_do_not_grow(world, api_as):
    admin = api_as(world.admin)
    first = file(world)
    small_list = count(lambda: admin.get(URL))
    small_detail = count(lambda: admin.get(f"{URL}{first.pk}/"))
    grow(world)
    assert admin.get(URL).json()["count"] == 3 + 1 + EXTRA_TENANTS
    assert count(lambda: admin.get(URL)) == small_list
    assert count(lambda: admin.get(f"{URL}?status=pending&cluster=demo-a100")) == small_list
    assert count(lambda: admin.get(f"{URL}{first.pk}/")) == small_detail
    assert small_list <= 4  # count, page, items, decisions
    alice = api_as(world.alice)
    assert count(lambda: alice.get(URL)) == small_list


def test_filing_and_validating_queries_do_not_grow(world, api_as):
    alice = api_as(world.alice)
    approval_policy()  # created once, on first use
    small_validate = count(lambda: alice.post(f"{URL}validate/", body(), format="json"))
    small_create = count(lambda: alice.post(URL, body(submit=True), format="json"))
    grow(world)
    big_validate = count(lambda: alice.post(f"{URL}validate/", body(), format="json"))
    big_create = count(lambda: alice.post(URL, body(submit=True), format="json"))
    assert (big_validate, big_create) == (small_validate, small_create)
    assert small_validate <= 15
    assert small_create <= 50


def test_approval_queries_do_not_grow(world, api_as):
    admin = api_as(world.admin)
    approval_policy()
    team_a = file(world, items=[item(guaranteed=7, limit=10)])
    small = count(lambda: admin.post(f"{URL}{team_a.pk}/approve/", format="json"))
    grow(world)
    team_b = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=5, limit=6)]
    )
    big = count(lambda: admin.post(f"{URL}{team_b.pk}/approve/", format="json"))
    assert big == small
    assert small <= 60
