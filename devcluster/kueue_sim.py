"""What Kueue's controller would write into the demo's clusters: ClusterQueue usage, and
fair-sharing standing where the cluster's Kueue configuration turns it on.

The stand-in runs no controllers, so without this a demo ClusterQueue has no ``.status`` and
the portal's collector reads zero use: the month of simulated history would end in a cliff
and the demo's alerts would resolve a quarter of an hour after ``make run``. This loop
(started by ``devcluster.demo``, development only) writes each ClusterQueue's
``status.flavorsUsage`` / ``flavorsReservation`` and workload counts through the ``/status``
subresource, like Kueue does, from a simple load model:

- a queue named in ``hot`` (team-a in the demo, whose simulated month climbs past 80%) runs
  at 88-93% of each resource's limit (nominal quota + borrowing limit), so the warning alert
  fires and stays;
- every other queue follows a working-day rhythm around 40% of its limit;
- the annotation ``demo.gpu-quota-portal.io/load`` on a ClusterQueue (a fraction, 0-1.5)
  overrides both, so a user can push a tenant to 100% and watch the portal hold its new work
  (``stopPolicy: Hold``), then lower it again::

      kubectl --kubeconfig .run/kubeconfig annotate clusterqueue team-a \\
          demo.gpu-quota-portal.io/load=1.0 --overwrite

With ``idle`` (a tenant; team-b on the demo's first cluster) it also keeps one Kueue Workload,
``<tenant>-training/notebook-idle``, admitted four days before the loop started on the
tenant's first GPU flavor: the demo month records no GPU activity for that tenant there in its
last days, so the portal's idle rule finds it, tells the lead, and after the grace sets
``spec.active: false`` on it (``kubectl get workloads -A``), with an undo on the alert's page.

Where the demo's Kueue configuration has a ``fairSharing`` section, each ClusterQueue's status
gets a ``fairSharing.weightedShare`` (``weighted_share``: its borrowing over its limit, per mille,
over its weight); where it has ``admissionFairSharing`` too, each LocalQueue of a ClusterQueue
with ``admissionScope`` gets the GPUs its queue held as the half-life remembers them
(``consumed_gpus``, from the same load model), split evenly among the queue's LocalQueues.

A capped person's own queue (the portal's per-person caps: a ClusterQueue labelled
``portal.gpu-quota.io/person``) is not on the load model: ``admit_person_queues`` admits the
Jobs in it as Kueue would, oldest first while they fit the person's cap, and holds the rest
with Kueue's words; what it admitted stays. team-a's demo jobs go to their submitter's own
queue where the namespace names one (carol's on demo-h100).

The load model is the demo's one (``gpu_spec.demo_load``: the simulated GPUs follow it too). The
model is pure (``queue_load``, ``queue_status``, ``idle_workload``); ``simulate_once``
does the HTTP.
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import urllib.error
import urllib.request
from base64 import b64decode
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from pathlib import Path
from typing import Any

import yaml

from devcluster import kueue_jobs
from gpu_spec import demo_load
from quotas.quantity import parse_quantity

logger = logging.getLogger("devcluster.kueue_sim")

LOAD_ANNOTATION = "demo.gpu-quota-portal.io/load"
MAX_LOAD = 1.5
QUEUES_PATH = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
LOCAL_QUEUES_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues"
ALL_LOCAL_QUEUES_PATH = "/apis/kueue.x-k8s.io/v1beta2/localqueues"
KUEUE_CONFIG_PATH = "/api/v1/namespaces/kueue-system/configmaps/kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
MAX_SHARE = 9223372036854775807
WORKLOADS_PATH = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"
IDLE_NAME = "notebook-idle"
IDLE_ADMITTED_BEFORE = timedelta(days=4)


def queue_load(
    name: str, annotations: Mapping[str, str], now: datetime, hot: Iterable[str] = ()
) -> float:
    """The fraction of its limits a ClusterQueue uses at ``now``."""
    explicit = annotations.get(LOAD_ANNOTATION)
    if explicit is not None:
        try:
            value = float(explicit)
        except ValueError:
            logger.warning("%s: annotation %s=%r is not a number", name, LOAD_ANNOTATION, explicit)
        else:
            if math.isfinite(value):
                return min(max(value, 0.0), MAX_LOAD)
    return demo_load.queue_load(name in set(hot), now)


def _format(amount: Decimal) -> str:
    """A quantity in base units: whole numbers as they are, fractions in milli-units."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int((amount * 1000).to_integral_value(ROUND_FLOOR))}m"


def queue_status(queue: Mapping[str, Any], load: float) -> dict[str, Any]:
    """The ``.status`` Kueue would report for ``queue`` using ``load`` of every resource's
    limit: totals floored to whole units (GPUs, bytes, cores where the quota is whole),
    borrowing what is above the nominal quota, and workload counts to match."""
    usage = []
    gpus = Decimal(0)
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for resource in flavor.get("resources") or []:
                nominal = parse_quantity(resource.get("nominalQuota", 0))
                borrowing = parse_quantity(resource.get("borrowingLimit", 0) or 0)
                limit = nominal + borrowing
                total = (limit * Decimal(str(load))).to_integral_value(ROUND_FLOOR)
                borrowed = max(total - nominal, Decimal(0))
                resources.append(
                    {
                        "name": resource["name"],
                        "total": _format(total),
                        "borrowed": _format(borrowed),
                    }
                )
                if resource["name"].startswith("nvidia.com/"):
                    gpus += total
            usage.append({"name": flavor["name"], "resources": resources})
    admitted = int(gpus // 2) + (1 if gpus % 2 else 0)
    pending = int(max(load - 0.85, 0) * 20)
    return {
        "flavorsUsage": usage,
        "flavorsReservation": usage,
        "admittedWorkloads": admitted,
        "reservingWorkloads": admitted,
        "pendingWorkloads": pending,
    }


def weighted_share(queue: Mapping[str, Any], status: Mapping[str, Any]) -> int:
    """The ``status.fairSharing.weightedShare`` Kueue would report, roughly: the largest
    share of a resource's limit used above its nominal quota, per mille, over the queue's
    fair-sharing weight (Kueue divides by what the whole cohort can lend; the demo does not
    model the cohort)."""
    weight = float(
        parse_quantity(((queue.get("spec") or {}).get("fairSharing") or {}).get("weight", 1))
    )
    limits: dict[tuple[str, str], Decimal] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                nominal = parse_quantity(resource.get("nominalQuota", 0))
                borrowing = parse_quantity(resource.get("borrowingLimit", 0) or 0)
                limits[(flavor["name"], resource["name"])] = nominal + borrowing
    share = 0.0
    for flavor in status.get("flavorsUsage") or []:
        for resource in flavor.get("resources") or []:
            limit = limits.get((flavor["name"], resource["name"]), Decimal(0))
            if limit > 0:
                share = max(share, float(parse_quantity(resource["borrowed"]) / limit))
    if share == 0:
        return 0
    if weight <= 0:
        return MAX_SHARE
    return int(share * 1000 / weight)


def consumed_gpus(
    name: str,
    annotations: Mapping[str, str],
    limit: Decimal,
    now: datetime,
    half_life: timedelta,
    hot: Iterable[str] = (),
) -> Decimal:
    """The GPUs a queue held on average as admission fair sharing remembers them: its load
    model sampled every 3 hours back over four half-lives, each sample weighted by how much
    of it is left (half after one half-life)."""
    step = timedelta(hours=3)
    total = weights = 0.0
    when, back = now, timedelta(0)
    while back <= half_life * 4:
        weight = 0.5 ** (back / half_life)
        total += weight * queue_load(name, annotations, when, hot)
        weights += weight
        back += step
        when = now - back
    return (limit * Decimal(str(total / weights))).quantize(Decimal("0.001"))


def local_queue_status(consumed: Mapping[str, Decimal], updated: datetime) -> dict[str, Any]:
    """A LocalQueue's ``status.fairSharing`` under admission fair sharing."""
    return {
        "fairSharing": {
            "weightedShare": 0,
            "admissionFairSharingStatus": {
                "consumedResources": {name: _format(amount) for name, amount in consumed.items()},
                "lastUpdate": updated.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
    }


def kueue_fair_sharing(endpoint: Endpoint) -> tuple[bool, timedelta | None]:
    """Whether the cluster's Kueue configuration (the demo's ConfigMap) turns fair sharing on,
    and the half-life of admission fair sharing (None: off)."""
    try:
        configmap = endpoint.call("GET", KUEUE_CONFIG_PATH)
        document = yaml.safe_load((configmap.get("data") or {}).get(KUEUE_CONFIG_KEY) or "")
    except (OSError, ValueError, yaml.YAMLError):
        return False, None
    if not isinstance(document, dict):
        return False, None
    afs = document.get("admissionFairSharing")
    half_life = None
    if isinstance(afs, dict):
        text = str(afs.get("usageHalfLifeTime") or "")
        hours = text[:-1] if text.endswith("h") else ""
        half_life = timedelta(hours=float(hours)) if hours.replace(".", "", 1).isdigit() else None
    return isinstance(document.get("fairSharing"), dict), half_life


def _queue_limit_gpus(queue: Mapping[str, Any]) -> Decimal:
    total = Decimal(0)
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                if resource["name"] == "nvidia.com/gpu":
                    total += parse_quantity(resource.get("nominalQuota", 0))
                    total += parse_quantity(resource.get("borrowingLimit", 0) or 0)
    return total


def _write_local_queues(
    endpoint: Endpoint,
    queue: Mapping[str, Any],
    local_queues: list[Mapping[str, Any]],
    now: datetime,
    half_life: timedelta,
    hot: Iterable[str],
) -> None:
    """Each LocalQueue of ``queue`` (with admission fair sharing) its share of the queue's
    remembered GPU use, split evenly."""
    metadata = queue.get("metadata") or {}
    name = metadata.get("name", "")
    mine = [lq for lq in local_queues if (lq.get("spec") or {}).get("clusterQueue") == name]
    if not mine:
        return
    consumed = consumed_gpus(
        name, metadata.get("annotations") or {}, _queue_limit_gpus(queue), now, half_life, hot
    )
    each = (consumed / len(mine)).quantize(Decimal("0.001"))
    for lq in mine:
        lq_meta = lq.get("metadata") or {}
        endpoint.call(
            "PATCH",
            LOCAL_QUEUES_PATH.format(namespace=lq_meta.get("namespace", ""))
            + f"/{lq_meta.get('name', '')}/status",
            {"status": local_queue_status({"nvidia.com/gpu": each}, now)},
            "application/merge-patch+json",
        )


def _gpu_flavor(queue: Mapping[str, Any]) -> str | None:
    """The first flavor of ``queue`` with whole GPUs (``nvidia.com/gpu``)."""
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            if any(r.get("name") == "nvidia.com/gpu" for r in flavor.get("resources") or []):
                return str(flavor["name"])
    return None


def idle_workload(
    tenant: str, flavor: str, admitted: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A one-GPU notebook of ``tenant`` admitted at ``admitted`` on ``flavor``: the Workload
    and the status Kueue would have given it."""
    namespace = f"{tenant}-training"
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": IDLE_NAME, "namespace": namespace},
        "spec": {
            "queueName": "default",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "notebook",
                                    "image": "jupyter/base-notebook",
                                    "resources": {"requests": {"nvidia.com/gpu": "1"}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    at = admitted.strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "conditions": [
            {"type": kind, "status": "True", "reason": kind, "message": "demo",
             "lastTransitionTime": at}
            for kind in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": tenant,
            "podSetAssignments": [
                {"name": "main", "flavors": {"nvidia.com/gpu": flavor}, "count": 1}
            ],
        },
    }  # fmt: skip
    return body, status


@dataclass(frozen=True)
class Endpoint:
    """Where a kubeconfig's current cluster is, and how to authenticate to it."""

    server: str
    token: str | None
    context: ssl.SSLContext | None

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Endpoint:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        context = None
        if cluster["server"].startswith("https://"):
            context = ssl.create_default_context()
            if data := cluster.get("certificate-authority-data"):
                context.load_verify_locations(cadata=b64decode(data).decode())
        return cls(cluster["server"].rstrip("/"), user.get("token"), context)

    def exists(self, path: str) -> bool:
        try:
            self.call("GET", path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "", as_user: str = ""
    ) -> Any:
        request = urllib.request.Request(  # noqa: S310 - the demo's own stand-in
            self.server + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
        )
        request.add_header("Accept", "application/json")
        if as_user:  # kubectl --as: the stand-in checks the impersonation and RBAC
            request.add_header("Impersonate-User", as_user)
        if content_type:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=10, context=self.context) as response:  # noqa: S310
            return json.load(response)


def simulate_once(
    endpoint: Endpoint,
    now: datetime,
    hot: Iterable[str] = (),
    idle: str | None = None,
    started: datetime | None = None,
    teams: Iterable[str] = (),
) -> int:
    """Write every ClusterQueue's status once (and make ``idle``'s notebook if it is missing
    and the tenant's namespace exists; and the jobs of ``teams``, submitted by their people,
    with their Workloads); returns how many statuses were written."""
    written = 0
    teams = set(teams)
    fair, half_life = kueue_fair_sharing(endpoint)
    local_queues: list[Mapping[str, Any]] = []
    if half_life:
        local_queues = endpoint.call("GET", ALL_LOCAL_QUEUES_PATH).get("items") or []
    queues = endpoint.call("GET", QUEUES_PATH).get("items") or []
    for queue in queues:
        metadata = queue.get("metadata") or {}
        name = metadata.get("name", "")
        if name in teams:
            _ensure_team_jobs(endpoint, queue, started or now)
            _ensure_team_jobset(endpoint, queue)
    written += admit_person_queues(endpoint, queues, now)
    for queue in queues:
        metadata = queue.get("metadata") or {}
        name = metadata.get("name", "")
        if PERSON_LABEL in (metadata.get("labels") or {}):
            continue  # a person's queue: its status is what admit_person_queues admitted
        if name == idle:
            _ensure_idle(endpoint, queue, (started or now) - IDLE_ADMITTED_BEFORE)
        load = queue_load(name, metadata.get("annotations") or {}, now, hot)
        status = queue_status(queue, load)
        if fair:
            status["fairSharing"] = {"weightedShare": weighted_share(queue, status)}
        scope = ((queue.get("spec") or {}).get("admissionScope") or {}).get("admissionMode")
        if half_life and scope == "UsageBasedAdmissionFairSharing":
            _write_local_queues(endpoint, queue, local_queues, now, half_life, hot)
        endpoint.call(
            "PATCH",
            f"{QUEUES_PATH}/{name}/status",
            {"status": status},
            "application/merge-patch+json",
        )
        written += 1
    if teams:
        # Kueue's job integrations: a Workload for every managed job the people submitted (a
        # job over its tenant's job cap gets none and stays suspended), admitted if it fits.
        kueue_jobs.reconcile(endpoint, now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return written


def _ensure_idle(endpoint: Endpoint, queue: Mapping[str, Any], admitted: datetime) -> None:
    tenant = queue["metadata"]["name"]
    flavor = _gpu_flavor(queue)
    namespace = f"{tenant}-training"
    path = WORKLOADS_PATH.format(namespace=namespace)
    if flavor is None or not endpoint.exists(f"/api/v1/namespaces/{namespace}"):
        return
    if endpoint.exists(f"{path}/{IDLE_NAME}"):
        return
    body, status = idle_workload(tenant, flavor, admitted)
    endpoint.call("POST", path, body, "application/json")
    endpoint.call(
        "PATCH", f"{path}/{IDLE_NAME}/status", {"status": status}, "application/merge-patch+json"
    )
    logger.warning("%s/%s: an idle notebook for the demo's idle rule", namespace, IDLE_NAME)


# A team's jobs, as its people submit them and Kueue admits them ------------------------------

JOBS_PATH = "/apis/batch/v1/namespaces/{namespace}/jobs"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


@dataclass(frozen=True)
class DemoJob:
    name: str
    submitter: str
    gpus: int
    state: str  # running, admitted or pending
    age: timedelta  # how long before the loop started it was submitted


# alice (lead) and carol (member) of team-a; the pending job asks for more than is left.
TEAM_JOBS = (
    DemoJob("llm-finetune", "alice", 4, "running", timedelta(hours=3, minutes=10)),
    DemoJob("resnet-sweep", "carol", 2, "running", timedelta(minutes=45)),
    DemoJob("eval-batch", "carol", 1, "admitted", timedelta(minutes=3)),
    DemoJob("pretrain-8x", "carol", 8, "pending", timedelta(minutes=25)),
)


def team_job(namespace: str, job: DemoJob, queue: str = "default") -> dict[str, Any]:
    """A suspended Job for Kueue (``kueue.x-k8s.io/queue-name``), asking ``job.gpus`` GPUs."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job.name, "namespace": namespace, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer",
                            "resources": {"requests": {"nvidia.com/gpu": str(job.gpus)}},
                        }
                    ],
                }
            },
        },
    }


def job_workload(
    job_object: Mapping[str, Any], job: DemoJob, tenant: str, flavor: str, submitted: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Workload Kueue's job controller makes for a Job (owned by it, its pod template
    copied, the submitter annotation with it) and the status Kueue would give it."""
    meta = job_object["metadata"]
    name = f"job-{meta['name']}-{str(meta.get('uid') or '')[:5]}"
    template = job_object["spec"]["template"]
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta.get("uid", "")},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                 "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1, "template": template}],
        },
    }  # fmt: skip
    at = submitted.strftime("%Y-%m-%dT%H:%M:%SZ")
    if job.state == "pending":
        status: dict[str, Any] = {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                 "lastTransitionTime": at,
                 "message": f"couldn't assign flavors to pod set main: insufficient unused "
                 f"quota for nvidia.com/gpu in flavor {flavor}, {job.gpus // 2} more needed"}
            ]
        }  # fmt: skip
        return body, status
    kinds = ("QuotaReserved", "Admitted", *(("PodsReady",) if job.state == "running" else ()))
    status = {
        "conditions": [
            {"type": kind, "status": "True", "reason": kind, "message": "demo",
             "lastTransitionTime": at}
            for kind in kinds
        ],
        "admission": {
            "clusterQueue": tenant,
            "podSetAssignments": [
                {"name": "main", "flavors": {"nvidia.com/gpu": flavor}, "count": 1,
                 "resourceUsage": {"nvidia.com/gpu": str(job.gpus)}}
            ],
        },
    }  # fmt: skip
    return body, status


def _ensure_team_jobs(endpoint: Endpoint, queue: Mapping[str, Any], started: datetime) -> None:
    """The team's demo jobs, each created as its submitter (the stand-in stamps who), and
    their Workloads as Kueue would make and admit them; what exists is left alone."""
    tenant = queue["metadata"]["name"]
    flavor = _gpu_flavor(queue)
    namespace = f"{tenant}-training"
    if flavor is None or not endpoint.exists(f"/api/v1/namespaces/{namespace}"):
        return
    jobs = JOBS_PATH.format(namespace=namespace)
    workloads = WORKLOADS_PATH.format(namespace=namespace)
    own = person_queues(endpoint.call("GET", f"/api/v1/namespaces/{namespace}"))
    for job in TEAM_JOBS:
        local_queue = own.get(job.submitter, "default")
        if not endpoint.exists(f"{jobs}/{job.name}"):
            body = team_job(namespace, job, local_queue)
            endpoint.call("POST", jobs, body, "application/json", job.submitter)
        if local_queue != "default":
            continue  # a capped person's queue: admit_person_queues admits it, or holds it
        job_object = endpoint.call("GET", f"{jobs}/{job.name}")
        body, status = job_workload(job_object, job, tenant, flavor, started - job.age)
        name = body["metadata"]["name"]
        if endpoint.exists(f"{workloads}/{name}"):
            continue
        endpoint.call("POST", workloads, body, "application/json")
        endpoint.call(
            "PATCH",
            f"{workloads}/{name}/status",
            {"status": status},
            "application/merge-patch+json",
        )
        logger.warning("%s/%s: %s's demo job (%s)", namespace, name, job.submitter, job.state)


# carol's JobSet: three workers of 2 CPUs. On a team capped at 5 running jobs, with its 3
# demo jobs admitted, it needs 3 of the 2 slots left: held by the job cap (kueue_jobs), as
# ``kubectl get workloads -n team-a-training`` shows.
DEMO_JOBSET = "data-prep"
JOBSETS_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"


def team_jobset(namespace: str) -> dict[str, Any]:
    job = {
        "spec": {
            "parallelism": 1,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "prep", "image": "data-prep",
                         "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}
                    ],
                }
            },
        }
    }  # fmt: skip
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": DEMO_JOBSET,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: "default"},
        },
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 3, "template": job}]},
    }


def _ensure_team_jobset(endpoint: Endpoint, queue: Mapping[str, Any]) -> None:
    """carol's JobSet in the team's training namespace, created as her (once)."""
    namespace = f"{queue['metadata']['name']}-training"
    path = JOBSETS_PATH.format(namespace=namespace)
    if not endpoint.exists(f"/api/v1/namespaces/{namespace}"):
        return
    if endpoint.exists(f"{path}/{DEMO_JOBSET}"):
        return
    if "carol" in person_queues(endpoint.call("GET", f"/api/v1/namespaces/{namespace}")):
        return  # capped here: her queue's admission shows her cap; the JobSet the other cluster
    endpoint.call("POST", path, team_jobset(namespace), "application/json", "carol")
    logger.warning("%s/%s: carol's demo JobSet", namespace, DEMO_JOBSET)


# A capped person's own queue (portal R14, quotas.kube.person_caps) ---------------------------

PERSON_LABEL = "portal.gpu-quota.io/person"
IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
PERSON_ANNOTATION = "person-queue.portal.gpu-quota.io/"
ALL_JOBS_PATH = "/apis/batch/v1/jobs"
ALL_WORKLOADS_PATH = "/apis/kueue.x-k8s.io/v1beta2/workloads"


def person_queues(namespace: Mapping[str, Any]) -> dict[str, str]:
    """{username: their LocalQueue} from a namespace's person-queue annotations."""
    annotations = (namespace.get("metadata") or {}).get("annotations") or {}
    return {
        str(user): key[len(PERSON_ANNOTATION) :]
        for key, user in annotations.items()
        if key.startswith(PERSON_ANNOTATION)
    }


def _requests(job: Mapping[str, Any]) -> dict[str, Decimal]:
    """What a Job asks of accelerators (``nvidia.com/*``): its containers' requests (limits
    where no request), times its parallelism."""
    spec = job.get("spec") or {}
    parallelism = int(spec.get("parallelism", 1) or 1)
    total: dict[str, Decimal] = {}
    pod = ((spec.get("template") or {}).get("spec")) or {}
    for container in pod.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, amount in asked.items():
            if str(name).startswith("nvidia.com/"):
                total[name] = total.get(name, Decimal(0)) + parse_quantity(amount) * parallelism
    return total


def _queue_limits(queue: Mapping[str, Any]) -> dict[str, tuple[str, Decimal | None]]:
    """{resource: (its first flavor, nominal + borrowing limit, None: unlimited)}."""
    out: dict[str, tuple[str, Decimal | None]] = {}
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                name = resource["name"]
                nominal = parse_quantity(resource.get("nominalQuota", 0))
                if name in out or (nominal == 0 and resource.get("borrowingLimit") == "0"):
                    continue
                limit = None
                if "borrowingLimit" in resource:
                    limit = nominal + parse_quantity(resource["borrowingLimit"])
                out[name] = (flavor["name"], limit)
    return out


@dataclass(frozen=True)
class Decision:
    """What Kueue would do with one Job in a person's queue."""

    namespace: str
    job: str
    job_uid: str
    queue: str  # the LocalQueue
    cluster_queue: str
    admitted: bool
    flavor: str
    asked: dict[str, Decimal]
    message: str


def _creation_order(job: Mapping[str, Any]) -> tuple[str, int, str]:
    """Oldest first, as Kueue queues them; within one second, by the stand-in's
    resourceVersion (a counter: the order of creation, or of the last change)."""
    meta = job.get("metadata") or {}
    version = str(meta.get("resourceVersion") or "0")
    return (
        meta.get("creationTimestamp", ""),
        int(version) if version.isdigit() else 0,
        meta.get("name", ""),
    )


def person_admission(
    queues: list[Mapping[str, Any]],
    local_queues: list[Mapping[str, Any]],
    jobs: list[Mapping[str, Any]],
    admitted: frozenset[str] = frozenset(),
) -> list[Decision]:
    """Kueue's admission of the Jobs in people's queues: what is admitted already (the
    Jobs whose uid is in ``admitted``) stays and counts first; then, oldest first, a Job is
    admitted while its queue's use plus what it asks stays within the queue's quota
    (nominal 0 plus the person's cap as borrowing limit), otherwise it waits with Kueue's
    words. (The tenant's Cohort, which bounds the people's and the team's use together, is
    not simulated: the demo's team queue keeps its own load model.)"""
    people = {
        q["metadata"]["name"]: q
        for q in queues
        if PERSON_LABEL in ((q.get("metadata") or {}).get("labels") or {})
    }
    routes = {
        (lq["metadata"].get("namespace", ""), lq["metadata"]["name"]): (lq.get("spec") or {}).get(
            "clusterQueue", ""
        )
        for lq in local_queues
    }
    used: dict[tuple[str, str], Decimal] = {}
    decisions = []
    ordered = sorted(
        jobs,
        key=lambda j: (str((j.get("metadata") or {}).get("uid", "")) not in admitted,
                       _creation_order(j)),
    )  # fmt: skip
    for job in ordered:
        meta = job.get("metadata") or {}
        queue_name = (meta.get("labels") or {}).get(QUEUE_LABEL, "")
        cluster_queue = routes.get((meta.get("namespace", ""), queue_name), "")
        queue = people.get(cluster_queue)
        if queue is None:
            continue
        limits = _queue_limits(queue)
        asked = _requests(job)
        fits, flavor, short = True, "", ""
        if (queue.get("metadata") or {}).get("deletionTimestamp") and meta.get(
            "uid", ""
        ) not in admitted:
            # Terminating (the person left the team): nothing new is admitted.
            fits, short = False, f"ClusterQueue {cluster_queue} is terminating"
        for resource, amount in sorted(asked.items()) if fits else ():
            flavor, limit = limits.get(resource, ("", Decimal(0)))
            have = used.get((cluster_queue, resource), Decimal(0))
            if meta.get("uid", "") in admitted:
                continue
            if limit is not None and have + amount > limit:
                fits = False
                short = (
                    f"couldn't assign flavors to pod set main: insufficient unused quota for "
                    f"{resource} in flavor {flavor or 'any'}, {_format(have + amount - limit)} "
                    f"more needed (ClusterQueue {cluster_queue}: {_format(have)} of "
                    f"{_format(limit)} in use)"
                )
                break
        if fits:
            for resource, amount in asked.items():
                key = (cluster_queue, resource)
                used[key] = used.get(key, Decimal(0)) + amount
        decisions.append(
            Decision(
                namespace=meta.get("namespace", ""),
                job=meta.get("name", ""),
                job_uid=meta.get("uid", ""),
                queue=queue_name,
                cluster_queue=cluster_queue,
                admitted=fits,
                flavor=flavor,
                asked=asked,
                message=short,
            )
        )
    return decisions


def decision_workload(
    decision: Decision, job: Mapping[str, Any], now: datetime
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Workload Kueue makes for the Job, and its status (admitted, or waiting)."""
    name = f"job-{decision.job}-{decision.job_uid[:5]}"
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": decision.namespace,
            "labels": {JOB_UID_LABEL: decision.job_uid},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": decision.job,
                 "uid": decision.job_uid, "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "queueName": decision.queue,
            "podSets": [
                {"name": "main", "count": 1, "template": (job.get("spec") or {}).get("template")}
            ],
        },
    }  # fmt: skip
    at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    if not decision.admitted:
        status: dict[str, Any] = {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending",
                 "message": decision.message, "lastTransitionTime": at}
            ]
        }  # fmt: skip
        return body, status
    status = {
        "conditions": [
            {"type": kind, "status": "True", "reason": kind, "message": "demo",
             "lastTransitionTime": at}
            for kind in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": decision.cluster_queue,
            "podSetAssignments": [
                {"name": "main", "count": 1,
                 "flavors": {r: decision.flavor for r in decision.asked},
                 "resourceUsage": {r: _format(a) for r, a in decision.asked.items()}}
            ],
        },
    }  # fmt: skip
    return body, status


def person_queue_status(queue: Mapping[str, Any], decisions: list[Decision]) -> dict[str, Any]:
    """A person's ClusterQueue status from what it admitted and holds."""
    name = queue["metadata"]["name"]
    mine = [d for d in decisions if d.cluster_queue == name]
    totals: dict[tuple[str, str], Decimal] = {}
    for decision in mine:
        if decision.admitted:
            for resource, amount in decision.asked.items():
                key = (decision.flavor, resource)
                totals[key] = totals.get(key, Decimal(0)) + amount
    usage = []
    for group in (queue.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for resource in flavor.get("resources") or []:
                total = totals.get((flavor["name"], resource["name"]), Decimal(0))
                resources.append(
                    {"name": resource["name"], "total": _format(total), "borrowed": _format(total)}
                )
            usage.append({"name": flavor["name"], "resources": resources})
    admitted = sum(1 for d in mine if d.admitted)
    return {
        "flavorsUsage": usage,
        "flavorsReservation": usage,
        "admittedWorkloads": admitted,
        "reservingWorkloads": admitted,
        "pendingWorkloads": len(mine) - admitted,
    }


def admit_person_queues(endpoint: Endpoint, queues: list[Mapping[str, Any]], now: datetime) -> int:
    """Admit or hold the Jobs in people's queues as Kueue would (``person_admission``): each
    gets its Workload (made once; a waiting one admitted when it fits), an admitted Job is
    resumed (``suspend: false``), and each person's ClusterQueue its status. Returns the
    statuses written."""
    people = [q for q in queues if PERSON_LABEL in ((q.get("metadata") or {}).get("labels") or {})]
    if not people:
        return 0
    local_queues = endpoint.call("GET", ALL_LOCAL_QUEUES_PATH).get("items") or []
    jobs = endpoint.call("GET", ALL_JOBS_PATH).get("items") or []
    workloads = endpoint.call("GET", ALL_WORKLOADS_PATH).get("items") or []
    existing = {(w["metadata"].get("namespace", ""), w["metadata"]["name"]): w for w in workloads}
    admitted = frozenset(
        str(((w.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL, ""))
        for w in workloads
        if _is_admitted(w)
    )
    decisions = person_admission(people, local_queues, jobs, admitted)
    by_uid = {(j.get("metadata") or {}).get("uid", ""): j for j in jobs}
    for decision in decisions:
        job = by_uid[decision.job_uid]
        body, status = decision_workload(decision, job, now)
        path = WORKLOADS_PATH.format(namespace=decision.namespace)
        name = body["metadata"]["name"]
        held = existing.get((decision.namespace, name))
        if held is None:
            endpoint.call("POST", path, body, "application/json")
        elif _is_admitted(held) or not decision.admitted:
            continue  # as it was: Kueue does not take back what it admitted
        endpoint.call(
            "PATCH", f"{path}/{name}/status", {"status": status}, "application/merge-patch+json"
        )
        if decision.admitted and (job.get("spec") or {}).get("suspend"):
            endpoint.call(
                "PATCH",
                f"{JOBS_PATH.format(namespace=decision.namespace)}/{decision.job}",
                {"spec": {"suspend": False}},
                "application/merge-patch+json",
            )
    # The queues admitted work still holds (a Workload admitted there whose Job is still
    # there), whatever became of the LocalQueue it came through.
    in_use = {
        str(((w.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
        for w in workloads
        if _is_admitted(w)
        and str(((w.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL, "")) in by_uid
    }
    in_use |= {d.cluster_queue for d in decisions if d.admitted}
    for queue in people:
        name = queue["metadata"]["name"]
        endpoint.call(
            "PATCH",
            f"{QUEUES_PATH}/{name}/status",
            {"status": person_queue_status(queue, decisions)},
            "application/merge-patch+json",
        )
        _keep_while_in_use(endpoint, queue, in_use)
    return len(people)


def _keep_while_in_use(endpoint: Endpoint, queue: Mapping[str, Any], in_use: set[str]) -> None:
    """Kueue's ``kueue.x-k8s.io/resource-in-use`` finalizer on a person's ClusterQueue: put
    on it while it lives, taken off once it is being deleted and admits nothing any more (a
    person removed from the team: their running work ends first, nothing is evicted)."""
    metadata = queue.get("metadata") or {}
    name = metadata["name"]
    finalizers = list(metadata.get("finalizers") or [])
    if metadata.get("deletionTimestamp"):
        if IN_USE_FINALIZER in finalizers and name not in in_use:
            finalizers.remove(IN_USE_FINALIZER)
        else:
            return
    elif IN_USE_FINALIZER in finalizers:
        return
    else:
        finalizers.append(IN_USE_FINALIZER)
    endpoint.call(
        "PATCH",
        f"{QUEUES_PATH}/{name}",
        {"metadata": {"finalizers": finalizers}},
        "application/merge-patch+json",
    )


def _is_admitted(workload: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Admitted" and c.get("status") == "True"
        for c in (workload.get("status") or {}).get("conditions") or []
    )
