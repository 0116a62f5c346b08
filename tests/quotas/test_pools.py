"""Clusters an admin marks as one pool (R22): tenants whose quotas differ between them are
flagged in words on the admin console and in the API; the pool is set in Django admin.

demo-a100 and a second A100 cluster, demo-a100-b, form the pool "a100-fleet"; team-a holds
6/10 A100s on demo-a100."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.models import Cluster, ClusterPool, ResourceFlavor
from quotas.selectors import pool_differences
from tests.conftest import seed_quota
from tests.factories import ClusterFactory, gpu_flavor
from tests.pages import logged_in, main

pytestmark = pytest.mark.django_db

URL = "/api/v1/cluster-pools/"


@pytest.fixture
def pool(world):  # type: ignore[no-untyped-def]
    twin = ClusterFactory(name="demo-a100-b", elastic_cap_fraction=Decimal("0.625"))
    twin_gpu = gpu_flavor(twin, "a100-sxm", gpus=16)  # another name, the same GPU model
    fleet = ClusterPool.objects.create(name="a100-fleet", description="the two A100 halls")
    Cluster.objects.filter(pk__in=[world.a100.pk, twin.pk]).update(pool=fleet)
    # team-b and team-c get the same on both; team-a gets less on the twin.
    seed_quota(world.team_b, twin, twin_gpu, 4, 6, actor=world.admin)
    seed_quota(world.team_c, twin, twin_gpu, 2, 4, actor=world.admin)
    seed_quota(world.team_a, twin, twin_gpu, 6, 8, actor=world.admin)
    return fleet


def test_a_tenant_whose_limits_differ_is_flagged_per_kind_of_resource(world, pool):
    found = pool_differences()
    assert {(d.tenant, d.what) for d in found} == {
        ("team-a", "NVIDIA A100-SXM4-80GB GPUs"),
        ("team-a", "CPU"),
        ("team-a", "memory"),
    }
    gpus = next(d for d in found if d.resource == "nvidia.com/gpu")
    assert gpus.message == (
        "team-a: NVIDIA A100-SXM4-80GB GPUs differ between the clusters of a100-fleet "
        "(demo-a100 6 guaranteed, 10 limit; demo-a100-b 6 guaranteed, 8 limit)."
    )
    memory = next(d for d in found if d.resource == "memory")
    assert "demo-a100 384 GiB guaranteed, 640 GiB limit" in memory.message


def test_a_tenant_missing_on_one_cluster_of_the_pool_is_flagged(world, pool):
    outsider = ClusterFactory(name="demo-a100-c")
    outsider.pool = pool
    outsider.save()
    messages = [d.message for d in pool_differences() if d.tenant == "team-b"]
    assert any("demo-a100-c none" in m for m in messages), messages


def test_clusters_outside_any_pool_are_not_compared(world, pool):
    Cluster.objects.update(pool=None)
    assert pool_differences() == []


def test_the_console_lists_the_differences_in_words(world, pool):
    page = main(logged_in(world.admin).get("/console/"))
    assert "Clusters kept as one pool" in page
    assert "a100-fleet: demo-a100, demo-a100-b" in page
    assert "3 differences between the clusters of a pool" in page
    assert (
        "team-a: NVIDIA A100-SXM4-80GB GPUs differ between the clusters of a100-fleet "
        "(demo-a100 6 guaranteed, 10 limit; demo-a100-b 6 guaranteed, 8 limit)." in page
    )


def test_the_console_says_when_every_pool_is_consistent(world, pool):
    twin = Cluster.objects.get(name="demo-a100-b")
    twin_gpu = ResourceFlavor.objects.get(cluster=twin, name="a100-sxm")
    seed_quota(world.team_a, twin, twin_gpu, 6, 10, actor=world.admin)
    page = main(logged_in(world.admin).get("/console/"))
    assert "Every tenant has the same quotas on every cluster of its pools." in page


def test_the_api_gives_each_pool_with_its_differences_to_admins_only(world, pool, api_as):
    assert api_as(world.alice).get(URL).status_code == 403
    assert api_as(None).get(URL).status_code in (401, 403)
    response = api_as(world.admin).get(URL)
    assert response.status_code == 200
    [fleet] = response.json()
    assert fleet["clusters"] == ["demo-a100", "demo-a100-b"] and fleet["consistent"] is False
    gpus = next(d for d in fleet["differences"] if d["resource"] == "nvidia.com/gpu")
    assert gpus["tenant"] == "team-a"
    assert gpus["clusters"] == [
        {"cluster": "demo-a100", "guaranteed": "6", "limit": "10"},
        {"cluster": "demo-a100-b", "guaranteed": "6", "limit": "8"},
    ]


def test_an_admin_puts_a_cluster_in_a_pool_in_django_admin(world, pool, client):
    client.force_login(world.admin)
    assert client.get("/admin/quotas/clusterpool/").status_code == 200
    listing = client.get("/admin/quotas/clusterpool/").content.decode()
    assert "demo-a100, demo-a100-b" in listing
    page = client.get(f"/admin/quotas/cluster/{world.h100.pk}/change/")
    assert page.status_code == 200 and 'name="pool"' in page.content.decode()


def test_the_pool_api_reads_pools_and_quotas_in_a_few_queries(
    world, pool, api_as, django_assert_max_num_queries
):
    admin = api_as(world.admin)
    with django_assert_max_num_queries(8):
        assert admin.get(URL).status_code == 200
