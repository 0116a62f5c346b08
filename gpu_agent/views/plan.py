"""The MIG planner's page, ``/fleet/plan/``: the planner's proposal for a demand (typed in, or
the tenants' MIG quotas), drawn per GPU as memory slices, and the stored proposals the
periodic task makes per cluster, with their age. Either is applied only after an admin
confirms, and refused when it is stale (a newer stored proposal, or the GPUs changed since it
was made). Forms and rendering only: ``gpu_agent.services.plans`` proposes and applies (one
staleness rule for both), ``gpu_agent.services.proposals`` keeps the stored ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core import errors
from core.pages import error_text
from gpu_agent import selectors as fleet_selectors
from gpu_agent.models import Gpu, MigLayout, PlanProposal
from gpu_agent.services.plans import (
    MigProposal,
    PlannedGpu,
    PlanRefusal,
    mig_plan_apply,
    mig_plan_propose,
)
from gpu_agent.services.proposals import (
    plan_proposal_apply,
    plan_proposal_get,
    plan_proposal_latest_list,
    plan_proposal_stale_reason,
)
from gpu_agent.views.common import (
    admin_user,
    ago,
    describe,
    model_of,
)
from gpu_agent.views.drawing import SliceDrawing, drawing_plan
from gpu_spec.mig.catalogue import load_catalogue
from gpu_spec.mig.planner import Demand
from quotas.models import Cluster
from tenants.models import User

CONFIRM = "yes"
MAX_DEMAND_ROWS = 6
MAX_DEMAND_COUNT = 10_000
DEMAND_PREFIX = "demand"


@dataclass(frozen=True)
class StoredGpu:
    data: dict[str, Any]

    @property
    def current(self) -> str:
        return describe(self.data["current"])

    @property
    def layout(self) -> str:
        return describe(self.data["layout"])

    @property
    def destroy(self) -> str:
        return describe(self.data["destroy"]) if self.data["destroy"] else "nothing"

    @property
    def create(self) -> str:
        return describe(self.data["create"]) if self.data["create"] else "nothing"


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


def _tell_applied(
    request: HttpRequest, what: str, done: Sequence[MigLayout], refused: Sequence[PlanRefusal]
) -> None:
    """What applying a plan or a stored proposal did, GPU by GPU, as messages on the fleet page."""
    if done:
        messages.success(
            request,
            f"{what} applied to {len(done)} GPU{'s' if len(done) != 1 else ''}: "
            + "; ".join(f"{layout.gpu.uuid} generation {layout.generation}" for layout in done)
            + ". Each is pending until its node's agent applies it.",
        )
    for refusal in refused:
        messages.error(
            request,
            f"{refusal.gpu.uuid} on {refusal.gpu.node.name} was refused "
            f"({refusal.status}), nothing changed there: {refusal.message}",
        )
    if not done and not refused:
        messages.info(request, "Nothing to apply: every GPU already has the proposed layout.")


@login_required
@require_POST
def plan_proposal(request: HttpRequest, pk: int) -> HttpResponse:
    """Apply a stored proposal: the first POST asks to confirm, the second (``confirm=yes``)
    sets the layouts; a stale proposal is refused (409), nothing applied."""
    user = admin_user(request)
    proposal = plan_proposal_get(user=user, pk=pk)
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
        return render(request, "gpu_agent/proposal_confirm.html", context, status=status)
    try:
        done, refused = plan_proposal_apply(proposal=proposal, actor=user)
    except errors.Conflict as exc:
        context["refusal"] = exc.message
        return render(request, "gpu_agent/proposal_confirm.html", context, status=409)
    _tell_applied(request, f"Proposal {proposal.pk}", done, refused)
    return redirect("portal:fleet")


# --- the planner ----------------------------------------------------------------------------


class PlanForm(forms.Form):
    source = forms.ChoiceField(
        choices=[
            ("manual", "The demand below"),
            ("quotas", "The tenants' MIG quotas (what each is guaranteed)"),
        ],
        initial="manual",
        widget=forms.RadioSelect,
    )
    cluster = forms.ChoiceField(required=False, label="Cluster")

    def __init__(self, *args: Any, clusters: Sequence[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field_ = self.fields["cluster"]
        assert isinstance(field_, forms.ChoiceField)
        field_.choices = [("", "the whole fleet"), *((c, c) for c in clusters)]


class DemandRowForm(forms.Form):
    profile = forms.ChoiceField(required=False)
    count = forms.IntegerField(required=False, min_value=1, max_value=MAX_DEMAND_COUNT)
    model = forms.ChoiceField(required=False)

    def __init__(
        self, *args: Any, profiles: Sequence[str], models: Sequence[str], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        profile = self.fields["profile"]
        model = self.fields["model"]
        assert isinstance(profile, forms.ChoiceField) and isinstance(model, forms.ChoiceField)
        profile.choices = [("", "—"), *((p, p) for p in profiles)]
        model.choices = [("", "any model offering it"), *((m, m) for m in models)]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("profile") and data.get("count") is None:
            self.add_error("count", "How many instances?")
        if data.get("count") is not None and not data.get("profile"):
            self.add_error("profile", "Choose a profile.")
        return data

    def demand(self) -> Demand | None:
        data = self.cleaned_data
        if not data.get("profile"):
            return None
        return Demand(profile=data["profile"], count=data["count"], model=data.get("model") or None)


@dataclass(frozen=True)
class PlanRow:
    """A GPU of the planner's proposal as the page draws it: current -> proposed."""

    planned: PlannedGpu

    @property
    def current(self) -> SliceDrawing:
        gpu_plan = self.planned.plan
        return drawing_plan(
            model_of(self.planned.gpu),
            gpu_plan.current,
            other=gpu_plan.layout,
            busy=gpu_plan.kept_busy,
            current=True,
        )

    @property
    def proposed(self) -> SliceDrawing:
        gpu_plan = self.planned.plan
        return drawing_plan(
            model_of(self.planned.gpu),
            gpu_plan.layout,
            other=gpu_plan.current,
            busy=gpu_plan.kept_busy,
            current=False,
        )

    @property
    def destroy(self) -> str:
        return describe(self.planned.plan.destroy)

    @property
    def create(self) -> str:
        return describe(self.planned.plan.create)


def plan_rows(proposal: MigProposal) -> list[PlanRow]:
    """The GPUs the proposal reconfigures, to draw."""
    return [PlanRow(planned) for planned in proposal.changed]


def _fleet_profiles_and_models() -> tuple[list[str], list[str]]:
    """The catalogue's models present in the fleet and their profiles (every model's when the
    fleet has none the catalogue knows). One query."""
    catalogue = load_catalogue()
    names = Gpu.objects.order_by().values_list("name", flat=True).distinct()
    models = {m.name: m for m in (catalogue.find_model(n) for n in names) if m is not None}
    pool = list(models.values()) or catalogue.models()
    profiles = sorted({p for m in pool for p in m.profiles}, key=_profile_order)
    return profiles, sorted(models)


def _profile_order(name: str) -> tuple[int, int, str]:
    g, _, rest = name.partition("g.")
    gb = "".join(ch for ch in rest.partition("gb")[0] if "0" <= ch <= "9")[:6]
    return (int(g) if g.isascii() and g.isdigit() and len(g) < 6 else 99, int(gb or 0), name)


@dataclass
class PlanDraft:
    form: PlanForm
    rows: list[DemandRowForm]
    clusters: dict[str, Cluster]
    cluster: Cluster | None = None

    def demand(self) -> tuple[list[Demand], list[fleet_selectors.QuotaDemand]] | None:
        """The demand the form asks for; None (errors on the inputs) when it is not usable."""
        valid = [self.form.is_valid(), *[row.is_valid() for row in self.rows]]
        if not all(valid):
            return None
        self.cluster = self.clusters.get(self.form.cleaned_data.get("cluster") or "")
        if self.form.cleaned_data["source"] == "quotas":
            lines = fleet_selectors.quota_demand(cluster=self.cluster)
            return [line.demand for line in lines], lines
        demand = [d for row in self.rows if (d := row.demand()) is not None]
        if not demand:
            self.form.add_error(None, "Say what is wanted: at least one profile and a count.")
            return None
        return demand, []


def _plan_draft(data: Mapping[str, Any] | None) -> PlanDraft:
    clusters = {c.name: c for c in Cluster.objects.order_by("name")}
    profiles, models = _fleet_profiles_and_models()
    form = PlanForm(data, clusters=list(clusters))
    rows = [
        DemandRowForm(data, prefix=f"{DEMAND_PREFIX}-{i}", profiles=profiles, models=models)
        for i in range(MAX_DEMAND_ROWS)
    ]
    return PlanDraft(form, rows, clusters)


@login_required
@require_http_methods(["GET", "HEAD", "POST"])
def fleet_plan(request: HttpRequest) -> HttpResponse:
    """The MIG planner's proposal for a demand (the form's lines, or the tenants' MIG quotas),
    over the fleet's GPUs: per GPU current -> proposed, what is destroyed and created, the
    explanation and the unmet demand. The demand travels in the query string. Applying is
    two POSTs: the first shows what will change and asks to confirm, the second (with
    ``confirm`` and the plan's fingerprint: what it writes and the GPUs' state it was made
    from) applies it through ``mig_plan_apply``, unless the GPUs changed in between."""
    user = admin_user(request)
    asked = "source" in request.GET
    draft = _plan_draft(request.GET if asked else None)
    context: dict[str, Any] = {
        "draft": draft,
        "query": request.GET.urlencode(),
        "stored": stored_proposals(user),
    }
    found = draft.demand() if asked else None
    if found is None:
        if request.method == "POST":
            messages.error(request, "Nothing to apply: propose a plan first.")
        return render(request, "gpu_agent/plan.html", context, status=400 if asked else 200)
    demand, quota_lines = found
    proposal = mig_plan_propose(cluster=draft.cluster, demand=demand, quota_lines=quota_lines)
    context |= {"proposal": proposal, "changed_rows": plan_rows(proposal)}
    if request.method != "POST":
        return render(request, "gpu_agent/plan.html", context)
    if request.POST.get("fingerprint") != proposal.fingerprint:
        messages.error(
            request,
            "The fleet changed since that plan was shown; nothing was applied. "
            "Review the plan below.",
        )
        return render(request, "gpu_agent/plan.html", context, status=409)
    if request.POST.get("confirm") != CONFIRM:
        return render(request, "gpu_agent/plan.html", context | {"confirming": True})
    try:
        done, refused = mig_plan_apply(proposal=proposal, actor=user)
    except errors.Conflict as exc:  # a report changed the GPUs since the fingerprint's check
        messages.error(request, error_text(exc))
        return render(request, "gpu_agent/plan.html", context, status=409)
    _tell_applied(request, "Plan", done, refused)
    return redirect("portal:fleet")
