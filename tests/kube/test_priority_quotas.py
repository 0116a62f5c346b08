"""What the compiler makes of the batch / inference split (R17), the production priority grant
(R15) and the per-pod caps (R16): the ResourceQuotas scoped by PriorityClass and the
LimitRange, valid against the Kubernetes schemas."""

from __future__ import annotations

from decimal import Decimal

from quotas.kube.compiler import compile_tenant
from quotas.kube.validate import validate_object
from tests.kube.test_compiler import (
    GI,
    demo_cluster,
    demo_quotas,
    find,
    medium_tenant,
    seed_cluster,
)

PRODUCTION_SCOPE = {
    "matchExpressions": [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["gpu-portal-production"]}
    ]
}


def quota_names(objects: list[dict]) -> set[str]:
    return {o["metadata"]["name"] for o in objects if o["kind"] == "ResourceQuota"}


def test_a_tenant_without_the_grant_gets_zero_production_pods() -> None:
    objects = compile_tenant(seed_cluster(), medium_tenant(production_priority_allowed=False))
    quota = find(objects, "ResourceQuota", "gpu-portal-no-production", "tenant-a")
    assert quota["spec"] == {"hard": {"pods": "0"}, "scopeSelector": PRODUCTION_SCOPE}
    assert quota["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    assert validate_object(quota) == []


def test_a_granted_tenant_has_no_such_quota() -> None:
    objects = compile_tenant(seed_cluster(), medium_tenant(production_priority_allowed=True))
    assert "gpu-portal-no-production" not in quota_names(objects)


def test_inference_gpus_split_the_gpu_limit_between_the_classes() -> None:
    objects = compile_tenant(seed_cluster(), medium_tenant(inference_gpus=6))
    inference = find(objects, "ResourceQuota", "gpu-portal-inference", "tenant-a")
    batch = find(objects, "ResourceQuota", "gpu-portal-batch", "tenant-a")
    unscoped = find(objects, "ResourceQuota", "gpu-portal-quota", "tenant-a")
    assert inference["spec"]["scopeSelector"] == PRODUCTION_SCOPE
    assert inference["spec"]["hard"]["requests.nvidia.com/gpu"] == "6"
    assert batch["spec"]["hard"]["requests.nvidia.com/gpu"] == "18"  # 24 - 6
    assert unscoped["spec"]["hard"]["requests.nvidia.com/gpu"] == "24"
    # Batch is every pod that is not production: pods without a class count there too.
    assert batch["spec"]["scopeSelector"] == {
        "matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "NotIn", "values": ["gpu-portal-production"]}
        ]
    }
    for quota in (inference, batch):
        assert validate_object(quota) == []


def test_no_split_no_scoped_quotas_and_a_split_of_zero_puts_every_gpu_on_batch() -> None:
    plain = compile_tenant(seed_cluster(), medium_tenant())
    assert {"gpu-portal-inference", "gpu-portal-batch"}.isdisjoint(quota_names(plain))
    zero = compile_tenant(seed_cluster(), medium_tenant(inference_gpus=0))
    inference = find(zero, "ResourceQuota", "gpu-portal-inference", "tenant-a")
    batch = find(zero, "ResourceQuota", "gpu-portal-batch", "tenant-a")
    assert inference["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert batch["spec"]["hard"]["requests.nvidia.com/gpu"] == "24"


def test_a_split_above_the_limit_never_gives_batch_a_negative_quota() -> None:
    # The services refuse it; the compiler still never writes what the API server refuses.
    objects = compile_tenant(seed_cluster(), medium_tenant(inference_gpus=30))
    batch = find(objects, "ResourceQuota", "gpu-portal-batch", "tenant-a")
    inference = find(objects, "ResourceQuota", "gpu-portal-inference", "tenant-a")
    assert batch["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert inference["spec"]["hard"]["requests.nvidia.com/gpu"] == "24"


def test_the_split_counts_whole_gpus_only_mig_slices_stay_unsplit() -> None:
    objects = compile_tenant(demo_cluster(), medium_tenant(quotas=demo_quotas(), inference_gpus=4))
    inference = find(objects, "ResourceQuota", "gpu-portal-inference", "tenant-a")
    batch = find(objects, "ResourceQuota", "gpu-portal-batch", "tenant-a")
    assert inference["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert batch["spec"]["hard"]["requests.nvidia.com/gpu"] == "20"
    # MIG slices keep the guaranteed / limit scheme of the plain split.
    assert inference["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] == "2"
    assert batch["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] == "4"


def test_per_pod_caps_from_the_quota_set_reach_the_limit_range() -> None:
    objects = compile_tenant(
        seed_cluster(),
        medium_tenant(
            max_gpus_per_pod=4, max_cpu_per_pod=Decimal(16), max_memory_per_pod=Decimal(128 * GI)
        ),
    )
    container, pod = find(objects, "LimitRange", "gpu-portal-limits", "tenant-a")["spec"]["limits"]
    assert container["max"] == {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "4"}
    assert pod == {"type": "Pod", "max": {"nvidia.com/gpu": "4"}}
