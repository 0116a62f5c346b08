"""MIG through NVIDIA's GPU Operator: the services (the pure compiler is ``gpu_agent.operator``).

For a cluster whose ``mig_driver`` is ``gpu-operator`` the node agent does not apply layouts
(``layouts.agent_desired`` leaves such GPUs out); instead:

1. ``operator_push``: from the latest desired layout of each GPU, write the mig-parted ConfigMap
   through the cluster-sync applier (its own owner label, so neither it nor the quota sync
   prunes the other's objects), then patch ``nvidia.com/mig.config`` on the Nodes that exist
   (a merge patch with the node's resourceVersion: it never creates a Node, and touches no
   label but that one and the state label it resets to ``pending``). Queued on commit by
   ``layouts.layout_set`` (``gpu_agent.tasks.operator_push_cluster``, sent by name) and run
   every beat by ``operator_sync``.
2. ``operator_read_state``: read each node's ``nvidia.com/mig.config.state`` and move the
   layouts: ``success`` applies them, ``failed`` fails them with the reason, ``pending`` and
   ``rebooting`` mark them applying; ``operator_layouts_fail_overdue`` fails those past their
   deadline, naming what the node's labels say. What was read is kept per node
   (``MigOperatorNode``) for the fleet pages.

The Kubernetes Node name is the portal's ``Node.name`` (what the agent registered as; the
kubelet's node name). mig-parted places instances itself: only the profile counts of a layout
reach the GPU, not its starts (see ``gpu_agent.operator``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from gpu_agent import operator
from gpu_agent.conf import operator_settle_time
from gpu_agent.models import OPEN_LAYOUT_STATES, LayoutState, MigLayout, MigOperatorNode
from gpu_agent.services.capacity import nodes_capacity_push
from quotas.backends import cluster_backend
from quotas.choices import MigDriver
from quotas.kube.applier import (
    ApplyError,
    ApplyResult,
    Backend,
    KubernetesBackend,
    RetryableError,
    Scope,
    apply_objects,
)
from quotas.kube.resources import CONFIG_MAP, NODE
from quotas.models import Cluster
from tenants.services import audit_record

# Layouts the operator may still be working on (reboot-required is the agent's word; the
# operator reboots by itself, "rebooting", which maps to applying).
_OPEN = (*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED)


def operator_clusters() -> list[Cluster]:
    return list(Cluster.objects.filter(mig_driver=MigDriver.GPU_OPERATOR).order_by("name"))


def _latest_layouts(cluster: Cluster) -> list[MigLayout]:
    """The latest generation of each GPU's layout on ``cluster``'s nodes (one query)."""
    latest = Subquery(
        MigLayout.objects.filter(gpu=OuterRef("gpu_id")).order_by("-generation").values("pk")[:1]
    )
    return list(
        MigLayout.objects.filter(gpu__node__cluster=cluster, pk=latest)
        .select_related("gpu__node")
        .order_by("gpu__node__name", "gpu__index")
    )


def nodes_wanted(
    *, cluster: Cluster
) -> tuple[list[operator.NodeWanted], dict[str, list[MigLayout]]]:
    """Each node's desired layouts as the compiler takes them, and the layouts behind them
    (node name -> latest layouts). A layout still draining (``waiting_for``) is left out: its
    GPU keeps what it has, as mig-parted leaves GPUs no entry names."""
    by_node: dict[str, list[MigLayout]] = {}
    for layout in _latest_layouts(cluster):
        if layout.waiting_for:
            continue
        by_node.setdefault(layout.gpu.node.name, []).append(layout)
    nodes = [
        operator.NodeWanted(
            name=name,
            gpus=tuple(
                operator.GpuWanted(
                    index=layout.gpu.index,
                    model=layout.gpu.name,
                    mig_enabled=layout.mig_enabled,
                    profiles=tuple(i["profile"] for i in layout.instances),
                )
                for layout in layouts
            ),
        )
        for name, layouts in by_node.items()
    ]
    return nodes, by_node


@dataclass
class OperatorPushOutcome:
    configmap: ApplyResult | None = None
    labelled: list[str] = field(default_factory=list)
    deferred: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)
    node_configs: dict[str, str] = field(default_factory=dict)
    error: str = ""
    retryable: bool = False

    @property
    def ok(self) -> bool:
        return not self.error and (self.configmap is None or not self.configmap.failed)


def _kubernetes(cluster: Cluster, backend: Backend) -> KubernetesBackend:
    if not isinstance(backend, KubernetesBackend):
        raise ApplyError(
            f"cluster {cluster.name}: MIG through the GPU Operator needs the Kubernetes API "
            f"backend (node labels cannot go through {cluster.backend})"
        )
    return backend


def operator_push(*, cluster: Cluster, now: datetime | None = None) -> OperatorPushOutcome:
    """Write the mig-parted ConfigMap and set the node labels whose config has settled in it
    (see the module docstring). Idempotent: a pass with nothing new writes nothing."""
    now = now or timezone.now()
    outcome = OperatorPushOutcome()
    nodes, layouts = nodes_wanted(cluster=cluster)
    try:
        with cluster_backend(cluster) as opened:
            backend = _kubernetes(cluster, opened)
            live_cm = backend.read(
                CONFIG_MAP,
                namespace=cluster.mig_operator_namespace,
                name=cluster.mig_operator_configmap,
            )
            live_text = ((live_cm or {}).get("data") or {}).get(cluster.mig_operator_config_key)
            live_configs = operator.parse_live_configs(live_text)
            live_nodes = {n["metadata"]["name"]: n["metadata"] for n in backend.list_all(NODE)}
            plan = operator.compile_operator(
                nodes,
                now=now,
                live_configs=live_configs,
                live_since=operator.parse_since(
                    ((live_cm or {}).get("metadata") or {}).get("annotations")
                ),
                live_labels={k: m.get("labels") or {} for k, m in live_nodes.items()},
            )
            outcome.problems = plan.problems
            outcome.node_configs = plan.node_configs
            desired = operator.configmap(
                plan,
                cluster=cluster.name,
                namespace=cluster.mig_operator_namespace,
                name=cluster.mig_operator_configmap,
                key=cluster.mig_operator_config_key,
            )
            outcome.configmap = apply_objects(
                backend,
                [desired],
                Scope(cluster.name, managed_by=operator.MANAGED_BY_MIG),
                kinds=[CONFIG_MAP],
            )
            if outcome.configmap.failed:  # the API server refused it: no label may name it
                raise ApplyError("; ".join(m for _, m in outcome.configmap.failed))
            patches, outcome.deferred, outcome.missing = operator.label_patches(
                plan,
                live_nodes=live_nodes,
                ready_configs=plan.ready(now=now, settle=operator_settle_time()),
            )
            for patch in patches:
                try:
                    backend.merge_patch(NODE, namespace=None, name=patch.node, body=patch.body)
                except RetryableError as exc:
                    if exc.status == 409:  # the node changed since it was read: next pass
                        outcome.deferred.append(patch.node)
                        continue
                    raise
                except ApplyError as exc:
                    if exc.status == 404:  # gone since the list: never created
                        outcome.missing.append(patch.node)
                        continue
                    raise
                if "labels" in patch.body["metadata"]:
                    outcome.labelled.append(patch.node)
    except RetryableError as exc:
        outcome.error, outcome.retryable = exc.message, True
    except ApplyError as exc:
        outcome.error = exc.message
    _record_push(cluster, outcome, layouts, now)
    return outcome


@transaction.atomic
def _record_push(
    cluster: Cluster,
    outcome: OperatorPushOutcome,
    layouts: dict[str, list[MigLayout]],
    now: datetime,
) -> None:
    for node_name, node_layouts in layouts.items():
        open_ids = [la.pk for la in node_layouts if la.state in _OPEN]
        if not open_ids:
            continue
        config = outcome.node_configs.get(node_name, "")
        problems = outcome.problems.get(node_name)
        if problems:
            _fail(open_ids, "the GPU Operator cannot apply it: " + "; ".join(problems), now)
            continue
        if outcome.error:
            message = f"pushing the MIG config failed: {outcome.error}"
        elif node_name in outcome.missing:
            message = (
                f"node {node_name} is not in cluster {cluster.name} (labels go on Nodes that exist)"
            )
        elif node_name in outcome.labelled:
            message = (
                f"label {operator.LABEL_CONFIG}={config} set; the GPU Operator's MIG manager "
                "applies it (it places instances itself: counts are kept, starts are not)"
            )
            MigLayout.objects.filter(pk__in=open_ids, state=LayoutState.PENDING).update(
                state=LayoutState.APPLYING, updated_at=now
            )
        elif node_name in outcome.deferred:
            message = (
                f"config {config} written to ConfigMap {cluster.mig_operator_namespace}/"
                f"{cluster.mig_operator_configmap}; the node label follows once the kubelet "
                f"has refreshed it ({int(operator_settle_time().total_seconds())} s)"
            )
        else:
            continue
        MigLayout.objects.filter(pk__in=open_ids, state__in=_OPEN).update(
            message=message[:2000], updated_at=now
        )
        if node_name in outcome.labelled or node_name in outcome.missing:
            MigOperatorNode.objects.update_or_create(
                cluster=cluster,
                node_name=node_name,
                defaults={
                    "desired_config": config,
                    "present": node_name not in outcome.missing,
                    "message": message[:2000],
                    **({"label_set_at": now} if node_name in outcome.labelled else {}),
                },
            )


def _fail(layout_ids: Sequence[int], reason: str, now: datetime) -> list[MigLayout]:
    failed = []
    for layout in MigLayout.objects.filter(pk__in=layout_ids, state__in=_OPEN).select_related(
        "gpu__node"
    ):
        updated = MigLayout.objects.filter(pk=layout.pk, state=layout.state).update(
            state=LayoutState.FAILED, message=reason[:2000], updated_at=now
        )
        if not updated:
            continue
        audit_record(
            actor=None,
            action="mig_layout.failed",
            obj=layout,
            object_id=f"{layout.gpu.uuid}@{layout.generation}",
            before={"state": layout.state},
            after={"state": LayoutState.FAILED, "message": reason, "driver": "gpu-operator"},
        )
        failed.append(layout)
    nodes_capacity_push(nodes={layout.gpu.node_id: layout.gpu.node for layout in failed}.values())
    return failed


def _succeed(layout_ids: Sequence[int], message: str, now: datetime) -> list[MigLayout]:
    done = []
    for layout in MigLayout.objects.filter(pk__in=layout_ids, state__in=_OPEN).select_related(
        "gpu__node"
    ):
        updated = MigLayout.objects.filter(pk=layout.pk, state=layout.state).update(
            state=LayoutState.SUCCESS, message=message, applied_at=now, updated_at=now
        )
        if not updated:
            continue
        audit_record(
            actor=None,
            action="mig_layout.success",
            obj=layout,
            object_id=f"{layout.gpu.uuid}@{layout.generation}",
            before={"state": layout.state},
            after={"state": LayoutState.SUCCESS, "message": message, "driver": "gpu-operator"},
        )
        done.append(layout)
    nodes_capacity_push(nodes={layout.gpu.node_id: layout.gpu.node for layout in done}.values())
    return done


def operator_read_state(
    *, cluster: Cluster, now: datetime | None = None
) -> dict[str, operator.NodeVerdict]:
    """Read the MIG manager's state labels of the nodes with desired layouts and move their
    layouts (success, failed, applying). Returns node name -> verdict."""
    now = now or timezone.now()
    nodes, layouts = nodes_wanted(cluster=cluster)
    plan = operator.compile_operator(nodes, now=now)
    with cluster_backend(cluster) as opened:
        backend = _kubernetes(cluster, opened)
        live = {n["metadata"]["name"]: n["metadata"] for n in backend.list_all(NODE)}
    verdicts: dict[str, operator.NodeVerdict] = {}
    with transaction.atomic():
        for node_name, node_layouts in layouts.items():
            desired = plan.node_configs.get(node_name)
            if desired is None:
                continue
            metadata = live.get(node_name)
            labels = (metadata or {}).get("labels") or {}
            verdict = (
                operator.read_state(
                    desired=desired, labels=labels, namespace=cluster.mig_operator_namespace
                )
                if metadata is not None
                else operator.NodeVerdict("waiting", f"node {node_name} is not in the cluster")
            )
            verdicts[node_name] = verdict
            open_ids = [la.pk for la in node_layouts if la.state in _OPEN]
            if verdict.outcome == operator.STATE_SUCCESS:
                _succeed(open_ids, verdict.message, now)
            elif verdict.outcome == operator.STATE_FAILED:
                _fail(open_ids, verdict.message, now)
            elif verdict.outcome == "applying":
                MigLayout.objects.filter(pk__in=open_ids, state__in=_OPEN).update(
                    state=LayoutState.APPLYING, message=verdict.message, updated_at=now
                )
            MigOperatorNode.objects.update_or_create(
                cluster=cluster,
                node_name=node_name,
                defaults={
                    "desired_config": desired,
                    "label_config": labels.get(operator.LABEL_CONFIG, ""),
                    "label_state": labels.get(operator.LABEL_STATE, ""),
                    "present": metadata is not None,
                    "message": verdict.message[:2000],
                    "observed_at": now,
                },
            )
    return verdicts


def operator_layouts_fail_overdue(*, now: datetime | None = None) -> list[MigLayout]:
    """Fail open layouts of ``gpu-operator`` clusters past their deadline, with what the
    node's labels said last. (``layouts_fail_overdue`` leaves these to this function.)"""
    now = now or timezone.now()
    overdue = list(
        MigLayout.objects.filter(
            gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR,
            state__in=_OPEN,
            deadline__lt=now,
        ).select_related("gpu__node__cluster")
    )
    failed: list[MigLayout] = []
    for layout in overdue:
        node = layout.gpu.node
        seen = MigOperatorNode.objects.filter(cluster=node.cluster, node_name=node.name).first()
        said = (
            f"its {operator.LABEL_CONFIG} is {seen.label_config or 'unset'} and "
            f"{operator.LABEL_STATE} is {seen.label_state or 'unset'}"
            if seen is not None
            else "its labels were never read"
        )
        created = layout.created_at
        minutes = round((now - created).total_seconds() / 60) if created else 0
        reason = (
            f"not applied by the GPU Operator within {minutes} minutes on node {node.name}: {said}"
        )
        with transaction.atomic():
            failed.extend(_fail([layout.pk], reason, now))
    return failed


def operator_sync(*, cluster: Cluster, now: datetime | None = None) -> OperatorPushOutcome:
    """One beat for one cluster: push (ConfigMap, then labels whose config is in place), then
    read the state labels back."""
    outcome = operator_push(cluster=cluster, now=now)
    if not outcome.error:
        try:
            operator_read_state(cluster=cluster, now=now)
        except ApplyError as exc:
            outcome.error, outcome.retryable = exc.message, isinstance(exc, RetryableError)
    return outcome
