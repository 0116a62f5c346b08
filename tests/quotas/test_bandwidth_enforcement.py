"""On the cluster (the stand-in API server, with the real kubectl): a per-pod bandwidth cap an
approved request set (R27) holds pods in the tenant's namespaces, and only there."""

from __future__ import annotations

from typing import Any

import yaml

from approvals.services import quota_request_approve, quota_request_create
from quotas.sync import tenant_push
from tenants.models import Namespace
from tests.quotas.test_enforcement import kueue_configmap
from tests.standin import kubectl, kubectl_json

LABEL = "portal.gpu-quota.io/pod-bandwidth-max"
INGRESS = "kubernetes.io/ingress-bandwidth"
EGRESS = "kubernetes.io/egress-bandwidth"
CAPPED = "team-a-training"
POLICY = "gpu-quota-portal-pod-bandwidth"


def pod(standin, namespace: str, name: str, annotations: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations is not None:
        metadata["annotations"] = annotations
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": "loader", "image": "loader"}]},
    }
    path = standin.kubeconfig_path.parent / f"{namespace}-{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return kubectl(standin, "create", "-f", str(path), check=False)


def cap(world, value: str) -> None:  # type: ignore[no-untyped-def]
    request = quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice,
        reason="the data loaders flood the shared link", items=[],
        tenant_changes={"pod_bandwidth_max": value}, submit=True,
    )  # fmt: skip
    quota_request_approve(request=request, approver=world.admin)
    world.team_a.refresh_from_db()


def test_a_capped_namespace_refuses_pods_without_or_above_the_cap_and_admits_the_rest(
    world, standin
):
    kueue_configmap(standin)
    cap(world, "1000M")
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    assert tenant_push(tenant=world.team_b, cluster=world.a100).ok
    labels = kubectl_json(standin, "get", "namespace", CAPPED)["metadata"]["labels"]
    assert labels[LABEL] == "1G"
    policies = kubectl(standin, "get", "validatingadmissionpolicy", "-o", "name").stdout
    assert f"validatingadmissionpolicy.admissionregistration.k8s.io/{POLICY}" in policies

    bare = pod(standin, CAPPED, "bare")
    assert bare.returncode != 0
    assert f"pods \"bare\" is forbidden: ValidatingAdmissionPolicy '{POLICY}'" in bare.stderr
    assert f"set the annotations {INGRESS} and {EGRESS} (each at most 1G)" in bare.stderr

    one_way = pod(standin, CAPPED, "one-way", {INGRESS: "100M"})
    assert one_way.returncode != 0 and "set the annotations" in one_way.stderr

    above = pod(standin, CAPPED, "greedy", {INGRESS: "500M", EGRESS: "2G"})
    assert above.returncode != 0
    assert f"{EGRESS} 2G is above this namespace's cap of 1G bits per second" in above.stderr

    negative = pod(standin, CAPPED, "negative", {INGRESS: "-1G", EGRESS: "500M"})
    assert negative.returncode != 0
    assert f"{INGRESS} -1G is below 1k (1,000 bits per second)" in negative.stderr

    within = pod(standin, CAPPED, "loader", {INGRESS: "1G", EGRESS: "500M"})
    assert within.returncode == 0, within.stderr
    assert kubectl_json(standin, "get", "pod", "loader", "-n", CAPPED)["metadata"]["name"]

    # team-b has no cap: its namespaces carry no label and its pods are not asked.
    [uncapped] = Namespace.objects.filter(tenant=world.team_b).values_list("name", flat=True)[:1]
    assert LABEL not in kubectl_json(standin, "get", "namespace", uncapped)["metadata"]["labels"]
    free = pod(standin, uncapped, "bare")
    assert free.returncode == 0, free.stderr


def test_a_withdrawn_cap_leaves_the_namespace_unlabelled_and_its_pods_free(world, standin):
    kueue_configmap(standin)
    cap(world, "1G")
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    assert pod(standin, CAPPED, "bare").returncode != 0
    cap(world, "")
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    assert LABEL not in kubectl_json(standin, "get", "namespace", CAPPED)["metadata"]["labels"]
    admitted = pod(standin, CAPPED, "bare")
    assert admitted.returncode == 0, admitted.stderr
