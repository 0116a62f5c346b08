"""The tenant's workloads page: thin, the rows and their words come from ``usage.selectors``,
suspend and resume from ``usage.services``."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render

from tenants.authentication import caller
from tenants.selectors import tenant_get_for_user
from usage import selectors, services

PAGE_SIZE = 50


@login_required
def workloads(request: HttpRequest, slug: str) -> HttpResponse:
    """Every Kueue Workload of the tenant on each cluster (filters: state, person, cluster).
    The tenant first, so another tenant's route answers 404 to every method."""
    user = caller(request)
    tenant = tenant_get_for_user(user=user, slug=slug)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET"])
    filters = selectors.workload_filters_parse(tenant=tenant, params=request.GET.dict())
    rows = selectors.workload_list_for_tenant(tenant=tenant, filters=filters)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    query = urlencode({k: v for k, v in vars(filters).items() if v})
    context = {
        "tenant": tenant,
        "page": page,
        "rows": selectors.workload_rows(tenant=tenant, workloads=page.object_list),
        "readings": [r for r in selectors.cluster_readings() if r.stale],
        "filters": filters,
        "choices": selectors.workload_filter_choices(tenant=tenant),
        "query": query,
        "may_act": services.workload_may_act(actor=user, tenant=tenant),
    }
    return render(request, "usage/workloads.html", context)


@login_required
def workload_suspension(request: HttpRequest, slug: str, pk: int, action: str) -> HttpResponse:
    """POST: suspend or resume one workload (leads); refusals show the error page with its
    status. GET (a reloaded page): the list; outsiders get 404 as on every tenant route."""
    if request.method != "POST":
        return workloads(request, slug)  # the list, or its 405 (404 for outsiders first)
    user = caller(request)
    tenant = tenant_get_for_user(user=user, slug=slug)
    workload = services.workload_set_suspended(
        tenant=tenant, workload_id=pk, suspended=action == "suspend", actor=user
    )
    done = "suspended; Kueue frees its quota" if action == "suspend" else "resumed; it queues again"
    messages.success(request, f"{workload.namespace}/{workload.name} {done}.")
    return redirect("portal:tenant-workloads", slug=tenant.slug)
