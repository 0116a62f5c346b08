"""The tenant's workloads page: thin, the rows and their words come from ``usage.selectors``,
suspend and resume from ``usage.services``."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render

from core import errors
from core.pages import error_text
from tenants.authentication import caller
from tenants.selectors import tenant_get_for_user, user_can_manage_tenant
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


@login_required
def person_caps(request: HttpRequest, slug: str) -> HttpResponse:
    """Each capped person's cap against what their admitted work holds now (R14). POST (a
    lead for members and the pipeline account, a platform admin for the default): set one
    cap line, or remove it with an empty amount; a refused line is a 400 with the reason."""
    user = caller(request)
    tenant = tenant_get_for_user(user=user, slug=slug)
    if request.method not in ("GET", "HEAD", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    error, status, posted = "", 200, {}
    if request.method == "POST":
        posted = request.POST.dict()
        try:
            services.person_cap_set_from_form(tenant=tenant, actor=user, form=posted)
        except (errors.PermissionDenied, errors.NotFound):
            raise  # the page for it
        except errors.ApplicationError as exc:
            error, status = error_text(exc), exc.status_code
        else:
            messages.success(request, "Cap saved; the cluster gets it with the next push.")
            return redirect("portal:tenant-person-caps", slug=tenant.slug)
    context = {
        "tenant": tenant,
        "caps": selectors.person_cap_use(tenant=tenant),
        "targets": selectors.person_cap_targets_for_page(tenant=tenant),
        "members": selectors.person_cap_members(tenant=tenant),
        "can_manage": user_can_manage_tenant(user=user, tenant=tenant),
        "is_admin": user.is_platform_admin,
        "error": error,
        "posted": posted,
    }
    return render(request, "usage/person_caps.html", context, status=status)
