"""The portal's alerts pages: the list (filters by state, tenant, cluster, rule), one alert with
its history, and the two transitions (acknowledge; undo a suspension). Scoped like the API:
a tenant's leads see its alerts, platform admins all; anything else answers 404."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from alerts import selectors, services
from alerts.choices import AlertState
from alerts.models import Alert
from core.errors import ApplicationError
from core.pages import error_text
from tenants.api.base import caller

PAGE_SIZE = 50
FILTERS = {"state": "state", "tenant": "tenant__slug", "cluster": "cluster__name",
           "rule": "rule__name"}  # fmt: skip


def _alert(request: HttpRequest, pk: int) -> Alert:
    return selectors.alert_get_for_user(user=caller(request), pk=pk)


@login_required
@require_GET
def alert_list(request: HttpRequest) -> HttpResponse:
    rows = selectors.alerts_for_user(user=caller(request))
    chosen = {}
    for name, lookup in FILTERS.items():
        value = request.GET.get(name, "").strip()
        if value:
            rows = rows.filter(**{lookup: value})
            chosen[name] = value
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    alerts = list(page.object_list)
    # The button only where the POST would take it (the services' own rule); a member is told
    # who acts on the alerts she reads instead.
    may_act = selectors.alerts_may_act(user=caller(request), alerts=alerts)
    read_only = sorted(
        {a.tenant.slug for a in alerts if a.pk not in may_act and a.state == AlertState.FIRING
         and a.tenant is not None}
    )  # fmt: skip
    return render(
        request,
        "alerts/list.html",
        {"page": page, "alerts": alerts, "chosen": chosen, "states": AlertState.choices,
         "may_act": may_act, "read_only_tenants": read_only},
    )  # fmt: skip


@login_required
@require_GET
def alert_detail(request: HttpRequest, pk: int) -> HttpResponse:
    alert = _alert(request, pk)
    return render(
        request,
        "alerts/detail.html",
        {
            "alert": alert,
            "events": selectors.alert_events(alert=alert),
            "can_act": selectors.alert_may_act(user=caller(request), alert=alert),
        },
    )


@login_required
@require_POST
def alert_acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    alert = _alert(request, pk)
    try:
        services.alert_acknowledge(alert=alert, actor=caller(request))
        messages.success(request, "Alert acknowledged.")
    except ApplicationError as exc:
        messages.error(request, error_text(exc))
    return HttpResponseRedirect(reverse("portal:alert-detail", args=[alert.pk]))


@login_required
@require_POST
def alert_reactivate(request: HttpRequest, pk: int) -> HttpResponse:
    alert = _alert(request, pk)
    try:
        services.alert_reactivate(alert=alert, actor=caller(request))
        messages.success(request, "The workload is active again and queues for admission.")
    except ApplicationError as exc:
        messages.error(request, error_text(exc))
    return HttpResponseRedirect(reverse("portal:alert-detail", args=[alert.pk]))
