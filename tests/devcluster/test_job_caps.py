"""The job caps on the stand-in (issue 37, item 2): every job Kueue manages counts, a JobSet
and a bare pod as much as a Job. The tenant's objects are the compiler's; the jobs are
submitted as carol, an editor of the tenant; ``devcluster.kueue_jobs`` plays Kueue (its
Workloads are created as Kueue's ServiceAccount, so the namespace's ResourceQuota refuses
the one over the cap)."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from devcluster import Handle
from devcluster.kueue_jobs import ADMISSION_GATE, reconcile
from devcluster.kueue_sim import Endpoint
from quotas.kube.compiler import compile_cluster
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from tests.devcluster.conftest import MakeClient

NS = "team-a"
GI = 1024**3
AT = "2026-12-07T12:00:00Z"
WORKLOADS = "count/workloads.kueue.x-k8s.io"
QUEUE_LABEL = {"kueue.x-k8s.io/queue-name": "default"}


def _cluster() -> ClusterSpec:
    cpu = FlavorSpec("cpu-pool", "cpu", {"cpu": Decimal(64), "memory": Decimal(256 * GI)})
    return ClusterSpec(name="demo", flavors=(cpu,))


def _tenant(running: int, queued: int) -> TenantSpec:
    return TenantSpec(
        slug=NS,
        generation=1,
        namespaces=(NamespaceSpec(NS),),
        quotas=(
            QuotaSpec("cpu-pool", "cpu", Decimal(8), Decimal(8)),
            QuotaSpec("cpu-pool", "memory", Decimal(32 * GI), Decimal(32 * GI)),
        ),
        max_running_jobs=running,
        max_queued_jobs=queued,
        editors=("carol",),
    )


def _apply(admin: ApiClient, objects: list[dict[str, Any]]) -> None:
    dynamic = DynamicClient(admin)
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.create(body=obj, namespace=obj["metadata"].get("namespace"))


def _container(cpu: str = "1") -> dict[str, Any]:
    return {"name": "main", "image": "worker", "resources": {"requests": {"cpu": cpu}}}


def _jobset(name: str) -> dict[str, Any]:
    job_template = {
        "spec": {
            "parallelism": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [_container()]}},
        }
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "labels": QUEUE_LABEL},
        # The submitter asks to run at once; Kueue's webhook suspends it all the same.
        "spec": {
            "suspend": False,
            "replicatedJobs": [{"name": "workers", "replicas": 1, "template": job_template}],
        },
    }


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": QUEUE_LABEL},
        "spec": {"containers": [_container()]},
    }


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": QUEUE_LABEL},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [_container()]}}},
    }


def _used(endpoint: Endpoint) -> str:
    quota = endpoint.call("GET", f"/api/v1/namespaces/{NS}/resourcequotas/gpu-portal-quota")
    return str(quota["status"]["used"][WORKLOADS])


def _workloads(endpoint: Endpoint) -> dict[str, dict[str, Any]]:
    found = endpoint.call("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads")
    return {
        w["metadata"]["ownerReferences"][0]["kind"]
        + "/"
        + w["metadata"]["ownerReferences"][0]["name"]: w
        for w in found["items"]
    }


def _reserved(workload: dict[str, Any]) -> dict[str, Any]:
    (condition,) = [c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved"]
    return condition


def test_a_jobset_and_a_bare_pod_count_against_the_job_caps(
    devcluster: Handle, admin_client: ApiClient, client_as: MakeClient
) -> None:
    _apply(admin_client, compile_cluster(_cluster(), [_tenant(running=1, queued=1)]))
    endpoint = Endpoint.from_kubeconfig(devcluster.kubeconfig_path)
    quota = endpoint.call("GET", f"/api/v1/namespaces/{NS}/resourcequotas/gpu-portal-quota")
    assert quota["spec"]["hard"][WORKLOADS] == "2"  # running 1 + queued 1
    assert "count/jobs.batch" not in quota["spec"]["hard"]

    carol = DynamicClient(client_as("carol"))
    jobsets = carol.resources.get(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet")
    pods = carol.resources.get(api_version="v1", kind="Pod")
    jobs = carol.resources.get(api_version="batch/v1", kind="Job")
    jobsets.create(body=_jobset("prep"), namespace=NS)
    pods.create(body=_pod("notebook"), namespace=NS)
    # Held until Kueue admits them, whatever carol wrote.
    assert jobsets.get(name="prep", namespace=NS).spec.suspend is True
    gates = pods.get(name="notebook", namespace=NS).spec.schedulingGates
    assert [g.name for g in gates] == [ADMISSION_GATE]

    first = reconcile(endpoint, AT)
    assert sorted(first.created) == [
        f"{NS}/{name}" for name in sorted(_workloads(endpoint)[k]["metadata"]["name"]
                                          for k in ("JobSet/prep", "Pod/notebook"))
    ]  # fmt: skip
    assert _used(endpoint) == "2"  # both count: the JobSet and the bare pod
    # One may run: the JobSet (the older) is admitted and resumed; the pod waits for a slot.
    workloads = _workloads(endpoint)
    assert _reserved(workloads["JobSet/prep"])["status"] == "True"
    assert (
        workloads["JobSet/prep"]["status"]["admission"]["podSetAssignments"][0]["flavors"]["pods"]
        == "portal-job-slots"
    )
    assert jobsets.get(name="prep", namespace=NS).spec.suspend is False
    held = _reserved(workloads["Pod/notebook"])
    assert held["status"] == "False"
    assert held["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for pods in flavor "
        "portal-job-slots, 1 more needed"
    )
    assert [g.name for g in pods.get(name="notebook", namespace=NS).spec.schedulingGates] == [
        ADMISSION_GATE
    ]

    # A third job is over running + queued: it is submitted, but Kueue's Workload is refused.
    jobs.create(body=_job("third"), namespace=NS)
    second = reconcile(endpoint, AT)
    assert list(second.refused) == [f"{NS}/Job/third"]
    assert second.refused[f"{NS}/Job/third"] == (
        f'workloads.kueue.x-k8s.io "{_job_workload_name(jobs)}" is forbidden: exceeded quota: '
        f"gpu-portal-quota, requested: {WORKLOADS}=1, used: {WORKLOADS}=2, limited: "
        f"{WORKLOADS}=2"
    )
    assert "Job/third" not in _workloads(endpoint)
    assert jobs.get(name="third", namespace=NS).spec.suspend is True
    assert _used(endpoint) == "2"
    # carol resumes it herself: Kueue suspends it again, it has no admitted Workload.
    jobs.patch(
        name="third",
        namespace=NS,
        body={"spec": {"suspend": False}},
        content_type="application/merge-patch+json",
    )
    reconcile(endpoint, AT)
    assert jobs.get(name="third", namespace=NS).spec.suspend is True

    # The JobSet is deleted: its Workload goes with it, the pod runs, the Job is queued.
    jobsets.delete(name="prep", namespace=NS)
    _wait(lambda: "JobSet/prep" not in _workloads(endpoint))
    third = reconcile(endpoint, AT)
    assert third.refused == {}
    workloads = _workloads(endpoint)
    assert _reserved(workloads["Pod/notebook"])["status"] == "True"
    assert pods.get(name="notebook", namespace=NS).spec.schedulingGates is None
    assert _reserved(workloads["Job/third"])["status"] == "False"
    assert _used(endpoint) == "2"


def _job_workload_name(jobs: Any) -> str:
    uid = jobs.get(name="third", namespace=NS).metadata.uid
    return f"job-third-{uid[:5]}"


def _wait(done: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_each_kind_is_one_workload_with_its_pods() -> None:
    """A PyTorchJob's roles, a RayJob's head and workers, a pod group: one Workload each,
    counting every pod (what the running cap counts)."""
    from devcluster.kueue_jobs import JOB_KINDS, pod_set_requests, workload_for

    kinds = {kind.kind: kind for kind in JOB_KINDS}
    template = {"spec": {"containers": [_container("2")]}}
    pytorch = {
        "metadata": {"name": "bert", "namespace": NS, "uid": "abcdef-1", "labels": QUEUE_LABEL},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template},
                "Worker": {"replicas": 3, "template": template},
            }
        },
    }
    body = workload_for(kinds["PyTorchJob"], pytorch)
    assert body["metadata"]["name"] == "pytorchjob-bert-abcde"
    assert [(p["name"], p["count"]) for p in body["spec"]["podSets"]] == [
        ("master", 1),
        ("worker", 3),
    ]
    ray = {
        "metadata": {"name": "tune", "namespace": NS, "uid": "123456", "labels": QUEUE_LABEL},
        "spec": {
            "rayClusterSpec": {
                "headGroupSpec": {"template": template},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "template": template}],
            }
        },
    }
    pods = [p["count"] for p in workload_for(kinds["RayJob"], ray)["spec"]["podSets"]]
    assert pods == [1, 2]
    member = {
        "metadata": {
            "name": "shard-0",
            "namespace": NS,
            "uid": "u0",
            "labels": {**QUEUE_LABEL, "kueue.x-k8s.io/pod-group-name": "shards"},
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": "4"},
        },
        "spec": template["spec"],
    }
    group = workload_for(kinds["Pod"], member)
    assert group["metadata"]["name"] == "shards"
    (pod_set,) = group["spec"]["podSets"]
    assert pod_set_requests(pod_set) == {"cpu": Decimal(8), "pods": Decimal(4)}
