"""Portal pages of the GPU fleet, for platform admins: the nodes and their GPUs ("Fleet"), one
GPU's MIG layout observed and desired, drawn as memory slices, with the form that sets a new
one (live-checked by ``layout-form.js``), and the MIG planner's proposal for a demand, applied
only after an explicit confirmation.

Fleet data is the platform's, not a tenant's: leads, members and viewers get 403, anonymous
visitors the login page. Views stay thin: ``gpu_agent.selectors`` reads, ``layout_set`` writes
(it validates with the catalogue's rules and refuses to destroy busy instances), the live check
and the drawings use ``gpu_agent.mig`` directly (pure functions: nothing is stored). The few
reads the selectors do not offer yet (every GPU of a page of nodes with its latest layout, a
GPU's layout history, the tenants' MIG quotas as planner demand) are thin helpers here.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.decorators.http import require_http_methods, require_POST

from gpu_agent import selectors as fleet_selectors
from gpu_agent.mig.catalogue import DATA_DIR, GpuModel, Profile, load_catalogue
from gpu_agent.mig.config import MigConfigEntry, MigPartedConfig, read_mig_parted_config
from gpu_agent.mig.config import configs_valid_for as mig_configs_valid_for
from gpu_agent.mig.layout import (
    InstanceRequest,
    LayoutResult,
    Placement,
    describe_starts,
    free_slices,
    validate_layout,
)
from gpu_agent.mig.planner import Demand, GpuPlan, Plan, plan
from gpu_agent.models import OPEN_LAYOUT_STATES, Gpu, LayoutState, MigInstance, MigLayout, Node
from gpu_agent.operator_services import is_operator_driven
from gpu_agent.proposals import gpu_state, planner_gpus
from gpu_agent.services import busy_destroyed_by, layout_deadline, layout_set, plan_apply
from portal import errors
from portal.fleet_drawing import (
    SliceDrawing,
    drawing_layout,
    drawing_observed,
    drawing_plan,
)
from portal.views_plan import stored_proposals
from portal.views_probe import isolation_context
from quotas.models import Cluster, MigOperatorNode
from tenants.api.base import caller
from tenants.models import User

NODES_PER_PAGE = 50
HISTORY_LENGTH = 10
MAX_DEMAND_ROWS = 6
MAX_DEMAND_COUNT = 10_000
EXAMPLE_CONFIG = DATA_DIR / "mig-parted-config-example.yaml"
LAYOUT_PREFIX = "instances"
DEMAND_PREFIX = "demand"
CONFIRM = "yes"


# --- access ---------------------------------------------------------------------------------


def _admin(request: HttpRequest) -> User:
    """The caller, when a platform admin; 403 for everyone else (the views are behind
    ``login_required``, so anonymous visitors were sent to the login page already)."""
    user = caller(request)
    if not user.is_platform_admin:
        raise PermissionDenied("The GPU fleet is for platform admins only.")
    return user


def _gpu(user: User, uuid: str) -> Gpu:
    try:
        return fleet_selectors.gpu_get(user=user, uuid=uuid)
    except errors.NotFound as exc:
        raise Http404(str(exc)) from exc


# --- wording --------------------------------------------------------------------------------


def ago(moment: datetime | None, now: datetime) -> str:
    """ "12 s ago", "5 min ago", "3 h ago", "2 d ago"; "never" for None."""
    if moment is None:
        return "never"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min ago"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} d ago"


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f}"


def _describe(instances: Iterable[Mapping[str, Any] | Placement]) -> str:
    """ "3g.40gb@0, 1g.10gb@4" (a start the agent picks: "1g.10gb@auto")."""
    parts = []
    for item in instances:
        if isinstance(item, Placement):
            parts.append(f"{item.profile}@{item.start}")
        else:
            start = item.get("start")
            parts.append(f"{item['profile']}@{'auto' if start is None else start}")
    return ", ".join(parts) or "no instances"


def _error_text(exc: errors.ApplicationError) -> str:
    """The service's message and the field messages that add something to it."""
    details = [m for ms in exc.fields.values() for m in ms if m not in exc.message]
    return " ".join([exc.message, *details])


# --- the catalogue and NVIDIA's example configs ---------------------------------------------


def model_of(gpu: Gpu) -> GpuModel | None:
    """The GPU's model in the MIG catalogue (by its NVML name), None when it has none."""
    return load_catalogue().find_model(gpu.name)


@functools.cache
def example_configs() -> MigPartedConfig:
    """NVIDIA's default mig-parted file (``gpu_agent/mig/data``), parsed once per process."""
    return read_mig_parted_config(EXAMPLE_CONFIG)


@functools.cache
def configs_for(model: GpuModel) -> tuple[str, ...]:
    """The example file's configs that give ``model`` a valid layout, in the file's order."""
    return tuple(mig_configs_valid_for(example_configs(), model))


def config_entry(name: str, model: GpuModel, index: int) -> MigConfigEntry | None:
    """The entry of example config ``name`` that mig-parted would apply to GPU ``index`` of
    ``model``: the first whose device filter reaches the model and whose devices include it."""
    entries = example_configs().configs.get(name, ())
    for entry in entries:
        if entry.applies_to(model) and (entry.devices == "all" or index in entry.devices):
            return entry
    return None


def _profile_label(profile: Profile) -> str:
    slices = "slice" if profile.memory_slices == 1 else "slices"
    return (
        f"{profile.name} · {profile.memory_slices} memory {slices}, starts at "
        f"{describe_starts(profile.placements).removeprefix('slice ')}"
    )


# --- "Fleet" --------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuRow:
    """A GPU as the fleet page lists it. ``instances``: its observed MIG instances."""

    gpu: Gpu
    model: GpuModel | None
    layout: MigLayout | None
    instances: Sequence[MigInstance]

    @property
    def memory(self) -> str:
        return f"{_gib(self.gpu.memory_used_mib)} / {_gib(self.gpu.memory_total_mib)} GiB"

    @property
    def utilization(self) -> str:
        if self.gpu.utilization_pct is not None:
            return f"{self.gpu.utilization_pct} %"
        return "n/a in MIG mode" if self.gpu.mig_mode_current else "n/a"

    @property
    def mig_mode(self) -> str:
        current = "on" if self.gpu.mig_mode_current else "off"
        if self.gpu.mig_mode_pending == self.gpu.mig_mode_current:
            return current
        return f"{current} → {'on' if self.gpu.mig_mode_pending else 'off'} after a reset"

    @property
    def free_slices(self) -> int | None:
        """Memory slices no observed instance takes; None when MIG is off or the model is
        not in the catalogue."""
        if self.model is None or not self.gpu.mig_mode_current:
            return None
        placements = [Placement(i.profile, i.start, i.size) for i in self.instances]
        return len(free_slices(self.model, placements))

    @property
    def instance_count(self) -> int:
        return len(self.instances)


@dataclass(frozen=True)
class NodeRow:
    node: Node
    stale: bool
    last_report: str
    gpus: list[GpuRow]
    mig_operator: MigOperatorNode | None = None  # gpu-operator clusters: the labels as read


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Every node (a page at a time) with its GPUs, in a constant number of queries."""
    user = _admin(request)
    now = timezone.now()
    page = Paginator(fleet_selectors.node_list(user=user), NODES_PER_PAGE).get_page(
        request.GET.get("page")
    )
    nodes: list[Node] = list(page.object_list)
    gpus = fleet_selectors.gpus_with_instances().filter(node__in=[n.pk for n in nodes])
    layouts = fleet_selectors.latest_layouts(gpus) if nodes else {}
    by_node: dict[int, list[GpuRow]] = {}
    for gpu in gpus if nodes else []:
        row = GpuRow(gpu, model_of(gpu), layouts.get(gpu.pk), list(gpu.instances.all()))
        by_node.setdefault(gpu.node_id, []).append(row)
    operator_states = fleet_selectors.mig_operator_states(user=user, nodes=nodes)
    rows = [
        NodeRow(
            n,
            fleet_selectors.node_is_stale(n),
            ago(n.last_report_at, now),
            by_node.get(n.pk, []),
            operator_states.get(n.pk),
        )
        for n in nodes
    ]
    context = {
        "overview": fleet_selectors.fleet_overview(user=user),
        "page": page,
        "nodes": rows,
    }
    return render(request, "portal/fleet/index.html", context)


# --- a GPU's layout: the form and its check -------------------------------------------------


class LayoutRowForm(forms.Form):
    """One GPU instance of the layout: a profile of the GPU's model and, optionally, where it
    starts (empty: the first free placement that leaves the most room)."""

    profile = forms.ChoiceField(required=False)
    start = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=63,
        widget=forms.NumberInput(attrs={"placeholder": "auto", "inputmode": "numeric"}),
    )

    def __init__(self, *args: Any, profiles: Sequence[Profile], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field_ = self.fields["profile"]
        assert isinstance(field_, forms.ChoiceField)
        field_.choices = [("", "—"), *((p.name, _profile_label(p)) for p in profiles)]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("start") is not None and not data.get("profile"):
            self.add_error("profile", "Choose a profile for this start, or clear the start.")
        return data


class LayoutForm(forms.Form):
    config = forms.ChoiceField(
        required=False,
        label="Or a named configuration",
        help_text="From NVIDIA's example mig-parted file; it replaces the rows above.",
    )
    drain = forms.BooleanField(
        required=False,
        label="Drain",
        help_text="If the layout would destroy busy instances, queue it until they are idle "
        "instead of refusing it.",
    )

    def __init__(self, *args: Any, configs: Sequence[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field_ = self.fields["config"]
        assert isinstance(field_, forms.ChoiceField)
        field_.choices = [("", "— the rows above —"), *((c, c) for c in configs)]


def _field_target(path: str) -> tuple[int | None, str | None]:
    """``instances[2].start`` -> (2, "start"); ``instances[2]`` -> (2, None); else (None, None)."""
    if not path.startswith(f"{LAYOUT_PREFIX}["):
        return None, None
    index_text, _, rest = path[len(LAYOUT_PREFIX) + 1 :].partition("]")
    if not index_text.isdigit():
        return None, None
    return int(index_text), rest.removeprefix(".") or None


@dataclass
class LayoutDraft:
    """The layout form of one GPU, bound or not, and what checking it found.
    ``index_map[i]`` is the form row of ``instances[i]`` (rows left empty are skipped)."""

    gpu: Gpu
    model: GpuModel
    observed: list[MigInstance]
    form: LayoutForm
    rows: list[LayoutRowForm]
    index_map: list[int] = field(default_factory=list)
    instances: list[dict[str, Any]] | None = None
    mig_enabled: bool = True
    config: str = ""
    result: LayoutResult | None = None

    @property
    def bound(self) -> bool:
        return self.form.is_bound

    def parse(self) -> bool:
        """The form's shape, then the instances to send; False (errors on the inputs) when
        the shape is wrong."""
        valid = [self.form.is_valid(), *[row.is_valid() for row in self.rows]]
        if not all(valid):
            return False
        self.config = self.form.cleaned_data.get("config") or ""
        if self.config:
            entry = config_entry(self.config, self.model, self.gpu.index)
            if entry is None:
                self.form.add_error(
                    "config",
                    f"{self.config} has no entry for GPU {self.gpu.index} ({self.model.name}).",
                )
                return False
            self.mig_enabled = entry.mig_enabled
            self.instances = [{"profile": i.profile} for i in entry.instances()]
            return True
        picked = [
            (i, row.cleaned_data)
            for i, row in enumerate(self.rows)
            if row.cleaned_data.get("profile")
        ]
        self.index_map = [i for i, _ in picked]
        self.instances = [
            {"profile": data["profile"]}
            | ({"start": data["start"]} if data.get("start") is not None else {})
            for _, data in picked
        ]
        return True

    def check(self) -> LayoutResult | None:
        """``validate_layout`` on the parsed instances (nothing stored)."""
        if self.instances is None:
            return None
        if not self.mig_enabled:
            self.result = LayoutResult(True, [], [], [])
        else:
            self.result = validate_layout(
                self.model, [InstanceRequest(i["profile"], i.get("start")) for i in self.instances]
            )
        return self.result

    @property
    def valid(self) -> bool:
        return self.result is not None and self.result.ok and not self.errors_by_input()

    def issue_fields(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for issue in self.result.issues if self.result else []:
            found.setdefault(issue.path, []).append(issue.message)
        return found

    def show_errors(self, fields: Mapping[str, Sequence[str]]) -> None:
        """Put each message next to its input: ``instances[i].profile`` on that row's select
        (a config's instances on the config select), ``instances`` on the form."""
        for path, found in fields.items():
            form, attribute = self._target(path)
            for message in found:
                if message not in form.errors.get(attribute or "__all__", []):
                    form.add_error(attribute, message)

    def _target(self, path: str) -> tuple[forms.Form, str | None]:
        if self.config:
            return self.form, "config"
        index, attribute = _field_target(path)
        if index is not None and index < len(self.index_map):
            row = self.rows[self.index_map[index]]
            return row, attribute if attribute in row.fields else None
        return self.form, None

    def errors_by_input(self) -> dict[str, list[str]]:
        """Every error keyed by its input's name ("instances-2-start"), its row's prefix
        ("instances-2") or "__all__"."""
        found: dict[str, list[str]] = {}
        for form in (self.form, *self.rows):
            for name, messages_ in form.errors.items():
                key = form.add_prefix(name) if name != "__all__" else (form.prefix or "__all__")
                found.setdefault(key, []).extend(str(m) for m in messages_)
        return found

    @property
    def error_count(self) -> int:
        return sum(len(m) for m in self.errors_by_input().values())

    @property
    def placements(self) -> list[Placement]:
        return list(self.result.placements) if self.result and self.result.ok else []

    @property
    def rules_broken(self) -> list[str]:
        return self.result.rules_broken if self.result else []

    def busy_destroyed(self) -> list[str]:
        """The busy instances (and whole-GPU processes) the layout would destroy: what makes
        ``layout_set`` answer 409 unless drained (the service's own rule)."""
        if self.result is None or not self.result.ok:
            return []
        keep = {(p.profile, p.start) for p in self.result.placements}
        return [
            why
            for _, why in busy_destroyed_by(gpu=self.gpu, keep=keep, mig_enabled=self.mig_enabled)
        ]

    @property
    def drain(self) -> bool:
        return bool(self.form.is_bound and self.form.is_valid() and self.form.cleaned_data["drain"])

    def proposal(self) -> SliceDrawing | None:
        if self.result is None or not self.result.ok:
            return None
        return drawing_layout(
            self.model, self.result.placements, observed=self.observed, mig_enabled=self.mig_enabled
        )


def _layout_initial(
    layout: MigLayout | None, observed: Sequence[MigInstance]
) -> list[dict[str, Any]]:
    """The rows start from the latest desired layout unless it failed (then from what the
    GPU has: a failed layout was not applied)."""
    if layout is not None and layout.mig_enabled and layout.state != LayoutState.FAILED:
        return [{"profile": i["profile"], "start": i.get("start")} for i in layout.instances]
    return [{"profile": i.profile, "start": i.start} for i in observed]


def layout_draft(
    *,
    gpu: Gpu,
    model: GpuModel,
    observed: list[MigInstance],
    layout: MigLayout | None,
    data: Mapping[str, Any] | None = None,
) -> LayoutDraft:
    profiles = list(model.profiles.values())
    initial = _layout_initial(layout, observed) if data is None else []
    rows = [
        LayoutRowForm(
            data,
            prefix=f"{LAYOUT_PREFIX}-{i}",
            profiles=profiles,
            initial=initial[i] if i < len(initial) else None,
        )
        for i in range(max(model.compute_slices, len(initial)))
    ]
    form = LayoutForm(data, configs=configs_for(model))
    return LayoutDraft(gpu, model, observed, form, rows)


@dataclass(frozen=True)
class HistoryRow:
    layout: MigLayout
    described: str


def _gpu_context(
    gpu: Gpu, draft: LayoutDraft | None, observed: list[MigInstance]
) -> dict[str, Any]:
    model = model_of(gpu)
    history = fleet_selectors.layout_history(gpu, limit=HISTORY_LENGTH)
    desired = history[0] if history else None
    if model is not None and draft is None:
        draft = layout_draft(gpu=gpu, model=model, observed=observed, layout=desired)
    return {
        "gpu": gpu,
        "node": gpu.node,
        "model": model,
        "stale": fleet_selectors.node_is_stale(gpu.node),
        "last_report": ago(gpu.node.last_report_at, timezone.now()),
        "row": GpuRow(gpu, model, desired, observed),
        "observed": drawing_observed(gpu, model, observed),
        "desired": desired,
        "desired_drawing": (
            drawing_layout(
                model, desired.instances, observed=observed, mig_enabled=desired.mig_enabled
            )
            if desired
            else None
        ),
        "desired_open": desired is not None and desired.state in OPEN_LAYOUT_STATES,
        "history": [HistoryRow(h, _describe(h.instances)) for h in history],
        "draft": draft,
        "deadline_minutes": round(layout_deadline().total_seconds() / 60),
        "validate_url": reverse("portal:fleet-gpu-layout-validate", args=[gpu.uuid]),
        "layout_url": reverse("portal:fleet-gpu-layout", args=[gpu.uuid]),
        **isolation_context(gpu, desired),
    }


def _observed(gpu: Gpu) -> list[MigInstance]:
    return list(gpu.instances.select_related("tenant").order_by("start"))


@login_required
def gpu_detail(request: HttpRequest, uuid: str) -> HttpResponse:
    """A GPU: its layout observed and desired, side by side, the history of its desired
    layouts, and the form that sets the next one."""
    user = _admin(request)
    gpu = _gpu(user, uuid)
    observed = _observed(gpu)
    context = {**_gpu_context(gpu, None, observed), **_mig_operator_context(user, gpu)}
    return render(request, "portal/fleet/gpu.html", context)


def _mig_operator_context(user: User, gpu: Gpu) -> dict[str, Any]:
    """For the MIG driver block (``_mig_driver.html``): the node's GPU Operator labels."""
    states = fleet_selectors.mig_operator_states(user=user, nodes=[gpu.node])
    return {"mig_operator": states.get(gpu.node.pk)}


@login_required
@require_POST
def gpu_layout(request: HttpRequest, uuid: str) -> HttpResponse:
    """Set the GPU's desired layout with ``layout_set`` ("check" only validates). Refusals
    are shown next to the form with their status, nothing changed: 400 for broken rules,
    409 for busy instances the layout would destroy."""
    user = _admin(request)
    gpu = _gpu(user, uuid)
    model = model_of(gpu)
    if model is None:
        messages.error(
            request, f"{gpu.name} has no MIG profiles in the catalogue; it cannot be split."
        )
        return redirect("portal:fleet-gpu", uuid=gpu.uuid)
    observed = _observed(gpu)
    history = fleet_selectors.layout_history(gpu, limit=1)
    draft = layout_draft(
        gpu=gpu,
        model=model,
        observed=observed,
        layout=history[0] if history else None,
        data=request.POST,
    )
    status = 200
    if not draft.parse():
        status = 400
    elif request.POST.get("action") == "check":
        draft.check()  # a check answers 200 whatever it finds; nothing is stored
        draft.show_errors(draft.issue_fields())
    else:
        assert draft.instances is not None
        draft.check()  # for the drawing next to the errors; the service decides
        try:
            layout = layout_set(
                gpu=gpu,
                instances=draft.instances,
                actor=user,
                drain=draft.drain,
                mig_enabled=draft.mig_enabled,
            )
        except errors.Conflict as exc:
            draft.form.add_error(None, _error_text(exc))
            status = exc.status_code
        except errors.ApplicationError as exc:
            draft.show_errors(exc.fields or {"instances": [exc.message]})
            status = exc.status_code
        else:
            messages.success(request, _layout_message(gpu, layout))
            return redirect("portal:fleet-gpu", uuid=gpu.uuid)
    context = {**_gpu_context(gpu, draft, observed), **_mig_operator_context(user, gpu)}
    return render(request, "portal/fleet/gpu.html", context, status=status)


def _layout_message(gpu: Gpu, layout: MigLayout) -> str:
    text = (
        f"Generation {layout.generation} of {gpu.uuid} ({_describe(layout.instances)}"
        f"{'' if layout.mig_enabled else ', MIG disabled'}) is {layout.state}"
    )
    if layout.waiting_for:
        return f"{text}: {layout.message}; the agent gets it once they are idle."
    if is_operator_driven(gpu):
        return f"{text}; the GPU Operator's MIG manager on {gpu.node.name} applies it."
    return f"{text}; the agent on {gpu.node.name} applies it at its next poll."


class GpuLayoutValidateView(LoginRequiredMixin, View):
    """The live check of the layout form: the form's own fields in, JSON out: the placements
    or every broken rule (errors keyed by input name), the busy instances it would destroy,
    and the proposal drawn as slices (rendered HTML). Stores nothing; 200 even when the
    layout is invalid (``valid`` says so). POST only, with the form's CSRF token."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, uuid: str) -> JsonResponse:
        user = _admin(request)
        gpu = _gpu(user, uuid)
        model = model_of(gpu)
        if model is None:
            message = f"{gpu.name} has no MIG profiles in the catalogue; it cannot be split."
            return JsonResponse(
                {"valid": False, "errors": {"__all__": [message]}, "placements": []}
            )
        observed = _observed(gpu)
        draft = layout_draft(
            gpu=gpu, model=model, observed=observed, layout=None, data=request.POST
        )
        if draft.parse():
            draft.check()
            draft.show_errors(draft.issue_fields())
        proposal = draft.proposal()
        drawing = (
            render_to_string("portal/fleet/_slices.html", {"drawing": proposal}, request=request)
            if proposal
            else ""
        )
        return JsonResponse(
            {
                "valid": draft.valid,
                "gpu_model": model.name,
                "mig_enabled": draft.mig_enabled,
                "config": draft.config,
                "placements": [
                    {"profile": p.profile, "start": p.start, "size": p.size}
                    for p in draft.placements
                ],
                "rules": draft.rules_broken,
                "errors": draft.errors_by_input(),
                "busy": draft.busy_destroyed(),
                "drawing": drawing,
                "panel": render_to_string(
                    "portal/fleet/_proposal.html", {"draft": draft}, request=request
                ),
            }
        )


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
    """One GPU of a plan, with what the pages draw and what applying it would do."""

    plan: GpuPlan
    gpu: Gpu
    model: GpuModel | None
    layout: MigLayout | None  # the latest desired layout
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
    def current(self) -> SliceDrawing:
        return drawing_plan(
            self.model,
            self.plan.current,
            other=self.plan.layout,
            busy=self.plan.kept_busy,
            current=True,
        )

    @property
    def proposed(self) -> SliceDrawing:
        return drawing_plan(
            self.model,
            self.plan.layout,
            other=self.plan.current,
            busy=self.plan.kept_busy,
            current=False,
        )

    @property
    def destroy(self) -> str:
        return _describe(self.plan.destroy)

    @property
    def create(self) -> str:
        return _describe(self.plan.create)


@dataclass
class Proposal:
    plan: Plan
    rows: list[PlanRow]
    demand: list[Demand]
    quota_lines: list[fleet_selectors.QuotaDemand]

    @property
    def changed(self) -> list[PlanRow]:
        return [r for r in self.rows if r.plan.changed]

    @property
    def to_apply(self) -> list[PlanRow]:
        return [r for r in self.rows if r.to_apply]

    @property
    def unchanged_count(self) -> int:
        return len(self.rows) - len(self.changed)

    @property
    def fingerprint(self) -> str:
        """What applying would write, and from what: a confirmation carries it back, and a
        plan that changed in between is not applied."""
        data = [
            [
                r.gpu.uuid,
                [[p.profile, p.start] for p in r.plan.current],
                [[p.profile, p.start] for p in r.plan.layout],
                r.layout.generation if r.layout else 0,
            ]
            for r in self.to_apply
        ]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:32]


def propose(
    *, cluster: Cluster | None, demand: list[Demand], quota_lines: list[fleet_selectors.QuotaDemand]
) -> Proposal:
    """Run the planner over the fleet's GPUs (those of ``cluster``'s nodes, when given):
    three queries (GPUs with nodes, their instances, their latest layouts)."""
    gpus_qs = planner_gpus(cluster=cluster)
    gpus = list(gpus_qs)
    layouts = fleet_selectors.latest_layouts(gpus_qs) if gpus else {}
    result = plan([gpu_state(g) for g in gpus], demand)
    by_uuid = {g.uuid: g for g in gpus}
    rows = []
    for gpu_plan in result.gpus:
        gpu = by_uuid[gpu_plan.uuid]
        rows.append(
            PlanRow(
                gpu_plan,
                gpu,
                model_of(gpu),
                layouts.get(gpu.pk),
                fleet_selectors.node_is_stale(gpu.node),
            )
        )
    return Proposal(result, rows, demand, quota_lines)


@dataclass(frozen=True)
class Refusal:
    row: PlanRow
    message: str
    status: int


def apply_proposal(*, proposal: Proposal, actor: User) -> tuple[list[MigLayout], list[Refusal]]:
    """The service applies the plan; refusals come back with the row they belong to."""
    rows = {row.gpu.pk: row for row in proposal.to_apply}
    done, refused = plan_apply(
        layouts=[
            (row.gpu, [{"profile": p.profile, "start": p.start} for p in row.plan.layout])
            for row in proposal.to_apply
        ],
        actor=actor,
    )
    return done, [Refusal(rows[r.gpu.pk], r.message, r.status) for r in refused]


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
    gb = "".join(ch for ch in rest.partition("gb")[0] if ch.isdigit())
    return (int(g) if g.isdigit() else 99, int(gb) if gb else 0, name)


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
    ``confirm`` and the plan's fingerprint) calls ``layout_set`` for every changed GPU,
    unless the plan changed in between."""
    user = _admin(request)
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
        return render(request, "portal/fleet/plan.html", context, status=400 if asked else 200)
    demand, quota_lines = found
    proposal = propose(cluster=draft.cluster, demand=demand, quota_lines=quota_lines)
    context |= {"proposal": proposal}
    if request.method != "POST":
        return render(request, "portal/fleet/plan.html", context)
    if request.POST.get("fingerprint") != proposal.fingerprint:
        messages.error(
            request,
            "The fleet changed since that plan was shown; nothing was applied. "
            "Review the plan below.",
        )
        return render(request, "portal/fleet/plan.html", context, status=409)
    if request.POST.get("confirm") != CONFIRM:
        return render(request, "portal/fleet/plan.html", context | {"confirming": True})
    done, refused = apply_proposal(proposal=proposal, actor=user)
    if done:
        messages.success(
            request,
            f"Plan applied to {len(done)} GPU{'s' if len(done) != 1 else ''}: "
            + "; ".join(f"{layout.gpu.uuid} generation {layout.generation}" for layout in done)
            + ". Each is pending until its node's agent applies it.",
        )
    for refusal in refused:
        messages.error(
            request,
            f"{refusal.row.gpu.uuid} on {refusal.row.gpu.node.name} was refused "
            f"({refusal.status}), nothing changed there: {refusal.message}",
        )
    if not done and not refused:
        messages.info(request, "Nothing to apply: every GPU already has the proposed layout.")
    return redirect("portal:fleet")
