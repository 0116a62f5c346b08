"""Kueue's job integrations, in miniature: the Workload Kueue makes for each job it manages,
and its admission by the ClusterQueue's quotas. Development only (the demo's loop and the
tests); the stand-in runs no controllers, so this plays Kueue's.

What Kueue does, and what this does the same way:

* **On submission** (Kueue's webhooks, played by ``devcluster.admission``): a Job, JobSet,
  PyTorchJob or RayJob carrying the ``kueue.x-k8s.io/queue-name`` label in a tenant's namespace
  is created suspended, and such a pod gets the ``kueue.x-k8s.io/admission`` scheduling gate,
  whatever the submitter wrote (``hold_on_create``).
* **One Workload per job** (``workload_for``): named ``<kind>-<name>-<uid[:5]>``, owned by the
  job (so it goes when the job goes), its pod sets from the job's pods (a JobSet's replicated
  jobs, a PyTorchJob's replica roles, a RayJob's head and worker groups, a pod's own spec); a
  pod group (pods labelled ``kueue.x-k8s.io/pod-group-name``, with the annotation
  ``kueue.x-k8s.io/pod-group-total-count``) is one Workload named after the group. Children of
  a managed job (a JobSet's Jobs, a Job's pods) are not jobs of their own. The Workload is
  created as Kueue's ServiceAccount, so the namespace's ResourceQuota on
  ``count/workloads.kueue.x-k8s.io`` (the job caps: ``quotas.kube.job_caps``) refuses it when
  the tenant has as many jobs as it may: the job stays suspended (the pod gated), and the next
  pass tries again, as Kueue's reconciler does; a job its submitter resumes without an
  admitted Workload is suspended again.
* **Admission** (``assign``): a pending Workload of a LocalQueue's ClusterQueue is admitted when
  each resource group has a flavor (in the group's order) where every covered resource it asks
  for fits under ``nominalQuota + borrowingLimit`` (no ``borrowingLimit``: no limit of its own;
  the cohort is not simulated) beside what the queue's admitted Workloads use; ``pods`` counts
  the Workload's pods. Oldest first; a ClusterQueue with ``stopPolicy`` other than None admits
  nothing. Admitted: the Workload gets Kueue's status (QuotaReserved, Admitted, the flavors and
  usage per pod set) and the job is resumed (the pod's gate removed). Held: QuotaReserved
  False with Kueue's message (``insufficient unused quota for pods in flavor
  portal-job-slots, 1 more needed``).

Not simulated: preemption, the cohort's borrowing, partial admission, resources no group
covers (Kueue would refuse the Workload; here they are ignored), Workloads finishing (delete
the job: the garbage collector takes its Workload).
"""

from __future__ import annotations

import json
import logging
import urllib.error
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from devcluster.quantity import Quantity, QuantityError

if TYPE_CHECKING:
    from devcluster.kueue_sim import Endpoint

logger = logging.getLogger("devcluster.kueue_jobs")

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
LOCAL_QUEUE = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{name}"
CLUSTER_QUEUE = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{name}"


@dataclass(frozen=True)
class JobKind:
    api_version: str
    kind: str
    plural: str
    # Where the kind keeps ``suspend`` (Kubeflow jobs: under ``runPolicy``); () for pods.
    suspend_path: tuple[str, ...]

    @property
    def key(self) -> str:
        """The stand-in's resource key (``jobs.batch``, ``pods``)."""
        group = self.api_version.rpartition("/")[0]
        return f"{self.plural}.{group}" if group else self.plural

    def path(self, namespace: str = "") -> str:
        prefix = "/apis/" if "/" in self.api_version else "/api/"
        where = f"/namespaces/{namespace}" if namespace else ""
        return f"{prefix}{self.api_version}{where}/{self.plural}"


JOB_KINDS = (
    JobKind("batch/v1", "Job", "jobs", ("spec", "suspend")),
    JobKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", ("spec", "suspend")),
    JobKind("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", ("spec", "runPolicy", "suspend")),
    JobKind("ray.io/v1", "RayJob", "rayjobs", ("spec", "suspend")),
    JobKind("v1", "Pod", "pods", ()),
)
KINDS_BY_KEY = {kind.key: kind for kind in JOB_KINDS}
_MANAGED_OWNERS = frozenset(kind.kind for kind in JOB_KINDS) | {"RayCluster"}


# What Kueue's webhooks do on submission ------------------------------------------------------


def queue_name(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")


def _controller_owner(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return dict(owner)
    return None


def is_managed(obj: Mapping[str, Any]) -> bool:
    """A job Kueue manages on its own: it names a queue and no managed job owns it."""
    owner = _controller_owner(obj)
    return bool(queue_name(obj)) and (owner is None or owner.get("kind") not in _MANAGED_OWNERS)


def hold_on_create(key: str, obj: dict[str, Any]) -> None:
    """Kueue's webhooks on a new managed job: suspended, or (a pod) gated until admitted."""
    kind = KINDS_BY_KEY.get(key)
    if kind is None or not is_managed(obj):
        return
    if kind.kind == "Pod":
        spec = obj.setdefault("spec", {})
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != ADMISSION_GATE]
        spec["schedulingGates"] = [*gates, {"name": ADMISSION_GATE}]
        return
    node = obj
    for step in kind.suspend_path[:-1]:
        node = node.setdefault(step, {})
    node[kind.suspend_path[-1]] = True


# The Workload of a job -----------------------------------------------------------------------


def _count(value: Any, default: int = 1) -> int:
    return value if isinstance(value, int) and value >= 0 else default


def pod_sets(kind: str, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Workload's pod sets for a job of ``kind`` (at most 8, as Kueue's CRD allows)."""
    spec = obj.get("spec") or {}
    sets: list[dict[str, Any]] = []
    if kind == "Job":
        sets.append(
            {
                "name": "main",
                "count": _count(spec.get("parallelism")),
                "template": spec.get("template") or {},
            }
        )
    elif kind == "JobSet":
        for replicated in spec.get("replicatedJobs") or []:
            job_spec = ((replicated.get("template") or {}).get("spec")) or {}
            count = _count(replicated.get("replicas")) * _count(job_spec.get("parallelism"))
            sets.append(
                {
                    "name": str(replicated.get("name") or "main"),
                    "count": count,
                    "template": job_spec.get("template") or {},
                }
            )
    elif kind == "PyTorchJob":
        for role, replica in sorted((spec.get("pytorchReplicaSpecs") or {}).items()):
            sets.append(
                {
                    "name": str(role).lower(),
                    "count": _count((replica or {}).get("replicas")),
                    "template": (replica or {}).get("template") or {},
                }
            )
    elif kind == "RayJob":
        cluster = spec.get("rayClusterSpec") or {}
        head = cluster.get("headGroupSpec") or {}
        sets.append({"name": "head", "count": 1, "template": head.get("template") or {}})
        for group in cluster.get("workerGroupSpecs") or []:
            sets.append(
                {
                    "name": str(group.get("groupName") or "workers"),
                    "count": _count(group.get("replicas")),
                    "template": group.get("template") or {},
                }
            )
    elif kind == "Pod":
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        total = str(annotations.get(POD_GROUP_COUNT) or "1")
        count = int(total) if total.isdigit() and int(total) > 0 else 1
        sets.append({"name": "main", "count": count, "template": {"spec": spec}})
    return sets[:8]


def workload_name(kind: str, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    group = ((meta.get("labels") or {}).get(POD_GROUP_LABEL)) if kind == "Pod" else None
    if group:
        return str(group)
    return f"{kind.lower()}-{meta.get('name', '')}-{str(meta.get('uid') or '')[:5]}"[:253]


def workload_for(kind: JobKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload Kueue's integration of ``kind`` makes for ``obj``."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(kind.kind, obj),
            "namespace": meta.get("namespace", ""),
            "labels": {JOB_UID_LABEL: str(meta.get("uid") or "")},
            "ownerReferences": [
                {
                    "apiVersion": kind.api_version,
                    "kind": kind.kind,
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"queueName": queue_name(obj), "podSets": pod_sets(kind.kind, obj)},
    }


# Admission -----------------------------------------------------------------------------------


def _amount(value: Any) -> Decimal:
    try:
        return Quantity.parse(str(value)).value if value not in (None, "") else Decimal(0)
    except QuantityError:
        return Decimal(0)


def pod_set_requests(pod_set: Mapping[str, Any]) -> dict[str, Decimal]:
    """What a pod set asks for: its containers' requests (a limit alone counts as the request)
    times its count, and ``pods``: the count."""
    count = _count(pod_set.get("count"))
    spec = (pod_set.get("template") or {}).get("spec") or {}
    per_pod: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            per_pod[name] = per_pod.get(name, Decimal(0)) + _amount(value)
    totals = {name: amount * count for name, amount in per_pod.items()}
    totals["pods"] = Decimal(count)
    return totals


Usage = dict[tuple[str, str], Decimal]  # (flavor, resource) -> amount


def queue_usage(queue: Mapping[str, Any], admitted: Iterable[Mapping[str, Any]]) -> Usage:
    """What the queue's admitted Workloads use, per flavor and resource (their assignments)."""
    pods_flavor = _pods_flavor(queue)
    usage: Usage = {}
    for workload in admitted:
        for assignment in ((workload.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments"
        ) or []:
            flavors = dict(assignment.get("flavors") or {})
            used = {k: _amount(v) for k, v in (assignment.get("resourceUsage") or {}).items()}
            if pods_flavor and "pods" not in flavors:  # admitted before the queue counted pods
                flavors["pods"] = pods_flavor
            used.setdefault("pods", Decimal(_count(assignment.get("count"))))
            for resource, flavor in flavors.items():
                key = (str(flavor), str(resource))
                usage[key] = usage.get(key, Decimal(0)) + used.get(resource, Decimal(0))
    return usage


def _pods_flavor(queue: Mapping[str, Any]) -> str | None:
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        if "pods" in (group.get("coveredResources") or []) and group.get("flavors"):
            return str(group["flavors"][0]["name"])
    return None


@dataclass
class Assignment:
    flavors: dict[str, str] = field(default_factory=dict)  # resource -> flavor
    refusal: str = ""


def assign(queue: Mapping[str, Any], workload: Mapping[str, Any], usage: Usage) -> Assignment:
    """Flavors for every resource ``workload`` asks for that ``queue`` covers, or why not."""
    requests: dict[str, Decimal] = {}
    pod_sets_ = (workload.get("spec") or {}).get("podSets") or []
    for pod_set in pod_sets_:
        for name, amount in pod_set_requests(pod_set).items():
            requests[name] = requests.get(name, Decimal(0)) + amount
    first = str((pod_sets_[0] if pod_sets_ else {}).get("name") or "main")
    result = Assignment()
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        covered = [r for r in group.get("coveredResources") or [] if requests.get(r)]
        if not covered:
            continue
        shortest: tuple[str, str, Decimal] | None = None
        for flavor in group.get("flavors") or []:
            quotas = {r.get("name"): r for r in flavor.get("resources") or []}
            missing: tuple[str, str, Decimal] | None = None
            for resource in covered:
                quota = quotas.get(resource) or {}
                used = usage.get((flavor["name"], resource), Decimal(0))
                if quota.get("borrowingLimit") is None and quota.get("nominalQuota") is not None:
                    continue  # may borrow without a limit of its own (the cohort's)
                limit = _amount(quota.get("nominalQuota")) + _amount(quota.get("borrowingLimit"))
                if used + requests[resource] > limit:
                    missing = (flavor["name"], resource, used + requests[resource] - limit)
                    break
            if missing is None:
                result.flavors.update({resource: flavor["name"] for resource in covered})
                break
            shortest = shortest or missing
        else:
            if shortest is not None:
                flavor_name, resource, more = shortest
                result.refusal = (
                    f"couldn't assign flavors to pod set {first}: insufficient unused quota "
                    f"for {resource} in flavor {flavor_name}, {_text(more)} more needed"
                )
                return result
    return result


def _text(amount: Decimal) -> str:
    return str(amount.normalize()) if amount == amount.to_integral_value() else str(amount)


def admitted_status(
    workload: Mapping[str, Any], queue_name_: str, flavors: Mapping[str, str], at: str
) -> dict[str, Any]:
    assignments = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        asked = pod_set_requests(pod_set)
        assignments.append(
            {
                "name": pod_set.get("name", "main"),
                "count": _count(pod_set.get("count")),
                "flavors": {r: f for r, f in flavors.items() if asked.get(r)},
                "resourceUsage": {r: _text(asked[r]) for r in flavors if asked.get(r)},
            }
        )
    return {
        "conditions": [
            {"type": kind, "status": "True", "reason": kind, "message": "The workload is admitted",
             "lastTransitionTime": at}
            for kind in ("QuotaReserved", "Admitted")
        ],
        "admission": {"clusterQueue": queue_name_, "podSetAssignments": assignments},
    }  # fmt: skip


def pending_status(message: str, at: str) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message,
             "lastTransitionTime": at}
        ]
    }  # fmt: skip


def _condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in (workload.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return dict(condition)
    return None


def is_admitted(workload: Mapping[str, Any]) -> bool:
    reserved = _condition(workload, "QuotaReserved")
    return reserved is not None and reserved.get("status") == "True"


# One pass over a cluster ---------------------------------------------------------------------


@dataclass
class Pass:
    """What one pass did: Workloads made, refused (the job stays held), admitted, pending."""

    created: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # job -> the API server's message
    admitted: list[str] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)  # workload -> why


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read() or b"{}").get("message") or error)
    except ValueError:
        return str(error)


def reconcile(endpoint: Endpoint, at: str) -> Pass:
    """Make the missing Workloads of every managed job, then admit what fits (``at``: the
    time written in conditions)."""
    done = Pass()
    workloads: dict[tuple[str, str], dict[str, Any]] = {}
    for workload in endpoint.call("GET", "/apis/kueue.x-k8s.io/v1beta2/workloads")["items"]:
        meta = workload["metadata"]
        workloads[(meta["namespace"], meta["name"])] = workload
    owned = {
        (ns, (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL, ""))
        for (ns, _), w in workloads.items()
    }
    admitted = {
        (ns, (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL, ""))
        for (ns, _), w in workloads.items()
        if is_admitted(w)
    }
    for kind in JOB_KINDS:
        for obj in endpoint.call("GET", kind.path())["items"]:
            meta = obj["metadata"]
            namespace = meta.get("namespace", "")
            if not is_managed(obj):
                continue
            if (namespace, meta.get("uid", "")) not in admitted:
                _suspend_again(endpoint, kind, obj)
            if (namespace, meta.get("uid", "")) in owned:
                continue
            body = workload_for(kind, obj)
            key = (namespace, body["metadata"]["name"])
            if key in workloads:  # a pod group's Workload, made for an earlier pod
                continue
            job = f"{namespace}/{kind.kind}/{meta['name']}"
            try:
                created = endpoint.call(
                    "POST", WORKLOADS.format(namespace=namespace), body, "application/json",
                    KUEUE_USER,
                )  # fmt: skip
            except urllib.error.HTTPError as error:
                if error.code not in (403, 409, 422):
                    raise
                done.refused[job] = _error_message(error)
                logger.info("%s: no Workload (%s)", job, done.refused[job])
                continue
            workloads[key] = created
            done.created.append(f"{namespace}/{body['metadata']['name']}")
    _admit(endpoint, workloads, at, done)
    return done


def _suspend_again(endpoint: Endpoint, kind: JobKind, obj: Mapping[str, Any]) -> None:
    """A managed job running without an admitted Workload (its submitter resumed it) is
    suspended again, as Kueue's reconciler does. (A pod's gate cannot be put back: Kubernetes
    adds scheduling gates only at creation.)"""
    if kind.kind == "Pod":
        return
    node: Any = obj
    for step in kind.suspend_path:
        node = node.get(step) if isinstance(node, Mapping) else None
    if node is not False:
        return  # suspended (or never set: the webhook set it at creation)
    patch: dict[str, Any] = {}
    target = patch
    for step in kind.suspend_path[:-1]:
        target = target.setdefault(step, {})
    target[kind.suspend_path[-1]] = True
    meta = obj["metadata"]
    endpoint.call(
        "PATCH", f"{kind.path(meta['namespace'])}/{meta['name']}", patch,
        "application/merge-patch+json", KUEUE_USER,
    )  # fmt: skip
    logger.info(
        "%s/%s: resumed without admission, suspended again", meta["namespace"], meta["name"]
    )


def _admit(
    endpoint: Endpoint, workloads: Mapping[tuple[str, str], dict[str, Any]], at: str, done: Pass
) -> None:
    by_queue: dict[str, list[dict[str, Any]]] = {}
    queues: dict[str, dict[str, Any] | None] = {}
    local: dict[tuple[str, str], str] = {}
    # Oldest first; within one second (the timestamps' grain), one already waiting first.
    for (namespace, _name), workload in sorted(
        workloads.items(),
        key=lambda item: (
            item[1]["metadata"].get("creationTimestamp", ""),
            not ((item[1].get("status") or {}).get("conditions")),
            item[0],
        ),
    ):
        queue_ref = (namespace, (workload.get("spec") or {}).get("queueName") or "")
        if queue_ref not in local:
            try:
                found = endpoint.call(
                    "GET", LOCAL_QUEUE.format(namespace=queue_ref[0], name=queue_ref[1])
                )
                local[queue_ref] = str((found.get("spec") or {}).get("clusterQueue") or "")
            except urllib.error.HTTPError:
                local[queue_ref] = ""
        name = local[queue_ref]
        admission = (workload.get("status") or {}).get("admission") or {}
        by_queue.setdefault(admission.get("clusterQueue") or name, []).append(workload)
    for name, members in by_queue.items():
        if not name:
            continue
        if name not in queues:
            try:
                queues[name] = endpoint.call("GET", CLUSTER_QUEUE.format(name=name))
            except urllib.error.HTTPError:
                queues[name] = None
        queue = queues[name]
        if queue is None or (queue.get("spec") or {}).get("stopPolicy", "None") != "None":
            continue
        usage = queue_usage(queue, [w for w in members if is_admitted(w)])
        for workload in members:
            if is_admitted(workload) or (workload.get("spec") or {}).get("active") is False:
                continue
            _decide(endpoint, queue, workload, usage, at, done)


def _decide(
    endpoint: Endpoint,
    queue: Mapping[str, Any],
    workload: dict[str, Any],
    usage: Usage,
    at: str,
    done: Pass,
) -> None:
    meta = workload["metadata"]
    path = f"{WORKLOADS.format(namespace=meta['namespace'])}/{meta['name']}/status"
    where = f"{meta['namespace']}/{meta['name']}"
    result = assign(queue, workload, usage)
    if result.refusal:
        done.pending[where] = result.refusal
        reserved = _condition(workload, "QuotaReserved")
        if reserved is None or reserved.get("message") != result.refusal:
            # A condition keeps its lastTransitionTime while its status stays the same.
            since = at
            if reserved is not None and reserved.get("status") == "False":
                since = str(reserved.get("lastTransitionTime") or at)
            status = pending_status(result.refusal, since)
            endpoint.call(
                "PATCH", path, {"status": status}, "application/merge-patch+json", KUEUE_USER
            )
        return
    status = admitted_status(workload, queue["metadata"]["name"], result.flavors, at)
    endpoint.call("PATCH", path, {"status": status}, "application/merge-patch+json", KUEUE_USER)
    for assignment in status["admission"]["podSetAssignments"]:
        for resource, amount in assignment["resourceUsage"].items():
            key = (assignment["flavors"][resource], resource)
            usage[key] = usage.get(key, Decimal(0)) + _amount(amount)
    done.admitted.append(where)
    _resume(endpoint, workload)


def _resume(endpoint: Endpoint, workload: Mapping[str, Any]) -> None:
    """Let the admitted job run: unsuspend it (a pod: remove the admission gate)."""
    namespace = workload["metadata"]["namespace"]
    for owner in workload["metadata"].get("ownerReferences") or []:
        kind = next((k for k in JOB_KINDS if k.kind == owner.get("kind")), None)
        if kind is None:
            continue
        if kind.kind == "Pod":
            _ungate(endpoint, namespace, owner["name"], workload["metadata"]["name"])
            continue
        patch: dict[str, Any] = {}
        node = patch
        for step in kind.suspend_path[:-1]:
            node = node.setdefault(step, {})
        node[kind.suspend_path[-1]] = False
        try:
            endpoint.call(
                "PATCH", f"{kind.path(namespace)}/{owner['name']}", patch,
                "application/merge-patch+json", KUEUE_USER,
            )  # fmt: skip
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise


def _ungate(endpoint: Endpoint, namespace: str, pod: str, group: str) -> None:
    """Remove the admission gate from the pod, and from every pod of its group."""
    pods_path = JOB_KINDS[-1].path(namespace)
    found = endpoint.call("GET", f"{pods_path}?labelSelector={POD_GROUP_LABEL}%3D{group}")
    names = {pod, *(p["metadata"]["name"] for p in found.get("items") or [])}
    for name in sorted(names):
        try:
            current = endpoint.call("GET", f"{pods_path}/{name}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                continue
            raise
        gates = [
            g
            for g in (current.get("spec") or {}).get("schedulingGates") or []
            if g.get("name") != ADMISSION_GATE
        ]
        endpoint.call(
            "PATCH", f"{pods_path}/{name}", {"spec": {"schedulingGates": gates or None}},
            "application/merge-patch+json", KUEUE_USER,
        )  # fmt: skip
