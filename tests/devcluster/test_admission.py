"""The stand-in refuses what a real API server's admission chain refuses: LimitRange defaults
and maxima, ResourceQuota (with status.used kept current), ValidatingAdmissionPolicies and CRD
transition rules, through the official Python client and through kubectl."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ApiException, ForbiddenError, UnprocessibleEntityError
from kubernetes.dynamic.resource import Resource

from devcluster import Handle
from tests.devcluster.conftest import Kubectl
from tests.devcluster.test_server import status_of

NS = "team-a"
GPU = "nvidia.com/gpu"
ADMISSION = "admissionregistration.k8s.io/v1"


def pod(
    name: str,
    gpus: int | None = None,
    *,
    priority_class: str | None = None,
    labels: dict[str, str] | None = None,
    **resources: dict[str, str],
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "trainer:1"}
    if gpus is not None:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def resource_quota(name: str, hard: dict[str, str], scope: list[str] | None = None) -> dict:
    spec: dict[str, Any] = {"hard": hard}
    if scope is not None:
        spec["scopeSelector"] = {
            "matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": scope}]
        }
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name}, "spec": spec}


# What the portal compiles per tenant namespace (quotas.kube.compiler), in small.
PORTAL_LIMITS = {
    "apiVersion": "v1",
    "kind": "LimitRange",
    "metadata": {"name": "portal-limits"},
    "spec": {
        "limits": [
            {
                "type": "Container",
                "max": {"cpu": "8", "memory": "64Gi", GPU: "8"},
                "default": {"cpu": "8", "memory": "64Gi", GPU: "0"},
                "defaultRequest": {"cpu": "100m", "memory": "256Mi", GPU: "0"},
            },
            {"type": "Pod", "max": {GPU: "8"}},
        ]
    },
}


@pytest.fixture
def api(dynamic: DynamicClient, devcluster: Handle) -> DynamicClient:
    dynamic.resources.get(api_version="v1", kind="Namespace").create(
        body={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": NS, "labels": {"tier": "gold"}},
        }
    )
    return dynamic


def kind(api: DynamicClient, name: str, api_version: str = "v1") -> Resource:
    return api.resources.get(api_version=api_version, kind=name)


def refusal(error: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return status_of(error.value)


def used(api: DynamicClient, name: str = "portal-quota") -> dict[str, str]:
    status = kind(api, "ResourceQuota").get(name=name, namespace=NS).to_dict()["status"]
    assert (
        status["hard"]
        == kind(api, "ResourceQuota").get(name=name, namespace=NS).spec.hard.to_dict()
    )
    return dict(status["used"])


def test_a_pod_asking_more_gpus_than_the_quota_is_refused_with_the_api_servers_message(
    api: DynamicClient,
) -> None:
    kind(api, "ResourceQuota").create(
        body=resource_quota("portal-quota", {"requests.nvidia.com/gpu": "10"}), namespace=NS
    )
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=pod("p", 11), namespace=NS)
    status = refusal(error)
    # A GPU limit alone counts: pod defaulting copies it to the request.
    assert status["message"] == (
        'pods "p" is forbidden: exceeded quota: portal-quota, requested: '
        "requests.nvidia.com/gpu=11, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=10"
    )
    assert status["reason"] == "Forbidden" and status["code"] == 403
    assert status["details"] == {"name": "p", "kind": "pods"}
    assert kind(api, "Pod").get(namespace=NS).items == []
    assert used(api) == {"requests.nvidia.com/gpu": "0"}


def test_two_pods_that_together_exceed_the_quota_then_one_is_deleted(api: DynamicClient) -> None:
    quotas, pods = kind(api, "ResourceQuota"), kind(api, "Pod")
    quotas.create(
        body=resource_quota("portal-quota", {"requests.nvidia.com/gpu": "10", "pods": "5"}),
        namespace=NS,
    )
    pods.create(body=pod("first", 6), namespace=NS)
    assert used(api) == {"requests.nvidia.com/gpu": "6", "pods": "1"}
    with pytest.raises(ForbiddenError) as error:
        pods.create(body=pod("second", 6), namespace=NS)
    assert refusal(error)["message"] == (
        'pods "second" is forbidden: exceeded quota: portal-quota, requested: '
        "requests.nvidia.com/gpu=6, used: requests.nvidia.com/gpu=6, limited: "
        "requests.nvidia.com/gpu=10"
    )
    assert used(api) == {"requests.nvidia.com/gpu": "6", "pods": "1"}
    pods.delete(name="first", namespace=NS)
    assert used(api) == {"requests.nvidia.com/gpu": "0", "pods": "0"}
    pods.create(body=pod("second", 6), namespace=NS)
    assert used(api) == {"requests.nvidia.com/gpu": "6", "pods": "1"}
    # A pod that ends (Succeeded) gives its GPUs back, as the quota controller counts.
    api.request(
        "patch",
        f"/api/v1/namespaces/{NS}/pods/second/status",
        body={"status": {"phase": "Succeeded"}},
        content_type="application/merge-patch+json",
    )
    assert used(api) == {"requests.nvidia.com/gpu": "0", "pods": "0"}
    pods.create(body=pod("third", 10), namespace=NS)


def test_a_quota_created_after_the_pods_counts_them(api: DynamicClient) -> None:
    kind(api, "Pod").create(body=pod("running", 3), namespace=NS)
    kind(api, "ResourceQuota").create(
        body=resource_quota("portal-quota", {"requests.nvidia.com/gpu": "4", "count/pods": "9"}),
        namespace=NS,
    )
    assert used(api) == {"requests.nvidia.com/gpu": "3", "count/pods": "1"}


def test_cpu_quota_without_a_limitrange_requires_requests_and_with_one_defaults_them(
    api: DynamicClient,
) -> None:
    kind(api, "ResourceQuota").create(
        body=resource_quota(
            "portal-quota",
            {"requests.cpu": "1", "requests.memory": "1Gi", "requests.nvidia.com/gpu": "4"},
        ),
        namespace=NS,
    )
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=pod("bare"), namespace=NS)
    assert refusal(error)["message"] == (
        'pods "bare" is forbidden: failed quota: portal-quota: must specify '
        "requests.cpu for: main; requests.memory for: main"
    )
    # With the portal's LimitRange a pod without requests fits, as on a real cluster.
    kind(api, "LimitRange").create(body=PORTAL_LIMITS, namespace=NS)
    created = kind(api, "Pod").create(body=pod("bare"), namespace=NS).to_dict()
    resources = created["spec"]["containers"][0]["resources"]
    assert resources == {
        "limits": {"cpu": "8", "memory": "64Gi", GPU: "0"},
        "requests": {"cpu": "100m", "memory": "256Mi", GPU: "0"},
    }
    assert created["metadata"]["annotations"]["kubernetes.io/limit-ranger"] == (
        "LimitRanger plugin set: cpu, memory, nvidia.com/gpu request for container main; "
        "cpu, memory, nvidia.com/gpu limit for container main"
    )
    kind(api, "Pod").create(body=pod("second"), namespace=NS)
    assert used(api) == {
        "requests.cpu": "200m",
        "requests.memory": "512Mi",
        "requests.nvidia.com/gpu": "0",
    }


def test_limitrange_maximum_per_container_and_per_pod(api: DynamicClient) -> None:
    kind(api, "LimitRange").create(body=PORTAL_LIMITS, namespace=NS)
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=pod("p", 11), namespace=NS)
    assert refusal(error)["message"] == (
        'pods "p" is forbidden: [maximum nvidia.com/gpu usage per Container is 8, but limit is '
        "11., maximum nvidia.com/gpu usage per Pod is 8, but limit is 11.]"
    )
    # Two containers of 5 fit the per-container maximum but not the per-pod one.
    body = pod("two")
    body["spec"]["containers"] = [
        {"name": n, "image": "x", "resources": {"limits": {GPU: "5"}}} for n in ("a", "b")
    ]
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=body, namespace=NS)
    assert refusal(error)["message"] == (
        'pods "two" is forbidden: maximum nvidia.com/gpu usage per Pod is 8, but limit is 10.'
    )
    kind(api, "Pod").create(body=pod("fits", 8), namespace=NS)


def test_pvc_storage_quota_overall_and_per_storage_class(api: DynamicClient) -> None:
    kind(api, "ResourceQuota").create(
        body=resource_quota(
            "portal-quota",
            {
                "requests.storage": "100Gi",
                "fast.storageclass.storage.k8s.io/requests.storage": "10Gi",
                "persistentvolumeclaims": "3",
            },
        ),
        namespace=NS,
    )
    pvcs = kind(api, "PersistentVolumeClaim")

    def claim(name: str, size: str, storage_class: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        }
        if storage_class:
            spec["storageClassName"] = storage_class
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name},
            "spec": spec,
        }

    pvcs.create(body=claim("data", "50Gi"), namespace=NS)
    with pytest.raises(ForbiddenError) as error:
        pvcs.create(body=claim("scratch", "20Gi", "fast"), namespace=NS)
    assert refusal(error)["message"] == (
        'persistentvolumeclaims "scratch" is forbidden: exceeded quota: portal-quota, requested: '
        "fast.storageclass.storage.k8s.io/requests.storage=20Gi, used: "
        "fast.storageclass.storage.k8s.io/requests.storage=0, limited: "
        "fast.storageclass.storage.k8s.io/requests.storage=10Gi"
    )
    pvcs.create(body=claim("scratch", "8Gi", "fast"), namespace=NS)
    assert used(api) == {
        "requests.storage": "58Gi",
        "fast.storageclass.storage.k8s.io/requests.storage": "8Gi",
        "persistentvolumeclaims": "2",
    }
    with pytest.raises(ForbiddenError) as error:
        pvcs.create(body=claim("more", "60Gi"), namespace=NS)
    assert (
        "requested: requests.storage=60Gi, used: requests.storage=58Gi" in refusal(error)["message"]
    )


def priority_class(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


def test_scoped_quotas_count_only_pods_of_their_priority_classes(api: DynamicClient) -> None:
    for name, value in (("default", 0), ("production", 1000)):
        kind(api, "PriorityClass", "scheduling.k8s.io/v1").create(body=priority_class(name, value))
    quotas = kind(api, "ResourceQuota")
    quotas.create(
        body=resource_quota("portal-quota", {"requests.nvidia.com/gpu": "10"}), namespace=NS
    )
    quotas.create(
        body=resource_quota("portal-inference", {"requests.nvidia.com/gpu": "2"}, ["production"]),
        namespace=NS,
    )
    kind(api, "Pod").create(body=pod("batch", 6, priority_class="default"), namespace=NS)
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=pod("serve", 3, priority_class="production"), namespace=NS)
    assert (
        "exceeded quota: portal-inference, requested: requests.nvidia.com/gpu=3"
        in (refusal(error)["message"])
    )
    kind(api, "Pod").create(body=pod("serve", 2, priority_class="production"), namespace=NS)
    # Every matching quota must allow it: the unscoped one is the one full now.
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=pod("more", 3), namespace=NS)
    assert "exceeded quota: portal-quota," in refusal(error)["message"]
    assert used(api) == {"requests.nvidia.com/gpu": "8"}
    assert used(api, "portal-inference") == {"requests.nvidia.com/gpu": "2"}


def test_job_count_quota(api: DynamicClient) -> None:
    kind(api, "ResourceQuota").create(
        body=resource_quota("portal-quota", {"count/jobs.batch": "1"}), namespace=NS
    )
    jobs = kind(api, "Job", "batch/v1")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}, "spec": {}}
    jobs.create(body=job, namespace=NS)
    with pytest.raises(ForbiddenError) as error:
        jobs.create(body={**job, "metadata": {"name": "again"}}, namespace=NS)
    assert refusal(error)["message"] == (
        'jobs.batch "again" is forbidden: exceeded quota: portal-quota, requested: '
        "count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1"
    )
    assert refusal(error)["details"]["group"] == "batch"


def max_gpus_policy(limit: int) -> dict[str, Any]:
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "portal-max-gpus"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "not-system", "expression": "!object.metadata.name.startsWith('system-')"}
            ],
            "variables": [
                {
                    "name": "gpus",
                    "expression": "object.spec.containers.map(c, has(c.resources) && "
                    "has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits ? "
                    "int(c.resources.limits['nvidia.com/gpu']) : 0).sum()",
                }
            ],
            "validations": [
                {
                    "expression": f"variables.gpus <= {limit}",
                    "messageExpression": "'the pod asks for ' + string(variables.gpus) + "
                    f"' GPUs; at most {limit} per pod'",
                    "reason": "Forbidden",
                },
                {"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                 "message": "pods need a team label"},
            ],
        },
    }  # fmt: skip


def binding(name: str, actions: list[str], **match: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": "portal-max-gpus", "validationActions": actions}
    if match:
        spec["matchResources"] = match
    return {
        "apiVersion": ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_a_policy_refuses_one_pod_and_allows_another(api: DynamicClient) -> None:
    kind(api, "ValidatingAdmissionPolicy", ADMISSION).create(body=max_gpus_policy(4))
    team = {"team": "a"}
    # Without a binding the policy does nothing.
    kind(api, "Pod").create(body=pod("unbound", 6), namespace=NS)
    kind(api, "ValidatingAdmissionPolicyBinding", ADMISSION).create(
        body=binding("portal-max-gpus", ["Deny"])
    )
    with pytest.raises(ForbiddenError) as error:
        kind(api, "Pod").create(body=pod("big", 6, labels=team), namespace=NS)
    status = refusal(error)
    message = (
        "ValidatingAdmissionPolicy 'portal-max-gpus' with binding 'portal-max-gpus' denied "
        "request: the pod asks for 6 GPUs; at most 4 per pod"
    )
    assert status["message"] == f'pods "big" is forbidden: {message}'
    assert status["reason"] == "Forbidden" and status["details"]["causes"] == [{"message": message}]
    # Without a reason the refusal is Invalid (422); message is the validation's own.
    with pytest.raises(UnprocessibleEntityError) as error:
        kind(api, "Pod").create(body=pod("unlabelled", 2), namespace=NS)
    assert refusal(error)["message"].endswith("denied request: pods need a team label")
    kind(api, "Pod").create(body=pod("small", 4, labels=team), namespace=NS)
    # matchConditions: a false condition skips the policy.
    kind(api, "Pod").create(body=pod("system-agent", 6), namespace=NS)


def test_binding_selectors_and_warn(api: DynamicClient, devcluster: Handle) -> None:
    namespaces = kind(api, "Namespace")
    namespaces.create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}
    )
    kind(api, "ValidatingAdmissionPolicy", ADMISSION).create(body=max_gpus_policy(4))
    kind(api, "ValidatingAdmissionPolicyBinding", ADMISSION).create(
        body=binding(
            "gold-only",
            ["Deny"],
            namespaceSelector={"matchLabels": {"tier": "gold"}},
            objectSelector={"matchExpressions": [{"key": "exempt", "operator": "DoesNotExist"}]},
        )
    )
    team = {"team": "a"}
    with pytest.raises(ForbiddenError):
        kind(api, "Pod").create(body=pod("big", 6, labels=team), namespace=NS)
    kind(api, "Pod").create(body=pod("big", 6, labels={**team, "exempt": "yes"}), namespace=NS)
    kind(api, "Pod").create(body=pod("big", 6, labels=team), namespace="team-b")
    # Warn: admitted, with the API server's Warning header.
    kind(api, "ValidatingAdmissionPolicyBinding", ADMISSION).create(
        body=binding(
            "warn-b",
            ["Warn"],
            namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-b"}},
        )
    )
    request = urllib.request.Request(  # noqa: S310 - the stand-in's own 127.0.0.1 URL
        f"{devcluster.url}/api/v1/namespaces/team-b/pods",
        data=json.dumps(pod("bigger", 7, labels=team)).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {devcluster.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - as above
        assert response.status == 201
        warning = response.headers.get("Warning")
    assert warning == (
        "299 - \"Validation failed for ValidatingAdmissionPolicy 'portal-max-gpus' with binding "
        "'warn-b': the pod asks for 7 GPUs; at most 4 per pod\""
    )


def test_a_policy_whose_expression_fails_follows_its_failure_policy(api: DynamicClient) -> None:
    policy = max_gpus_policy(4)
    policy["spec"]["validations"] = [{"expression": "object.spec.missing == 1"}]
    policies = kind(api, "ValidatingAdmissionPolicy", ADMISSION)
    policies.create(body=policy)
    kind(api, "ValidatingAdmissionPolicyBinding", ADMISSION).create(body=binding("b", ["Deny"]))
    with pytest.raises(UnprocessibleEntityError) as error:
        kind(api, "Pod").create(body=pod("p", 1), namespace=NS)
    assert refusal(error)["message"] == (
        "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'portal-max-gpus' with binding 'b' "
        "denied request: expression 'object.spec.missing == 1' resulted in error: no such key: "
        "missing"
    )
    stored = policies.get(name="portal-max-gpus").to_dict()
    stored["spec"]["failurePolicy"] = "Ignore"
    policies.replace(body=stored)
    kind(api, "Pod").create(body=pod("p", 1), namespace=NS)


def test_a_broken_transition_rule_is_422(api: DynamicClient) -> None:
    flavors = kind(api, "ResourceFlavor", "kueue.x-k8s.io/v1beta2")
    flavors.create(
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "a100"},
            "spec": {"nodeLabels": {"gpu": "a100"}, "topologyName": "default"},
        }
    )
    with pytest.raises(UnprocessibleEntityError) as error:
        flavors.patch(
            name="a100",
            body={"spec": {"nodeLabels": {"gpu": "h100"}}},
            content_type="application/merge-patch+json",
        )
    status = refusal(error)
    assert status["message"] == (
        'ResourceFlavor.kueue.x-k8s.io "a100" is invalid: spec: Invalid value: "object": '
        "nodeLabels are immutable when topologyName is set"
    )
    assert flavors.get(name="a100").spec.nodeLabels.gpu == "a100"


MANIFEST = f"""\
apiVersion: v1
kind: ResourceQuota
metadata:
  name: portal-quota
  namespace: {NS}
spec:
  hard:
    requests.nvidia.com/gpu: "10"
---
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: {NS}
spec:
  containers:
  - name: main
    image: trainer:1
    resources:
      limits:
        nvidia.com/gpu: "11"
"""


def test_kubectl_sees_the_refusal_and_the_used_quota(
    api: DynamicClient, kubectl: Kubectl, tmp_path: Path
) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(MANIFEST)
    refused = kubectl("apply", "-f", str(manifest), check=False)
    assert refused.returncode != 0
    assert (
        'Error from server (Forbidden): error when creating "' in refused.stderr
        and 'pods "p" is forbidden: exceeded quota: portal-quota, requested: '
        "requests.nvidia.com/gpu=11, used: requests.nvidia.com/gpu=0, limited: "
        "requests.nvidia.com/gpu=10"
        in refused.stderr
    )
    manifest.write_text(MANIFEST.replace('"11"', '"4"'))
    kubectl("apply", "-f", str(manifest))
    quota = json.loads(kubectl("get", "quota", "portal-quota", "-n", NS, "-o", "json").stdout)
    assert quota["status"]["used"] == {"requests.nvidia.com/gpu": "4"}
    described = kubectl("describe", "quota", "portal-quota", "-n", NS).stdout
    assert "requests.nvidia.com/gpu  4     10" in described
