"""Compile a cluster's tenants into the Kubernetes objects that enforce their quotas.

Pure: ClusterSpec and TenantSpec in, JSON-serialisable dicts out. Nothing here imports Django
or talks to a cluster, so the same function serves the applier, the manifest export, the
validation tests and the benchmark, and two runs on the same input give the same output.

Quantities are Kubernetes quantity strings in canonical form ("16", "500m", "64Gi"), rendered by
``quotas.quantity`` (standard library only) from Decimal base units, so a diff between the
desired and the live object never shows "64Gi" against 68719476736.

Design choices, each one also explained where it is made:

* Namespace ResourceQuotas cap what a tenant may *run*, so they hold the tenant's LIMIT
  (guaranteed plus borrowing), never only the guarantee: a tenant borrowing within its cohort
  must not have its pods refused by the quota Kueue knows nothing about.
* Enforcement (``quotas.kube.enforcement``). When Kueue manages everything, every namespace
  of a tenant gets the full tenant cap; the ClusterQueue, which selects all the tenant's
  namespaces, enforces the total across them, and a ValidatingAdmissionPolicy refuses the
  GPU workloads Kueue would not manage (an owner reference counts only when a controller
  makes the request). Under namespace split (and without Kueue) nothing else adds the
  namespaces up, so the cap is divided among them by their shares (the parts add up to the
  tenant cap exactly). In both modes a second policy refuses GPU device variables of the
  NVIDIA container toolkit in the tenants' pods, ConfigMaps and Secrets.
* Accelerators are denied unless granted: the quota holds ``requests.<gpu resource>: 0`` for
  every GPU/MIG resource of the cluster the tenant has no quota for.
* The NetworkPolicy denies all traffic except within the tenant's own namespaces and DNS,
  and lets in what the cluster names: its ingress controller's and monitoring's namespaces.
  Egress beyond that is the tenant's approved exceptions only (``quotas.kube.egress``).
  A tenant with a per-pod bandwidth cap (R27) has it as a label on its namespaces, and one
  cluster-wide ValidatingAdmissionPolicy refuses pods there without the bandwidth annotations
  or above the cap (``quotas.kube.bandwidth``).
* The LimitRange caps GPUs per container and per pod without giving any pod a GPU: the API
  server turns a bare ``max`` into a ``default``, so the GPU default is written as 0.
* PriorityClasses and Kueue WorkloadPriorityClasses form one ladder with the same names and
  values; the split quotas are scoped by its classes, and a tenant without the production grant
  gets a quota of 0 pods scoped to the production class. Kubernetes has no per-namespace default
  PriorityClass (and a LocalQueue has no priority), so the tenant's default priority is
  recorded on its namespaces, for clients and admission policies to apply.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import pairwise
from typing import Any, Final

import yaml

from quotas.kube import (
    bandwidth,
    egress,
    enforcement,
    fair_sharing,
    job_caps,
    names,
    person_caps,
    portal_access,
    storage,
    vgpu,
)
from quotas.kube.spec import (
    ANNOTATION_GENERATION,
    LABEL_CLUSTER,
    LABEL_MANAGED_BY,
    LABEL_TENANT,
    MANAGED_BY,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.kube.subjects import bindable_groups
from quotas.quantity import format_quantity, parse_resource_amount

__all__ = [
    "ANNOTATION_DEFAULT_PRIORITY_CLASS",
    "ANNOTATION_HIERARCHY_DEPTH",
    "LABEL_PURPOSE",
    "PRIORITY_LADDER",
    "PriorityLevel",
    "apply_order",
    "compile_cluster",
    "compile_cluster_wide",
    "compile_tenant",
    "object_key",
    "quantity",
    "sort_key",
]

KubeObject = dict[str, Any]

API_CORE: Final = "v1"
API_RBAC: Final = "rbac.authorization.k8s.io/v1"
API_NETWORKING: Final = "networking.k8s.io/v1"
API_SCHEDULING: Final = "scheduling.k8s.io/v1"
API_KUEUE: Final = "kueue.x-k8s.io/v1beta2"  # v1beta1 is deprecated; v1beta2 is the storage one
API_VOLCANO: Final = "scheduling.volcano.sh/v1beta1"
RBAC_GROUP: Final = "rbac.authorization.k8s.io"

LABEL_PURPOSE: Final = "portal.gpu-quota.io/purpose"
ANNOTATION_DISPLAY_NAME: Final = "portal.gpu-quota.io/display-name"
ANNOTATION_DEFAULT_PRIORITY_CLASS: Final = "portal.gpu-quota.io/default-priority-class"
# Depth of a Cohort or a Volcano group queue in its tree (0 = root): apply_order reads it so
# parents are created before their children, from the object alone.
ANNOTATION_HIERARCHY_DEPTH: Final = "portal.gpu-quota.io/hierarchy-depth"
# Set by the API server on every namespace and immutable: the selector a ClusterQueue uses.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

GPU_RESOURCE: Final = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX: Final = "nvidia.com/mig-"
CPU: Final = "cpu"
MEMORY: Final = "memory"
KUEUE_FLAVOR_KINDS: Final = frozenset({"gpu", "mig", vgpu.VGPU_KIND, "cpu"})
STORAGE_KIND: Final = "storage"
FLAVOR_KINDS: Final = KUEUE_FLAVOR_KINDS | {STORAGE_KIND}
TAINT_EFFECTS: Final = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})

# Kueue schema limits (ClusterQueue and ResourceFlavor CRDs, v0.19.2).
KUEUE_MAX_FLAVORS_PER_GROUP: Final = 64
KUEUE_MAX_COVERED_RESOURCES: Final = 64
KUEUE_MAX_NODE_LABELS: Final = 8
KUEUE_MAX_NODE_TAINTS: Final = 8
VOLCANO_MAX_WEIGHT: Final = 65535
MAX_HIERARCHY_DEPTH: Final = 99  # apply_order leaves room for 100 levels per bucket

# LimitRange: derived per-pod GPU cap, and the requests a container without any gets (the
# namespace quota on requests.cpu/memory refuses pods that do not declare them).
DERIVED_MAX_GPUS_PER_POD: Final = 8
DEFAULT_CPU_REQUEST: Final = Decimal("0.1")
DEFAULT_MEMORY_REQUEST: Final = Decimal(256 * 1024**2)

_MILLI: Final = Decimal("0.001")  # the finest cpu amount Kubernetes keeps (1m)
_MEBI: Final = Decimal(1024**2)


@dataclass(frozen=True)
class PriorityLevel:
    """One rung of the portal's priority ladder, as a PriorityClass and a Kueue
    WorkloadPriorityClass of the same name and value."""

    key: str  # TenantSpec.default_priority
    name: str
    value: int
    preemption_policy: str
    description: str


PRIORITY_LADDER: Final = (
    PriorityLevel(
        "production",
        f"{names.PREFIX}-production",
        100000,
        "PreemptLowerPriority",
        "Production inference: may preempt default and experiment work.",
    ),
    PriorityLevel(
        "default",
        f"{names.PREFIX}-default",
        1000,
        "PreemptLowerPriority",
        "Regular training and batch work.",
    ),
    PriorityLevel(
        "experiment",
        f"{names.PREFIX}-experiment",
        100,
        "Never",
        "Experiments: run on what is idle and never preempt anything.",
    ),
)
_PRIORITY_BY_KEY: Final = {level.key: level for level in PRIORITY_LADDER}
# The inference quota is scoped In these; the batch quota NotIn these: every other pod, those
# without a class included.
INFERENCE_PRIORITY_CLASSES: Final = (_PRIORITY_BY_KEY["production"].name,)

# Apply order buckets; Cohorts and Volcano group queues add their depth within the bucket.
_ORDER_NAMESPACE: Final = 0
_ORDER_CLUSTER_WIDE: Final = 1000
_ORDER_ADMISSION_POLICY: Final = 1050
_ORDER_ADMISSION_BINDING: Final = 1060
_ORDER_RESOURCE_FLAVOR: Final = 1100
_ORDER_COHORT: Final = 1200
_ORDER_CONFIGMAP: Final = 1300
_ORDER_VOLCANO_GROUP: Final = 1400
_ORDER_LIMIT_RANGE: Final = 2000  # before the quota, so pods never meet a quota without defaults
_ORDER_RESOURCE_QUOTA: Final = 2010
_ORDER_NETWORK_POLICY: Final = 2020
_ORDER_SERVICE_ACCOUNT: Final = 2030
_ORDER_ROLE_BINDING: Final = 2040
_ORDER_CLUSTER_QUEUE: Final = 3000
_ORDER_VOLCANO_QUEUE: Final = 3500
_ORDER_LOCAL_QUEUE: Final = 4000
_ORDER_UNKNOWN: Final = 9000
_ORDER_BY_KIND: Final = {
    (API_CORE, "Namespace"): _ORDER_NAMESPACE,
    (API_SCHEDULING, "PriorityClass"): _ORDER_CLUSTER_WIDE,
    (API_KUEUE, "WorkloadPriorityClass"): _ORDER_CLUSTER_WIDE,
    (enforcement.API_ADMISSION, "ValidatingAdmissionPolicy"): _ORDER_ADMISSION_POLICY,
    (enforcement.API_ADMISSION, "ValidatingAdmissionPolicyBinding"): _ORDER_ADMISSION_BINDING,
    (API_KUEUE, "ResourceFlavor"): _ORDER_RESOURCE_FLAVOR,
    (API_KUEUE, "Cohort"): _ORDER_COHORT,
    (API_CORE, "ConfigMap"): _ORDER_CONFIGMAP,
    (API_CORE, "LimitRange"): _ORDER_LIMIT_RANGE,
    (API_CORE, "ResourceQuota"): _ORDER_RESOURCE_QUOTA,
    (API_NETWORKING, "NetworkPolicy"): _ORDER_NETWORK_POLICY,
    (API_CORE, "ServiceAccount"): _ORDER_SERVICE_ACCOUNT,
    (API_RBAC, "RoleBinding"): _ORDER_ROLE_BINDING,
    (API_KUEUE, "ClusterQueue"): _ORDER_CLUSTER_QUEUE,
    (API_KUEUE, "LocalQueue"): _ORDER_LOCAL_QUEUE,
}


# --- public API -------------------------------------------------------------------------------


def object_key(obj: KubeObject) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace or "", name): what identifies an object in a cluster."""
    metadata = obj.get("metadata", {})
    return (obj["apiVersion"], obj["kind"], metadata.get("namespace", ""), metadata["name"])


def apply_order(obj: KubeObject) -> int:
    """Where obj goes in an apply: Namespaces first, then cluster-wide objects (priorities,
    flavors, cohorts parents first), then per-namespace core objects, then ClusterQueues, Volcano
    leaf queues and LocalQueues. Deleting goes in the reverse order."""
    kind_key = (obj["apiVersion"], obj["kind"])
    metadata = obj.get("metadata", {})
    depth = int(metadata.get("annotations", {}).get(ANNOTATION_HIERARCHY_DEPTH, "0"))
    if kind_key == (API_VOLCANO, "Queue"):
        # A tenant's own (leaf) queue follows every group queue, whatever the depth.
        if LABEL_TENANT in metadata.get("labels", {}):
            return _ORDER_VOLCANO_QUEUE
        return _ORDER_VOLCANO_GROUP + depth
    order = _ORDER_BY_KIND.get(kind_key, _ORDER_UNKNOWN)
    return order + depth if kind_key == (API_KUEUE, "Cohort") else order


def sort_key(obj: KubeObject) -> tuple[int, str, str, str, str]:
    """The order compile_* return objects in: apply order, then object_key (stable)."""
    return (apply_order(obj), *object_key(obj))


def compile_tenant(cluster: ClusterSpec, tenant: TenantSpec) -> list[KubeObject]:
    """Every object one tenant owns on one cluster: per namespace a Namespace, the portal's own
    RoleBinding (``portal_access.namespace_role_binding``), ResourceQuotas, a LimitRange, the
    deny-cross-tenant NetworkPolicy, a ServiceAccount, RoleBindings and (with Kueue) the
    ``default`` LocalQueue; once per tenant its ClusterQueue and/or Volcano Queue.

    Reads only the cluster and this tenant, so one tenant can be recompiled and applied alone.
    """
    # vGPU flavors HAMi cannot hold get nothing (quotas.kube.vgpu.usable).
    cluster, (tenant,) = vgpu.usable(cluster, [tenant])
    context = _TenantContext.build(cluster, tenant)
    namespaces = context.namespaces
    objects: list[KubeObject] = []
    shares = _namespace_shares(context)
    for index, namespace in enumerate(namespaces):
        share = _Share(shares=shares, index=index)
        objects.append(_namespace(context, namespace.name, namespace.purpose))
        # The portal's own writes in the namespace (written first, as the binder: the applier).
        objects.append(
            portal_access.namespace_role_binding(
                context.metadata(portal_access.ROLE_BINDING, namespace.name)
            )
        )
        objects.extend(_resource_quotas(context, namespace.name, share))
        limit_range = _limit_range(context, namespace.name)
        if limit_range is not None:
            objects.append(limit_range)
        objects.append(_network_policy(context, namespace.name))
        objects.append(_service_account(context, namespace.name))
        objects.extend(_role_bindings(context, namespace.name))
        if cluster.has_kueue and not tenant.department:
            objects.append(_local_queue(context, namespace.name))
    # A department's quota is its Cohort's (and Volcano group queue's), compiled cluster-wide:
    # a queue of its own would count the same GPUs twice.
    if cluster.has_kueue and namespaces and not tenant.department:
        objects.append(_cluster_queue(context))
    if cluster.has_volcano and not tenant.department:
        objects.append(_volcano_queue(context))
    if tenant.people and cluster.has_kueue:
        # Per-person caps (R14): the tenant's own Cohort, a ClusterQueue per person.
        objects = person_caps.compile_people(
            tenant=tenant, cohort=context.cohort, objects=objects, metadata=context.metadata
        )
    return sorted(objects, key=sort_key)


def compile_cluster_wide(cluster: ClusterSpec, tenants: Sequence[TenantSpec]) -> list[KubeObject]:
    """Cluster-scoped objects no single tenant owns: the PriorityClass ladder; with Kueue the
    WorkloadPriorityClasses, a ResourceFlavor per GPU/MIG/CPU flavor and the Cohort tree (the
    root cohort, one per parent tenant, one per explicit cohort); with Volcano hierarchy the
    group queues mirroring that tree; the device plugin's time-slicing ConfigMap; when a tenant
    has a per-pod bandwidth cap (R27), the admission policy that holds pods to it."""
    _check_cluster(cluster)
    # vGPU flavors HAMi cannot hold get nothing (quotas.kube.vgpu.usable).
    cluster, pruned = vgpu.usable(cluster, tenants)
    tenants = _sorted_tenants(pruned)
    objects: list[KubeObject] = [_priority_class(cluster, level) for level in PRIORITY_LADDER]
    tree = _CohortTree.build(cluster, tenants)
    if cluster.has_kueue:
        objects.extend(_workload_priority_class(cluster, level) for level in PRIORITY_LADDER)
        if cluster.enforcement == enforcement.ENFORCEMENT_KUEUE:
            objects.extend(
                enforcement.admission_policy(
                    cluster=cluster.name,
                    kubernetes_version=cluster.kubernetes_version,
                    config=cluster.kueue_config,
                    accelerators=_accelerators(cluster),
                    trusted_controllers=cluster.trusted_controllers,
                )
            )
        objects.extend(
            _resource_flavor(cluster, flavor)
            for flavor in cluster.flavors
            if flavor.kind in KUEUE_FLAVOR_KINDS
        )
        # The flavor the running-job caps count admitted pods on (quotas.kube.job_caps).
        capped = [tenant.max_running_jobs for tenant in tenants if not tenant.department]
        if job_caps.needs_slots_flavor(capped):
            objects.append(_job_slots_flavor(cluster))
        departments = _departments(tenants)
        below = _subtree_guarantees(cluster, tree, tenants) if departments else {}
        objects.extend(
            _cohort(cluster, tree, name, below.get(name, {}), departments)
            for name in sorted(tree.parent)
        )
    # Both modes: pods may not pick GPUs through the container toolkit's variables (from 1.30).
    objects.extend(
        enforcement.device_env_policies(
            cluster=cluster.name,
            kubernetes_version=cluster.kubernetes_version,
            accelerators=_accelerators(cluster),
        )
    )
    if cluster.has_volcano and cluster.volcano_hierarchy:
        objects.extend(_volcano_group_queues(cluster, tree, tenants))
    # R14: one policy keeps each capped person to their own queue, from namespace annotations.
    if cluster.has_kueue and any(tenant.people for tenant in tenants):
        objects.extend(
            person_caps.admission_policy(
                cluster=cluster.name,
                kueue_account=enforcement.kueue_account(cluster.kueue_config),
                trusted_controllers=cluster.trusted_controllers,
            )
        )
    # R27: one policy holds the pods of every capped tenant's namespaces to its label.
    if any(tenant.pod_bandwidth_max for tenant in tenants):
        objects.extend(
            bandwidth.admission_policy(
                cluster=cluster.name, kubernetes_version=cluster.kubernetes_version
            )
        )
    # vGPU quotas: pods held to HAMi's rules in the namespaces that have one.
    if any(_vgpu_memory_mib(cluster, tenant) is not None for tenant in tenants):
        objects.extend(
            vgpu.admission_policy(
                cluster=cluster.name, kubernetes_version=cluster.kubernetes_version
            )
        )
    time_slicing = _time_slicing_configmap(cluster)
    if time_slicing is not None:
        objects.append(time_slicing)
    return sorted(objects, key=sort_key)


def compile_cluster(
    cluster: ClusterSpec,
    tenants: Sequence[TenantSpec],
    *,
    tenant_objects: Callable[[ClusterSpec, TenantSpec], list[KubeObject]] | None = None,
) -> list[KubeObject]:
    """Everything for one cluster, in apply order: the cluster-wide objects and every tenant's.
    Raises ValueError when two objects would have the same identity (for instance two tenants
    claiming one namespace), which a plain apply would resolve by silently overwriting.

    ``tenant_objects`` stands in for ``compile_tenant`` (the reconcile's memo of last pass's
    objects, ``quotas.kube.memo.CompileMemo``): it must give what ``compile_tenant`` gives."""
    objects = compile_cluster_wide(cluster, tenants)
    one = tenant_objects or compile_tenant
    for tenant in _sorted_tenants(tenants):
        objects.extend(one(cluster, tenant))
    seen: dict[tuple[str, str, str, str], str] = {}
    for obj in objects:
        key = object_key(obj)
        owner = obj["metadata"].get("labels", {}).get(LABEL_TENANT, "the cluster")
        if key in seen:
            raise ValueError(
                f"{key[1]} {key[2] + '/' if key[2] else ''}{key[3]} is compiled twice "
                f"(for {seen[key]} and for {owner}); namespaces and names must be unique"
            )
        seen[key] = owner
    return sorted(objects, key=sort_key)


# --- quantities -------------------------------------------------------------------------------


def quantity(amount: Decimal | int, resource: str) -> str:
    """Canonical Kubernetes quantity text for amount of resource (base units): cores as "500m"
    or "16", bytes with the largest exact binary suffix ("64Gi"), counts as whole numbers.
    Refuses what Kubernetes would round (fractional GPUs or bytes) or what is negative.
    HAMi's GPU memory (``nvidia.com/gpumem``, stored in bytes) is written in whole MiB, a
    plain count, as HAMi and Kueue read it (``quotas.kube.vgpu.pushed_amount``)."""
    value = parse_resource_amount(resource, amount)
    pushed = vgpu.pushed_amount(value, resource)
    if pushed is not value:
        return format_quantity(pushed, vgpu.GPU)
    return format_quantity(value, resource)


@dataclass(frozen=True)
class _Share:
    """The part of a tenant-wide amount one namespace's ResourceQuota holds: all of it
    (``shares`` empty: Kueue adds the namespaces up), or its proportion of it."""

    shares: tuple[Decimal, ...]
    index: int

    def of(self, total: Decimal, resource: str) -> Decimal:
        if not self.shares:
            return total
        # Whole units: millicores of cpu, mebibytes of memory and storage (a quota reads
        # "734003Mi", not "769658139443"), one of anything else; the parts add up to the total.
        name = resource.removeprefix("requests.").removeprefix("limits.")
        step = _MILLI if name == CPU else Decimal(1)
        if name == MEMORY or resource.endswith("storage"):
            step = _MEBI if total % _MEBI == 0 else Decimal(1)
        if name == vgpu.GPUMEM:  # HAMi counts whole MiB: each part is a whole MiB
            step = _MEBI
        return enforcement.split_shares(total, self.shares, step=step)[self.index]


def _count_shares(context: _TenantContext) -> tuple[Decimal, ...]:
    """Each namespace's weight in a tenant-wide object count that must hold whatever the
    enforcement mode: the namespaces' shares where every one has one, else even; () for one
    namespace."""
    namespaces = context.namespaces
    if len(namespaces) <= 1:
        return ()
    given = [namespace.share for namespace in namespaces]
    if all(share is not None and share > 0 for share in given):
        return tuple(Decimal(share) for share in given if share is not None)
    return tuple(Decimal(1) for _ in namespaces)


def _namespace_shares(context: _TenantContext) -> tuple[Decimal, ...]:
    """Each namespace's weight in the tenant's limit (its percentage, or 1 each for an even
    split), in name order; () when every
    namespace holds the whole limit (Kueue manages everything and adds them up)."""
    cluster, namespaces = context.cluster, context.namespaces
    if cluster.has_kueue and cluster.enforcement == enforcement.ENFORCEMENT_KUEUE:
        return ()
    if len(namespaces) <= 1:
        return ()
    given = [namespace.share for namespace in namespaces]
    if all(share is None for share in given):
        return tuple(Decimal(1) for _ in namespaces)  # even
    shares: list[Decimal] = []
    for namespace in namespaces:
        if namespace.share is None:
            raise ValueError(
                f"tenant {context.tenant.slug!r}: namespace {namespace.name!r} has no quota "
                "share while others have one; give every namespace a share, or none"
            )
        shares.append(namespace.share)
    total = sum(shares, Decimal(0))
    if total != 100:
        raise ValueError(
            f"tenant {context.tenant.slug!r}: the namespaces' quota shares add up to "
            f"{total}%, not 100%"
        )
    return tuple(shares)


def _accelerators(cluster: ClusterSpec) -> list[str]:
    return sorted(
        {
            resource
            for flavor in cluster.flavors
            if flavor.kind in KUEUE_FLAVOR_KINDS
            for resource in flavor.capacity
            if _is_accelerator(resource)
        }
    )


# --- tenant data ------------------------------------------------------------------------------


def _is_accelerator(resource: str) -> bool:
    return resource not in (CPU, MEMORY)


def _flavor_index(cluster: ClusterSpec) -> dict[str, FlavorSpec]:
    index: dict[str, FlavorSpec] = {}
    for flavor in cluster.flavors:
        names.dns1123_label(flavor.name, what="flavor name")
        if flavor.kind not in FLAVOR_KINDS:
            raise ValueError(
                f"flavor {flavor.name!r} has kind {flavor.kind!r}; expected one of "
                f"{', '.join(sorted(FLAVOR_KINDS))}"
            )
        if flavor.name in index:
            raise ValueError(f"cluster {cluster.name!r} lists flavor {flavor.name!r} twice")
        if flavor.name == job_caps.JOB_SLOTS_FLAVOR:
            raise ValueError(
                f"flavor name {flavor.name!r} is the portal's own (the running-job caps)"
            )
        index[flavor.name] = flavor
    return index


def _check_cluster(cluster: ClusterSpec) -> dict[str, FlavorSpec]:
    """Check the cluster's own names; return its flavors by name."""
    names.dns1123_label(cluster.name, what="cluster name")
    if cluster.enforcement not in (enforcement.ENFORCEMENT_KUEUE, enforcement.ENFORCEMENT_SPLIT):
        raise ValueError(
            f"cluster {cluster.name!r} has enforcement {cluster.enforcement!r}; expected "
            f"{enforcement.ENFORCEMENT_KUEUE!r} or {enforcement.ENFORCEMENT_SPLIT!r}"
        )
    names.label_value(cluster.name, what="cluster name")
    names.dns1123_label(cluster.root_cohort, what="root cohort")
    return _flavor_index(cluster)


def _sorted_tenants(tenants: Iterable[TenantSpec]) -> list[TenantSpec]:
    ordered = sorted(tenants, key=lambda tenant: tenant.slug)
    for previous, current in pairwise(ordered):
        if previous.slug == current.slug:
            raise ValueError(f"tenant {current.slug!r} is listed twice")
    return ordered


@dataclass(frozen=True)
class _TenantContext:
    """A tenant's quotas checked and indexed once, for every object built from them."""

    cluster: ClusterSpec
    tenant: TenantSpec
    flavors: dict[str, FlavorSpec]
    namespaces: tuple[NamespaceSpec, ...]  # sorted by name
    items: dict[tuple[str, str], QuotaSpec]  # (flavor, resource) -> item, compute flavors
    storage_items: tuple[QuotaSpec, ...]  # on storage flavors
    priority: PriorityLevel
    cohort: str

    @classmethod
    def build(cls, cluster: ClusterSpec, tenant: TenantSpec) -> _TenantContext:
        flavors = _check_cluster(cluster)
        names.dns1123_label(tenant.slug, what="tenant slug")
        if tenant.default_priority not in _PRIORITY_BY_KEY:
            raise ValueError(
                f"tenant {tenant.slug!r} has default_priority {tenant.default_priority!r}; "
                f"expected one of {', '.join(_PRIORITY_BY_KEY)}"
            )
        if tenant.parent is not None and tenant.parent == tenant.slug:
            raise ValueError(f"tenant {tenant.slug!r} is its own parent")
        namespaces = tuple(sorted(tenant.namespaces, key=lambda namespace: namespace.name))
        for previous, current in pairwise(namespaces):
            if previous.name == current.name:
                raise ValueError(f"tenant {tenant.slug!r} lists namespace {current.name!r} twice")
        for namespace in namespaces:
            names.dns1123_label(namespace.name, what=f"namespace of tenant {tenant.slug!r}")
            names.label_value(namespace.purpose, what=f"purpose of namespace {namespace.name!r}")
        items: dict[tuple[str, str], QuotaSpec] = {}
        storage_items: list[QuotaSpec] = []
        for item in tenant.quotas:
            flavor = flavors.get(item.flavor)
            where = f"tenant {tenant.slug!r}, flavor {item.flavor!r}, resource {item.resource!r}"
            if flavor is None:
                raise ValueError(f"{where}: the cluster {cluster.name!r} has no such flavor")
            _check_item(item, where)
            if flavor.kind == STORAGE_KIND:
                storage_items.append(item)
                continue
            if (item.flavor, item.resource) in items:
                raise ValueError(f"{where}: the quota is listed twice")
            items[(item.flavor, item.resource)] = item
        return cls(
            cluster=cluster,
            tenant=tenant,
            flavors=flavors,
            namespaces=namespaces,
            items=items,
            storage_items=tuple(storage_items),
            priority=_PRIORITY_BY_KEY[tenant.default_priority],
            cohort=names.tenant_cohort(cluster, tenant),
        )

    def totals(self, which: Callable[[QuotaSpec], Decimal]) -> dict[str, Decimal]:
        """Per resource name, the sum over compute flavors of which(item)."""
        sums: dict[str, Decimal] = defaultdict(Decimal)
        for (_flavor, resource), item in self.items.items():
            sums[resource] += which(item)
        return dict(sums)

    def largest(self, resource: str) -> Decimal | None:
        """The largest limit on one flavor: a pod runs on one flavor's nodes."""
        limits = [item.limit for (_f, r), item in self.items.items() if r == resource]
        return max(limits) if limits else None

    def labels(self) -> dict[str, str]:
        return {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_CLUSTER: self.cluster.name,
            LABEL_TENANT: self.tenant.slug,
        }

    def metadata(
        self,
        name: str,
        namespace: str | None = None,
        *,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        all_annotations = {ANNOTATION_GENERATION: str(self.tenant.generation)}
        all_annotations.update(annotations or {})
        return _metadata(
            name,
            namespace,
            labels={**self.labels(), **(labels or {})},
            annotations=all_annotations,
        )


def _check_item(item: QuotaSpec, where: str) -> None:
    # quantity() refuses negative and fractional amounts where Kubernetes would round them.
    quantity(item.guaranteed, item.resource)
    quantity(item.limit, item.resource)
    if item.limit < item.guaranteed:
        raise ValueError(
            f"{where}: limit {item.limit} is below guaranteed {item.guaranteed} "
            "(Kueue's borrowingLimit = limit - guaranteed cannot be negative)"
        )
    if item.lending_limit is not None:
        quantity(item.lending_limit, item.resource)
        if item.lending_limit > item.guaranteed:
            raise ValueError(
                f"{where}: lending_limit {item.lending_limit} is above guaranteed "
                f"{item.guaranteed}; a ClusterQueue can lend only its nominal quota"
            )


def _metadata(
    name: str,
    namespace: str | None = None,
    *,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(sorted(labels.items()))
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    return metadata


def _cluster_labels(cluster: ClusterSpec) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: cluster.name}


def _resources(amounts: dict[str, Decimal]) -> dict[str, str]:
    return {resource: quantity(amounts[resource], resource) for resource in sorted(amounts)}


# --- per-namespace objects --------------------------------------------------------------------


def _namespace(context: _TenantContext, name: str, purpose: str) -> KubeObject:
    # kubernetes.io/metadata.name is set (and kept) by the API server; it is not written here.
    annotations = {ANNOTATION_DEFAULT_PRIORITY_CLASS: context.priority.name}
    if context.tenant.display_name:
        annotations[ANNOTATION_DISPLAY_NAME] = context.tenant.display_name
    labels = {LABEL_PURPOSE: purpose}
    memory = _vgpu_memory_mib(context.cluster, context.tenant)
    if memory is not None:
        # The vGPU admission policy (quotas.kube.vgpu) reads one GPU's memory from this label.
        labels[vgpu.LABEL_GPU_MEMORY_MIB] = str(memory)
    if context.tenant.pod_bandwidth_max:
        # R27: the admission policy (quotas.kube.bandwidth) reads the cap from this label.
        labels[bandwidth.LABEL_POD_BANDWIDTH_MAX] = names.label_value(
            context.tenant.pod_bandwidth_max, what=f"pod bandwidth cap of {context.tenant.slug!r}"
        )
    return {
        "apiVersion": API_CORE,
        "kind": "Namespace",
        "metadata": context.metadata(name, labels=labels, annotations=annotations),
    }


def _vgpu_memory_mib(cluster: ClusterSpec, tenant: TenantSpec) -> int | None:
    """One GPU's memory (MiB, the largest) among the vGPU flavors ``tenant`` has a quota line
    on; None without one (a cluster already without the flavors HAMi cannot hold)."""
    quoted = {item.flavor for item in tenant.quotas}
    return vgpu.gpu_memory_mib([f for f in cluster.flavors if f.name in quoted])


def _compute_hard(context: _TenantContext, amounts: dict[str, Decimal]) -> dict[str, Decimal]:
    """``requests.<resource>`` keys for compute resources, never ``limits.`` or bare names:
    extended resources (nvidia.com/*) accept only the ``requests.`` prefix in a quota, and
    ``limits.cpu``/``limits.memory`` are left out because the LimitRange's default limit (the
    per-pod cap, which the API server would fill in from ``max`` anyway) would charge every
    container the whole cap."""
    hard: dict[str, Decimal] = {}
    # Accelerators are denied unless granted: every GPU/MIG resource of the cluster gets a key,
    # 0 where the tenant has no quota, so a pod outside Kueue cannot take GPUs unquoted.
    for flavor in context.cluster.flavors:
        if flavor.kind in KUEUE_FLAVOR_KINDS:
            for resource in flavor.capacity:
                if _is_accelerator(resource):
                    hard[f"requests.{resource}"] = Decimal(0)
    for resource, amount in amounts.items():
        hard[f"requests.{resource}"] = amount
    return hard


def _resource_quota(
    context: _TenantContext,
    namespace: str,
    name: str,
    hard: dict[str, Decimal],
    share: _Share,
    scope_values: Sequence[str] = (),
    scope_operator: str = "In",
    exact: Mapping[str, Decimal] | None = None,
) -> KubeObject:
    """``hard`` is tenant-wide (this namespace holds ``share`` of it); ``exact`` is this
    namespace's already."""
    amounts = {key: share.of(hard[key], key) for key in hard}
    amounts.update(exact or {})
    spec: dict[str, Any] = {"hard": {key: quantity(amounts[key], key) for key in sorted(amounts)}}
    if scope_values:
        spec["scopeSelector"] = {
            "matchExpressions": [
                {
                    "scopeName": "PriorityClass",
                    "operator": scope_operator,
                    "values": list(scope_values),
                }
            ]
        }
    return {
        "apiVersion": API_CORE,
        "kind": "ResourceQuota",
        "metadata": context.metadata(name, namespace),
        "spec": spec,
    }


def _resource_quotas(context: _TenantContext, namespace: str, share: _Share) -> list[KubeObject]:
    """The namespace's ResourceQuotas.

    The unscoped quota holds the tenant's LIMIT per resource (summed over flavors): it caps what
    the tenant may run, borrowing included, and it also catches pods with no PriorityClass. It
    holds the storage and object-count keys too. With ``split_by_priority`` two more quotas,
    scoped by PriorityClass, hold compute keys only (the API server refuses storage and count
    keys under that scope): inference (the production class) up to the GUARANTEED amount, since
    production serving must not depend on borrowed capacity its cohort can reclaim; batch
    (every pod that is not production: the default and experiment classes, any other class,
    and pods with none) up to the limit. Batch is scoped ``NotIn [production]``: the API
    server's quota evaluator matches a PriorityClass scope against the pod's class name, ""
    when it has none, so a pod without a class is counted as batch and cannot spend the
    GPUs set aside for inference. With ``inference_gpus`` the whole GPUs
    are split instead: that many for inference, the rest of the limit for batch (R17).

    A tenant without the production grant gets a quota of 0 pods scoped to the production
    class (R15): the API server refuses such a pod with "exceeded quota".
    """
    tenant = context.tenant
    limits = _compute_hard(context, context.totals(lambda item: item.limit))
    hard: dict[str, Decimal] = dict(limits)
    if _vgpu_memory_mib(context.cluster, tenant) is not None:
        # HAMi's extended quota, counted per device by its scheduler (quotas.kube.vgpu).
        hard.update(vgpu.hami_keys(limits))
    if tenant.storage_bytes is not None:
        hard["requests.storage"] = tenant.storage_bytes
    # R3: the tenant's limit per storage class its quota names, 0 on every other class.
    hard.update(storage.storage_class_hard(context.cluster, context.flavors, context.storage_items))
    if tenant.max_pvcs is not None:
        hard["persistentvolumeclaims"] = Decimal(tenant.max_pvcs)
    if tenant.max_pods is not None:
        hard["pods"] = Decimal(tenant.max_pods)
    # Every job Kueue manages, queued or running, is one Workload: the count caps running plus
    # queued (quotas.kube.job_caps), divided among the namespaces even under Kueue enforcement.
    # The running cap is the ClusterQueue's (_cluster_queue).
    counts = job_caps.quota_hard(
        has_kueue=context.cluster.has_kueue,
        max_running_jobs=tenant.max_running_jobs,
        max_queued_jobs=tenant.max_queued_jobs,
        shares=share.shares or _count_shares(context),
        index=share.index,
    )
    quotas = []
    if hard or counts:
        quotas.append(
            _resource_quota(context, namespace, names.RESOURCE_QUOTA, hard, share, exact=counts)
        )
    if (tenant.split_by_priority or tenant.inference_gpus is not None) and limits:
        guaranteed = _compute_hard(context, context.totals(lambda item: item.guaranteed))
        batch = dict(limits)
        if tenant.inference_gpus is not None:
            # R17 as the tenant asked: its whole GPUs split between the two classes.
            gpus = limits.get(f"requests.{GPU_RESOURCE}", Decimal(0))
            inference_gpus = min(Decimal(tenant.inference_gpus), gpus)
            guaranteed[f"requests.{GPU_RESOURCE}"] = inference_gpus
            batch[f"requests.{GPU_RESOURCE}"] = gpus - inference_gpus
        quotas.append(
            _resource_quota(
                context,
                namespace,
                names.RESOURCE_QUOTA_INFERENCE,
                guaranteed,
                share,
                INFERENCE_PRIORITY_CLASSES,
            )
        )
        quotas.append(
            _resource_quota(
                context,
                namespace,
                names.RESOURCE_QUOTA_BATCH,
                batch,
                share,
                INFERENCE_PRIORITY_CLASSES,
                scope_operator="NotIn",
            )
        )
    refused_classes = storage.refused_volume_attributes_classes(
        context.cluster, context.flavors, context.storage_items
    )
    if refused_classes:
        # R3: no claims of a VolumeAttributesClass the tenant's quota does not name.
        vac_quota = _resource_quota(
            context,
            namespace,
            storage.RESOURCE_QUOTA_VOLUME_ATTRIBUTES,
            {storage.PERSISTENT_VOLUME_CLAIMS: Decimal(0)},
            share,
        )
        vac_quota["spec"]["scopeSelector"] = storage.volume_attributes_scope(refused_classes)
        quotas.append(vac_quota)
    if not tenant.production_priority_allowed:
        quotas.append(
            _resource_quota(
                context,
                namespace,
                names.RESOURCE_QUOTA_NO_PRODUCTION,
                {"pods": Decimal(0)},
                share,
                (_PRIORITY_BY_KEY["production"].name,),
            )
        )
    return quotas


def _limit_range(context: _TenantContext, namespace: str) -> KubeObject | None:
    """Per-container and per-pod caps (R16).

    Two API-server behaviours shape this object. First, for a Container limit the server fills
    in a missing ``default`` from ``max`` and a missing ``defaultRequest`` from ``default``
    (SetDefaults_LimitRangeItem): a ``max`` of 8 GPUs alone would inject 8 GPUs into every
    container, CPU-only ones included. So every capped resource gets an explicit default; for
    GPUs that default is 0, which the scheduler and the device plugin ignore, so no pod is given
    a GPU it did not ask for. Second, a Pod ``max`` refuses any pod whose containers declare no
    limit for that resource ("No limit is specified"); the zero GPU default gives every
    container one. CPU and memory are capped per container only: a per-pod cap would refuse pods
    whose containers take the default limit (it is the cap itself) more than once, sidecars
    included.
    """
    tenant = context.tenant
    max_cpu = tenant.max_cpu_per_pod
    if max_cpu is None:
        max_cpu = context.largest(CPU)
    max_memory = tenant.max_memory_per_pod
    if max_memory is None:
        max_memory = context.largest(MEMORY)
    max_gpus: Decimal | None = None
    if tenant.max_gpus_per_pod is not None:
        max_gpus = Decimal(tenant.max_gpus_per_pod)
    elif (largest_gpus := context.largest(GPU_RESOURCE)) is not None:
        max_gpus = min(Decimal(DERIVED_MAX_GPUS_PER_POD), largest_gpus)

    container_max: dict[str, Decimal] = {}
    container_default: dict[str, Decimal] = {}
    container_request: dict[str, Decimal] = {}
    if max_cpu is not None:
        container_max[CPU] = container_default[CPU] = max_cpu
        container_request[CPU] = min(DEFAULT_CPU_REQUEST, max_cpu)
    if max_memory is not None:
        container_max[MEMORY] = container_default[MEMORY] = max_memory
        container_request[MEMORY] = min(DEFAULT_MEMORY_REQUEST, max_memory)
    limits: list[dict[str, Any]] = []
    if max_gpus is not None:
        container_max[GPU_RESOURCE] = max_gpus
        container_default[GPU_RESOURCE] = container_request[GPU_RESOURCE] = Decimal(0)
        limits.append({"type": "Pod", "max": _resources({GPU_RESOURCE: max_gpus})})
    if not container_max:
        return None
    limits.insert(
        0,
        {
            "type": "Container",
            "max": _resources(container_max),
            "default": _resources(container_default),
            "defaultRequest": _resources(container_request),
        },
    )
    return {
        "apiVersion": API_CORE,
        "kind": "LimitRange",
        "metadata": context.metadata(names.LIMIT_RANGE, namespace),
        "spec": {"limits": limits},
    }


def _cluster_sources(cluster: ClusterSpec) -> list[dict[str, Any]]:
    """The namespaces the cluster lets into every tenant's namespaces (its ingress
    controller's, then monitoring's), each once, by the name label Kubernetes sets itself (a
    tenant cannot forge it, unlike a label it may write on its own namespace)."""
    names_in: dict[str, None] = {}
    for what, values in (
        ("ingress controller namespace", cluster.ingress_namespaces),
        ("monitoring namespace", cluster.monitoring_namespaces),
    ):
        for value in values:
            names.dns1123_label(value, what=f"cluster {cluster.name!r} {what}")
            names_in.setdefault(value)
    return [
        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: value}}} for value in names_in
    ]


def _egress_exceptions(context: _TenantContext) -> list[dict[str, Any]]:
    """The tenant's approved egress exceptions, one rule each, in a stable order; each checked
    again (``quotas.kube.egress``: never "the internet", never the metadata address)."""
    rules: list[dict[str, Any]] = []
    for spec in context.tenant.egress:
        try:
            rule = egress.egress_rule(spec)
        except egress.EgressError as error:
            raise ValueError(
                f"tenant {context.tenant.slug!r} egress exception {spec.words()}: {error.message}"
            ) from None
        if rule not in rules:
            rules.append(rule)
    return sorted(rules, key=lambda rule: json.dumps(rule, sort_keys=True))


def _network_policy(context: _TenantContext, namespace: str) -> KubeObject:
    """The seed article's ``deny-cross-tenant`` policy, kept as it is (first rule: ingress from
    pods of the same namespace), extended with what a tenant needs and nothing more: traffic
    to and from the tenant's other namespaces, DNS, and in from the namespaces the cluster
    names (its ingress controller's and monitoring's: a third rule, any port, only where
    there are some). Everything else, the internet included, is denied: a workload that
    needs more asks for an egress exception in a quota request, which a platform admin
    approves (``quotas.kube.egress``; one egress rule each), not a default. Image pulls are the kubelet's and are not affected.
    Enforced only where the CNI implements NetworkPolicy."""

    def own_tenant() -> dict[str, Any]:  # a fresh dict each time: no shared (aliased) parts
        return {"namespaceSelector": {"matchLabels": {LABEL_TENANT: context.tenant.slug}}}

    dns = {
        "to": [
            {
                "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: "kube-system"}},
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }
    ingress: list[dict[str, Any]] = [{"from": [{"podSelector": {}}]}, {"from": [own_tenant()]}]
    sources = _cluster_sources(context.cluster)
    if sources:
        ingress.append({"from": sources})
    return {
        "apiVersion": API_NETWORKING,
        "kind": "NetworkPolicy",
        "metadata": context.metadata(names.NETWORK_POLICY, namespace),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress,
            "egress": [
                {"to": [{"podSelector": {}}]},
                {"to": [own_tenant()]},
                dns,
                *_egress_exceptions(context),
            ],
        },
    }


def _service_account(context: _TenantContext, namespace: str) -> KubeObject:
    # The team's pipeline account (bound to edit and Kueue's batch user role, R29): a pipeline
    # takes a token with `kubectl create token`. Pods rarely need the Kubernetes API (and egress
    # to it is denied by the NetworkPolicy): no token mounted unless a pod asks for one.
    return {
        "apiVersion": API_CORE,
        "kind": "ServiceAccount",
        "metadata": context.metadata(names.service_account(context.tenant.slug), namespace),
        "automountServiceAccountToken": False,
    }


def _role_binding(
    context: _TenantContext,
    namespace: str,
    name: str,
    role: str,
    groups: list[str],
    users: list[str],
    service_account: str | None = None,
) -> KubeObject:
    subjects: list[dict[str, str]] = [
        {"apiGroup": RBAC_GROUP, "kind": "Group", "name": group} for group in groups
    ]
    subjects += [{"apiGroup": RBAC_GROUP, "kind": "User", "name": user} for user in users]
    if service_account:
        # ServiceAccount subjects take no apiGroup and must name their namespace.
        subjects.append({"kind": "ServiceAccount", "name": service_account, "namespace": namespace})
    return {
        "apiVersion": API_RBAC,
        "kind": "RoleBinding",
        "metadata": context.metadata(name, namespace),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def _role_bindings(context: _TenantContext, namespace: str) -> list[KubeObject]:
    """R29: editors get the built-in ``edit`` role, viewers ``view``, each binding also naming an
    identity-provider group (``gpu-portal:<slug>:edit``/``:view``), so it always has a subject,
    and the groups mapped to the tenant (``editor_groups``/``viewer_groups``).
    With Kueue, editors also get ``kueue-batch-user-role`` to see their LocalQueue and
    Workloads, which ``edit`` does not cover. The tenant's ServiceAccount of the namespace is
    an editor too (R29), so a team's pipeline can submit with its token."""
    slug = context.tenant.slug
    account = names.service_account(slug)
    editors = sorted(set(context.tenant.editors))
    viewers = sorted(set(context.tenant.viewers))
    # The portal's own group first, then the identity-provider groups mapped to the tenant.
    edit_groups = [names.rbac_group(slug, "edit"), *bindable_groups(context.tenant.editor_groups)]
    view_groups = [names.rbac_group(slug, "view"), *bindable_groups(context.tenant.viewer_groups)]
    bindings = [
        _role_binding(
            context, namespace, names.ROLE_BINDING_EDIT, "edit", edit_groups, editors, account
        ),
        _role_binding(context, namespace, names.ROLE_BINDING_VIEW, "view", view_groups, viewers),
    ]
    if context.cluster.has_kueue:
        bindings.append(
            _role_binding(
                context,
                namespace,
                names.ROLE_BINDING_KUEUE_USER,
                "kueue-batch-user-role",
                edit_groups,
                editors,
                account,
            )
        )
    return bindings


def _local_queue(context: _TenantContext, namespace: str) -> KubeObject:
    return {
        "apiVersion": API_KUEUE,
        "kind": "LocalQueue",
        "metadata": context.metadata(names.LOCAL_QUEUE, namespace),
        "spec": {"clusterQueue": context.tenant.slug},
    }


# --- per-tenant queues ------------------------------------------------------------------------


def _covered_resources(flavors: Sequence[FlavorSpec], context: _TenantContext) -> list[str]:
    """cpu and memory first (every pod requests them), then every accelerator of the flavors."""
    others: set[str] = set()
    for flavor in flavors:
        others.update(resource for resource in flavor.capacity if _is_accelerator(resource))
        others.update(r for (f, r) in context.items if f == flavor.name and _is_accelerator(r))
    # Kueue counts a vGPU pod's memory and compute under its transformation's names.
    return [CPU, MEMORY, *sorted({vgpu.kueue_name(resource) for resource in others})]


def _flavor_quota(context: _TenantContext, flavor: str, resource: str) -> dict[str, Any]:
    """One line of a ClusterQueue flavor; ``resource`` is Kueue's name (``vgpu.kueue_name``)."""
    item = context.items.get((flavor, vgpu.portal_name(resource)))
    if item is None:
        quota: dict[str, Any] = {"name": resource, "nominalQuota": "0"}
        # No quota for an accelerator means none, borrowed or not. cpu and memory on an
        # accelerator flavor are what its pods need alongside the GPUs: leave their borrowing
        # unlimited (bounded by the cohort and by the namespace ResourceQuota).
        if _is_accelerator(resource):
            quota["borrowingLimit"] = "0"
        return quota
    portal = vgpu.portal_name(resource)
    quota = {
        "name": resource,
        "nominalQuota": quantity(item.guaranteed, portal),
        "borrowingLimit": quantity(item.limit - item.guaranteed, portal),
    }
    if item.lending_limit is not None:
        quota["lendingLimit"] = quantity(item.lending_limit, portal)
    return quota


def _cluster_queue(context: _TenantContext) -> KubeObject:
    """The tenant's ClusterQueue: guaranteed = nominalQuota, limit - guaranteed =
    borrowingLimit, in a cohort (always: Kueue refuses borrowing and lending limits without
    one), selecting exactly the tenant's namespaces (a null selector selects none and ``{}``
    all, so neither is ever written). One resource group holds every flavor the tenant has
    quota on and each flavor lists every covered resource, as Kueue's CEL rule requires.

    Kueue tries flavors in list order: CPU flavors come first, so CPU-only work uses CPU nodes
    before the CPUs of GPU nodes (a GPU or MIG pod cannot fit a CPU flavor, whose accelerator
    quota is 0), then the cluster's own order."""
    tenant = context.tenant
    used = {flavor for flavor, _resource in context.items}
    flavors = sorted(
        (flavor for flavor in context.cluster.flavors if flavor.name in used),
        key=lambda flavor: flavor.kind != "cpu",  # stable: the cluster's order otherwise
    )
    resource_groups = []
    if flavors:
        covered = _covered_resources(flavors, context)
        if len(flavors) > KUEUE_MAX_FLAVORS_PER_GROUP:
            raise ValueError(
                f"tenant {tenant.slug!r} has quota on {len(flavors)} flavors; a Kueue resource "
                f"group holds at most {KUEUE_MAX_FLAVORS_PER_GROUP}"
            )
        if len(covered) > KUEUE_MAX_COVERED_RESOURCES:
            raise ValueError(
                f"tenant {tenant.slug!r} covers {len(covered)} resources; a Kueue resource group "
                f"covers at most {KUEUE_MAX_COVERED_RESOURCES}"
            )
        resource_groups.append(
            {
                "coveredResources": covered,
                "flavors": [
                    {
                        "name": flavor.name,
                        "resources": [_flavor_quota(context, flavor.name, r) for r in covered],
                    }
                    for flavor in flavors
                ],
            }
        )
    stopped = tenant.state == "suspended" or tenant.blocked
    spec: dict[str, Any] = {
        "cohortName": context.cohort,
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "In",
                    "values": [namespace.name for namespace in context.namespaces],
                }
            ]
        },
        "queueingStrategy": "BestEffortFIFO",
        # Reclaim lent quota from anyone; borrow by preempting only lower priorities (Kueue's
        # CEL rule forbids that with reclaimWithinCohort Never); inside the queue, priority wins.
        "preemption": {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority"},
            "withinClusterQueue": "LowerPriority",
        },
        # Hold: running work finishes, nothing new is admitted (suspended, or over its limit).
        "stopPolicy": "Hold" if stopped else "None",
    }
    # Running jobs: admitted pods, in a group of their own (quotas.kube.job_caps).
    slots = job_caps.cluster_queue_group(tenant.max_running_jobs)
    if slots is not None:
        resource_groups.append(slots)
    if resource_groups:
        spec["resourceGroups"] = resource_groups
    if tenant.fair_share_weight is not None:
        spec["fairSharing"] = {"weight": str(tenant.fair_share_weight)}
    if context.cluster.fair_sharing != fair_sharing.MODE_NONE:
        spec = fair_sharing.cluster_queue_spec(spec, context.cluster.fair_sharing)
    return {
        "apiVersion": API_KUEUE,
        "kind": "ClusterQueue",
        "metadata": context.metadata(tenant.slug),
        "spec": spec,
    }


@dataclass(frozen=True)
class _VolcanoAmounts:
    """A Volcano queue's three resource lists. guarantee is what is never lent (Kueue's
    nominalQuota - lendingLimit: 0 when all of it may be lent), deserved the reclaimable share
    (the guaranteed amount), capability the ceiling (the limit). Volcano's webhook wants
    guarantee <= deserved <= capability per resource, which these keep."""

    guarantee: dict[str, Decimal]
    deserved: dict[str, Decimal]
    capability: dict[str, Decimal]

    @classmethod
    def of_tenant(cls, context: _TenantContext) -> _VolcanoAmounts:
        def kept(item: QuotaSpec) -> Decimal:
            lent = item.guaranteed if item.lending_limit is None else item.lending_limit
            return item.guaranteed - lent

        return cls(
            guarantee=context.totals(kept),
            deserved=context.totals(lambda item: item.guaranteed),
            capability=context.totals(lambda item: item.limit),
        )

    def add(self, other: _VolcanoAmounts) -> _VolcanoAmounts:
        def plus(a: dict[str, Decimal], b: dict[str, Decimal]) -> dict[str, Decimal]:
            return {key: a.get(key, Decimal(0)) + b.get(key, Decimal(0)) for key in a.keys() | b}

        return _VolcanoAmounts(
            plus(self.guarantee, other.guarantee),
            plus(self.deserved, other.deserved),
            plus(self.capability, other.capability),
        )

    def spec(self) -> dict[str, Any]:
        # The proportion plugin shares by weight: whole guaranteed GPUs, within 1..65535.
        gpus = int(self.deserved.get(GPU_RESOURCE, Decimal(0)))
        return {
            "weight": max(1, min(VOLCANO_MAX_WEIGHT, gpus)),
            "reclaimable": True,
            "guarantee": {"resource": _resources(self.guarantee)},
            "deserved": _resources(self.deserved),
            "capability": _resources(self.capability),
        }


_EMPTY_VOLCANO: Final = _VolcanoAmounts({}, {}, {})


def _volcano_queue(context: _TenantContext) -> KubeObject:
    """The tenant's Volcano Queue (a leaf: only leaves take jobs). With hierarchy its parent is
    the group queue of its cohort, or Volcano's ``root`` for the cluster's root cohort. Volcano
    has no suspended state in the Queue spec (closing a queue is a bus Command), so a suspended
    tenant is not expressed here."""
    spec = _VolcanoAmounts.of_tenant(context).spec()
    if context.cluster.volcano_hierarchy:
        spec["parent"] = _volcano_parent(context.cluster, context.cohort)
    return {
        "apiVersion": API_VOLCANO,
        "kind": "Queue",
        "metadata": context.metadata(context.tenant.slug),
        "spec": spec,
    }


def _volcano_parent(cluster: ClusterSpec, cohort: str) -> str:
    return "root" if cohort == cluster.root_cohort else names.volcano_group_queue(cohort)


# --- cluster-wide objects ---------------------------------------------------------------------


@dataclass(frozen=True)
class _CohortTree:
    """The cohort tree (R14): the cluster's root cohort; below it one cohort per parent tenant
    (named after it, under the parent's own cohort) and one per explicit cohort name."""

    root: str
    parent: dict[str, str | None]
    depth: dict[str, int]

    @classmethod
    def build(cls, cluster: ClusterSpec, tenants: Sequence[TenantSpec]) -> _CohortTree:
        root = cluster.root_cohort
        by_slug = {tenant.slug: tenant for tenant in tenants}
        parent_slugs = {tenant.parent for tenant in tenants if tenant.parent}
        parent_slugs |= {tenant.slug for tenant in tenants if tenant.department}
        nodes = {root} | {names.tenant_cohort(cluster, tenant) for tenant in tenants}
        nodes |= {names.parent_cohort(slug) for slug in parent_slugs}
        parent: dict[str, str | None] = {root: None}
        for node in sorted(nodes - {root}):
            above = root
            if node in parent_slugs and node in by_slug:
                above = names.tenant_cohort(cluster, by_slug[node])
                if above == node:  # the parent tenant shares the cohort with its children
                    above = root
            parent[node] = above
        depth: dict[str, int] = {}
        for node in sorted(parent):
            chain = [node]
            current = parent[node]
            while current is not None:
                if current in chain:
                    cycle = " -> ".join([*chain, current])
                    raise ValueError(f"the tenant hierarchy has a cycle: {cycle}")
                chain.append(current)
                current = parent[current]
            if len(chain) - 1 > MAX_HIERARCHY_DEPTH:
                raise ValueError(f"cohort {node!r} is nested deeper than {MAX_HIERARCHY_DEPTH}")
            depth[node] = len(chain) - 1
        return cls(root=root, parent=parent, depth=depth)

    def ancestors(self, node: str) -> list[str]:
        """node and the cohorts above it, root excluded."""
        chain = []
        current: str | None = node
        while current is not None and current != self.root:
            chain.append(current)
            current = self.parent[current]
        return chain


def _cluster_metadata(
    cluster: ClusterSpec, name: str, namespace: str | None = None, depth: int | None = None
) -> dict[str, Any]:
    annotations = {ANNOTATION_HIERARCHY_DEPTH: str(depth)} if depth is not None else None
    return _metadata(name, namespace, labels=_cluster_labels(cluster), annotations=annotations)


def _priority_class(cluster: ClusterSpec, level: PriorityLevel) -> KubeObject:
    # globalDefault stays false: the cluster's default belongs to its administrators.
    return {
        "apiVersion": API_SCHEDULING,
        "kind": "PriorityClass",
        "metadata": _cluster_metadata(cluster, level.name),
        "value": level.value,
        "globalDefault": False,
        "preemptionPolicy": level.preemption_policy,
        "description": level.description,
    }


def _workload_priority_class(cluster: ClusterSpec, level: PriorityLevel) -> KubeObject:
    # Kueue orders and preempts by it (label kueue.x-k8s.io/priority-class on a job); same
    # name and value as the PriorityClass, so either spelling gives the same priority.
    return {
        "apiVersion": API_KUEUE,
        "kind": "WorkloadPriorityClass",
        "metadata": _cluster_metadata(cluster, level.name),
        "value": level.value,
        "description": level.description,
    }


def _resource_flavor(cluster: ClusterSpec, flavor: FlavorSpec) -> KubeObject:
    """A Kueue ResourceFlavor. A dedicated pool's taints (R26) are listed as nodeTaints and
    matched by tolerations, which Kueue adds to the pods it admits on this flavor: access to the
    pool is decided by which ClusterQueues have quota on it, not by what users remember to
    tolerate."""
    if len(flavor.node_labels) > KUEUE_MAX_NODE_LABELS:
        raise ValueError(
            f"flavor {flavor.name!r} has {len(flavor.node_labels)} node labels; a Kueue "
            f"ResourceFlavor allows at most {KUEUE_MAX_NODE_LABELS}"
        )
    if len(flavor.node_taints) > KUEUE_MAX_NODE_TAINTS:
        raise ValueError(
            f"flavor {flavor.name!r} has {len(flavor.node_taints)} node taints; a Kueue "
            f"ResourceFlavor allows at most {KUEUE_MAX_NODE_TAINTS}"
        )
    spec: dict[str, Any] = {}
    if flavor.node_labels:
        spec["nodeLabels"] = dict(sorted(flavor.node_labels.items()))
    taints = []
    tolerations = []
    for taint in flavor.node_taints:
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        if not key or effect not in TAINT_EFFECTS:
            raise ValueError(
                f"flavor {flavor.name!r} has taint {taint!r}: it needs a key and an effect "
                f"among {', '.join(sorted(TAINT_EFFECTS))}"
            )
        taints.append({"key": key, **({"value": value} if value else {}), "effect": effect})
        toleration: dict[str, str] = {"key": key, "operator": "Equal" if value else "Exists"}
        if value:
            toleration["value"] = value
        toleration["effect"] = effect
        tolerations.append(toleration)
    if taints:
        spec["nodeTaints"] = taints
        spec["tolerations"] = tolerations
    return {
        "apiVersion": API_KUEUE,
        "kind": "ResourceFlavor",
        "metadata": _cluster_metadata(cluster, flavor.name),
        "spec": spec,
    }


def _job_slots_flavor(cluster: ClusterSpec) -> KubeObject:
    """The ResourceFlavor of the running-job caps: no node labels or taints, so it places a
    workload nowhere; it only counts its pods."""
    return {
        "apiVersion": API_KUEUE,
        "kind": "ResourceFlavor",
        "metadata": _cluster_metadata(cluster, job_caps.JOB_SLOTS_FLAVOR),
        "spec": {},
    }


def _departments(tenants: Sequence[TenantSpec]) -> dict[str, TenantSpec]:
    """The departments among ``tenants``, by slug (looked up once per cohort: a scan of every
    tenant per cohort made the compile quadratic, 10,000 tenants in 1,000 cohorts)."""
    return {tenant.slug: tenant for tenant in tenants if tenant.department}


def _department(
    tree: _CohortTree, departments: Mapping[str, TenantSpec], node: str
) -> TenantSpec | None:
    """The department whose quota the cohort ``node`` holds (a non-root cohort named after it)."""
    if node == tree.root:
        return None
    return departments.get(node)


def _subtree_guarantees(
    cluster: ClusterSpec, tree: _CohortTree, tenants: Sequence[TenantSpec]
) -> dict[str, dict[tuple[str, str], Decimal]]:
    """Per cohort, per (flavor, resource): the guarantees of the ClusterQueues and department
    pools below it (its own department's pool excluded). One pass over the tenants, each added
    to the cohorts above it (at most the tree's depth): a scan of every tenant per department
    made the compile quadratic, 10,000 tenants in 1,000 departments."""
    sums: dict[str, dict[tuple[str, str], Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for tenant in tenants:
        if tenant.department:
            # A department's pool sits on its own cohort, one level below its parent's.
            above = tree.parent.get(tenant.slug)
            if above is None:
                continue
            nodes = [node for node in tree.ancestors(above) if node != tenant.slug]
        else:
            nodes = tree.ancestors(names.tenant_cohort(cluster, tenant))
        for node in nodes:
            below = sums[node]
            for item in tenant.quotas:
                below[(item.flavor, item.resource)] += item.guaranteed
    return {node: dict(below) for node, below in sums.items()}


def _cohort_resource_groups(
    cluster: ClusterSpec, department: TenantSpec, below: dict[tuple[str, str], Decimal]
) -> list[dict[str, Any]]:
    """A department's quota as its Cohort's resource group (R14): nominalQuota is its pool
    (guaranteed), which its children borrow before going to the cohorts above; borrowingLimit
    is what the subtree may take from above, so that everything it uses stays within the cap
    (limit): cap - pool - the children's own guarantees, never below 0."""
    context = _TenantContext.build(cluster, department)
    used = {flavor for flavor, _resource in context.items}
    flavors = sorted(
        (flavor for flavor in cluster.flavors if flavor.name in used),
        key=lambda flavor: flavor.kind != "cpu",
    )
    if not flavors:
        return []
    covered = _covered_resources(flavors, context)
    if len(flavors) > KUEUE_MAX_FLAVORS_PER_GROUP or len(covered) > KUEUE_MAX_COVERED_RESOURCES:
        raise ValueError(
            f"department {department.slug!r} has quota on {len(flavors)} flavors covering "
            f"{len(covered)} resources; a Kueue resource group holds at most "
            f"{KUEUE_MAX_FLAVORS_PER_GROUP} flavors and {KUEUE_MAX_COVERED_RESOURCES} resources"
        )

    def line(flavor: str, resource: str) -> dict[str, Any]:
        portal = vgpu.portal_name(resource)  # ``resource`` is Kueue's name
        item = context.items.get((flavor, portal))
        if item is None:  # no cap on this resource: the children's own limits bound it
            return {"name": resource, "nominalQuota": "0"}
        room = item.limit - item.guaranteed - below.get((flavor, portal), Decimal(0))
        quota: dict[str, Any] = {
            "name": resource,
            "nominalQuota": quantity(item.guaranteed, portal),
            "borrowingLimit": quantity(max(Decimal(0), room), portal),
        }
        if item.lending_limit is not None:
            quota["lendingLimit"] = quantity(item.lending_limit, portal)
        return quota

    return [
        {
            "coveredResources": covered,
            "flavors": [
                {"name": flavor.name, "resources": [line(flavor.name, r) for r in covered]}
                for flavor in flavors
            ],
        }
    ]


def _cohort(
    cluster: ClusterSpec,
    tree: _CohortTree,
    name: str,
    below: dict[tuple[str, str], Decimal],
    departments: Mapping[str, TenantSpec],
) -> KubeObject:
    """A Cohort of the tree. A department's (R14) carries its quota as resource groups and its
    fair-share weight; the others only link the tree. ``below``: the guarantees under it
    (``_subtree_guarantees``)."""
    above = tree.parent[name]
    spec: dict[str, Any] = {"parentName": above} if above is not None else {}
    department = _department(tree, departments, name)
    if department is not None:
        groups = _cohort_resource_groups(cluster, department, below)
        if groups:
            spec["resourceGroups"] = groups
        if department.fair_share_weight is not None:
            spec["fairSharing"] = {"weight": str(department.fair_share_weight)}
    return {
        "apiVersion": API_KUEUE,
        "kind": "Cohort",
        "metadata": _cluster_metadata(cluster, name, depth=tree.depth[name]),
        "spec": spec,
    }


def _volcano_group_queues(
    cluster: ClusterSpec, tree: _CohortTree, tenants: Sequence[TenantSpec]
) -> list[KubeObject]:
    """Volcano parent queues mirroring the cohort tree (root excluded: Volcano has its own).
    Each holds the sum of its subtree, so the webhook's rules hold: children's guarantee and
    deserved add up to at most the parent's, and no child's capability exceeds it."""
    totals: dict[str, _VolcanoAmounts] = {node: _EMPTY_VOLCANO for node in tree.parent}
    largest_child: dict[str, dict[str, Decimal]] = defaultdict(dict)
    for tenant in tenants:
        context = _TenantContext.build(cluster, tenant)
        amounts = _VolcanoAmounts.of_tenant(context)
        if tenant.department and tenant.slug in tree.parent:
            # A department's pool is its group queue's own share, on top of its children's.
            chain = tree.ancestors(tenant.slug)
        else:
            chain = tree.ancestors(context.cohort)
            for resource, amount in amounts.capability.items():
                if chain:
                    mine = largest_child[chain[0]]
                    mine[resource] = max(mine.get(resource, Decimal(0)), amount)
        for node in chain:
            totals[node] = totals[node].add(amounts)
    queues = []
    departments = _departments(tenants)
    for node in sorted(tree.parent):
        above = tree.parent[node]
        if above is None:
            continue
        department = _department(tree, departments, node)
        amounts = totals[node]
        if department is not None:
            # The department's cap replaces the sum of capabilities, kept at or above what the
            # webhook needs (deserved, and any single child's capability); request validation
            # already keeps the children's limits within the cap.
            cap = _VolcanoAmounts.of_tenant(_TenantContext.build(cluster, department))
            capability = dict(amounts.capability)
            for resource, limit in cap.capability.items():
                floor = max(
                    amounts.deserved.get(resource, Decimal(0)),
                    largest_child[node].get(resource, Decimal(0)),
                )
                capability[resource] = max(limit, floor)
            amounts = _VolcanoAmounts(amounts.guarantee, amounts.deserved, capability)
        spec = amounts.spec()
        spec["parent"] = _volcano_parent(cluster, above)
        queues.append(
            {
                "apiVersion": API_VOLCANO,
                "kind": "Queue",
                "metadata": _cluster_metadata(
                    cluster, names.volcano_group_queue(node), depth=tree.depth[node]
                ),
                "spec": spec,
            }
        )
    return queues


def _time_slicing_configmap(cluster: ClusterSpec) -> KubeObject | None:
    """R25: the NVIDIA device plugin's sharing config, one data key per time-sliced flavor. The
    GPU Operator reads it when its ClusterPolicy names this ConfigMap; a node picks its key with
    the label ``nvidia.com/device-plugin.config=<flavor name>``."""
    data = {}
    for flavor in sorted(cluster.flavors, key=lambda f: f.name):
        replicas = flavor.time_slicing_replicas
        if replicas is None:
            continue
        if replicas < 2:
            raise ValueError(
                f"flavor {flavor.name!r} has time_slicing_replicas {replicas}; "
                "sharing needs at least 2 (None means not shared)"
            )
        resource = (
            f"{MIG_RESOURCE_PREFIX}{flavor.mig_profile}"
            if flavor.kind == "mig" and flavor.mig_profile
            else GPU_RESOURCE
        )
        config = {
            "version": "v1",
            "sharing": {"timeSlicing": {"resources": [{"name": resource, "replicas": replicas}]}},
        }
        data[flavor.name] = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    if not data:
        return None
    return {
        "apiVersion": API_CORE,
        "kind": "ConfigMap",
        "metadata": _cluster_metadata(
            cluster, names.TIME_SLICING_CONFIGMAP, names.TIME_SLICING_NAMESPACE
        ),
        "data": data,
    }
