"""Portal pages: thin views over selectors; templates render plain HTML (no JavaScript needed)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    JsonResponse,
)
from django.shortcuts import render
from django.templatetags.static import static
from django.utils import timezone
from django.views.decorators.http import require_GET

from advice import views as advice_views
from portal.tasks import HEARTBEAT_CACHE_KEY
from quotas import selectors as quota_selectors
from quotas import views as quota_views
from tenants import selectors as tenant_selectors
from tenants.api.base import caller
from tenants.models import AuditEvent, Tenant


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """404 handler: JSON in the API's error shape under /api/, the portal's page elsewhere."""
    if request.path.startswith("/api/"):
        body = {"detail": "Not found.", "code": "not_found", "fields": {}}
        return JsonResponse(body, status=404)
    return render(request, "404.html", status=404)


@require_GET
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    return HttpResponsePermanentRedirect(static("portal/favicon.svg"))


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@login_required
def home(request: HttpRequest) -> HttpResponse:
    tenants = list(tenant_selectors.tenant_list_for_user(user=caller(request)))
    quotas = quota_selectors.effective_quotas_for_tenants(tenants=tenants)
    cards = [{"tenant": t, "quota_sets": quotas[t.pk]} for t in tenants]
    return render(request, "portal/home.html", {"cards": cards})


@login_required
def tenant_detail(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = tenant_selectors.tenant_get_for_user(user=caller(request), slug=slug)
    context = {
        "tenant": tenant,
        "namespaces": tenant_selectors.namespace_list_for_tenant(tenant=tenant),
        "members": tenant_selectors.membership_list_for_tenant(tenant=tenant),
        "quota_sets": quota_selectors.tenant_effective_quotas(tenant=tenant),
        "role": tenant_selectors.membership_role(user=caller(request), tenant=tenant),
        # Where its quotas stand in each cluster (no live read: "In the cluster" does that).
        "cluster_syncs": quota_views.cluster_syncs(tenant=tenant),
    }
    context |= advice_views.tenant_suggestions_context(request=request, tenant=tenant)
    return render(request, "portal/tenant_detail.html", context)


@login_required
def admin_console(request: HttpRequest) -> HttpResponse:
    if not caller(request).is_platform_admin:
        raise PermissionDenied("Platform admins only.")
    clusters = [
        {"cluster": c, "allocations": quota_selectors.cluster_allocations(cluster=c)}
        for c in quota_selectors.cluster_list()
    ]
    heartbeat = cache.get(HEARTBEAT_CACHE_KEY)
    context = {
        "clusters": clusters,
        "tenant_count": Tenant.objects.count(),
        "recent_events": AuditEvent.objects.select_related("tenant")[:20],
        "worker_seen_seconds_ago": (
            None if heartbeat is None else int((timezone.now() - heartbeat).total_seconds())
        ),
    }
    context |= quota_views.console_sync_panel(user=caller(request))
    return render(request, "portal/console.html", context)
