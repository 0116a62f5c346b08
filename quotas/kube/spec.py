"""What the compiler reads: plain, frozen data describing a cluster and its tenants.

`quotas.loader` builds these from the database; tests and the benchmark build them by hand.
Nothing here imports Django, so the compiler stays pure: data in, dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

# Labels and annotations the portal puts on everything it owns.
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpu-quota-portal"
LABEL_TENANT = "portal.gpu-quota.io/tenant"
LABEL_CLUSTER = "portal.gpu-quota.io/cluster"
ANNOTATION_GENERATION = "portal.gpu-quota.io/generation"
FIELD_MANAGER = "gpu-quota-portal"


@dataclass(frozen=True)
class FlavorSpec:
    """A ResourceFlavor of the cluster. ``capacity`` maps each covered resource (Kubernetes
    name, e.g. ``nvidia.com/gpu``, ``cpu``, ``memory``, ``nvidia.com/mig-1g.10gb``,
    ``storage``) to the cluster's total in base units (GPUs, cores, bytes)."""

    name: str
    kind: str  # "gpu" | "mig" | "vgpu" | "cpu" | "storage"
    capacity: dict[str, Decimal]
    gpu_model: str = ""
    mig_profile: str = ""
    storage_class: str = ""
    node_labels: dict[str, str] = field(default_factory=dict)
    # Kubernetes taints ({"key", "value", "effect"}) of a dedicated pool (R26).
    node_taints: tuple[dict[str, str], ...] = ()
    # Time-sliced sharing (R25): replicas per physical GPU; None means not shared.
    time_slicing_replicas: int | None = None
    # vGPU sharing through HAMi (``quotas.vgpu``): one GPU's memory in MiB and the vGPUs HAMi
    # advertises per GPU.
    gpu_memory_mib: int | None = None
    vgpu_split: int | None = None
    # Storage performance (R3) of a storage flavor: its CSI driver, the IOPS and MiB/s each
    # volume is provisioned with (None: the driver's default), and the VolumeAttributesClass
    # that carries them ("" : the StorageClass does). ``quotas.kube.storage``.
    storage_driver: str = ""
    storage_iops: int | None = None
    storage_throughput_mib: int | None = None
    volume_attributes_class: str = ""


@dataclass(frozen=True)
class QuotaSpec:
    """One quota line as the compiler reads it, its flavor by name (``quotas.services.QuotaItem``
    is the same line with its ``ResourceFlavor``, for validation and writes). Guaranteed =
    Kueue nominalQuota; limit = nominal + borrowingLimit (base units)."""

    flavor: str
    resource: str
    guaranteed: Decimal
    limit: Decimal
    lending_limit: Decimal | None = None


@dataclass(frozen=True)
class NamespaceSpec:
    name: str
    purpose: str = "general"  # "general" | "training" | "inference"
    # Percentage of the tenant's limit its ResourceQuota holds under namespace split; None on
    # every namespace of a tenant: an even split.
    share: Decimal | None = None


@dataclass(frozen=True)
class EgressSpec:
    """A destination a tenant's pods may reach beyond its own namespaces and DNS, approved in
    a quota request (``quotas.kube.egress`` reads and checks one)."""

    port: int
    protocol: str = "TCP"
    namespace: str = ""  # pods of this namespace, or
    cidr: str = ""  # this network
    tenant: str = ""  # the tenant that owns ``namespace``, where it is another tenant's

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"port": self.port, "protocol": self.protocol}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.cidr:
            out["cidr"] = self.cidr
        if self.tenant:
            out["tenant"] = self.tenant
        return out

    def words(self) -> str:
        where = f"namespace {self.namespace}" if self.namespace else self.cidr
        owner = f" (tenant {self.tenant})" if self.tenant else ""
        return f"{where}{owner}, {self.protocol} {self.port}"


@dataclass(frozen=True)
class CapSpec:
    """One line of a per-person cap: the most of ``resource`` on ``flavor`` (base units)."""

    flavor: str
    resource: str
    amount: Decimal


@dataclass(frozen=True)
class PersonSpec:
    """A capped person of a tenant (``quotas.kube.person_caps``): a member by Kubernetes
    username, or (``pipeline``) the team's ServiceAccount of each namespace. Resources
    without a line are bounded by the tenant's limit only."""

    username: str
    caps: tuple[CapSpec, ...]
    pipeline: bool = False


@dataclass(frozen=True)
class TenantSpec:
    """One tenant's quotas on one cluster, at one quota generation."""

    slug: str
    generation: int
    namespaces: tuple[NamespaceSpec, ...]
    quotas: tuple[QuotaSpec, ...] = ()
    display_name: str = ""
    parent: str | None = None  # parent tenant slug (hierarchy becomes the cohort tree, R14)
    cohort: str = ""  # explicit cohort name; empty means derived from the hierarchy/cluster
    state: str = "active"  # "active" | "suspended"
    default_priority: str = "default"  # "production" | "default" | "experiment"
    # Scheduling and storage quotas (None: not limited).
    max_running_jobs: int | None = None
    max_queued_jobs: int | None = None
    max_pods: int | None = None
    storage_bytes: Decimal | None = None
    max_pvcs: int | None = None
    # Separate quotas for batch and inference by PriorityClass scope (R17). ``inference_gpus``
    # (which implies the split): whole GPUs for inference, the rest of the GPU limit for batch;
    # without it inference gets the guaranteed amounts.
    split_by_priority: bool = False
    inference_gpus: int | None = None
    # R15: may its pods use the production PriorityClass; False: a ResourceQuota of 0 pods for
    # that class in every namespace (the Kubernetes way to forbid a class per namespace).
    production_priority_allowed: bool = True
    # R27: the most bits per second each pod may send and receive, a canonical quantity
    # ("1G"); empty: no cap. Its namespaces carry it as a label an admission policy reads.
    pod_bandwidth_max: str = ""
    # Per-pod caps for the LimitRange (R16); None: derived by the compiler.
    max_gpus_per_pod: int | None = None
    max_cpu_per_pod: Decimal | None = None
    max_memory_per_pod: Decimal | None = None
    # RBAC (R29): Kubernetes users bound to the built-in ClusterRoles in every namespace.
    editors: tuple[str, ...] = ()
    viewers: tuple[str, ...] = ()
    # Identity-provider groups mapped to the tenant (the portal's group mappings): groups of
    # leads and members edit, groups of viewers view, as the portal's own roles do, so that
    # kubectl users signed in through the same provider get the same access.
    editor_groups: tuple[str, ...] = ()
    viewer_groups: tuple[str, ...] = ()
    # Flavors whose use reached 100% of the limit: new work is held (R11, alerts issue).
    blocked: bool = False
    # A department (R14): a tenant other tenants name as parent. Its quotas are not a queue of
    # its own but the Cohort named after it: ``guaranteed`` a pool its children borrow from
    # first (the Cohort's nominalQuota), ``limit`` a cap over everything the subtree uses.
    department: bool = False
    # Kueue fairSharing.weight of the tenant's ClusterQueue (of its Cohort for a department);
    # None: Kueue's default of 1.
    fair_share_weight: int | None = None
    # Egress exceptions approved for the tenant on this cluster (extra NetworkPolicy rules).
    egress: tuple[EgressSpec, ...] = ()
    # Per-person caps (R14, the user level): each person's own ClusterQueue under the
    # tenant's Cohort (``quotas.kube.person_caps``).
    people: tuple[PersonSpec, ...] = ()


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    flavors: tuple[FlavorSpec, ...]
    kubernetes_version: str = "1.33"
    has_kueue: bool = True
    # "kueue" (Kueue manages everything; an admission policy refuses what it would not) or
    # "split" (the namespaces' ResourceQuotas add up to each tenant's limit): see
    # quotas.kube.enforcement.
    enforcement: str = "kueue"
    # Kueue's manager configuration as read from the cluster (quotas.kube.enforcement.
    # KueueConfig); None: not read, or unreadable.
    kueue_config: Any = None
    # Operators trusted to create GPU objects that name a controller owner in ``kueue`` mode,
    # beside Kubernetes' own controllers and Kueue (Kubernetes usernames; a trailing "*"
    # matches a prefix).
    trusted_controllers: tuple[str, ...] = ()
    has_volcano: bool = False
    # Namespaces whose pods may reach every tenant's pods on any port: the ingress
    # controller's (tenants' inference services behind an Ingress) and monitoring's (a
    # Prometheus scraping tenants' metrics). Empty: none, tenants take traffic only from
    # their own namespaces.
    ingress_namespaces: tuple[str, ...] = ()
    monitoring_namespaces: tuple[str, ...] = ()
    # Volcano hierarchical queues need the capacity plugin with enableHierarchy.
    volcano_hierarchy: bool = False
    # The cohort every tenant without a parent joins, so borrowing works.
    root_cohort: str = "portal-root"
    # Fair sharing the portal asks of Kueue here (quotas.kube.fair_sharing): "none",
    # "weights" (preemption-based, by fairSharing.weight) or "usage" (weights, and admission
    # fair sharing by recent use inside each tenant's ClusterQueue).
    fair_sharing: str = "none"
    # The StorageClass and VolumeAttributesClass names the cluster serves, as last read from
    # it (empty: not read). A tenant gets a quota of 0 on each one its quota does not name.
    storage_classes: tuple[str, ...] = ()
    volume_attributes_classes: tuple[str, ...] = ()
    # The class the cluster marks default: kept by a tenant whose quota names no storage class.
    default_storage_class: str = ""
    # HAMi's version as last read from the cluster ("" : not found); vGPU flavors are compiled
    # only where it is new enough (``quotas.vgpu.hami_problem``).
    hami_version: str = ""
