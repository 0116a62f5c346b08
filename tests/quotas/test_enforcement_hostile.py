"""A hostile tenant against the pushed policies, on the stand-in API server through HTTP with
the official Python client: each request authenticated as a tenant's user, as Kubernetes'
own controllers (their ServiceAccounts), or impersonated by the admin; the stand-in hands the
policies the request's real ``request.userInfo``.

team-a may hold 10 A100s across its two namespaces (Kueue manages everything on demo-a100).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from quotas.sync import tenant_push
from tests.quotas.test_enforcement import kueue_configmap

GPU = "nvidia.com/gpu"
NAMESPACE = "team-a-training"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUEUE_POLICY = "ValidatingAdmissionPolicy 'gpu-quota-portal-kueue-only'"
ENV_POLICY = "ValidatingAdmissionPolicy 'gpu-quota-portal-device-env'"
KEYS_POLICY = "ValidatingAdmissionPolicy 'gpu-quota-portal-device-env-keys'"


@pytest.fixture
def pushed(world, standin):
    kueue_configmap(standin)
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)
    assert outcome.ok, outcome.message
    return standin


def acting_as(standin, tmp_path: Path, user: str, groups: tuple[str, ...] = ()) -> ApiClient:
    path = tmp_path / f"kubeconfig-{user.replace(':', '-')}"
    standin.kubeconfig_for(user, path, groups)
    return config.new_client_from_config(config_file=str(path))


def impersonating(standin, user: str) -> ApiClient:
    """The admin's client, acting as ``user`` through the Impersonate-User header."""
    api = config.new_client_from_config(config_file=str(standin.kubeconfig_path))
    api.set_default_header("Impersonate-User", user)
    return api


def owner(kind: str, api_version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": "x", "uid": "1", "controller": True}


def pod_spec(gpus: int, env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "trainer"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    if env:
        container["env"] = env
    return {"containers": [container]}


def pod(name: str, gpus: int, owners: list[dict] | None = None, env=None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec(gpus, env)}


def refusal(create) -> str:
    with pytest.raises(ApiException) as refused:
        create()
    assert refused.value.status == 403, refused.value.body
    return str(refused.value.body)


def test_a_tenant_user_is_refused_every_way_around_and_the_job_controller_is_not(
    world, pushed, tmp_path
):
    alice = acting_as(pushed, tmp_path, "alice")
    core, apps = client.CoreV1Api(alice), client.AppsV1Api(alice)

    # A bare pod with 6 GPUs owned by the tenant's own ServiceAccount: an owner is only a claim.
    said = refusal(
        lambda: core.create_namespaced_pod(NAMESPACE, pod("forged", 6, [owner("ServiceAccount")]))
    )
    assert KUEUE_POLICY in said
    assert "tenant team-a: this Pod requests GPUs but Kueue would not manage it" in said
    assert "It names a controller owner, but alice is not a controller" in said
    assert "kueue.x-k8s.io/queue-name: default" in said

    # A Deployment owned by a ConfigMap.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "serve",
            "namespace": NAMESPACE,
            "ownerReferences": [owner("ConfigMap")],
        },
        "spec": {
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {"metadata": {"labels": {"app": "serve"}}, "spec": pod_spec(6)},
        },
    }
    said = refusal(lambda: apps.create_namespaced_deployment(NAMESPACE, deployment))
    assert KUEUE_POLICY in said and "this Deployment requests GPUs" in said

    # A pod that asks for no GPU but names every device of its node.
    everything = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    said = refusal(lambda: core.create_namespaced_pod(NAMESPACE, pod("peek", 0, env=everything)))
    assert ENV_POLICY in said
    assert "tenant team-a: in this Pod the container(s) main name GPU devices" in said
    assert "request GPUs as a resource" in said

    # The same variable kept in a ConfigMap for envFrom.
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": NAMESPACE},
        "data": {"NVIDIA_VISIBLE_DEVICES": "all"},
    }
    said = refusal(lambda: core.create_namespaced_config_map(NAMESPACE, config_map))
    assert KEYS_POLICY in said and "holds the key(s) NVIDIA_VISIBLE_DEVICES" in said

    # The job controller makes the Job-owned pod; alice naming the same owner may not.
    job_pod = pod("job-pod", 6, [owner("Job", "batch/v1")])
    said = refusal(lambda: core.create_namespaced_pod(NAMESPACE, job_pod))
    assert "alice is not a controller" in said
    controller = acting_as(
        pushed,
        tmp_path,
        JOB_CONTROLLER,
        ("system:serviceaccounts", "system:serviceaccounts:kube-system"),
    )
    made = client.CoreV1Api(controller).create_namespaced_pod(NAMESPACE, job_pod)
    assert made.metadata.name == "job-pod"
    # Even the job controller may not make a pod owned by a ServiceAccount: no loop does.
    said = refusal(
        lambda: client.CoreV1Api(controller).create_namespaced_pod(
            NAMESPACE, pod("odd", 1, [owner("ServiceAccount")])
        )
    )
    assert f"{JOB_CONTROLLER} is not a controller" in said


def test_impersonated_controllers_pass_and_an_impersonated_user_does_not(world, pushed):
    replica_pod = pod("rs-pod", 2, [owner("ReplicaSet", "apps/v1")])
    as_manager = client.CoreV1Api(impersonating(pushed, "system:kube-controller-manager"))
    assert as_manager.create_namespaced_pod(NAMESPACE, replica_pod).metadata.name == "rs-pod"
    as_alice = client.CoreV1Api(impersonating(pushed, "alice"))
    replica_pod["metadata"]["name"] = "rs-pod-2"
    said = refusal(lambda: as_alice.create_namespaced_pod(NAMESPACE, replica_pod))
    assert "alice is not a controller" in said
