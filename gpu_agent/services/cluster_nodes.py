"""What each cluster says of its GPU nodes, read through the Kubernetes API and kept per portal
``Node`` (``cluster_seen_at``, ``cluster_gpus``, ``cluster_gpu_product``, ``cluster_mig``; the
pure part is ``gpu_agent.cluster_nodes``).

A node's agent says which GPUs and MIG instances it has; only the cluster can confirm them (the
Node object the kubelet registered, the device plugin's ``status.allocatable``, GPU Feature
Discovery's labels). Fleet capacity counts a node's GPUs only as far as this reading confirms
them (``gpu_agent.selectors.mig_capacity``), so a node token alone cannot raise what approvals
check against.

``cluster_nodes_read`` lists the cluster's Nodes with its kubeconfig (as the push does) and
stores, for each portal node of that cluster, the reading of the Node of the same name, or
none when the cluster has no such Node. Run every minute for clusters reached through the
Kubernetes API (``gpu_agent.tasks.read_cluster_nodes``); idempotent. A cluster out of reach
keeps its last readings: each ages out ``CLUSTER_NODES_STALE_AFTER_S`` after it was taken
(``gpu_agent.conf.cluster_nodes_stale_after``) and then confirms nothing, as a node whose
agent stopped reporting counts nothing. The portal never writes a Node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from gpu_agent.cluster_nodes import read_node
from gpu_agent.models import Node
from gpu_agent.services.capacity import cluster_capacity_push
from quotas.backends import cluster_backend
from quotas.choices import SyncBackend
from quotas.kube.applier import ApplyError, KubernetesBackend, RetryableError
from quotas.kube.resources import NODE
from quotas.models import Cluster

logger = logging.getLogger(__name__)

_FIELDS = ["cluster_seen_at", "cluster_gpus", "cluster_gpu_product", "cluster_mig"]


@dataclass
class ClusterNodesOutcome:
    confirmed: list[str] = field(default_factory=list)  # portal nodes the cluster has
    unknown: list[str] = field(default_factory=list)  # portal nodes the cluster has no Node of
    error: str = ""  # the cluster was not read: its readings were kept (they age out)
    retryable: bool = False

    @property
    def ok(self) -> bool:
        return not self.error


def cluster_nodes_clusters() -> list[Cluster]:
    """Clusters whose Nodes the portal can read: through the Kubernetes API."""
    return list(Cluster.objects.filter(backend=SyncBackend.KUBERNETES).order_by("name"))


def cluster_nodes_read(*, cluster: Cluster, now: datetime | None = None) -> ClusterNodesOutcome:
    """Read ``cluster``'s Nodes and store what they say of the portal's nodes there. A cluster
    out of reach (or not reached through the Kubernetes API) changes nothing: its readings
    age out."""
    try:
        with cluster_backend(cluster) as backend:
            if not isinstance(backend, KubernetesBackend):
                raise ApplyError(
                    f"cluster {cluster.name}: its Nodes are read through the Kubernetes API "
                    f"(backend {cluster.backend})"
                )
            objects = backend.list_all(NODE)
    except RetryableError as exc:
        logger.warning("cluster %s: Nodes not read: %s", cluster.name, exc.message)
        return ClusterNodesOutcome(error=exc.message, retryable=True)
    except ApplyError as exc:
        logger.warning("cluster %s: Nodes not read: %s", cluster.name, exc.message)
        return ClusterNodesOutcome(error=exc.message)
    return cluster_nodes_record(cluster=cluster, objects=objects, now=now)


@transaction.atomic
def cluster_nodes_record(
    *, cluster: Cluster, objects: Iterable[Mapping[str, Any]], now: datetime | None = None
) -> ClusterNodesOutcome:
    """Store the readings of ``objects`` (the cluster's Node objects, all of them, as read at
    ``now``) on ``cluster``'s portal nodes: a node with no Node object of its name gets none.
    One query, two when anything changed."""
    now = now or timezone.now()
    by_name = {}
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name")
        if isinstance(name, str) and name:
            by_name[name] = read_node(obj)
    outcome = ClusterNodesOutcome()
    changed = []
    # No lock: only these four fields are written, which nothing else writes (an agent's
    # report updates its own fields), and a later reading simply wins.
    nodes = Node.objects.filter(cluster=cluster).only("pk", "name", *_FIELDS).order_by("name")
    for node in nodes:
        reading = by_name.get(node.name)
        if reading is None:
            outcome.unknown.append(node.name)
            values: dict[str, Any] = {
                "cluster_seen_at": None,
                "cluster_gpus": None,
                "cluster_gpu_product": "",
                "cluster_mig": {},
            }
        else:
            outcome.confirmed.append(node.name)
            values = {
                "cluster_seen_at": now,
                "cluster_gpus": reading.gpus,
                "cluster_gpu_product": reading.product[:253],
                "cluster_mig": reading.mig,
            }
        if any(getattr(node, k) != v for k, v in values.items()):
            for k, v in values.items():
                setattr(node, k, v)
            changed.append(node)
    if changed:
        Node.objects.bulk_update(changed, _FIELDS)
        cluster_capacity_push(cluster=cluster)  # what the cluster confirms of MIG capacity
    return outcome
