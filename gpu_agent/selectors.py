"""Reads of the GPU fleet: nodes, GPUs with their instances and layouts, the fleet's counts,
the tenants' MIG quotas as the planner's demand, what the GPU Operator's labels said, and what
MIG flavors' capacity is (``mig_capacity``: instances observed or planned, R24).
Fleet data is for platform admins: every selector that answers a person takes the actor and
shows nothing (or 404) to anyone else; the helpers without an actor serve the services and
the pages' own checks. Imports no service."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.urls import reverse
from django.utils import timezone

from core.errors import NotFound
from gpu_agent.cluster_nodes import product_matches
from gpu_agent.conf import cluster_nodes_stale_after, stale_after
from gpu_agent.models import (
    OPEN_LAYOUT_STATES,
    Gpu,
    LayoutState,
    MigInstance,
    MigLayout,
    MigOperatorNode,
    Node,
)
from gpu_spec.mig.catalogue import load_catalogue, normalise_model_name
from gpu_spec.mig.planner import Demand
from quotas.choices import MIG_RESOURCE_PREFIX, FlavorKind, MigDriver, mig_resource
from quotas.models import Cluster, Quota, ResourceFlavor
from quotas.selectors import FleetCapacity, fleet_capacity_sum
from quotas.services import FleetNodeReading
from tenants.models import User


def _is_admin(user: User) -> bool:
    return bool(user.is_authenticated and user.is_platform_admin)


def node_is_stale(node: Node) -> bool:
    """Stale when the periodic task said so, or when its last report is older than the limit
    (the task runs every 30 s; this answers right away)."""
    if node.stale:
        return True
    seen = node.last_report_at or node.created_at
    return seen < timezone.now() - stale_after()


def is_operator_driven(gpu: Gpu) -> bool:
    """The GPU's cluster repartitions MIG through NVIDIA's GPU Operator (no agent applies
    its layouts)."""
    cluster = gpu.node.cluster
    return cluster is not None and cluster.mig_driver == MigDriver.GPU_OPERATOR


def node_list(*, user: User) -> QuerySet[Node]:
    """Nodes with their GPU and MIG instance counts."""
    if not _is_admin(user):
        return Node.objects.none()
    return (
        Node.objects.select_related("cluster")
        .annotate(
            gpu_count=Count("gpus", distinct=True),
            mig_gpu_count=Count("gpus", filter=Q(gpus__mig_mode_current=True), distinct=True),
            instance_count=Count("gpus__instances", distinct=True),
            busy_instance_count=Count(
                "gpus__instances", filter=Q(gpus__instances__busy=True), distinct=True
            ),
        )
        .order_by("name")
    )


def _latest_layout_ids() -> Subquery:
    return Subquery(
        MigLayout.objects.filter(gpu=OuterRef("pk")).order_by("-generation").values("pk")[:1]
    )


def _attach_layouts(gpus: Sequence[Any]) -> None:
    """Set ``gpu.current_layout`` (the latest generation, or None) in one query."""
    ids = [g.latest_layout_id for g in gpus if g.latest_layout_id]
    layouts = {
        layout.pk: layout
        for layout in MigLayout.objects.filter(pk__in=ids).select_related("requested_by")
    }
    for gpu in gpus:
        layout = layouts.get(gpu.latest_layout_id)
        if layout is not None:
            layout.gpu = gpu
        gpu.current_layout = layout


def node_get(*, user: User, name: str) -> Node:
    """A node with its GPUs (``node.gpu_rows``), their instances and current layouts; 404 for
    anyone but platform admins. Four queries whatever the node's size."""
    node = Node.objects.select_related("cluster").filter(name=name).first()
    if node is None or not _is_admin(user):
        raise NotFound("No such node.")
    gpus = list(
        Gpu.objects.filter(node=node)
        .annotate(latest_layout_id=_latest_layout_ids())
        .prefetch_related(Prefetch("instances", queryset=MigInstance.objects.order_by("start")))
        .order_by("index")
    )
    _attach_layouts(gpus)
    node.gpu_rows = gpus  # type: ignore[attr-defined]
    return node


def gpu_get(*, user: User, uuid: str) -> Gpu:
    """A GPU with its node and its current layout (``gpu.current_layout``); 404 for anyone but
    platform admins."""
    gpu = (
        Gpu.objects.select_related("node__cluster")
        .annotate(latest_layout_id=_latest_layout_ids())
        .filter(uuid=uuid)
        .first()
    )
    if gpu is None or not _is_admin(user):
        raise NotFound("No such GPU.")
    _attach_layouts([gpu])
    return gpu


@dataclass(frozen=True)
class FleetOverview:
    nodes: int
    nodes_stale: int
    gpus: int
    gpus_mig_enabled: int
    instances: int
    instances_busy: int
    layouts_open: int
    layouts_draining: int
    layouts_reboot_required: int
    layouts_failed: int

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def fleet_overview(*, user: User) -> FleetOverview:
    """Counts for a fleet dashboard, in four queries."""
    if not _is_admin(user):
        raise NotFound("No such fleet.")
    cutoff = timezone.now() - stale_after()
    nodes = Node.objects.aggregate(
        total=Count("pk"),
        stale=Count(
            "pk",
            filter=Q(stale=True)
            | Q(last_report_at__lt=cutoff)
            | Q(last_report_at__isnull=True, created_at__lt=cutoff),
        ),
    )
    gpus = Gpu.objects.aggregate(
        total=Count("pk"), mig=Count("pk", filter=Q(mig_mode_current=True))
    )
    instances = MigInstance.objects.aggregate(
        total=Count("pk"), busy=Count("pk", filter=Q(busy=True))
    )
    # Only the latest generation of a GPU can be open; failed counts the latest ones only.
    latest = MigLayout.objects.filter(
        pk__in=Gpu.objects.annotate(latest=_latest_layout_ids()).values("latest")
    )
    layouts = latest.aggregate(
        open=Count("pk", filter=Q(state__in=OPEN_LAYOUT_STATES) & Q(waiting_for=[])),
        draining=Count("pk", filter=Q(state=LayoutState.PENDING) & ~Q(waiting_for=[])),
        reboot=Count("pk", filter=Q(state=LayoutState.REBOOT_REQUIRED)),
        failed=Count("pk", filter=Q(state=LayoutState.FAILED)),
    )
    return FleetOverview(
        nodes=nodes["total"],
        nodes_stale=nodes["stale"],
        gpus=gpus["total"],
        gpus_mig_enabled=gpus["mig"],
        instances=instances["total"],
        instances_busy=instances["busy"],
        layouts_open=layouts["open"],
        layouts_draining=layouts["draining"],
        layouts_reboot_required=layouts["reboot"],
        layouts_failed=layouts["failed"],
    )


# --- for the fleet pages --------------------------------------------------------------------


def gpus_with_instances() -> QuerySet[Gpu]:
    """GPUs with their node and observed instances (with the tenant, where known)."""
    return (
        Gpu.objects.select_related("node", "node__cluster")
        .prefetch_related(
            Prefetch(
                "instances",
                queryset=MigInstance.objects.select_related("tenant").order_by("start"),
            )
        )
        .order_by("node__name", "index")
    )


def latest_layouts(gpus: QuerySet[Gpu]) -> dict[int, MigLayout]:
    """The latest desired layout of each GPU of ``gpus``, by GPU id, in one query."""
    latest = Subquery(
        MigLayout.objects.filter(gpu=OuterRef("gpu")).order_by("-generation").values("pk")[:1]
    )
    rows = MigLayout.objects.filter(gpu__in=gpus.values("pk"), pk=latest).select_related(
        "requested_by"
    )
    return {layout.gpu_id: layout for layout in rows}


def layout_history(gpu: Gpu, *, limit: int = 10) -> list[MigLayout]:
    """The latest ``limit`` desired layouts of ``gpu``, newest first."""
    return list(
        MigLayout.objects.filter(gpu=gpu)
        .select_related("requested_by")
        .order_by("-generation")[:limit]
    )


@dataclass(frozen=True)
class QuotaDemand:
    """A tenant's guaranteed MIG instances on a cluster, as the planner's demand."""

    tenant: str
    cluster: str
    flavor: str
    demand: Demand


def quota_demand(*, cluster: Cluster | None) -> list[QuotaDemand]:
    """Demand from the tenants' quotas on MIG flavors: ``count`` = guaranteed instances of
    the flavor's profile, on the flavor's GPU model. One query."""
    quotas = (
        Quota.objects.filter(
            flavor__kind=FlavorKind.MIG,
            resource__startswith=MIG_RESOURCE_PREFIX,
            guaranteed__gt=0,
        )
        .select_related("flavor", "quota_set__tenant", "quota_set__cluster")
        .order_by("quota_set__cluster__name", "quota_set__tenant__slug", "flavor__name")
    )
    if cluster is not None:
        quotas = quotas.filter(quota_set__cluster=cluster)
    found = []
    for quota in quotas:
        flavor = quota.flavor
        if quota.resource != mig_resource(flavor.mig_profile):
            continue
        found.append(
            QuotaDemand(
                tenant=quota.quota_set.tenant.slug,
                cluster=quota.quota_set.cluster.name,
                flavor=flavor.name,
                demand=Demand(
                    profile=flavor.mig_profile,
                    count=int(quota.guaranteed),
                    tenant=quota.quota_set.tenant.slug,
                    model=flavor.gpu_model or None,
                ),
            )
        )
    return found


def mig_operator_states(*, user: User, nodes: Sequence[Node]) -> dict[int, MigOperatorNode]:
    """For nodes of ``gpu-operator`` clusters: what their MIG labels said when last read
    (node pk -> row), in one query. Nodes of agent clusters have none."""
    if not _is_admin(user):
        return {}
    wanted = {
        (n.cluster_id, n.name): n.pk
        for n in nodes
        if n.cluster is not None and n.cluster.mig_driver == MigDriver.GPU_OPERATOR
    }
    if not wanted:
        return {}
    rows = MigOperatorNode.objects.filter(
        cluster_id__in={c for c, _ in wanted}, node_name__in={n for _, n in wanted}
    )
    return {
        wanted[(row.cluster_id, row.node_name)]: row
        for row in rows
        if (row.cluster_id, row.node_name) in wanted
    }


def _same_model(flavor_model: str, gpu_name: str) -> bool:
    """Whether a flavor's GPU model and a GPU's NVML name are one model: the catalogue's
    entry for both (aliases, no "NVIDIA " prefix), else the names compared loosely."""
    catalogue = load_catalogue()
    wanted, seen = catalogue.find_model(flavor_model), catalogue.find_model(gpu_name)
    if wanted is not None and seen is not None:
        return wanted is seen
    return normalise_model_name(flavor_model) == normalise_model_name(gpu_name)


def _plan_link(cluster: Cluster, flavor: ResourceFlavor) -> str:
    """The planner's page (``/fleet/plan/``) asking for this flavor's profile on its model and
    cluster; "{count}" stands for the number of instances."""
    query = urlencode(
        {
            "source": "manual",
            "cluster": cluster.name,
            "demand-0-profile": flavor.mig_profile,
            "demand-0-count": "COUNT",
            "demand-0-model": flavor.gpu_model,
        }
    ).replace("COUNT", "{count}")
    return f"{reverse('portal:fleet-plan')}?{query}"


def cluster_confirmation(node: Node, *, now: datetime | None = None) -> tuple[bool, str]:
    """Whether the node's cluster confirms it (its Node object as last read, not too long
    ago), and what it says, in words for the fleet page."""
    now = now or timezone.now()
    seen = node.cluster_seen_at
    if node.cluster_id is None:
        return False, "no cluster set: its GPUs count toward no capacity"
    if seen is None:
        return False, "not confirmed by the cluster: no Node of this name was read there"
    if seen < now - cluster_nodes_stale_after():
        return False, "not confirmed by the cluster: its Nodes could not be read lately"
    gpus = node.cluster_gpus or 0
    words = f"the cluster confirms {gpus} GPU{'' if gpus == 1 else 's'}"
    if node.cluster_gpu_product:
        words += f" ({node.cluster_gpu_product})"
    mig = node.cluster_mig if isinstance(node.cluster_mig, dict) else {}
    if mig:
        words += ", advertising " + ", ".join(f"{n} x {p}" for p, n in sorted(mig.items()))
    return bool(gpus), words


def _confirmed_gpus(node: Node, gpu_name: str, *, since: datetime) -> int:
    """How many GPUs named ``gpu_name`` the cluster confirms on ``node``: 0 when its reading is
    missing (no Node object of that name), older than ``since``, or names another product;
    else the GPUs its Node counts."""
    seen = node.cluster_seen_at
    if seen is None or seen < since or not node.cluster_gpus:
        return 0
    if not product_matches(node.cluster_gpu_product, gpu_name):
        return 0
    return node.cluster_gpus


def mig_capacity(
    *, cluster: Cluster, flavors: Sequence[ResourceFlavor]
) -> dict[int, FleetCapacity]:
    """What the cluster's GPUs are partitioned into now, per MIG flavor of ``flavors`` (by
    id): the nodes' parts (``node_mig_readings``) summed as quotas sums what the fleet pushed
    (``quotas.selectors.fleet_capacity_sum``). A flavor with no GPU of its model reporting is
    left out, and one whose GPUs the cluster confirms nowhere comes back with ``confirmed``
    false, for the words only: both keep the number an admin entered, so a made-up agent
    never raises a capacity. Four queries."""
    by_flavor: dict[int, list[FleetNodeReading]] = {}
    for node_readings in node_mig_readings(cluster=cluster, flavors=flavors).values():
        for reading in node_readings:
            by_flavor.setdefault(reading.flavor_id, []).append(reading)
    now = timezone.now()
    return {pk: fleet_capacity_sum(rows, now=now) for pk, rows in by_flavor.items()}


def node_mig_readings(
    *,
    cluster: Cluster,
    flavors: Sequence[ResourceFlavor],
    node_ids: Sequence[int] | None = None,
) -> dict[str, list[FleetNodeReading]]:
    """Per node of ``cluster`` (only ``node_ids`` when given) reporting GPUs of a MIG flavor's
    model among ``flavors``: its part of each such flavor's capacity (what the fleet pushes
    into quotas, ``quotas.services.fleet_node_capacity_set``), as far as the cluster
    confirms it: never on a node token's word alone. Nodes with no GPU of any flavor's
    model have no entry.

    A node counts nothing when the cluster does not confirm it (no Node object of its name
    at the last reading of the cluster's Nodes, that reading older than
    ``CLUSTER_NODES_STALE_AFTER_S``, or a ``nvidia.com/gpu.product`` label naming another
    model): ``confirmed_until`` None. Else its first GPUs (by index), as many as the cluster
    counts on it (``Node.cluster_gpus``), each counting the instances of the flavor's
    profile its open desired layout will make (a repartition under way: pending or
    applying), else those its agent reports, these at most the node's advertised
    ``nvidia.com/mig-<profile>`` (``Node.cluster_mig``); ``confirmed_until`` is when the
    cluster's reading stops confirming it, and ``stale`` says its agent stopped reporting
    (it then counts nothing). Three queries (none without MIG flavors)."""
    wanted = [f for f in flavors if f.kind == FlavorKind.MIG and f.mig_profile and f.gpu_model]
    if not wanted:
        return {}
    gpus_query = Gpu.objects.filter(node__cluster=cluster)
    if node_ids is not None:
        gpus_query = gpus_query.filter(node_id__in=list(node_ids))
    gpus = list(
        gpus_query.select_related("node")
        .prefetch_related(
            Prefetch("instances", queryset=MigInstance.objects.only("gpu", "profile"))
        )
        .order_by("node__name", "index", "pk")
    )
    if not gpus:
        return {}
    layouts = latest_layouts(Gpu.objects.filter(pk__in=[g.pk for g in gpus]))
    window = cluster_nodes_stale_after()
    since = timezone.now() - window
    found: dict[str, list[FleetNodeReading]] = {}
    for flavor in wanted:
        by_node: dict[int, list[Gpu]] = {}
        for gpu in gpus:
            if _same_model(flavor.gpu_model, gpu.name):
                by_node.setdefault(gpu.node_id, []).append(gpu)
        plan_link = _plan_link(cluster, flavor) if by_node else ""
        for node_gpus in by_node.values():
            node = node_gpus[0].node
            reading = _node_reading(
                flavor, node, node_gpus, layouts, since=since, window=window, plan_link=plan_link
            )
            found.setdefault(node.name, []).append(reading)
    return found


def _node_reading(
    flavor: ResourceFlavor,
    node: Node,
    node_gpus: Sequence[Gpu],
    layouts: dict[int, MigLayout],
    *,
    since: datetime,
    window: timedelta,
    plan_link: str,
) -> FleetNodeReading:
    """``node``'s part of ``flavor``'s capacity (``node_mig_readings``)."""
    unconfirmed = FleetNodeReading(
        flavor.pk, flavor.gpu_model, flavor.mig_profile, plan_link=plan_link
    )
    confirmed = _confirmed_gpus(node, node_gpus[0].name, since=since)
    if not confirmed or node.cluster_seen_at is None:
        return unconfirmed
    profile = flavor.mig_profile
    counted = node_gpus[:confirmed]
    planned = reported = 0
    for gpu in counted:
        layout = layouts.get(gpu.pk)
        if layout is not None and layout.state in OPEN_LAYOUT_STATES:
            if layout.mig_enabled:
                planned += sum(
                    1
                    for instance in layout.instances or []
                    if isinstance(instance, dict) and instance.get("profile") == profile
                )
            continue
        reported += sum(1 for i in gpu.instances.all() if i.profile == profile)
    advertised = _advertised(node, profile)
    return replace(
        unconfirmed,
        observed=min(reported, advertised),
        planned=planned,
        gpus=len(counted),
        unconfirmed_gpus=len(node_gpus) - len(counted),
        unconfirmed_instances=max(reported - advertised, 0),
        confirmed_until=node.cluster_seen_at + window,
        stale=node_is_stale(node),
    )


def _advertised(node: Node, profile: str) -> int:
    """The node's ``nvidia.com/mig-<profile>`` as the cluster last read it (0: none)."""
    value = (node.cluster_mig or {}).get(profile) if isinstance(node.cluster_mig, dict) else 0
    return value if isinstance(value, int) and value > 0 else 0
