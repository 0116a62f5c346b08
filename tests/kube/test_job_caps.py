"""The job caps in the compiler's output (issue 37, item 2): running plus queued as a count of
Kueue Workloads (every managed job, whatever its kind) that holds across a tenant's
namespaces, running as admitted pods in the tenant's ClusterQueue, and batch/v1 Jobs only
where the cluster has no Kueue."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from quotas.kube.compiler import compile_cluster, compile_cluster_wide, compile_tenant
from quotas.kube.job_caps import JOB_SLOTS_FLAVOR, WORKLOAD_COUNT_KEY
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from quotas.kube.validate import validate_object

GI = 1024**3
Obj = dict[str, Any]


def _cluster(**changes: Any) -> ClusterSpec:
    gpu = FlavorSpec(
        "h100", "gpu", {"nvidia.com/gpu": Decimal(16), "cpu": Decimal(256), "memory": Decimal(GI)}
    )
    return ClusterSpec(name="demo", flavors=(gpu,), **changes)


def _tenant(
    running: int | None = 5,
    queued: int | None = 20,
    namespaces: tuple[NamespaceSpec, ...] = (NamespaceSpec("team-a"),),
) -> TenantSpec:
    return TenantSpec(
        slug="team-a",
        generation=3,
        namespaces=namespaces,
        quotas=(QuotaSpec("h100", "nvidia.com/gpu", Decimal(4), Decimal(6)),),
        max_running_jobs=running,
        max_queued_jobs=queued,
    )


def _find(objects: list[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
            return obj
    raise AssertionError(f"no {kind} {namespace}/{name}")


def _hard(objects: list[Obj], namespace: str) -> dict[str, str]:
    return dict(_find(objects, "ResourceQuota", "gpu-portal-quota", namespace)["spec"]["hard"])


def test_running_plus_queued_count_every_workload_and_running_counts_admitted_pods() -> None:
    objects = compile_cluster(_cluster(), [_tenant(running=5, queued=20)])

    hard = _hard(objects, "team-a")
    assert hard[WORKLOAD_COUNT_KEY] == "25"
    assert "count/jobs.batch" not in hard  # a JobSet's child Jobs are not jobs of their own
    queue = _find(objects, "ClusterQueue", "team-a")
    compute, slots = queue["spec"]["resourceGroups"]
    assert "pods" not in compute["coveredResources"]
    assert slots == {
        "coveredResources": ["pods"],
        "flavors": [
            {
                "name": JOB_SLOTS_FLAVOR,
                "resources": [
                    {
                        "name": "pods",
                        "nominalQuota": "5",
                        "borrowingLimit": "0",
                        "lendingLimit": "0",
                    }
                ],
            }
        ],
    }
    flavor = _find(objects, "ResourceFlavor", JOB_SLOTS_FLAVOR)
    assert flavor["spec"] == {}  # no node labels or taints: it places nothing
    for obj in objects:
        assert validate_object(obj) == [], obj["kind"]


def test_the_sum_is_divided_among_the_namespaces_so_it_holds_across_them() -> None:
    by_share = (NamespaceSpec("team-a-training", share=Decimal(70)), NamespaceSpec("team-a-inference", share=Decimal(30)))  # fmt: skip
    objects = compile_tenant(_cluster(), _tenant(namespaces=by_share))
    parts = [_hard(objects, ns.name)[WORKLOAD_COUNT_KEY] for ns in by_share]
    # 17.5 and 7.5: the remainder to the first namespace by name (team-a-inference).
    assert parts == ["17", "8"]
    # Under Kueue enforcement the GPU cap stays whole in each namespace: the queue adds them up.
    assert {_hard(objects, ns.name)["requests.nvidia.com/gpu"] for ns in by_share} == {"6"}

    even = (NamespaceSpec("a-one"), NamespaceSpec("a-two"), NamespaceSpec("a-three"))
    objects = compile_tenant(_cluster(), _tenant(running=1, queued=1, namespaces=even))
    parts_by_name = {ns.name: _hard(objects, ns.name)[WORKLOAD_COUNT_KEY] for ns in even}
    assert parts_by_name == {"a-one": "1", "a-three": "1", "a-two": "0"}  # 2 in all, by name


def test_without_a_running_cap_nothing_caps_the_sum_and_no_slots_are_written() -> None:
    objects = compile_cluster(_cluster(), [_tenant(running=None, queued=20)])
    assert WORKLOAD_COUNT_KEY not in _hard(objects, "team-a")
    (compute,) = _find(objects, "ClusterQueue", "team-a")["spec"]["resourceGroups"]
    assert "pods" not in compute["coveredResources"]
    assert not [o for o in objects if o["metadata"]["name"] == JOB_SLOTS_FLAVOR]

    # A running cap without a queued one: the running cap alone.
    objects = compile_cluster(_cluster(), [_tenant(running=3, queued=None)])
    assert WORKLOAD_COUNT_KEY not in _hard(objects, "team-a")
    _compute, slots = _find(objects, "ClusterQueue", "team-a")["spec"]["resourceGroups"]
    assert slots["flavors"][0]["resources"][0]["nominalQuota"] == "3"


def test_a_cap_of_zero_running_jobs_holds_every_job() -> None:
    objects = compile_cluster(_cluster(), [_tenant(running=0, queued=0)])
    assert _hard(objects, "team-a")[WORKLOAD_COUNT_KEY] == "0"
    _compute, slots = _find(objects, "ClusterQueue", "team-a")["spec"]["resourceGroups"]
    assert slots["flavors"][0]["resources"][0]["nominalQuota"] == "0"


def test_without_kueue_only_batch_jobs_are_counted_and_running_is_not_capped() -> None:
    objects = compile_cluster(_cluster(has_kueue=False), [_tenant(running=5, queued=20)])
    hard = _hard(objects, "team-a")
    assert hard["count/jobs.batch"] == "25"
    assert WORKLOAD_COUNT_KEY not in hard
    assert not [o for o in objects if o["kind"] in ("ClusterQueue", "ResourceFlavor")]


def test_the_slots_flavor_name_is_the_portals_own() -> None:
    taken = ClusterSpec(
        name="demo", flavors=(FlavorSpec(JOB_SLOTS_FLAVOR, "cpu", {"cpu": Decimal(8)}),)
    )
    with pytest.raises(ValueError, match="the portal's own"):
        compile_cluster_wide(taken, [_tenant()])
