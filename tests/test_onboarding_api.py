"""POST /api/v1/tenants/: onboarding a tenant from a tier on a cluster (DESIGN flow 1).

Every bad input answers 400 naming the field and the reason, and changes nothing.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from approvals.models import QuotaChangeRequest
from quotas.models import Quota, QuotaSet, SyncOutbox
from tenants.models import AuditEvent, Membership, Namespace, Tenant
from tests.factories import TenantFactory

URL = "/api/v1/tenants/"


def valid(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "slug": "team-d",
        "display_name": "Team D",
        "tier": "small",
        "cluster": "demo-h100",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def counts() -> tuple[int, ...]:
    return tuple(
        model.objects.count()
        for model in (Tenant, Namespace, Membership, QuotaSet, Quota, AuditEvent)
    )


def test_admin_onboards_a_tenant_from_a_tier(world, api_as):
    response = api_as(world.admin).post(
        URL,
        valid(
            description="Speech recognition",
            leads=["carol"],
            cohort="research",
            default_priority="experiment",
        ),
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slug"] == "team-d"
    assert body["namespaces"] == ["team-d-inference", "team-d-training"]
    assert (body["cohort"], body["default_priority"]) == ("research", "experiment")

    tenant = Tenant.objects.get(slug="team-d")
    assert tenant.description == "Speech recognition"
    assert list(tenant.memberships.values_list("user__username", "role")) == [("carol", "lead")]
    quota_set = QuotaSet.objects.get(tenant=tenant)
    assert quota_set.cluster == world.h100
    assert quota_set.tier == world.small
    assert quota_set.generation == 1
    gpu = quota_set.quotas.get(resource="nvidia.com/gpu")
    assert (gpu.flavor, gpu.guaranteed, gpu.limit) == (world.h100_gpu, 4, 6)
    assert quota_set.max_running_jobs == 5

    # the lead sees it at once, with the tier's quotas in normalised units
    quotas = api_as(world.carol).get("/api/v1/tenants/team-d/quotas/").json()["results"]
    assert [(q["cluster"], q["guaranteed_gpu_units"]) for q in quotas] == [("demo-h100", 8.0)]

    actions = set(AuditEvent.objects.filter(tenant=tenant).values_list("action", flat=True))
    assert {"tenant.created", "namespace.created", "membership.added", "quota_set.written"} <= (
        actions
    )
    onboarded = AuditEvent.objects.get(action="tenant.onboarded", tenant=tenant)
    assert onboarded.actor == world.admin
    request = QuotaChangeRequest.objects.get(tenant=tenant)
    assert onboarded.after == {
        "tier": "small",
        "cluster": "demo-h100",
        "generation": 1,
        "request": request.pk,
    }
    # onboarding is an auto-approved request filed by the system, so the trail has no gap
    assert (request.status, request.source, request.approved_generation) == (
        "approved",
        "system",
        1,
    )
    assert request.requester == world.admin and request.items.count() == 3
    assert SyncOutbox.objects.filter(tenant=tenant, generation=1, completed_at=None).exists()


def test_onboarding_with_a_named_flavor_and_a_parent(world, api_as):
    org = TenantFactory(slug="org")
    response = api_as(world.admin).post(
        URL,
        valid(cluster="demo-a100", gpu_flavor="a100-80gb", parent="org", tier="small"),
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["parent"] == "org"
    tenant = Tenant.objects.get(slug="team-d")
    assert tenant.parent == org
    assert QuotaSet.objects.get(tenant=tenant).quotas.get(resource="nvidia.com/gpu").flavor == (
        world.a100_gpu
    )


BAD_INPUT = [
    # slug: not a DNS-1123 label, too long, taken
    pytest.param(valid(slug="Team_A"), "slug", "DNS-1123", id="slug-uppercase-underscore"),
    pytest.param(valid(slug="-a"), "slug", "DNS-1123", id="slug-leading-dash"),
    pytest.param(valid(slug="a-"), "slug", "DNS-1123", id="slug-trailing-dash"),
    pytest.param(valid(slug="a" * 41), "slug", "40", id="slug-too-long"),
    pytest.param(valid(slug="team-a"), "slug", "already exists", id="slug-taken"),
    pytest.param(valid(slug=""), "slug", "blank", id="slug-blank"),
    pytest.param(valid(slug=None), "slug", "required", id="slug-missing"),
    pytest.param(valid(slug=["team-d"]), "slug", "valid string", id="slug-not-a-string"),
    # tier, cluster, flavor
    pytest.param(valid(tier="huge"), "tier", "No tier 'huge'", id="tier-unknown"),
    pytest.param(valid(tier=None), "tier", "required", id="tier-missing"),
    pytest.param(valid(cluster="nowhere"), "cluster", "No cluster 'nowhere'", id="cluster-unknown"),
    pytest.param(
        valid(gpu_flavor="a100-80gb"),
        "gpu_flavor",
        "flavor 'a100-80gb' belongs to cluster 'demo-a100', not 'demo-h100'",
        id="flavor-of-another-cluster",
    ),
    pytest.param(
        valid(gpu_flavor="v100"), "gpu_flavor", "No gpu flavor 'v100'", id="flavor-unknown"
    ),
    pytest.param(
        valid(gpu_flavor="h100-mig-1g-10gb"), "gpu_flavor", "not whole GPUs", id="flavor-is-mig"
    ),
    pytest.param(
        valid(tier="medium"), "tier", "guaranteed 16 does not fit", id="tier-beyond-capacity"
    ),
    # everything else
    pytest.param(valid(parent="no-such-org"), "parent", "No parent", id="parent-unknown"),
    pytest.param(valid(leads=["nobody"]), "leads", "No leads 'nobody'", id="lead-unknown"),
    pytest.param(valid(leads="alice"), "leads", "list", id="leads-not-a-list"),
    pytest.param(valid(cohort="Big Cohort"), "cohort", "DNS-1123", id="cohort-bad"),
    pytest.param(valid(default_priority="urgent"), "default_priority", "valid", id="priority-bad"),
    pytest.param(valid(display_name="   "), "display_name", "blank", id="display-name-blank"),
    pytest.param(valid(gpus=-1), "gpus", "Unknown field", id="unknown-field-gpus"),
    pytest.param(
        valid(quota={"guaranteed": "12GB"}), "quota", "Unknown field", id="unknown-field-quota"
    ),
    pytest.param(valid(tier=["small"]), "tier", "valid string", id="tier-not-a-string"),
]


def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(world, api_as, subtests):
    admin = api_as(world.admin)
    for case in BAD_INPUT:
        body, field, reason = case.values
        with subtests.test(case.id):
            before = counts()
            response = admin.post(URL, body, format="json")
            assert response.status_code == 400, response.content
            error = response.json()
            assert error["code"] == "invalid"
            assert field in error["fields"], error
            assert any(reason in message for message in error["fields"][field]), error
            assert error["detail"]
            assert counts() == before
            assert not Tenant.objects.filter(slug="team-d").exists()


def test_a_tier_that_does_not_fit_names_every_broken_rule(world, api_as):
    response = api_as(world.admin).post(URL, valid(tier="large"), format="json")
    assert response.status_code == 400
    messages = response.json()["fields"]["tier"]
    assert (
        "nvidia.com/gpu on h100-80gb: guaranteed 64 does not fit: other tenants hold 12 of 16 NVIDIA H100 80GB HBM3 on demo-h100 and the cluster does not allow overcommitting guarantees"
        in messages
    )
    assert (
        "limit 96 exceeds the elastic cap of 8 (50% of 16 NVIDIA H100 80GB HBM3 on demo-h100)"
        in messages
    )
    assert (
        "limit 1536Gi exceeds the elastic cap of 1Ti (50% of 2Ti memory in h100-80gb on demo-h100)"
        in messages
    )
    assert response.json()["detail"].startswith("tier 'large' does not fit on demo-h100: ")


def test_a_body_that_is_not_an_object_is_a_400(world, api_as):
    before = counts()
    for body in ([valid()], "team-d", 42):
        response = api_as(world.admin).post(URL, body, format="json")
        assert response.status_code == 400
        assert response.json()["fields"]
    assert counts() == before


@pytest.mark.parametrize("persona", ["alice", "carol", "victor", "bob"])
def test_leads_and_members_cannot_onboard(world, api_as, persona):
    before = counts()
    response = api_as(getattr(world, persona)).post(URL, valid(), format="json")
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert counts() == before


def test_anonymous_cannot_onboard(world):
    before = counts()
    response = APIClient().post(URL, valid(), format="json")
    assert response.status_code == 401
    assert counts() == before


def test_the_same_slug_twice_is_refused_the_second_time(world, api_as):
    admin = api_as(world.admin)
    assert admin.post(URL, valid(), format="json").status_code == 201
    before = counts()
    again = admin.post(URL, valid(display_name="Another D"), format="json")
    assert again.status_code == 400
    assert "already exists" in again.json()["fields"]["slug"][0]
    assert counts() == before
