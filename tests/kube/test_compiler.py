"""The Kubernetes compiler: the seed's examples, every trap it must avoid, and stable output.

Specs are built by hand: the compiler is pure, so no database is needed.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from quotas.kube import compiler
from quotas.kube.compiler import (
    ANNOTATION_DEFAULT_PRIORITY_CLASS,
    apply_order,
    compile_cluster,
    compile_cluster_wide,
    compile_tenant,
    object_key,
    sort_key,
)
from quotas.kube.spec import (
    ANNOTATION_GENERATION,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.kube.validate import validate_object
from quotas.quantity import parse_quantity

GI = 1024**3
TI = 1024**4
KUEUE = "kueue.x-k8s.io/v1beta2"
WORKLOADS = "count/workloads.kueue.x-k8s.io"
VOLCANO = "scheduling.volcano.sh/v1beta1"
REPO_ROOT = Path(__file__).resolve().parents[2]

Obj = dict[str, Any]

# The seed article's NetworkPolicy (/work/shared/seeds/000_f85350a9a9d6fb92.txt), with the
# indentation its web page lost put back.
SEED_NETWORK_POLICY = yaml.safe_load(
    """
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-cross-tenant
  namespace: tenant-a
spec:
  podSelector: {}
  policyTypes:
  - Ingress
  - Egress
  ingress:
  - from:
    - podSelector: {}
"""
)


# --- builders ---------------------------------------------------------------------------------


def seed_cluster(**changes: Any) -> ClusterSpec:
    """The seed's Kueue example: one flavor ``gpu-flavor`` on nodes labelled accelerator=nvidia."""
    flavor = FlavorSpec(
        name="gpu-flavor",
        kind="gpu",
        capacity={"nvidia.com/gpu": Decimal(64), "cpu": Decimal(512), "memory": Decimal(4 * TI)},
        gpu_model="NVIDIA A100-SXM4-80GB",
        node_labels={"accelerator": "nvidia"},
    )
    return replace(ClusterSpec(name="seed", flavors=(flavor,)), **changes)


def medium_tenant(slug: str = "tenant-a", **changes: Any) -> TenantSpec:
    """The seed's "medium" tier: 16 GPUs guaranteed, 24 at most; 32/48 vCPU; 256/384 GiB."""
    tenant = TenantSpec(
        slug=slug,
        generation=7,
        namespaces=(NamespaceSpec(slug),),
        quotas=(
            QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(16), Decimal(24)),
            QuotaSpec("gpu-flavor", "cpu", Decimal(32), Decimal(48)),
            QuotaSpec("gpu-flavor", "memory", Decimal(256 * GI), Decimal(384 * GI)),
        ),
        max_running_jobs=20,
        max_queued_jobs=100,
        max_pods=100,
        storage_bytes=Decimal(5 * TI),
        max_pvcs=50,
    )
    return replace(tenant, **changes)


def demo_cluster(**changes: Any) -> ClusterSpec:
    """Shaped like the demo's H100 cluster, plus a dedicated pool, time slicing and storage."""
    h100_labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    mig_labels = {**h100_labels, "nvidia.com/mig.config": "all-balanced"}
    flavors = (
        FlavorSpec(
            "h100-80gb",
            "gpu",
            {"nvidia.com/gpu": Decimal(16), "cpu": Decimal(384), "memory": Decimal(3 * TI)},
            gpu_model="NVIDIA H100 80GB HBM3",
            node_labels=h100_labels,
        ),
        FlavorSpec(
            "h100-dedicated",
            "gpu",
            {"nvidia.com/gpu": Decimal(8), "cpu": Decimal(192), "memory": Decimal(2 * TI)},
            gpu_model="NVIDIA H100 80GB HBM3",
            node_labels={**h100_labels, "pool": "dedicated"},
            node_taints=({"key": "dedicated", "value": "team-00", "effect": "NoSchedule"},),
        ),
        FlavorSpec(
            "h100-mig-1g-10gb",
            "mig",
            {"nvidia.com/mig-1g.10gb": Decimal(14)},
            gpu_model="NVIDIA H100 80GB HBM3",
            mig_profile="1g.10gb",
            node_labels=mig_labels,
        ),
        FlavorSpec(
            "h100-mig-3g-40gb",
            "mig",
            {"nvidia.com/mig-3g.40gb": Decimal(4)},
            gpu_model="NVIDIA H100 80GB HBM3",
            mig_profile="3g.40gb",
            node_labels=mig_labels,
        ),
        FlavorSpec(
            "t4-shared",
            "gpu",
            {"nvidia.com/gpu": Decimal(16), "cpu": Decimal(64), "memory": Decimal(256 * GI)},
            gpu_model="Tesla T4",
            node_labels={"nvidia.com/gpu.product": "Tesla-T4"},
            time_slicing_replicas=4,
        ),
        FlavorSpec(
            "cpu-general",
            "cpu",
            {"cpu": Decimal(128), "memory": Decimal(512 * GI)},
            node_labels={"node-role.example.com/cpu": "true"},
        ),
        FlavorSpec("fast-ssd", "storage", {"storage": Decimal(100 * TI)}, storage_class="fast-ssd"),
    )
    return replace(ClusterSpec(name="demo-h100", flavors=flavors), **changes)


def _random_amount(rng: random.Random, resource: str, low: int, high: int) -> Decimal:
    if resource == "cpu":
        return Decimal(rng.randint(low * 1000, high * 1000)) / 1000  # millicores
    if resource in ("memory", "storage"):
        return Decimal(rng.randint(low, high) * rng.choice([GI, 512 * 1024**2]))
    return Decimal(rng.randint(low, high))


def random_tenants(rng: random.Random, cluster: ClusterSpec, count: int = 30) -> list[TenantSpec]:
    """count tenants with random quotas, namespaces, hierarchy (parents are earlier tenants, so
    there is no cycle), cohorts, states, priorities and caps."""
    slugs = [f"team-{index:02d}" for index in range(count)]
    tenants = []
    for index, slug in enumerate(slugs):
        items = []
        for flavor in cluster.flavors:
            if rng.random() < 0.4:
                continue
            for resource in sorted(flavor.capacity):
                guaranteed = _random_amount(rng, resource, 0, 16)
                limit = guaranteed + _random_amount(rng, resource, 0, 8)
                lending = rng.choice([None, guaranteed, Decimal(0)])
                items.append(QuotaSpec(flavor.name, resource, guaranteed, limit, lending))
        rng.shuffle(items)
        namespaces = tuple(
            NamespaceSpec(f"{slug}-{suffix}", rng.choice(["general", "training", "inference"]))
            for suffix in rng.sample(["dev", "prod", "train", "serve"], rng.randint(0, 3))
        )
        tenants.append(
            TenantSpec(
                slug=slug,
                generation=rng.randint(1, 50),
                namespaces=namespaces,
                quotas=tuple(items),
                display_name=f"Team {index}",
                parent=rng.choice([None, None, *slugs[:index]]),
                cohort=rng.choice(["", "", "", "shared-pool"]),
                state=rng.choice(["active", "active", "suspended"]),
                default_priority=rng.choice(["production", "default", "experiment"]),
                max_running_jobs=rng.choice([None, rng.randint(1, 50)]),
                max_queued_jobs=rng.choice([None, rng.randint(0, 200)]),
                max_pods=rng.choice([None, rng.randint(1, 500)]),
                storage_bytes=rng.choice([None, Decimal(rng.randint(1, 20) * TI)]),
                max_pvcs=rng.choice([None, rng.randint(1, 100)]),
                split_by_priority=rng.random() < 0.5,
                max_gpus_per_pod=rng.choice([None, rng.randint(1, 8)]),
                max_cpu_per_pod=rng.choice([None, Decimal(rng.randint(1, 64))]),
                max_memory_per_pod=rng.choice([None, Decimal(rng.randint(1, 512) * GI)]),
                editors=tuple(rng.sample(["alice", "bob", "carol", "dave"], rng.randint(0, 2))),
                viewers=tuple(rng.sample(["victor", "wendy"], rng.randint(0, 2))),
                blocked=rng.random() < 0.1,
            )
        )
    return tenants


# --- helpers ----------------------------------------------------------------------------------


def of_kind(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def find(objects: list[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    found = [
        obj
        for obj in objects
        if obj["kind"] == kind
        and obj["metadata"]["name"] == name
        and obj["metadata"].get("namespace") == namespace
    ]
    assert len(found) == 1, f"expected one {kind} {namespace}/{name}, found {len(found)}"
    return found[0]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, key, value) for every mapping entry, recursively."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from walk(item, f"{path}[{index}]")


def by_name(resources: list[Obj]) -> dict[str, Obj]:
    return {resource["name"]: resource for resource in resources}


def quotas_named(objects: list[Obj], name: str) -> list[Obj]:
    return [obj for obj in of_kind(objects, "ResourceQuota") if obj["metadata"]["name"] == name]


@pytest.fixture(scope="module")
def random_clusters() -> list[tuple[ClusterSpec, list[TenantSpec]]]:
    """The demo-like cluster with 30 random tenants, with Kueue, and with Volcano hierarchy."""
    out = []
    for seed, cluster in (
        (1, demo_cluster()),
        (2, demo_cluster(has_kueue=False, has_volcano=True, volcano_hierarchy=True)),
        (3, demo_cluster(has_volcano=True)),
    ):
        rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
        out.append((cluster, random_tenants(rng, cluster)))
    return out


@pytest.fixture(scope="module")
def random_objects(random_clusters: list[tuple[ClusterSpec, list[TenantSpec]]]) -> list[Obj]:
    objects: list[Obj] = []
    for cluster, tenants in random_clusters:
        objects.extend(compile_cluster(cluster, tenants))
    return objects


# --- the seed's examples ----------------------------------------------------------------------


def test_seed_cluster_queue_example_is_reproduced_and_made_valid() -> None:
    objects = compile_cluster(seed_cluster(), [medium_tenant()])

    flavor = find(objects, "ResourceFlavor", "gpu-flavor")
    assert flavor["apiVersion"] == KUEUE
    assert flavor["spec"] == {"nodeLabels": {"accelerator": "nvidia"}}

    queue = find(objects, "ClusterQueue", "tenant-a")
    spec = queue["spec"]
    assert queue["apiVersion"] == KUEUE
    # What the seed left out and Kueue needs: a cohort for borrowingLimit...
    assert spec["cohortName"] == "portal-root"
    assert "cohort" not in spec
    find(objects, "Cohort", "portal-root")
    # ...a namespace selector that is neither null (none) nor {} (all)...
    assert spec["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["tenant-a"]}
        ]
    }
    # ...and a quota for each of the three covered resources, not only the GPU (the second
    # group is the running-job cap's, tested in tests/kube/test_job_caps.py).
    group, slots = spec["resourceGroups"]
    assert slots["coveredResources"] == ["pods"]
    assert set(group["coveredResources"]) == {"nvidia.com/gpu", "cpu", "memory"}
    (gpu_flavor,) = group["flavors"]
    assert gpu_flavor["name"] == "gpu-flavor"
    assert [r["name"] for r in gpu_flavor["resources"]] == group["coveredResources"]
    resources = by_name(gpu_flavor["resources"])
    assert resources["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "16",
        "borrowingLimit": "8",
    }
    assert resources["cpu"] == {"name": "cpu", "nominalQuota": "32", "borrowingLimit": "16"}
    assert resources["memory"] == {
        "name": "memory",
        "nominalQuota": "256Gi",
        "borrowingLimit": "128Gi",
    }


def test_deny_cross_tenant_keeps_the_seed_policy_and_only_adds_tenant_and_dns() -> None:
    objects = compile_tenant(seed_cluster(), medium_tenant())
    policy = find(objects, "NetworkPolicy", "deny-cross-tenant", "tenant-a")
    seed = SEED_NETWORK_POLICY

    assert policy["apiVersion"] == seed["apiVersion"]
    assert policy["metadata"]["name"] == seed["metadata"]["name"]
    assert policy["metadata"]["namespace"] == seed["metadata"]["namespace"]
    assert policy["spec"]["podSelector"] == seed["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == seed["spec"]["policyTypes"]
    assert policy["spec"]["ingress"][0] == seed["spec"]["ingress"][0]

    own_tenant = {"namespaceSelector": {"matchLabels": {LABEL_TENANT: "tenant-a"}}}
    assert {"from": [own_tenant]} in policy["spec"]["ingress"]
    egress = policy["spec"]["egress"]
    assert {"to": [{"podSelector": {}}]} in egress
    assert {"to": [own_tenant]} in egress
    (dns,) = [rule for rule in egress if "ports" in rule]
    assert dns["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    # Nothing opens the door wider: every rule names its peers, none is an ipBlock or {}.
    for rule in policy["spec"]["ingress"] + egress:
        peers = rule.get("from", rule.get("to"))
        assert peers, f"a rule without peers allows everyone: {rule}"
        for peer in peers:
            assert "ipBlock" not in peer
            assert peer == {"podSelector": {}} or peer.get("namespaceSelector")


# --- traps ------------------------------------------------------------------------------------


def test_extended_resources_take_only_the_requests_prefix(random_objects: list[Obj]) -> None:
    hard_keys = [
        key for quota in of_kind(random_objects, "ResourceQuota") for key in quota["spec"]["hard"]
    ]
    assert any(key.startswith("requests.nvidia.com/") for key in hard_keys)
    for key in hard_keys:
        assert not key.startswith("limits."), key
        if "nvidia.com/" in key:
            assert key.startswith("requests.nvidia.com/"), key
    for obj in random_objects:
        for _path, key, _value in walk(obj):
            assert key != "limits.nvidia.com/gpu"


def test_limit_range_never_injects_a_gpu(random_objects: list[Obj]) -> None:
    limit_ranges = of_kind(random_objects, "LimitRange")
    assert limit_ranges
    for limit_range in limit_ranges:
        for item in limit_range["spec"]["limits"]:
            if item["type"] == "Pod":
                assert set(item) == {"type", "max"}
                continue
            assert item["type"] == "Container"
            # The API server copies max into a missing default, and default into a missing
            # defaultRequest: every capped resource needs both, explicitly.
            assert set(item["max"]) == set(item["default"]) == set(item["defaultRequest"])
            for resource, cap in item["max"].items():
                default = parse_quantity(item["default"][resource])
                request = parse_quantity(item["defaultRequest"][resource])
                assert request <= default <= parse_quantity(cap)
            for field in ("default", "defaultRequest"):
                for resource, value in item[field].items():
                    if resource.startswith("nvidia.com/"):
                        assert value == "0", f"{field} would give every container {value} GPUs"


def test_limit_range_caps_gpus_per_container_and_pod() -> None:
    derived = compile_tenant(seed_cluster(), medium_tenant())
    container, pod = find(derived, "LimitRange", "gpu-portal-limits", "tenant-a")["spec"]["limits"]
    assert container["max"] == {"cpu": "48", "memory": "384Gi", "nvidia.com/gpu": "8"}
    assert container["defaultRequest"] == {"cpu": "100m", "memory": "256Mi", "nvidia.com/gpu": "0"}
    assert pod == {"type": "Pod", "max": {"nvidia.com/gpu": "8"}}

    explicit = compile_tenant(
        seed_cluster(),
        medium_tenant(
            max_gpus_per_pod=2, max_cpu_per_pod=Decimal("0.05"), max_memory_per_pod=Decimal(GI)
        ),
    )
    container, pod = find(explicit, "LimitRange", "gpu-portal-limits", "tenant-a")["spec"]["limits"]
    assert container["max"] == {"cpu": "50m", "memory": "1Gi", "nvidia.com/gpu": "2"}
    assert container["defaultRequest"]["cpu"] == "50m"  # never above the cap
    assert pod["max"] == {"nvidia.com/gpu": "2"}


def test_every_cluster_queue_is_admissible(
    random_clusters: list[tuple[ClusterSpec, list[TenantSpec]]],
) -> None:
    cluster, tenants = random_clusters[0]
    queues = of_kind(compile_cluster(cluster, tenants), "ClusterQueue")
    assert queues
    namespaces_by_tenant = {t.slug: {ns.name for ns in t.namespaces} for t in tenants}
    for queue in queues:
        spec = queue["spec"]
        assert spec["cohortName"]
        (expression,) = spec["namespaceSelector"]["matchExpressions"]
        assert expression["key"] == "kubernetes.io/metadata.name"
        assert expression["operator"] == "In"
        assert set(expression["values"]) == namespaces_by_tenant[queue["metadata"]["name"]]
        assert spec["preemption"]["reclaimWithinCohort"] != "Never"
        groups = spec.get("resourceGroups", [])
        # One group of compute resources, and the running-job cap's group of pods alone.
        compute = [group for group in groups if group["coveredResources"] != ["pods"]]
        assert len(compute) <= 1
        assert len(groups) - len(compute) <= 1
        for group in compute:
            covered = group["coveredResources"]
            assert covered[:2] == ["cpu", "memory"]
            assert len(set(covered)) == len(covered)
            for flavor in group["flavors"]:
                assert [resource["name"] for resource in flavor["resources"]] == covered


def test_scoped_quotas_hold_only_compute_keys() -> None:
    tenant = medium_tenant(split_by_priority=True)
    objects = compile_tenant(demo_cluster(), replace(tenant, quotas=demo_quotas()))
    unscoped = find(objects, "ResourceQuota", "gpu-portal-quota", "tenant-a")
    inference = find(objects, "ResourceQuota", "gpu-portal-inference", "tenant-a")
    batch = find(objects, "ResourceQuota", "gpu-portal-batch", "tenant-a")

    assert "scopeSelector" not in unscoped["spec"]
    for key in ("requests.storage", "persistentvolumeclaims", "pods", WORKLOADS):
        assert key in unscoped["spec"]["hard"]
    assert "fast-ssd.storageclass.storage.k8s.io/requests.storage" in unscoped["spec"]["hard"]

    # Batch is every pod that is not production, pods without a class included.
    for quota, operator in ((inference, "In"), (batch, "NotIn")):
        assert quota["spec"]["scopeSelector"] == {
            "matchExpressions": [
                {
                    "scopeName": "PriorityClass",
                    "operator": operator,
                    "values": ["gpu-portal-production"],
                }
            ]
        }
        for key in quota["spec"]["hard"]:
            assert key in ("requests.cpu", "requests.memory") or key.startswith(
                "requests.nvidia.com/"
            ), f"{key} is refused under a PriorityClass scope"
    # Inference may use what is guaranteed; batch up to the limit, like the unscoped total.
    assert inference["spec"]["hard"]["requests.nvidia.com/gpu"] == "16"
    assert batch["spec"]["hard"]["requests.nvidia.com/gpu"] == "24"
    assert unscoped["spec"]["hard"]["requests.nvidia.com/gpu"] == "24"


def test_scoped_quotas_everywhere_are_clean(random_objects: list[Obj]) -> None:
    scoped = [q for q in of_kind(random_objects, "ResourceQuota") if "scopeSelector" in q["spec"]]
    assert scoped
    for quota in scoped:
        for key in quota["spec"]["hard"]:
            assert not key.startswith("count/")
            assert "storage" not in key
            assert key not in ("persistentvolumeclaims", "pods")


def demo_quotas() -> tuple[QuotaSpec, ...]:
    return (
        QuotaSpec("h100-80gb", "nvidia.com/gpu", Decimal(16), Decimal(24)),
        QuotaSpec("h100-80gb", "cpu", Decimal(32), Decimal(48)),
        QuotaSpec("h100-80gb", "memory", Decimal(256 * GI), Decimal(384 * GI)),
        QuotaSpec("h100-mig-1g-10gb", "nvidia.com/mig-1g.10gb", Decimal(2), Decimal(4)),
        QuotaSpec("fast-ssd", "storage", Decimal(TI), Decimal(2 * TI)),
    )


def test_cluster_queue_lists_every_covered_resource_on_every_flavor() -> None:
    tenant = medium_tenant(quotas=demo_quotas())
    queue = find(compile_tenant(demo_cluster(), tenant), "ClusterQueue", "tenant-a")
    group, _job_slots = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == [
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
    ]
    h100, mig = group["flavors"]  # in the cluster's flavor order; storage is not a Kueue flavor
    assert (h100["name"], mig["name"]) == ("h100-80gb", "h100-mig-1g-10gb")
    mig_resources = by_name(mig["resources"])
    # No quota for an accelerator: nothing, borrowed or not.
    assert mig_resources["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "0",
        "borrowingLimit": "0",
    }
    assert by_name(h100["resources"])["nvidia.com/mig-1g.10gb"]["borrowingLimit"] == "0"
    # cpu and memory beside the MIG slices: none of its own, may borrow from the cohort.
    assert mig_resources["cpu"] == {"name": "cpu", "nominalQuota": "0"}
    assert mig_resources["nvidia.com/mig-1g.10gb"] == {
        "name": "nvidia.com/mig-1g.10gb",
        "nominalQuota": "2",
        "borrowingLimit": "2",
    }


def test_cpu_flavors_come_first_so_cpu_work_spares_gpu_nodes() -> None:
    quotas = (
        *demo_quotas(),
        QuotaSpec("cpu-general", "cpu", Decimal(8), Decimal(16)),
        QuotaSpec("cpu-general", "memory", Decimal(32 * GI), Decimal(64 * GI)),
    )
    queue = find(
        compile_tenant(demo_cluster(), medium_tenant(quotas=quotas)), "ClusterQueue", "tenant-a"
    )
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    assert [f["name"] for f in flavors] == ["cpu-general", "h100-80gb", "h100-mig-1g-10gb"]
    assert by_name(flavors[0]["resources"])["nvidia.com/gpu"]["borrowingLimit"] == "0"


def test_lending_limit_and_quantities_render_canonically() -> None:
    tenant = medium_tenant(
        quotas=(
            QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(16), Decimal(24), Decimal(4)),
            QuotaSpec("gpu-flavor", "cpu", Decimal("0.5"), Decimal("1.25")),
            QuotaSpec("gpu-flavor", "memory", Decimal(68719476736), Decimal(68719476736)),
        )
    )
    objects = compile_tenant(seed_cluster(), tenant)
    resources = by_name(
        find(objects, "ClusterQueue", "tenant-a")["spec"]["resourceGroups"][0]["flavors"][0][
            "resources"
        ]
    )
    assert resources["nvidia.com/gpu"]["lendingLimit"] == "4"
    assert resources["cpu"] == {"name": "cpu", "nominalQuota": "500m", "borrowingLimit": "750m"}
    assert resources["memory"] == {"name": "memory", "nominalQuota": "64Gi", "borrowingLimit": "0"}
    hard = find(objects, "ResourceQuota", "gpu-portal-quota", "tenant-a")["spec"]["hard"]
    assert hard["requests.cpu"] == "1250m"
    assert hard["requests.memory"] == "64Gi"
    assert hard["requests.storage"] == "5Ti"
    assert hard["pods"] == "100"
    assert hard[WORKLOADS] == "120"  # every job Kueue manages, running plus queued


def test_quantities_are_strings_and_output_is_plain_json(random_objects: list[Obj]) -> None:
    json.dumps(random_objects)  # no Decimal, no tuple, nothing json cannot write
    integer_fields = {"value", "weight", "port"}
    for obj in random_objects:
        for path, key, value in walk(obj):
            assert not isinstance(value, float), f"{path}.{key}"
            if isinstance(value, int) and not isinstance(value, bool):
                assert key in integer_fields, f"{obj['kind']} {path}.{key} = {value}"
    # Every quantity in the quotas is a canonical Kubernetes quantity string.
    for quota in of_kind(random_objects, "ResourceQuota"):
        for key, value in quota["spec"]["hard"].items():
            assert isinstance(value, str)
            parse_quantity(value)
            if "memory" in key or "storage" in key:
                assert value == "0" or not value.endswith("000"), value  # 64Gi, not 68719476736


def test_no_object_shares_a_part_with_another(random_objects: list[Obj]) -> None:
    # Shared dicts would let one object's edit change another; YAML would show &id anchors.
    assert "&id" not in yaml.safe_dump_all(random_objects)


def test_accelerators_are_denied_unless_granted() -> None:
    cpu_only = medium_tenant(
        quotas=(
            QuotaSpec("cpu-general", "cpu", Decimal(8), Decimal(16)),
            QuotaSpec("cpu-general", "memory", Decimal(32 * GI), Decimal(64 * GI)),
        )
    )
    objects = compile_tenant(demo_cluster(), cpu_only)
    hard = find(objects, "ResourceQuota", "gpu-portal-quota", "tenant-a")["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "0"
    assert hard["requests.nvidia.com/mig-1g.10gb"] == "0"
    assert hard["requests.nvidia.com/mig-3g.40gb"] == "0"
    limit_range = find(objects, "LimitRange", "gpu-portal-limits", "tenant-a")
    assert "nvidia.com/gpu" not in limit_range["spec"]["limits"][0]["max"]


def test_without_kueue_there_is_no_kueue_object() -> None:
    cluster = demo_cluster(has_kueue=False)
    rng = random.Random(7)  # noqa: S311 - reproducible test data, not cryptography
    tenants = random_tenants(rng, cluster, count=10)
    objects = compile_cluster(cluster, tenants)
    assert not [obj for obj in objects if obj["apiVersion"].startswith("kueue.x-k8s.io/")]
    assert not [
        obj for obj in objects if obj.get("roleRef", {}).get("name") == "kueue-batch-user-role"
    ]
    assert of_kind(objects, "PriorityClass")  # the ladder is Kubernetes', not Kueue's
    assert not of_kind(objects, "Queue")  # nor Volcano's, unless the cluster has it


def test_namespaces_share_the_tenant_cap_only_without_kueue() -> None:
    tenant = medium_tenant(
        namespaces=(NamespaceSpec("a-one"), NamespaceSpec("a-two"), NamespaceSpec("a-three")),
        quotas=(
            QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(4), Decimal(7)),
            QuotaSpec("gpu-flavor", "cpu", Decimal(8), Decimal("10.001")),
        ),
    )
    # With Kueue the ClusterQueue adds the namespaces up: each gets the whole cap.
    with_kueue = quotas_named(compile_tenant(seed_cluster(), tenant), "gpu-portal-quota")
    assert {q["spec"]["hard"]["requests.nvidia.com/gpu"] for q in with_kueue} == {"7"}
    # Without it nothing does: the cap is divided, the remainder to the first by name.
    alone = quotas_named(compile_tenant(seed_cluster(has_kueue=False), tenant), "gpu-portal-quota")
    shares = {q["metadata"]["namespace"]: q["spec"]["hard"] for q in alone}
    assert [shares[ns]["requests.nvidia.com/gpu"] for ns in ("a-one", "a-three", "a-two")] == [
        "3",
        "2",
        "2",
    ]
    assert sum(parse_quantity(h["requests.cpu"]) for h in shares.values()) == Decimal("10.001")
    assert sum(parse_quantity(h["pods"]) for h in shares.values()) == 100


def test_volcano_queue_per_tenant() -> None:
    cluster = seed_cluster(has_kueue=False, has_volcano=True)
    tenant = medium_tenant(
        quotas=(
            QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(16), Decimal(24), Decimal(10)),
            QuotaSpec("gpu-flavor", "cpu", Decimal(32), Decimal(48)),
        )
    )
    queue = find(compile_tenant(cluster, tenant), "Queue", "tenant-a")
    assert queue["apiVersion"] == VOLCANO
    assert queue["spec"] == {
        "weight": 16,
        "reclaimable": True,
        # What is never lent: guaranteed - lending_limit (all of it may be lent when unset).
        "guarantee": {"resource": {"cpu": "0", "nvidia.com/gpu": "6"}},
        "deserved": {"cpu": "32", "nvidia.com/gpu": "16"},
        "capability": {"cpu": "48", "nvidia.com/gpu": "24"},
    }


def test_volcano_queues_keep_the_webhook_rules(random_objects: list[Obj]) -> None:
    queues = of_kind(random_objects, "Queue")
    assert queues
    by_queue = {q["metadata"]["name"]: q for q in queues if "parent" in q["spec"]}
    children: dict[str, list[Obj]] = {}
    for queue in by_queue.values():
        children.setdefault(queue["spec"]["parent"], []).append(queue)
    for queue in queues:
        spec = queue["spec"]
        assert 1 <= spec["weight"] <= 65535
        assert spec["reclaimable"] is True
        guarantee = spec["guarantee"]["resource"]
        for resource in spec["capability"]:
            low = parse_quantity(guarantee.get(resource, "0"))
            middle = parse_quantity(spec["deserved"].get(resource, "0"))
            assert low <= middle <= parse_quantity(spec["capability"][resource])
    for parent, members in children.items():
        if parent == "root":
            continue
        parent_spec = by_queue[parent]["spec"]
        for field in ("deserved", "capability"):
            for resource in {r for member in members for r in member["spec"][field]}:
                total = sum(parse_quantity(m["spec"][field].get(resource, "0")) for m in members)
                if field == "deserved":
                    assert total <= parse_quantity(parent_spec[field][resource])
                for member in members:
                    child = parse_quantity(member["spec"][field].get(resource, "0"))
                    assert child <= parse_quantity(parent_spec[field][resource])


def test_volcano_hierarchy_mirrors_the_cohort_tree() -> None:
    cluster = seed_cluster(has_kueue=False, has_volcano=True, volcano_hierarchy=True)
    tenants = [
        medium_tenant("org", namespaces=()),
        medium_tenant("vision", parent="org"),
        medium_tenant("speech", parent="org"),
        medium_tenant("loner"),
    ]
    objects = compile_cluster(cluster, tenants)
    group = find(objects, "Queue", "org-group")
    assert group["spec"]["parent"] == "root"
    assert LABEL_TENANT not in group["metadata"]["labels"]
    assert group["spec"]["deserved"]["nvidia.com/gpu"] == "32"  # vision + speech
    assert find(objects, "Queue", "vision")["spec"]["parent"] == "org-group"
    assert find(objects, "Queue", "org")["spec"]["parent"] == "root"
    assert find(objects, "Queue", "loner")["spec"]["parent"] == "root"
    positions = {obj["metadata"]["name"]: i for i, obj in enumerate(of_kind(objects, "Queue"))}
    assert positions["org-group"] < positions["vision"]


def test_stop_policy_holds_suspended_and_blocked_tenants() -> None:
    def stop_policy(tenant: TenantSpec) -> str:
        queue = find(compile_tenant(seed_cluster(), tenant), "ClusterQueue", tenant.slug)
        return str(queue["spec"]["stopPolicy"])

    assert stop_policy(medium_tenant()) == "None"
    assert stop_policy(medium_tenant(state="suspended")) == "Hold"
    assert stop_policy(medium_tenant(blocked=True)) == "Hold"


def test_hierarchy_becomes_the_cohort_tree() -> None:
    tenants = [
        medium_tenant("org", namespaces=()),
        medium_tenant("research", parent="org"),
        medium_tenant("vision", parent="research"),
        medium_tenant("partner", cohort="partners"),
        medium_tenant("solo"),
    ]
    objects = compile_cluster(seed_cluster(), tenants)
    cohorts = {
        c["metadata"]["name"]: c["spec"].get("parentName") for c in of_kind(objects, "Cohort")
    }
    assert cohorts == {
        "portal-root": None,
        "org": "portal-root",
        "research": "org",
        "partners": "portal-root",
    }
    cohort_of = {
        q["metadata"]["name"]: q["spec"]["cohortName"] for q in of_kind(objects, "ClusterQueue")
    }
    # org has no namespace, so no ClusterQueue; its cohort still carries its children.
    assert cohort_of == {
        "research": "org",
        "vision": "research",
        "partner": "partners",
        "solo": "portal-root",
    }
    order = [c["metadata"]["name"] for c in of_kind(objects, "Cohort")]
    assert order.index("portal-root") < order.index("org") < order.index("research")


def test_a_parent_tenant_may_share_the_cohort_of_its_children() -> None:
    tenants = [medium_tenant("org", cohort="org"), medium_tenant("team", parent="org")]
    objects = compile_cluster(seed_cluster(), tenants)
    assert find(objects, "Cohort", "org")["spec"] == {"parentName": "portal-root"}
    assert find(objects, "ClusterQueue", "org")["spec"]["cohortName"] == "org"


def test_a_cycle_in_the_hierarchy_is_refused() -> None:
    tenants = [medium_tenant("a", parent="b"), medium_tenant("b", parent="a")]
    with pytest.raises(ValueError, match="cycle"):
        compile_cluster_wide(seed_cluster(), tenants)


# --- stable output ----------------------------------------------------------------------------


def test_output_is_deterministic(
    random_clusters: list[tuple[ClusterSpec, list[TenantSpec]]],
) -> None:
    for cluster, tenants in random_clusters:
        first = json.dumps(compile_cluster(cluster, tenants))
        assert json.dumps(compile_cluster(cluster, tenants)) == first
        shuffled = list(tenants)
        random.Random(99).shuffle(shuffled)  # noqa: S311 - a reproducible shuffle
        reordered = [
            replace(
                tenant,
                namespaces=tuple(reversed(tenant.namespaces)),
                quotas=tuple(reversed(tenant.quotas)),
                editors=tuple(reversed(tenant.editors)),
            )
            for tenant in shuffled
        ]
        assert json.dumps(compile_cluster(cluster, reordered)) == first


def test_output_is_sorted_in_apply_order(random_objects: list[Obj]) -> None:
    assert random_objects  # compiled per cluster: each cluster's part is sorted
    for cluster, tenants in (
        (seed_cluster(), [medium_tenant()]),
        (
            demo_cluster(has_volcano=True, volcano_hierarchy=True),
            [
                medium_tenant(quotas=demo_quotas()),
                medium_tenant("child", parent="tenant-a", quotas=demo_quotas()),
            ],
        ),
    ):
        objects = compile_cluster(cluster, tenants)
        assert objects == sorted(objects, key=sort_key)
        kinds = [obj["kind"] for obj in objects]
        assert kinds[0] == "Namespace"
        first = {kind: kinds.index(kind) for kind in set(kinds)}
        last = {kind: len(kinds) - 1 - kinds[::-1].index(kind) for kind in set(kinds)}
        assert last["Namespace"] < first["PriorityClass"] < first["ResourceFlavor"]
        assert first["ResourceFlavor"] < first["Cohort"] < first["LimitRange"]
        assert last["LimitRange"] < first["ResourceQuota"] < first["ClusterQueue"]
        assert last["ClusterQueue"] < first["LocalQueue"]
    others = [obj for obj in random_objects if obj["kind"] != "Namespace"]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
    assert apply_order(namespace) < min(apply_order(obj) for obj in others)
    assert object_key(namespace) == ("v1", "Namespace", "", "x")
    queue = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "team-a"},
    }
    assert object_key(queue) == (KUEUE, "LocalQueue", "team-a", "default")
    assert sort_key(queue) == (apply_order(queue), *object_key(queue))


def test_compile_cluster_is_cluster_wide_plus_every_tenant(
    random_clusters: list[tuple[ClusterSpec, list[TenantSpec]]],
) -> None:
    cluster, tenants = random_clusters[0]
    parts = compile_cluster_wide(cluster, tenants)
    for tenant in tenants:
        parts.extend(compile_tenant(cluster, tenant))
    assert compile_cluster(cluster, tenants) == sorted(parts, key=sort_key)


# --- metadata, names, RBAC, priorities, time slicing ------------------------------------------


def test_every_object_is_labelled(
    random_clusters: list[tuple[ClusterSpec, list[TenantSpec]]],
) -> None:
    for cluster, tenants in random_clusters:
        for obj in compile_cluster_wide(cluster, tenants):
            labels = obj["metadata"]["labels"]
            assert labels == {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: cluster.name}
            assert ANNOTATION_GENERATION not in obj["metadata"].get("annotations", {})
        for tenant in tenants:
            for obj in compile_tenant(cluster, tenant):
                labels = obj["metadata"]["labels"]
                assert labels[LABEL_MANAGED_BY] == MANAGED_BY
                assert labels[LABEL_CLUSTER] == cluster.name
                assert labels[LABEL_TENANT] == tenant.slug
                generation = obj["metadata"]["annotations"][ANNOTATION_GENERATION]
                assert generation == str(tenant.generation)


def test_namespace_records_tenant_purpose_and_default_priority() -> None:
    tenant = medium_tenant(
        namespaces=(NamespaceSpec("serve", "inference"),),
        default_priority="production",
        display_name="Team A",
    )
    namespace = find(compile_tenant(seed_cluster(), tenant), "Namespace", "serve")
    metadata = namespace["metadata"]
    assert metadata["labels"][LABEL_TENANT] == "tenant-a"
    assert metadata["labels"]["portal.gpu-quota.io/purpose"] == "inference"
    assert "kubernetes.io/metadata.name" not in metadata["labels"]  # the API server's to set
    assert metadata["annotations"][ANNOTATION_DEFAULT_PRIORITY_CLASS] == "gpu-portal-production"


def test_priority_ladder() -> None:
    objects = compile_cluster_wide(seed_cluster(), [])
    classes = {pc["metadata"]["name"]: pc for pc in of_kind(objects, "PriorityClass")}
    assert {name: pc["value"] for name, pc in classes.items()} == {
        "gpu-portal-production": 100000,
        "gpu-portal-default": 1000,
        "gpu-portal-experiment": 100,
    }
    assert all(pc["globalDefault"] is False for pc in classes.values())
    assert classes["gpu-portal-experiment"]["preemptionPolicy"] == "Never"
    assert classes["gpu-portal-production"]["preemptionPolicy"] == "PreemptLowerPriority"
    workload_classes = {
        wpc["metadata"]["name"]: wpc["value"] for wpc in of_kind(objects, "WorkloadPriorityClass")
    }
    assert workload_classes == {name: pc["value"] for name, pc in classes.items()}
    with pytest.raises(ValueError, match="default_priority"):
        compile_tenant(seed_cluster(), medium_tenant(default_priority="urgent"))


def test_role_bindings_name_users_and_idp_groups() -> None:
    objects = compile_tenant(
        seed_cluster(), medium_tenant(editors=("bob", "alice", "bob"), viewers=())
    )
    edit = find(objects, "RoleBinding", "gpu-portal-edit", "tenant-a")
    assert edit["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "edit",
    }
    assert [(s["kind"], s["name"]) for s in edit["subjects"]] == [
        ("Group", "gpu-portal:tenant-a:edit"),
        ("User", "alice"),
        ("User", "bob"),
        ("ServiceAccount", "tenant-a-workloads"),
    ]
    view = find(objects, "RoleBinding", "gpu-portal-view", "tenant-a")
    assert view["roleRef"]["name"] == "view"
    assert view["subjects"] == [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Group",
            "name": "gpu-portal:tenant-a:view",
        }
    ]
    kueue_user = find(objects, "RoleBinding", "gpu-portal-kueue-batch-user", "tenant-a")
    assert kueue_user["roleRef"]["name"] == "kueue-batch-user-role"
    account = find(objects, "ServiceAccount", "tenant-a-workloads", "tenant-a")
    assert account["automountServiceAccountToken"] is False


def test_role_bindings_bind_the_identity_groups_mapped_to_the_tenant() -> None:
    """Groups mapped to the tenant (identity app) are bound like the portal's own roles: lead
    and member groups edit (and use Kueue), viewer groups view."""
    tenant = medium_tenant(
        editors=("alice",),
        editor_groups=("gpu-team-a-leads", "gpu-team-a", "gpu-team-a"),
        viewer_groups=("gpu-team-a-auditors",),
    )
    objects = compile_tenant(seed_cluster(), tenant)
    edit = find(objects, "RoleBinding", "gpu-portal-edit", "tenant-a")
    assert [(s["kind"], s["name"]) for s in edit["subjects"]] == [
        ("Group", "gpu-portal:tenant-a:edit"),
        ("Group", "gpu-team-a"),
        ("Group", "gpu-team-a-leads"),
        ("User", "alice"),
        ("ServiceAccount", "tenant-a-workloads"),
    ]
    view = find(objects, "RoleBinding", "gpu-portal-view", "tenant-a")
    assert [s["name"] for s in view["subjects"]] == [
        "gpu-portal:tenant-a:view",
        "gpu-team-a-auditors",
    ]
    kueue_user = find(objects, "RoleBinding", "gpu-portal-kueue-batch-user", "tenant-a")
    assert "gpu-team-a-leads" in [s["name"] for s in kueue_user["subjects"]]


def test_the_tenant_service_account_edits_and_submits_in_each_of_its_namespaces() -> None:
    """R29: a team's pipeline signs in as the tenant's ServiceAccount of a namespace, so that
    account is bound to ``edit`` and (with Kueue) to Kueue's batch user role there, and only
    there: a binding's ServiceAccount subject names its own namespace."""
    tenant = medium_tenant(namespaces=(NamespaceSpec("one"), NamespaceSpec("two")))
    objects = compile_tenant(seed_cluster(), tenant)
    for namespace in ("one", "two"):
        account = find(objects, "ServiceAccount", "tenant-a-workloads", namespace)
        assert account["metadata"]["namespace"] == namespace
        expected = {"kind": "ServiceAccount", "name": "tenant-a-workloads", "namespace": namespace}
        for name, role in (
            ("gpu-portal-edit", "edit"),
            ("gpu-portal-kueue-batch-user", "kueue-batch-user-role"),
        ):
            binding = find(objects, "RoleBinding", name, namespace)
            assert binding["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            }
            accounts = [s for s in binding["subjects"] if s["kind"] == "ServiceAccount"]
            assert accounts == [expected]
            assert validate_object(binding) == []
        view = find(objects, "RoleBinding", "gpu-portal-view", namespace)
        assert all(s["kind"] != "ServiceAccount" for s in view["subjects"])
    # Without Kueue there is no batch user role to bind; edit still is.
    plain = compile_tenant(replace(seed_cluster(), has_kueue=False), tenant)
    assert not [o for o in of_kind(plain, "RoleBinding") if "kueue" in o["metadata"]["name"]]
    edit = find(plain, "RoleBinding", "gpu-portal-edit", "one")
    assert edit["subjects"][-1]["kind"] == "ServiceAccount"


def test_local_queue_named_default_points_at_the_tenant_queue() -> None:
    tenant = medium_tenant(namespaces=(NamespaceSpec("one"), NamespaceSpec("two")))
    objects = compile_tenant(seed_cluster(), tenant)
    for namespace in ("one", "two"):
        queue = find(objects, "LocalQueue", "default", namespace)
        assert queue["spec"] == {"clusterQueue": "tenant-a"}
    assert len(of_kind(objects, "ClusterQueue")) == 1
    assert not of_kind(
        compile_tenant(seed_cluster(), replace(tenant, namespaces=())), "ClusterQueue"
    )


def test_time_slicing_configmap() -> None:
    objects = compile_cluster_wide(demo_cluster(), [])
    configmap = find(objects, "ConfigMap", "gpu-portal-time-slicing", "gpu-operator")
    assert list(configmap["data"]) == ["t4-shared"]
    assert yaml.safe_load(configmap["data"]["t4-shared"]) == {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    }
    assert not of_kind(compile_cluster_wide(seed_cluster(), []), "ConfigMap")


def test_dedicated_pool_flavor_carries_taints_and_tolerations() -> None:
    flavor = find(compile_cluster_wide(demo_cluster(), []), "ResourceFlavor", "h100-dedicated")
    taint = {"key": "dedicated", "value": "team-00", "effect": "NoSchedule"}
    assert flavor["spec"]["nodeTaints"] == [taint]
    assert flavor["spec"]["tolerations"] == [{**taint, "operator": "Equal"}]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"slug": "t" * 64}, "at most 63"),
        ({"slug": "Team_A"}, "DNS-1123"),
        ({"slug": "t" * 60}, "ServiceAccount name"),  # "<slug>-workloads" is 70 characters
        ({"namespaces": (NamespaceSpec("n" * 64),)}, "namespace"),
        ({"namespaces": (NamespaceSpec("x"), NamespaceSpec("x"))}, "twice"),
        ({"cohort": "Not_A_Cohort"}, "cohort"),
        ({"quotas": (QuotaSpec("nope", "cpu", Decimal(1), Decimal(1)),)}, "no such flavor"),
        (
            {"quotas": (QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(4), Decimal(2)),)},
            "below guaranteed",
        ),
        (
            {
                "quotas": (
                    QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal(4), Decimal(8), Decimal(5)),
                )
            },
            "lending_limit",
        ),
        (
            {"quotas": (QuotaSpec("gpu-flavor", "nvidia.com/gpu", Decimal("0.5"), Decimal(1)),)},
            "whole number",
        ),
    ],
)
def test_invalid_input_is_refused_with_a_clear_message(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        compile_tenant(seed_cluster(), medium_tenant(**change))


def test_flavor_limits_of_kueue_are_checked() -> None:
    labels = {f"example.com/label-{i}": "x" for i in range(9)}
    flavor = replace(seed_cluster().flavors[0], node_labels=labels)
    with pytest.raises(ValueError, match="at most 8"):
        compile_cluster_wide(seed_cluster(flavors=(flavor,)), [])


def test_two_tenants_cannot_claim_one_namespace() -> None:
    tenants = [medium_tenant("a", namespaces=(NamespaceSpec("shared"),)), medium_tenant("b")]
    tenants[1] = replace(tenants[1], namespaces=(NamespaceSpec("shared"),))
    with pytest.raises(ValueError, match="compiled twice"):
        compile_cluster(seed_cluster(), tenants)


def test_compiler_does_not_import_django() -> None:
    code = (
        "import sys, quotas.kube.compiler; "
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
    assert compiler.__name__ == "quotas.kube.compiler"


# --- what the API server and the webhooks would say -------------------------------------------


def test_every_compiled_object_validates(
    random_clusters: list[tuple[ClusterSpec, list[TenantSpec]]],
) -> None:
    for cluster, tenants in random_clusters:
        for obj in compile_cluster(cluster, tenants):
            errors = validate_object(obj, kubernetes_version=cluster.kubernetes_version)
            assert errors == [], errors
