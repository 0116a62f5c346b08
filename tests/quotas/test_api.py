"""The quotas part of /api/v1/: clusters, flavors, tier templates and a tenant's quotas."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.choices import GPU_RESOURCE, mig_resource
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.services import tenant_create
from tests.factories import ClusterFactory, gpu_flavor


def results(response) -> list[dict]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return response.json()["results"]


# --- clusters ------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["admin", "alice", "bob", "victor"])
def test_every_signed_in_user_lists_clusters(world, api_as, persona):
    clusters = results(api_as(getattr(world, persona)).get("/api/v1/clusters/"))
    assert [c["name"] for c in clusters] == ["demo-a100", "demo-h100"]
    a100 = clusters[0]
    assert a100["elastic_cap_fraction"] == "0.625"
    assert a100["allow_guarantee_overcommit"] is False
    assert a100["has_kueue"] is True
    assert "kubeconfig_path" not in a100


def test_cluster_detail_sums_every_tenants_guarantees_against_capacity(world, api_as):
    response = api_as(world.alice).get("/api/v1/clusters/demo-a100/")
    assert response.status_code == 200
    allocations = {(a["flavor"], a["resource"]): a for a in response.json()["allocations"]}
    # team-a 6, team-b 4, team-c 2 guaranteed A100s of 16; CPU and memory at 8 and 64Gi per GPU
    assert allocations[("a100-80gb", "nvidia.com/gpu")] == {
        "flavor": "a100-80gb",
        "resource": "nvidia.com/gpu",
        "capacity": "16",
        "fleet": None,  # whole GPUs: the number an admin entered
        "not_counted": "",  # no node agent's report left out of it
        "guaranteed": "12",
        "free": "4",
        "shares_per_gpu": None,  # whole GPUs, not time-sliced shares
    }
    assert allocations[("a100-80gb", "cpu")]["guaranteed"] == "96"
    assert allocations[("a100-80gb", "cpu")]["capacity"] == "256"
    assert allocations[("a100-80gb", "memory")]["capacity"] == "2Ti"
    assert allocations[("a100-80gb", "memory")]["guaranteed"] == "768Gi"
    assert allocations[("a100-80gb", "memory")]["free"] == "1280Gi"


def test_cluster_detail_lists_flavors_nobody_holds_with_zero(world, api_as):
    body = api_as(world.admin).get("/api/v1/clusters/demo-h100/").json()
    allocations = {(a["flavor"], a["resource"]): a for a in body["allocations"]}
    assert allocations[("h100-80gb", "nvidia.com/gpu")]["guaranteed"] == "12"  # 3 x small tier
    mig = allocations[("h100-mig-1g-10gb", "nvidia.com/mig-1g.10gb")]
    assert (mig["capacity"], mig["guaranteed"], mig["free"]) == ("14", "0", "14")


def test_an_unknown_cluster_is_404(world, api_as):
    response = api_as(world.admin).get("/api/v1/clusters/nowhere/")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


# --- flavors -------------------------------------------------------------------------------


def test_flavors_list_with_resources_and_weights(world, api_as):
    flavors = results(api_as(world.carol).get("/api/v1/flavors/"))
    assert [(f["cluster"], f["name"]) for f in flavors] == [
        ("demo-a100", "a100-80gb"),
        ("demo-h100", "h100-80gb"),
        ("demo-h100", "h100-mig-1g-10gb"),
    ]
    h100 = flavors[1]
    assert h100["kind"] == "gpu"
    assert h100["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert h100["gpu_weight"] == 2.0
    assert h100["node_labels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100["resources"] == [
        {"resource": "cpu", "capacity": "256"},
        {"resource": "memory", "capacity": "2Ti"},
        {"resource": "nvidia.com/gpu", "capacity": "16"},
    ]
    mig = flavors[2]
    assert (mig["kind"], mig["mig_profile"]) == ("mig", "1g.10gb")
    assert mig["resources"] == [{"resource": "nvidia.com/mig-1g.10gb", "capacity": "14"}]


def test_flavors_filter_by_cluster_and_kind(world, api_as):
    client = api_as(world.alice)
    by_cluster = results(client.get("/api/v1/flavors/?cluster=demo-h100"))
    assert [f["name"] for f in by_cluster] == ["h100-80gb", "h100-mig-1g-10gb"]
    by_kind = results(client.get("/api/v1/flavors/?kind=gpu"))
    assert [f["name"] for f in by_kind] == ["a100-80gb", "h100-80gb"]
    both = results(client.get("/api/v1/flavors/?cluster=demo-h100&kind=mig"))
    assert [f["name"] for f in both] == ["h100-mig-1g-10gb"]
    assert results(client.get("/api/v1/flavors/?cluster=nowhere")) == []


def test_flavors_filter_with_an_unknown_kind_is_400(world, api_as):
    response = api_as(world.alice).get("/api/v1/flavors/?kind=fpga")
    assert response.status_code == 400
    assert "kind" in response.json()["fields"]


def test_flavor_detail_by_id(world, api_as):
    response = api_as(world.alice).get(f"/api/v1/flavors/{world.a100_gpu.pk}/")
    assert response.status_code == 200
    assert response.json()["name"] == "a100-80gb"
    assert api_as(world.alice).get("/api/v1/flavors/999999/").status_code == 404


# --- tier templates ------------------------------------------------------------------------


def test_tier_templates_are_seeded_with_r9s_numbers(world, api_as):
    tiers = {t["name"]: t for t in results(api_as(world.bob).get("/api/v1/tier-templates/"))}
    assert list(tiers) == ["small", "medium", "large"]
    numbers = {
        name: (
            t["gpus_guaranteed"],
            t["cpu_guaranteed"],
            t["memory_guaranteed"],
            t["max_running_jobs"],
        )
        for name, t in tiers.items()
    }
    assert numbers == {
        "small": (4, "8", "64Gi", 5),
        "medium": (16, "32", "256Gi", 20),
        "large": (64, "128", "1Ti", 50),
    }


def test_medium_tier_borrows_up_to_24_gpus(world, api_as):
    """R6: nominal 16 + borrowing 8 = peak 24."""
    medium = api_as(world.alice).get("/api/v1/tier-templates/medium/").json()
    assert medium["gpus_guaranteed"] == 16
    assert medium["gpus_limit"] == 24
    assert medium["cpu_limit"] == "48"
    assert medium["memory_limit"] == "384Gi"
    assert medium["storage"] == "5Ti"


def test_an_unknown_tier_is_404(world, api_as):
    assert api_as(world.alice).get("/api/v1/tier-templates/huge/").status_code == 404


def test_clusters_and_flavors_are_read_only_in_the_api(world, api_as, subtests):
    """Clusters and flavors are managed in Django admin; tier templates have their own tests."""
    admin = api_as(world.admin)
    for url in ("/api/v1/clusters/", "/api/v1/flavors/"):
        with subtests.test(url):
            response = admin.post(url, {"name": "new"}, format="json")
            assert response.status_code == 405
            assert response.json()["code"] == "method_not_allowed"


# --- a tenant's quotas ---------------------------------------------------------------------


def quota_sets(client, slug: str = "team-a") -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {qs["cluster"]: qs for qs in results(client.get(f"/api/v1/tenants/{slug}/quotas/"))}


def items(quota_set: dict) -> dict[str, dict]:
    return {f"{i['flavor']}/{i['resource']}": i for i in quota_set["items"]}


@pytest.mark.parametrize("persona", ["admin", "alice", "carol", "victor"])
def test_tenant_quotas_per_cluster_with_normalised_gpu_units(world, api_as, persona):
    sets = quota_sets(api_as(getattr(world, persona)))
    assert list(sets) == ["demo-a100", "demo-h100"]
    h100 = sets["demo-h100"]
    # the small tier on H100s, which weigh 2: 4 guaranteed GPUs are 8 units, 6 are 12
    assert h100["tier"] == "small"
    assert h100["guaranteed_gpu_units"] == 8.0
    assert h100["limit_gpu_units"] == 12.0
    gpu = items(h100)["h100-80gb/nvidia.com/gpu"]
    assert (gpu["guaranteed"], gpu["limit"], gpu["borrowing_limit"]) == ("4", "6", "2")
    assert (gpu["guaranteed_gpu_units"], gpu["limit_gpu_units"]) == (8.0, 12.0)
    assert gpu["lending_limit"] is None
    assert gpu["flavor_kind"] == "gpu"
    a100 = sets["demo-a100"]
    assert (a100["guaranteed_gpu_units"], a100["limit_gpu_units"]) == (6.0, 10.0)
    assert a100["tier"] is None


def test_tenant_quotas_are_kubernetes_quantity_strings(world, api_as):
    sets = quota_sets(api_as(world.alice))
    h100 = sets["demo-h100"]
    memory = items(h100)["h100-80gb/memory"]
    assert (memory["guaranteed"], memory["limit"], memory["borrowing_limit"]) == (
        "64Gi",
        "96Gi",
        "32Gi",
    )
    cpu = items(h100)["h100-80gb/cpu"]
    assert (cpu["guaranteed"], cpu["limit"]) == ("8", "12")
    assert (cpu["guaranteed_gpu_units"], cpu["limit_gpu_units"]) == (0.0, 0.0)
    assert h100["storage"] == "1Ti"
    assert (h100["max_running_jobs"], h100["max_queued_jobs"], h100["max_pods"]) == (5, 20, 20)
    assert h100["max_pvcs"] == 10
    # onboarding wrote generation 1; adding carol and victor pushed the set again (RBAC)
    assert h100["generation"] == 3
    a100_memory = items(sets["demo-a100"])["a100-80gb/memory"]
    assert (a100_memory["guaranteed"], a100_memory["limit"]) == ("384Gi", "640Gi")


def test_units_add_up_over_whole_gpus_and_mig_slices(world, api_as):
    quota_set_write(
        tenant=world.team_b,
        cluster=world.h100,
        actor=world.admin,
        items=[
            QuotaItem(world.h100_gpu, GPU_RESOURCE, Decimal(2), Decimal(4)),
            QuotaItem(
                world.h100_mig,
                mig_resource("1g.10gb"),
                Decimal(7),
                Decimal(7),
                lending_limit=Decimal(3),
            ),
        ],
        scheduling=SchedulingQuotas(),
    )
    h100 = quota_sets(api_as(world.bob), "team-b")["demo-h100"]
    mig = items(h100)["h100-mig-1g-10gb/nvidia.com/mig-1g.10gb"]
    assert mig["guaranteed_gpu_units"] == pytest.approx(2.002)  # 7 x 0.286
    assert mig["lending_limit"] == "3"
    assert mig["borrowing_limit"] == "0"
    assert h100["guaranteed_gpu_units"] == pytest.approx(4 + 2.002)
    assert h100["limit_gpu_units"] == pytest.approx(8 + 2.002)
    assert h100["generation"] == 2
    assert h100["storage"] is None
    assert h100["max_running_jobs"] is None


def test_a_tenant_without_quotas_has_an_empty_list(world, api_as):
    cluster = ClusterFactory(name="empty")
    gpu_flavor(cluster, "t4", gpus=4)
    tenant_create(slug="fresh", display_name="Fresh", actor=world.admin)
    assert results(api_as(world.admin).get("/api/v1/tenants/fresh/quotas/")) == []


def test_quotas_do_not_change_through_the_api(world, api_as, subtests):
    admin = api_as(world.admin)
    before = quota_sets(admin)["demo-h100"]["generation"]
    for method in ("post", "put", "patch", "delete"):
        with subtests.test(method):
            response = getattr(admin, method)(
                "/api/v1/tenants/team-a/quotas/", {"items": []}, format="json"
            )
            assert response.status_code == 405
    assert quota_sets(admin)["demo-h100"]["generation"] == before
