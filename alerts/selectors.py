"""Reads for alerts: who sees which alert, which tenants are blocked (the compiler's hook), what
each rule finds in the usage store now, and the admission pre-check (R13).

The finders read rollups (``usage.models.Rollup``) and workload lifecycles
(``usage.models.Workload``), never raw samples: one query per rule, whatever the number of
tenants.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from alerts.choices import AlertState, EventKind, RuleKind
from alerts.models import Alert, AlertEvent, AlertRule
from core.errors import NotFound, ValidationFailed
from core.numbers import ascii_whole
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    MEMORY_RESOURCE,
    STORAGE_RESOURCE,
    SyncBackend,
    is_gpu_resource,
    mig_resource,
)
from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor
from quotas.quantity import to_display
from quotas.selectors import flavor_capacities
from tenants.choices import MembershipRole
from tenants.models import Membership, Namespace, Tenant, User
from usage import selectors as usage_selectors
from usage.choices import Metric, Resolution, Source, WorkloadState
from usage.models import Rollup, Sample, Workload, WorkloadActivity

# --- scoping ---------------------------------------------------------------------------------


def lead_tenant_ids(*, user: User) -> list[int]:
    return list(
        Membership.objects.filter(user=user, role=MembershipRole.LEAD).values_list(
            "tenant_id", flat=True
        )
    )


def alerts_for_user(*, user: User) -> QuerySet[Alert]:
    """Platform admins see every alert; a tenant's members (leads, members, viewers) see its
    alerts; nobody else any. Who may act on one is ``alert_may_act``."""
    rows = Alert.objects.select_related(
        "rule", "cluster", "tenant", "flavor", "acknowledged_by"
    ).order_by("-fired_at", "-pk")
    if not user.is_authenticated:
        return rows.none()
    if user.is_platform_admin:
        return rows
    return rows.filter(
        tenant_id__in=Membership.objects.filter(user=user).values_list("tenant_id", flat=True)
    )


def firing_alert_counts(*, user: User, tenant_ids: Iterable[int]) -> dict[int, int]:
    """How many alerts fire now per tenant of ``tenant_ids``, of those ``user`` may read (the
    "My tenants" cards). One query; a tenant without one is left out."""
    rows = (
        alerts_for_user(user=user)
        .filter(state=AlertState.FIRING, tenant_id__in=list(tenant_ids))
        .order_by()  # the list's order would split the groups
        .values_list("tenant_id")
        .annotate(count=Count("pk"))
    )
    return dict(rows)


def alerts_may_act(*, user: User, alerts: Iterable[Alert]) -> set[int]:
    """Of ``alerts``, the keys of those ``user`` may act on (acknowledge, undo a suspension):
    platform admins any, leads those of their tenants. The one rule the services check and
    the pages use to offer the buttons; one query, whatever the number of alerts."""
    alerts = list(alerts)
    if user.is_platform_admin:
        return {alert.pk for alert in alerts}
    leads = set(lead_tenant_ids(user=user)) if alerts else set()
    return {
        alert.pk for alert in alerts if alert.tenant_id is not None and alert.tenant_id in leads
    }


def alert_may_act(*, user: User, alert: Alert) -> bool:
    """Acknowledge an alert, undo a suspension: platform admins, and leads of its tenant."""
    return alert.pk in alerts_may_act(user=user, alerts=[alert])


def alert_ids_closed(user: User, pks: set[int]) -> set[int]:
    """Of ``pks`` (alerts the portal told ``user`` about), those that exist and ``user`` may
    no longer open (the inbox's check of its links; one query)."""
    hidden = Alert.objects.filter(pk__in=pks).exclude(
        pk__in=alerts_for_user(user=user).order_by().values("pk")
    )
    return set(hidden.values_list("pk", flat=True))


def alert_get_for_user(*, user: User, pk: int) -> Alert:
    alert = alerts_for_user(user=user).filter(pk=pk).first()
    if alert is None:
        raise NotFound("No such alert, or it is not yours to see.")
    return alert


def alert_events(*, alert: Alert) -> list[AlertEvent]:
    return list(alert.events.order_by("pk"))


def tenant_leads(*, tenant_id: int) -> list[User]:
    return [
        m.user
        for m in Membership.objects.filter(
            tenant_id=tenant_id, role=MembershipRole.LEAD
        ).select_related("user")
    ]


# --- what the rules find ---------------------------------------------------------------------


@dataclass
class Finding:
    """A rule's condition holding for one subject now."""

    subject: str
    message: str
    cluster_id: int | None = None
    tenant_id: int | None = None
    flavor_id: int | None = None
    workload_id: int | None = None
    workload_namespace: str = ""
    workload_name: str = ""
    value: float | None = None
    threshold: float | None = None
    act: bool = False  # act on it even where the rule only alerts (a tenant's own limit)


def _names() -> tuple[dict[int, str], dict[int, str], dict[int, str]]:
    return (
        dict(Cluster.objects.values_list("pk", "name")),
        dict(Tenant.objects.values_list("pk", "slug")),
        dict(ResourceFlavor.objects.values_list("pk", "name")),
    )


def _gpus(amount: float | Decimal) -> str:
    """``1 GPU``, ``2 GPUs``, ``0.5 GPUs``."""
    return f"{_n(amount)} GPU" if amount == 1 else f"{_n(amount)} GPUs"


def _n(value: Decimal | float) -> str:
    """A number as people write it: 10, 2.5, 536870912000 (no exponent, no trailing zeros)."""
    text = format(Decimal(str(value)).normalize(), "f")
    return text


def _days(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours / 24:g} days" if hours >= 48 else f"{_n(hours)} hours"


def _gpu_limits(cluster_ids: Sequence[int] | None) -> dict[tuple[int, int, int], Decimal]:
    """(cluster, tenant, flavor) -> the GPU limit in force (GPU and MIG lines), on
    ``cluster_ids`` (every cluster for None)."""
    limits: dict[tuple[int, int, int], Decimal] = defaultdict(Decimal)
    quotas = Quota.objects.all()
    if cluster_ids is not None:
        quotas = quotas.filter(quota_set__cluster_id__in=list(cluster_ids))
    for c, t, f, resource, limit in quotas.values_list(
        "quota_set__cluster_id", "quota_set__tenant_id", "flavor_id", "resource", "limit"
    ):
        if is_gpu_resource(resource):
            limits[(c, t, f)] += limit
    return limits


def unobserved_quota_subjects(*, subjects: Iterable[str], now: datetime) -> set[str]:
    """Of ``subjects`` (``quota:<cluster>:<tenant>:<flavor>``, open quota alerts), those with
    a GPU limit still in force but no recent use to read (the collector or the roll-up is
    behind, the cluster unreachable): unknown is not "below the threshold", so their alerts
    stay as they are (a hold is not lifted for want of data)."""
    keys: dict[str, tuple[int, int, int]] = {}
    for subject in subjects:
        parts = subject.split(":")
        ids = [ascii_whole(p) for p in parts[1:]]
        if len(parts) == 4 and parts[0] == "quota" and None not in ids:
            keys[subject] = (int(parts[1]), int(parts[2]), int(parts[3]))
    if not keys:
        return set()
    cluster_ids = sorted({c for c, _, _ in keys.values()})
    limits = _gpu_limits(cluster_ids)
    now_use = usage_selectors.usage_now(cluster_ids=cluster_ids, now=now)
    readings = quota_readings(cluster_ids=cluster_ids, now=now)
    return {
        subject
        for subject, key in keys.items()
        if limits.get(key) and Metric.QUOTA_USED not in now_use.get(key, {}) and key not in readings
    }


# The readings a hold is decided by: the portal's own collection of the cluster (Kueue's
# ClusterQueue status, or Kueue's figures through the cluster's Prometheus), never figures a
# tenant or an agent sent in.
TRUSTED_QUOTA_SOURCES = (Source.CLUSTER_API, Source.PROMETHEUS)
# A reading older than this (three collections missed) gives way to the 5-minute mean.
READING_FRESH = timedelta(minutes=3)


def quota_readings(
    *,
    cluster_ids: Sequence[int] | None,
    tenant_ids: Sequence[int] | None = None,
    now: datetime,
    within: timedelta = READING_FRESH,
) -> dict[tuple[int, int, int], float]:
    """(cluster, tenant, flavor) -> Kueue's GPU use in the latest collection of the cluster
    (raw samples of the last ``within``, trusted sources only): what a collection just wrote,
    before any roll-up. One query, bounded by time (the day partitions, a few minutes of
    rows: the evaluation's cost stays close to reading the 5-minute rollups)."""
    rows = Sample.objects.filter(
        metric=Metric.QUOTA_USED,
        source__in=[int(s) for s in TRUSTED_QUOTA_SOURCES],
        time__gt=now - within,
        time__lte=now,
        tenant_id__isnull=False,
        flavor_id__isnull=False,
    )
    if cluster_ids is not None:
        rows = rows.filter(cluster_id__in=[int(c) for c in cluster_ids])
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=[int(t) for t in tenant_ids])
    latest: dict[tuple[int, int, int], tuple[datetime, float]] = {}
    for c, t, f, at, value in rows.values_list(
        "cluster_id", "tenant_id", "flavor_id", "time", "value"
    ):
        if c is None or t is None or f is None:
            continue
        key = (int(c), int(t), int(f))
        seen = latest.get(key)
        if seen is None or at > seen[0]:
            latest[key] = (at, float(value))
    return {key: value for key, (_, value) in latest.items()}


def quota_findings(
    rule: AlertRule,
    *,
    now: datetime,
    cluster_ids: Sequence[int] | None = None,
    tenant_ids: Sequence[int] | None = None,
) -> list[Finding]:
    """(cluster, tenant, flavor) whose GPU use (Kueue's: the latest collection's reading, or
    the latest 5-minute mean where no reading is recent) is at or above ``threshold_pct`` of
    the limit in force. ``cluster_ids`` and ``tenant_ids`` narrow it (a collection's own
    tenants); the rule's cluster always does."""
    threshold = rule.threshold_pct if rule.threshold_pct is not None else 100.0
    if rule.cluster_id is not None:
        cluster_ids = [c for c in (cluster_ids or [rule.cluster_id]) if c == rule.cluster_id]
    limits = _gpu_limits(cluster_ids)
    now_use = usage_selectors.usage_now(
        cluster_ids=cluster_ids, tenant_ids=tenant_ids, metrics=[Metric.QUOTA_USED], now=now
    )
    readings = quota_readings(cluster_ids=cluster_ids, tenant_ids=tenant_ids, now=now)
    judged: dict[tuple[int, int, int], float] = {
        key: values[Metric.QUOTA_USED]
        for key, values in now_use.items()
        if Metric.QUOTA_USED in values
    }
    judged.update(readings)
    clusters, tenants, flavors = _names()
    out = []
    for key, used_now in sorted(judged.items()):
        used: float | None = used_now
        limit = limits.get(key)
        if used is None or not limit:
            continue
        pct = used / float(limit) * 100
        if pct + 1e-9 < threshold:
            continue
        c, t, f = key
        where = f"{tenants.get(t, t)} on {clusters.get(c, c)} ({flavors.get(f, f)})"
        what = (
            "new work is held until use drops below it"
            if rule.kind == RuleKind.QUOTA_BLOCK and rule.act
            else "new work will be held at 100%"
            if rule.kind == RuleKind.QUOTA_WARNING
            else "over the threshold"
        )
        out.append(
            Finding(
                subject=f"quota:{c}:{t}:{f}",
                message=f"{where} uses {_n(used)} of {_gpus(limit)} ({pct:.0f}% of its limit, "
                f"threshold {threshold:g}%): {what}.",
                cluster_id=c,
                tenant_id=t,
                flavor_id=f,
                value=round(pct, 2),
                threshold=threshold,
            )
        )
    return out


def _running(rule: AlertRule) -> QuerySet[Workload]:
    rows = Workload.objects.filter(
        state=WorkloadState.ADMITTED, finished_at__isnull=True, tenant_id__isnull=False
    )
    if rule.cluster_id is not None:
        rows = rows.filter(cluster_id=rule.cluster_id)
    return rows


def _workload_finding(w: Workload, message: str, **extra: Any) -> Finding:
    return Finding(
        subject=f"workload:{w.cluster_id}:{w.uid}",
        message=message,
        cluster_id=w.cluster_id,
        tenant_id=w.tenant_id,
        workload_id=w.pk,
        workload_namespace=w.namespace,
        workload_name=w.name,
        **extra,
    )


def _hours(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    if hours >= 48 and hours % 24 == 0:
        return f"{hours / 24:g} days"
    return f"{hours:g} hour" if hours == 1 else f"{hours:g} hours"


def max_runtime_findings(rule: AlertRule, *, now: datetime) -> list[Finding]:
    """Admitted, unfinished workloads running longer than their tenant's own maximum run time
    (set through a request; acted on: suspended after the rule's grace) or, for tenants
    without one, the rule's ``duration`` (acted on where the rule acts) (R12, 003). The run
    time counts from the first admission: a suspension undone does not restart it."""
    default = rule.duration or timedelta(days=7)
    own = {
        pk: timedelta(hours=hours)
        for pk, hours in Tenant.objects.filter(max_run_time_hours__isnull=False).values_list(
            "pk", "max_run_time_hours"
        )
        if hours is not None
    }
    shortest = min([default, *own.values()])
    out = []
    for w in _running(rule).filter(admitted_at__lte=now - shortest).order_by("pk"):
        assert w.admitted_at is not None
        ran = now - w.admitted_at
        limit = own.get(w.tenant_id or 0, default)
        if ran < limit:
            continue
        whose = "its team's maximum run time" if w.tenant_id in own else "the maximum run time"
        out.append(
            _workload_finding(
                w,
                f"{w.namespace}/{w.name} has run for {_days(ran)}, past {whose} of "
                f"{_hours(limit)}.",
                value=ran.total_seconds(),
                threshold=limit.total_seconds(),
                act=w.tenant_id in own,
            )
        )
    return out


def reactivated_subjects(*, since: datetime) -> set[str]:
    """Workloads whose suspension a lead undid since ``since``: the undo counts as progress."""
    return set(
        AlertEvent.objects.filter(kind=EventKind.REACTIVATED, at__gte=since).values_list(
            "alert__subject", flat=True
        )
    )


def _own_activity(
    candidates: Sequence[Workload], *, since: datetime, now: datetime
) -> dict[tuple[int, str], tuple[float, datetime, datetime]]:
    """(cluster, Workload uid) -> (peak utilisation, first hour, last hour) of the workloads'
    own GPUs in the window (the hour holding ``since`` onwards): one query."""
    rows = (
        WorkloadActivity.objects.filter(
            cluster_id__in={w.cluster_id for w in candidates},
            workload_uid__in={w.uid for w in candidates},
            bucket__gte=since.replace(minute=0, second=0, microsecond=0),
            bucket__lt=now,
        )
        .values("cluster_id", "workload_uid")
        .annotate(peak=Max("peak_utilization"), first=Min("bucket"), last=Max("bucket"))
    )
    return {(r["cluster_id"], r["workload_uid"]): (r["peak"], r["first"], r["last"]) for r in rows}


def idle_findings(rule: AlertRule, *, now: datetime) -> list[Finding]:
    """Admitted workloads with no heartbeat for ``duration`` (R12): no progress (admitted,
    re-admitted after an eviction, or reactivated before the window) and no GPU activity,
    judged per workload:

    - by its own GPUs where the agents saw its pods on them (``WorkloadActivity``: the
      collector ties pods to their Workload, the agents report each GPU's pods): observed
      throughout the window (from its first hour to the last two) and never above
      ``threshold_pct``. A busy sibling of the same tenant and flavor changes nothing;
    - else (its pods could not be tied to it, or were not observed throughout), by every GPU
      of its tenant on the flavors it runs on (5-minute rollups): all of them idle throughout
      means its own were too; one busy job of the tenant there keeps it.

    A flavor or workload without readings in the window (no agent) is no evidence of
    idleness: nothing is suspended that might be working."""
    window = rule.duration or timedelta(days=3)
    idle_at_most = rule.threshold_pct if rule.threshold_pct is not None else 1.0
    since = now - window
    candidates = list(
        _running(rule)
        .filter(admitted_at__lte=since)
        .filter(Q(evicted_at__isnull=True) | Q(evicted_at__lte=since))
        .order_by("pk")
    )
    if not candidates:
        return []
    by_name: dict[tuple[int, str], int] = {
        (c, n): pk
        for pk, c, n in ResourceFlavor.objects.filter(
            cluster_id__in={w.cluster_id for w in candidates}
        ).values_list("pk", "cluster_id", "name")
    }
    observed: dict[tuple[int, int, int], tuple[float, datetime, int]] = {}
    for r in (
        Rollup.objects.filter(
            resolution=Resolution.FIVE_MINUTES,
            metric=Metric.GPU_UTILIZATION,
            bucket__gte=since,
            bucket__lt=now,
            tenant_id__in={w.tenant_id for w in candidates},
            cluster_id__in={w.cluster_id for w in candidates},
        )
        .values("cluster_id", "tenant_id", "flavor_id")
        .annotate(peak=Max("max"), first=Min("bucket"), buckets=Count("pk"))
    ):
        observed[(r["cluster_id"], r["tenant_id"], r["flavor_id"])] = (
            r["peak"],
            r["first"],
            r["buckets"],
        )
    own = _own_activity(candidates, since=since, now=now)
    undone = reactivated_subjects(since=since)
    # Observed "throughout": the first bucket within one hour of the window's start (and, for
    # a workload's own hours, the last within two hours of now).
    coverage_from = since + timedelta(hours=1)
    recent_from = now - timedelta(hours=2)
    out = []
    for w in candidates:
        subject = f"workload:{w.cluster_id}:{w.uid}"
        if subject in undone:
            continue
        mine = own.get((w.cluster_id, w.uid))
        if mine is not None and mine[1] <= coverage_from and mine[2] >= recent_from:
            if mine[0] > idle_at_most:
                continue
            out.append(
                _workload_finding(
                    w,
                    f"{w.namespace}/{w.name} ({_gpus(w.gpus)}) has shown no activity on its "
                    f"own GPUs (peak {mine[0]:g}% <= {idle_at_most:g}%) and no progress for "
                    f"{_days(window)}.",
                    value=mine[0],
                    threshold=idle_at_most,
                )
            )
            continue
        keys = [
            (w.cluster_id, w.tenant_id or 0, by_name[(w.cluster_id, name)])
            for name in (w.flavors or [])
            if (w.cluster_id, name) in by_name
        ]
        seen = [observed[k] for k in keys if k in observed]
        if not keys or len(seen) != len(keys):
            continue
        if any(first > coverage_from for _, first, _ in seen):
            continue
        peak = max(p for p, _, _ in seen)
        if peak > idle_at_most:
            continue
        out.append(
            _workload_finding(
                w,
                f"{w.namespace}/{w.name} ({_gpus(w.gpus)}) has shown no GPU activity (peak "
                f"{peak:g}% <= {idle_at_most:g}% on every GPU of its team on that flavor) "
                f"and no progress for {_days(window)}.",
                value=peak,
                threshold=idle_at_most,
            )
        )
    return out


def low_utilization_findings(rule: AlertRule, *, now: datetime) -> list[Finding]:
    """(cluster, tenant, flavor) holding GPUs (pods' requests, hourly rollups) whose mean
    utilisation over ``duration`` is under ``threshold_pct``, observed throughout."""
    window = rule.duration or timedelta(days=7)
    threshold = rule.threshold_pct if rule.threshold_pct is not None else 30.0
    since = now - window
    rows = Rollup.objects.filter(
        resolution=Resolution.HOUR,
        metric__in=[Metric.GPU_UTILIZATION, Metric.GPUS_ALLOCATED],
        bucket__gte=since,
        bucket__lt=now,
    )
    if rule.cluster_id is not None:
        rows = rows.filter(cluster_id=rule.cluster_id)
    stats: dict[tuple[int, int, int], dict[int, tuple[float, int, datetime]]] = defaultdict(dict)
    for r in rows.values("cluster_id", "tenant_id", "flavor_id", "metric").annotate(
        total=Sum("sum"), samples=Sum("samples"), first=Min("bucket")
    ):
        if r["tenant_id"] and r["flavor_id"]:
            stats[(r["cluster_id"], r["tenant_id"], r["flavor_id"])][r["metric"]] = (
                r["total"],
                r["samples"],
                r["first"],
            )
    clusters, tenants, flavors = _names()
    coverage_from = since + timedelta(hours=2)
    out = []
    for key, metrics in sorted(stats.items()):
        util, allocated = metrics.get(Metric.GPU_UTILIZATION), metrics.get(Metric.GPUS_ALLOCATED)
        if util is None or allocated is None:
            continue
        if util[2] > coverage_from or allocated[2] > coverage_from:
            continue
        mean_util = util[0] / util[1]
        mean_allocated = allocated[0] / allocated[1]
        if mean_allocated <= 0 or mean_util >= threshold:
            continue
        c, t, f = key
        out.append(
            Finding(
                subject=f"utilization:{c}:{t}:{f}",
                message=f"{tenants.get(t, t)} on {clusters.get(c, c)} ({flavors.get(f, f)}) "
                f"held {mean_allocated:.1f} GPUs on average at {mean_util:.0f}% mean "
                f"utilisation over {_days(window)} (under {threshold:g}%).",
                cluster_id=c,
                tenant_id=t,
                flavor_id=f,
                value=round(mean_util, 2),
                threshold=threshold,
            )
        )
    return out


Finder = Callable[..., list[Finding]]
FINDERS: dict[RuleKind, Finder] = {
    RuleKind.QUOTA_WARNING: quota_findings,
    RuleKind.QUOTA_BLOCK: quota_findings,
    RuleKind.IDLE_WORKLOAD: idle_findings,
    RuleKind.MAX_RUNTIME: max_runtime_findings,
    RuleKind.LOW_UTILIZATION: low_utilization_findings,
}


def rule_findings(rule: AlertRule, *, now: datetime) -> list[Finding]:
    return FINDERS[RuleKind(rule.kind)](rule, now=now)


# --- what a tenant's page says of the workload rules -----------------------------------------


@dataclass(frozen=True)
class TenantRunRules:
    """The idle and maximum-run-time rules as they apply to one tenant, in words' parts."""

    max_run_time: timedelta | None  # None: the rule is off
    own_max_run_time: bool  # the tenant's own (set by request) rather than the platform's
    max_run_time_suspends: bool
    idle_after: timedelta | None  # None: the idle rule is off
    idle_at_most_pct: float
    idle_suspends: bool
    grace: timedelta
    grace_max_run_time: timedelta


def tenant_run_rules(*, tenant: Tenant) -> TenantRunRules:
    """The rules every cluster applies to the tenant's workloads (the first enabled rule of
    each kind that covers every cluster), with ``tenant``'s own maximum run time as read with
    it. One query."""
    rules = {
        r.kind: r
        for r in AlertRule.objects.filter(
            enabled=True,
            cluster__isnull=True,
            kind__in=[RuleKind.IDLE_WORKLOAD, RuleKind.MAX_RUNTIME],
        ).order_by("-pk")
    }
    idle, longest = rules.get(RuleKind.IDLE_WORKLOAD), rules.get(RuleKind.MAX_RUNTIME)
    hours = tenant.max_run_time_hours
    own = hours is not None and longest is not None
    default_grace = timedelta(days=1)
    return TenantRunRules(
        max_run_time=(
            None
            if longest is None
            else timedelta(hours=hours)
            if hours is not None
            else longest.duration or timedelta(days=7)
        ),
        own_max_run_time=own,
        max_run_time_suspends=longest is not None and (own or longest.act),
        idle_after=None if idle is None else idle.duration or timedelta(days=3),
        idle_at_most_pct=(
            idle.threshold_pct if idle is not None and idle.threshold_pct is not None else 1.0
        ),
        idle_suspends=idle is not None and idle.act,
        grace=idle.grace if idle is not None and idle.grace is not None else default_grace,
        grace_max_run_time=(
            longest.grace if longest is not None and longest.grace is not None else default_grace
        ),
    )


# --- the admission pre-check (R13) -----------------------------------------------------------


@dataclass
class ResourceVerdict:
    resource: str  # "gpu:<flavor>", "cpu", "memory", "storage"
    requested: Decimal
    fits: bool
    reason: str
    used: Decimal | None = None
    guaranteed: Decimal | None = None
    limit: Decimal | None = None
    headroom: Decimal | None = None  # limit - used
    borrowable: Decimal | None = None  # what the cohort can lend now (beyond the guarantee)


@dataclass
class AdmissionVerdict:
    tenant: str
    cluster: str
    fits: bool
    resources: list[ResourceVerdict] = field(default_factory=list)
    measured_at: datetime | None = None


def _cohort(tenant: Tenant) -> str:
    """The cohort a tenant's ClusterQueue joins (``quotas.kube.names.tenant_cohort``)."""
    if tenant.cohort:
        return f"cohort:{tenant.cohort}"
    if tenant.parent_id:
        return f"parent:{tenant.parent_id}"
    return "root"


def _gpu_resource(flavor: ResourceFlavor) -> str:
    return mig_resource(flavor.mig_profile) if flavor.kind == "mig" else GPU_RESOURCE


@dataclass(frozen=True)
class _ClusterUse:
    """What the admission pre-check reads of a cluster once: every tenant's quota lines, each
    tenant's GPU use per flavor now (latest 5-minute mean), each line's capacity (a MIG
    flavor's: the fleet's instances, R24) and the tenants in the asking tenant's cohort."""

    quotas: dict[tuple[int, int, str], Quota]  # (tenant id, flavor id, resource)
    used_by: dict[tuple[int, int], Decimal]  # (tenant id, flavor id)
    capacity: dict[tuple[int, str], Decimal]  # (flavor id, resource)
    cohort_ids: set[int]

    def borrowable(self, tenant: Tenant, flavor: ResourceFlavor, resource: str) -> Decimal:
        """What the cohort can lend now: peers' unused lendable quota, bounded by the
        flavor's free capacity."""
        total_used = sum((u for (_, f), u in self.used_by.items() if f == flavor.pk), Decimal(0))
        free = max(self.capacity.get((flavor.pk, resource), Decimal(0)) - total_used, Decimal(0))
        lendable = Decimal(0)
        for peer_id in self.cohort_ids - {tenant.pk}:
            peer = self.quotas.get((peer_id, flavor.pk, resource))
            if peer is None:
                continue
            can_lend = peer.guaranteed if peer.lending_limit is None else peer.lending_limit
            peer_used = self.used_by.get((peer_id, flavor.pk), Decimal(0))
            lendable += max(min(can_lend, peer.guaranteed - peer_used), Decimal(0))
        return min(lendable, free)


def _cluster_use(*, tenant: Tenant, cluster: Cluster, now: datetime) -> _ClusterUse:
    peers = {
        t.pk: t for t in Tenant.objects.filter(quota_sets__cluster=cluster).select_related("parent")
    }
    cohort = _cohort(tenant)
    quotas: dict[tuple[int, int, str], Quota] = {
        (q.quota_set.tenant_id, q.flavor_id, q.resource): q
        for q in Quota.objects.filter(quota_set__cluster=cluster).select_related("quota_set")
    }
    use = usage_selectors.usage_now(cluster_ids=[cluster.pk], now=now)
    return _ClusterUse(
        quotas=quotas,
        used_by={
            (t, f): Decimal(str(round(values.get(Metric.QUOTA_USED, 0.0), 6)))
            for (_, t, f), values in use.items()
        },
        capacity={key: amount.amount for key, amount in flavor_capacities(cluster=cluster).items()},
        cohort_ids={pk for pk, t in peers.items() if _cohort(t) == cohort},
    )


def _gpu_fit(
    *, used: Decimal, requested: Decimal, quota: Quota, borrowable: Decimal
) -> tuple[bool, str]:
    """Within the guarantee, or beyond it within the limit and what the cohort can lend."""
    after = used + requested
    if after > quota.limit:
        return False, (
            f"{_n(used)} in use + {_n(requested)} asked = {_n(after)} > the limit {_n(quota.limit)}"
            f" ({_n(quota.limit - used)} left)."
        )
    if after <= quota.guaranteed:
        return True, f"{_n(after)} of {_n(quota.guaranteed)} guaranteed after admission."
    needed = after - max(quota.guaranteed, used)
    fits = needed <= borrowable
    return fits, (
        f"borrows {_n(needed)} beyond the guarantee of {_n(quota.guaranteed)}; the cohort "
        f"can lend {_n(borrowable)} now"
        + ("." if fits else ": not enough, it would wait in the queue.")
    )


def _gpu_verdict(
    use: _ClusterUse,
    *,
    tenant: Tenant,
    cluster: Cluster,
    flavor: ResourceFlavor,
    requested: Decimal,
) -> ResourceVerdict:
    resource = _gpu_resource(flavor)
    quota = use.quotas.get((tenant.pk, flavor.pk, resource))
    label = f"gpu:{flavor.name}"
    if quota is None:
        return ResourceVerdict(
            label,
            requested,
            requested == 0,
            f"{tenant.slug} has no quota for {flavor.name} on {cluster.name}.",
        )
    used = use.used_by.get((tenant.pk, flavor.pk), Decimal(0))
    borrowable = use.borrowable(tenant, flavor, resource)
    fits, reason = _gpu_fit(used=used, requested=requested, quota=quota, borrowable=borrowable)
    return ResourceVerdict(
        label,
        requested,
        fits,
        reason,
        used=used,
        guaranteed=quota.guaranteed,
        limit=quota.limit,
        headroom=quota.limit - used,
        borrowable=borrowable,
    )


def _limit_verdict(
    use: _ClusterUse, *, tenant: Tenant, cluster: Cluster, resource: str, amount: Decimal
) -> ResourceVerdict:
    """CPU or memory: within the tenant's limit on the cluster (their use is not collected)."""
    items = [q for (t, _, r), q in use.quotas.items() if t == tenant.pk and r == resource]
    if not items:
        return ResourceVerdict(
            resource, amount, True, f"no {resource} quota on {cluster.name}: not limited."
        )
    limit = sum((q.limit for q in items), Decimal(0))
    guaranteed = sum((q.guaranteed for q in items), Decimal(0))
    fits = amount <= limit
    return ResourceVerdict(
        resource,
        amount,
        fits,
        f"{to_display(amount, resource)} {'within' if fits else 'exceeds'} the limit of "
        f"{to_display(limit, resource)} "
        "(current use is not collected; Kueue counts it at admission).",
        guaranteed=guaranteed,
        limit=limit,
    )


def _gpu_flavors(cluster: Cluster, gpus: Mapping[str, Decimal]) -> dict[str, ResourceFlavor]:
    """The cluster's flavors by name; 400 naming ``gpus.<name>`` for one that is not a GPU or
    MIG flavor of it."""
    flavors = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
    for name in gpus:
        flavor = flavors.get(name)
        if flavor is None or flavor.kind not in ("gpu", "mig"):
            raise ValidationFailed.for_field(
                f"gpus.{name}", f"{cluster.name} has no GPU or MIG flavor named {name!r}."
            )
    return flavors


def admission_check(
    *,
    tenant: Tenant,
    cluster: Cluster,
    gpus: Mapping[str, Decimal],
    cpu: Decimal | None,
    memory: Decimal | None,
    storage: Decimal | None,
    now: datetime,
    storage_used: Decimal | None = None,
    volumes: Mapping[str, Decimal] | None = None,
) -> AdmissionVerdict:
    """Would a job asking for ``gpus`` (per flavor name), ``cpu``, ``memory`` and ``storage``
    (base units) be admitted now? GPUs: the tenant's use (latest 5-minute mean) plus the job
    within its guarantee, or beyond it within its limit and what its cohort can lend now
    (peers' unused lendable quota, bounded by the flavor's free capacity). CPU and memory:
    within the tenant's limit on the cluster (their use is not collected). Storage: within the
    storage quota minus ``storage_used`` (the namespaces' ResourceQuota, read by the caller).
    ``volumes``: bytes written to existing claims (``namespace/claim``) against the free space
    the kubelet last reported (R13). Unknown flavors are a 400 naming ``gpus.<name>``, a claim
    outside the tenant's namespaces one naming ``volumes.<claim>``."""
    flavors = _gpu_flavors(cluster, gpus)
    quota_set = QuotaSet.objects.filter(tenant=tenant, cluster=cluster).first()
    if quota_set is None:
        raise ValidationFailed.for_field(
            "cluster", f"{tenant.slug} has no quota on {cluster.name}."
        )
    use = _cluster_use(tenant=tenant, cluster=cluster, now=now)
    verdict = AdmissionVerdict(tenant.slug, cluster.name, True, measured_at=now)
    for name, requested in sorted(gpus.items()):
        verdict.resources.append(
            _gpu_verdict(
                use, tenant=tenant, cluster=cluster, flavor=flavors[name], requested=requested
            )
        )
    for resource, amount in ((CPU_RESOURCE, cpu), (MEMORY_RESOURCE, memory)):
        if amount is not None:
            verdict.resources.append(
                _limit_verdict(
                    use, tenant=tenant, cluster=cluster, resource=resource, amount=amount
                )
            )
    if storage is not None:
        verdict.resources.append(_storage_verdict(quota_set, storage, storage_used))
    if volumes:
        verdict.resources.extend(_volume_verdicts(tenant, cluster, volumes))
    verdict.fits = all(r.fits for r in verdict.resources)
    return verdict


def _gib(amount: Decimal | int) -> str:
    return f"{Decimal(amount) / Decimal(1024**3):.1f} GiB"


def _volume_verdicts(
    tenant: Tenant, cluster: Cluster, volumes: Mapping[str, Decimal]
) -> list[ResourceVerdict]:
    """Whether each existing volume the job writes to has room for what it writes."""
    own = set(Namespace.objects.filter(tenant=tenant).values_list("name", flat=True))
    rooms = {
        f"{r.namespace}/{r.claim}": r
        for r in usage_selectors.volume_room(tenant_id=tenant.pk, cluster_id=cluster.pk)
    }
    out = []
    for key, requested in sorted(volumes.items()):
        namespace, _, claim = key.partition("/")
        if not claim or namespace not in own:
            raise ValidationFailed.for_field(
                f"volumes.{key}",
                f"a claim as namespace/claim in one of {tenant.slug}'s namespaces is required.",
            )
        room = rooms.get(key)
        label = f"volume:{key}"
        if room is None:
            out.append(
                ResourceVerdict(label, requested, True,
                                f"no free-space reading for {key} on {cluster.name}: not checked.")
            )  # fmt: skip
            continue
        free = Decimal(room.available_bytes)
        fits = requested <= free
        out.append(
            ResourceVerdict(
                label, requested, fits,
                f"{_gib(requested)} to write, {_gib(free)} free"
                + ("." if fits else ": the job would fail with 'No space left on device'."),
                headroom=free,
                limit=None if room.capacity_bytes is None else Decimal(room.capacity_bytes),
            )
        )  # fmt: skip
    return out


def _bytes(amount: Decimal) -> str:
    """Bytes as people read them: "2 TiB", "600 GiB", "1.5 MiB"."""
    return to_display(amount, STORAGE_RESOURCE)


def _storage_verdict(
    quota_set: QuotaSet, requested: Decimal, used: Decimal | None
) -> ResourceVerdict:
    limit = quota_set.storage_bytes
    if limit is None:
        return ResourceVerdict(STORAGE_RESOURCE, requested, True, "no storage quota: not limited.")
    if used is None:
        fits = requested <= limit
        return ResourceVerdict(
            STORAGE_RESOURCE, requested, fits,
            f"{_bytes(requested)} {'within' if fits else 'exceeds'} the storage quota of "
            f"{_bytes(limit)} (current use unknown: the cluster could not be read).",
            limit=limit,
        )  # fmt: skip
    left = max(limit - used, Decimal(0))
    fits = requested <= left
    return ResourceVerdict(
        STORAGE_RESOURCE, requested, fits,
        f"{_bytes(requested)} asked, {_bytes(left)} of {_bytes(limit)} left"
        + ("." if fits else ": the job would fail with 'No space left on device'."),
        used=used, limit=limit, headroom=left,
    )  # fmt: skip


def storage_used(*, tenant: Tenant, cluster: Cluster) -> Decimal | None:
    """Storage the tenant's PVCs request now (its ResourceQuotas' ``requests.storage`` used),
    read from the cluster; None when it cannot be read."""
    if cluster.backend != SyncBackend.KUBERNETES:
        return None
    from quotas.quantity import QuantityError, parse_quantity
    from quotas.sync import in_cluster

    seen = in_cluster(tenant=tenant, cluster=cluster)
    if not seen.reachable:
        return None
    # Several ResourceQuotas of one namespace (batch / inference scopes) see the same PVCs:
    # the largest per namespace.
    per_namespace: dict[str, Decimal] = defaultdict(Decimal)
    for rq in seen.resource_quotas:
        value = (rq.get("used") or {}).get("requests.storage")
        if value is None:
            continue
        try:
            amount = parse_quantity(value)
        except QuantityError:
            continue
        per_namespace[rq["namespace"]] = max(per_namespace[rq["namespace"]], amount)
    return sum(per_namespace.values(), Decimal(0))


def clusters_of(*, tenant: Tenant) -> list[Cluster]:
    return list(Cluster.objects.filter(quota_sets__tenant=tenant).order_by("name"))


def names_of(ids: Iterable[int]) -> dict[int, str]:
    return dict(Tenant.objects.filter(pk__in=list(ids)).values_list("pk", "slug"))
