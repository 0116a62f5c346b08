"""What the portal's pages show of quota advice: context helpers the tenant and request
pages call (one call each), the tenant page's "compute suggestions now" button, and an applied
request's "Since it applied" section with its "ask to go back to these numbers" button."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import reverse
from django.views import View
from django.views.decorators.http import require_POST

from advice import selectors, services, watch
from approvals.models import QuotaChangeRequest
from approvals.selectors import quota_request_get_for_user
from core import errors
from core.pages import error_text
from core.words import counted
from tenants.api.base import caller
from tenants.models import Tenant
from tenants.selectors import tenant_get_for_user, user_can_manage_tenant
from usage.views import workloads as workloads_page

BAR_WIDTH = 160  # px of the what-if chart's longest bar


def tenant_suggestions_context(*, tenant: Tenant, can_manage: bool) -> dict[str, Any]:
    """The tenant page's "Suggested changes" (the caller has already seen ``tenant``;
    ``can_manage``: a platform admin or one of its leads, as ``user_can_manage_tenant``)."""
    return {
        "advice_suggestions": selectors.suggestions_open(tenant=tenant),
        "advice_can_compute": can_manage,
        # Members and viewers read a suggested draft; its leads (and admins) submit it.
        "advice_can_submit": can_manage,
    }


def _bars(rows: list[selectors.TenantWhatIf]) -> list[dict[str, Any]]:
    """Queue wait p95 before and after per tenant, as bar widths (server-side SVG)."""
    waits = [
        value
        for row in rows
        for value in (row.before["wait_p95_s"], row.after["wait_p95_s"])
        if value is not None
    ]
    top = max(waits, default=0.0) or 1.0
    out = []
    for index, row in enumerate(rows):
        before, after = row.before["wait_p95_s"] or 0.0, row.after["wait_p95_s"] or 0.0
        out.append(
            {
                "tenant": row.tenant,
                "y": index * 34,
                "before": round(before / top * BAR_WIDTH, 1),
                "after": round(after / top * BAR_WIDTH, 1),
                "before_label": before,
                "after_label": after,
            }
        )
    return out


def request_what_if_panel(
    request: HttpRequest, change: QuotaChangeRequest
) -> tuple[str, dict[str, Any]]:
    """The request page's "What-if" section (a panel of ``approvals.panels``)."""
    return "advice/_what_if.html", request_what_if_context(request=request, change=change)


def request_what_if_context(*, request: HttpRequest, change: QuotaChangeRequest) -> dict[str, Any]:
    """The what-if's context: the replay when asked (``?what_if=1&days=N``), for open
    requests. The caller has already scoped ``change``."""
    context: dict[str, Any] = {
        "what_if_offered": change.status in ("draft", "pending"),
        "what_if": None,
        "what_if_days": selectors.WHAT_IF_DAYS_DEFAULT,
        "what_if_error": "",
        "what_if_max_days": selectors.WHAT_IF_DAYS_MAX,
    }
    if not context["what_if_offered"] or "what_if" not in request.GET:
        return context
    try:
        days = selectors.what_if_days(request.GET.get("days"))
    except errors.ValidationFailed as exc:
        context["what_if_error"] = f"days: {exc.fields.get('days', [exc.message])[0]}"
        return context
    result = selectors.quota_request_what_if(request=change, days=days)
    result = selectors.what_if_for_user(what_if=result, user=caller(request))
    context.update(
        what_if=result,
        what_if_days=days,
        what_if_bars=_bars(result.tenants),
        what_if_calibrated=bool(result.tenants) and all(row.calibrated for row in result.tenants),
        what_if_any_wait=any(
            row.before["wait_p95_s"] or row.after["wait_p95_s"] for row in result.tenants
        ),
        what_if_chart_height=max(len(result.tenants) * 34, 34),
    )
    return context


def request_watch_panel(
    request: HttpRequest, change: QuotaChangeRequest
) -> tuple[str, dict[str, Any]]:
    """The request page's "Since it applied" section (a panel of ``approvals.panels``):
    absent until the change has applied. The caller has already scoped ``change``."""
    seen = watch.change_watch(request=change)
    offered = seen is not None and watch.change_revert_offered(
        user=caller(request), change=change, seen=seen
    )
    return "advice/_change_watch.html", {"watch": seen, "watch_can_revert": offered}


@login_required
@require_POST
def request_revert(request: HttpRequest, pk: int) -> HttpResponse:
    """POST: file a draft back to the quota lines the applied change ``pk`` replaced, and
    open it for the lead to review and submit. Another tenant's request answers 404."""
    user = caller(request)
    change = quota_request_get_for_user(user=user, pk=pk)
    try:
        draft = services.change_revert_draft(request=change, actor=user)
    except (errors.Conflict, errors.ValidationFailed) as exc:
        messages.error(request, f"No draft was filed: {error_text(exc)}")
        return redirect("portal:request-detail", pk=pk)
    messages.success(
        request,
        f"Draft #{draft.pk} asks to go back to the quotas before request #{change.pk}. "
        "Review it, then submit it for approval.",
    )
    return redirect("portal:request-detail", pk=draft.pk)


class SuggestionsComputeView(LoginRequiredMixin, View):
    """POST: compute the tenant's suggestions now (its leads and platform admins). POST only
    (a class, as the request form's live check: any other method is refused before a tenant
    is looked up, 405 whatever the slug); another tenant answers 404."""

    http_method_names = ["post"]

    def post(self, request: HttpRequest, slug: str) -> HttpResponse:
        user = caller(request)
        tenant = tenant_get_for_user(user=user, slug=slug)
        if not user_can_manage_tenant(user=user, tenant=tenant):
            raise PermissionDenied(
                "Only the tenant's leads and platform admins compute suggestions."
            )
        rows = services.suggestions_compute(tenant=tenant, actor=user)
        filed = sum(1 for s in rows if s.request_id)
        messages.success(
            request,
            f"Suggestions computed for {counted(len(rows), 'cluster')}; "
            f"{counted(filed, 'draft')} to review.",
        )
        return redirect("portal:tenant-detail", slug=tenant.slug)


def workload_ask(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """POST: "Ask for what this needs" on a waiting workload: a draft request with its numbers
    and evidence, opened in the request form for the lead to review and file. A refusal of
    the numbers opens the form as it is, saying why."""
    user = caller(request)
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if request.method == "GET":  # a reloaded page: the list (404 for outsiders)
        return workloads_page(request, slug)
    if request.method != "POST":
        return HttpResponseNotAllowed(["GET", "POST"])
    tenant = tenant_get_for_user(user=user, slug=slug)
    try:
        draft = services.workload_request_draft(tenant=tenant, workload_id=pk, actor=user)
    except errors.ValidationFailed as exc:
        messages.error(request, f"The numbers this workload needs break a rule: {exc.message}")
        return redirect(reverse("portal:tenant-workloads", args=[tenant.slug]))
    messages.success(
        request,
        f"Draft request #{draft.pk} holds what this workload needs; review it and submit it.",
    )
    url = reverse("portal:request-new", args=[tenant.slug])
    return redirect(f"{url}?{urlencode({'cluster': draft.cluster.name, 'from': draft.pk})}")
