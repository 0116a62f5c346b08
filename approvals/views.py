"""Portal pages for quota change requests: filing one (a tenant's leads, platform admins),
following it ("My requests", a request's page and timeline) and deciding it (the admins'
approvals queue).

Views stay thin: selectors read, services validate and write. The services name the fields a
rule concerns ("items[2].limit", "reason"); the views put each message back next to the input
it is about. Every page works without JavaScript; ``request-form.js`` only asks
``request_validate`` for the same answers while the lead types.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    JsonResponse,
)
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from django.views.decorators.http import require_GET, require_POST

from approvals import selectors as approval_selectors
from approvals.choices import OPEN_STATUSES, PUSH_UNDER_WAY_STATUSES, RequestStatus
from approvals.forms import (
    EGRESS_BLANK_ROWS,
    ApprovalQueueFilterForm,
    DecisionForm,
    EgressRuleForm,
    GrantRequestForm,
    QuotaRequestForm,
    QuotaRow,
    QuotaRowForm,
    RequestListFilterForm,
)
from approvals.models import QuotaChangeRequest
from approvals.panels import request_panels_render
from approvals.services import (
    DiffLine,
    RequestCheck,
    approval_policy,
    diff_line,
    flavor_isolation_broken,
    grant_extend,
    grant_get_for_user,
    grant_list_for_user,
    quota_request_approve,
    quota_request_approved_diff,
    quota_request_cancel,
    quota_request_check,
    quota_request_check_stored,
    quota_request_create,
    quota_request_dry_run,
    quota_request_ensure_can_file,
    quota_request_items,
    quota_request_reject,
    quota_request_retry,
    quota_request_submit,
    request_items_parse,
)
from core import errors
from core.pages import error_text
from quotas import selectors as quota_selectors
from quotas.choices import (
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    FlavorKind,
    GrantState,
    SyncBackend,
    SyncState,
    is_gpu_resource,
)
from quotas.kube.egress import MAX_RULES as MAX_EGRESS_RULES
from quotas.models import Cluster, Grant, TenantSync, TierTemplate
from quotas.quantity import format_quantity
from quotas.selectors import EffectiveQuota, EffectiveQuotaSet, FlavorAllocation
from quotas.services import (
    CapacityLine,
    QuotaItem,
    capacity_lines_check,
    egress_rules_canonical,
    elastic_cap,
    tier_items,
)
from quotas.sync import DryRun
from quotas.views import FieldChange, field_change
from tenants import selectors as tenant_selectors
from tenants.api.base import caller
from tenants.choices import MembershipRole
from tenants.models import AuditEvent, Tenant, User

ITEM_FIELD = re.compile(r"^items\[(\d+)\]\.(\w+)$")
EGRESS_FIELD = re.compile(r"^egress_rules\[(\d+)\](?:\.(\w+))?$")
EGRESS_LABEL = "Traffic out of the team's namespaces"
LIST_PAGE_SIZE = 50
QUEUE_PAGE_SIZE = 100
ACTIONS_THAT_STORE = ("draft", "submit")
PUSHED_STATUSES = (
    RequestStatus.APPROVED,
    RequestStatus.APPLYING,
    RequestStatus.APPLIED,
    RequestStatus.FAILED,
)


# --- shared pieces --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChangeLine:
    """One line a request changes: before -> after, in normalised GPU units too, and the
    cluster's capacity for it after approval (None when the cluster has no such line)."""

    diff: DiffLine
    capacity: CapacityLine | None

    @property
    def counts_gpus(self) -> bool:
        return is_gpu_resource(self.diff.resource)

    @property
    def guaranteed_units_before(self) -> Decimal:
        return self.diff.guaranteed_units_before

    @property
    def guaranteed_units_after(self) -> Decimal:
        return self.diff.guaranteed_units_after

    @property
    def units_increase(self) -> Decimal:
        return self.diff.units_increase

    @property
    def fits(self) -> bool:
        return self.capacity is None or (self.capacity.fits and not self.capacity.over_cap)


def _change_lines(
    cluster: Cluster,
    allocations: list[FlavorAllocation],
    diff: Iterable[DiffLine],
    department: bool = False,
) -> list[ChangeLine]:
    diff = list(diff)
    capacity = {
        (line.allocation.flavor.name, line.resource): line
        for line in capacity_lines_check(
            cluster=cluster, allocations=allocations, lines=diff, department=department
        )
    }
    return [ChangeLine(d, capacity.get((d.flavor, d.resource))) for d in diff]


def _units_increase(lines: Iterable[ChangeLine]) -> Decimal:
    return sum((line.units_increase for line in lines), Decimal(0))


def _row_order(allocation: FlavorAllocation) -> tuple[int, str, int, str]:
    """GPU flavors first, and within a flavor its GPU resource before CPU and memory (on a
    vGPU flavor: vGPUs, then GPU memory and compute)."""
    gpu_kinds = (FlavorKind.GPU, FlavorKind.MIG, FlavorKind.VGPU)
    kind_rank = 0 if allocation.flavor.kind in gpu_kinds else 1
    gpu_rank = 0 if is_gpu_resource(allocation.resource) else 1
    if allocation.resource in (GPUMEM_RESOURCE, GPUCORES_RESOURCE):
        gpu_rank = 0
    return kind_rank, allocation.flavor.name, gpu_rank, allocation.resource


def _visible_request(user: User, pk: int) -> QuotaChangeRequest:
    return approval_selectors.quota_request_get_for_user(user=user, pk=pk)


def _safe_next(request: HttpRequest, target: str | None) -> str | None:
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


# What each event of a request's history says; {cluster} is the request's cluster. Approving
# writes the quotas in the portal; they are in force once the push applied them in the cluster.
TIMELINE_LABELS = {
    "quota_request.created": "Filed",
    "quota_request.pending": "Submitted for approval",
    "quota_request.approval_recorded": "Approval recorded",
    "quota_request.approved": "Approved; pushing to {cluster}",
    "quota_request.applying": "Pushing to {cluster}",
    "quota_request.applied": "Applied in {cluster}",
    "quota_request.failed": "The push to {cluster} failed",
    "quota_request.retried": "Push to {cluster} retried",
    "quota_request.rejected": "Rejected",
    "quota_request.cancelled": "Cancelled",
    "quota_request.expired": "Expired",
}
# A cluster kept in the portal only (backend none) is never pushed to.
PORTAL_ONLY_LABELS = {
    "quota_request.approved": "Approved; {cluster} is kept in the portal only, nothing is pushed",
    "quota_request.applied": "Recorded for {cluster} (kept in the portal only)",
}


def _timeline_label(action: str, cluster: Cluster) -> str:
    labels = TIMELINE_LABELS
    if cluster.backend == SyncBackend.NONE:
        labels = {**TIMELINE_LABELS, **PORTAL_ONLY_LABELS}
    return labels.get(action, action).format(cluster=cluster.name)


@dataclass(frozen=True)
class TimelineEntry:
    event: AuditEvent
    label: str
    detail: str


def _timeline_detail(event: AuditEvent) -> str:
    after: dict[str, Any] = event.after if isinstance(event.after, dict) else {}
    if event.action == "quota_request.created":
        return "; ".join(
            f"{i['flavor']} {i['resource']} {i['before']} → {i['after']}"
            for i in after.get("items", [])
        )
    if event.action == "quota_request.approval_recorded":
        return f"{after.get('approvals')} of {after.get('required')} approvals"
    # Audit rows written before the field was renamed say "applied_generation".
    generation = after.get("approved_generation") or after.get("applied_generation")
    if generation:
        return f"quota generation {generation}"
    return ""


def _timeline(change: QuotaChangeRequest) -> list[TimelineEntry]:
    """The request's audit events, oldest first, with what each one means."""
    return [
        TimelineEntry(e, _timeline_label(e.action, change.cluster), _timeline_detail(e))
        for e in approval_selectors.quota_request_timeline(request=change)
    ]


# --- "Request a change" ---------------------------------------------------------------------


@dataclass
class RequestDraft:
    """The request form for one tenant on one cluster, bound or not, and what checking it
    found. ``index_map[i]`` is the form row of the request's ``items[i]``."""

    tenant: Tenant
    cluster: Cluster
    quota_set: EffectiveQuotaSet | None
    allocations: list[FlavorAllocation]
    form: QuotaRequestForm
    row_forms: list[QuotaRowForm]
    items: list[QuotaItem] | None = None
    index_map: list[int] = field(default_factory=list)
    scheduling: dict[str, Any] = field(default_factory=dict)
    check: RequestCheck | None = None
    isolation_level: str = ""
    production_priority: bool | None = None
    tenant_changes: dict[str, Any] = field(default_factory=dict)
    # The egress exceptions' rows; the rules the form started from (those in force, or a
    # draft's), and whether they go into the request even unchanged (a draft that set them).
    egress_forms: list[EgressRuleForm] = field(default_factory=list)
    egress_baseline: list[dict[str, Any]] = field(default_factory=list)
    egress_from_draft: bool = False
    egress_shown: bool = True  # False: a post without the rows (nothing to say about them)
    egress_index_map: list[int] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return (
            self.check is not None
            and not self.check.errors
            and self.form.is_valid()
            and all(f.is_valid() for f in self.row_forms)
            and all(f.is_valid() for f in self.egress_forms)
        )

    def egress_rules(self) -> list[dict[str, Any]] | None:
        """The egress exceptions the request sets (as the API takes them), or None when the
        rows leave those in force as they are: a list replaces them all, so one sent
        unchanged would overwrite a newer approved change."""
        picked = [(i, rule) for i, f in enumerate(self.egress_forms) if (rule := f.rule())]
        self.egress_index_map = [i for i, _ in picked]
        rules = [rule for _, rule in picked]
        if not self.egress_shown:
            return None
        if self.egress_from_draft:
            return rules
        try:
            unchanged = egress_rules_canonical(rules) == egress_rules_canonical(
                self.egress_baseline
            )
        except ValueError:
            unchanged = False  # a typo is a change: the rules name it
        return None if unchanged else rules

    def add_egress_row(self) -> None:
        """One more blank row (the "Add a row" button: no script needed)."""
        if len(self.egress_forms) < MAX_EGRESS_RULES + EGRESS_BLANK_ROWS:
            self.egress_forms.append(EgressRuleForm(prefix=f"egress-{len(self.egress_forms)}"))

    def parse_and_check(self) -> None:
        """Shape first (the forms), then the services: parse the changed rows and check the
        change against the quotas in force, putting every error next to its input. A wrong
        reason or count does not hold the rows back, so every error shows at once."""
        self.form.is_valid()  # its errors stay; the fields that passed still count below
        if not all([f.is_valid() for f in [*self.row_forms, *self.egress_forms]]):
            return
        picked = [(i, raw) for i, f in enumerate(self.row_forms) if (raw := f.raw_item())]
        self.index_map = [i for i, _ in picked]
        self.scheduling = self.form.scheduling_changes()
        egress = self.egress_rules()
        if egress is not None:
            self.scheduling["egress_rules"] = egress
        try:
            self.items = request_items_parse(
                cluster=self.cluster, raw_items=[raw for _, raw in picked]
            )
        except errors.ValidationFailed as exc:
            self.show_errors(exc.fields)
            return
        self.isolation_level = self.form.cleaned_data.get("isolation_level") or ""
        self.production_priority = self.form.production_priority_change()
        self.tenant_changes = self.form.tenant_changes()
        self.check = quota_request_check(
            tenant=self.tenant,
            cluster=self.cluster,
            items=self.items,
            scheduling=self.scheduling,
            isolation_level=self.isolation_level,
            production_priority=self.production_priority,
            tenant_changes=self.tenant_changes,
        )
        self.show_errors(self.check.errors)

    def show_errors(self, fields: Mapping[str, list[str]]) -> None:
        for name, found in fields.items():
            form, attribute = self._target(name)
            for message in found:
                form.add_error(attribute, message)

    def _target(self, name: str) -> tuple[forms.Form, str | None]:
        match = ITEM_FIELD.match(name)
        if match and int(match[1]) < len(self.index_map):
            row_form = self.row_forms[self.index_map[int(match[1])]]
            return row_form, match[2] if match[2] in row_form.fields else None
        match = EGRESS_FIELD.match(name)
        if match and int(match[1]) < len(self.egress_index_map):
            egress_form = self.egress_forms[self.egress_index_map[int(match[1])]]
            return egress_form, match[2] if match[2] in egress_form.fields else None
        if name in self.form.fields:
            return self.form, name
        return self.form, None  # "items", "quota_set": the request as a whole

    def errors_by_input(self) -> dict[str, list[str]]:
        """Every error keyed by the name of the input it belongs to ("items-2-limit"), of
        its row ("items-2"), or "__all__"."""
        found: dict[str, list[str]] = {}
        for form in (self.form, *self.row_forms, *self.egress_forms):
            for name, messages_ in form.errors.items():
                key = form.add_prefix(name) if name != "__all__" else (form.prefix or "__all__")
                found.setdefault(key, []).extend(str(m) for m in messages_)
        return found

    @property
    def error_count(self) -> int:
        return sum(len(found) for found in self.errors_by_input().values())

    def scheduling_diff(self) -> list[tuple[str, str, str]]:
        """(label, in force, requested) of each scheduling field the request changes."""
        lines = []
        for name, value in self.scheduling.items():
            if name == "egress_rules":
                shown = None if self.egress_from_draft else len(self.egress_baseline)
                lines.append((EGRESS_LABEL, _exceptions(shown), _exceptions(len(value))))
                continue
            before = getattr(self.quota_set, name, None)
            if name == "storage_bytes":
                before = None if before is None else format_quantity(before, "storage")
                value = format_quantity(value, "storage")
            label = str(self.form.fields[name].label)
            lines.append((label, "not set" if before is None else str(before), str(value)))
        return lines

    def capacity(self) -> list[CapacityLine]:
        return capacity_lines_check(
            cluster=self.cluster,
            allocations=self.allocations,
            lines=self.check.diff if self.check else [],
            department=self.tenant.children.exists(),
        )

    def changes(self) -> list[ChangeLine]:
        return _change_lines(
            self.cluster,
            self.allocations,
            self.check.diff if self.check else [],
            department=self.tenant.children.exists(),
        )


def _exceptions(count: int | None) -> str:
    if count is None:
        return "as in the draft"
    return f"{count} exception{'' if count == 1 else 's'}"


def _egress_forms(
    data: Mapping[str, Any] | None, rules: list[dict[str, Any]]
) -> list[EgressRuleForm]:
    """The rows of the egress exceptions: on a GET, ``rules`` and a few blank rows; on a
    POST, as many rows as the page had (its hidden count)."""
    if data is None:
        initial = [EgressRuleForm.initial_from(rule) for rule in rules]
        initial += [{"protocol": "TCP"}] * EGRESS_BLANK_ROWS
        return [EgressRuleForm(prefix=f"egress-{i}", initial=v) for i, v in enumerate(initial)]
    count = str(data.get("egress-rows", ""))
    rows = min(int(count) if count.isdigit() else 0, MAX_EGRESS_RULES + EGRESS_BLANK_ROWS)
    return [EgressRuleForm(data, prefix=f"egress-{i}") for i in range(rows)]


def _tier_presets(
    tier: TierTemplate | None, cluster: Cluster, quota_set: EffectiveQuotaSet | None
) -> dict[tuple[str, str], QuotaItem]:
    """A tier's items on the GPU flavor the tenant uses on ``cluster`` (else the cluster's
    first whole-GPU flavor), keyed by (flavor name, resource)."""
    if tier is None:
        return {}
    in_use = {
        i.flavor_name
        for i in (quota_set.items if quota_set else [])
        if i.flavor_kind == FlavorKind.GPU
    }
    flavors = cluster.flavors.filter(kind=FlavorKind.GPU).order_by("name")
    flavor = flavors.filter(name__in=in_use).first() or flavors.first()
    if flavor is None:
        return {}
    return {(i.flavor.name, i.resource): i for i in tier_items(tier=tier, gpu_flavor=flavor)}


def _request_presets(source: QuotaChangeRequest | None) -> dict[tuple[str, str], QuotaItem]:
    """A draft's items (the form started from it), keyed by (flavor name, resource)."""
    if source is None:
        return {}
    return {(i.flavor.name, i.resource): i for i in quota_request_items(source)}


def _request_initial(source: QuotaChangeRequest | None) -> dict[str, Any]:
    """A draft's reason, and the scheduling limits it changes, as the form's initial values."""
    if source is None:
        return {}
    initial = {k: v for k, v in QuotaRequestForm.initial_from(source).items() if v is not None}
    production = ""
    if source.production_priority is not None:
        production = "grant" if source.production_priority else "withdraw"
    return initial | {
        "reason": source.reason,
        "isolation_level": source.isolation_level,
        "production_priority": production,
        "max_run_time_hours": source.max_run_time_hours,
        "gpu_unit_cap": source.gpu_unit_cap,
        "pod_bandwidth_max": (
            None if source.pod_bandwidth_max is None else source.pod_bandwidth_max or "none"
        ),
    }


def _draft(
    *,
    tenant: Tenant,
    cluster: Cluster,
    data: Mapping[str, Any] | None = None,
    tier: TierTemplate | None = None,
    reason_required: bool = False,
    source: QuotaChangeRequest | None = None,
) -> RequestDraft:
    quota_set = next(
        (
            qs
            for qs in quota_selectors.tenant_effective_quotas(tenant=tenant)
            if qs.cluster_name == cluster.name
        ),
        None,
    )
    in_force: dict[tuple[str, str], EffectiveQuota] = {
        (i.flavor_name, i.resource): i for i in (quota_set.items if quota_set else [])
    }
    # Only the flavors the tenant's level allows (the rule that refuses a line), and those it
    # holds already, to be lowered; the level in force, so the rows are the same on a POST.
    held = {flavor_name for flavor_name, _ in in_force}
    allocations = sorted(
        (
            a
            for a in quota_selectors.cluster_allocations(cluster=cluster)
            if a.flavor.name in held
            or not flavor_isolation_broken(tenant.isolation_level, a.flavor)
        ),
        key=_row_order,
    )
    presets = _tier_presets(tier, cluster, quota_set) | _request_presets(source)
    row_forms = []
    for index, allocation in enumerate(allocations):
        key = (allocation.flavor.name, allocation.resource)
        row = QuotaRow(
            allocation,
            elastic_cap(
                capacity=allocation.capacity,
                fraction=cluster.elastic_cap_fraction,
                resource=allocation.resource,
            ),
            in_force.get(key),
        )
        row_forms.append(
            QuotaRowForm(
                data, prefix=f"items-{index}", row=row, initial=row.initial(presets.get(key))
            )
        )
    form = QuotaRequestForm(
        data,
        quota_set=quota_set,
        reason_required=reason_required,
        initial=QuotaRequestForm.initial_from(tier or quota_set) | _request_initial(source),
    )
    # A draft that set egress exceptions keeps them; otherwise the form starts from those in
    # force and sends them only if changed.
    from_draft = source is not None and source.egress_rules is not None
    if source is not None and source.egress_rules is not None:
        baseline = list(source.egress_rules)
    else:
        baseline = list(quota_set.egress_rules if quota_set else [])
    return RequestDraft(
        tenant,
        cluster,
        quota_set,
        allocations,
        form,
        row_forms,
        egress_forms=_egress_forms(data, baseline),
        egress_baseline=baseline,
        egress_from_draft=from_draft,
        egress_shown=data is None or "egress-rows" in data,
    )


def _tenant_for_filing(request: HttpRequest, slug: str) -> Tenant:
    """The tenant, if the caller may file requests for it: 404 for a tenant they may not see,
    403 for its members and viewers. Views call it before looking at the method, so another
    tenant's routes answer 404 to every method, as the API's do."""
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    # The service's own refusal, word for word as the API gives it (the 403 page shows it).
    quota_request_ensure_can_file(actor=user, tenant=tenant)
    return tenant


def _cluster(name: str) -> Cluster:
    cluster = quota_selectors.cluster_list().filter(name=name).first()
    if cluster is None:
        raise errors.NotFound.for_field("cluster", "No such cluster.")
    return cluster


def _form_context(draft: RequestDraft, user: User) -> dict[str, Any]:
    tenant, cluster = draft.tenant, draft.cluster
    query = f"?cluster={cluster.name}"
    open_requests = approval_selectors.quota_request_list_for_user(user=user).filter(
        tenant=tenant, cluster=cluster, status__in=OPEN_STATUSES
    )
    return {
        "open_requests": open_requests,
        "draft": draft,
        "tenant": tenant,
        "cluster": cluster,
        "quota_set": draft.quota_set,
        "form": draft.form,
        "row_forms": draft.row_forms,
        "egress_forms": draft.egress_forms,
        "egress_label": EGRESS_LABEL,
        "check": draft.check,
        "capacity": draft.capacity(),
        "tiers": quota_selectors.tier_list(),
        "form_url": reverse("portal:request-new", args=[tenant.slug]) + query,
        "validate_url": reverse("portal:request-validate", args=[tenant.slug]) + query,
    }


@login_required
def request_new(request: HttpRequest, slug: str) -> HttpResponse:
    """The request form, prefilled with the quota in force (or a tier's numbers). Its buttons:
    "Check" (validate, store nothing), "Save draft" and "Submit"."""
    tenant = _tenant_for_filing(request, slug)
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    cluster_name = request.GET.get("cluster", "")
    if not cluster_name:
        context = {
            "tenant": tenant,
            "clusters": quota_selectors.cluster_list(),
            "quota_sets": {
                qs.cluster_name for qs in quota_selectors.tenant_effective_quotas(tenant=tenant)
            },
        }
        return render(request, "approvals/choose_cluster.html", context)
    cluster = _cluster(cluster_name)
    posted = request.method == "POST"
    # A draft (a suggested change, say) edited here and replaced by what is filed.
    source = approval_selectors.quota_request_draft_for_form(
        user=caller(request),
        tenant=tenant,
        cluster_id=cluster.pk,
        pk=request.POST.get("replaces") if posted else request.GET.get("from"),
        drafts_only=not posted,
    )
    if not posted:
        tier = quota_selectors.tier_list().filter(name=request.GET.get("tier", "")).first()
        draft = _draft(tenant=tenant, cluster=cluster, tier=tier, source=source)
        return render(
            request,
            "approvals/new.html",
            _form_context(draft, caller(request)) | {"tier": tier, "source": source},
        )

    action = request.POST.get("action", "check")
    # A form started from a tier files a tier change: the quota set takes the tier.
    tier = quota_selectors.tier_list().filter(name=request.POST.get("tier", "")).first()
    draft = _draft(
        tenant=tenant,
        cluster=cluster,
        data=request.POST,
        reason_required=action in ACTIONS_THAT_STORE,
        source=source,
    )
    draft.parse_and_check()
    if action == "add-egress-row":
        draft.add_egress_row()
    if draft.valid and draft.items is not None and action in ACTIONS_THAT_STORE:
        try:
            change = quota_request_create(
                tenant=tenant,
                cluster=cluster,
                requester=caller(request),
                reason=draft.form.cleaned_data["reason"],
                items=draft.items,
                scheduling=draft.scheduling,
                submit=action == "submit",
                tier=tier,
                replaces=source,
                isolation_level=draft.isolation_level,
                production_priority=draft.production_priority,
                tenant_changes=draft.tenant_changes,
            )
        except errors.ValidationFailed as exc:
            draft.show_errors(exc.fields)
        except errors.Conflict as exc:
            messages.error(request, exc.message)
        else:
            done = "submitted for approval" if action == "submit" else "saved as a draft"
            if source is not None:
                done += f"; it replaces draft #{source.pk}, now cancelled"
            messages.success(request, f"Request #{change.pk} {done}.")
            return redirect("portal:request-detail", pk=change.pk)
    context = _form_context(draft, caller(request)) | {"tier": tier, "source": source}
    return render(request, "approvals/new.html", context)


class RequestValidateView(LoginRequiredMixin, View):
    """The live check of the request form: the form's own fields in, what the services say
    out (errors keyed by input name, warnings, the diff, approvals needed) and the check panel
    rendered, so the page shows exactly what a submit would. Stores nothing; 200 even when the
    request is invalid (``valid`` says so). POST only (a class, so that GET is refused before
    any tenant is looked up: 405 whatever the slug)."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, slug: str) -> JsonResponse:
        tenant = _tenant_for_filing(request, slug)
        cluster = _cluster(request.GET.get("cluster", ""))
        source = approval_selectors.quota_request_draft_for_form(
            user=caller(request),
            tenant=tenant,
            cluster_id=cluster.pk,
            pk=request.POST.get("replaces"),
            drafts_only=False,
        )
        draft = _draft(tenant=tenant, cluster=cluster, data=request.POST, source=source)
        draft.parse_and_check()
        check = draft.check
        context = _form_context(draft, caller(request))
        return JsonResponse(
            {
                "valid": draft.valid,
                "errors": draft.errors_by_input(),
                "warnings": check.warnings if check else [],
                "diff": [_diff_json(d) for d in (check.diff if check else [])],
                "required_approvals": check.required_approvals if check else None,
                "panel": render_to_string("approvals/_check.html", context, request=request),
            }
        )


def _diff_json(line: DiffLine) -> dict[str, Any]:
    return {
        "flavor": line.flavor,
        "resource": line.resource,
        "guaranteed_before": format_quantity(line.guaranteed_before, line.resource),
        "limit_before": format_quantity(line.limit_before, line.resource),
        "guaranteed_after": format_quantity(line.guaranteed_after, line.resource),
        "limit_after": format_quantity(line.limit_after, line.resource),
        "gpu_units_before": f"{line.gpu_units_before.normalize():f}",
        "gpu_units_after": f"{line.gpu_units_after.normalize():f}",
    }


# --- "Requests" and a request's page --------------------------------------------------------


@login_required
def request_list(request: HttpRequest) -> HttpResponse:
    user = caller(request)
    filters = RequestListFilterForm(request.GET, statuses=RequestStatus.choices)
    changes = approval_selectors.quota_request_list_for_user(user=user)
    filters.is_valid()  # a filter with a value it does not know is left out; the rest apply
    if status := filters.cleaned_data.get("status"):
        changes = changes.filter(status=status)
    if tenant := filters.cleaned_data.get("tenant"):
        changes = changes.filter(tenant__slug=tenant)
    if filters.cleaned_data.get("mine"):
        changes = changes.filter(requester=user)
    page = Paginator(changes, LIST_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "approvals/list.html",
        {"filters": filters, "page": page, "query": query.urlencode()},
    )


@dataclass(frozen=True)
class PushState:
    """Where an approved request stands in its cluster, in words."""

    kind: str  # the request's status
    text: str


def _push_state(change: QuotaChangeRequest, push: TenantSync | None) -> PushState:
    status = change.status
    portal_only = change.cluster.backend == SyncBackend.NONE
    if status == RequestStatus.APPLIED:
        text = f"Applied at generation {change.approved_generation}"
        return PushState(status, text + (" (kept in the portal only)" if portal_only else ""))
    if status == RequestStatus.FAILED:
        message = change.failure_message or (push.message if push else "")
        return PushState(status, f"Failed: {message}" if message else "Failed")
    if status == RequestStatus.APPLYING:
        if push is not None and push.state == SyncState.APPLYING and push.attempts:
            # ``attempts`` counts the failed ones: the one under way is the next.
            return PushState(status, f"Applying, attempt {push.attempts + 1}: {push.message}")
        return PushState(status, "Applying")
    return PushState(status, f"Approved, waiting for the push to {change.cluster.name}")


@dataclass(frozen=True)
class LiveStatus:
    """What the request page's script follows (``live-status.js``): the status endpoint, a
    fingerprint of what the status section shows, and whether it can still move on its own."""

    url: str
    version: str
    final: bool


# A pending request moves when an admin decides it elsewhere: its page follows it too, so that
# the badge does not say "Pending approval" after it was approved and applied.
FOLLOWED_STATUSES = (RequestStatus.PENDING, *PUSH_UNDER_WAY_STATUSES)


def _live_status(change: QuotaChangeRequest, push: PushState | None) -> LiveStatus:
    shown = f"{change.status}|{push.text if push else ''}"
    return LiveStatus(
        url=reverse("portal:request-status", args=[change.pk]),
        version=hashlib.sha256(shown.encode()).hexdigest()[:16],
        final=change.status not in FOLLOWED_STATUSES,
    )


@dataclass(frozen=True)
class ObjectChange:
    """One object of a dry run: created, deleted, or changed with its fields before -> after."""

    object: str
    change: str
    fields: list[FieldChange]
    descriptions: list[str]


def _dry_run_objects(dry_run: DryRun) -> list[ObjectChange]:
    return [
        ObjectChange(
            o.object,
            o.change,
            [
                field_change(path, d.get("before"), d.get("after"))
                for path, d in sorted(o.fields.items())
            ],
            o.descriptions,
        )
        for o in dry_run.objects
    ]


@login_required
def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """A request: its items, the diff against the quotas in force (while it is open), its
    decisions and timeline, and what the caller may do with it. Once approved, where its
    push to the cluster stands; while pending, what the cluster would see (the dry run:
    object by object, and the cluster's own verdict where it can be asked; a cluster that
    cannot be reached or is kept in the portal only says why it was not asked)."""
    user = caller(request)
    change = _visible_request(user, pk)
    is_open = change.status in OPEN_STATUSES
    pending = change.status == RequestStatus.PENDING
    push = None
    if change.status in PUSHED_STATUSES:
        push = _push_state(change, approval_selectors.quota_request_push(request=change))
    dry_run = quota_request_dry_run(request=change) if pending else None
    dry_run_objects = _dry_run_objects(dry_run) if dry_run else []
    check = quota_request_check_stored(request=change) if is_open else None
    if check:
        lines = _change_lines(
            change.cluster,
            quota_selectors.cluster_allocations(cluster=change.cluster),
            check.diff,
            department=change.tenant.children.exists(),
        )
    else:  # decided: what it changed, against the quota in force when it was approved
        lines = [ChangeLine(d, None) for d in quota_request_approved_diff(request=change)]
    own = change.requester_id == user.pk
    context: dict[str, Any] = {
        "live": _live_status(change, push),
        "change": change,
        "check": check,
        "lines": lines,
        "decisions": change.decisions.all(),
        "timeline": _timeline(change),
        "own": own,
        "can_submit": change.status == RequestStatus.DRAFT and (own or user.is_platform_admin),
        "can_cancel": is_open and own,
        "can_decide": pending and user.is_platform_admin and not own,
        "push": push,
        "can_retry": change.status == RequestStatus.FAILED and user.is_platform_admin,
        "dry_run": dry_run,
        "dry_run_changed": [o for o in dry_run_objects if o.change == "changed"],
        "dry_run_created": [o for o in dry_run_objects if o.change == "created"],
        "dry_run_deleted": [o for o in dry_run_objects if o.change == "deleted"],
    }
    context["panels"] = request_panels_render(request=request, change=change)
    return render(request, "approvals/detail.html", context)


@login_required
@require_GET
def request_status(request: HttpRequest, pk: int) -> JsonResponse:
    """Where a request stands, for its page's script while the push runs: the status in words,
    the push's progress, ``final`` (nothing moves it any more: no push under way and no
    decision to wait for; a draft waits only on its own author), a
    ``version`` fingerprint of what the page shows, and the page's status badge and "In the
    cluster" section rendered again (``fragments``) to swap in. The same access as the page:
    404 for a request the caller does not see."""
    user = caller(request)
    change = _visible_request(user, pk)
    sync = None
    push = None
    if change.status in PUSHED_STATUSES:
        sync = approval_selectors.quota_request_push(request=change)
        push = _push_state(change, sync)
    live = _live_status(change, push)
    context = {
        "change": change,
        "push": push,
        "live": live,
        "can_retry": change.status == RequestStatus.FAILED and user.is_platform_admin,
    }
    fragments = {
        "badge": render_to_string("approvals/_status_badge.html", context, request=request)
    }
    if change.status not in OPEN_STATUSES:
        # Opened while pending: its buttons (decide, cancel) no longer apply once decided.
        fragments["actions"] = render_to_string(
            "approvals/_decided_actions.html", context, request=request
        )
    if push is not None:
        fragments["push"] = render_to_string("approvals/_push.html", context, request=request)
        fragments["timeline"] = render_to_string(
            "approvals/_timeline.html", {"timeline": _timeline(change)}, request=request
        )
    body = {
        "request": change.pk,
        "status": change.status,
        "status_display": change.get_status_display(),
        "text": push.text if push else change.get_status_display(),
        "push": (
            {"state": sync.state, "attempts": sync.attempts, "message": sync.message}
            if push is not None and sync is not None
            else None
        ),
        "final": live.final,
        "version": live.version,
        "fragments": fragments,
    }
    response = JsonResponse(body)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def request_submit(request: HttpRequest, pk: int) -> HttpResponse:
    change = _visible_request(caller(request), pk)
    try:
        quota_request_submit(request=change, actor=caller(request))
    except errors.ApplicationError as exc:
        messages.error(request, f"Request #{pk} was not submitted: {error_text(exc)}")
    else:
        messages.success(request, f"Request #{pk} submitted for approval.")
    return redirect("portal:request-detail", pk=pk)


@login_required
@require_POST
def request_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    change = _visible_request(caller(request), pk)
    try:
        quota_request_cancel(request=change, actor=caller(request))
    except errors.ApplicationError as exc:
        messages.error(request, f"Request #{pk} was not cancelled: {error_text(exc)}")
    else:
        messages.success(request, f"Request #{pk} cancelled.")
    return redirect("portal:request-detail", pk=pk)


@login_required
@require_POST
def request_retry(request: HttpRequest, pk: int) -> HttpResponse:
    """Push a failed request's quotas again (platform admins), once the cause is fixed."""
    user = caller(request)
    change = _visible_request(user, pk)
    try:
        quota_request_retry(request=change, actor=user)
    except (errors.PermissionDenied, errors.NotFound):
        raise  # the page for it, not a message on the request page
    except errors.ApplicationError as exc:
        messages.error(request, f"Request #{pk} was not retried: {error_text(exc)}")
    else:
        messages.success(
            request, f"Request #{pk}: the push to {change.cluster.name} is queued again."
        )
    return redirect("portal:request-detail", pk=pk)


def _decide(request: HttpRequest, pk: int, *, approve: bool) -> HttpResponse:
    user = caller(request)
    if not user.is_platform_admin:
        raise PermissionDenied("Only platform admins approve or reject requests.")
    change = _visible_request(user, pk)
    form = DecisionForm(request.POST)
    form.is_valid()
    comment = form.cleaned_data.get("comment", "")
    try:
        if approve:
            change = quota_request_approve(request=change, approver=user, comment=comment)
        else:
            change = quota_request_reject(request=change, approver=user, comment=comment)
    except errors.ApplicationError as exc:
        verb = "approved" if approve else "rejected"
        messages.error(request, f"Request #{pk} was not {verb}: {error_text(exc)}")
    else:
        messages.success(request, _decision_message(change, approve=approve))
    target = _safe_next(request, form.cleaned_data.get("next"))
    return redirect(target or reverse("portal:request-detail", args=[pk]))


def _decision_message(change: QuotaChangeRequest, *, approve: bool) -> str:
    where = f"{change.tenant.slug} on {change.cluster.name}"
    if not approve:
        return f"Request #{change.pk} ({where}) rejected."
    if change.status == RequestStatus.PENDING:
        return (
            f"Approval of request #{change.pk} ({where}) recorded; it needs "
            f"{change.required_approvals} approvals from different admins."
        )
    return (
        f"Request #{change.pk} approved: {where} now has quota generation "
        f"{change.approved_generation}."
    )


@login_required
@require_POST
def request_approve(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, approve=True)


@login_required
@require_POST
def request_reject(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, approve=False)


# --- the approvals queue --------------------------------------------------------------------


@dataclass
class QueueEntry:
    """A pending request as the queue shows it: each line before -> after against the quotas
    in force, and the capacity it would leave."""

    change: QuotaChangeRequest
    lines: list[ChangeLine]
    own: bool

    @property
    def gpu_units_increase(self) -> Decimal:
        return _units_increase(self.lines)

    @property
    def fits(self) -> bool:
        return all(line.fits for line in self.lines)


def _queue_entries(changes: list[QuotaChangeRequest], user: User) -> list[QueueEntry]:
    """Diffs and capacity of many requests at once: one query for the quotas in force of
    all their tenants and two per cluster, whatever the number of requests (their items come
    prefetched by the selector)."""
    tenants = {c.tenant_id: c.tenant for c in changes}
    in_force: dict[tuple[int, str, str, str], EffectiveQuota] = {
        (tenant_id, quota_set.cluster_name, item.flavor_name, item.resource): item
        for tenant_id, quota_sets in quota_selectors.effective_quotas_for_tenants(
            tenants=tenants.values()
        ).items()
        for quota_set in quota_sets
        for item in quota_set.items
    }
    clusters = {c.cluster_id: c.cluster for c in changes}
    allocations = {
        cluster_id: quota_selectors.cluster_allocations(cluster=cluster)
        for cluster_id, cluster in clusters.items()
    }
    departments = set(
        Tenant.objects.filter(parent_id__in=list(tenants)).values_list("parent_id", flat=True)
    )
    entries = []
    for change in changes:
        diff = []
        for item in change.items.all():
            before = in_force.get(
                (change.tenant_id, change.cluster.name, item.flavor.name, item.resource)
            )
            line = diff_line(item, before)
            if change.ends_at is not None:  # a grant for a time adds its amounts
                line = dataclasses.replace(
                    line,
                    guaranteed_after=line.guaranteed_before + item.guaranteed,
                    limit_after=line.limit_before + item.limit,
                )
            diff.append(line)
        lines = _change_lines(
            change.cluster,
            allocations[change.cluster_id],
            diff,
            department=change.tenant_id in departments,
        )
        entries.append(QueueEntry(change, lines, change.requester_id == user.pk))
    return entries


@login_required
def approvals_queue(request: HttpRequest) -> HttpResponse:
    """Pending requests, oldest first, for platform admins, in a constant number of queries."""
    user = caller(request)
    if not user.is_platform_admin:
        raise PermissionDenied("Platform admins only.")
    policy = approval_policy()
    filters = ApprovalQueueFilterForm(
        request.GET,
        clusters=[c.name for c in quota_selectors.cluster_list()],
        tenants=approval_selectors.pending_tenant_slugs(
            user=user, named=request.GET.get("tenant", "")[:63]
        ),
        threshold=policy.two_approvers_above_gpu_units,
    )
    pending = (
        approval_selectors.quota_request_list_for_user(user=user)
        .filter(status=RequestStatus.PENDING)
        .order_by("submitted_at", "id")
    )
    filters.is_valid()  # a filter with a value it does not know is left out; the rest apply
    if cluster := filters.cleaned_data.get("cluster"):
        pending = pending.filter(cluster__name=cluster)
    if tenant := filters.cleaned_data.get("tenant"):
        pending = pending.filter(tenant__slug=tenant)
    entries = [
        e for e in _queue_entries(list(pending), user) if filters.size_matches(e.gpu_units_increase)
    ]
    page = Paginator(entries, QUEUE_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "approvals/queue.html",
        {
            "filters": filters,
            "page": page,
            "query": query.urlencode(),
            "policy": policy,
        },
    )


# --- grants for a time ---------------------------------------------------------------------


@dataclass(frozen=True)
class GrantBar:
    """One grant on a cluster's time line: where its bar starts and how wide it is (percent
    of the window shown), and its lines in words."""

    grant: Grant
    left: float
    width: float
    lines: str


@dataclass
class ClusterTimeline:
    cluster: Cluster
    bars: list[GrantBar] = field(default_factory=list)
    promised: list[str] = field(default_factory=list)


def _grant_lines_text(grant: Grant) -> str:
    return ", ".join(
        f"+{format_quantity(line.guaranteed, line.resource)} guaranteed / "
        f"+{format_quantity(line.limit, line.resource)} limit {line.resource} on {line.flavor.name}"
        for line in grant.lines.all()
    )


TIMELINE_DAYS = (7, 14, 30, 90)


@login_required
def grants_timeline(request: HttpRequest) -> HttpResponse:
    """Platform admins: every cluster's grants for a time on a time line from now, and what
    they promise at most at once next week per line (on top of the standing guarantees)."""
    user = caller(request)
    if not user.is_platform_admin:
        raise PermissionDenied("Only platform admins see every tenant's grants.")
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    try:
        days = int(request.GET.get("days", "14"))
    except ValueError:
        days = 14
    days = days if days in TIMELINE_DAYS else 14
    now = timezone.now()
    end = now + timedelta(days=days)
    span = (end - now).total_seconds()
    grants = (
        grant_list_for_user(user=user)
        .filter(starts_at__lt=end)
        .filter(Q(ends_at__gt=now) | Q(state=GrantState.ENDING))
    )
    by_cluster: dict[int, ClusterTimeline] = {}
    for cluster in quota_selectors.cluster_list():
        by_cluster[cluster.pk] = ClusterTimeline(cluster)
    for grant in grants:
        start = max(grant.starts_at, now)
        stop = min(max(grant.ends_at, start), end)
        left = (start - now).total_seconds() / span * 100
        width = max((stop - start).total_seconds() / span * 100, 0.5)
        by_cluster[grant.cluster_id].bars.append(
            GrantBar(
                grant, round(left, 2), round(min(width, 100 - left), 2), _grant_lines_text(grant)
            )
        )
    week = now + timedelta(days=7)
    for timeline in by_cluster.values():
        keys = {
            (line.flavor_id, line.resource): line.flavor.name
            for bar in timeline.bars
            for line in bar.grant.lines.all()
        }
        peaks = quota_selectors.grant_peaks(
            cluster=timeline.cluster, keys=keys, starts_at=now, ends_at=week
        )
        timeline.promised = [
            f"{format_quantity(peak.guaranteed, resource)} {resource} guaranteed on "
            f"{keys[(flavor_id, resource)]}"
            for (flavor_id, resource), peak in sorted(peaks.items())
            if peak.guaranteed
        ]
    context = {
        "timelines": [t for t in by_cluster.values() if t.bars],
        "clusters_without": [t.cluster for t in by_cluster.values() if not t.bars],
        "days": days,
        "day_choices": TIMELINE_DAYS,
        "now": now,
        "end": end,
    }
    return render(request, "approvals/grants_timeline.html", context)


@login_required
def tenant_grants(request: HttpRequest, slug: str) -> HttpResponse:
    """A tenant's grants for a time (its members see them); its leads ask to extend one."""
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)  # 404 first, any method
    if request.method != "GET":
        return HttpResponseNotAllowed(["GET"])
    grants = [
        (grant, _grant_lines_text(grant))
        for grant in grant_list_for_user(user=user).filter(tenant=tenant).order_by("-starts_at")
    ]
    role = tenant_selectors.membership_role(user=user, tenant=tenant)
    context = {
        "tenant": tenant,
        "grants": grants,
        "can_extend": user.is_platform_admin or role == MembershipRole.LEAD,
        "extendable": (GrantState.SCHEDULED, GrantState.ACTIVE),
    }
    return render(request, "approvals/tenant_grants.html", context)


@login_required
@require_POST
def grant_extend_view(request: HttpRequest, pk: int) -> HttpResponse:
    """A lead's ask to extend a grant: a new request from its end, submitted for approval."""
    user = caller(request)
    grant = grant_get_for_user(user=user, pk=pk)
    raw = request.POST.get("ends_at", "")
    ends_at = parse_datetime(raw) if raw else None
    if ends_at is not None and timezone.is_naive(ends_at):
        ends_at = timezone.make_aware(ends_at, timezone.get_current_timezone())
    try:
        if raw and ends_at is None:
            raise errors.ValidationFailed.for_field("ends_at", "not a date and time")
        change = grant_extend(
            grant=grant, actor=user, ends_at=ends_at, reason=request.POST.get("reason", "")
        )
    except (errors.PermissionDenied, errors.NotFound):
        raise
    except errors.ApplicationError as exc:
        messages.error(request, f"The grant was not extended: {error_text(exc)}")
        return redirect("portal:tenant-grants", slug=grant.tenant.slug)
    messages.success(request, f"Request #{change.pk} to extend the grant awaits approval.")
    return redirect("portal:request-detail", pk=change.pk)


@login_required
def grant_new(request: HttpRequest, slug: str) -> HttpResponse:
    """A lead asks for a grant for a time (one line; more lines, or several at once, through
    the API): filed and submitted as a request, decided like any."""
    tenant = _tenant_for_filing(request, slug)  # 404 / 403 before the method
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    lines = [
        (
            f"{flavor.cluster.name}|{flavor.name}|{fr.resource}",
            f"{flavor.cluster.name}: {fr.resource} on {flavor.name}",
        )
        for flavor in quota_selectors.flavor_list()
        for fr in flavor.resources.all()
    ]
    form = GrantRequestForm(request.POST or None, lines=lines)
    if request.method == "POST" and form.is_valid():
        cluster_name, flavor, resource = form.chosen_line()
        cluster = _cluster(cluster_name)
        try:
            items = request_items_parse(
                cluster=cluster,
                raw_items=[
                    {
                        "flavor": flavor,
                        "resource": resource,
                        "guaranteed": form.cleaned_data["guaranteed"],
                        "limit": form.cleaned_data["limit"],
                    }
                ],
            )
            change = quota_request_create(
                tenant=tenant,
                cluster=cluster,
                requester=caller(request),
                reason=form.cleaned_data["reason"],
                items=items,
                starts_at=form.cleaned_data["starts_at"],
                ends_at=form.cleaned_data["ends_at"],
                submit=True,
            )
        except errors.ValidationFailed as exc:
            form.show_errors(exc.fields)
        except errors.Conflict as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Request #{change.pk} for a grant awaits approval.")
            return redirect("portal:request-detail", pk=change.pk)
    return render(request, "approvals/grant_new.html", {"tenant": tenant, "form": form})
