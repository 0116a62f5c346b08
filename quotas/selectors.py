"""Reads for clusters, flavors, tiers and quotas, with normalised GPU units (R5)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import (
    Count,
    DecimalField,
    OuterRef,
    Prefetch,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.prepared import prepared_rows
from quotas import isolation
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GRANT_HOLDING_STATES,
    MEMORY_RESOURCE,
    CapSubject,
    Enforcement,
    FairSharing,
    FlavorKind,
    SyncBackend,
    SyncState,
    is_gpu_resource,
    mig_resource,
)
from quotas.kube import fair_sharing, names
from quotas.kube.compiler import DERIVED_MAX_GPUS_PER_POD
from quotas.kube.enforcement import KueueConfig, verdict
from quotas.kube.person_caps import cluster_queue_name
from quotas.kube.spec import PersonSpec
from quotas.kube.storage import performance_words
from quotas.kube.vgpu import kueue_problem as kueue_vgpu_problem
from quotas.loader import cluster_spec
from quotas.models import (
    Cluster,
    ClusterPool,
    FairShareReading,
    FlavorResource,
    FleetNodeCapacity,
    Grant,
    GrantLine,
    GuaranteeTotal,
    PersonCap,
    Quota,
    QuotaSet,
    ResourceFlavor,
    TenantSync,
    TierTemplate,
)
from quotas.quantity import QuantityError, parse_resource_amount, to_display
from quotas.vgpu import hami_problem
from tenants.choices import IsolationLevel
from tenants.models import Namespace, Tenant


def gpu_units(amount: Decimal, *, resource: str, weight: Decimal) -> Decimal:
    """Normalised GPU units of ``amount`` of ``resource`` (0 for CPU, memory, storage)."""
    return amount * weight if is_gpu_resource(resource) else Decimal(0)


@dataclass(frozen=True)
class EffectiveQuota:
    """One quota line as users see it. Plain values: the API's hot path builds these from rows."""

    flavor_name: str
    flavor_kind: str
    gpu_weight: Decimal
    resource: str
    guaranteed: Decimal
    limit: Decimal
    lending_limit: Decimal | None
    # R25: shares per GPU of a time-sliced flavor; None: whole GPUs (or not a GPU flavor).
    time_slicing_replicas: int | None = None
    # R3: what each volume of a storage flavor is provisioned with; None: the driver's default.
    storage_iops: int | None = None
    storage_throughput_mib: int | None = None

    @property
    def performance(self) -> str:
        """A storage line's performance in words ("16,000 IOPS, 1,000 MiB/s per volume")."""
        return performance_words(self.storage_iops, self.storage_throughput_mib)

    @property
    def shares_per_gpu(self) -> int | None:
        """Shares per GPU when this line counts time-sliced shares of a GPU, else None."""
        if self.resource == GPU_RESOURCE and self.time_slicing_replicas:
            return self.time_slicing_replicas
        return None

    @property
    def borrowing_limit(self) -> Decimal:
        return self.limit - self.guaranteed

    @property
    def guaranteed_gpu_units(self) -> Decimal:
        return gpu_units(self.guaranteed, resource=self.resource, weight=self.gpu_weight)

    @property
    def limit_gpu_units(self) -> Decimal:
        return gpu_units(self.limit, resource=self.resource, weight=self.gpu_weight)


@dataclass
class EffectiveQuotaSet:
    """A tenant's quota set on one cluster, with its items."""

    tenant_id: int
    cluster_name: str
    generation: int
    tier_name: str | None
    max_running_jobs: int | None
    max_queued_jobs: int | None
    max_pods: int | None
    storage_bytes: Decimal | None
    max_pvcs: int | None
    fair_share_weight: int | None
    max_gpus_per_pod: int | None
    max_cpu_per_pod: Decimal | None
    max_memory_per_pod: Decimal | None
    inference_gpus: int | None
    updated_at: datetime
    egress_rules: list[dict[str, Any]] = field(default_factory=list)
    items: list[EffectiveQuota] = field(default_factory=list)

    @property
    def has_storage(self) -> bool:
        """Whether a line is on a storage class (R3): the only classes the tenant may use."""
        return any(item.flavor_kind == FlavorKind.STORAGE for item in self.items)

    @property
    def guaranteed_gpu_units(self) -> Decimal:
        return sum((i.guaranteed_gpu_units for i in self.items), Decimal(0))

    @property
    def limit_gpu_units(self) -> Decimal:
        return sum((i.limit_gpu_units for i in self.items), Decimal(0))


_SET_FIELDS = (
    "id", "tenant_id", "cluster__name", "generation", "tier__name", "max_running_jobs",
    "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs",
    "fair_share_weight", "max_gpus_per_pod", "max_cpu_per_pod", "max_memory_per_pod",
    "inference_gpus", "updated_at", "egress_rules",
)  # fmt: skip
_ITEM_FIELDS = (
    "quotas__flavor__name", "quotas__flavor__kind", "quotas__flavor__gpu_weight",
    "quotas__resource", "quotas__guaranteed", "quotas__limit", "quotas__lending_limit",
    "quotas__flavor__time_slicing_replicas", "quotas__flavor__storage_iops",
    "quotas__flavor__storage_throughput_mib",
)  # fmt: skip


def _effective_quota_sets(tenant_ids: list[int]) -> list[EffectiveQuotaSet]:
    """One query of plain rows (quota sets LEFT JOIN their items), whatever the number of
    clusters and flavors; a set with no items comes back as one row with empty item columns."""
    sets: dict[int, EffectiveQuotaSet] = {}

    def build() -> QuerySet[QuotaSet, tuple[Any, ...]]:
        rows = QuotaSet.objects.filter(tenant_id__in=tenant_ids).order_by(
            "cluster__name", "quotas__flavor__name", "quotas__resource"
        )
        return rows.values_list(*_SET_FIELDS, *_ITEM_FIELDS)

    # One tenant (its quotas page and API): the statement is compiled once per process.
    one = len(tenant_ids) == 1
    rows = prepared_rows("effective-quota-sets", build, tenant_ids) if one else build()
    set_width = len(_SET_FIELDS)
    for row in rows:
        quota_set = sets.get(row[0])
        if quota_set is None:
            quota_set = sets[row[0]] = EffectiveQuotaSet(*row[1:set_width])
        if row[set_width] is not None:
            quota_set.items.append(EffectiveQuota(*row[set_width:]))
    return list(sets.values())


def tenant_effective_quotas(*, tenant: Tenant) -> list[EffectiveQuotaSet]:
    """A tenant's quotas per cluster, with normalised GPU units."""
    return _effective_quota_sets([tenant.pk])


def effective_quotas_for_tenants(
    *, tenants: Iterable[Tenant]
) -> dict[int, list[EffectiveQuotaSet]]:
    """The same for many tenants at once (cards on "My tenants"), in a constant number of queries."""
    result: dict[int, list[EffectiveQuotaSet]] = {t.pk: [] for t in tenants}
    for quota_set in _effective_quota_sets(list(result)):
        result[quota_set.tenant_id].append(quota_set)
    return result


def tenant_gpu_units_by_cluster(
    *, tenant_id: int, exclude_cluster_id: int | None = None
) -> dict[str, Decimal]:
    """Cluster name -> the normalised GPU units of the tenant's limits there (R5): each GPU or
    MIG limit times its flavor's weight; clusters where it holds none are left out. One
    query."""
    parts: dict[str, Decimal] = {}
    rows = Quota.objects.filter(quota_set__tenant_id=tenant_id)
    if exclude_cluster_id is not None:
        rows = rows.exclude(quota_set__cluster_id=exclude_cluster_id)
    for name, resource, limit, weight in rows.values_list(
        "quota_set__cluster__name", "resource", "limit", "flavor__gpu_weight"
    ):
        if is_gpu_resource(resource):
            parts[name] = parts.get(name, Decimal(0)) + gpu_units(
                limit, resource=resource, weight=weight
            )
    return dict(sorted(parts.items()))


@dataclass(frozen=True)
class PoolPart:
    """One cluster's quota of one kind of resource for a tenant; None: it holds none there."""

    cluster: str
    guaranteed: Decimal | None
    limit: Decimal | None

    def words(self, resource: str) -> str:
        if self.guaranteed is None or self.limit is None:
            return f"{self.cluster} none"
        return (
            f"{self.cluster} {to_display(self.guaranteed, resource)} guaranteed, "
            f"{to_display(self.limit, resource)} limit"
        )


@dataclass(frozen=True)
class PoolDifference:
    """A tenant whose quota of one kind of resource differs between the clusters of a pool."""

    pool: str
    tenant: str
    what: str  # in words: "NVIDIA A100-SXM4-80GB GPUs", "CPU"
    resource: str
    parts: tuple[PoolPart, ...]

    @property
    def message(self) -> str:
        shown = "; ".join(p.words(self.resource) for p in self.parts)
        return f"{self.tenant}: {self.what} differ between the clusters of {self.pool} ({shown})."


def _pool_what(kind: str, gpu_model: str, mig_profile: str, resource: str) -> str:
    if kind == FlavorKind.MIG and is_gpu_resource(resource):
        return f"{mig_profile} MIG instances of {gpu_model or 'its GPUs'}"
    if is_gpu_resource(resource):
        return f"{gpu_model or 'unnamed'} GPUs"
    return {"cpu": "CPU", "memory": "memory"}.get(resource, resource)


def pool_list() -> list[tuple[ClusterPool, list[str]]]:
    """Every pool with its clusters' names. Two queries."""
    pools = ClusterPool.objects.prefetch_related("clusters").order_by("name")
    return [(p, sorted(c.name for c in p.clusters.all())) for p in pools]


def pool_differences(*, pool: ClusterPool | None = None) -> list[PoolDifference]:
    """Tenants whose quotas differ between the clusters an admin marked as one pool (R22):
    per kind of resource (GPUs by model, MIG instances by profile, CPU, memory; summed over
    flavors, since each cluster names its own), guarantee and limit compared cluster by
    cluster; a cluster where the tenant holds none of it counts as a difference. Pools of one
    cluster have nothing to compare. Two queries."""
    pools = ClusterPool.objects.prefetch_related("clusters").order_by("name")
    if pool is not None:
        pools = pools.filter(pk=pool.pk)
    members = {
        p.name: sorted(c.name for c in p.clusters.all()) for p in pools if len(p.clusters.all()) > 1
    }
    if not members:
        return []
    held: dict[tuple[str, str, str, str], dict[str, tuple[Decimal, Decimal]]] = defaultdict(dict)
    rows = Quota.objects.filter(quota_set__cluster__pool__name__in=list(members)).values_list(
        "quota_set__cluster__pool__name", "quota_set__cluster__name", "quota_set__tenant__slug",
        "flavor__kind", "flavor__gpu_model", "flavor__mig_profile", "resource", "guaranteed",
        "limit",
    )  # fmt: skip
    for pool_name, cluster, tenant, kind, model, profile, resource, g, lim in rows:
        what = _pool_what(kind, model, profile, resource)
        key = (pool_name, tenant, what, resource)
        g0, l0 = held[key].get(cluster, (Decimal(0), Decimal(0)))
        held[key][cluster] = (g0 + g, l0 + lim)
    out = []
    for key in sorted(held):
        pool_name, tenant, what, resource = key
        per_cluster = held[key]
        values = {per_cluster.get(c) for c in members[pool_name]}
        if len(values) <= 1:
            continue
        parts = []
        for c in members[pool_name]:
            found = per_cluster.get(c)
            parts.append(PoolPart(c, *found) if found else PoolPart(c, None, None))
        out.append(PoolDifference(pool_name, tenant, what, resource, tuple(parts)))
    return out


@dataclass(frozen=True)
class DepartmentCapLine:
    """One line of a department's quota (R14) against its teams' on one cluster: the cap
    (its limit), its own pool (its guarantee), and what its teams hold in sum."""

    department: str  # slug
    cluster_name: str
    flavor_name: str
    resource: str
    cap: Decimal
    pool: Decimal
    teams_guaranteed: Decimal
    teams_limit: Decimal


def department_caps(*, tenant: Tenant, has_teams: bool | None = None) -> list[DepartmentCapLine]:
    """The caps of the department ``tenant`` is (when others name it as parent: ``has_teams``,
    when the caller knows) or belongs to (its parent's), with its teams' sums, per cluster,
    flavor and resource. Two queries (three without ``has_teams``)."""
    if has_teams is None:
        has_teams = tenant.children.exists()
    department = tenant if has_teams else tenant.parent
    if department is None:
        return []
    teams: dict[tuple[str, str, str], tuple[Decimal, Decimal]] = {}
    for cluster_name, flavor_name, resource, g, lim in Quota.objects.filter(
        quota_set__tenant__parent=department
    ).values_list("quota_set__cluster__name", "flavor__name", "resource", "guaranteed", "limit"):
        g0, l0 = teams.get((cluster_name, flavor_name, resource), (Decimal(0), Decimal(0)))
        teams[(cluster_name, flavor_name, resource)] = (g0 + g, l0 + lim)
    lines = []
    for cluster_name, flavor_name, resource, g, lim in (
        Quota.objects.filter(quota_set__tenant=department)
        .order_by("quota_set__cluster__name", "flavor__name", "resource")
        .values_list("quota_set__cluster__name", "flavor__name", "resource", "guaranteed", "limit")
    ):
        held = teams.get((cluster_name, flavor_name, resource), (Decimal(0), Decimal(0)))
        lines.append(
            DepartmentCapLine(
                department.slug, cluster_name, flavor_name, resource, lim, g, held[0], held[1]
            )
        )
    return lines


def largest_limits(*, cluster: Cluster) -> dict[tuple[int, str], tuple[Decimal, str]]:
    """The largest tenant limit per (flavor id, resource) on ``cluster``, with that tenant's
    slug (the first by slug among equals). One query."""
    rows = (
        Quota.objects.filter(quota_set__cluster=cluster)
        .order_by("flavor_id", "resource", "-limit", "quota_set__tenant__slug")
        .values_list("flavor_id", "resource", "limit", "quota_set__tenant__slug")
    )
    found: dict[tuple[int, str], tuple[Decimal, str]] = {}
    for flavor_id, resource, limit, slug in rows:
        found.setdefault((flavor_id, resource), (limit, slug))
    return found


def guarantees_by_flavor(
    *, cluster: Cluster, exclude_quota_set: QuotaSet | None = None, with_grants: bool = True
) -> dict[tuple[int, str], Decimal]:
    """Sum of all tenants' guarantees per (flavor id, resource) on ``cluster``, without those of
    ``exclude_quota_set`` (the set being replaced): the running totals the database keeps
    (``GuaranteeTotal``), less that set's own row of each. One query whatever the number of
    tenants. Keys whose sum is 0 are left out (a caller reads a missing key as 0). Grants for
    a time still holding capacity count too, as if they all overlapped (``grants_promised``):
    a standing change lasts past any of them (``with_grants`` False: standing ones only)."""
    totals = GuaranteeTotal.objects.filter(flavor__cluster=cluster).annotate(
        granted=grants_promised() if with_grants else Value(Decimal(0), output_field=DecimalField())
    )
    fields = ["flavor_id", "resource", "guaranteed", "granted"]
    if exclude_quota_set is not None and exclude_quota_set.pk is not None:
        own = Quota.objects.filter(
            quota_set=exclude_quota_set,
            flavor_id=OuterRef("flavor_id"),
            resource=OuterRef("resource"),
        ).values("guaranteed")  # at most one row: (set, flavor, resource) is unique
        totals, fields = totals.annotate(own=Subquery(own)), [*fields, "own"]
    out = {}
    for row in totals.values(*fields):
        total = row["guaranteed"] - (row.get("own") or Decimal(0)) + (row["granted"] or 0)
        if total:
            out[(row["flavor_id"], row["resource"])] = total
    return out


def cluster_list() -> QuerySet[Cluster]:
    return Cluster.objects.order_by("name")


def flavor_list(*, cluster: Cluster | None = None) -> QuerySet[ResourceFlavor]:
    flavors = ResourceFlavor.objects.select_related("cluster").prefetch_related(
        Prefetch("resources", queryset=FlavorResource.objects.order_by("resource"))
    )
    if cluster is not None:
        flavors = flavors.filter(cluster=cluster)
    return flavors.order_by("cluster__name", "name")


def tier_list() -> QuerySet[TierTemplate]:
    return TierTemplate.objects.order_by("sort_order", "name")


@dataclass(frozen=True)
class FleetCapacity:
    """What a cluster's GPUs are partitioned into for one MIG flavor (R24), as the fleet (an
    app above this one) counts it and pushes it here (``FleetNodeCapacity``, summed by
    ``fleet_capacity_sum``): instances the node agents report on GPUs that keep their
    layout (``observed``), and the instances of desired layouts still to be applied on GPUs
    being repartitioned (``planned``; they replace what those GPUs have now), both only on
    nodes whose agent reports and as far as the cluster's own Node objects confirm them (the
    GPUs they count, the MIG instances their device plugin advertises): a node token's word
    alone never counts."""

    observed: int
    planned: int
    gpus: int  # GPUs of the flavor's model counted: on fresh nodes, as far as the cluster confirms
    # The planner's page with this flavor's profile, model and cluster filled in, "{count}"
    # standing for the instances wanted; empty where no planner is offered.
    plan_link: str = ""
    # What the agents report that is not counted: nodes the cluster does not confirm (no Node
    # object of that name, a reading too old, another GPU product), nodes whose agent stopped
    # reporting, GPUs beyond the count the cluster confirms on a node, and instances beyond
    # what its device plugin advertises.
    unconfirmed_nodes: int = 0
    stale_nodes: int = 0
    unconfirmed_gpus: int = 0
    unconfirmed_instances: int = 0
    # False: the cluster confirms none of the GPUs of the flavor's model that report, so the
    # capacity stays the number an admin entered (this only says what was left out).
    confirmed: bool = True

    @property
    def total(self) -> int:
        return self.observed + self.planned

    @property
    def not_counted(self) -> str:
        """What is left out, in words for people ("" when nothing is)."""

        def n(count: int, one: str, many: str) -> str:
            return f"{count} {one if count == 1 else many}"

        parts = []
        if self.unconfirmed_nodes:
            parts.append(
                n(self.unconfirmed_nodes, "node", "nodes") + " the cluster does not confirm"
            )
        if self.stale_nodes:
            parts.append(
                n(self.stale_nodes, "node whose", "nodes whose") + " agent stopped reporting"
            )
        if self.unconfirmed_gpus:
            parts.append(n(self.unconfirmed_gpus, "GPU", "GPUs") + " beyond what the cluster sees")
        if self.unconfirmed_instances:
            parts.append(
                n(self.unconfirmed_instances, "instance", "instances")
                + " the device plugin does not advertise"
            )
        return "not counted: " + ", ".join(parts) if parts else ""

    def plan_for(self, count: int) -> str:
        """The planner's page asking for ``count`` instances ("" where none is offered)."""
        return self.plan_link.replace("{count}", str(count)) if self.plan_link else ""


@dataclass(frozen=True)
class Capacity:
    """A flavor's resource's capacity and where it comes from: the fleet (``fleet``) for the
    MIG resource of a MIG flavor whose GPUs report and the cluster confirms, else the number
    an admin entered."""

    amount: Decimal
    fleet: FleetCapacity | None = None


def fleet_capacity_sum(rows: Sequence[Any], *, now: datetime) -> FleetCapacity:
    """One MIG flavor's capacity from its nodes' parts (``FleetNodeCapacity`` rows, or the
    fleet's ``FleetNodeReading``: the same fields) at ``now``: a node counts while the
    cluster confirms it (``confirmed_until`` not past) and its agent reports (not
    ``stale``); the others are named in ``not_counted``. ``confirmed`` false when the
    cluster confirms none of them."""
    observed = planned = gpus = unconfirmed = stale = extra_gpus = extra_instances = 0
    confirmed_anywhere = False
    for row in rows:
        if row.confirmed_until is None or row.confirmed_until < now:
            unconfirmed += 1
            continue
        confirmed_anywhere = True
        if row.stale:
            stale += 1
            continue
        observed += row.observed
        planned += row.planned
        gpus += row.gpus
        extra_gpus += row.unconfirmed_gpus
        extra_instances += row.unconfirmed_instances
    return FleetCapacity(
        observed=observed,
        planned=planned,
        gpus=gpus,
        plan_link=next((row.plan_link for row in rows if row.plan_link), ""),
        unconfirmed_nodes=unconfirmed,
        stale_nodes=stale,
        unconfirmed_gpus=extra_gpus,
        unconfirmed_instances=extra_instances,
        confirmed=confirmed_anywhere,
    )


def _fleet_readings(
    cluster: Cluster, flavors: Sequence[ResourceFlavor]
) -> dict[int, FleetCapacity]:
    """What the fleet pushed (``FleetNodeCapacity``), unconfirmed flavors included (for the
    words): a MIG flavor with no row of its model and profile is left out. One query, none
    when no flavor of ``flavors`` is a MIG flavor."""
    mig = {
        f.pk: f
        for f in flavors
        if f.kind == FlavorKind.MIG and f.mig_profile and f.gpu_model and f.cluster_id == cluster.pk
    }
    if not mig:
        return {}
    by_flavor: dict[int, list[FleetNodeCapacity]] = defaultdict(list)
    for row in FleetNodeCapacity.objects.filter(flavor_id__in=list(mig)).order_by("node"):
        flavor = mig[row.flavor_id]
        if (row.gpu_model, row.mig_profile) == (flavor.gpu_model, flavor.mig_profile):
            by_flavor[row.flavor_id].append(row)
    now = timezone.now()
    return {pk: fleet_capacity_sum(rows, now=now) for pk, rows in by_flavor.items()}


def _fleet_capacities(
    cluster: Cluster, flavors: Sequence[ResourceFlavor]
) -> dict[int, FleetCapacity]:
    """The flavors whose capacity the fleet gives: those whose GPUs the cluster confirms."""
    return {k: v for k, v in _fleet_readings(cluster, flavors).items() if v.confirmed}


def fleet_capacities(
    *, cluster: Cluster, flavors: Sequence[ResourceFlavor]
) -> dict[int, FleetCapacity]:
    """By flavor id: what the fleet counts for ``cluster``'s MIG flavors among ``flavors``
    (as it pushed it: ``FleetNodeCapacity``); a flavor left out keeps the capacity an admin
    entered. No query when none of ``flavors`` is a MIG flavor."""
    return _fleet_capacities(cluster, flavors)


def flavor_capacities(*, cluster: Cluster) -> dict[tuple[int, str], Capacity]:
    """Per (flavor id, resource) of ``cluster``: its capacity. A MIG flavor's MIG resource
    counts what the fleet has (``FleetNodeCapacity``, pushed by the fleet), not the number
    typed in Django admin."""
    rows = list(FlavorResource.objects.filter(flavor__cluster=cluster).select_related("flavor"))
    fleet = _fleet_capacities(cluster, list({fr.flavor_id: fr.flavor for fr in rows}.values()))
    return {(fr.flavor_id, fr.resource): _capacity_of(fr, fleet.get(fr.flavor_id)) for fr in rows}


def flavor_capacity_rows(
    *,
    cluster: Cluster,
    exclude_quota_set: QuotaSet | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> list[FlavorResource]:
    """The cluster's flavor resources with their flavors, each with ``total`` (what all
    tenants are guaranteed of it) and ``own`` (``exclude_quota_set``'s guarantee of it), and
    the caller's ``annotations``: one query. ``flavor_capacities_and_guarantees`` reads
    them."""
    return list(flavor_capacity_query(cluster, exclude_quota_set, annotations))


def flavor_capacity_query(
    cluster: Cluster,
    exclude_quota_set: QuotaSet | None = None,
    annotations: Mapping[str, Any] | None = None,
) -> QuerySet[FlavorResource]:
    """``flavor_capacity_rows``'s query, not run (for ``core.prepared.prepared_objects``).
    Its parameters, in order: ``GRANT_HOLDING_STATES``, 0, ``exclude_quota_set``'s id (when
    it has one), the annotations', the cluster's id."""
    rows = FlavorResource.objects.filter(flavor__cluster=cluster).select_related("flavor")
    total = GuaranteeTotal.objects.filter(
        flavor_id=OuterRef("flavor_id"), resource=OuterRef("resource")
    )
    rows = rows.annotate(total=Subquery(total.values("guaranteed")), granted=grants_promised())
    if exclude_quota_set is not None and exclude_quota_set.pk is not None:
        own = Quota.objects.filter(
            quota_set=exclude_quota_set,
            flavor_id=OuterRef("flavor_id"),
            resource=OuterRef("resource"),
        )  # at most one row: (set, flavor, resource) is unique
        rows = rows.annotate(own=Subquery(own.values("guaranteed")))
    return rows.annotate(**(annotations or {}))


def flavor_capacities_and_guarantees(
    *,
    cluster: Cluster,
    rows: Sequence[FlavorResource],
    checked: Iterable[int] | None = None,
) -> tuple[
    dict[tuple[int, str], Capacity], dict[tuple[int, str], Decimal], dict[int, ResourceFlavor]
]:
    """``flavor_capacities`` and ``guarantees_by_flavor`` from ``flavor_capacity_rows`` (and
    the fleet's, one query, for a MIG flavor among ``checked``, the ids of the flavors whose
    lines will be checked; None: all), with the cluster's flavors (those with a capacity):
    what an approval reads under the cluster's lock before it writes. A MIG flavor not in
    ``checked`` keeps the capacity typed in."""
    wanted = None if checked is None else set(checked)
    flavors = {fr.flavor_id: fr.flavor for fr in rows}
    fleet = _fleet_capacities(
        cluster, [f for pk, f in flavors.items() if wanted is None or pk in wanted]
    )
    capacities, elsewhere = {}, {}
    for fr in rows:
        key = (fr.flavor_id, fr.resource)
        capacities[key] = _capacity_of(fr, fleet.get(fr.flavor_id))
        taken = (
            (getattr(fr, "total", None) or Decimal(0))
            - (getattr(fr, "own", None) or Decimal(0))
            + (getattr(fr, "granted", None) or Decimal(0))
        )
        if taken:
            elsewhere[key] = taken
    return capacities, elsewhere, flavors


def _capacity_of(fr: FlavorResource, fleet: FleetCapacity | None) -> Capacity:
    if fleet is not None and fr.resource == mig_resource(fr.flavor.mig_profile):
        return Capacity(Decimal(fleet.total), fleet)
    return Capacity(fr.capacity)


@dataclass(frozen=True)
class FlavorAllocation:
    flavor: ResourceFlavor
    resource: str
    capacity: Decimal
    guaranteed: Decimal
    fleet: FleetCapacity | None = None  # None: ``capacity`` is the number an admin entered
    # What the fleet's agents report that is not counted, in words ("" when nothing is): also
    # for an entered capacity whose GPUs report but are not confirmed by the cluster.
    not_counted: str = ""

    @property
    def free(self) -> Decimal:
        return self.capacity - self.guaranteed

    @property
    def shares_per_gpu(self) -> int | None:
        """R25: shares per GPU when this line counts time-sliced shares, else None."""
        if self.resource == GPU_RESOURCE and self.flavor.time_slicing_replicas:
            return self.flavor.time_slicing_replicas
        return None

    @property
    def entered(self) -> bool:
        """Whether an admin typed this capacity in (not a MIG flavor the fleet counts)."""
        return self.fleet is None

    @property
    def plan_url(self) -> str:
        """The planner's page asking for the instances tenants are guaranteed (at least one);
        "" for capacities the fleet does not count."""
        if self.fleet is None:
            return ""
        return self.fleet.plan_for(max(int(self.guaranteed), 1))


def cluster_allocations(*, cluster: Cluster) -> list[FlavorAllocation]:
    """Per flavor and resource: capacity (``flavor_capacities``: a MIG flavor's from the
    fleet) and the sum of all tenants' guarantees."""
    totals = guarantees_by_flavor(cluster=cluster)
    rows = list(
        FlavorResource.objects.filter(flavor__cluster=cluster)
        .select_related("flavor")
        .order_by("flavor__name", "resource")
    )
    readings = _fleet_readings(cluster, list({fr.flavor_id: fr.flavor for fr in rows}.values()))
    out = []
    for fr in rows:
        reading = readings.get(fr.flavor_id)
        capacity = _capacity_of(fr, reading if reading and reading.confirmed else None)
        words = ""
        if reading is not None and fr.resource == mig_resource(fr.flavor.mig_profile):
            words = reading.not_counted
        out.append(
            FlavorAllocation(
                fr.flavor,
                fr.resource,
                capacity.amount,
                totals.get((fr.flavor_id, fr.resource), Decimal(0)),
                capacity.fleet,
                words,
            )
        )
    return out


@dataclass
class TenantSyncRow:
    cluster: Cluster
    generation: int
    sync: TenantSync | None
    in_cluster: Any = None


def tenant_sync_rows(*, tenant: Tenant) -> list[TenantSyncRow]:
    """One row per cluster the tenant has quotas on: the generation in force and the push's
    state (two queries)."""
    syncs = {s.cluster_id: s for s in TenantSync.objects.filter(tenant=tenant)}
    return [
        TenantSyncRow(qs.cluster, qs.generation, syncs.get(qs.cluster_id))
        for qs in QuotaSet.objects.filter(tenant=tenant)
        .select_related("cluster")
        .order_by("cluster__name")
    ]


def sync_state_counts() -> list[tuple[Cluster, dict[str, int]]]:
    """Per cluster, how many tenants' quota sets stand in each sync state (one query); a quota
    set never pushed counts as pending."""
    state = Coalesce(
        Subquery(
            TenantSync.objects.filter(
                tenant_id=OuterRef("tenant_id"), cluster_id=OuterRef("cluster_id")
            ).values("state")[:1]
        ),
        Value(SyncState.PENDING.value),
    )
    rows = (
        QuotaSet.objects.annotate(sync_state=state)
        .values("cluster_id", "sync_state")
        .annotate(n=Count("id"))
        .order_by()
    )
    clusters = {c.pk: c for c in Cluster.objects.all()}
    counts: dict[int, dict[str, int]] = {}
    for row in rows:
        counts.setdefault(row["cluster_id"], {})[row["sync_state"]] = row["n"]
    return [(clusters[pk], counts[pk]) for pk in sorted(counts, key=lambda pk: clusters[pk].name)]


def syncs_needing_attention() -> QuerySet[TenantSync]:
    """Pushes that failed or are being retried, on clusters the portal pushes to."""
    return (
        TenantSync.objects.filter(state__in=(SyncState.FAILED, SyncState.APPLYING))
        .exclude(cluster__backend=SyncBackend.NONE)
        .select_related("tenant", "cluster")
        .order_by("state", "tenant__slug", "cluster__name")
    )


def cluster_enforcement(*, cluster: Cluster) -> dict[str, Any]:
    """How ``cluster`` keeps tenants within their limits, and whether work can get around it
    (``quotas.kube.enforcement.verdict``: its mode, Kubernetes version, flavors' GPU models and
    resource names, trusted operators and tenants' namespaces), with Kueue's configuration as
    last read."""
    config = KueueConfig.from_json(cluster.kueue_config) if cluster.kueue_config else None
    if cluster.has_kueue and cluster.kueue_config is None and not cluster.kueue_config_error:
        error = "not read yet: it is read at the next push"
    else:
        error = cluster.kueue_config_error
    found = verdict(
        mode=cluster.enforcement,
        has_kueue=cluster.has_kueue,
        config=config,
        config_error=error,
        kubernetes_version=cluster.kubernetes_version,
        flavors=cluster_spec(cluster).flavors,
        trusted_controllers=cluster.trusted_controllers,
        tenant_namespaces=list(
            Namespace.objects.filter(tenant__quota_sets__cluster=cluster)
            .values_list("name", flat=True)
            .distinct()
        ),
    )
    return {
        "mode": found.mode,
        "mode_display": Enforcement(found.mode).label,
        "bypass": found.bypass,
        "explanation": list(found.lines),
        "kueue_config": cluster.kueue_config,
        "kueue_config_error": error,
        "kueue_config_read_at": cluster.kueue_config_read_at,
    }


def _fair_spec(cluster: Cluster) -> fair_sharing.FairSharingSpec:
    return fair_sharing.FairSharingSpec(
        mode=cluster.fair_sharing,
        half_life_hours=cluster.usage_half_life_hours,
        sampling_minutes=cluster.usage_sampling_minutes,
    )


def _fair_offer(cluster: Cluster) -> fair_sharing.Offer:
    if cluster.has_kueue and cluster.kueue_config is None and not cluster.kueue_config_error:
        error = "not read yet: it is read at the next push"
    else:
        error = cluster.kueue_config_error
    return fair_sharing.offer(
        _fair_spec(cluster),
        has_kueue=cluster.has_kueue,
        config=cluster.kueue_config,
        config_error=error,
    )


def _recent_gpus(reading: FairShareReading) -> float | None:
    """Whole GPUs of the tenant's decayed use (None: Kueue keeps no record)."""
    consumed = reading.consumed if isinstance(reading.consumed, dict) else {}
    if reading.consumed_at is None and not consumed:
        return None
    return fair_sharing.consumed_total(consumed, [GPU_RESOURCE])


def _standings(cluster: Cluster, readings: Sequence[FairShareReading]) -> dict[int, dict[str, Any]]:
    """Per tenant id: its standing and recent use on ``cluster`` in words, ranked among the
    tenants read there."""
    borrowing = sorted(
        r.weighted_share
        for r in readings
        if r.weighted_share is not None and 0 < r.weighted_share < fair_sharing.MAX_SHARE
    )
    recent = {r.tenant_id: _recent_gpus(r) for r in readings}
    remembered = sorted((g for g in recent.values() if g is not None), reverse=True)
    result: dict[int, dict[str, Any]] = {}
    for reading in readings:
        share = reading.weighted_share
        gpus = recent[reading.tenant_id]
        rank = borrowing.index(share) + 1 if share in borrowing else 0
        result[reading.tenant_id] = {
            "weighted_share": share,
            "standing": fair_sharing.standing_words(share, rank=rank, borrowing=len(borrowing)),
            "recent_gpus": gpus,
            "recent_use": fair_sharing.recent_use_words(
                gpus,
                half_life_hours=cluster.usage_half_life_hours,
                rank=remembered.index(gpus) + 1 if gpus is not None else 0,
                teams=len(remembered),
            ),
            "consumed": reading.consumed if isinstance(reading.consumed, dict) else {},
            "read_at": reading.read_at,
        }
    return result


def cluster_fair_sharing(
    *, cluster: Cluster, tenant_slugs: Iterable[str] | None = None
) -> dict[str, Any]:
    """How ``cluster`` shares unused GPUs: the portal's settings, whether Kueue there does it
    (``quotas.kube.fair_sharing.offer``), the Kueue configuration an admin applies, and each
    tenant's standing and recent use as last collected (only of ``tenant_slugs`` where given:
    the tenants the reader may see; ranks still count every tenant)."""
    fair = _fair_spec(cluster)
    found = _fair_offer(cluster)
    readings = list(
        FairShareReading.objects.filter(cluster=cluster)
        .select_related("tenant")
        .order_by("tenant__slug")
    )
    standings = _standings(cluster, readings)
    shown = set(tenant_slugs) if tenant_slugs is not None else None
    return {
        "mode": fair.mode,
        "mode_display": FairSharing(fair.mode).label,
        "usage_half_life_hours": fair.half_life_hours,
        "usage_sampling_minutes": fair.sampling_minutes,
        "state": found.state,
        "explanation": list(found.lines),
        "kueue_configuration": fair_sharing.kueue_configuration_yaml(fair),
        "standings": [
            {
                "tenant": r.tenant.slug,
                "tenant_name": r.tenant.display_name,
                **standings[r.tenant_id],
            }
            for r in readings
            if shown is None or r.tenant.slug in shown
        ],
    }


def tenant_fair_sharing(
    *, tenant: Tenant, clusters: Sequence[Cluster] | None = None
) -> list[dict[str, Any]]:
    """Per cluster the tenant has quota on (``clusters`` where the caller has read them):
    how that cluster shares unused GPUs and, where Kueue reports it, the tenant's standing
    and recent use there. The standings are read only where a cluster asks for fair sharing."""
    if clusters is None:
        clusters = list(
            Cluster.objects.filter(quota_sets__tenant=tenant).distinct().order_by("name")
        )
    sharing = [c.pk for c in clusters if c.fair_sharing != FairSharing.NONE]
    readings = list(FairShareReading.objects.filter(cluster_id__in=sharing)) if sharing else []
    by_cluster: dict[int, list[FairShareReading]] = defaultdict(list)
    for reading in readings:
        by_cluster[reading.cluster_id].append(reading)
    result = []
    for cluster in clusters:
        found = _fair_offer(cluster)
        mine = _standings(cluster, by_cluster[cluster.pk]).get(tenant.pk)
        if cluster.fair_sharing == FairSharing.NONE:
            summary = (
                "This cluster does not share unused GPUs fairly: a team borrows them first "
                "come, first served."
            )
        elif found.state in ("missing", "unknown"):
            summary = (
                found.lines[-1]
                if found.state == "unknown"
                else (
                    "Kueue on this cluster does not offer the fair sharing the portal asks for: "
                    + " ".join(line for line in found.lines if "configuration" in line)
                )
            )
        else:
            summary = FairSharing(cluster.fair_sharing).label + "."
        result.append(
            {
                "cluster": cluster.name,
                "mode": cluster.fair_sharing,
                "state": found.state if cluster.fair_sharing != FairSharing.NONE else "off",
                "summary": summary,
                "standing": mine["standing"] if mine else None,
                "recent_use": mine["recent_use"] if mine else None,
                "recent_gpus": mine["recent_gpus"] if mine else None,
                "weighted_share": mine["weighted_share"] if mine else None,
                "read_at": mine["read_at"] if mine else None,
            }
        )
    return result


@dataclass(frozen=True)
class PipelineAccess:
    """How a team's pipeline reaches one of its namespaces (R29): the ServiceAccount the
    portal binds to ``edit`` (and Kueue's batch user role) there and the command that gives it
    a short-lived token."""

    namespace: str
    service_account: str
    token_command: str


def tenant_pipeline_access(
    *, tenant: Tenant, namespaces: Iterable[Namespace] | None = None
) -> dict[str, Any]:
    """Per namespace of ``tenant`` (``namespaces``, when the caller has read them): its
    ServiceAccount and ``kubectl create token`` line; the Kueue LocalQueue label jobs carry,
    and the tenant's clusters that run Kueue."""
    account = names.service_account(tenant.slug)
    if namespaces is None:
        namespaces = Namespace.objects.filter(tenant=tenant).order_by("name")
    clusters = (
        Cluster.objects.filter(quota_sets__tenant=tenant)
        .distinct()
        .order_by("name")
        .values_list("name", "has_kueue")
    )
    return {
        "namespaces": [
            PipelineAccess(
                namespace=ns.name,
                service_account=account,
                token_command=f"kubectl create token {account} -n {ns.name} --duration=1h",
            )
            for ns in namespaces
        ],
        "queue_label": f"kueue.x-k8s.io/queue-name: {names.LOCAL_QUEUE}",
        "kueue_clusters": [name for name, has_kueue in clusters if has_kueue],
    }


def tenant_isolation(*, tenant: Tenant) -> dict[str, Any]:
    """R23: the tenant's isolation level, its three layers (fault, performance, security) as
    the seed rates them, and which GPU flavors the level allows."""
    level = tenant.isolation_level
    return {
        "level": level,
        "label": IsolationLevel(level).label,
        "layers": isolation.LAYERS[level],
        "allowed": isolation.allowed_words(level),
    }


@dataclass(frozen=True)
class PodCap:
    """One per-pod cap (R16) as the LimitRange holds it: the amount, and whether the tenant
    set it through a request or the compiler derived it from the limits."""

    label: str
    resource: str
    amount: Decimal | None
    chosen: bool


@dataclass(frozen=True)
class PriorityRules:
    """A quota set's per-pod caps (R16) and its batch / inference split of whole GPUs (R17)."""

    cluster_name: str
    caps: list[PodCap]
    gpu_limit: Decimal
    inference_gpus: int | None
    # Shares per GPU when every GPU line is of time-sliced flavors alike (then nvidia.com/gpu
    # counts shares, and the pages say so); None: whole GPUs.
    shares_per_gpu: int | None = None

    @property
    def batch_gpus(self) -> Decimal | None:
        if self.inference_gpus is None:
            return None
        return max(self.gpu_limit - self.inference_gpus, Decimal(0))


def quota_set_priority_rules(*, quota_set: EffectiveQuotaSet) -> PriorityRules:
    """What the compiler makes of ``quota_set``'s caps and split (``quotas.kube.compiler``:
    a cap left empty is the largest limit on one flavor, at most 8 GPUs for GPUs)."""
    largest: dict[str, Decimal] = {}
    for item in quota_set.items:
        largest[item.resource] = max(largest.get(item.resource, Decimal(0)), item.limit)
    derived_gpus = largest.get(GPU_RESOURCE)
    if derived_gpus is not None:
        derived_gpus = min(derived_gpus, Decimal(DERIVED_MAX_GPUS_PER_POD))
    chosen_gpus = quota_set.max_gpus_per_pod
    caps = [
        PodCap(
            "GPUs per pod",
            GPU_RESOURCE,
            Decimal(chosen_gpus) if chosen_gpus is not None else derived_gpus,
            chosen_gpus is not None,
        ),
        PodCap(
            "CPU per container",
            CPU_RESOURCE,
            quota_set.max_cpu_per_pod
            if quota_set.max_cpu_per_pod is not None
            else largest.get(CPU_RESOURCE),
            quota_set.max_cpu_per_pod is not None,
        ),
        PodCap(
            "Memory per container",
            MEMORY_RESOURCE,
            quota_set.max_memory_per_pod
            if quota_set.max_memory_per_pod is not None
            else largest.get(MEMORY_RESOURCE),
            quota_set.max_memory_per_pod is not None,
        ),
    ]
    gpu_limit = sum(
        (item.limit for item in quota_set.items if item.resource == GPU_RESOURCE), Decimal(0)
    )
    replicas = {item.shares_per_gpu for item in quota_set.items if item.resource == GPU_RESOURCE}
    return PriorityRules(
        quota_set.cluster_name,
        caps,
        gpu_limit,
        quota_set.inference_gpus,
        replicas.pop() if len(replicas) == 1 else None,
    )


@dataclass(frozen=True)
class PriorityClassUse:
    """Whole GPUs one priority-scoped ResourceQuota of a namespace allows and uses, as the
    cluster reports them."""

    namespace: str
    label: str
    quota: str
    hard: Decimal
    used: Decimal


_PRIORITY_QUOTAS = {
    names.RESOURCE_QUOTA_INFERENCE: "Inference (production priority)",
    names.RESOURCE_QUOTA_BATCH: "Batch (every priority but production, or none)",
}


def _gpus(amounts: Mapping[str, Any] | None) -> Decimal:
    value = (amounts or {}).get(f"requests.{GPU_RESOURCE}")
    if value is None:
        return Decimal(0)
    try:
        return parse_resource_amount(GPU_RESOURCE, str(value))
    except QuantityError:
        return Decimal(0)


@dataclass(frozen=True)
class GpuUseCompared:
    """Whole GPUs in use as the two counts read together from the cluster say: ``queue``,
    what Kueue holds for the workloads it admitted (the ClusterQueue's usage, every flavor),
    counted from admission; ``pods``, what the pods in the tenant's namespaces request (each
    namespace's ResourceQuota), counted once they exist. They differ while admitted work's
    pods start (or finish), and by pods Kueue does not manage."""

    queue: Decimal
    pods: Decimal

    @property
    def differ(self) -> bool:
        return self.queue != self.pods


def gpu_use_compared(
    *, resource_quotas: Iterable[Mapping[str, Any]], cluster_queue: Mapping[str, Any] | None
) -> GpuUseCompared | None:
    """The ClusterQueue's whole GPUs in use beside the namespaces' pods' (``quotas.sync.
    in_cluster``'s read), or None without a queue."""
    if cluster_queue is None:
        return None
    queue = Decimal(0)
    for flavor in cluster_queue.get("flavors_usage") or []:
        for resource in flavor.get("resources") or []:
            if resource.get("name") == GPU_RESOURCE:
                try:
                    queue += parse_resource_amount(GPU_RESOURCE, str(resource.get("total") or 0))
                except QuantityError:
                    continue
    pods = sum(
        (_gpus(rq.get("used")) for rq in resource_quotas if rq["name"] == names.RESOURCE_QUOTA),
        Decimal(0),
    )
    return GpuUseCompared(queue, pods)


def priority_class_use(*, resource_quotas: Iterable[Mapping[str, Any]]) -> list[PriorityClassUse]:
    """The batch / inference split's use from the ResourceQuotas read live
    (``quotas.sync.in_cluster``): per namespace and class, the whole GPUs its scoped quota
    holds and what its pods use now, inference first; [] without a split."""
    order = list(_PRIORITY_QUOTAS)
    rows = [
        PriorityClassUse(
            rq["namespace"],
            _PRIORITY_QUOTAS[rq["name"]],
            rq["name"],
            _gpus(rq.get("hard")),
            _gpus(rq.get("used")),
        )
        for rq in resource_quotas
        if rq["name"] in _PRIORITY_QUOTAS
    ]
    return sorted(rows, key=lambda row: (row.namespace, order.index(row.quota)))


# Grants for a time (``quotas.services.grants``): what they hold of a line's capacity.

GrantKey = tuple[int, str]  # (flavor id, resource)


@dataclass(frozen=True)
class Peak:
    """The most other grants add to one line at any one moment of a window."""

    guaranteed: Decimal = Decimal(0)
    limit: Decimal = Decimal(0)


def grant_peaks(
    *,
    cluster: Cluster,
    keys: Iterable[GrantKey],
    starts_at: datetime,
    ends_at: datetime,
    tenant: Tenant | None = None,
    exclude: Grant | None = None,
) -> dict[GrantKey, Peak]:
    """Per line of ``keys``: the most that grants holding capacity on ``cluster`` (only
    ``tenant``'s, if given) add at once at any moment of [``starts_at``, ``ends_at``). Windows
    are half-open: a grant ending when another starts does not overlap it. One query."""
    wanted = set(keys)
    if not wanted:
        return {}
    lines = GrantLine.objects.filter(
        grant__cluster=cluster,
        grant__state__in=GRANT_HOLDING_STATES,
        grant__starts_at__lt=ends_at,
        grant__ends_at__gt=starts_at,
        flavor_id__in={k[0] for k in wanted},
    )
    if tenant is not None:
        lines = lines.filter(grant__tenant=tenant)
    if exclude is not None:
        lines = lines.exclude(grant=exclude)
    events: dict[GrantKey, list[tuple[datetime, int, Decimal, Decimal]]] = defaultdict(list)
    for flavor_id, resource, g, lim, start, end in lines.values_list(
        "flavor_id", "resource", "guaranteed", "limit", "grant__starts_at", "grant__ends_at"
    ):
        key = (flavor_id, resource)
        if key not in wanted:
            continue
        # An end sorts before a start at the same moment (0 < 1): half-open windows.
        events[key].append((max(start, starts_at), 1, g, lim))
        events[key].append((end, 0, -g, -lim))
    peaks = {}
    for key, found in events.items():
        g_now = l_now = g_max = l_max = Decimal(0)
        for _, _, g, lim in sorted(found, key=lambda e: (e[0], e[1])):
            g_now += g
            l_now += lim
            g_max, l_max = max(g_max, g_now), max(l_max, l_now)
        peaks[key] = Peak(g_max, l_max)
    return peaks


def grants_promised() -> Coalesce:
    """For an annotation of rows with ``flavor_id`` and ``resource`` (``GuaranteeTotal``,
    ``FlavorResource``): what every grant still holding capacity guarantees of that line,
    summed as if they all overlapped (what a standing change must leave room for)."""
    rows = GrantLine.objects.filter(
        flavor_id=OuterRef("flavor_id"),
        resource=OuterRef("resource"),
        grant__state__in=GRANT_HOLDING_STATES,
    ).order_by()
    summed = rows.values("flavor_id").annotate(total=Sum("guaranteed")).values("total")
    return Coalesce(Subquery(summed), Decimal(0), output_field=DecimalField())


# --- per-person caps (R14) ---------------------------------------------------------------------


@dataclass(frozen=True)
class PersonCapLine:
    """One cap line as pages and the API show it."""

    subject: str  # CapSubject
    username: str  # the member's; "" for the pipeline account and the default
    cluster: str
    flavor: str
    resource: str
    amount: Decimal
    cluster_queue: str  # the person's ClusterQueue on that cluster ("" for the default)


def person_cap_lines(*, tenant: Tenant) -> list[PersonCapLine]:
    """Every cap of ``tenant``: its members', its pipeline account's and its default, with
    the ClusterQueue each person's work is admitted through. One query."""
    rows = (
        PersonCap.objects.filter(tenant=tenant)
        .select_related("flavor__cluster", "membership__user")
        .order_by("subject", "membership__user__username", "flavor__cluster__name", "flavor__name")
    )
    lines = []
    for cap in rows:
        username = cap.membership.user.username if cap.membership is not None else ""
        queue = ""
        if cap.subject != CapSubject.DEFAULT:
            person = PersonSpec(username, (), pipeline=cap.subject == CapSubject.PIPELINE)
            queue = cluster_queue_name(tenant.slug, person)
        lines.append(
            PersonCapLine(
                subject=cap.subject,
                username=username,
                cluster=cap.flavor.cluster.name,
                flavor=cap.flavor.name,
                resource=cap.resource,
                amount=cap.amount,
                cluster_queue=queue,
            )
        )
    return lines


def person_cap_targets(*, tenant: Tenant) -> list[tuple[str, str, str]]:
    """The (cluster, flavor, resource) lines a person's cap may be set on: those the tenant's
    quota covers (``Quota`` rows of its quota sets), in cluster and flavor order."""
    return list(
        Quota.objects.filter(quota_set__tenant=tenant)
        .order_by("quota_set__cluster__name", "flavor__name", "resource")
        .values_list("quota_set__cluster__name", "flavor__name", "resource")
    )


def vgpu_flavor_problems(cluster: Cluster) -> dict[str, str]:
    """The cluster's vGPU flavors nothing is pushed for, each with the reason in words (HAMi
    not found, its version unreadable or older than ``quotas.vgpu.HAMI_MIN_VERSION``, as last
    read by the push: ``quotas.sync.hami_refresh``); {} when every vGPU flavor is usable. For
    the cluster's page and for refusing a vGPU quota line on such a cluster (400)."""
    problem = hami_problem(cluster.hami_version)
    if not problem:
        return {}
    if cluster.hami_read_at is None:
        problem += " (the portal has not read the cluster yet: its next push will)"
    flavors = ResourceFlavor.objects.filter(cluster=cluster, kind=FlavorKind.VGPU)
    return {name: problem for name in flavors.order_by("name").values_list("name", flat=True)}


def vgpu_kueue_problem(cluster: Cluster) -> str:
    """Why the cluster's Kueue does not count vGPU memory and compute ('' when it does, or
    when the cluster has no vGPU flavor or no Kueue, or its configuration was not read): a
    warning for the cluster's page; the flavors stay usable."""
    config = cluster.kueue_config
    if not cluster.has_kueue or not isinstance(config, dict):
        return ""
    if not ResourceFlavor.objects.filter(cluster=cluster, kind=FlavorKind.VGPU).exists():
        return ""
    found = config.get("vgpuTransformations")
    return kueue_vgpu_problem(list(found) if isinstance(found, list) else [])
