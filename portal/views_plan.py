"""The MIG planner's stored proposals on ``/fleet/plan/``: the latest one per cluster, made by
the periodic task (``gpu_agent.proposals``) from the tenants' MIG quotas, with its age; applied
only after an admin confirms, and refused when it is stale (a newer proposal, or the GPUs
changed since it was made). Views stay thin: ``gpu_agent.proposals`` reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from gpu_agent.models import PlanProposal
from gpu_agent.proposals import (
    plan_proposal_apply,
    plan_proposal_get,
    plan_proposal_latest_list,
    plan_proposal_stale_reason,
)
from portal import errors
from tenants.api.base import caller
from tenants.models import User

CONFIRM = "yes"


def _admin(request: HttpRequest) -> User:
    user = caller(request)
    if not user.is_platform_admin:
        raise PermissionDenied("The GPU fleet is for platform admins only.")
    return user


def _describe(items: list[dict[str, Any]]) -> str:
    return ", ".join(f"{i['profile']}@{i['start']}" for i in items) or "no instances"


@dataclass(frozen=True)
class StoredGpu:
    data: dict[str, Any]

    @property
    def current(self) -> str:
        return _describe(self.data["current"])

    @property
    def layout(self) -> str:
        return _describe(self.data["layout"])

    @property
    def destroy(self) -> str:
        return _describe(self.data["destroy"]) if self.data["destroy"] else "nothing"

    @property
    def create(self) -> str:
        return _describe(self.data["create"]) if self.data["create"] else "nothing"


@dataclass(frozen=True)
class StoredProposal:
    proposal: PlanProposal
    age: str
    checked: str
    stale: str

    @property
    def changed(self) -> list[StoredGpu]:
        return [StoredGpu(g) for g in self.proposal.gpus if g["changed"]]

    @property
    def cluster(self) -> str:
        return self.proposal.cluster.name if self.proposal.cluster else "no cluster"


def stored_proposals(user: User) -> list[StoredProposal]:
    """The latest proposal of each cluster, with its age and whether it is stale."""
    from portal.views_fleet import ago  # the fleet pages' wording

    now = timezone.now()
    return [
        StoredProposal(
            p,
            ago(p.created_at, now),
            ago(p.checked_at, now),
            plan_proposal_stale_reason(proposal=p),
        )
        for p in plan_proposal_latest_list(user=user)
    ]


@login_required
@require_POST
def plan_proposal(request: HttpRequest, pk: int) -> HttpResponse:
    """Apply a stored proposal: the first POST asks to confirm, the second (``confirm=yes``)
    sets the layouts; a stale proposal is refused (409), nothing applied."""
    user = _admin(request)
    try:
        proposal = plan_proposal_get(user=user, pk=pk)
    except errors.NotFound as exc:
        raise Http404(str(exc)) from exc
    stored = stored_proposals(user)
    row = next((s for s in stored if s.proposal.pk == proposal.pk), None)
    context: dict[str, Any] = {"row": row, "proposal": proposal}
    if request.POST.get("confirm") != CONFIRM:
        status = 200
        if row is None or row.stale:
            context["refusal"] = (
                f"Proposal {proposal.pk} is stale: "
                f"{row.stale if row else 'a newer one replaced it'}. Nothing was applied."
            )
            status = 409
        return render(request, "portal/fleet/proposal_confirm.html", context, status=status)
    try:
        done, refused = plan_proposal_apply(proposal=proposal, actor=user)
    except errors.Conflict as exc:
        context["refusal"] = exc.message
        return render(request, "portal/fleet/proposal_confirm.html", context, status=409)
    if done:
        messages.success(
            request,
            f"Proposal {proposal.pk} applied to {len(done)} GPU{'s' if len(done) != 1 else ''}: "
            + "; ".join(f"{layout.gpu.uuid} generation {layout.generation}" for layout in done)
            + ". Each is pending until its node's agent applies it.",
        )
    for refusal in refused:
        messages.error(
            request,
            f"{refusal.gpu.uuid} was refused ({refusal.status}), nothing changed there: "
            f"{refusal.message}",
        )
    if not done and not refused:
        messages.info(request, "Nothing to apply: the proposal changes no GPU.")
    return redirect("portal:fleet")
