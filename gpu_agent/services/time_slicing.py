"""Time-sliced GPUs: point each node's device plugin at its flavor's sharing config (R25; the
pure part and the why are in ``gpu_agent.time_slicing``).

``time_slicing_push`` reads the device plugin's ConfigMap the quota sync pushed and the
cluster's Nodes, labels each node of a time-sliced flavor ``nvidia.com/device-plugin.config=
<flavor>`` (the plugin's config-manager restarts the plugin on that change), and where only
the content under a node's label changed, restarts the device plugin's pods on that node, as
the agent does after a MIG change. Run every beat for clusters reached through the Kubernetes
API (``gpu_agent.tasks.time_slicing_sync``) and safe to run twice: a pass with nothing new
writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_agent import time_slicing
from gpu_spec.device_plugin import DEFAULT_SELECTOR
from quotas.backends import cluster_backend
from quotas.choices import SyncBackend
from quotas.kube import names
from quotas.kube.applier import ApplyError, KubernetesBackend, RetryableError
from quotas.kube.resources import CONFIG_MAP, NODE, POD
from quotas.models import Cluster
from tenants.services import audit_record


@dataclass
class TimeSlicingOutcome:
    labelled: list[str] = field(default_factory=list)  # nodes whose label changed
    unlabelled: list[str] = field(default_factory=list)  # nodes no shared flavor selects now
    restarted: dict[str, list[str]] = field(default_factory=dict)  # node -> plugin pods deleted
    deferred: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""
    retryable: bool = False

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def changed(self) -> bool:
        return bool(self.labelled or self.unlabelled or self.restarted)


def time_slicing_clusters() -> list[Cluster]:
    """Clusters whose device plugins the portal can reach: through the Kubernetes API."""
    return list(Cluster.objects.filter(backend=SyncBackend.KUBERNETES).order_by("name"))


def shared_flavors(*, cluster: Cluster) -> list[time_slicing.SharedFlavor]:
    return [
        time_slicing.SharedFlavor(f.name, dict(f.node_labels or {}))
        for f in cluster.flavors.filter(time_slicing_replicas__isnull=False).order_by("name")
    ]


def _restart_device_plugin(backend: KubernetesBackend, node: str) -> list[str]:
    """Delete the device plugin's pods on ``node``; its DaemonSet starts new ones."""
    deleted = []
    for pod in backend.list_all(POD, DEFAULT_SELECTOR):
        metadata = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if metadata.get("namespace") != names.TIME_SLICING_NAMESPACE:
            continue
        backend.delete(POD, namespace=metadata["namespace"], name=metadata["name"])
        deleted.append(str(metadata["name"]))
    return deleted


def time_slicing_push(*, cluster: Cluster) -> TimeSlicingOutcome:
    """Label the nodes of ``cluster``'s time-sliced flavors and restart the device plugin where
    only its config's content changed. Errors are in the outcome, never raised."""
    outcome = TimeSlicingOutcome()
    flavors = shared_flavors(cluster=cluster)
    try:
        with cluster_backend(cluster) as backend:
            if not isinstance(backend, KubernetesBackend):
                return outcome  # node labels only go through the Kubernetes API
            live_cm = backend.read(
                CONFIG_MAP,
                namespace=names.TIME_SLICING_NAMESPACE,
                name=names.TIME_SLICING_CONFIGMAP,
            )
            # With no shared flavor, only nodes still labelled can need a change (the label
            # removed): a cluster of 10,000 nodes is not listed whole every minute for nothing.
            selector = "" if flavors else time_slicing.LABEL_CONFIG
            live_nodes = {
                n["metadata"]["name"]: n["metadata"] for n in backend.list_all(NODE, selector)
            }
            wanted = time_slicing.plan(
                flavors, live_nodes=live_nodes, configmap_data=(live_cm or {}).get("data") or {}
            )
            outcome.waiting, outcome.conflicts = wanted.waiting, wanted.conflicts
            for patch in wanted.patches:
                try:
                    backend.merge_patch(NODE, namespace=None, name=patch.node, body=patch.body)
                except RetryableError as exc:
                    if exc.status == 409:  # changed since it was read: next pass
                        outcome.deferred.append(patch.node)
                        continue
                    raise
                except ApplyError as exc:
                    if exc.status == 404:  # gone since the list
                        continue
                    raise
                if patch.restart:
                    outcome.restarted[patch.node] = _restart_device_plugin(backend, patch.node)
                elif patch.config:
                    outcome.labelled.append(patch.node)
                else:
                    outcome.unlabelled.append(patch.node)
    except RetryableError as exc:
        outcome.error, outcome.retryable = exc.message, True
    except ApplyError as exc:
        outcome.error = exc.message
    if outcome.changed:
        audit_record(
            actor=None,
            action="time_slicing.nodes_configured",
            obj=cluster,
            after={
                "labelled": outcome.labelled,
                "unlabelled": outcome.unlabelled,
                "restarted": outcome.restarted,
            },
        )
    return outcome
