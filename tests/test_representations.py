"""The hot read paths write their JSON by hand (TenantOutput, QuotaSetOutput); the OpenAPI
document is generated from the declared fields. These tests keep the two in step."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator


@pytest.fixture(scope="module")
def components() -> dict:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return schema["components"]["schemas"]


def _required_and_declared(component: dict) -> set[str]:
    return set(component["properties"])


def test_tenant_output_matches_its_schema(world, api_as, components):
    body = api_as(world.admin).get("/api/v1/tenants/").json()
    for tenant in body["results"]:
        assert set(tenant) == _required_and_declared(components["TenantOutput"])
    detail = api_as(world.admin).get("/api/v1/tenants/team-a/").json()
    assert set(detail) == _required_and_declared(components["TenantOutput"])
    assert detail["namespaces"] == ["team-a-inference", "team-a-training"]
    assert detail["created_at"].endswith("Z")


def test_quota_set_output_matches_its_schema(world, api_as, components):
    body = api_as(world.alice).get("/api/v1/tenants/team-a/quotas/").json()
    assert body["count"] == 2
    for quota_set in body["results"]:
        assert set(quota_set) == _required_and_declared(components["QuotaSetOutput"])
        assert quota_set["items"], "every demo quota set has items"
        for item in quota_set["items"]:
            assert set(item) == _required_and_declared(components["QuotaItemOutput"])


def test_a_quota_set_without_items_is_still_listed(world, api_as):
    from quotas.services import SchedulingQuotas, quota_set_write

    quota_set_write(
        tenant=world.team_c,
        cluster=world.a100,
        items=[],
        scheduling=SchedulingQuotas(max_pods=3),
        actor=world.admin,
    )
    body = api_as(world.admin).get("/api/v1/tenants/team-c/quotas/").json()
    a100 = next(qs for qs in body["results"] if qs["cluster"] == "demo-a100")
    assert a100["items"] == [] and a100["max_pods"] == 3 and a100["generation"] == 2
    assert a100["guaranteed_gpu_units"] == 0.0


def test_pages_link_to_each_other_and_count_everything(world, api_as):
    admin = api_as(world.admin)
    first = admin.get("/api/v1/tenants/?page_size=2").json()
    assert first["count"] == 3 and len(first["results"]) == 2 and first["previous"] is None
    second = admin.get(first["next"]).json()
    assert [t["slug"] for t in second["results"]] == ["team-c"] and second["next"] is None
    assert admin.get(second["previous"]).json()["results"] == first["results"]
    assert admin.get("/api/v1/tenants/?page=3&page_size=2").status_code == 404
    # Not a page number at all is bad input naming the parameter; past the end is not found.
    assert admin.get("/api/v1/tenants/?page=0").json()["fields"] == {
        "page": ["page must be a whole number of 1 or more (digits 0-9, at most 18 of them)."]
    }
    assert admin.get("/api/v1/tenants/?page=x").status_code == 400
    empty = api_as(world.admin).get("/api/v1/tenants/?search=nothing-like-this").json()
    assert empty == {"count": 0, "next": None, "previous": None, "results": []}
