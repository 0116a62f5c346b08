"""The MIG planner over the fleet's GPUs, and applying what it proposes. One way in for the
``/fleet/plan/`` page (a demand typed in, or the tenants' MIG quotas) and for the proposals
the beat stores (``proposals``), so the two cannot disagree about what is stale:

- ``mig_plan_propose``: the planner's proposal for a demand over a cluster's GPUs (every GPU
  when no cluster is given), each GPU with its latest desired layout, and the
  ``state_digest`` of the GPUs it was made from.
- ``state_digest``: what the planner's answer depends on, per GPU: MIG mode, observed
  instances and which are busy, the latest desired layout's generation and state. The one
  staleness rule: a proposal is applied only while its GPUs' digest is still the one it was
  made from (``mig_plan_stale_reason``).
- ``mig_plan_apply``: a proposal applied if its GPUs are still as the planner saw them (409,
  nothing applied, otherwise), through ``mig_plan_layouts_set``: ``layout_set`` for each GPU
  it changes, each GPU all or nothing (work that starts on a GPU after the check refuses that
  GPU alone, with the reason), and one audit event for the plan as a whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.db.models import QuerySet

from core.errors import ApplicationError, Conflict
from core.words import counted
from gpu_agent.models import OPEN_LAYOUT_STATES, Gpu, MigLayout
from gpu_agent.selectors import (
    QuotaDemand,
    gpus_with_instances,
    latest_layouts,
    node_is_stale,
)
from gpu_agent.services.layouts import layout_set
from gpu_spec.mig.planner import CurrentInstance, Demand, GpuPlan, GpuState, Plan, plan
from quotas.models import Cluster
from tenants.models import User
from tenants.services import audit_record


def gpu_state(gpu: Gpu) -> GpuState:
    """The planner's view of a GPU: model, MIG mode, observed instances and which are busy."""
    return GpuState(
        uuid=gpu.uuid,
        node=gpu.node.name,
        model_name=gpu.name,
        instances=tuple(
            CurrentInstance(profile=i.profile, start=i.start, busy=i.busy)
            for i in gpu.instances.all()
        ),
        mig_enabled=gpu.mig_mode_current,
    )


def planner_gpus(*, cluster: Cluster | None) -> QuerySet[Gpu]:
    """The GPUs the planner plans over: those of ``cluster``'s nodes (every GPU for None),
    with their nodes and observed instances."""
    gpus = gpus_with_instances()
    return gpus.filter(node__cluster=cluster) if cluster is not None else gpus


def state_digest(gpus: Sequence[Gpu], layouts: Mapping[int, MigLayout]) -> str:
    """What the planner's answer depends on, per GPU: MIG mode, observed instances (and
    which are busy), the latest desired layout's generation and state."""
    data = []
    for gpu in sorted(gpus, key=lambda g: g.uuid):
        layout = layouts.get(gpu.pk)
        data.append(
            [
                gpu.uuid,
                gpu.mig_mode_current,
                sorted([i.profile, i.start, i.busy] for i in gpu.instances.all()),
                [layout.generation, layout.state] if layout is not None else None,
            ]
        )
    return hashlib.sha256(json.dumps(data).encode()).hexdigest()


def _read(cluster: Cluster | None) -> tuple[list[Gpu], dict[int, MigLayout]]:
    """The planner's GPUs and their latest layouts: three queries (GPUs with nodes, their
    instances, their latest layouts)."""
    gpus_qs = planner_gpus(cluster=cluster)
    gpus = list(gpus_qs)
    return gpus, (latest_layouts(gpus_qs) if gpus else {})


# --- proposing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedGpu:
    """One GPU of a proposal: the planner's answer for it, and the GPU as the planner saw it
    (with its latest desired layout, and whether its node has stopped reporting)."""

    plan: GpuPlan
    gpu: Gpu
    layout: MigLayout | None
    stale: bool

    @property
    def open_layout(self) -> bool:
        return self.layout is not None and self.layout.state in OPEN_LAYOUT_STATES

    @property
    def already_requested(self) -> bool:
        """The open desired layout is the proposal already: applying skips the GPU."""
        if not self.open_layout or self.layout is None or not self.layout.mig_enabled:
            return False
        wanted = {(p.profile, p.start) for p in self.plan.layout}
        return wanted == {(i["profile"], i.get("start")) for i in self.layout.instances}

    @property
    def to_apply(self) -> bool:
        return self.plan.changed and not self.already_requested

    @property
    def instances(self) -> list[dict[str, Any]]:
        """The proposed layout, as ``layout_set`` takes it."""
        return [{"profile": p.profile, "start": p.start} for p in self.plan.layout]


@dataclass
class MigProposal:
    """The planner's answer for ``demand`` over ``cluster``'s GPUs (None: the fleet's)."""

    cluster: Cluster | None
    plan: Plan
    rows: list[PlannedGpu]
    demand: list[Demand]
    quota_lines: list[QuotaDemand]
    state_digest: str

    @property
    def changed(self) -> list[PlannedGpu]:
        return [r for r in self.rows if r.plan.changed]

    @property
    def to_apply(self) -> list[PlannedGpu]:
        return [r for r in self.rows if r.to_apply]

    @property
    def unchanged_count(self) -> int:
        return len(self.rows) - len(self.changed)

    @property
    def fingerprint(self) -> str:
        """What applying would write, and the GPUs' state it was planned from: a confirmation
        carries it back, and a plan whose GPUs changed in between is not applied."""
        data = [
            self.state_digest,
            [[r.gpu.uuid, [[p.profile, p.start] for p in r.plan.layout]] for r in self.to_apply],
        ]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:32]


def mig_plan_propose(
    *,
    cluster: Cluster | None,
    demand: Sequence[Demand],
    quota_lines: Sequence[QuotaDemand] = (),
) -> MigProposal:
    """Run the planner for ``demand`` over ``cluster``'s GPUs (every GPU for None): three
    queries. ``quota_lines``: where the demand came from, when from the tenants' quotas."""
    gpus, layouts = _read(cluster)
    result = plan([gpu_state(g) for g in gpus], demand)
    by_uuid = {g.uuid: g for g in gpus}
    rows = []
    for gpu_plan in result.gpus:
        gpu = by_uuid[gpu_plan.uuid]
        rows.append(PlannedGpu(gpu_plan, gpu, layouts.get(gpu.pk), node_is_stale(gpu.node)))
    return MigProposal(
        cluster=cluster,
        plan=result,
        rows=rows,
        demand=list(demand),
        quota_lines=list(quota_lines),
        state_digest=state_digest(gpus, layouts),
    )


# --- applying -------------------------------------------------------------------------------


def mig_plan_stale_reason(*, cluster: Cluster | None, state_digest: str) -> str:
    """Why a proposal made from ``cluster``'s GPUs at ``state_digest`` must not be applied now
    ("" when it may): its GPUs changed since."""
    if _digest_now(cluster) != state_digest:
        return "the GPUs changed since it was made (instances, busy processes or desired layouts)"
    return ""


def _digest_now(cluster: Cluster | None) -> str:
    gpus, layouts = _read(cluster)
    return state_digest(gpus, layouts)


class LayoutChange(Protocol):
    """A GPU and the layout a proposal gives it: a ``PlannedGpu``, or a ``GpuLayout``."""

    @property
    def gpu(self) -> Gpu: ...

    @property
    def instances(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class GpuLayout:
    """A GPU and the layout a stored proposal gives it (``[{"profile", "start"}]``)."""

    gpu: Gpu
    instances: list[dict[str, Any]]


@dataclass(frozen=True)
class PlanRefusal:
    """A GPU that kept its layout: the change refused, why, and the status ``layout_set``
    answered (409: busy instances; 400: the layout no longer fits)."""

    row: LayoutChange
    message: str
    status: int

    @property
    def gpu(self) -> Gpu:
        return self.row.gpu


@dataclass(frozen=True)
class MigPlan:
    """An applied planner proposal, as the audit trail names it."""

    gpus: int


def mig_plan_apply(
    *, proposal: MigProposal, actor: User
) -> tuple[list[MigLayout], list[PlanRefusal]]:
    """Apply ``proposal`` if its GPUs are still as the planner saw them: 409 (nothing
    applied) when they changed, else ``mig_plan_layouts_set`` for the GPUs it changes."""
    reason = mig_plan_stale_reason(cluster=proposal.cluster, state_digest=proposal.state_digest)
    if reason:
        raise Conflict(f"The plan is stale: {reason}. Nothing was applied.")
    return mig_plan_layouts_set(changes=proposal.to_apply, actor=actor)


def mig_plan_layouts_set(
    *, changes: Sequence[LayoutChange], actor: User
) -> tuple[list[MigLayout], list[PlanRefusal]]:
    """``layout_set`` for each GPU of a checked proposal (each GPU all or nothing: a refused
    GPU keeps its layout and its reason), and one audit event for the plan as a whole."""
    done: list[MigLayout] = []
    refused: list[PlanRefusal] = []
    for change in changes:
        try:
            done.append(layout_set(gpu=change.gpu, instances=change.instances, actor=actor))
        except ApplicationError as exc:
            details = [m for ms in exc.fields.values() for m in ms if m not in exc.message]
            refused.append(PlanRefusal(change, " ".join([exc.message, *details]), exc.status_code))
    audit_record(
        actor=actor,
        action="mig_plan.applied",
        obj=MigPlan(len(changes)),
        object_id=f"{len(done)} of {counted(len(changes), 'GPU')}",
        after={
            "applied": [layout.gpu.uuid for layout in done],
            "refused": {r.gpu.uuid: r.message for r in refused},
        },
    )
    return done, refused
