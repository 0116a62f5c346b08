"""vGPU quotas (HAMi) pushed to the stand-in API server, and a hostile tenant against them.

team-a gets 3 vGPUs, 4608 MiB (4.5 GiB) of GPU memory and 30% of a GPU's compute on a T4
shared through HAMi, beside its A100s (Kueue manages everything on demo-a100). The push reads
HAMi's version from its scheduler Deployment; the tenant's user then creates pods with the real
kubectl, and the stand-in's quota admission (Kubernetes' own evaluator, extended resources
included) and the vGPU admission policy answer as an API server would.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MEMORY_RESOURCE,
    FlavorKind,
)
from quotas.kube import vgpu
from quotas.models import Cluster, FlavorResource, ResourceFlavor
from quotas.selectors import vgpu_flavor_problems, vgpu_kueue_problem
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from quotas.sync import tenant_push
from quotas.vgpu import GIB, MIB
from tests.devcluster.conftest import make_kubectl
from tests.quotas.test_enforcement import KUEUE_CONFIG, kueue_configmap

NAMESPACE = "team-a-training"
T4_MIB = 15360
VGPU_POLICY = "ValidatingAdmissionPolicy 'gpu-quota-portal-vgpu'"
KUEUE_TRANSFORMATIONS = yaml.safe_dump(
    {"resources": {"transformations": [dict(t) for t in vgpu.KUEUE_TRANSFORMATIONS]}}
)


def vgpu_flavor(cluster: Cluster, name: str = "t4-vgpu", *, gpus: int = 1) -> ResourceFlavor:
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name=name,
        kind=FlavorKind.VGPU,
        gpu_model="Tesla-T4",
        gpu_memory_mib=T4_MIB,
        vgpu_split=10,
        node_labels={"nvidia.com/gpu.product": "Tesla-T4"},
    )
    FlavorResource.objects.bulk_create(
        [
            FlavorResource(flavor=flavor, resource=GPU_RESOURCE, capacity=Decimal(gpus * 10)),
            FlavorResource(
                flavor=flavor, resource=GPUMEM_RESOURCE, capacity=Decimal(gpus * T4_MIB * MIB)
            ),
            FlavorResource(flavor=flavor, resource=GPUCORES_RESOURCE, capacity=Decimal(gpus * 100)),
        ]
    )
    return flavor


def hami(standin, version: str) -> None:
    """HAMi's scheduler Deployment as its Helm chart installs it (kube-system/hami-scheduler,
    labelled with the chart's appVersion)."""
    apps = client.AppsV1Api(config.new_client_from_config(config_file=str(standin.kubeconfig_path)))
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "hami-scheduler",
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/name": "hami", "app.kubernetes.io/version": version},
        },
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/component": "hami-scheduler"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/component": "hami-scheduler"}},
                "spec": {
                    "containers": [
                        {"name": "vgpu-scheduler-extender", "image": f"projecthami/hami:{version}"}
                    ]
                },
            },
        },
    }
    try:
        apps.delete_namespaced_deployment("hami-scheduler", "kube-system")
    except client.exceptions.ApiException as gone:
        assert gone.status == 404
    apps.create_namespaced_deployment("kube-system", body)


@pytest.fixture
def t4(world, standin) -> ResourceFlavor:
    kueue_configmap(standin)
    flavor = vgpu_flavor(world.a100)
    # The portal's form refuses a vGPU line on a cluster without HAMi: say it has one.
    Cluster.objects.filter(pk=world.a100.pk).update(hami_version="v2.7.1")
    world.a100.refresh_from_db()
    a100 = world.a100_gpu
    quota_set_write(
        tenant=world.team_a,
        cluster=world.a100,
        actor=world.admin,
        items=[
            QuotaItem(a100, GPU_RESOURCE, Decimal(6), Decimal(10)),
            QuotaItem(a100, CPU_RESOURCE, Decimal(48), Decimal(80)),
            QuotaItem(a100, MEMORY_RESOURCE, Decimal(384 * GIB), Decimal(640 * GIB)),
            QuotaItem(flavor, GPU_RESOURCE, Decimal(3), Decimal(3)),
            QuotaItem(flavor, GPUMEM_RESOURCE, Decimal(4608 * MIB), Decimal(4608 * MIB)),
            QuotaItem(flavor, GPUCORES_RESOURCE, Decimal(30), Decimal(30)),
        ],
        scheduling=SchedulingQuotas(max_running_jobs=5, max_queued_jobs=20, max_pods=20),
    )
    return flavor


def alice_kubectl(standin, tmp_path: Path):
    path = tmp_path / "kubeconfig-alice"
    standin.kubeconfig_for("alice", path, [])
    return make_kubectl(path, tmp_path / "kube-cache")


def vgpu_pod(
    name: str,
    *,
    mem: int | None = 3000,
    cores: int | None = 30,
    extra: dict[str, str] | None = None,
) -> str:
    limits: dict[str, str] = {"nvidia.com/gpu": "1"}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    limits.update(extra or {})
    spec: dict[str, Any] = {
        "schedulerName": "hami-scheduler",
        "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}],
    }
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                # Kueue's pod integration manages it: the kueue-only policy lets it through.
                "labels": {"kueue.x-k8s.io/queue-name": "default"},
            },
            "spec": spec,
        }
    )


def test_the_namespace_quota_holds_gpu_memory_and_compute_as_hami_counts_them(
    world, standin, t4, tmp_path
):
    hami(standin, "v2.7.1")
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)
    assert outcome.ok, outcome.message
    world.a100.refresh_from_db()
    assert world.a100.hami_version == "v2.7.1" and world.a100.hami_read_at is not None
    assert vgpu_flavor_problems(world.a100) == {}
    # This Kueue's configuration has no ResourceTransformation: the page warns.
    assert "Kueue admits vGPU work on the vGPU count alone" in vgpu_kueue_problem(world.a100)
    kueue_configmap(standin, KUEUE_CONFIG + KUEUE_TRANSFORMATIONS)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    world.a100.refresh_from_db()
    assert vgpu_kueue_problem(world.a100) == ""

    kubectl = make_kubectl(standin.kubeconfig_path, tmp_path / "cache")
    shown = kubectl("get", "resourcequota", "gpu-portal-quota", "-n", NAMESPACE, "-o", "json")
    hard = json.loads(shown.stdout)["spec"]["hard"]
    assert hard["requests.nvidia.com/gpumem"] == hard["limits.nvidia.com/gpumem"] == "4608"
    assert hard["requests.nvidia.com/gpucores"] == hard["limits.nvidia.com/gpucores"] == "30"
    assert hard["limits.nvidia.com/gpu"] == hard["requests.nvidia.com/gpu"] == "13"  # 10 + 3
    table = kubectl("get", "resourcequota", "-n", NAMESPACE).stdout
    assert "requests.nvidia.com/gpumem: 0/4608" in table


def test_a_pod_over_the_teams_gpu_memory_is_refused_with_kubernetes_exceeded_quota(
    world, standin, t4, tmp_path
):
    hami(standin, "v2.7.1")
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    alice = alice_kubectl(standin, tmp_path)

    over = alice("create", "-f", "-", stdin=vgpu_pod("too-big", mem=5000), check=False)
    assert over.returncode != 0
    assert (
        'pods "too-big" is forbidden: exceeded quota: gpu-portal-quota, requested: '
        "requests.nvidia.com/gpumem=5k, used: requests.nvidia.com/gpumem=0, limited: "
        "requests.nvidia.com/gpumem=4608"
    ) in over.stderr

    within = alice("create", "-f", "-", stdin=vgpu_pod("fits", mem=3000, cores=20), check=False)
    assert within.returncode == 0, within.stderr
    # What is left (1608 MiB) is less than another 3000.
    again = alice("create", "-f", "-", stdin=vgpu_pod("second", mem=3000, cores=10), check=False)
    assert (
        "exceeded quota: gpu-portal-quota, requested: requests.nvidia.com/gpumem=3k, "
        "used: requests.nvidia.com/gpumem=3k, limited: requests.nvidia.com/gpumem=4608"
    ) in again.stderr
    # Compute is held the same way: 20 of 30 points used, 20 more asked.
    cores = alice("create", "-f", "-", stdin=vgpu_pod("cores", mem=1000, cores=20), check=False)
    assert (
        "requested: requests.nvidia.com/gpucores=20, used: requests.nvidia.com/gpucores=20, "
        "limited: requests.nvidia.com/gpucores=30"
    ) in cores.stderr


def test_a_hostile_tenant_cannot_get_around_the_gpu_memory_quota(world, standin, t4, tmp_path):
    hami(standin, "v2.7.1")
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    alice = alice_kubectl(standin, tmp_path)

    def refused(manifest: str) -> str:
        done = alice("create", "-f", "-", stdin=manifest, check=False)
        assert done.returncode != 0, "admitted"
        return done.stderr

    # A percentage of whichever GPU HAMi picks, to dodge a quota counted in MiB.
    said = refused(vgpu_pod("pct", mem=None, extra={"nvidia.com/gpumem-percentage": "100"}))
    assert VGPU_POLICY in said and "nvidia.com/gpumem-percentage" in said
    # No memory at all: HAMi would give the vGPU the whole GPU's memory.
    said = refused(vgpu_pod("nomem", mem=None))
    assert VGPU_POLICY in said and "without GPU memory" in said
    said = refused(vgpu_pod("nocores", cores=None))
    assert VGPU_POLICY in said and "without compute" in said
    # More than one GPU has, and compute above 100%.
    said = refused(vgpu_pod("huge", mem=T4_MIB + 1))
    assert VGPU_POLICY in said and f"than one GPU here has ({T4_MIB} MiB)" in said
    said = refused(vgpu_pod("hot", cores=150))
    assert VGPU_POLICY in said and "more than 100 nvidia.com/gpucores" in said
    # Another scheduler, which would place it without HAMi's quota.
    manifest = yaml.safe_load(vgpu_pod("elsewhere"))
    manifest["spec"]["schedulerName"] = "default-scheduler"
    said = refused(yaml.safe_dump(manifest))
    assert VGPU_POLICY in said and "placed by hami-scheduler" in said
    # Nothing the tenant did is there.
    pods = json.loads(alice("get", "pods", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    assert pods == []


@pytest.mark.parametrize("version", ["v2.6.1", None])
def test_a_cluster_without_a_recent_hami_gets_nothing_for_its_vgpu_flavor(
    world, standin, t4, tmp_path, version
):
    if version:
        hami(standin, version)
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)
    assert outcome.ok, outcome.message
    world.a100.refresh_from_db()
    assert world.a100.hami_version == (version or "")
    problems = vgpu_flavor_problems(world.a100)
    assert list(problems) == ["t4-vgpu"]
    assert ("older than 2.7.0" if version else "HAMi was not found") in problems["t4-vgpu"]
    kubectl = make_kubectl(standin.kubeconfig_path, tmp_path / "cache")
    everything = kubectl(
        "get", "resourcequotas,limitranges,namespaces,clusterqueues,resourceflavors,"
        "validatingadmissionpolicies", "-A", "-o", "json",
    ).stdout  # fmt: skip
    for word in ("gpumem", "gpucores", "t4-vgpu", "vgpu-memory-mib", "gpu-quota-portal-vgpu"):
        assert word not in everything
