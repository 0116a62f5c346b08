"""The way to a cluster: the backend its settings name (the Kubernetes API, a folder of YAML
for GitOps, or none), opened for one piece of work and closed after it, and the operations
on cluster objects the portal reads but does not own (a Kueue Workload's ``spec.active``).

Everything that talks to a cluster goes through ``cluster_backend``: the push and the
reconcile (``quotas.sync``), the usage collector, the alerts' suspensions and the MIG
operator path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.conf import settings

from quotas.choices import SyncBackend
from quotas.kube.applier import ApplyError, Backend, KubernetesBackend, ManifestsBackend
from quotas.kube.resources import WORKLOAD
from quotas.models import Cluster


class NoBackend(ApplyError):
    """The cluster is set to keep quotas in the portal only, or has no way to reach it."""


def backend_for(cluster: Cluster) -> Backend:
    """A new backend for ``cluster``; the caller closes it (``cluster_backend`` does). The
    Kubernetes API takes ``KUBE_APPLY_CONCURRENCY`` writes at once; a folder of YAML one."""
    if cluster.backend == SyncBackend.MANIFESTS:
        if not cluster.manifests_dir:
            raise NoBackend(f"cluster {cluster.name} has no manifests directory set")
        return ManifestsBackend(cluster.manifests_dir)
    if cluster.backend == SyncBackend.KUBERNETES:
        concurrency = settings.KUBE_APPLY_CONCURRENCY
        if cluster.in_cluster:
            return KubernetesBackend.in_cluster(concurrency=concurrency)
        if not cluster.kubeconfig_path:
            raise NoBackend(f"cluster {cluster.name} has no kubeconfig path and is not in-cluster")
        try:
            return KubernetesBackend.from_kubeconfig(
                cluster.kubeconfig_path, concurrency=concurrency
            )
        except Exception as exc:  # a missing or broken kubeconfig file: say which
            raise NoBackend(f"cluster {cluster.name}: kubeconfig unusable: {exc}") from exc
    raise NoBackend(f"cluster {cluster.name} keeps quotas in the portal only (backend none)")


@contextlib.contextmanager
def cluster_backend(cluster: Cluster) -> Iterator[Backend]:
    """``with cluster_backend(cluster) as backend:``: the cluster's backend for the block,
    closed on leaving it (its connections with it), whatever happens inside. Raises
    ``NoBackend`` when the cluster has none to open."""
    backend = backend_for(cluster)
    try:
        yield backend
    finally:
        backend.close()


def workload_set_active(*, cluster: Cluster, namespace: str, name: str, active: bool) -> None:
    """Set ``spec.active`` of a Kueue Workload (a merge patch): false, Kueue evicts it and
    releases its quota (R12); true, it queues again. Raises ``ApplyError`` when the cluster
    is not reached through the Kubernetes API, or refuses."""
    if cluster.backend != SyncBackend.KUBERNETES:
        raise ApplyError(
            f"cluster {cluster.name} is not reached through the Kubernetes API "
            f"(backend {cluster.backend}): its workloads cannot be suspended from the portal"
        )
    with cluster_backend(cluster) as backend:
        backend.merge_patch(
            WORKLOAD, namespace=namespace, name=name, body={"spec": {"active": active}}
        )
