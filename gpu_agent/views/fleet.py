"""Portal pages of the GPU fleet, for platform admins: the nodes and their GPUs ("Fleet"), and
one GPU's MIG layout observed and desired, drawn as memory slices, with the form that sets a
new one (live-checked by ``layout-form.js``). The planner's page is ``views/plan.py``, the
isolation section of the GPU page ``views/probe.py``.

Fleet data is the platform's, not a tenant's: leads, members and viewers get 403, anonymous
visitors the login page. Views stay thin: ``gpu_agent.selectors`` reads,
``services.layouts.layout_set`` writes (it validates with the catalogue's rules and refuses to
destroy busy instances; the live check asks its ``busy_destroyed_by``), the live check's
placement rules and the drawings use ``gpu_spec.mig`` directly (pure functions: nothing is
stored).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.decorators.http import require_POST

from core import errors
from core.numbers import ascii_whole
from core.pages import error_text
from gpu_agent import selectors as fleet_selectors
from gpu_agent.conf import layout_deadline
from gpu_agent.models import (
    OPEN_LAYOUT_STATES,
    Gpu,
    LayoutState,
    MigInstance,
    MigLayout,
    MigOperatorNode,
    Node,
)
from gpu_agent.selectors import is_operator_driven
from gpu_agent.services.layouts import busy_destroyed_by, layout_set
from gpu_agent.views.common import (
    admin_user,
    ago,
    config_entry,
    configs_for,
    describe,
    gib,
    gpu_for,
    model_of,
    profile_label,
)
from gpu_agent.views.drawing import SliceDrawing, drawing_layout, drawing_observed
from gpu_agent.views.probe import DEVICE_PLUGIN_TEXT, isolation_context
from gpu_spec.mig.catalogue import GpuModel, Profile
from gpu_spec.mig.layout import (
    InstanceRequest,
    LayoutResult,
    Placement,
    free_slices,
    validate_layout,
)
from tenants.models import User

NODES_PER_PAGE = 50
HISTORY_LENGTH = 10
LAYOUT_PREFIX = "instances"


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
        return f"{gib(self.gpu.memory_used_mib)} / {gib(self.gpu.memory_total_mib)} GiB"

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
    # What the node's cluster confirms of it (fleet capacity counts only that), in words.
    confirmed: bool = False
    confirmation: str = ""


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    """Every node (a page at a time) with its GPUs, in a constant number of queries."""
    user = admin_user(request)
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
            *fleet_selectors.cluster_confirmation(n, now=now),
        )
        for n in nodes
    ]
    context = {
        "overview": fleet_selectors.fleet_overview(user=user),
        "page": page,
        "nodes": rows,
    }
    return render(request, "gpu_agent/index.html", context)


# --- a GPU's layout: the form and its check -------------------------------------------------


# The MIG layout rules (gpu_spec.mig.layout.RULES) as the layout panel names them; the API
# keeps the slugs.
MIG_RULE_WORDS = {
    "unknown-profile": "profile not offered",
    "invalid-start": "start not allowed",
    "overlap": "instances overlap",
    "max-count": "too many of one profile",
    "media-extensions": "more than one media-extensions instance",
    "compute-slices": "too many compute slices",
    "memory-slices": "too many memory slices",
    "no-room": "no room left",
}


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
        field_.choices = [("", "—"), *((p.name, profile_label(p)) for p in profiles)]

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
    index = ascii_whole(index_text)
    if index is None:
        return None, None
    return index, rest.removeprefix(".") or None


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

    @property
    def rules_broken_in_words(self) -> list[str]:
        """The broken rules as the page says them ("no room left"), not their slugs."""
        return [MIG_RULE_WORDS.get(rule, rule) for rule in self.rules_broken]

    @property
    def issues_in_words(self) -> list[tuple[str, str, str]]:
        """(slug, rule in words, message) of each broken rule."""
        issues = self.result.issues if self.result else []
        return [(i.rule, MIG_RULE_WORDS.get(i.rule, i.rule), i.message) for i in issues]

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


@dataclass(frozen=True)
class LiveLayout:
    """What the GPU page's script follows (``live-status.js``): the status endpoint, a
    fingerprint of what its live blocks show (``LIVE_FRAGMENTS``), whether the agent still has
    work to do, where the desired layout stands in words and as a message level (the flash's
    colour), and ``flash_token``: the tag a layout's flash carries while it is still true."""

    url: str
    version: str
    final: bool
    text: str
    level: str
    flash_token: str


# The GPU page's blocks that a layout landing changes, each a template of its own that the
# status endpoint renders again: the page's script swaps them in place together.
LIVE_FRAGMENTS: dict[str, str] = {
    "layouts": "gpu_agent/_layouts.html",
    "facts": "gpu_agent/_gpu_facts.html",
    "history": "gpu_agent/_layout_history.html",
    "device-plugin": "gpu_agent/_device_plugin.html",
    "layout-flash": "gpu_agent/_layout_flash.html",
}


# A desired layout's state as the end of a sentence about it.
_STATE_WORDS: dict[str, str] = {
    LayoutState.PENDING: "is pending",
    LayoutState.APPLYING: "is being applied",
    LayoutState.SUCCESS: "is applied",
    LayoutState.FAILED: "failed",
    LayoutState.REBOOT_REQUIRED: "needs a reboot of the node",
}


def _layout_words(desired: MigLayout | None) -> str:
    """Where the GPU's desired layout stands, in a sentence."""
    if desired is None:
        return "No desired layout set: the GPU keeps what it has."
    what = f"Generation {desired.generation} ({describe(desired.instances)}"
    what += ")" if desired.mig_enabled else ", MIG disabled)"
    text = f"{what} {_STATE_WORDS.get(desired.state, desired.state)}"
    if desired.state == LayoutState.SUCCESS and desired.applied_at:
        text += f" (at {desired.applied_at:%H:%M} UTC)"
    return f"{text}: {desired.message}" if desired.message else f"{text}."


# A desired layout's state as the level of the flash that says it.
_STATE_LEVELS: dict[str, str] = {
    LayoutState.SUCCESS: "success",
    LayoutState.FAILED: "error",
    LayoutState.REBOOT_REQUIRED: "warning",
}


def layout_flash_token(layout: MigLayout | None) -> str:
    """The tag of a layout's flash (``_layout_flash.html``): generation and state, so that a
    page shows the flash only while the GPU's desired layout is still where it left it."""
    if layout is None:
        return "layout-state-none"
    return f"layout-state-{layout.generation}-{layout.state}"


def _live_layout(gpu: Gpu, desired: MigLayout | None, observed: list[MigInstance]) -> LiveLayout:
    shown = "|".join(
        [
            str(gpu.applied_generation),
            f"{gpu.mig_mode_current}:{gpu.mig_mode_pending}",
            str(desired.generation if desired else ""),
            desired.state if desired else "",
            desired.message if desired else "",
            str(desired.applied_at if desired else ""),
            desired.device_plugin if desired else "",
            str(desired.waiting_for if desired else ""),
            ";".join(f"{i.profile}@{i.start}:{i.busy}:{i.tenant_id}" for i in observed),
            str(fleet_selectors.node_is_stale(gpu.node)),
        ]
    )
    return LiveLayout(
        url=reverse("portal:fleet-gpu-status", args=[gpu.uuid]),
        version=hashlib.sha256(shown.encode()).hexdigest()[:16],
        final=desired is None or desired.state not in OPEN_LAYOUT_STATES,
        text=_layout_words(desired),
        level=_STATE_LEVELS.get(desired.state, "info") if desired else "info",
        flash_token=layout_flash_token(desired),
    )


def _layouts_context(
    gpu: Gpu, model: GpuModel | None, desired: MigLayout | None, observed: list[MigInstance]
) -> dict[str, Any]:
    """For ``_layouts.html``: the GPU's layout observed and desired, drawn as slices."""
    return {
        "gpu": gpu,
        "stale": fleet_selectors.node_is_stale(gpu.node),
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
        "live": _live_layout(gpu, desired, observed),
    }


def _live_context(
    gpu: Gpu, model: GpuModel | None, history: list[MigLayout], observed: list[MigInstance]
) -> dict[str, Any]:
    """For the page's blocks that a layout landing changes (``LIVE_FRAGMENTS``): the page
    renders them from this and the status endpoint renders them again from the same."""
    desired = history[0] if history else None
    return {
        **_layouts_context(gpu, model, desired, observed),
        "node": gpu.node,
        "model": model,
        "last_report": ago(gpu.node.last_report_at, timezone.now()),
        "row": GpuRow(gpu, model, desired, observed),
        "history": [HistoryRow(h, describe(h.instances)) for h in history],
        "device_plugin": DEVICE_PLUGIN_TEXT.get(desired.device_plugin, "") if desired else "",
        "device_plugin_layout": desired,
    }


def _gpu_context(
    gpu: Gpu, draft: LayoutDraft | None, observed: list[MigInstance]
) -> dict[str, Any]:
    model = model_of(gpu)
    history = fleet_selectors.layout_history(gpu, limit=HISTORY_LENGTH)
    desired = history[0] if history else None
    if model is not None and draft is None:
        draft = layout_draft(gpu=gpu, model=model, observed=observed, layout=desired)
    return {
        **isolation_context(gpu, desired),
        **_live_context(gpu, model, history, observed),
        "draft": draft,
        "deadline_minutes": round(layout_deadline().total_seconds() / 60),
        "validate_url": reverse("portal:fleet-gpu-layout-validate", args=[gpu.uuid]),
        "layout_url": reverse("portal:fleet-gpu-layout", args=[gpu.uuid]),
    }


def _observed(gpu: Gpu) -> list[MigInstance]:
    return list(gpu.instances.select_related("tenant").order_by("start"))


@login_required
def gpu_detail(request: HttpRequest, uuid: str) -> HttpResponse:
    """A GPU: its layout observed and desired, side by side, the history of its desired
    layouts, and the form that sets the next one."""
    user = admin_user(request)
    gpu = gpu_for(user, uuid)
    observed = _observed(gpu)
    context = {**_gpu_context(gpu, None, observed), **_mig_operator_context(user, gpu)}
    return render(request, "gpu_agent/gpu.html", context)


@login_required
def gpu_layout_status(request: HttpRequest, uuid: str) -> HttpResponse:
    """Where a GPU's MIG layout stands, for its page's script while the agent works: the
    desired layout (generation, state, message, instances) against what the agent last
    reported, ``final`` (the agent has nothing left to do), a ``version`` fingerprint and the
    page's blocks that depend on the layout rendered again (``fragments``: the layouts, the
    facts, the history, the device plugin line and the layout's flash) to swap in together.
    The page's access: platform admins only (403 for others), 404 for an unknown GPU."""
    user = admin_user(request)  # first, as on every fleet page: 403 whatever the method
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    gpu = gpu_for(user, uuid)
    observed = _observed(gpu)
    history = fleet_selectors.layout_history(gpu, limit=HISTORY_LENGTH)
    desired = history[0] if history else None
    context = _live_context(gpu, model_of(gpu), history, observed)
    live: LiveLayout = context["live"]
    body = {
        "gpu": gpu.uuid,
        "node": gpu.node.name,
        "stale": context["stale"],
        "applied_generation": gpu.applied_generation,
        "observed": [{"profile": i.profile, "start": i.start, "busy": i.busy} for i in observed],
        "desired": (
            {
                "generation": desired.generation,
                "state": desired.state,
                "message": desired.message,
                "mig_enabled": desired.mig_enabled,
                "instances": desired.instances,
                "waiting_for": len(desired.waiting_for or []),
            }
            if desired
            else None
        ),
        "text": live.text,
        "final": live.final,
        "version": live.version,
        "fragments": {
            name: render_to_string(template, context, request=request)
            for name, template in LIVE_FRAGMENTS.items()
        },
    }
    response = JsonResponse(body)
    response["Cache-Control"] = "no-store"
    return response


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
    user = admin_user(request)
    gpu = gpu_for(user, uuid)
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
            draft.form.add_error(None, error_text(exc))
            status = exc.status_code
        except errors.ApplicationError as exc:
            draft.show_errors(exc.fields or {"instances": [exc.message]})
            status = exc.status_code
        else:
            messages.success(
                request, _layout_message(gpu, layout), extra_tags=_layout_flash_tags(layout)
            )
            return redirect("portal:fleet-gpu", uuid=gpu.uuid)
    context = {**_gpu_context(gpu, draft, observed), **_mig_operator_context(user, gpu)}
    return render(request, "gpu_agent/gpu.html", context, status=status)


def _layout_flash_tags(layout: MigLayout) -> str:
    """The GPU page shows this flash as it is while ``layout`` stays where it is now, then
    where it stands (``_layout_flash.html``)."""
    return f"layout-flash {layout_flash_token(layout)}"


def _layout_message(gpu: Gpu, layout: MigLayout) -> str:
    text = (
        f"Generation {layout.generation} of {gpu.uuid} ({describe(layout.instances)}"
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
        user = admin_user(request)
        gpu = gpu_for(user, uuid)
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
            render_to_string("gpu_agent/_slices.html", {"drawing": proposal}, request=request)
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
                    "gpu_agent/_proposal.html", {"draft": draft}, request=request
                ),
            }
        )
