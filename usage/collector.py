"""The cluster collector: what Kubernetes and Kueue say, as usage samples (Celery beat, every
minute, one task per cluster).

Through the same client as the quota push (``quotas.backends.cluster_backend``), one LIST per kind:

- Pods (all namespaces): GPUs requested by running pods per tenant and flavor
  (``GPUS_ALLOCATED``), and pod uid -> namespace -> tenant (``usage.Pod``) for the agents'
  processes;
- the portal's ClusterQueues' ``.status``: ``flavorsUsage`` / ``flavorsReservation`` (total,
  borrowed) per flavor, pending and admitted workloads;
- Kueue Workloads: one ``usage.Workload`` row each, updated (created, admitted, finished,
  evictions and preemptions from ``.status.conditions`` and ``.status.schedulingStats``);
- the portal's ResourceQuotas' ``.status.used`` (GPU resources);
- where the portal asks for fair sharing, the ClusterQueues' ``status.fairSharing`` and the
  LocalQueues' decayed use (``usage.FairShareReading``, one row per tenant);
- and the tenant's guaranteed and limit per GPU flavor from the portal's quotas.

The parsing functions are pure (dicts in, rows out); ``cluster_collect`` does the I/O.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from quotas.backends import cluster_backend
from quotas.choices import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    FairSharing,
    SyncBackend,
    is_gpu_resource,
)
from quotas.kube.applier import ApplyError, Backend, KindNotServed, Scope
from quotas.kube.resources import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    POD,
    RESOURCE_QUOTA,
    WORKLOAD,
    Kind,
)
from quotas.kube.spec import LABEL_TENANT
from quotas.models import Cluster, FairShareReading, Quota, ResourceFlavor
from quotas.quantity import QuantityError, parse_quantity
from tenants.models import Namespace, Tenant
from usage.choices import Metric, PrometheusFigure, Source, WorkloadState
from usage.models import Pod, Workload, WorkloadReading
from usage.prometheus import PrometheusOutcome, prometheus_collect
from usage.services import SampleRow, quota_readings_judge, samples_write

logger = logging.getLogger(__name__)

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


def _amount(value: Any) -> float:
    try:
        return float(parse_quantity(value))
    except (QuantityError, TypeError, ValueError):
        return 0.0


def _time(value: Any) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class FlavorIndex:
    """How a GPU resource name (and a pod's node selector) maps to a flavor of the cluster."""

    by_name: Mapping[str, int]
    mig: Mapping[str, int]  # MIG profile -> flavor id
    gpu_by_product: Mapping[str, int]  # node label value -> flavor id
    only_gpu: int | None  # the cluster's only whole-GPU flavor, if it has one

    def for_resource(
        self, resource: str, node_selector: Mapping[str, str] | None = None
    ) -> int | None:
        if resource.startswith(MIG_RESOURCE_PREFIX):
            return self.mig.get(resource.removeprefix(MIG_RESOURCE_PREFIX))
        if resource == GPU_RESOURCE:
            product = (node_selector or {}).get(GPU_PRODUCT_LABEL)
            if product and product in self.gpu_by_product:
                return self.gpu_by_product[product]
            return self.only_gpu
        return None


def quota_gpu_used(
    quotas: Iterable[Mapping[str, Any]], ns_tenant: Mapping[str, int], flavors: FlavorIndex
) -> dict[tuple[int, int | None], float]:
    """GPU requests in use per tenant and flavor, from the ResourceQuotas' ``status.used``.
    Only unscoped quotas count: a pod is in every quota of its namespace that matches it, so a
    PriorityClass-scoped quota (batch / inference split) would count it a second time."""
    used: dict[tuple[int, int | None], float] = defaultdict(float)
    for rq in quotas:
        spec = rq.get("spec") or {}
        if spec.get("scopeSelector") or spec.get("scopes"):
            continue
        tenant_id = ns_tenant.get((rq.get("metadata") or {}).get("namespace") or "")
        if tenant_id is None:
            continue
        for name, value in ((rq.get("status") or {}).get("used") or {}).items():
            resource = name.removeprefix("requests.")
            if name.startswith("requests.") and is_gpu_resource(resource):
                used[(tenant_id, flavors.for_resource(resource))] += _amount(value)
    return dict(used)


def flavor_index(flavors: Iterable[ResourceFlavor]) -> FlavorIndex:
    by_name: dict[str, int] = {}
    mig: dict[str, int] = {}
    products: dict[str, int] = {}
    gpus: list[int] = []
    for flavor in flavors:
        by_name[flavor.name] = flavor.pk
        if flavor.kind == "mig" and flavor.mig_profile:
            mig.setdefault(flavor.mig_profile, flavor.pk)
        elif flavor.kind == "gpu":
            gpus.append(flavor.pk)
            product = (flavor.node_labels or {}).get(GPU_PRODUCT_LABEL)
            if product:
                products[product] = flavor.pk
    return FlavorIndex(by_name, mig, products, gpus[0] if len(gpus) == 1 else None)


def _gpu_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """GPU resources one pod asks for (requests, else limits, as the device plugin counts)."""
    out: dict[str, float] = defaultdict(float)
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in asked.items():
            if is_gpu_resource(name):
                out[name] += _amount(value)
    return dict(out)


@dataclass
class PodRow:
    uid: str
    namespace: str
    name: str
    phase: str
    node_name: str
    gpus: dict[str, float]
    node_selector: dict[str, str]
    owner_uids: tuple[str, ...] = ()


def pod_rows(pods: Iterable[Mapping[str, Any]]) -> list[PodRow]:
    rows = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if not meta.get("uid"):
            continue
        rows.append(
            PodRow(
                uid=meta["uid"],
                namespace=meta.get("namespace") or "",
                name=meta.get("name") or "",
                phase=(pod.get("status") or {}).get("phase") or "",
                node_name=spec.get("nodeName") or "",
                gpus=_gpu_requests(spec),
                node_selector=spec.get("nodeSelector") or {},
                owner_uids=_owner_uids(meta),
            )
        )
    return rows


# The label Kueue puts on a Workload with the uid of the job it stands for.
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def _owner_uids(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The uids of an object's owners, its controller first."""
    owners = sorted(meta.get("ownerReferences") or [], key=lambda o: not o.get("controller", False))
    return tuple(str(o["uid"]) for o in owners if o.get("uid"))


def pod_workloads(pods: Sequence[PodRow], workloads: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """pod uid -> the uid of the Kueue Workload it runs for: Kueue makes a Workload for a Job
    (a JobSet, a RayJob...) owned by that object and labelled with its uid, and the object
    owns the pods (through their controller, for a Job); a plain pod's Workload is owned by
    the pod itself. Pods whose
    owner has no Workload (a Deployment outside Kueue, an object two levels up) map to
    nothing, and the idle rule then judges them by their tenant's GPUs."""
    by_owner: dict[str, str] = {}
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if not meta.get("uid"):
            continue
        job_uid = (meta.get("labels") or {}).get(KUEUE_JOB_UID_LABEL)
        for owner in (*_owner_uids(meta), *([job_uid] if job_uid else [])):
            by_owner.setdefault(owner, str(meta["uid"]))
    out = {}
    for pod in pods:
        for uid in (pod.uid, *pod.owner_uids):
            if uid in by_owner:
                out[pod.uid] = by_owner[uid]
                break
    return out


def workload_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """One Kueue Workload's lifecycle from its status (times from ``.status.conditions``)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    evicted = conditions.get("Evicted") or {}
    admission = status.get("admission") or {}
    admitted_at = _true_since(conditions, "Admitted")
    finished_at = _true_since(conditions, "Finished")
    evictions, preemptions = _eviction_counts(status)
    return {
        "uid": meta.get("uid") or "",
        "namespace": meta.get("namespace") or "",
        "name": meta.get("name") or "",
        "created_at": _time(meta.get("creationTimestamp")),
        "queue_name": spec.get("queueName") or "",
        "cluster_queue": admission.get("clusterQueue") or "",
        "priority": spec.get("priority"),
        "gpus": _workload_gpus(spec),
        "flavors": _assigned_flavors(admission),
        "state": _workload_state(
            spec, evicted, admitted=admitted_at is not None, finished=finished_at is not None
        ),
        "admitted_at": admitted_at,
        "finished_at": finished_at,
        "evicted_at": _time(evicted.get("lastTransitionTime")) if evicted else None,
        "evicted_reason": evicted.get("reason") or "",
        "evictions": evictions,
        "preemptions": preemptions,
        **_workload_details(meta, spec, conditions),
        "resources": _workload_resources(spec, admission),
    }


# Kubernetes does not record who created an object. The portal's admission policy (a
# MutatingAdmissionPolicy, docs/use/workloads.md) stamps the requesting user on the pod template
# of every job a tenant submits; Kueue copies the template into the Workload's pod sets.
ANNOTATION_SUBMITTER = "portal.gpu-quota.io/submitter"
PENDING_QUOTA = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^,\s]+), "
    r"(?P<more>[0-9.]+\w*) more needed"
)
PENDING_CANNOT_FIT = re.compile(
    r"insufficient quota for (?P<resource>\S+) in flavor (?P<flavor>[^,\s]+), "
    r"(?:request|previously considered podsets requests) \(?(?P<asked>[0-9.]+\w*)\)? > "
    r"maximum capacity \((?P<capacity>[0-9.]+\w*)\)"
)


def _workload_details(
    meta: Mapping[str, Any], spec: Mapping[str, Any], conditions: Mapping[Any, Mapping[str, Any]]
) -> dict[str, Any]:
    """Its job (the owner reference), who submitted it, whether it is active, and Kueue's
    words on why it waits (the QuotaReserved condition while false)."""
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else {})
    submitter, source = "", ""
    templates = [(p.get("template") or {}) for p in spec.get("podSets") or []]
    for template in templates:
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        if annotations.get(ANNOTATION_SUBMITTER):
            submitter, source = str(annotations[ANNOTATION_SUBMITTER]), "annotation"
            break
    else:
        annotations = meta.get("annotations") or {}
        if annotations.get(ANNOTATION_SUBMITTER):
            submitter, source = str(annotations[ANNOTATION_SUBMITTER]), "annotation"
        else:
            account = next(
                (
                    (t.get("spec") or {}).get("serviceAccountName")
                    for t in templates
                    if (t.get("spec") or {}).get("serviceAccountName")
                ),
                None,
            )
            submitter, source = (account, "service-account") if account else ("", "")
    reserved = conditions.get("QuotaReserved") or {}
    waiting = reserved.get("status") == "False"
    return {
        "job_kind": str(owner.get("kind") or ""),
        "job_name": str(owner.get("name") or ""),
        "submitter": submitter[:253],
        "submitter_source": source,
        "active": spec.get("active") is not False,
        "pending_message": str(reserved.get("message") or "")[:1000] if waiting else "",
        "pending_reason": str(reserved.get("reason") or "")[:63] if waiting else "",
        "pods_ready": (conditions.get("PodsReady") or {}).get("status") == "True",
    }


def _workload_resources(
    spec: Mapping[str, Any], admission: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """What it holds per flavor (Kueue's podSetAssignments), else what its pod sets ask for
    (flavor ""): [{flavor, resource, amount}], amounts in base units, summed."""
    totals: dict[tuple[str, str], float] = defaultdict(float)
    assignments = admission.get("podSetAssignments") or []
    if assignments:
        for assignment in assignments:
            flavors = assignment.get("flavors") or {}
            for resource, amount in (assignment.get("resourceUsage") or {}).items():
                totals[(str(flavors.get(resource) or ""), str(resource))] += _amount(amount)
    else:
        for pod_set in spec.get("podSets") or []:
            count = int(pod_set.get("count") or 1)
            template = (pod_set.get("template") or {}).get("spec") or {}
            for container in template.get("containers") or []:
                resources = container.get("resources") or {}
                asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
                for name, value in asked.items():
                    totals[("", str(name))] += count * _amount(value)
    return [
        {"flavor": flavor, "resource": resource, "amount": amount}
        for (flavor, resource), amount in sorted(totals.items())
        if amount
    ]


def _true_since(conditions: Mapping[Any, Mapping[str, Any]], kind: str) -> datetime | None:
    """When the Workload's condition ``kind`` became true; None unless it is true."""
    condition = conditions.get(kind)
    if condition and condition.get("status") == "True":
        return _time(condition.get("lastTransitionTime"))
    return None


def _eviction_counts(status: Mapping[str, Any]) -> tuple[int, int]:
    """(evictions, of which preemptions), from ``.status.schedulingStats.evictions``."""
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    evictions = sum(int(e.get("count") or 0) for e in stats)
    preemptions = sum(int(e.get("count") or 0) for e in stats if e.get("reason") == "Preempted")
    return evictions, preemptions


def _workload_gpus(spec: Mapping[str, Any]) -> float:
    """The GPUs the Workload asks for: each pod set's count times its pods' GPU requests."""
    gpus = 0.0
    for pod_set in spec.get("podSets") or []:
        template = (pod_set.get("template") or {}).get("spec") or {}
        gpus += int(pod_set.get("count") or 1) * sum(_gpu_requests(template).values())
    return gpus


def _assigned_flavors(admission: Mapping[str, Any]) -> list[str]:
    """The flavors Kueue admitted the Workload's pod sets on, sorted, each once."""
    return sorted(
        {
            name
            for assignment in admission.get("podSetAssignments") or []
            for name in (assignment.get("flavors") or {}).values()
        }
    )


def _workload_state(
    spec: Mapping[str, Any], evicted: Mapping[str, Any], *, admitted: bool, finished: bool
) -> WorkloadState:
    """Finished, else admitted, else deactivated, else evicted, else pending."""
    if finished:
        return WorkloadState.FINISHED
    if admitted:
        return WorkloadState.ADMITTED
    if spec.get("active") is False:
        return WorkloadState.INACTIVE
    if evicted.get("status") == "True":
        return WorkloadState.EVICTED
    return WorkloadState.PENDING


def queue_samples(
    queue: Mapping[str, Any],
    *,
    tenant_id: int,
    cluster_id: int,
    flavors: FlavorIndex,
    now: datetime,
) -> list[SampleRow]:
    """A ClusterQueue's status as samples: GPU use, reservation and borrowing per flavor;
    pending and admitted workloads."""
    status = queue.get("status") or {}
    rows: list[SampleRow] = []
    for key, used_metric in (
        ("flavorsUsage", Metric.QUOTA_USED),
        ("flavorsReservation", Metric.QUOTA_RESERVED),
    ):
        for flavor in status.get(key) or []:
            flavor_id = flavors.by_name.get(flavor.get("name") or "")
            total = borrowed = 0.0
            counted = False
            for resource in flavor.get("resources") or []:
                if is_gpu_resource(resource.get("name") or ""):
                    counted = True
                    total += _amount(resource.get("total", 0))
                    borrowed += _amount(resource.get("borrowed", 0))
            if not counted or flavor_id is None:
                continue
            rows.append(
                (now, used_metric, total, cluster_id, tenant_id, flavor_id, None, None, None, None)
            )
            if used_metric == Metric.QUOTA_USED:
                rows.append(
                    (
                        now,
                        Metric.QUOTA_BORROWED,
                        borrowed,
                        cluster_id,
                        tenant_id,
                        flavor_id,
                        None,
                        None,
                        None,
                        None,
                    )
                )
    for key, metric in (
        ("pendingWorkloads", Metric.WORKLOADS_PENDING),
        ("admittedWorkloads", Metric.WORKLOADS_ADMITTED),
    ):
        rows.append(
            (
                now,
                metric,
                float(status.get(key) or 0),
                cluster_id,
                tenant_id,
                None,
                None,
                None,
                None,
                None,
            )
        )
    return rows  # Metric members are ints


def summed_rows(rows: list[SampleRow]) -> list[SampleRow]:
    """Rows that differ only in their value (a tenant's queues: the team's and each capped
    person's) as one row with the sum, in first-seen order."""
    sums: dict[tuple[Any, ...], float] = {}
    for row in rows:
        key = (row[0], row[1], *row[3:])
        sums[key] = sums.get(key, 0.0) + float(row[2])
    return [(key[0], key[1], value, *key[2:]) for key, value in sums.items()]


@dataclass
class CollectOutcome:
    cluster: str
    reachable: bool
    samples: int = 0
    pods: int = 0
    workloads: int = 0
    message: str = ""
    prometheus: PrometheusOutcome | None = None


def collectable_cluster_ids() -> list[int]:
    """Clusters with a Kubernetes API to read, or a Prometheus."""
    return list(
        Cluster.objects.filter(
            Q(backend=SyncBackend.KUBERNETES) | Q(prometheus_source__enabled=True)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
        .distinct()
    )


def cluster_collect_by_id(*, cluster_id: int) -> CollectOutcome:
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return CollectOutcome(cluster=str(cluster_id), reachable=False, message="no such cluster")
    return cluster_collect(cluster=cluster)


def _list(backend: Backend, kind: Kind, selector: str) -> list[dict[str, Any]] | None:
    try:
        return backend.list_owned(kind, selector)
    except KindNotServed:
        return None


def cluster_collect(*, cluster: Cluster, now: datetime | None = None) -> CollectOutcome:
    """Read the cluster once and store what it says (samples, pods, workloads). Its
    Prometheus, where it has one, first: what that delivered (GPU requests, Kueue's queue
    use) is not read again from the objects; what it could not deliver is. An unreachable
    cluster stores nothing and says why."""
    now = now or timezone.now()
    from_prometheus = prometheus_collect(cluster=cluster, now=now)
    delivered = set(from_prometheus.figures) if from_prometheus is not None else set()
    if cluster.backend != SyncBackend.KUBERNETES:
        return CollectOutcome(
            cluster.name,
            from_prometheus is not None and from_prometheus.ok,
            samples=from_prometheus.samples if from_prometheus else 0,
            message=from_prometheus.message
            if from_prometheus
            else f"backend {cluster.backend}: nothing to read",
            prometheus=from_prometheus,
        )
    owned = Scope(cluster.name).selectors([])[0]
    try:
        with cluster_backend(cluster) as backend:
            pods = _list(backend, POD, "") or []
            kueue_polled = cluster.has_kueue and PrometheusFigure.KUEUE not in delivered
            queues = _list(backend, CLUSTER_QUEUE, owned) if kueue_polled else None
            workloads = _list(backend, WORKLOAD, "") if cluster.has_kueue else None
            quotas = _list(backend, RESOURCE_QUOTA, owned) or []
            fair = None
            if cluster.has_kueue and cluster.fair_sharing != FairSharing.NONE:
                fair = (
                    queues if queues is not None else _list(backend, CLUSTER_QUEUE, owned) or [],
                    _list(backend, LOCAL_QUEUE, owned) or [],
                )
    except ApplyError as exc:
        logger.warning("usage collection of %s failed: %s", cluster.name, exc.message)
        if cluster.has_kueue:
            workload_reading_record(cluster=cluster, now=now, error=exc.message)
        return CollectOutcome(cluster.name, False, message=exc.message, prometheus=from_prometheus)
    outcome = collected_store(
        cluster=cluster,
        pods=pods,
        queues=queues or [],
        workloads=workloads,
        quotas=quotas,
        now=now,
        allocated=PrometheusFigure.GPU_REQUESTS not in delivered,
    )
    fair_share_store(
        cluster=cluster,
        queues=fair[0] if fair else None,
        local_queues=fair[1] if fair else None,
        now=now,
    )
    outcome.prometheus = from_prometheus
    if from_prometheus is not None:
        outcome.samples += from_prometheus.samples
    return outcome


@transaction.atomic
def collected_store(
    *,
    cluster: Cluster,
    pods: Sequence[Mapping[str, Any]],
    queues: Sequence[Mapping[str, Any]],
    workloads: Sequence[Mapping[str, Any]] | None,
    quotas: Sequence[Mapping[str, Any]],
    now: datetime,
    allocated: bool = True,
) -> CollectOutcome:
    """Store one reading of a cluster (lists of objects as the API returned them).
    ``allocated``: whether the pods' GPU requests become samples (not where the cluster's
    Prometheus gave them)."""
    flavors = flavor_index(ResourceFlavor.objects.filter(cluster=cluster))
    ns_tenant = dict(Namespace.objects.values_list("name", "tenant_id"))
    slug_tenant = dict(Tenant.objects.values_list("slug", "pk"))
    rows: list[SampleRow] = []
    # Guaranteed and limit per GPU flavor, from the portal's quotas; zero use by default so a
    # tenant with nothing running still has a series.
    requested: dict[tuple[int, int | None], float] = {}
    quota_rows = Quota.objects.filter(quota_set__cluster=cluster).values_list(
        "quota_set__tenant_id", "flavor_id", "resource", "guaranteed", "limit"
    )
    tenant_id: int | None
    flavor_id: int | None
    for tenant_id, flavor_id, resource, guaranteed, limit in quota_rows:
        if not is_gpu_resource(resource):
            continue
        base = (cluster.pk, tenant_id, flavor_id, None, None, None, None)
        rows.append((now, Metric.QUOTA_GUARANTEED, float(guaranteed), *base))
        rows.append((now, Metric.QUOTA_LIMIT, float(limit), *base))
        requested[(tenant_id, flavor_id)] = 0.0
    # Pods.
    parsed = pod_rows(pods)
    workload_of = pod_workloads(parsed, workloads or [])
    pod_objects = []
    for pod in parsed:
        tenant_id = ns_tenant.get(pod.namespace)
        pod_objects.append(
            Pod(
                cluster_id=cluster.pk,
                uid=pod.uid,
                namespace=pod.namespace,
                name=pod.name,
                tenant_id=tenant_id,
                phase=pod.phase,
                node_name=pod.node_name,
                gpus=sum(pod.gpus.values()),
                workload_uid=workload_of.get(pod.uid, ""),
                seen_at=now,
            )
        )
        if tenant_id is None or pod.phase != "Running":
            continue
        for resource, amount in pod.gpus.items():
            key = (tenant_id, flavors.for_resource(resource, pod.node_selector))
            requested[key] = requested.get(key, 0.0) + amount
    for (tenant_id, flavor_id), amount in requested.items() if allocated else ():
        rows.append(
            (
                now,
                Metric.GPUS_ALLOCATED,
                amount,
                cluster.pk,
                tenant_id,
                flavor_id,
                None,
                None,
                None,
                None,
            )
        )
    if pod_objects:
        Pod.objects.bulk_create(
            pod_objects,
            update_conflicts=True,
            unique_fields=["uid"],
            update_fields=[
                "cluster_id",
                "namespace",
                "name",
                "tenant_id",
                "phase",
                "node_name",
                "gpus",
                "workload_uid",
                "seen_at",
            ],
            batch_size=1000,
        )
    Pod.objects.filter(cluster_id=cluster.pk, seen_at__lt=now).delete()
    # ClusterQueues (named and labelled by tenant). A tenant with capped people (R14) has one
    # more per person: the figures of the tenant's queues add up to the tenant's.
    queue_rows: list[SampleRow] = []
    for queue in queues:
        labels = (queue.get("metadata") or {}).get("labels") or {}
        tenant_id = slug_tenant.get(labels.get(LABEL_TENANT) or "")
        if tenant_id is not None:
            queue_rows.extend(
                queue_samples(
                    queue, tenant_id=tenant_id, cluster_id=cluster.pk, flavors=flavors, now=now
                )
            )
    rows.extend(summed_rows(queue_rows))
    for (tenant_id, flavor_id), amount in quota_gpu_used(quotas, ns_tenant, flavors).items():
        rows.append(
            (
                now,
                Metric.RESOURCEQUOTA_USED,
                amount,
                cluster.pk,
                tenant_id,
                flavor_id,
                None,
                None,
                None,
                None,
            )
        )
    written = samples_write(rows=rows, source=Source.CLUSTER_API)
    quota_readings_judge(cluster_id=cluster.pk, rows=rows)
    seen = (
        workloads_store(
            cluster=cluster,
            workloads=workloads,
            ns_tenant=ns_tenant,
            now=now,
            running=frozenset(
                workload_of[p.uid] for p in parsed if p.phase == "Running" and p.uid in workload_of
            ),
        )
        if workloads is not None
        else 0
    )
    if workloads is not None:
        workload_reading_record(cluster=cluster, now=now)
    return CollectOutcome(
        cluster.name, True, samples=written, pods=len(pod_objects), workloads=seen
    )


def workload_reading_record(*, cluster: Cluster, now: datetime, error: str = "") -> None:
    """Note how this reading of the cluster's Workloads went: a success clears the failure; a
    failure keeps when the failing began (the page's "since")."""
    reading, _ = WorkloadReading.objects.get_or_create(
        cluster=cluster, defaults={"last_attempt_at": now}
    )
    reading.last_attempt_at = now
    if error:
        reading.failing_since = reading.failing_since or now
        reading.last_error = error[:1000]
    else:
        reading.last_success_at, reading.failing_since, reading.last_error = now, None, ""
    reading.save()


WORKLOAD_UPDATE_FIELDS = [
    "tenant", "namespace", "name", "queue_name", "cluster_queue", "priority", "gpus", "flavors",
    "state", "created_at", "admitted_at", "finished_at", "evicted_at", "evictions",
    "preemptions", "queue_wait_s", "job_kind", "job_name", "submitter", "submitter_source",
    "resources", "active", "running", "pending_message", "pending_reason", "updated_at",
]  # fmt: skip


def workloads_store(
    *,
    cluster: Cluster,
    workloads: Sequence[Mapping[str, Any]],
    ns_tenant: Mapping[str, int],
    now: datetime,
    running: frozenset[str] = frozenset(),
) -> int:
    """Upsert one row per Workload. The first admission is kept (queue wait); an eviction the
    stats do not count yet (a newer ``Evicted`` condition) is counted; a workload gone from
    the cluster before finishing is closed as finished now. ``running``: the uids of
    Workloads one of whose pods runs."""
    parsed = [workload_fields(w) for w in workloads]
    parsed = [w for w in parsed if w["uid"] and w["created_at"]]
    known = {
        row["uid"]: row
        for row in Workload.objects.filter(
            cluster=cluster, uid__in=[w["uid"] for w in parsed]
        ).values("uid", "admitted_at", "evicted_at", "evictions", "preemptions")
    }
    objects = []
    for w in parsed:
        old = known.get(w["uid"])
        admitted_at = w["admitted_at"]
        evictions, preemptions = w["evictions"], w["preemptions"]
        if old is not None:
            if old["admitted_at"] is not None:
                admitted_at = (
                    old["admitted_at"]
                    if admitted_at is None
                    else min(admitted_at, old["admitted_at"])
                )
            newer = w["evicted_at"] is not None and (
                old["evicted_at"] is None or w["evicted_at"] > old["evicted_at"]
            )
            own_evictions = old["evictions"] + (1 if newer else 0)
            own_preemptions = old["preemptions"] + (
                1 if newer and w["evicted_reason"] == "Preempted" else 0
            )
            evictions = max(evictions, own_evictions)
            preemptions = max(preemptions, own_preemptions)
        elif w["evicted_at"] is not None and not evictions:
            evictions = 1
            preemptions = 1 if w["evicted_reason"] == "Preempted" else 0
        objects.append(
            Workload(
                cluster=cluster,
                uid=w["uid"],
                tenant_id=ns_tenant.get(w["namespace"]),
                namespace=w["namespace"],
                name=w["name"],
                queue_name=w["queue_name"],
                cluster_queue=w["cluster_queue"],
                priority=w["priority"],
                gpus=w["gpus"],
                flavors=w["flavors"],
                state=w["state"],
                created_at=w["created_at"],
                admitted_at=admitted_at,
                finished_at=w["finished_at"],
                evicted_at=w["evicted_at"],
                evictions=evictions,
                preemptions=preemptions,
                # Never negative: controllers' clocks differ (and the demo's notebook was
                # admitted before the stand-in stamped its creation).
                queue_wait_s=max((admitted_at - w["created_at"]).total_seconds(), 0.0)
                if admitted_at
                else None,
                job_kind=w["job_kind"],
                job_name=w["job_name"],
                submitter=w["submitter"],
                submitter_source=w["submitter_source"],
                resources=w["resources"],
                active=w["active"],
                running=w["uid"] in running or w["pods_ready"],
                pending_message=w["pending_message"],
                pending_reason=w["pending_reason"],
                updated_at=now,
            )
        )
    if objects:
        Workload.objects.bulk_create(
            objects,
            update_conflicts=True,
            unique_fields=["cluster", "uid"],
            update_fields=WORKLOAD_UPDATE_FIELDS,
            batch_size=1000,
        )
    Workload.objects.filter(cluster=cluster, finished_at__isnull=True, updated_at__lt=now).update(
        finished_at=now, state=WorkloadState.FINISHED, updated_at=now
    )
    return len(objects)


@dataclass
class FairShareRow:
    weighted_share: int | None = None
    consumed: dict[str, float] | None = None
    consumed_at: datetime | None = None


def fair_share_rows(
    queues: Iterable[Mapping[str, Any]],
    local_queues: Iterable[Mapping[str, Any]],
    *,
    slug_tenant: Mapping[str, int],
    ns_tenant: Mapping[str, int],
) -> dict[int, FairShareRow]:
    """Per tenant: its ClusterQueue's ``status.fairSharing.weightedShare`` and the sum over its
    LocalQueues of ``status.fairSharing.admissionFairSharingStatus.consumedResources`` (with
    the latest ``lastUpdate``). A queue of no known tenant is skipped."""
    rows: dict[int, FairShareRow] = {}
    for queue in queues:
        labels = (queue.get("metadata") or {}).get("labels") or {}
        tenant_id = slug_tenant.get(labels.get(LABEL_TENANT) or "")
        share = ((queue.get("status") or {}).get("fairSharing") or {}).get("weightedShare")
        if tenant_id is None:
            continue
        row = rows.setdefault(tenant_id, FairShareRow())
        if isinstance(share, int) and not isinstance(share, bool) and share >= 0:
            row.weighted_share = share
    for queue in local_queues:
        metadata = queue.get("metadata") or {}
        tenant_id = slug_tenant.get((metadata.get("labels") or {}).get(LABEL_TENANT) or "")
        if tenant_id is None:
            tenant_id = ns_tenant.get(metadata.get("namespace") or "")
        status = ((queue.get("status") or {}).get("fairSharing") or {}).get(
            "admissionFairSharingStatus"
        )
        if tenant_id is None or not isinstance(status, Mapping):
            continue
        row = rows.setdefault(tenant_id, FairShareRow())
        consumed = row.consumed if row.consumed is not None else {}
        for resource, amount in (status.get("consumedResources") or {}).items():
            consumed[str(resource)] = consumed.get(str(resource), 0.0) + _amount(amount)
        row.consumed = consumed
        when = _time(status.get("lastUpdate"))
        if when is not None and (row.consumed_at is None or when > row.consumed_at):
            row.consumed_at = when
    return rows


@transaction.atomic
def fair_share_store(
    *,
    cluster: Cluster,
    queues: Sequence[Mapping[str, Any]] | None,
    local_queues: Sequence[Mapping[str, Any]] | None,
    now: datetime,
) -> int:
    """Keep each tenant's fair-sharing standing on ``cluster`` as this reading found it (None:
    the portal asks for no fair sharing here, so none is kept); returns the rows kept."""
    if queues is None or local_queues is None:
        FairShareReading.objects.filter(cluster=cluster).delete()
        return 0
    rows = fair_share_rows(
        queues,
        local_queues,
        slug_tenant=dict(Tenant.objects.values_list("slug", "pk")),
        ns_tenant=dict(Namespace.objects.values_list("name", "tenant_id")),
    )
    FairShareReading.objects.bulk_create(
        [
            FairShareReading(
                tenant_id=tenant_id,
                cluster=cluster,
                weighted_share=row.weighted_share,
                consumed=row.consumed or {},
                consumed_at=row.consumed_at,
                read_at=now,
            )
            for tenant_id, row in rows.items()
        ],
        update_conflicts=True,
        unique_fields=["tenant", "cluster"],
        update_fields=["weighted_share", "consumed", "consumed_at", "read_at"],
    )
    FairShareReading.objects.filter(cluster=cluster).exclude(tenant_id__in=list(rows)).delete()
    return len(rows)
