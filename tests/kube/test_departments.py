"""Department caps and fair sharing (R14) in the pure compiler: a department's quota becomes
its Cohort's resource group (pool = nominalQuota, cap through borrowingLimit), its teams'
ClusterQueues sit in that Cohort, weights become fairSharing, and every object validates
against the reference CRDs (schemas and CEL rules)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from quotas.kube.compiler import compile_cluster, compile_tenant
from quotas.kube.spec import QuotaSpec, TenantSpec
from quotas.kube.validate import validate_object
from tests.kube.test_compiler import find, medium_tenant, of_kind, seed_cluster

GI = 1024**3


def department(slug: str = "research", **changes: Any) -> TenantSpec:
    """A department: a 4-GPU pool and a cap of 40 GPUs over its teams, no namespace of its own."""
    tenant = medium_tenant(
        slug,
        namespaces=(),
        department=True,
        quotas=(QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(4), Decimal(40)),),
    )
    return replace(tenant, **changes)


def teams() -> list[TenantSpec]:
    return [
        medium_tenant("vision", parent="research"),  # 16 guaranteed, 24 limit
        medium_tenant("speech", parent="research", fair_share_weight=3),
    ]


def gpu_line(cohort: dict[str, Any]) -> dict[str, Any]:
    (group,) = cohort["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    return next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")


def test_department_quota_becomes_its_cohorts_pool_and_cap() -> None:
    objects = compile_cluster(seed_cluster(), [department(fair_share_weight=5), *teams()])
    cohort = find(objects, "Cohort", "research")
    assert cohort["spec"]["parentName"] == "portal-root"
    # Pool 4 GPUs; the subtree may take 40 - 4 - (16 + 16) = 4 more from above: never over 40.
    assert gpu_line(cohort) == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "4",
        "borrowingLimit": "4",
    }
    assert cohort["spec"]["fairSharing"] == {"weight": "5"}
    # The teams queue in the department's cohort; the department has no queue of its own.
    assert find(objects, "ClusterQueue", "vision")["spec"]["cohortName"] == "research"
    assert find(objects, "ClusterQueue", "speech")["spec"]["fairSharing"] == {"weight": "3"}
    assert "fairSharing" not in find(objects, "ClusterQueue", "vision")["spec"]
    assert not [q for q in of_kind(objects, "ClusterQueue") if q["metadata"]["name"] == "research"]
    for obj in objects:
        assert validate_object(obj) == [], obj["metadata"]["name"]


def test_a_department_with_namespaces_gets_no_queue_that_counts_its_gpus_twice() -> None:
    dept = department(namespaces=medium_tenant("research").namespaces)
    kinds = {obj["kind"] for obj in compile_tenant(seed_cluster(), dept)}
    assert "Namespace" in kinds
    assert "ClusterQueue" not in kinds and "LocalQueue" not in kinds


def test_a_cap_already_taken_by_guarantees_lends_nothing_from_above() -> None:
    tight = department(quotas=(QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(8), Decimal(30)),))
    objects = compile_cluster(seed_cluster(), [tight, *teams()])
    assert gpu_line(find(objects, "Cohort", "research"))["borrowingLimit"] == "0"


def test_nested_departments_count_the_pools_below_them() -> None:
    top = department(
        "org", quotas=(QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(2), Decimal(60)),)
    )
    research = department(parent="org")
    objects = compile_cluster(seed_cluster(), [top, research, *teams()])
    org = find(objects, "Cohort", "org")
    # 60 - 2 - (research's pool 4 + the teams' 32) = 22.
    assert gpu_line(org)["borrowingLimit"] == "22"
    assert find(objects, "Cohort", "research")["spec"]["parentName"] == "org"
    for obj in objects:
        assert validate_object(obj) == [], obj["metadata"]["name"]


def test_volcano_group_queue_takes_the_department_pool_and_cap() -> None:
    cluster = seed_cluster(has_kueue=False, has_volcano=True, volcano_hierarchy=True)
    objects = compile_cluster(cluster, [department(), *teams()])
    group = find(objects, "Queue", "research-group")
    assert group["spec"]["deserved"]["nvidia.com/gpu"] == "36"  # 16 + 16 + the pool of 4
    assert group["spec"]["capability"]["nvidia.com/gpu"] == "40"  # the cap, not 24 + 24 + 40
    assert find(objects, "Queue", "vision")["spec"]["parent"] == "research-group"
    assert not [q for q in of_kind(objects, "Queue") if q["metadata"]["name"] == "research"]
    for obj in objects:
        assert validate_object(obj) == [], obj["metadata"]["name"]


def test_department_pools_are_summed_in_one_pass_over_the_tenants(monkeypatch: Any) -> None:
    """Each tenant's guarantees reach the departments above it in one pass: a scan of every
    tenant per department made the compile quadratic (10,000 tenants in 1,000 departments spent
    a third of the no-op reconcile there). 40 departments of 5 teams each, nested 2 deep."""
    from quotas.kube import names

    calls = [0]
    real = names.tenant_cohort

    def counted(*args: Any, **kwargs: Any) -> str:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(names, "tenant_cohort", counted)
    tenants: list[TenantSpec] = [department("org")]
    for d in range(40):
        tenants.append(department(f"dept-{d}", parent="org"))
        tenants += [medium_tenant(f"team-{d}-{t}", parent=f"dept-{d}") for t in range(5)]
    objects = compile_cluster(seed_cluster(), tenants)
    # The tree, the queues and the pools each look a tenant's cohort up a bounded number of
    # times (about 3 per tenant), not once per tenant and department (40 x 241 = 9,640).
    assert calls[0] <= 6 * len(tenants)
    # Each team holds 16 guaranteed GPUs: a department's cap of 40 minus its pool of 4 and its
    # teams' 80 lends nothing from above; org's subtree is 40 pools of 4 and 200 teams of 16.
    assert gpu_line(find(objects, "Cohort", "dept-7"))["borrowingLimit"] == "0"
    assert gpu_line(find(objects, "Cohort", "org"))["borrowingLimit"] == "0"
