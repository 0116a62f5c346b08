"""The number of SQL queries per request does not grow with tenants, flavors, clusters or page
size (issue 2, "Speed"): list and dashboard endpoints read in a constant number of queries."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from approvals.services import approval_policy
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE
from quotas.models import Cluster, ResourceFlavor, TierTemplate
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.choices import MembershipRole
from tenants.models import Tenant, User
from tenants.services import api_token_create, membership_set, tenant_create
from tests.factories import ClusterFactory, gpu_flavor
from tests.pages import fire, use_now


def queries(client, url: str) -> int:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as context:
        response = client.get(url)
    assert response.status_code == 200, response.content
    return len(context.captured_queries)


def roomy_cluster(name: str, flavors: int = 4) -> tuple[Cluster, list[ResourceFlavor]]:
    cluster = ClusterFactory(
        name=name, elastic_cap_fraction=Decimal(1), allow_guarantee_overcommit=True
    )
    return cluster, [gpu_flavor(cluster, f"gpu-{i}", gpus=1000) for i in range(flavors)]


def write_quotas(tenant: Tenant, cluster: Cluster, flavors: list[ResourceFlavor]) -> None:
    quota_set_write(
        tenant=tenant,
        cluster=cluster,
        items=[
            item
            for flavor in flavors
            for item in (
                QuotaItem(flavor, GPU_RESOURCE, Decimal(2), Decimal(4)),
                QuotaItem(flavor, CPU_RESOURCE, Decimal(16), Decimal(32)),
            )
        ],
        scheduling=SchedulingQuotas(max_running_jobs=5),
        actor=None,
        tier=TierTemplate.objects.get(name="large"),  # shown on pages and in the API
    )


def grow(world, *, tenants: int, lead: User | None = None) -> None:  # type: ignore[no-untyped-def]
    """``tenants`` more tenants, each with quotas on 4 flavors of a new cluster."""
    cluster, flavors = roomy_cluster("grown")
    for i in range(tenants):
        tenant = tenant_create(slug=f"grown-{i:02d}", display_name=f"Grown {i}", actor=None)
        write_quotas(tenant, cluster, flavors)
        if lead is not None:
            membership_set(tenant=tenant, user=lead, role=MembershipRole.LEAD, actor=None)


def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_tenant_list_queries_do_not_grow_with_tenants_or_page_size(world):
    client = api(world.admin)
    with_3 = queries(client, "/api/v1/tenants/")
    grow(world, tenants=30)
    with_33 = queries(client, "/api/v1/tenants/")
    page_of_10 = queries(client, "/api/v1/tenants/?page_size=10")
    page_of_50 = queries(client, "/api/v1/tenants/?page_size=50")
    filtered = queries(client, "/api/v1/tenants/?search=grown&state=active")
    assert with_3 == with_33 == page_of_10 == page_of_50 == filtered
    assert with_3 <= 3  # count, page, namespaces


def test_tenant_list_queries_are_constant_for_a_lead_of_many_tenants(world):
    client = api(world.alice)
    with_1 = queries(client, "/api/v1/tenants/")
    grow(world, tenants=30, lead=world.alice)
    assert client.get("/api/v1/tenants/").json()["count"] == 31
    assert queries(client, "/api/v1/tenants/") == with_1
    assert queries(client, "/api/v1/tenants/?page_size=10") == with_1


def test_tenant_list_queries_are_constant_with_token_authentication(world):
    _, secret = api_token_create(user=world.admin)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    client.get("/api/v1/me/")  # the first use records last_used_at; later ones do not write
    with_3 = queries(client, "/api/v1/tenants/")
    grow(world, tenants=30)
    assert queries(client, "/api/v1/tenants/?page_size=50") == with_3
    assert with_3 <= 4  # the token, then as above


def test_tenant_quotas_queries_do_not_grow_with_flavors_or_clusters(world):
    client = api(world.alice)
    quota_set = world.team_a.quota_sets.get(cluster=world.a100)
    assert quota_set.quotas.values("flavor").distinct().count() == 1
    with_2_clusters = queries(client, "/api/v1/tenants/team-a/quotas/")
    for n in range(3):
        cluster, flavors = roomy_cluster(f"extra-{n}", flavors=4)
        write_quotas(world.team_a, cluster, flavors)
    body = client.get("/api/v1/tenants/team-a/quotas/").json()
    assert body["count"] == 5
    assert sum(len(qs["items"]) for qs in body["results"]) == 3 + 3 + 3 * 4 * 2
    assert queries(client, "/api/v1/tenants/team-a/quotas/") == with_2_clusters
    assert with_2_clusters <= 3  # tenant, quota sets, quota items


@pytest.mark.parametrize("persona", ["admin", "alice"])
def test_the_my_tenants_page_queries_are_constant(world, persona):
    client = Client()
    client.force_login(getattr(world, persona))
    use_now(world.team_a, world.a100_gpu, 3)
    fire(world.team_a, world.a100_gpu)
    small = queries(client, "/")
    grow(world, tenants=30, lead=world.alice)
    for n in range(2):
        cluster, flavors = roomy_cluster(f"extra-{n}", flavors=4)
        write_quotas(world.team_a, cluster, flavors)
        for flavor in flavors:
            use_now(world.team_a, flavor, 2)
            fire(world.team_a, flavor)
    for tenant in Tenant.objects.filter(slug__startswith="grown-"):
        flavor = tenant.quota_sets.get().quotas.first().flavor
        use_now(tenant, flavor, 1)
        fire(tenant, flavor)
    big = queries(client, "/")
    assert big == small
    # session, user, tenants, quota sets, use now, flavor names, firing alerts (and the inbox)
    assert small <= 8, small
    page = client.get("/").content.decode()
    assert "grown-29" in page
    assert "extra-1" in page
    assert "2 of 4 GPUs" in page  # the use shown is the one counted
    assert "9 firing alerts" in page  # team-a: one on the A100, eight on the extra clusters


def test_the_tenant_page_queries_are_constant(world):
    client = Client()
    client.force_login(world.alice)
    small = queries(client, "/tenants/team-a/")
    for n in range(3):
        cluster, flavors = roomy_cluster(f"extra-{n}", flavors=4)
        write_quotas(world.team_a, cluster, flavors)
    assert queries(client, "/tenants/team-a/") == small


def test_the_tenant_page_reads_nothing_twice(world):
    """Its parts share what the page read once (the namespaces, the teams, the caller's role,
    the tenant's own run time), for a lead and for a platform admin."""
    for user in (world.alice, world.admin):
        client = Client()
        client.force_login(user)
        client.get("/tenants/team-a/")
        with CaptureQueriesContext(connection) as context:
            assert client.get("/tenants/team-a/").status_code == 200
        statements = [(q["sql"]) for q in context.captured_queries]
        repeated = sorted({sql for sql in statements if statements.count(sql) > 1})
        assert repeated == [], repeated
        assert len(statements) <= 15, statements


def _captured(client, method: str, url: str, body: dict, status: int) -> list[str]:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as context:
        response = getattr(client, method)(url, body, format="json")
    assert response.status_code == status, response.content
    return [q["sql"] for q in context.captured_queries]


def _filing(world, guaranteed: int) -> dict:  # type: ignore[no-untyped-def]
    return {"tenant": "team-a", "cluster": "demo-a100", "reason": "more", "submit": True,
            "items": [{"flavor": "a100-80gb", "resource": GPU_RESOURCE,
                       "guaranteed": guaranteed, "limit": 10}]}  # fmt: skip


def test_filing_a_request_checks_its_rules_once(world):
    """Filed and submitted in one call, the rules run once (they read the capacities in force
    once each run): not again for the submit, nor for the answer, which shows that check."""
    approval_policy()  # created once, on first use (the onboarding's approvals no longer weigh)
    sql = _captured(api(world.alice), "post", "/api/v1/quota-requests/", _filing(world, 7), 201)
    assert sum('FROM "quotas_flavorresource"' in q for q in sql) == 1
    assert len(sql) <= 30, len(sql)  # 50 when it checked three times


def test_an_approval_someone_else_made_first_answers_409_from_a_few_queries(world):
    """Two admins race for one request: the loser's 409 reads the request and its decisions,
    not its items, quotas and checks (admins approving from a queue hit this often)."""
    filed = (
        api(world.alice).post("/api/v1/quota-requests/", _filing(world, 7), format="json").json()
    )
    url = f"/api/v1/quota-requests/{filed['id']}/approve/"
    assert api(world.admin).post(url, {}, format="json").status_code == 200
    other = User.objects.create_user("admin-2", is_platform_admin=True)
    sql = _captured(api(other), "post", url, {}, 409)
    assert len(sql) <= 5, sql
    assert not any('FROM "quotas_' in q for q in sql)
