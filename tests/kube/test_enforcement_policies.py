"""Each refusal of the enforcement policies, run as the stand-in API server runs them
(``devcluster.policies.admit`` with the validator's CEL engine), with the request's user:
owner references count only when a controller makes the request, GPUs in init containers
count, and GPU device variables of the NVIDIA container toolkit are refused in every
container, pod template, ConfigMap and Secret of a tenant's namespaces, in both modes."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from devcluster.policies import Request, admit
from quotas.kube import cel, compiler, enforcement
from quotas.kube.spec import (
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)

NS = "team-a-training"
GPU = "nvidia.com/gpu"
SA = "system:serviceaccount:"
CONFIG = enforcement.KueueConfig(frozenset({"batch/job", "pod"}), namespace="queues")
FLAVORS = (FlavorSpec("a100", "gpu", {GPU: Decimal(16)}, gpu_model="A100"),)
TEAM = TenantSpec(
    "team-a", 1, (NamespaceSpec(NS),), (QuotaSpec("a100", GPU, Decimal(4), Decimal(6)),)
)
TRUSTED = ("system:serviceaccount:kubeflow:training-operator", "system:serviceaccount:ray:*")
KINDS = {
    "Pod": ("", "v1", "pods"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "ConfigMap": ("", "v1", "configmaps"),
    "Secret": ("", "v1", "secrets"),
}


def compiled(mode: str = "kueue", version: str = "1.33") -> list[dict[str, Any]]:
    cluster = ClusterSpec(
        "c",
        FLAVORS,
        kubernetes_version=version,
        enforcement=mode,
        kueue_config=CONFIG,
        trusted_controllers=TRUSTED,
    )
    return compiler.compile_cluster(cluster, [TEAM])


OBJECTS = compiled()


def denial(
    obj: dict[str, Any],
    user: str = "alice",
    *,
    objects: list[dict[str, Any]] = OBJECTS,
    subresource: str = "",
    operation: str = "CREATE",
) -> str | None:
    group, version, resource = KINDS[obj["kind"]]
    request = Request(
        operation=operation,
        group=group,
        version=version,
        versions=(version,),
        kind=obj["kind"],
        resource=resource,
        subresource=subresource,
        namespace=NS,
        name=obj["metadata"]["name"],
        obj=obj,
        old=copy.deepcopy(obj) if operation == "UPDATE" else None,
        namespace_object={
            "metadata": {
                "name": NS,
                "labels": {
                    LABEL_TENANT: "team-a",
                    LABEL_MANAGED_BY: MANAGED_BY,
                    "kubernetes.io/metadata.name": NS,
                },
            }
        },
        username=user,
        groups=("system:authenticated",),
    )
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    outcome = admit(policies, bindings, request, cel.evaluate)
    if outcome.denial is None:
        return None
    assert "tenant team-a" in outcome.denial[0]  # every refusal names the tenant
    return outcome.denial[0]


def container(gpus: int = 0, env: list | None = None, **more: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": "main", "image": "trainer", **more}
    if gpus:
        found["resources"] = {"limits": {GPU: str(gpus)}}
    if env is not None:
        found["env"] = env
    return found


def workload(
    kind: str,
    spec: dict[str, Any],
    *,
    owner: tuple[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "w", "namespace": NS, "labels": labels or {}}
    if owner:
        api_version, owner_kind = owner
        metadata["ownerReferences"] = [
            {"apiVersion": api_version, "kind": owner_kind, "name": "o", "uid": "u",
             "controller": True}
        ]  # fmt: skip
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": kind, "metadata": metadata, "spec": spec}
    template = {"metadata": {"labels": labels or {}}, "spec": spec}
    body: dict[str, Any] = {"template": template}
    if kind == "CronJob":
        body = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    group, version, _ = KINDS[kind]
    api_version = f"{group}/{version}" if group else version
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": body}


def gpu_spec(gpus: int = 6) -> dict[str, Any]:
    return {"containers": [container(gpus)]}


WORKLOADS = [k for k in KINDS if k not in ("ConfigMap", "Secret")]
BUILT_IN = {
    "job-controller": ("batch/v1", "Job"),
    "cronjob-controller": ("batch/v1", "CronJob"),
    "deployment-controller": ("apps/v1", "Deployment"),
    "replicaset-controller": ("apps/v1", "ReplicaSet"),
    "statefulset-controller": ("apps/v1", "StatefulSet"),
    "daemon-set-controller": ("apps/v1", "DaemonSet"),
    "replication-controller": ("v1", "ReplicationController"),
}


# --- owner references -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", WORKLOADS)
@pytest.mark.parametrize(
    "owner",
    [("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("batch/v1", "Job"), ("apps/v1", "ReplicaSet")],
)
@pytest.mark.parametrize("user", ["alice", f"{SA}{NS}:default"])
def test_a_tenant_naming_an_owner_is_judged_like_anyone(kind, owner, user):
    said = denial(workload(kind, gpu_spec(), owner=owner), user)
    assert said is not None and "gpu-quota-portal-kueue-only" in said
    assert f"It names a controller owner, but {user} is not a controller" in said


@pytest.mark.parametrize(("loop", "owner"), sorted(BUILT_IN.items()))
def test_each_controller_loop_makes_what_its_owner_kind_owns_and_nothing_else(loop, owner):
    user = f"{SA}kube-system:{loop}"
    for kind in ("Pod", "ReplicaSet", "Job"):
        assert denial(workload(kind, gpu_spec(), owner=owner), user) is None
    assert denial(workload("Pod", gpu_spec(), owner=("v1", "ConfigMap")), user) is not None
    other = next(o for name, o in BUILT_IN.items() if name != loop)
    assert denial(workload("Pod", gpu_spec(), owner=other), user) is not None


def test_kube_controller_manager_kueue_and_trusted_operators():
    manager = "system:kube-controller-manager"
    for owner in BUILT_IN.values():
        assert denial(workload("Pod", gpu_spec(), owner=owner), manager) is None
    assert denial(workload("Pod", gpu_spec(), owner=("v1", "ConfigMap")), manager) is not None
    custom = ("kubeflow.org/v1", "PyTorchJob")
    for user in (
        f"{SA}queues:kueue-controller-manager",  # Kueue, in the namespace its config names
        "system:serviceaccount:kubeflow:training-operator",
        "system:serviceaccount:ray:kuberay-operator",  # the trailing * of ray's entry
    ):
        assert denial(workload("Pod", gpu_spec(), owner=custom), user) is None, user
    for user in (
        f"{SA}kueue-system:kueue-controller-manager",  # not where this cluster's Kueue runs
        "system:serviceaccount:kubeflow:other",
        "system:serviceaccount:raytheon:x",
    ):
        assert denial(workload("Pod", gpu_spec(), owner=custom), user) is not None, user


def test_a_controller_without_an_owner_is_judged_like_anyone():
    for user in (
        "system:kube-controller-manager",
        "system:serviceaccount:kubeflow:training-operator",
    ):
        assert denial(workload("Pod", gpu_spec()), user) is not None
        queued = workload("Pod", gpu_spec(), labels={enforcement.QUEUE_NAME_LABEL: "default"})
        assert denial(queued, user) is None


def test_gpus_in_an_init_container_only_count():
    spec = {"containers": [container()], "initContainers": [container(6)]}
    said = denial(workload("Pod", spec))
    assert said is not None and "requests GPUs" in said


# --- GPU device variables ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", WORKLOADS)
@pytest.mark.parametrize("name", enforcement.DEVICE_VARIABLES)
def test_device_variables_are_refused_in_every_pod_template(kind, name):
    for value in ("all", "0", "GPU-fef8089b"):
        spec = {"containers": [container(env=[{"name": name, "value": value}])]}
        said = denial(workload(kind, spec))
        assert said is not None and "gpu-quota-portal-device-env" in said, (kind, name)
        assert "container(s) main name GPU devices" in said


@pytest.mark.parametrize("value", ["void", "none", ""])
def test_visible_devices_that_expose_nothing_pass(value):
    spec = {"containers": [container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}])]}
    assert denial(workload("Pod", spec)) is None
    unset = {"containers": [container(env=[{"name": "NVIDIA_VISIBLE_DEVICES"}])]}
    assert denial(workload("Pod", unset)) is None


def test_a_device_variable_beside_a_gpu_request_or_read_from_elsewhere_is_refused():
    queued = {enforcement.QUEUE_NAME_LABEL: "default"}
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    # A container's own variable overrides the device plugin's: refused with a GPU too.
    assert denial(workload("Pod", {"containers": [container(1, env)]}, labels=queued))
    from_map = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}},
        }
    ]
    assert denial(workload("Pod", {"containers": [container(env=from_map)]}))
    init = {"containers": [container()], "initContainers": [container(env=env)]}
    assert denial(workload("Pod", init))


@pytest.mark.parametrize("name", enforcement.NO_GPU_VARIABLES)
def test_capabilities_and_a_cuda_version_only_beside_a_gpu(name):
    env = [{"name": name, "value": "all"}]
    assert denial(workload("Pod", {"containers": [container(env=env)]})) is not None
    queued = {enforcement.QUEUE_NAME_LABEL: "default"}
    assert denial(workload("Pod", {"containers": [container(1, env)]}, labels=queued)) is None


def test_an_ephemeral_container_is_checked_when_it_is_added():
    pod = workload("Pod", {"containers": [container()]})
    assert denial(pod) is None
    debug = container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}], name="debug")
    pod["spec"]["ephemeralContainers"] = [debug]
    said = denial(pod, subresource="ephemeralcontainers", operation="UPDATE")
    assert said is not None and "container(s) debug name GPU devices" in said


@pytest.mark.parametrize("prefix", ["N", "NVIDIA_", "NVIDIA_VISIBLE_", "CUDA_"])
def test_an_env_from_prefix_that_could_spell_a_device_variable_is_refused(prefix):
    source = {"prefix": prefix, "configMapRef": {"name": "settings"}}
    assert denial(workload("Pod", {"containers": [container(envFrom=[source])]})) is not None


def test_plain_env_from_and_other_prefixes_pass():
    for source in ({"configMapRef": {"name": "s"}}, {"prefix": "APP_", "secretRef": {"name": "s"}}):
        assert denial(workload("Pod", {"containers": [container(envFrom=[source])]})) is None


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("ConfigMap", "data"),
        ("ConfigMap", "binaryData"),
        ("Secret", "data"),
        ("Secret", "stringData"),
    ],
)
def test_configmaps_and_secrets_may_not_hold_device_variables(kind, field):
    for name in enforcement.GPU_VARIABLES:
        obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "s"}, field: {name: "YQ=="}}
        said = denial(obj)
        assert said is not None and f"holds the key(s) {name}" in said
    harmless = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "s"}, field: {"A": "YQ=="}}
    assert denial(harmless) is None


def test_the_device_policies_come_in_both_modes_from_1_30():
    split = compiled("split")
    names = {o["metadata"]["name"] for o in split if o["kind"] == "ValidatingAdmissionPolicy"}
    assert names == {enforcement.DEVICE_ENV_POLICY, enforcement.DEVICE_KEYS_POLICY}
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert denial(workload("Pod", {"containers": [container(env=env)]}), objects=split)
    # In split mode an owned GPU pod is the quota's business, not a policy's.
    assert denial(workload("Pod", gpu_spec(), owner=("v1", "ConfigMap")), objects=split) is None
    assert not [o for o in compiled("split", "1.29") if "AdmissionPolicy" in o["kind"]]


def test_an_update_keeps_an_owner_the_object_already_had_but_may_not_add_one():
    job_pod = workload("Pod", gpu_spec(), owner=("batch/v1", "Job"))
    assert denial(job_pod, f"{SA}kube-system:job-controller") is None
    # alice labels the Job's pod: the owner was judged when the job controller made it.
    assert denial(job_pod, "alice", operation="UPDATE") is None
    # An owner added by an update is judged like one at creation.
    bare = workload("Pod", gpu_spec())
    group, version, resource = KINDS["Pod"]
    request = Request(
        operation="UPDATE", group=group, version=version, versions=(version,), kind="Pod",
        resource=resource, subresource="", namespace=NS, name="w", obj=job_pod, old=bare,
        namespace_object={"metadata": {"name": NS, "labels": {
            LABEL_TENANT: "team-a", LABEL_MANAGED_BY: MANAGED_BY}}},
        username="alice", groups=("system:authenticated",),
    )  # fmt: skip
    policies = [o for o in OBJECTS if o["kind"] == "ValidatingAdmissionPolicy"]
    bindings = [o for o in OBJECTS if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    outcome = admit(policies, bindings, request, cel.evaluate)
    assert outcome.denial is not None and "alice is not a controller" in outcome.denial[0]
