"""Every tenant's guarantees summed per flavor and resource (``GuaranteeTotal``), kept by the
database's own triggers on the quota rows: whatever changes the rows (the write service, a bulk
insert, an update, a cascade, a rollback) the totals are the rows' sum, and the capacity check
and "free" columns read them in a constant number of queries."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from core.errors import ValidationFailed
from quotas.choices import GPU_RESOURCE
from quotas.models import GuaranteeTotal, Quota, QuotaSet
from quotas.selectors import cluster_allocations, guarantees_by_flavor
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tests.conftest import seed_quota
from tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def rows_summed() -> dict[tuple[int, str], Decimal]:
    """What the totals must be: the quota rows summed now, zeros left out."""
    sums = Quota.objects.values("flavor_id", "resource").annotate(total=Sum("guaranteed"))
    return {(r["flavor_id"], r["resource"]): r["total"] for r in sums if r["total"]}


def kept() -> dict[tuple[int, str], Decimal]:
    return {
        (r.flavor_id, r.resource): r.guaranteed
        for r in GuaranteeTotal.objects.all()
        if r.guaranteed
    }


def test_the_totals_follow_every_write_of_the_service(world):
    assert kept() == rows_summed() and kept()  # the world's tenants hold quotas already
    seed_quota(world.team_a, world.a100, world.a100_gpu, 3, 5, world.admin)
    seed_quota(world.team_b, world.a100, world.a100_gpu, 2, 4, world.admin)
    seed_quota(world.team_c, world.a100, world.a100_gpu, 1, 1, world.admin)
    assert kept() == rows_summed()
    key = (world.a100_gpu.pk, GPU_RESOURCE)
    assert guarantees_by_flavor(cluster=world.a100)[key] == 6
    # Replaced (3 -> 1), then emptied: the old rows leave the sum.
    seed_quota(world.team_a, world.a100, world.a100_gpu, 1, 5, world.admin)
    assert guarantees_by_flavor(cluster=world.a100)[key] == 4
    quota_set_write(
        tenant=world.team_a, cluster=world.a100, items=[], scheduling=SchedulingQuotas(),
        actor=world.admin,
    )  # fmt: skip
    assert kept() == rows_summed()
    assert guarantees_by_flavor(cluster=world.a100)[key] == 3


def test_the_totals_follow_bulk_inserts_updates_and_cascades(world):
    tenant = TenantFactory(slug="bulk")
    quota_set = QuotaSet.objects.create(tenant=tenant, cluster=world.a100)
    Quota.objects.bulk_create(
        Quota(quota_set=quota_set, flavor=world.a100_gpu, resource=r, guaranteed=g, limit=g * 2)
        for r, g in ((GPU_RESOURCE, Decimal(4)), ("cpu", Decimal("0.5")))
    )
    assert kept() == rows_summed()
    Quota.objects.filter(quota_set=quota_set, resource="cpu").update(guaranteed=Decimal("0.75"))
    assert kept() == rows_summed()
    Quota.objects.filter(quota_set=quota_set, resource="cpu").update(resource="memory")  # a key
    assert kept() == rows_summed()
    quota_set.delete()  # its rows go by cascade
    assert kept() == rows_summed()


def test_a_rolled_back_write_leaves_the_totals_as_they_were(world):
    before = kept()
    with pytest.raises(RuntimeError), transaction.atomic():
        seed_quota(world.team_c, world.a100, world.a100_gpu, 4, 8, world.admin)
        assert kept() != before  # the writing transaction sees its own change
        raise RuntimeError("the approval's transaction failed after the write")
    assert kept() == before == rows_summed()


def test_the_check_excludes_the_set_being_replaced(world):
    seed_quota(world.team_a, world.a100, world.a100_gpu, 3, 5, world.admin)
    seed_quota(world.team_b, world.a100, world.a100_gpu, 2, 4, world.admin)
    team_a = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    key = (world.a100_gpu.pk, GPU_RESOURCE)
    everyone = guarantees_by_flavor(cluster=world.a100)[key]
    assert guarantees_by_flavor(cluster=world.a100, exclude_quota_set=team_a)[key] == everyone - 3
    # A set not saved yet (a tenant's first quotas) excludes nothing.
    fresh = QuotaSet(tenant=world.team_c, cluster=world.a100)
    assert guarantees_by_flavor(cluster=world.a100, exclude_quota_set=fresh)[key] == everyone


def test_the_capacity_check_refuses_what_the_others_guarantees_leave_no_room_for(world):
    """16 A100s: team-a and team-b hold 10; team-c may have 6 more, not 7."""
    seed_quota(world.team_a, world.a100, world.a100_gpu, 6, 10, world.admin)
    seed_quota(world.team_b, world.a100, world.a100_gpu, 4, 6, world.admin)
    seed_quota(world.team_c, world.a100, world.a100_gpu, 6, 6, world.admin)
    before = kept()
    with pytest.raises(ValidationFailed) as refused:
        quota_set_write(
            tenant=world.team_c, cluster=world.a100,
            items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(7), Decimal(7))],
            scheduling=SchedulingQuotas(), actor=world.admin,
        )  # fmt: skip
    assert "items[0].guaranteed" in refused.value.fields, refused.value.fields
    assert kept() == before == rows_summed()  # the refused write changed nothing
    # 6 is what is left, and it passes.
    seed_quota(world.team_c, world.a100, world.a100_gpu, 6, 6, world.admin)


def test_reading_the_allocations_costs_the_same_at_any_number_of_tenants(world):
    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            cluster_allocations(cluster=world.a100)
        return len(seen)

    few = queries()
    for n in range(12):
        tenant = TenantFactory(slug=f"more-{n}")
        seed_quota(tenant, world.a100, world.a100_gpu, 0, 1, world.admin)
    assert queries() == few
    # And the sums it reads no query over the quota rows.
    with CaptureQueriesContext(connection) as seen:
        guarantees_by_flavor(cluster=world.a100)
    assert not [q for q in seen if '"quotas_quota"' in q["sql"] and "SUM" in q["sql"].upper()]
