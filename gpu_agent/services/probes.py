"""Isolation probes (R30): asked for, handed to the agent and recorded. An admin asks for a
probe of one GPU; the node's agent learns of it from its report's answer (``probes``),
fetches it (``GET agent/probes/``), runs it and posts the outcome (``POST
agent/probes/{id}/result/``).

The probe runs a compute-bound kernel on the target alone, then beside a saturating neighbour
(a second MIG instance, or a second process on a GPU without MIG); the slowdown is
``(t_together / t_alone - 1) * 100``, computed here from the two times the agent measured.
More than ``ISOLATION_SLOWDOWN_LIMIT_PCT`` (5 %) fails R30.

Keyword-only, atomic, audited, race-safe transitions; the two reads the probe endpoints need
(``probe_list``, ``agent_probes``) live here beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from gpu_agent.conf import layout_deadline
from gpu_agent.models import (
    OPEN_PROBE_STATES,
    Gpu,
    IsolationProbe,
    MigInstance,
    Node,
    ProbeState,
)
from gpu_agent.selectors import node_is_stale
from gpu_agent.services.common import MESSAGE_MAX
from tenants.models import User
from tenants.services import audit_record

PROBE_HISTORY = 20
MAX_PROBE_SECONDS = 3600.0
# The states an agent may post, and from which states each is accepted.
RESULT_TRANSITIONS: dict[str, tuple[str, ...]] = {
    ProbeState.RUNNING: (ProbeState.REQUESTED,),
    ProbeState.DONE: OPEN_PROBE_STATES,
    ProbeState.SKIPPED: OPEN_PROBE_STATES,
    ProbeState.FAILED: OPEN_PROBE_STATES,
}


def _label(instance: MigInstance) -> str:
    return f"GPU instance {instance.gi_id} ({instance.profile} at slice {instance.start})"


def _pick_instances(
    gpu: Gpu, target_gi_id: int | None, neighbour_gi_id: int | None
) -> tuple[MigInstance, MigInstance]:
    """The two instances to probe: the ones named, else the first two idle ones (a busy
    instance only when there are not two idle ones), by start."""
    instances = list(gpu.instances.order_by("start"))
    if len(instances) < 2:
        have = "no instance" if not instances else f"only {_label(instances[0])}"
        raise ValidationFailed.for_field(
            "gpu",
            f"GPU {gpu.uuid} is in MIG mode with {have}; a probe needs two GPU instances, one "
            "probed and one saturating neighbour. Give it a layout with two instances first.",
        )
    by_id = {i.gi_id: i for i in instances}
    for field_name, gi_id in (
        ("target_gi_id", target_gi_id),
        ("neighbour_gi_id", neighbour_gi_id),
    ):
        if gi_id is not None and gi_id not in by_id:
            raise ValidationFailed.for_field(
                field_name,
                f"GPU {gpu.uuid} has no GPU instance {gi_id}; it has "
                + ", ".join(_label(i) for i in instances)
                + ".",
            )
    if target_gi_id is not None and target_gi_id == neighbour_gi_id:
        raise ValidationFailed.for_field(
            "neighbour_gi_id", "The neighbour must be another GPU instance than the target."
        )
    ranked = sorted(instances, key=lambda i: (i.busy, i.start))
    target = (
        by_id[target_gi_id]
        if target_gi_id is not None
        else next(i for i in ranked if i.gi_id != neighbour_gi_id)
    )
    neighbour = (
        by_id[neighbour_gi_id]
        if neighbour_gi_id is not None
        else next(i for i in ranked if i.gi_id != target.gi_id)
    )
    return target, neighbour


@transaction.atomic
def probe_request(
    *,
    gpu: Gpu,
    actor: User,
    target_gi_id: int | None = None,
    neighbour_gi_id: int | None = None,
) -> IsolationProbe:
    """Ask the GPU's agent for an isolation probe. 400 for a MIG GPU with fewer than two
    instances (or instances it does not have), 409 when the node is stale or a probe of the
    GPU is still open."""
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu.pk)
    if node_is_stale(gpu.node):
        raise Conflict(
            f"Node {gpu.node.name} is stale (no report since "
            f"{gpu.node.last_report_at or 'it registered'}): its agent would not run the probe."
        )
    open_probe = gpu.probes.filter(state__in=OPEN_PROBE_STATES).first()
    if open_probe is not None:
        raise Conflict(
            f"Probe {open_probe.pk} of GPU {gpu.uuid} is still {open_probe.state}; "
            "wait for its result."
        )
    fields: dict[str, object] = {"mig": gpu.mig_mode_current}
    if gpu.mig_mode_current:
        target, neighbour = _pick_instances(gpu, target_gi_id, neighbour_gi_id)
        fields |= {
            "target_gi_id": target.gi_id,
            "neighbour_gi_id": neighbour.gi_id,
            "target_profile": target.profile,
            "neighbour_profile": neighbour.profile,
        }
    elif target_gi_id is not None or neighbour_gi_id is not None:
        name = "target_gi_id" if target_gi_id is not None else "neighbour_gi_id"
        raise ValidationFailed.for_field(
            name,
            f"GPU {gpu.uuid} is not in MIG mode: the probe runs two processes on the whole "
            "GPU; leave the instances out.",
        )
    probe = IsolationProbe.objects.create(gpu=gpu, requested_by=actor, **fields)
    audit_record(
        actor=actor,
        action="isolation_probe.requested",
        obj=probe,
        object_id=f"{gpu.uuid}#{probe.pk}",
        after={"node": gpu.node.name, **fields},
    )
    return probe


def probe_list(*, gpu: Gpu, limit: int = PROBE_HISTORY) -> list[IsolationProbe]:
    """The GPU's latest probes, newest first (the caller got ``gpu`` through ``gpu_get``,
    which answers 404 to anyone but platform admins)."""
    return list(
        IsolationProbe.objects.filter(gpu=gpu)
        .select_related("requested_by")
        .order_by("-requested_at", "-pk")[:limit]
    )


def agent_probes(*, node: Node) -> list[IsolationProbe]:
    """The node's open probes, oldest first."""
    return list(
        IsolationProbe.objects.filter(gpu__node=node, state__in=OPEN_PROBE_STATES)
        .select_related("gpu")
        .order_by("requested_at", "pk")
    )


@dataclass(frozen=True)
class ProbeOutcome:
    id: int
    accepted: bool
    state: str
    slowdown_pct: float | None
    detail: str


def _check_times(t_alone_s: float | None, t_together_s: float | None) -> None:
    for name, value in (("t_alone_s", t_alone_s), ("t_together_s", t_together_s)):
        if value is None:
            raise ValidationFailed.for_field(name, "A done probe needs both times.")
        if not 0 < value <= MAX_PROBE_SECONDS:
            raise ValidationFailed.for_field(
                name, f"{value} is not a duration in seconds (0 < t <= {MAX_PROBE_SECONDS:g})."
            )


@transaction.atomic
def agent_probe_result(
    *,
    node: Node,
    probe_id: int,
    state: str,
    t_alone_s: float | None = None,
    t_together_s: float | None = None,
    simulated: bool = False,
    library: str = "",
    message: str = "",
) -> ProbeOutcome:
    """Record what the agent found. 404 for an unknown probe, 403 for another node's; a
    result for a finished probe (or ``running`` twice) is ignored (``accepted`` false)."""
    if state not in RESULT_TRANSITIONS:
        raise ValidationFailed.for_field(
            "state", f"{state!r} is not one of {sorted(str(s) for s in RESULT_TRANSITIONS)}."
        )
    if len(message) > MESSAGE_MAX:
        raise ValidationFailed.for_field("message", f"At most {MESSAGE_MAX} characters.")
    if state == ProbeState.DONE:
        _check_times(t_alone_s, t_together_s)
    probe = (
        IsolationProbe.objects.select_for_update(of=("self",))
        .select_related("gpu")
        .filter(pk=probe_id)
        .first()
    )
    if probe is None:
        raise NotFound(f"No probe {probe_id}.", fields={"id": ["unknown probe"]})
    if probe.gpu.node_id != node.pk:
        raise PermissionDenied(
            "A node may only report the probes of its own GPUs.",
            fields={"id": [f"probe {probe_id} is of a GPU of another node"]},
        )
    if probe.state not in RESULT_TRANSITIONS[state]:
        return ProbeOutcome(
            probe.pk, False, probe.state, probe.slowdown_pct, f"probe is {probe.state}; ignored"
        )
    now = timezone.now()
    before = {"state": probe.state}
    probe.state = state
    probe.message = message
    probe.simulated = simulated
    probe.library = library[:40]
    if state == ProbeState.RUNNING or probe.started_at is None:
        probe.started_at = now
    if state != ProbeState.RUNNING:
        probe.finished_at = now
    if state == ProbeState.DONE:
        assert t_alone_s is not None and t_together_s is not None  # _check_times
        probe.t_alone_s, probe.t_together_s = t_alone_s, t_together_s
        probe.slowdown_pct = round((t_together_s / t_alone_s - 1) * 100, 2)
    probe.save()
    audit_record(
        actor=None,
        action=f"isolation_probe.{state}",
        obj=probe,
        object_id=f"{probe.gpu.uuid}#{probe.pk}",
        before=before,
        after={
            "state": state,
            "slowdown_pct": probe.slowdown_pct,
            "simulated": simulated,
            "message": message,
            "node": node.name,
        },
    )
    return ProbeOutcome(probe.pk, True, probe.state, probe.slowdown_pct, "recorded")


@transaction.atomic
def probes_fail_overdue(*, now: datetime | None = None) -> list[int]:
    """Open probes older than the layout deadline fail with the reason. Idempotent."""
    now = now or timezone.now()
    cutoff = now - layout_deadline()
    overdue: Sequence[IsolationProbe] = list(
        IsolationProbe.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state__in=OPEN_PROBE_STATES, requested_at__lt=cutoff)
        .select_related("gpu__node")
    )
    failed = []
    for probe in overdue:
        reason = (
            f"no result from node {probe.gpu.node.name} within "
            f"{round(layout_deadline().total_seconds() / 60)} minutes"
        )
        if IsolationProbe.objects.filter(pk=probe.pk, state__in=OPEN_PROBE_STATES).update(
            state=ProbeState.FAILED, message=reason, finished_at=now
        ):
            audit_record(
                actor=None,
                action="isolation_probe.failed",
                obj=probe,
                object_id=f"{probe.gpu.uuid}#{probe.pk}",
                before={"state": probe.state},
                after={"state": ProbeState.FAILED, "message": reason},
            )
            failed.append(probe.pk)
    return failed
