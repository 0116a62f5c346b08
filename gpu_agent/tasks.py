"""Celery tasks for the GPU fleet: thin, idempotent (safe to run twice or concurrently). Each
calls one service; no service imports this module (one that queues a task after its commit
sends it by name, ``core.tasks.enqueue``)."""

from __future__ import annotations

from celery import shared_task

from gpu_agent.services import (
    cluster_nodes,
    layouts,
    mig_operator,
    nodes,
    probes,
    proposals,
    time_slicing,
)
from quotas.models import Cluster


@shared_task(name="gpu_agent.tasks.mark_stale_nodes", ignore_result=True)
def mark_stale_nodes() -> int:
    """Nodes whose agent missed its reports (``AGENT_STALE_AFTER_S``) become stale."""
    return len(nodes.nodes_mark_stale())


@shared_task(name="gpu_agent.tasks.read_cluster_nodes", ignore_result=True)
def read_cluster_nodes() -> int:
    """Every cluster reached through the Kubernetes API: what its Node objects say of the
    portal's nodes (the GPUs and MIG instances fleet capacity may count). A cluster out of
    reach keeps its last readings, which age out. Returns the clusters not read."""
    return sum(
        not cluster_nodes.cluster_nodes_read(cluster=cluster).ok
        for cluster in cluster_nodes.cluster_nodes_clusters()
    )


@shared_task(name="gpu_agent.tasks.fail_overdue_layouts", ignore_result=True)
def fail_overdue_layouts() -> int:
    """Desired layouts not applied by their deadline fail, with the reason."""
    return len(layouts.layouts_fail_overdue())


@shared_task(
    name="gpu_agent.tasks.operator_push_cluster",
    ignore_result=True,
    autoretry_for=(Exception,),
    retry_backoff=True,
    max_retries=5,
)
def operator_push_cluster(cluster_id: int) -> None:
    """MIG through the GPU Operator: write the mig-parted ConfigMap and node labels of one
    cluster (queued by ``layout_set`` once it commits)."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is not None:
        mig_operator.operator_push(cluster=cluster)


@shared_task(name="gpu_agent.tasks.operator_sync", ignore_result=True)
def operator_sync() -> int:
    """Every ``gpu-operator`` cluster: push, read the MIG manager's state labels back, and fail
    layouts past their deadline. Returns the clusters whose pass failed."""
    failures = 0
    for cluster in mig_operator.operator_clusters():
        if not mig_operator.operator_sync(cluster=cluster).ok:
            failures += 1
    mig_operator.operator_layouts_fail_overdue()
    return failures


@shared_task(name="gpu_agent.tasks.time_slicing_sync", ignore_result=True)
def time_slicing_sync() -> int:
    """Every cluster reached through the Kubernetes API: label the nodes of its time-sliced
    flavors with their device plugin config, restart the plugin where only the config's
    content changed. Returns the clusters whose pass failed."""
    return sum(
        not time_slicing.time_slicing_push(cluster=cluster).ok
        for cluster in time_slicing.time_slicing_clusters()
    )


@shared_task(name="gpu_agent.tasks.refresh_plan_proposals", ignore_result=True)
def refresh_plan_proposals() -> int:
    """The MIG planner over each cluster's GPUs and its tenants' MIG quotas; a proposal is
    stored only when it changed. Admins apply it from /fleet/plan/."""
    return len(proposals.plan_proposals_refresh_all())


@shared_task(name="gpu_agent.tasks.fail_overdue_probes", ignore_result=True)
def fail_overdue_probes() -> int:
    """Isolation probes without a result by the deadline fail, with the reason."""
    return len(probes.probes_fail_overdue())
