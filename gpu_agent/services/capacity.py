"""The fleet tells quotas what MIG flavors' capacity is (R24): whenever a node's part changes
(a report that writes, a desired layout set or finished, a reading of the cluster's Nodes,
a node gone stale or moved), its parts are pushed through
``quotas.services.fleet_node_capacity_set``. quotas never asks: it reads what was pushed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial, wraps
from typing import Any, TypeVar

from django.db import transaction

from gpu_agent.models import Node
from gpu_agent.selectors import node_mig_readings
from quotas.choices import FlavorKind
from quotas.models import Cluster, ResourceFlavor
from quotas.services import FleetNodeReading, fleet_node_capacity_set

T = TypeVar("T")


def nodes_capacity_push(*, nodes: Iterable[Node], moved: bool = False) -> int:
    """Push the MIG capacity parts of ``nodes``, each on its cluster. A node without a
    cluster, or on one without MIG flavors, has none to push: it is skipped unless ``moved``
    (its cluster changed: then it loses the parts it had). A query per cluster for its
    flavors, three for its nodes' GPUs and layouts, at most three to store (none when nothing
    is pushed); returns the rows written or removed."""
    by_cluster: dict[int | None, list[Node]] = {}
    for node in nodes:
        by_cluster.setdefault(node.cluster_id, []).append(node)
    readings: dict[str, list[FleetNodeReading]] = {}
    for cluster_id, members in by_cluster.items():
        flavors = (
            list(
                ResourceFlavor.objects.filter(
                    cluster_id=cluster_id, kind=FlavorKind.MIG
                ).select_related("cluster")
            )
            if cluster_id is not None
            else []
        )
        if flavors or moved:
            readings.update({node.name: [] for node in members})
        if flavors:
            node_ids = [n.pk for n in members]
            cluster = flavors[0].cluster
            readings.update(node_mig_readings(cluster=cluster, flavors=flavors, node_ids=node_ids))
    return fleet_node_capacity_set(readings=readings)


def node_capacity_push(*, node: Node) -> int:
    """``nodes_capacity_push`` for one node."""
    return nodes_capacity_push(nodes=[node])


def cluster_capacity_push(*, cluster: Cluster) -> int:
    """``nodes_capacity_push`` for every node of ``cluster`` (after a reading of its Nodes)."""
    return nodes_capacity_push(
        nodes=Node.objects.filter(cluster=cluster).only("pk", "name", "cluster_id")
    )


def node_capacity_pushed(ingest: Callable[..., T]) -> Callable[..., T]:
    """``ingest(*, node, ...)`` (a report's writes), then, once they commit, the push of
    ``node``'s MIG capacity parts in a transaction of its own (like ``REPORT_INGESTED``: the
    report's transaction stays short and its queries few; a failing push is logged, and the
    node's next report that writes pushes again). What the report changed (instances, a
    layout it confirmed or reopened, the node no longer stale) so reaches quotas."""

    @wraps(ingest)
    def wrapper(*args: Any, node: Node, **kwargs: Any) -> T:
        answer = ingest(*args, node=node, **kwargs)
        if node.cluster_id is not None:  # a node without a cluster has no part to push
            transaction.on_commit(partial(node_capacity_push, node=node), robust=True)
        return answer

    return wrapper
