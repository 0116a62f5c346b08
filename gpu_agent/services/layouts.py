"""Desired MIG layouts: set by admins (``layout_set``: the GPU model's placement rules, busy
instances refused or drained), what each agent has to apply (``agent_desired``), the agents'
results (``agent_result``, the device plugin's re-advertising included), and open layouts
failed past their deadline. A ``gpu-operator`` cluster's layouts are applied by the GPU
Operator instead (``mig_operator``; queued here by name, after commit)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from core.tasks import enqueue
from gpu_agent.conf import layout_deadline
from gpu_agent.models import OPEN_LAYOUT_STATES, Gpu, LayoutState, MigLayout, Node
from gpu_agent.selectors import is_operator_driven
from gpu_agent.services.capacity import node_capacity_push, nodes_capacity_push
from gpu_agent.services.common import MESSAGE_MAX, check_length, iso
from gpu_spec.mig.catalogue import load_catalogue
from gpu_spec.mig.layout import InstanceRequest, validate_layout
from quotas.choices import MigDriver
from tenants.models import User
from tenants.services import audit_record

logger = logging.getLogger(__name__)

# The agent reports this gi_id in ``MigLayout.waiting_for`` for processes on a GPU outside MIG
# instances (a MIG mode change resets the whole GPU).
WHOLE_GPU = -1

# The task that pushes a gpu-operator cluster's MIG config (sent by name: tasks import
# services, never the reverse).
OPERATOR_PUSH_TASK = "gpu_agent.tasks.operator_push_cluster"


# --- set by admins --------------------------------------------------------------------------


def _validate_placements(
    *, gpu: Gpu, instances: Sequence[Mapping[str, Any]]
) -> list[tuple[str, int, int]]:
    """(profile, start, size) for every requested instance, or 400 with every broken rule."""
    model = load_catalogue().find_model(gpu.name)
    if model is None:
        raise ValidationFailed.for_field(
            "instances", f"{gpu.name} has no MIG profiles in the catalogue; it cannot be split."
        )
    result = validate_layout(
        model,
        [InstanceRequest(profile=i["profile"], start=i.get("start")) for i in instances],
    )
    if not result.ok:
        issues = getattr(result, "issues", None) or []
        pairs = (
            [(issue.path, issue.message) for issue in issues]
            if issues
            else [(_error_field(str(e)), str(e)) for e in result.errors]
        )
        fields: dict[str, list[str]] = {}
        for path, message in pairs:
            fields.setdefault(path, []).append(message)
        rules = sorted({issue.rule for issue in issues})
        raise ValidationFailed(
            "; ".join(f"{path}: {message}" for path, message in pairs),
            fields=fields,
            **({"rules": rules} if rules else {}),
        )
    return [(p.profile, p.start, p.size) for p in result.placements]


def _error_field(message: str) -> str:
    """The field an error of the layout validator is about when it gives no path:
    ``instances[i].field`` when the message names it, else ``instances``."""
    match = re.search(r"instances\[\d+\](?:\.\w+)?", message)
    return match.group(0) if match else "instances"


def busy_destroyed_by(
    *, gpu: Gpu, keep: set[tuple[str, int]], mig_enabled: bool
) -> list[tuple[int, str]]:
    """(gi_id or WHOLE_GPU, why) for every busy thing a layout keeping ``keep`` (profile,
    start) would destroy: what makes ``layout_set`` answer 409 unless drained. The portal's
    live check asks the same question here, so the two cannot disagree."""
    found: list[tuple[int, str]] = []
    resets = mig_enabled != gpu.mig_mode_current
    if resets and gpu.processes:
        found.append((WHOLE_GPU, f"GPU {gpu.uuid} is busy: {_pids(gpu.processes)}"))
    for instance in gpu.instances.all():
        if not instance.busy:
            continue
        if not resets and mig_enabled and (instance.profile, instance.start) in keep:
            continue
        found.append(
            (
                instance.gi_id,
                f"instance {instance.gi_id} ({instance.profile} at slice {instance.start}) is "
                f"busy: {_pids(instance.processes)}",
            )
        )
    return found


def _pids(processes: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for p in processes:
        pod = f" (pod {p['pod_uid']})" if p.get("pod_uid") else ""
        parts.append(f"pid {p['pid']}{pod}")
    return ", ".join(parts)


@transaction.atomic
def layout_set(
    *,
    gpu: Gpu,
    instances: Sequence[Mapping[str, Any]],
    actor: User,
    drain: bool = False,
    mig_enabled: bool = True,
) -> MigLayout:
    """Set ``gpu``'s desired MIG layout: validated against the GPU model's placement rules
    (400 naming ``instances[i].field``), refused when it would destroy a busy instance (409
    naming it and its processes) unless ``drain``: then queued until they go idle. Bumps the
    generation; earlier open layouts fail as superseded; the agent has until the deadline."""
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu.pk)
    if not mig_enabled and instances:
        raise ValidationFailed.for_field(
            "instances", "A GPU with MIG disabled has no MIG instances; send an empty list."
        )
    placements = _validate_placements(gpu=gpu, instances=instances) if mig_enabled else []
    busy = busy_destroyed_by(
        gpu=gpu,
        keep={(profile, start) for profile, start, _ in placements},
        mig_enabled=mig_enabled,
    )
    if busy and not drain:
        raise Conflict(
            "The layout would destroy what is running: "
            + "; ".join(why for _, why in busy)
            + ". Send drain: true to apply it once they are idle.",
            fields={"instances": [why for _, why in busy]},
        )
    now = timezone.now()
    top = MigLayout.objects.filter(gpu=gpu).aggregate(top=Max("generation"))["top"] or 0
    generation = top + 1
    superseded = list(
        MigLayout.objects.filter(
            gpu=gpu, state__in=[*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED]
        ).values_list("generation", flat=True)
    )
    if superseded:
        MigLayout.objects.filter(gpu=gpu, generation__in=superseded).update(
            state=LayoutState.FAILED,
            message=f"superseded by generation {generation}",
            updated_at=now,
        )
    waiting = [gi for gi, _ in busy]
    layout = MigLayout.objects.create(
        gpu=gpu,
        generation=generation,
        mig_enabled=mig_enabled,
        instances=[{"profile": profile, "start": start} for profile, start, _ in placements],
        state=LayoutState.PENDING,
        message=waiting_message(waiting) if waiting else "",
        waiting_for=waiting,
        requested_by=actor,
        deadline=None if waiting else now + layout_deadline(),
    )
    audit_record(
        actor=actor,
        action="mig_layout.set",
        obj=layout,
        object_id=f"{gpu.uuid}@{generation}",
        after={
            "node": gpu.node.name,
            "gpu": gpu.uuid,
            "generation": generation,
            "mig_enabled": mig_enabled,
            "instances": layout.instances,
            "drain": drain,
            "waiting_for": waiting,
            "superseded": superseded,
        },
    )
    if is_operator_driven(gpu):
        # The GPU Operator's MIG manager applies it, not an agent: push the cluster's
        # ConfigMap and node labels once this commits (instead of waiting for the beat).
        cluster_id = gpu.node.cluster_id
        assert cluster_id is not None  # is_operator_driven: the node has a cluster
        transaction.on_commit(partial(_operator_push_later, cluster_id))
    node_capacity_push(node=gpu.node)  # its planned instances count from now on
    return layout


def _operator_push_later(cluster_id: int) -> None:
    try:
        enqueue(OPERATOR_PUSH_TASK, [cluster_id])
    except Exception:  # no broker: the beat's operator_sync pushes within a minute
        logger.warning("could not queue the MIG push of cluster %s", cluster_id)


def waiting_message(waiting: Sequence[int]) -> str:
    """What a drained layout waits for, for its ``message``."""
    names = [("processes outside MIG" if gi == WHOLE_GPU else f"instance {gi}") for gi in waiting]
    return f"waiting for {', '.join(names)} to go idle"


# --- what the agents apply, and their results -----------------------------------------------


@dataclass(frozen=True)
class DesiredGpu:
    uuid: str
    generation: int
    mig_enabled: bool
    instances: list[dict[str, Any]] = field(default_factory=list)


def agent_desired(*, node: Node) -> list[DesiredGpu]:
    """The GPUs of ``node`` with a layout to apply (pending or applying, not draining)."""
    layouts = (
        MigLayout.objects.filter(gpu__node_id=node.pk, state__in=OPEN_LAYOUT_STATES)
        .filter(waiting_for=[])
        .exclude(gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR)  # the operator applies
        .select_related("gpu")
        .order_by("gpu__index", "gpu_id")
    )
    return [
        DesiredGpu(
            uuid=layout.gpu.uuid,
            generation=layout.generation,
            mig_enabled=layout.mig_enabled,
            instances=[{"profile": i["profile"], "start": i["start"]} for i in layout.instances],
        )
        for layout in layouts
    ]


def agent_desired_generation(*, node: Node) -> int:
    """The highest generation among the layouts ``node``'s agent has to apply; 0: none."""
    value = (
        MigLayout.objects.filter(gpu__node_id=node.pk, state__in=OPEN_LAYOUT_STATES)
        .filter(waiting_for=[])
        .exclude(gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR)  # the operator applies
        .aggregate(top=Max("generation"))["top"]
    )
    return int(value or 0)


RESULT_STATES = (
    LayoutState.APPLYING,
    LayoutState.SUCCESS,
    LayoutState.FAILED,
    LayoutState.REBOOT_REQUIRED,
)


@dataclass(frozen=True)
class ResultOutcome:
    uuid: str
    generation: int
    accepted: bool
    state: str | None
    detail: str


@transaction.atomic
def agent_result(
    *,
    node: Node,
    uuid: str,
    generation: int,
    state: str,
    message: str = "",
    device_plugin: str = "",
    device_plugin_message: str = "",
) -> ResultOutcome:
    """Record the agent's result for a GPU's layout. Results for a generation that is not the
    GPU's latest, or for a layout already applied, are ignored (``accepted`` false), except
    the device plugin's state of the applied one (restarted later)."""
    if state not in RESULT_STATES:
        raise ValidationFailed.for_field(
            "state", f"{state!r} is not one of {[str(s) for s in RESULT_STATES]}."
        )
    check_length("message", message, MESSAGE_MAX)
    gpu = Gpu.objects.filter(uuid=uuid).only("pk", "node_id", "uuid").first()
    if gpu is None:
        raise NotFound(f"No GPU {uuid} has been reported.", fields={"uuid": ["unknown GPU"]})
    if gpu.node_id != node.pk:
        raise PermissionDenied(
            "A node may only report results for its own GPUs.",
            fields={"uuid": [f"{uuid} is registered to another node"]},
        )
    layout = (
        MigLayout.objects.select_for_update().filter(gpu_id=gpu.pk).order_by("-generation").first()
    )

    def ignored(detail: str) -> ResultOutcome:
        return ResultOutcome(uuid, generation, False, layout.state if layout else None, detail)

    if layout is None or generation != layout.generation:
        latest = layout.generation if layout else 0
        return ignored(f"generation {generation} is not the latest ({latest}); ignored")
    if layout.waiting_for:
        return ignored(f"generation {generation} is still draining; ignored")
    if layout.state == LayoutState.SUCCESS:
        if device_plugin and (device_plugin, device_plugin_message) != (
            layout.device_plugin,
            layout.device_plugin_message,
        ):
            _device_plugin_record(layout, device_plugin, device_plugin_message, node)
            return ResultOutcome(uuid, generation, True, layout.state, "device plugin recorded")
        return ignored(f"generation {generation} is already applied; ignored")
    before = {"state": layout.state, "message": layout.message}
    now = timezone.now()
    layout.state = state
    layout.message = message
    if state == LayoutState.SUCCESS:
        layout.applied_at = now
    if device_plugin:
        layout.device_plugin = device_plugin
        layout.device_plugin_message = device_plugin_message
    layout.save(
        update_fields=[
            "state",
            "message",
            "applied_at",
            "device_plugin",
            "device_plugin_message",
            "updated_at",
        ]
    )
    if before["state"] != state or before["message"] != message:
        audit_record(
            actor=None,
            action=f"mig_layout.{state}",
            obj=layout,
            object_id=f"{uuid}@{generation}",
            before=before,
            after={"state": state, "message": message, "node": node.name},
        )
    if before["state"] != state:
        node_capacity_push(node=node)  # applied or failed: what the agent reports counts
    return ResultOutcome(uuid, generation, True, layout.state, "recorded")


def _device_plugin_record(layout: MigLayout, state: str, message: str, node: Node) -> None:
    before = {"device_plugin": layout.device_plugin}
    layout.device_plugin, layout.device_plugin_message = state, message
    layout.save(update_fields=["device_plugin", "device_plugin_message", "updated_at"])
    audit_record(
        actor=None,
        action=f"mig_layout.device_plugin_{state}",
        obj=layout,
        object_id=f"{layout.gpu.uuid}@{layout.generation}",
        before=before,
        after={"device_plugin": state, "message": message, "node": node.name},
    )


# --- overdue -------------------------------------------------------------------------------


@transaction.atomic
def layouts_fail_overdue(*, now: datetime | None = None) -> list[MigLayout]:
    """Fail open layouts past their deadline, with the reason. Idempotent."""
    now = now or timezone.now()
    minutes = round(layout_deadline().total_seconds() / 60)
    overdue = list(
        MigLayout.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state__in=OPEN_LAYOUT_STATES, deadline__lt=now)
        # The GPU Operator's layouts: mig_operator.operator_layouts_fail_overdue.
        .exclude(gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR)
        .select_related("gpu__node")
    )
    failed = []
    for layout in overdue:
        node = layout.gpu.node
        reason = (
            f"not applied within {minutes} minutes by node {node.name} "
            f"(last report at {iso(node.last_report_at)})"
        )
        updated = MigLayout.objects.filter(pk=layout.pk, state__in=OPEN_LAYOUT_STATES).update(
            state=LayoutState.FAILED, message=reason, updated_at=now
        )
        if not updated:
            continue
        before = {"state": layout.state}
        layout.state, layout.message = LayoutState.FAILED, reason
        audit_record(
            actor=None,
            action="mig_layout.failed",
            obj=layout,
            object_id=f"{layout.gpu.uuid}@{layout.generation}",
            before=before,
            after={"state": LayoutState.FAILED, "message": reason},
        )
        failed.append(layout)
    nodes_capacity_push(nodes={layout.gpu.node_id: layout.gpu.node for layout in failed}.values())
    return failed
