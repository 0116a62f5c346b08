"""The MIG planner run periodically (Celery beat): its latest proposal per cluster, stored,
and applied only when an admin confirms and the GPUs are still as the planner saw them.

- ``plan_proposal_refresh``: ``plans.mig_plan_propose`` for one cluster over the tenants' MIG
  quotas (what each is guaranteed); a new ``PlanProposal`` only when the proposal or the GPUs
  changed (``digest``), else the latest one is marked checked.
- ``plan_proposal_apply``: refuses (409) a proposal that is not the cluster's latest, or whose
  GPUs changed since (``plans.mig_plan_stale_reason``: the same rule as the planner page's),
  then ``plans.mig_plan_layouts_set`` (each GPU on its own, audited).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from core.errors import Conflict, NotFound
from gpu_agent.models import Gpu, MigLayout, PlanProposal
from gpu_agent.selectors import quota_demand
from gpu_agent.services.plans import (
    GpuLayout,
    PlanRefusal,
    mig_plan_layouts_set,
    mig_plan_propose,
    mig_plan_stale_reason,
)
from gpu_spec.mig.layout import Placement
from gpu_spec.mig.planner import GpuPlan, Plan
from quotas.models import Cluster
from tenants.models import User


def _placements(items: Sequence[Placement]) -> list[dict[str, Any]]:
    return [{"profile": p.profile, "start": p.start} for p in items]


def _gpu_json(gpu_plan: GpuPlan) -> dict[str, Any]:
    return {
        "uuid": gpu_plan.uuid,
        "node": gpu_plan.node,
        "model": gpu_plan.model_name,
        "changed": gpu_plan.changed,
        "current": _placements(gpu_plan.current),
        "layout": _placements(gpu_plan.layout),
        "destroy": _placements(gpu_plan.destroy),
        "create": _placements(gpu_plan.create),
        "kept_busy": _placements(gpu_plan.kept_busy),
        "note": gpu_plan.note,
    }


def _proposal_json(result: Plan) -> dict[str, Any]:
    return {
        "gpus": [_gpu_json(g) for g in result.gpus],
        "unmet": [
            {
                "profile": u.profile,
                "wanted": u.wanted,
                "placed": u.placed,
                "why": u.reason,
                "model": u.model,
                "tenants": list(u.tenants),
            }
            for u in result.unmet
        ],
        "explanation": list(result.explanation),
    }


@transaction.atomic
def plan_proposal_refresh(
    *, cluster: Cluster, now: datetime | None = None
) -> tuple[PlanProposal | None, bool]:
    """Run the planner over ``cluster``'s GPUs for its tenants' MIG quotas. Returns (the
    latest proposal, whether it is new); (None, False) when the cluster has no GPU."""
    now = now or timezone.now()
    lines = quota_demand(cluster=cluster)
    demand = [line.demand for line in lines]
    proposed = mig_plan_propose(cluster=cluster, demand=demand, quota_lines=lines)
    if not proposed.rows:
        return None, False
    body = _proposal_json(proposed.plan)
    demand_json = [
        {"profile": d.profile, "count": d.count, "tenant": d.tenant, "model": d.model}
        for d in demand
    ]
    gpu_digest = proposed.state_digest
    digest = hashlib.sha256(
        json.dumps([body, demand_json, gpu_digest], sort_keys=True).encode()
    ).hexdigest()
    latest = (
        PlanProposal.objects.select_for_update()
        .filter(cluster=cluster)
        .order_by("-created_at", "-pk")
        .first()
    )
    if latest is not None and latest.digest == digest:
        PlanProposal.objects.filter(pk=latest.pk).update(checked_at=now)
        latest.checked_at = now
        return latest, False
    proposal = PlanProposal.objects.create(
        cluster=cluster,
        checked_at=now,
        digest=digest,
        state_digest=gpu_digest,
        gpus=body["gpus"],
        demand=demand_json,
        unmet=body["unmet"],
        explanation=body["explanation"],
    )
    return proposal, True


def plan_proposals_refresh_all(*, now: datetime | None = None) -> list[PlanProposal]:
    """``plan_proposal_refresh`` for every cluster with GPU nodes; the new proposals."""
    clusters = Cluster.objects.filter(nodes__gpus__isnull=False).distinct().order_by("name")
    fresh = []
    for cluster in clusters:
        proposal, new = plan_proposal_refresh(cluster=cluster, now=now)
        if proposal is not None and new:
            fresh.append(proposal)
    return fresh


def plan_proposal_latest_list(*, user: User) -> list[PlanProposal]:
    """The latest proposal of each cluster, by cluster name (platform admins only)."""
    if not (user.is_authenticated and user.is_platform_admin):
        return []
    # The newest row of the same cluster (of no cluster, for GPUs of nodes without one): a
    # correlated subquery every backend runs (PostgreSQL's DISTINCT ON is not SQLite's).
    newer_first = ("-created_at", "-pk")
    same_cluster = PlanProposal.objects.filter(cluster_id=OuterRef("cluster_id"))
    newest = Subquery(same_cluster.order_by(*newer_first).values("pk")[:1])
    newest_unclustered = Subquery(
        PlanProposal.objects.filter(cluster__isnull=True).order_by(*newer_first).values("pk")[:1]
    )
    return list(
        PlanProposal.objects.filter(
            Q(cluster__isnull=False, pk=newest) | Q(cluster__isnull=True, pk=newest_unclustered)
        )
        .select_related("cluster")
        .order_by("cluster__name")
    )


def plan_proposal_get(*, user: User, pk: int) -> PlanProposal:
    proposal = PlanProposal.objects.select_related("cluster").filter(pk=pk).first()
    if proposal is None or not (user.is_authenticated and user.is_platform_admin):
        raise NotFound("No such proposal.")
    return proposal


def plan_proposal_stale_reason(*, proposal: PlanProposal) -> str:
    """Why the proposal must not be applied now ("" when it may): a newer one exists, or its
    GPUs changed since it was made."""
    newer = (
        PlanProposal.objects.filter(cluster=proposal.cluster, created_at__gt=proposal.created_at)
        .order_by("-created_at")
        .first()
    )
    if newer is not None:
        return f"proposal {newer.pk} replaced it at {newer.created_at:%Y-%m-%d %H:%M} UTC"
    changed = mig_plan_stale_reason(cluster=proposal.cluster, state_digest=proposal.state_digest)
    if changed:
        return f"{changed}; the planner makes a new proposal within a minute"
    return ""


def plan_proposal_apply(
    *, proposal: PlanProposal, actor: User
) -> tuple[list[MigLayout], list[PlanRefusal]]:
    """Apply a stored proposal: 409 when it is stale (nothing applied), else ``layout_set``
    for each GPU it changes (``mig_plan_layouts_set``: each GPU all or nothing, audited)."""
    reason = plan_proposal_stale_reason(proposal=proposal)
    if reason:
        raise Conflict(f"Proposal {proposal.pk} is stale: {reason}. Nothing was applied.")
    changed = {g["uuid"]: g for g in proposal.gpus if g["changed"]}
    gpus = Gpu.objects.filter(uuid__in=list(changed)).select_related("node").order_by("uuid")
    return mig_plan_layouts_set(
        changes=[GpuLayout(gpu, changed[gpu.uuid]["layout"]) for gpu in gpus], actor=actor
    )
