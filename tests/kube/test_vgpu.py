"""vGPU flavors (HAMi) in the compiler, checked against HAMi's and Kueue's documented examples.

* HAMi's "Using Extended ResourceQuota for NVIDIA Devices"
  (https://project-hami.io/docs/userguide/nvidia-device/using-resourcequota/): a ResourceQuota
  ``limits.nvidia.com/gpu: 2``, ``limits.nvidia.com/gpumem: 2000`` (MiB), counted per device
  (a pod asking 2 GPUs of 2000 MiB counts 4000).
* HAMi's examples of pods (``resources.limits`` ``nvidia.com/gpu: 1``, ``nvidia.com/gpumem:
  3000``, ``nvidia.com/gpucores: 30``) and ``nvidia.com/gpumem-percentage``.
* Kueue's "Using HAMi" (https://kueue.sigs.k8s.io/docs/tasks/run/using_hami/): the
  ResourceTransformation into ``nvidia.com/total-gpumem`` / ``nvidia.com/total-gpucores`` and a
  ClusterQueue covering them.

The admission policy's CEL is run by the stand-in's admission code in process, as
tests/kube/test_bandwidth.py does; the cluster tests are tests/devcluster/test_vgpu_quota.py.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from typing import Any

import pytest

from devcluster.policies import Request, admit
from quotas.kube import cel, vgpu
from quotas.kube.compiler import compile_cluster, compile_cluster_wide, compile_tenant
from quotas.kube.spec import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    CapSpec,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    PersonSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.kube.validate import validate_objects
from quotas.vgpu import MIB

T4_MIB = 15360
T4 = FlavorSpec(
    "t4",
    "vgpu",
    {
        "nvidia.com/gpu": Decimal(10),
        "nvidia.com/gpumem": Decimal(T4_MIB * MIB),
        "nvidia.com/gpucores": Decimal(100),
    },
    gpu_model="Tesla-T4",
    gpu_memory_mib=T4_MIB,
    vgpu_split=10,
)
A100 = FlavorSpec("a100", "gpu", {"nvidia.com/gpu": Decimal(8)}, gpu_model="A100")
CLUSTER = ClusterSpec(name="demo", flavors=(A100, T4), hami_version="v2.7.1")


def vgpu_tenant(
    slug: str = "lab-nlp",
    *,
    gpus: int = 2,
    mib: int = 2000,
    cores: int = 30,
    namespaces: tuple[NamespaceSpec, ...] | None = None,
    people: tuple[PersonSpec, ...] = (),
) -> TenantSpec:
    return TenantSpec(
        slug=slug,
        generation=1,
        namespaces=namespaces or (NamespaceSpec(f"{slug}-train"),),
        quotas=(
            QuotaSpec("t4", "nvidia.com/gpu", Decimal(gpus), Decimal(gpus)),
            QuotaSpec("t4", "nvidia.com/gpumem", Decimal(mib * MIB), Decimal(mib * MIB)),
            QuotaSpec("t4", "nvidia.com/gpucores", Decimal(cores), Decimal(cores)),
        ),
        people=people,
    )


def gpu_tenant(slug: str = "team-a") -> TenantSpec:
    return TenantSpec(
        slug=slug,
        generation=1,
        namespaces=(NamespaceSpec(slug),),
        quotas=(QuotaSpec("a100", "nvidia.com/gpu", Decimal(2), Decimal(4)),),
    )


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def quota_hard(objects: list[dict[str, Any]], namespace: str) -> dict[str, str]:
    (quota,) = [
        o
        for o in of_kind(objects, "ResourceQuota")
        if o["metadata"]["namespace"] == namespace and o["metadata"]["name"] == "gpu-portal-quota"
    ]
    return quota["spec"]["hard"]


# --- the ResourceQuota, as HAMi's documentation writes it ----------------------------------


def test_hamis_documented_resourcequota_is_what_a_tenant_of_2_vgpus_and_2000_mib_gets():
    hard = quota_hard(compile_cluster(CLUSTER, [vgpu_tenant()]), "lab-nlp-train")
    # HAMi's example, as it is in its docs: limits.nvidia.com/gpu 2, limits.nvidia.com/gpumem 2000.
    assert hard["limits.nvidia.com/gpu"] == "2"
    assert hard["limits.nvidia.com/gpumem"] == "2k"  # Kubernetes' canonical 2000
    assert hard["limits.nvidia.com/gpucores"] == "30"
    # Kubernetes' own quota admission counts the requests. keys, in the same units.
    assert hard["requests.nvidia.com/gpu"] == "2"
    assert hard["requests.nvidia.com/gpumem"] == "2k"
    assert hard["requests.nvidia.com/gpucores"] == "30"


def test_gpu_memory_is_pushed_in_whole_mib_never_in_bytes():
    hard = quota_hard(compile_cluster(CLUSTER, [vgpu_tenant(mib=4608)]), "lab-nlp-train")
    assert hard["requests.nvidia.com/gpumem"] == hard["limits.nvidia.com/gpumem"] == "4608"
    tenant = dataclasses.replace(
        vgpu_tenant(),
        quotas=(QuotaSpec("t4", "nvidia.com/gpumem", Decimal(MIB + 1), Decimal(MIB + 1)),),
    )
    with pytest.raises(ValueError, match="not a whole number of MiB"):
        compile_cluster(CLUSTER, [tenant])


def test_a_tenant_without_vgpu_quota_is_denied_gpu_memory_and_has_no_hami_keys():
    hard = quota_hard(compile_cluster(CLUSTER, [vgpu_tenant(), gpu_tenant()]), "team-a")
    assert hard["requests.nvidia.com/gpumem"] == "0"
    assert hard["requests.nvidia.com/gpucores"] == "0"
    assert not any(key.startswith("limits.") for key in hard)


def test_namespace_split_divides_memory_in_whole_mib_and_compute_in_points():
    cluster = dataclasses.replace(CLUSTER, enforcement="split")
    namespaces = (NamespaceSpec("lab-nlp-serve", share=Decimal(70)),
                  NamespaceSpec("lab-nlp-train", share=Decimal(30)))  # fmt: skip
    objects = compile_cluster(cluster, [vgpu_tenant(mib=4608, namespaces=namespaces)])
    serve, train = quota_hard(objects, "lab-nlp-serve"), quota_hard(objects, "lab-nlp-train")
    for prefix in ("requests.", "limits."):
        assert (
            int(serve[f"{prefix}nvidia.com/gpumem"]) + int(train[f"{prefix}nvidia.com/gpumem"])
            == 4608
        )
        assert (
            int(serve[f"{prefix}nvidia.com/gpucores"]) + int(train[f"{prefix}nvidia.com/gpucores"])
            == 30
        )
    # Under Kueue every namespace holds the whole amount; the ClusterQueue adds them up.
    kueue = compile_cluster(CLUSTER, [vgpu_tenant(mib=4608, namespaces=namespaces)])
    assert quota_hard(kueue, "lab-nlp-serve")["limits.nvidia.com/gpumem"] == "4608"


def test_no_limitrange_line_for_gpu_memory_or_compute():
    # A LimitRange max becomes a default written into every container, and HAMi gives a vGPU
    # to any container naming GPU memory: the caps per container are the policy's.
    for limit_range in of_kind(compile_cluster(CLUSTER, [vgpu_tenant()]), "LimitRange"):
        text = json.dumps(limit_range)
        assert "gpumem" not in text and "gpucores" not in text


# --- Kueue, as its "Using HAMi" page configures it ------------------------------------------


def test_the_cluster_queue_covers_kueues_transformed_totals_in_mib_and_percent():
    objects = compile_cluster(CLUSTER, [vgpu_tenant(mib=4096, cores=50)])
    (queue,) = [o for o in of_kind(objects, "ClusterQueue") if o["metadata"]["name"] == "lab-nlp"]
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == [
        "cpu", "memory", "nvidia.com/gpu", "nvidia.com/total-gpucores", "nvidia.com/total-gpumem"
    ]  # fmt: skip
    lines = {line["name"]: line for line in group["flavors"][0]["resources"]}
    assert lines["nvidia.com/total-gpumem"]["nominalQuota"] == "4096"
    assert lines["nvidia.com/total-gpucores"]["nominalQuota"] == "50"
    assert lines["nvidia.com/gpu"]["nominalQuota"] == "2"


def test_kueue_transformations_are_those_of_kueues_documentation():
    assert list(vgpu.KUEUE_TRANSFORMATIONS) == [
        {"input": "nvidia.com/gpumem", "strategy": "Replace", "multiplyBy": "nvidia.com/gpu",
         "outputs": {"nvidia.com/total-gpumem": "1"}},
        {"input": "nvidia.com/gpucores", "strategy": "Replace", "multiplyBy": "nvidia.com/gpu",
         "outputs": {"nvidia.com/total-gpucores": "1"}},
    ]  # fmt: skip


def test_a_persons_cap_on_gpu_memory_is_in_mib_under_kueues_name():
    bob = PersonSpec("bob", (CapSpec("t4", "nvidia.com/gpumem", Decimal(1024 * MIB)),))
    objects = compile_cluster(CLUSTER, [vgpu_tenant(people=(bob,))])
    (queue,) = [o for o in of_kind(objects, "ClusterQueue") if "bob" in o["metadata"]["name"]]
    lines = {r["name"]: r for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert lines["nvidia.com/total-gpumem"]["borrowingLimit"] == "1024"  # MiB
    assert "borrowingLimit" not in lines["nvidia.com/total-gpucores"]


def test_every_compiled_object_passes_validation():
    bob = PersonSpec("bob", (CapSpec("t4", "nvidia.com/gpucores", Decimal(10)),))
    for cluster in (CLUSTER, dataclasses.replace(CLUSTER, enforcement="split")):
        objects = compile_cluster(cluster, [vgpu_tenant(people=(bob,)), gpu_tenant()])
        assert validate_objects(objects, kubernetes_version="1.33") == []


# --- a cluster whose HAMi cannot hold vGPU quotas ------------------------------------------


@pytest.mark.parametrize("version", ["", "v2.6.1", "2.5", "hami"])
def test_nothing_is_pushed_for_a_vgpu_flavor_without_a_recent_hami(version):
    cluster = dataclasses.replace(CLUSTER, hami_version=version)
    assert set(vgpu.unusable_flavors(cluster)) == {"t4"}
    objects = compile_cluster(cluster, [vgpu_tenant(), gpu_tenant()])
    text = json.dumps(objects)
    for word in ("gpumem", "gpucores", '"t4"', vgpu.LABEL_GPU_MEMORY_MIB, vgpu.POLICY_NAME):
        assert word not in text
    # The whole-GPU tenant is untouched.
    assert quota_hard(objects, "team-a") == {"requests.nvidia.com/gpu": "4"}
    assert compile_tenant(cluster, vgpu_tenant()) is not None


def test_a_recent_hami_makes_the_flavor_usable():
    for version in ("v2.7.0", "2.8.1", "projecthami/hami:v2.10.0"):
        assert vgpu.unusable_flavors(dataclasses.replace(CLUSTER, hami_version=version)) == {}
    reason = vgpu.unusable_flavors(dataclasses.replace(CLUSTER, hami_version="v2.6.1"))["t4"]
    assert "HAMi 2.6.1 is older than 2.7.0" in reason


# --- the admission policy, run as the stand-in runs it ----------------------------------------


def policy_pair() -> list[dict[str, Any]]:
    objects = compile_cluster_wide(CLUSTER, [vgpu_tenant()])
    return [o for o in objects if o["metadata"]["name"] == vgpu.POLICY_NAME]


def test_the_policy_is_compiled_once_for_a_cluster_with_vgpu_quotas_only():
    assert len(policy_pair()) == 2
    assert not [
        o
        for o in compile_cluster_wide(CLUSTER, [gpu_tenant()])
        if o["metadata"]["name"] == vgpu.POLICY_NAME
    ]
    old = dataclasses.replace(CLUSTER, kubernetes_version="1.29", enforcement="split")
    assert vgpu.POLICY_NAME not in json.dumps(compile_cluster(old, [vgpu_tenant()]))
    for split in (False, True):
        cluster = dataclasses.replace(CLUSTER, enforcement="split") if split else CLUSTER
        names = [o["metadata"]["name"] for o in compile_cluster_wide(cluster, [vgpu_tenant()])]
        assert vgpu.POLICY_NAME in names


def test_every_expression_compiles_in_the_cel_engine():
    policy, _ = policy_pair()
    spec = policy["spec"]
    expressions = [v["expression"] for v in spec["variables"]]
    for validation in spec["validations"]:
        expressions += [validation["expression"], validation["messageExpression"]]
    for expression in expressions:
        cel.compile_check(expression)


def pod(
    *containers: dict[str, Any], scheduler: str | None = "hami-scheduler", kind: str = "Pod"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "p"},
        "spec": {"template": {"spec": spec}},
    }


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    names = {"gpu": "nvidia.com/gpu", "mem": "nvidia.com/gpumem", "cores": "nvidia.com/gpucores",
             "pct": "nvidia.com/gpumem-percentage", "cpu": "cpu"}  # fmt: skip
    return {
        "name": name,
        "image": "cuda",
        "resources": {"limits": {names[k]: str(v) for k, v in limits.items()}},
    }


def denial(obj: dict[str, Any], *, memory: str | None = str(T4_MIB)) -> str | None:
    policy, binding = policy_pair()
    labels = {LABEL_MANAGED_BY: MANAGED_BY} | (
        {vgpu.LABEL_GPU_MEMORY_MIB: memory} if memory else {}
    )
    group, _, version = obj["apiVersion"].rpartition("/")
    request = Request(
        operation="CREATE", group=group, version=version, versions=(version,), kind=obj["kind"],
        resource=obj["kind"].lower() + "s", subresource="", namespace="lab-nlp-train", name="p",
        obj=obj, old=None,
        namespace_object={"metadata": {"name": "lab-nlp-train", "labels": labels}},
        username="alice", groups=("system:authenticated",),
    )  # fmt: skip
    outcome = admit([policy], [binding], request, cel.evaluate)
    return outcome.denial[0] if outcome.denial else None


def test_hamis_example_pod_is_admitted():
    # HAMi's README: 1 vGPU, 3000 MiB of GPU memory, 30% of its compute.
    assert denial(pod(container(gpu=1, mem=3000, cores=30))) is None
    assert denial(pod(container(gpu=2, mem=T4_MIB, cores=100))) is None
    # A CPU-only container beside it, and a CPU-only pod with the default scheduler.
    assert denial(pod(container(gpu=1, mem=3000, cores=30), container("side", cpu=1))) is None
    assert denial(pod(container(cpu=1), scheduler=None)) is None


def test_gpumem_percentage_is_refused_saying_what_to_ask_instead():
    refused = denial(pod(container(gpu=1, pct=50, cores=30)))
    assert refused is not None
    assert (
        "nvidia.com/gpumem-percentage" in refused
        and "which this namespace does not accept" in refused
    )
    assert f"nvidia.com/gpumem in MiB instead (at most {T4_MIB} MiB per vGPU)" in refused
    # Even beside a stated memory, even in a template.
    assert denial(pod(container(gpu=1, mem=1000, cores=30, pct=50))) is not None
    assert denial(pod(container(gpu=1, pct=50, cores=30), kind="Deployment")) is not None


def test_a_vgpu_container_must_state_memory_and_compute():
    refused = denial(pod(container(gpu=1, cores=30)))
    assert (
        refused is not None and "main ask for vGPUs (nvidia.com/gpu) without GPU memory" in refused
    )
    refused = denial(pod(container(gpu=1, mem=0, cores=30)))
    assert refused is not None and "without GPU memory" in refused
    refused = denial(pod(container(gpu=1, mem=3000)))
    assert refused is not None and "without compute: state nvidia.com/gpucores" in refused
    refused = denial(pod(container(gpu=1, mem=3000, cores=30), container("two", gpu=1)))
    assert refused is not None and "container(s) two ask" in refused


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"gpu": 1, "mem": T4_MIB + 1, "cores": 30}, f"than one GPU here has ({T4_MIB} MiB)"),
        ({"gpu": 1, "mem": "16Gi", "cores": 30}, "than one GPU here has"),
        ({"gpu": 1, "mem": 3000, "cores": 101}, "more than 100 nvidia.com/gpucores per vGPU"),
        ({"mem": 99999}, "than one GPU here has"),  # no vGPU named: HAMi would add one
    ],
)
def test_per_container_caps_hold_one_gpu(limits, words):
    refused = denial(pod(container(**limits)))
    assert refused is not None and words in refused


def test_a_pod_asking_vgpus_without_hamis_scheduler_is_refused():
    for scheduler in (None, "default-scheduler", "volcano"):
        refused = denial(pod(container(gpu=1, mem=3000, cores=30), scheduler=scheduler))
        assert refused is not None
        assert "in this namespace vGPUs are placed by hami-scheduler" in refused
    # A template: HAMi's webhook sets the scheduler on its pods, so none is asked of it.
    assert (
        denial(pod(container(gpu=1, mem=3000, cores=30), scheduler=None, kind="Deployment")) is None
    )


def test_a_namespace_without_a_vgpu_quota_is_not_matched():
    assert denial(pod(container(gpu=1), scheduler=None), memory=None) is None


# --- Kueue's configuration ------------------------------------------------------------------


def configmap(text: str) -> dict[str, Any]:
    return {"data": {"controller_manager_config.yaml": text}}


def test_kueues_documented_transformations_are_found_and_others_are_not():
    from devcluster.demo import KUEUE_CONFIG

    key = "controller_manager_config.yaml"
    assert vgpu.kueue_transformations_found(configmap(KUEUE_CONFIG), key) == [
        "nvidia.com/gpucores",
        "nvidia.com/gpumem",
    ]
    assert vgpu.kueue_problem(["nvidia.com/gpucores", "nvidia.com/gpumem"]) == ""
    assert vgpu.kueue_problem(None) == ""
    # Retain keeps the per-vGPU input too; no multiplyBy counts one vGPU's memory only.
    for wrong in (
        "strategy: Retain\n    multiplyBy: nvidia.com/gpu",
        "strategy: Replace",
    ):
        text = (
            "resources:\n  transformations:\n  - input: nvidia.com/gpumem\n    "
            f"{wrong}\n    outputs:\n      nvidia.com/total-gpumem: '1'\n"
        )
        found = vgpu.kueue_transformations_found(configmap(text), key)
        assert found == []
        assert "no ResourceTransformation for nvidia.com/gpumem and nvidia.com/gpucores" in (
            vgpu.kueue_problem(found)
        )
    assert vgpu.kueue_transformations_found(configmap("a: ["), key) == []


def test_a_change_reads_in_gib_and_percent_in_the_dry_run_words():
    from quotas.kube.describe import describe_changes

    def rq(mib: str) -> dict[str, Any]:
        hard = {"requests.nvidia.com/gpumem": mib, "limits.nvidia.com/gpucores": "30"}
        return {"kind": "ResourceQuota", "metadata": {"namespace": "ns"}, "spec": {"hard": hard}}

    path = ".spec.hard.requests.nvidia.com/gpumem"
    words = describe_changes(rq("4608"), rq("6144"), [path])[path]
    assert words == "ns: GPU memory 4.5 GiB → 6 GiB"
    path = ".spec.hard.limits.nvidia.com/gpucores"
    words = describe_changes(rq("1"), rq("1"), [path])[path]
    assert "30% of a GPU" in words

    def cq(mib: str) -> dict[str, Any]:
        line = {"name": "nvidia.com/total-gpumem", "nominalQuota": mib, "borrowingLimit": "0"}
        group = {
            "coveredResources": [line["name"]],
            "flavors": [{"name": "t4", "resources": [line]}],
        }
        return {
            "kind": "ClusterQueue",
            "metadata": {"name": "q"},
            "spec": {"resourceGroups": [group]},
        }

    path = ".spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    words = describe_changes(cq("4608"), cq("3072"), [path])[path]
    assert "guaranteed 4.5 GiB → 3 GiB" in words
