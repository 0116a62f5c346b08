"""Portal pages: thin views over selectors; templates render plain HTML (no JavaScript needed)."""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
    JsonResponse,
)
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.templatetags.static import static
from django.utils import timezone
from django.views.decorators.http import require_GET

from advice import views as advice_views
from alerts import selectors as alert_selectors
from core.words import duration_words, notice_words
from portal import health
from portal.help import help_page, inline_script_hashes, site_built, site_file, unbuilt_page
from portal.middleware import content_security_policy
from portal.tasks import HEARTBEAT_CACHE_KEY
from quotas import selectors as quota_selectors
from quotas import views as quota_views
from quotas.kube.bandwidth import bandwidth_words
from tenants import selectors as tenant_selectors
from tenants.api.base import caller
from tenants.choices import MembershipRole
from tenants.models import AuditEvent, Tenant
from usage import selectors as usage_selectors

# Where a card's bar turns to "high" (the default quota warning rule's threshold).
NEAR_LIMIT = Decimal("0.8")


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


@require_GET
def livez(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. Touches neither the database, the cache nor the broker."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200 when the database, the cache and the broker all answer, else 503."""
    checks = health.readiness()
    failed = [c.name for c in checks if not c.ok]
    body: dict[str, Any] = {
        "status": "failing" if failed else "ok",
        "checks": {c.name: {"ok": c.ok, "reason": c.reason} for c in checks},
    }
    if failed:
        body["failed"] = failed
    return JsonResponse(body, status=503 if failed else 200)


def _plain(value: Decimal) -> str:
    """10, 2.5, 7.67: at most two decimals, none trailing."""
    return format(value.quantize(Decimal("0.01")).normalize(), "f")


@dataclass(frozen=True)
class QuotaUse:
    """One GPU line of a card: the quota and Kueue's use of it now (None: not reported)."""

    item: quota_selectors.EffectiveQuota
    used: Decimal | None

    @property
    def used_text(self) -> str:
        return "" if self.used is None else _plain(self.used)

    @property
    def limit_text(self) -> str:
        return _plain(self.item.limit)

    @property
    def high_text(self) -> str:
        return _plain(self.item.limit * NEAR_LIMIT)

    @property
    def percent(self) -> int | None:
        if self.used is None or not self.item.limit:
            return None
        return round(self.used / self.item.limit * 100)


def _quota_uses(
    tenant: Tenant, quota_sets: list[quota_selectors.EffectiveQuotaSet], used: dict[Any, float]
) -> list[dict[str, Any]]:
    return [
        {
            "quota_set": qs,
            "lines": [
                QuotaUse(item, _used(used.get((tenant.pk, qs.cluster_name, item.flavor_name))))
                for item in qs.items
                if item.limit_gpu_units
            ],
        }
        for qs in quota_sets
    ]


def _used(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Cards of the caller's tenants: each GPU line's use now of its limit, and the firing
    alerts. A constant number of queries whatever the number of tenants (tests/test_query_counts)."""
    user = caller(request)
    tenants = list(tenant_selectors.tenant_list_for_user(user=user))
    ids = [t.pk for t in tenants]
    quotas = quota_selectors.effective_quotas_for_tenants(tenants=tenants)
    used = usage_selectors.quota_used_now(tenant_ids=ids)
    firing = alert_selectors.firing_alert_counts(user=user, tenant_ids=ids)
    cards = [
        {
            "tenant": t,
            "quota_sets": _quota_uses(t, quotas[t.pk], used),
            "firing_alerts": firing.get(t.pk, 0),
        }
        for t in tenants
    ]
    return render(request, "portal/home.html", {"cards": cards})


def _run_rules(tenant: Tenant) -> dict[str, Any]:
    """The idle and maximum-run-time rules for the tenant's page, durations in words."""
    rules = alert_selectors.tenant_run_rules(tenant=tenant)
    return {
        "max_run_time": duration_words(rules.max_run_time) if rules.max_run_time else None,
        "own_max_run_time": rules.own_max_run_time,
        "max_run_time_suspends": rules.max_run_time_suspends,
        "notice_max_run_time": notice_words(rules.grace_max_run_time),
        "idle_after": duration_words(rules.idle_after) if rules.idle_after else None,
        "idle_at_most_pct": f"{rules.idle_at_most_pct:g}",
        "idle_suspends": rules.idle_suspends,
        "notice": notice_words(rules.grace),
    }


def _gpu_units(tenant: Tenant) -> dict[str, Any]:
    """The tenant's GPU limits in normalised units per cluster, their sum and its cap."""
    parts = quota_selectors.tenant_gpu_units_by_cluster(tenant_id=tenant.pk)
    total = sum(parts.values(), Decimal(0))
    return {
        "parts": list(parts.items()),
        "total": total,
        "cap": tenant.gpu_unit_cap,
        "over": tenant.gpu_unit_cap is not None and total > tenant.gpu_unit_cap,
    }


@login_required
@require_GET
def help_preemption(request: HttpRequest) -> HttpResponse:
    """How Kueue preempts work on the portal's clusters, and what a team should do about
    checkpoints (``docs/use/preemption.md``)."""
    return render(request, "portal/help.html", {"page": help_page("preemption")})


@login_required
@require_GET
def help_site(request: HttpRequest, url: str = "") -> HttpResponseBase:
    """The documentation site (``make docs``) under ``/help/``: its files as built, each page
    with a Content-Security-Policy that allows the theme's own inline scripts by hash. While
    the site is not built, a page that says how to build it."""
    if not site_built():
        return render(request, "portal/help.html", {"page": unbuilt_page()})
    found = site_file(url)
    if found is None:
        raise Http404("No such page in the documentation.")
    if found.needs_slash:
        return HttpResponseRedirect(request.path + "/")
    if found.path.suffix != ".html":
        return FileResponse(found.path.open("rb"), content_type=_content_type(found.path))
    html = found.path.read_bytes()
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    directives = {name: list(sources) for name, sources in settings.CONTENT_SECURITY_POLICY.items()}
    directives["script-src"] = [*directives.get("script-src", []), *inline_script_hashes(html)]
    header = "Content-Security-Policy"
    if getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", False):
        header = "Content-Security-Policy-Report-Only"
    response.headers[header] = content_security_policy(directives)
    return response


def _content_type(path: Path) -> str:
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


@login_required
def tenant_detail(request: HttpRequest, slug: str) -> HttpResponse:
    user = caller(request)
    tenant = tenant_selectors.tenant_get_for_user(user=user, slug=slug)
    quota_sets = quota_selectors.tenant_effective_quotas(tenant=tenant)
    # Each read once, though several parts of the page show it.
    namespaces = list(tenant_selectors.namespace_list_for_tenant(tenant=tenant))
    teams = list(tenant.children.order_by("slug"))
    role = tenant_selectors.membership_role(user=user, tenant=tenant)
    cluster_syncs = quota_views.cluster_syncs(tenant=tenant)
    context = {
        "tenant": tenant,
        "namespaces": namespaces,
        "members": tenant_selectors.membership_list_for_tenant(tenant=tenant),
        "quota_sets": quota_sets,
        # Per-pod caps and the batch / inference split per cluster (R16, R17).
        "priority_rules": [
            quota_selectors.quota_set_priority_rules(quota_set=qs) for qs in quota_sets
        ],
        "department_caps": quota_selectors.department_caps(tenant=tenant, has_teams=bool(teams)),
        "teams": teams,
        "role": role,
        # Where its quotas stand in each cluster (no live read: "In the cluster" does that).
        "cluster_syncs": cluster_syncs,
        # Per cluster: how it shares unused GPUs, and the tenant's standing and recent use.
        "fair_sharing": quota_selectors.tenant_fair_sharing(
            tenant=tenant, clusters=[entry.cluster for entry in cluster_syncs]
        ),
        "pipeline": quota_selectors.tenant_pipeline_access(tenant=tenant, namespaces=namespaces),
        "isolation": quota_selectors.tenant_isolation(tenant=tenant),
        "run_rules": _run_rules(tenant),
        "gpu_units": _gpu_units(tenant),
        # R27: its per-pod bandwidth cap in words ("1 Gbit/s"); None: no cap.
        "pod_bandwidth": (
            bandwidth_words(tenant.pod_bandwidth_max) if tenant.pod_bandwidth_max else None
        ),
    }
    context |= advice_views.tenant_suggestions_context(
        tenant=tenant, can_manage=user.is_platform_admin or role == MembershipRole.LEAD
    )
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
        "pools": quota_selectors.pool_list(),
        "pool_differences": quota_selectors.pool_differences(),
        "tenant_count": Tenant.objects.count(),
        "recent_events": AuditEvent.objects.select_related("tenant")[:20],
        "worker_seen_seconds_ago": (
            None if heartbeat is None else int((timezone.now() - heartbeat).total_seconds())
        ),
    }
    context |= quota_views.console_sync_panel(user=caller(request))
    return render(request, "portal/console.html", context)
