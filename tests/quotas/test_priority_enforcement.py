"""On the cluster (the stand-in API server, with the real kubectl): a tenant without the
production grant cannot run a pod at the production priority (R15), the inference / batch split
bounds each class (R17), and the per-pod caps hold (R16), all as approved requests pushed them."""

from __future__ import annotations

import re
from typing import Any

import yaml

from approvals.services import quota_request_approve, quota_request_create
from quotas.sync import tenant_push
from tests.pages import logged_in
from tests.quotas.test_enforcement import QUEUED, kueue_configmap
from tests.standin import kubectl, kubectl_json

GPU = "nvidia.com/gpu"
PRODUCTION = "gpu-portal-production"
NAMESPACE = "team-a-inference"


def pod(standin, name: str, gpus: int, priority: str | None = None, containers: int = 1):
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}", "image": "server", "resources": {"limits": {GPU: str(gpus)}}}
            for i in range(containers)
        ]
    }
    if priority:
        spec["priorityClassName"] = priority
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(QUEUED)},
        "spec": spec,
    }
    path = standin.kubeconfig_path.parent / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return kubectl(standin, "create", "-f", str(path), check=False)


def approve(world, **changes: Any) -> None:
    production = changes.pop("production_priority", None)
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="serve beside training",
        items=[],
        scheduling=changes,
        production_priority=production,
        submit=True,
    )
    quota_request_approve(request=request, approver=world.admin)
    world.team_a.refresh_from_db()


def test_production_pods_are_refused_without_the_grant_and_admitted_with_it(world, standin):
    kueue_configmap(standin)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    refused = pod(standin, "serve", 1, PRODUCTION)
    assert refused.returncode != 0
    assert 'pods "serve" is forbidden: exceeded quota: gpu-portal-no-production' in refused.stderr
    assert "limited: pods=0" in refused.stderr
    # Work at the other priorities is not touched.
    assert pod(standin, "train", 1, "gpu-portal-default").returncode == 0

    approve(world, production_priority=True)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    names = kubectl(standin, "get", "resourcequota", "-n", NAMESPACE, "-o", "name").stdout
    assert "gpu-portal-no-production" not in names
    admitted = pod(standin, "serve", 1, PRODUCTION)
    assert admitted.returncode == 0, admitted.stderr


def test_the_split_bounds_inference_and_batch_apart(world, standin):
    kueue_configmap(standin)
    approve(world, production_priority=True, inference_gpus=3)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    inference = kubectl_json(
        standin, "get", "resourcequota", "-n", NAMESPACE, "gpu-portal-inference"
    )
    batch = kubectl_json(standin, "get", "resourcequota", "-n", NAMESPACE, "gpu-portal-batch")
    assert inference["spec"]["hard"][f"requests.{GPU}"] == "3"
    assert batch["spec"]["hard"][f"requests.{GPU}"] == "7"  # team-a's A100 limit is 10

    assert pod(standin, "serve-a", 3, PRODUCTION).returncode == 0
    over = pod(standin, "serve-b", 1, PRODUCTION)
    assert over.returncode != 0
    assert "exceeded quota: gpu-portal-inference" in over.stderr
    # Batch has its own 7; the default priority class is batch.
    assert pod(standin, "train", 7, "gpu-portal-default").returncode == 0
    used = kubectl_json(standin, "get", "resourcequota", "-n", NAMESPACE, "gpu-portal-inference")
    assert used["status"]["used"][f"requests.{GPU}"] == "3"

    # The team's page on the cluster reads that use live.
    page = logged_in(world.carol).get("/tenants/team-a/clusters/demo-a100/")
    rows = re.findall(
        r'<tr data-namespace="team-a-inference" data-quota="([^"]+)">(.*?)</tr>',
        page.content.decode(),
        re.S,
    )
    shown = {
        quota: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip() for quota, row in rows
    }
    assert (
        shown["gpu-portal-inference"]
        == "team-a-inference Inference (production priority) 3 GPUs 3 GPUs"
    )
    assert (
        shown["gpu-portal-batch"]
        == "team-a-inference Batch (every priority but production, or none) 7 GPUs 7 GPUs"
    )


def test_per_pod_caps_reach_the_limit_range_and_refuse_a_larger_pod(world, standin):
    kueue_configmap(standin)
    approve(world, max_gpus_per_pod=2)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    limit_range = kubectl_json(standin, "get", "limitrange", "-n", NAMESPACE, "gpu-portal-limits")
    container, whole_pod = limit_range["spec"]["limits"]
    assert container["max"][GPU] == "2"
    assert whole_pod == {"type": "Pod", "max": {GPU: "2"}}
    listed = kubectl(standin, "get", "limitrange", "-n", NAMESPACE)
    assert "gpu-portal-limits" in listed.stdout

    assert pod(standin, "fits", 2).returncode == 0
    too_big = pod(standin, "too-big", 3)
    assert too_big.returncode != 0 and "forbidden" in too_big.stderr
    # Two containers of 2 GPUs each: within the container cap, above the pod cap.
    two = pod(standin, "two", 2, containers=2)
    assert two.returncode != 0 and "forbidden" in two.stderr


def test_pods_without_a_priority_class_count_as_batch(world, standin):
    """The batch quota is every pod that is not production: a pod with no class cannot
    spend the GPUs set aside for inference."""
    kueue_configmap(standin)
    approve(world, production_priority=True, inference_gpus=3)
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    assert pod(standin, "classless-0", 1).returncode == 0
    batch = kubectl_json(standin, "get", "resourcequota", "-n", NAMESPACE, "gpu-portal-batch")
    assert batch["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "NotIn", "values": [PRODUCTION]}
    ]
    assert batch["status"]["used"][f"requests.{GPU}"] == "1"
    for i in range(1, 7):
        assert pod(standin, f"classless-{i}", 1).returncode == 0
    over = pod(standin, "classless-7", 1)
    assert over.returncode != 0
    assert "exceeded quota: gpu-portal-batch" in over.stderr
    # The production pod still fits its own three.
    served = pod(standin, "serve", 3, PRODUCTION)
    assert served.returncode == 0, served.stderr
    inference = kubectl_json(
        standin, "get", "resourcequota", "-n", NAMESPACE, "gpu-portal-inference"
    )
    assert inference["status"]["used"][f"requests.{GPU}"] == "3"
