"""Portal pages of where a tenant's quotas stand in its clusters: the push's state per cluster
on the tenant's page, the YAML the portal owns for a tenant on a cluster, what the cluster
itself reports ("In the cluster", a live read), and the "Cluster sync" panel of the admins'
console (counts by state, pushes that need attention, recent drift repairs).

Every page here reads, but the cluster page, where platform admins choose how the cluster
enforces tenants' limits. Tenant pages go through ``tenant_get_for_user``, so another
tenant's pages answer 404 to every method, exactly as a tenant that does not exist; members and
viewers see them read-only.

The tenant page and the admin console (``portal/views.py``, above this app) add the sync
sections through ``cluster_syncs`` and ``console_sync_panel``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from core.errors import ApplicationError, NotFound, PermissionDenied
from core.pages import error_text
from quotas import selectors as quota_selectors
from quotas import services as quota_services
from quotas import sync
from quotas.choices import Enforcement, FairSharing, SyncBackend, SyncState, is_gpu_resource
from quotas.field_words import field_in_words
from quotas.kube import names
from quotas.models import Cluster, TenantSync
from quotas.quantity import QuantityError, to_display
from quotas.selectors import TenantSyncRow
from quotas.services.rules import elastic_cap
from tenants import selectors as tenant_selectors
from tenants.api.base import caller
from tenants.models import AuditEvent, Tenant, User

DRIFT_REPAIRED = "cluster.drift_repaired"
RECENT_DRIFT_REPAIRS = 20
ATTENTION_STATES = (SyncState.FAILED, SyncState.APPLYING)


# --- shared pieces --------------------------------------------------------------------------


@dataclass(frozen=True)
class SyncBadge:
    """A tenant's push state on one cluster as the pages show it (``_sync_badge.html``).

    ``kind`` is the state, or "portal_only" for a cluster whose backend is none (nothing is
    ever pushed there). ``attempt`` is the attempt under way while applying: the failed ones
    so far (``TenantSync.attempts``) plus one."""

    kind: str
    message: str = ""
    attempt: int = 0
    at: datetime | None = None


def sync_badge(*, cluster: Cluster, push: TenantSync | None) -> SyncBadge:
    if cluster.backend == SyncBackend.NONE:
        return SyncBadge("portal_only")
    if push is None or push.state == SyncState.PENDING:
        return SyncBadge(SyncState.PENDING)
    if push.state == SyncState.APPLYING:
        return SyncBadge(push.state, push.message, attempt=push.attempts + 1)
    if push.state == SyncState.DRIFTED:
        return SyncBadge(push.state, at=push.drift_repaired_at)
    if push.state == SyncState.FAILED:
        return SyncBadge(push.state, push.message, at=push.last_attempt_at)
    return SyncBadge(push.state)


def value_shown(value: Any) -> str:
    """A field's value in a diff: as Kubernetes spells it, "—" where the field is absent."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def _visible_tenant(request: HttpRequest, slug: str) -> Tenant:
    return tenant_selectors.tenant_get_for_user(user=caller(request), slug=slug)


@dataclass(frozen=True)
class ClusterSync:
    """One cluster the tenant has quotas on: the generation in force, the push's state."""

    row: TenantSyncRow
    badge: SyncBadge

    @property
    def cluster(self) -> Cluster:
        return self.row.cluster

    @property
    def generation(self) -> int:
        return self.row.generation

    @property
    def applied_generation(self) -> int | None:
        return self.row.sync.applied_generation if self.row.sync else None

    @property
    def behind(self) -> bool:
        return (self.applied_generation or 0) < self.generation

    @property
    def last_applied_at(self) -> datetime | None:
        return self.row.sync.last_applied_at if self.row.sync else None


def cluster_syncs(*, tenant: Tenant) -> list[ClusterSync]:
    """Per cluster the tenant has quotas on (two queries, whatever the number of clusters)."""
    return [
        ClusterSync(row, sync_badge(cluster=row.cluster, push=row.sync))
        for row in quota_selectors.tenant_sync_rows(tenant=tenant)
    ]


def _cluster_sync(tenant: Tenant, name: str) -> ClusterSync:
    """The tenant's row for cluster ``name``; 404 for a cluster it has no quota set on."""
    for entry in cluster_syncs(tenant=tenant):
        if entry.cluster.name == name:
            return entry
    raise NotFound.for_field("cluster", "No such cluster for this tenant.")


def _tenant_and_cluster(
    request: HttpRequest, slug: str, cluster: str
) -> tuple[Tenant, ClusterSync]:
    """Looked up before the method is, so another tenant's routes answer 404 to every method."""
    tenant = _visible_tenant(request, slug)
    return tenant, _cluster_sync(tenant, cluster)


# --- the tenant's page and its cluster pages -----------------------------------------------


@login_required
def tenant_cluster_manifests(request: HttpRequest, slug: str, cluster: str) -> HttpResponse:
    """The YAML the portal owns for the tenant on the cluster (its objects and the
    cluster-wide objects they need, in apply order), as a download."""
    tenant, entry = _tenant_and_cluster(request, slug, cluster)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET"])
    text = sync.tenant_manifests(tenant=tenant, cluster=entry.cluster)
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = (
        f'attachment; filename="{tenant.slug}-{entry.cluster.name}.yaml"'
    )
    return response


@dataclass(frozen=True)
class QuotaLine:
    resource: str
    hard: str
    used: str


@dataclass(frozen=True)
class NamespaceQuota:
    """A ResourceQuota as the cluster reports it: hard vs used per resource."""

    namespace: str
    name: str
    lines: list[QuotaLine] = field(default_factory=list)


def amount_shown(value: Any, resource: str) -> str:
    """A quantity the cluster reports, in units a person reads ("568 GiB" for
    "609852613404"); "—" where it is absent, the cluster's own text where it is not one."""
    if value is None:
        return "—"
    try:
        return to_display(value if isinstance(value, int) else str(value), resource)
    except QuantityError:
        return value_shown(value)


@dataclass(frozen=True)
class FlavorUsageLine:
    flavor: str
    resource: str
    total: str
    borrowed: str


def _namespace_quotas(resource_quotas: list[dict[str, Any]]) -> list[NamespaceQuota]:
    quotas = []
    # Per namespace, the quota that holds the limit first, then the priority-scoped ones.
    ordered = sorted(
        resource_quotas,
        key=lambda rq: (rq["namespace"], rq["name"] != names.RESOURCE_QUOTA, rq["name"]),
    )
    for rq in ordered:
        hard, used = rq.get("hard") or {}, rq.get("used") or {}
        lines = [
            QuotaLine(
                resource,
                amount_shown(hard.get(resource), resource),
                amount_shown(used.get(resource), resource),
            )
            for resource in sorted(hard.keys() | used.keys())
        ]
        quotas.append(NamespaceQuota(rq["namespace"], rq["name"], lines))
    return quotas


def _flavor_usage(cluster_queue: dict[str, Any] | None) -> list[FlavorUsageLine]:
    """Kueue's flavorsUsage (what the queue's workloads use and borrow, per flavor and
    resource), in units a person reads."""
    lines = []
    for flavor in (cluster_queue or {}).get("flavors_usage") or []:
        for r in flavor.get("resources") or []:
            name = str(r.get("name", ""))
            lines.append(
                FlavorUsageLine(
                    str(flavor.get("name", "")),
                    name,
                    amount_shown(r.get("total") or 0, name),
                    amount_shown(r.get("borrowed") or 0, name),
                )
            )
    return lines


@login_required
def tenant_cluster(request: HttpRequest, slug: str, cluster: str) -> HttpResponse:
    """What the cluster says about the tenant, read live: each namespace's ResourceQuota
    (hard vs used) and the ClusterQueue's workloads and flavor usage (with what it borrows).
    An unreachable cluster, or one kept in the portal only, shows why it was not read."""
    tenant, entry = _tenant_and_cluster(request, slug, cluster)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET"])
    live = sync.in_cluster(tenant=tenant, cluster=entry.cluster)
    context = {
        "tenant": tenant,
        "entry": entry,
        "live": live,
        "namespace_quotas": _namespace_quotas(live.resource_quotas),
        "priority_use": quota_selectors.priority_class_use(resource_quotas=live.resource_quotas),
        "flavor_usage": _flavor_usage(live.cluster_queue),
        "gpu_use": quota_selectors.gpu_use_compared(
            resource_quotas=live.resource_quotas, cluster_queue=live.cluster_queue
        ),
        "read_at": timezone.now(),
        "enforcement": quota_selectors.cluster_enforcement(cluster=entry.cluster),
    }
    return render(request, "quotas/tenant_cluster.html", context)


# --- the admins' console --------------------------------------------------------------------

# The console's columns, in order: a state, or "portal_only" for clusters with backend none.
PANEL_KINDS: tuple[tuple[str, str], ...] = (
    (SyncState.IN_SYNC, "In sync"),
    (SyncState.APPLYING, "Applying"),
    (SyncState.FAILED, "Failed"),
    (SyncState.DRIFTED, "Drift repaired"),
    (SyncState.PENDING, "Not pushed yet"),
    ("portal_only", "Portal only"),
)


@dataclass
class ClusterSyncCounts:
    cluster: str
    backend: str
    counts: dict[str, int]

    @property
    def cells(self) -> list[tuple[str, int]]:
        """(kind, count) in the columns' order."""
        return [(kind, self.counts.get(kind, 0)) for kind, _ in PANEL_KINDS]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class FieldChange:
    path: str  # as Kubernetes names it (a hover on the page)
    label: str  # in words
    before: str
    after: str


@dataclass(frozen=True)
class DriftRepair:
    event: AuditEvent
    fields: list[FieldChange]


def field_change(path: str, before: Any, after: Any) -> FieldChange:
    """A field's change, its path and values in words beside the path."""
    words = field_in_words(path, value_shown(before), value_shown(after))
    return FieldChange(path, words.label, words.before, words.after)


def _drift_repairs(user: User) -> list[DriftRepair]:
    """The most recent drift repairs (audit events), with the fields they put back."""
    events = tenant_selectors.audit_events_for_user(user=user).filter(action=DRIFT_REPAIRED)
    repairs = []
    for event in events[:RECENT_DRIFT_REPAIRS]:
        before = event.before if isinstance(event.before, dict) else {}
        after = event.after if isinstance(event.after, dict) else {}
        repairs.append(
            DriftRepair(
                event,
                [
                    field_change(path, before.get(path), after.get(path))
                    for path in sorted(before.keys() | after.keys())
                ],
            )
        )
    return repairs


def console_sync_panel(*, user: User) -> dict[str, Any]:
    """The console's "Cluster sync" panel, in four queries whatever the number of tenants,
    clusters, failures and repairs."""
    counts = [
        ClusterSyncCounts(
            cluster.name,
            cluster.backend,
            {"portal_only": sum(by_state.values())}
            if cluster.backend == SyncBackend.NONE
            else by_state,
        )
        for cluster, by_state in quota_selectors.sync_state_counts()
    ]
    totals = [(kind, sum(row.counts.get(kind, 0) for row in counts)) for kind, _ in PANEL_KINDS]
    attention = [
        (push, sync_badge(cluster=push.cluster, push=push))
        for push in quota_selectors.syncs_needing_attention()
    ]
    return {
        "sync_kinds": [label for _, label in PANEL_KINDS],
        "sync_counts": counts,
        "sync_totals": totals,
        "sync_total": sum(row.total for row in counts),
        "sync_attention": attention,
        "drift_repairs": _drift_repairs(user),
    }


# --- a cluster ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElasticCapRow:
    allocation: quota_selectors.FlavorAllocation
    cap: Decimal  # the most one tenant's limit may be
    usual_cap: Decimal  # the same at the usual fraction
    largest: Decimal | None  # the largest limit in force, and whose
    largest_tenant: str


def _pct(fraction: Decimal) -> str:
    return f"{(fraction * 100).normalize():f}"


def _elastic_cap(
    cluster: Cluster, allocations: list[quota_selectors.FlavorAllocation]
) -> dict[str, Any]:
    """The elastic cap in words for the cluster page: the fraction, the usual one, per GPU
    flavor the most a tenant's limit may be, and the largest limit in force (which is why a
    cluster's cap is set above the usual: demo-a100's 0.625 keeps team-a's 10 of 16)."""
    usual = Cluster._meta.get_field("elastic_cap_fraction").default
    largest = quota_selectors.largest_limits(cluster=cluster)
    rows = []
    for a in allocations:
        if not is_gpu_resource(a.resource):
            continue
        limit, slug = largest.get((a.flavor.pk, a.resource), (None, ""))
        rows.append(
            ElasticCapRow(
                a,
                elastic_cap(capacity=a.capacity, fraction=cluster.elastic_cap_fraction,
                            resource=a.resource),
                elastic_cap(capacity=a.capacity, fraction=usual, resource=a.resource),
                limit,
                slug,
            )
        )  # fmt: skip
    over_usual = [r for r in rows if r.largest is not None and r.largest > r.usual_cap]
    return {
        "pct": _pct(cluster.elastic_cap_fraction),
        "usual_pct": _pct(usual),
        "differs": cluster.elastic_cap_fraction != usual,
        "higher": cluster.elastic_cap_fraction > usual,
        "rows": rows,
        "over_usual": over_usual,
    }


@login_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    """A cluster for everyone signed in: how it keeps tenants within their limits (and
    whether work can get around them), Kueue's configuration as read, how it shares unused
    GPUs (with tenants' standings), and its capacity. Platform admins change the enforcement
    mode and fair sharing here (POST)."""
    user = caller(request)
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise NotFound(f"There is no cluster {name!r}.")
    error = fair_error = ""
    if request.method == "POST":
        if not user.is_platform_admin:
            raise PermissionDenied("Only platform admins may change how a cluster enforces quotas.")
        fair_form = "fair_sharing" in request.POST
        try:
            if fair_form:
                cluster = quota_services.cluster_fair_sharing_set(
                    cluster=cluster,
                    actor=user,
                    fair_sharing_mode=request.POST.get("fair_sharing", ""),
                    usage_half_life_hours=request.POST.get("usage_half_life_hours") or None,
                    usage_sampling_minutes=request.POST.get("usage_sampling_minutes") or None,
                )
            else:
                cluster = quota_services.cluster_enforcement_set(
                    cluster=cluster, mode=request.POST.get("enforcement", ""), actor=user
                )
        except ApplicationError as exc:
            if fair_form:
                fair_error = error_text(exc)
            else:
                error = error_text(exc)
        else:
            anchor = "#fair-sharing" if fair_form else ""
            return redirect(reverse("portal:cluster-detail", args=[cluster.name]) + anchor)
    elif request.method != "GET":
        return HttpResponseNotAllowed(["GET", "POST"])
    enforcement = quota_selectors.cluster_enforcement(cluster=cluster)
    allocations = quota_selectors.cluster_allocations(cluster=cluster)
    return render(
        request,
        "quotas/cluster_detail.html",
        {
            "cluster": cluster,
            "enforcement": enforcement,
            "kueue": enforcement["kueue_config"] or {},
            "allocations": allocations,
            "elastic": _elastic_cap(cluster, allocations),
            "modes": Enforcement.choices,
            "can_change": user.is_platform_admin,
            "error": error,
            # Standings of every tenant for platform admins, of one's own tenants otherwise.
            "fair_sharing": quota_selectors.cluster_fair_sharing(
                cluster=cluster,
                tenant_slugs=None
                if user.is_platform_admin
                else tenant_selectors.tenant_list_for_user(user=user).values_list(
                    "slug", flat=True
                ),
            ),
            "fair_modes": FairSharing.choices,
            "fair_error": fair_error,
            "fair_posted": request.POST if fair_error else None,
        },
        status=400 if error or fair_error else 200,
    )
