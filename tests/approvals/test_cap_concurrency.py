"""The cap over every cluster under real concurrency on PostgreSQL: two approvals for one
tenant on two clusters, each within the cap alone, together past it. Quota sets lock per
cluster; the tenant's row makes the two take turns, so the second counts the first."""

from __future__ import annotations

from decimal import Decimal

import pytest

from approvals.services import approval_policy, quota_request_approve, quota_request_create
from core.errors import Conflict
from quotas.choices import GPU_RESOURCE
from quotas.selectors import tenant_gpu_units_by_cluster
from quotas.services import QuotaItem
from tenants.models import Tenant
from tests.approvals.conftest import file, item
from tests.approvals.test_concurrency import approve, run_together

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_approvals_on_two_clusters_do_not_pass_the_cap_together(on_postgres, world, admin2):
    approval_policy()
    # team-a at 9 A100s (weight 1) and 6 H100s (weight 2): 21 units, under a cap of 23.
    quota_request_approve(request=file(world, items=[item(limit=9)]), approver=world.admin)
    Tenant.objects.filter(pk=world.team_a.pk).update(gpu_unit_cap=Decimal(23))
    on_a100 = file(world, items=[item(limit=10)])  # +1: 22
    on_h100 = quota_request_create(
        tenant=world.team_a, cluster=world.h100, requester=world.alice, reason="more",
        items=[QuotaItem(world.h100_gpu, GPU_RESOURCE, Decimal(4), Decimal(7))], submit=True,
    )  # fmt: skip  # +2: 23

    results = run_together(approve(on_a100.pk, world.admin), approve(on_h100.pk, admin2))

    assert sorted(kind for kind, _ in results) == ["error", "ok"], results
    error = next(value for kind, value in results if kind == "error")
    assert isinstance(error, Conflict), repr(error)
    assert "above its cap of 23 GPU units" in error.message
    assert sum(tenant_gpu_units_by_cluster(tenant_id=world.team_a.pk).values()) <= 23
