"""Quota suggestions (R19, R20, R8): from last month's usage, per tenant and cluster, a draft
change request with the numbers behind it.

The rules, per GPU or MIG quota line of the tenant's quota set on the cluster:

- Guarantee: at least 80% of the daily peak (R19: "保障下限不低于团队日常峰值需求的80%", the
  guaranteed floor is not below 80% of the team's daily peak demand). The daily peak is the
  most GPUs in use (Kueue flavorsUsage) on each day of last month; the rule must hold on
  every day, so the floor is 80% of the highest daily peak, rounded up to whole GPUs. The
  suggested guarantee is that floor (up or down), within what the other tenants' guarantees
  leave free (unless the cluster allows overcommitting guarantees) and the elastic cap.
- Limit: within the cluster's elastic cap (``quotas.services.elastic_cap``). It covers the
  highest daily peak and never drops below the limit in force; a team that reached its limit
  last month gets the elastic cap (the most it may have). A limit already at the cap stays
  there, and the note says so (only a larger cap on the cluster would let it grow).
- Department (R14): a team's limit is held to what its department's cap leaves after its
  sibling teams' limits (and its guarantee to that limit), so the draft is one the approvals
  rules accept; the note says when the department's cap is what holds it.
- Memory-first (R8: low GPU utilisation but high memory, size quota by memory): below 40%
  mean utilisation, the guarantee moves to the smallest flavor on the cluster (a MIG slice or
  a smaller GPU) whose memory holds the peak memory used on one GPU with 10% headroom and
  whose compute (its GPU weight against this flavor's) covers the mean utilisation with 10%
  headroom; the whole-GPU line keeps its limit, so bigger jobs can still borrow. Where no
  such flavor fits, low utilisation still wins over the peak: the guarantee is not raised
  (GPUs held but mostly idle are no case for promising more of them).

Each suggestion with a change is filed through ``approvals.services.quota_request_create``
(validated like any request) as a draft in the name of a lead of the tenant, who reviews and
submits it. Recomputing replaces the tenant's previous unsubmitted suggestion drafts
(cancelled, their suggestions removed); submitted ones stay.

``change_revert_draft`` files the other kind of draft: back to the quota lines an applied
change replaced (``advice.watch``), in the name of the lead or admin who asked.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from advice import watch
from advice.models import Suggestion
from advice.selectors import LineUsage, ceil_units, flavor_memory_mib, month_before
from advice.selectors import tenant_month_usage as _month_usage
from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import (
    quota_request_cancel,
    quota_request_create,
    quota_request_ensure_can_file,
)
from core.errors import ApplicationError, Conflict
from quotas import vgpu
from quotas.choices import (
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    FlavorKind,
    is_gpu_resource,
    mig_resource,
)
from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor
from quotas.quantity import format_quantity, to_display
from quotas.selectors import flavor_capacities, guarantees_by_flavor
from quotas.services import QuotaItem, elastic_cap
from tenants.choices import MembershipRole
from tenants.models import Membership, Tenant, User
from tenants.services import audit_record
from usage.choices import Resolution
from usage.selectors import VgpuShareUse, vgpu_share_use, workload_get_for_tenant, workload_rows

logger = logging.getLogger(__name__)

GUARANTEE_SHARE_OF_PEAK = 0.8
LOW_UTILIZATION_PCT = 40.0
HEADROOM = 1.1
RULE = (
    "guarantee >= 80% of the highest daily peak, rounded up to whole GPUs; limit covers "
    "the peak (the elastic cap after a month at the limit) and stays within the elastic cap "
    "and the department's cap; below 40% mean utilisation the guarantee moves to the smallest "
    "flavor whose memory and compute fit, or else is not raised"
)


@dataclass
class _Line:
    quota: Quota
    usage: LineUsage
    capacity: Decimal
    free: Decimal  # capacity less the other tenants' guarantees (inf-like with overcommit)
    cap: Decimal
    room: tuple[Decimal, str] | None = None  # the department's cap less the siblings' limits


def _resource_of(flavor: ResourceFlavor) -> str:
    return mig_resource(flavor.mig_profile) if flavor.kind == FlavorKind.MIG else "nvidia.com/gpu"


def _memory_first(
    line: _Line, guaranteed: Decimal, limit: Decimal, context: dict[str, Any]
) -> tuple[ResourceFlavor, Decimal, Decimal, dict[str, Any]] | None:
    """The smaller flavor the guarantee moves to, its guarantee and limit, and why."""
    usage, flavor = line.usage, line.quota.flavor
    if usage.utilization_pct is None or usage.utilization_pct >= LOW_UTILIZATION_PCT:
        return None
    if usage.memory_peak_mib is None or not guaranteed or not flavor.gpu_weight:
        return None
    own_memory = flavor_memory_mib(flavor)
    best: tuple[Decimal, ResourceFlavor] | None = None
    for other in context["flavors"]:
        memory = flavor_memory_mib(other)
        if (
            other.pk == flavor.pk
            or memory is None
            or other.kind not in (FlavorKind.GPU, FlavorKind.MIG)
        ):
            continue
        if own_memory is not None and memory >= own_memory:
            continue
        compute = float(other.gpu_weight / flavor.gpu_weight)
        if memory < usage.memory_peak_mib * HEADROOM:
            continue
        if compute * 100 < usage.utilization_pct * HEADROOM:
            continue
        if best is None or other.gpu_weight < best[0]:
            best = (other.gpu_weight, other)
    if best is None:
        return None
    target = best[1]
    resource = _resource_of(target)
    capacity = context["capacities"].get((target.pk, resource))
    if capacity is None:
        return None
    cap = elastic_cap(
        capacity=capacity, fraction=context["cluster"].elastic_cap_fraction, resource=resource
    )
    held = context["held"].get((target.pk, resource), (Decimal(0), Decimal(0)))
    free = capacity - context["taken"].get((target.pk, resource), Decimal(0))
    if not context["cluster"].allow_guarantee_overcommit and guaranteed > free:
        return None
    target_limit = min(cap, max(limit, held[1], guaranteed))
    room = context["rooms"].get((target.pk, resource))
    if room is not None:
        target_limit = min(target_limit, room[0])
    if guaranteed > target_limit:
        return None
    why = {
        "flavor": target.name,
        "resource": resource,
        "memory_mib": flavor_memory_mib(target),
        "compute_share": round(float(target.gpu_weight / flavor.gpu_weight), 3),
        "guaranteed": float(guaranteed),
        "limit": float(target_limit),
    }
    return target, guaranteed, target_limit, why


def _numbers(
    line: _Line, *, floor: Decimal, guaranteed: Decimal, limit: Decimal, notes: list[str]
) -> dict[str, Any]:
    """The numbers behind one line's suggestion, as stored and shown."""
    quota, usage = line.quota, line.usage
    return {
        "flavor": quota.flavor.name,
        "resource": quota.resource,
        "daily_peaks": [[day.date().isoformat(), value] for day, value in usage.daily_peaks],
        "peak": usage.peak,
        "days_with_usage": sum(1 for _, value in usage.daily_peaks if value > 0),
        "p80": round(usage.peak * GUARANTEE_SHARE_OF_PEAK, 3),
        "guarantee_floor": float(floor),
        "elastic_cap": float(line.cap),
        "capacity": float(line.capacity),
        "utilization_pct": None
        if usage.utilization_pct is None
        else round(usage.utilization_pct, 1),
        "memory_peak_mib": usage.memory_peak_mib,
        "guaranteed_before": float(quota.guaranteed),
        "limit_before": float(quota.limit),
        "guaranteed_after": float(guaranteed),
        "limit_after": float(limit),
        "memory_first": None,
        "notes": notes,
        "rule": RULE,
    }


NO_READINGS = (
    "no use of this flavor was recorded last month (no readings at all, not even zero: the "
    "collector may not have run): left as it is"
)


def _plan_line(line: _Line, context: dict[str, Any]) -> tuple[list[QuotaItem], dict[str, Any]]:
    quota, usage = line.quota, line.usage
    if not usage.daily_peaks:  # no evidence is not evidence of no use
        return [], _numbers(
            line, floor=Decimal(0), guaranteed=quota.guaranteed, limit=quota.limit,
            notes=[NO_READINGS],
        )  # fmt: skip
    res = quota.resource
    peak = usage.peak
    floor = ceil_units(peak * GUARANTEE_SHARE_OF_PEAK)
    notes = []
    guaranteed = floor
    if guaranteed > line.free:
        guaranteed = max(line.free, Decimal(0))
        notes.append(
            f"80% of the peak is {to_display(floor, res)}, but the other tenants' guarantees "
            f"leave {to_display(line.free, res)} of {to_display(line.capacity, res)}"
        )
    if guaranteed > line.cap:
        guaranteed = line.cap
        notes.append(f"the guarantee is held to the elastic cap of {to_display(line.cap, res)}")
    low_use = usage.utilization_pct is not None and usage.utilization_pct < LOW_UTILIZATION_PCT
    held = guaranteed  # what the guarantee would be but for low utilisation
    if low_use and guaranteed > quota.guaranteed:
        guaranteed = quota.guaranteed
    reached_limit = quota.limit > 0 and Decimal(str(peak)) >= quota.limit
    wanted = max(quota.limit, guaranteed, ceil_units(peak))
    if reached_limit and quota.limit >= line.cap:
        notes.append(
            f"the peak reached the limit of {to_display(quota.limit, res)}, which is already "
            "the elastic cap: the limit cannot go higher (only a larger elastic cap on the "
            "cluster would let it)"
        )
    elif reached_limit:
        wanted = max(wanted, line.cap)
        notes.append(
            f"the peak reached the limit of {to_display(quota.limit, res)}: limit up to the "
            f"elastic cap of {to_display(line.cap, res)}"
        )
    limit = min(wanted, line.cap)
    if quota.limit > line.cap:
        notes.append(f"the limit in force is above the elastic cap of {to_display(line.cap, res)}")
    if line.room is not None and limit > line.room[0]:
        room, parent = line.room
        limit = max(room, Decimal(0))
        notes.append(
            f"the department {parent} leaves room for a limit of {to_display(limit, res)} "
            "beside its other teams' limits: the limit is held there"
        )
        if guaranteed > limit:
            guaranteed = limit
            held = min(held, limit)
            notes.append(f"the guarantee is held to that limit of {to_display(limit, res)}")
    lending = quota.lending_limit
    if lending is not None and lending > guaranteed:
        lending = guaranteed
    items = []
    numbers = _numbers(line, floor=floor, guaranteed=guaranteed, limit=limit, notes=notes)
    moved = _memory_first(line, held, limit, context)
    if moved is not None and moved[0].pk in context["touched"]:
        moved = None
    if low_use and moved is None and held > guaranteed:
        notes.append(
            f"mean utilisation {numbers['utilization_pct']}% is below "
            f"{LOW_UTILIZATION_PCT:.0f}% and no smaller flavor fits"
            + ("" if usage.memory_peak_mib is not None else " (no memory readings)")
            + f": the guarantee stays at {to_display(guaranteed, res)} rather than rising to "
            f"{to_display(held, res)}"
        )
    if moved is not None:
        target, target_g, target_l, why = moved
        context["touched"].add(target.pk)
        numbers["memory_first"] = why
        numbers["guaranteed_after"] = 0.0
        notes.append(
            f"mean utilisation {numbers['utilization_pct']}% and peak memory "
            f"{usage.memory_peak_mib:,.0f} MiB fit {target.name}: the guarantee moves there"
        )
        items.append(
            QuotaItem(
                quota.flavor, quota.resource, Decimal(0), limit, Decimal(0) if lending else None
            )
        )
        items.append(QuotaItem(target, why["resource"], target_g, target_l, None))
        return items, numbers
    if (guaranteed, limit, lending) != (quota.guaranteed, quota.limit, quota.lending_limit):
        items.append(QuotaItem(quota.flavor, quota.resource, guaranteed, limit, lending))
    return items, numbers


# vGPU shares (HAMi): memory-first. A team whose containers use little of its compute share
# but fill its GPU memory share (the source's example: 30% utilisation, high memory needs)
# gets a draft that keeps its compute low and raises its GPU memory, in whole GiB.
MEMORY_FULL_SHARE = 0.85  # the month's peak at or above this part of the memory limit
MEMORY_TARGET_SHARE = 0.75  # where the peak sits in the suggested memory limit


def _ceil_gib(mib: float) -> Decimal:
    """MiB rounded up to whole GiB, in bytes (HAMi counts MiB; people read GiB)."""
    return Decimal(math.ceil(round(mib / 1024, 6))) * vgpu.GIB


def _plan_vgpu(
    quotas: dict[str, Quota], use: VgpuShareUse, context: dict[str, Any]
) -> tuple[list[QuotaItem], dict[str, Any]] | None:
    """Memory-first on one vGPU flavor: with the mean compute used under
    ``LOW_UTILIZATION_PCT`` of the compute limit and the GPU memory peak at or above
    ``MEMORY_FULL_SHARE`` of the memory limit, the memory limit rises so the peak sits at
    ``MEMORY_TARGET_SHARE`` of it (whole GiB, within the elastic cap), its guarantee to the
    peak with ``HEADROOM`` where the other tenants' guarantees leave room, and the compute
    guarantee comes down to the mean used with ``HEADROOM`` (the limit stays, so bursts can
    still borrow). None where the tenant has no GPU memory and compute lines there or no
    readings."""
    memory, cores = quotas.get(GPUMEM_RESOURCE), quotas.get(GPUCORES_RESOURCE)
    if memory is None or cores is None or use.memory_peak_mib is None or use.cores_mean is None:
        return None
    flavor, cluster = memory.flavor, context["cluster"]
    used_share = use.cores_mean / float(cores.limit) * 100 if cores.limit else 100.0
    peak_share = use.memory_peak_mib * vgpu.MIB / float(memory.limit) if memory.limit else 0.0
    notes: list[str] = []
    items: list[QuotaItem] = []
    mem_g, mem_l, core_g = memory.guaranteed, memory.limit, cores.guaranteed
    memory_first = used_share < LOW_UTILIZATION_PCT and peak_share >= MEMORY_FULL_SHARE
    if memory_first:
        capacity = context["capacities"].get((flavor.pk, GPUMEM_RESOURCE))
        if capacity is None and flavor.gpu_memory_mib:  # no fleet figure: one GPU's memory
            capacity = Decimal(flavor.gpu_memory_mib) * vgpu.MIB
        capacity = capacity or Decimal(0)
        cap = elastic_cap(
            capacity=capacity, fraction=cluster.elastic_cap_fraction, resource=GPUMEM_RESOURCE
        )
        free = capacity - context["taken"].get((flavor.pk, GPUMEM_RESOURCE), Decimal(0))
        if cluster.allow_guarantee_overcommit:
            free = cap
        cap = max(cap // vgpu.MIB * vgpu.MIB, memory.limit)  # whole MiB; never below the limit
        mem_l = min(cap, max(mem_l, _ceil_gib(use.memory_peak_mib / MEMORY_TARGET_SHARE)))
        mem_g = min(mem_l, max(mem_g, min(free, _ceil_gib(use.memory_peak_mib * HEADROOM))))
        core_g = min(core_g, Decimal(max(1, math.ceil(round(use.cores_mean * HEADROOM, 6)))))
        notes.append(
            f"its containers used {use.cores_mean:.0f}% of a GPU on average "
            f"({used_share:.0f}% of its compute limit of {vgpu.cores_text(cores.limit)}) but "
            f"their GPU memory peaked at {vgpu.gib_text(Decimal(repr(use.memory_peak_mib)) * vgpu.MIB)}"
            f" ({peak_share * 100:.0f}% of its {vgpu.gib_text(memory.limit)}): memory-first, "
            f"GPU memory up to {vgpu.gib_text(mem_l)} (guaranteed {vgpu.gib_text(mem_g)}), "
            f"compute guaranteed {vgpu.cores_text(core_g)}"
        )
        if mem_l == memory.limit:
            notes.append(
                f"the memory limit is already the elastic cap of {vgpu.gib_text(cap)}: only a "
                "larger cap would let it grow"
            )
        if (mem_g, mem_l) != (memory.guaranteed, memory.limit):
            items.append(QuotaItem(flavor, GPUMEM_RESOURCE, mem_g, mem_l, None))
        if core_g != cores.guaranteed:
            items.append(QuotaItem(flavor, GPUCORES_RESOURCE, core_g, cores.limit, None))
    numbers = {
        "flavor": flavor.name,
        "resource": GPUMEM_RESOURCE,
        "vgpu": {
            "cores_mean_pct": round(use.cores_mean, 1),
            "cores_share_used_pct": round(used_share, 1),
            "memory_peak_mib": round(use.memory_peak_mib, 1),
            "memory_share_peak_pct": round(peak_share * 100, 1),
            "memory_before": vgpu.gib_text(memory.limit),
            "memory_after": vgpu.gib_text(mem_l),
            "memory_guaranteed_before": vgpu.gib_text(memory.guaranteed),
            "memory_guaranteed_after": vgpu.gib_text(mem_g),
            "cores_guaranteed_before": vgpu.cores_text(cores.guaranteed),
            "cores_guaranteed_after": vgpu.cores_text(core_g),
            "cores_limit": vgpu.cores_text(cores.limit),
            "memory_first": memory_first,
        },
        "daily_peaks": [],
        "peak": 0.0,
        "p80": 0.0,
        "utilization_pct": round(used_share, 1),
        "memory_peak_mib": round(use.memory_peak_mib, 1),
        "guaranteed_before": float(memory.guaranteed) / vgpu.GIB,
        "limit_before": float(memory.limit) / vgpu.GIB,
        "guaranteed_after": float(mem_g) / vgpu.GIB,
        "limit_after": float(mem_l) / vgpu.GIB,
        "elastic_cap": 0.0,
        "memory_first": None,
        "notes": notes,
        "rule": RULE,
    }
    return items, numbers


def _department_rooms(
    tenant: Tenant, cluster: Cluster
) -> dict[tuple[int, str], tuple[Decimal, str]]:
    """Per (flavor id, resource): the most limit ``tenant``'s department lets it have on
    ``cluster`` (its cap less the sibling teams' limits: R14, as ``department_check`` holds
    requests to) and the department's slug; empty for a tenant with no department."""
    parent = tenant.parent
    if parent is None:
        return {}
    siblings: dict[tuple[int, str], Decimal] = {}
    for q in Quota.objects.filter(
        quota_set__tenant__parent=parent, quota_set__cluster=cluster
    ).exclude(quota_set__tenant=tenant):
        key = (q.flavor_id, q.resource)
        siblings[key] = siblings.get(key, Decimal(0)) + q.limit
    return {
        (q.flavor_id, q.resource): (
            q.limit - siblings.get((q.flavor_id, q.resource), Decimal(0)),
            parent.slug,
        )
        for q in Quota.objects.filter(quota_set__tenant=parent, quota_set__cluster=cluster)
    }


def _lead(tenant: Tenant, actor: User | None) -> User | None:
    """Who the draft is filed for: the acting lead, else the tenant's first lead."""
    leads = Membership.objects.filter(
        tenant=tenant, role=MembershipRole.LEAD, user__is_active=True
    ).select_related("user")
    if actor is not None and any(m.user_id == actor.pk for m in leads):
        return actor
    first = leads.order_by("pk").first()
    return first.user if first else None


def _replace_open(tenant: Tenant, actor: User | None) -> int:
    """Cancel the tenant's unsubmitted suggestion drafts and drop their suggestions."""
    old = list(
        Suggestion.objects.filter(tenant=tenant)
        .filter(Q(request__isnull=True) | Q(request__status=RequestStatus.DRAFT))
        .select_related("request__requester", "request__tenant")
    )
    for suggestion in old:
        draft = suggestion.request
        if draft is not None and draft.requester is not None:
            quota_request_cancel(request=draft, actor=draft.requester)
    Suggestion.objects.filter(pk__in=[s.pk for s in old]).delete()
    return len(old)


def _reason(cluster: Cluster, start: datetime, lines: list[dict[str, Any]]) -> str:
    parts = [f"Suggested by the portal from {start:%B %Y}'s usage on {cluster.name}."]
    for n in lines:
        if n.get("vgpu"):
            if n["vgpu"]["memory_first"]:
                parts.append(f"{n['flavor']} (vGPU): {'; '.join(n['notes'])}.")
            continue
        if (n["guaranteed_before"], n["limit_before"]) == (
            n["guaranteed_after"],
            n["limit_after"],
        ) and not n["memory_first"]:
            continue
        parts.append(
            f"{n['flavor']}: highest daily peak {n['peak']:g}, 80% = {n['p80']:g} -> guarantee "
            f"{n['guaranteed_before']:g} -> {n['guaranteed_after']:g}, limit "
            f"{n['limit_before']:g} -> {n['limit_after']:g} (elastic cap {n['elastic_cap']:g})"
            + (f"; utilisation {n['utilization_pct']}%" if n["utilization_pct"] is not None else "")
            + (
                f"; memory-first: guarantee {n['memory_first']['guaranteed']:g} on "
                f"{n['memory_first']['flavor']}"
                if n["memory_first"]
                else ""
            )
            + "."
        )
    return "\n".join(parts)


def suggestion_compute(
    *, tenant: Tenant, cluster: Cluster, actor: User | None, start: datetime, end: datetime,
    now: datetime,
) -> Suggestion | None:  # fmt: skip
    """One tenant on one cluster (inside ``suggestions_compute``'s transaction)."""
    quota_set = QuotaSet.objects.filter(tenant=tenant, cluster=cluster).first()
    if quota_set is None:
        return None
    quotas = [
        q
        for q in quota_set.quotas.select_related("flavor").order_by("flavor__name", "resource")
        if is_gpu_resource(q.resource) and q.flavor.kind != FlavorKind.VGPU
    ]
    usage = _month_usage(tenant=tenant, cluster=cluster, start=start, end=end, now=now)
    capacities = {  # a MIG flavor's: the fleet's instances (R24)
        key: capacity.amount for key, capacity in flavor_capacities(cluster=cluster).items()
    }
    taken = guarantees_by_flavor(cluster=cluster, exclude_quota_set=quota_set)
    rooms = _department_rooms(tenant, cluster)
    context: dict[str, Any] = {
        "cluster": cluster,
        "flavors": list(ResourceFlavor.objects.filter(cluster=cluster)),
        "capacities": capacities,
        "taken": taken,
        "held": {(q.flavor_id, q.resource): (q.guaranteed, q.limit) for q in quotas},
        "touched": {q.flavor_id for q in quotas},
        "rooms": rooms,
    }
    items: list[QuotaItem] = []
    numbers = []
    for quota in quotas:
        capacity = capacities.get((quota.flavor_id, quota.resource), Decimal(0))
        free = (
            Decimal(10**9)
            if cluster.allow_guarantee_overcommit
            else capacity - taken.get((quota.flavor_id, quota.resource), Decimal(0))
        )
        line = _Line(
            quota,
            usage.get(quota.flavor_id, LineUsage()),
            capacity,
            free,
            elastic_cap(
                capacity=capacity, fraction=cluster.elastic_cap_fraction, resource=quota.resource
            ),
            rooms.get((quota.flavor_id, quota.resource)),
        )
        line_items, line_numbers = _plan_line(line, context)
        items.extend(line_items)
        numbers.append(line_numbers)
    vgpu_lines: dict[int, dict[str, Quota]] = {}
    for q in quota_set.quotas.select_related("flavor").filter(
        flavor__kind=FlavorKind.VGPU, resource__in=[GPUMEM_RESOURCE, GPUCORES_RESOURCE]
    ):
        vgpu_lines.setdefault(q.flavor_id, {})[q.resource] = q
    if vgpu_lines:
        uses = vgpu_share_use(
            start=start, end=end, tenant_ids=[tenant.pk], resolution=Resolution.DAY
        )
        for use in uses:
            if use.flavor_id in vgpu_lines:
                planned = _plan_vgpu(vgpu_lines[use.flavor_id], use, context)
                if planned is not None:
                    items.extend(planned[0])
                    numbers.append(planned[1])
    if not numbers:
        return None
    suggestion = Suggestion(
        tenant=tenant,
        cluster=cluster,
        period_start=start,
        period_end=end,
        numbers=numbers,
        created_by=actor,
    )
    if not items:
        suggestion.note = "No change: the quotas in force already follow last month's usage."
    elif (lead := _lead(tenant, actor)) is None:
        suggestion.note = f"{tenant.slug} has no lead to review a draft; nothing was filed."
    else:
        try:
            with transaction.atomic():
                suggestion.request = quota_request_create(
                    tenant=tenant,
                    cluster=cluster,
                    requester=lead,
                    reason=_reason(cluster, start, numbers),
                    items=items,
                )
        except ApplicationError as exc:
            suggestion.note = f"Not filed: {exc.message}"
            logger.info("suggestion for %s on %s not filed: %s", tenant, cluster, exc.message)
    suggestion.save()
    audit_record(
        actor=actor,
        action="suggestion.computed",
        obj=suggestion,
        tenant=tenant,
        object_id=f"suggestion-{suggestion.pk}",
        after={
            "cluster": cluster.name,
            "period": f"{start:%Y-%m}",
            "request": suggestion.request_id,
            "items": [
                {
                    "flavor": i.flavor.name,
                    "resource": i.resource,
                    "guaranteed": format_quantity(i.guaranteed, i.resource),
                    "limit": format_quantity(i.limit, i.resource),
                }
                for i in items
            ],
            "note": suggestion.note,
        },
    )
    return suggestion


@transaction.atomic
def suggestions_compute(
    *,
    tenant: Tenant,
    actor: User | None = None,
    now: datetime | None = None,
    period: tuple[datetime, datetime] | None = None,
) -> list[Suggestion]:
    """Last month's suggestions for ``tenant`` on every cluster it has quotas on (or those of
    ``period``, start and end: the demo uses its simulated 30 days), replacing its
    unsubmitted ones. The tenant row is locked, so two runs do not interleave."""
    now = now or timezone.now()
    tenant = Tenant.objects.select_for_update().get(pk=tenant.pk)
    start, end = period or month_before(now)
    _replace_open(tenant, actor)
    out = []
    for cluster in Cluster.objects.filter(quota_sets__tenant=tenant).order_by("name"):
        suggestion = suggestion_compute(
            tenant=tenant, cluster=cluster, actor=actor, start=start, end=end, now=now
        )
        if suggestion is not None:
            out.append(suggestion)
    return out


def suggestions_compute_all(*, now: datetime | None = None) -> int:
    """The monthly run: every active tenant (not archived: it gets no new quotas), each in
    its own transaction."""
    count = 0
    tenants = Tenant.objects.filter(
        state="active", archived_at__isnull=True, quota_sets__isnull=False
    ).distinct()
    for tenant in tenants:
        try:
            count += len(suggestions_compute(tenant=tenant, now=now))
        except Exception:  # one tenant's failure must not stop the others
            logger.exception("suggestions for %s failed", tenant.slug)
    return count


# "Ask for what this needs": a waiting workload's draft request ----------------------------------


def workload_request_draft(*, tenant: Tenant, workload_id: int, actor: User) -> QuotaChangeRequest:
    """A draft change request for what a workload of ``tenant`` waits for (lack of quota, a
    held queue, a workload that cannot fit): the quota line it needs, with the evidence (the
    workload, who submitted it, how long it waited, Kueue's words) as its reason. The lead
    reviews it in the request form and files it. 403 for members; 409 when the workload does
    not wait for quota (any more); 400 when the numbers break a rule (the check says which)."""
    quota_request_ensure_can_file(actor=actor, tenant=tenant)
    workload = workload_get_for_tenant(tenant=tenant, pk=workload_id)
    row = workload_rows(tenant=tenant, workloads=[workload])[0]
    need = row.need
    if need is None:
        raise Conflict(
            f"{workload.namespace}/{workload.name} is {row.state} and does not wait for quota.",
            fields={"state": [row.state]},
            state=row.state,
        )
    flavor = ResourceFlavor.objects.get(cluster=workload.cluster, name=need.flavor)
    held = Quota.objects.filter(
        quota_set__tenant=tenant, quota_set__cluster=workload.cluster, flavor=flavor,
        resource=need.resource,
    ).first()  # fmt: skip
    item = QuotaItem(
        flavor=flavor,
        resource=need.resource,
        guaranteed=need.guaranteed,
        limit=need.limit,
        lending_limit=held.lending_limit if held is not None else None,
    )
    submitted = f", submitted by {workload.submitter}" if workload.submitter else ""
    kind = f" ({workload.job_kind})" if workload.job_kind else ""
    reason = (
        f"So that {workload.namespace}/{workload.name}{kind}{submitted} on {need.cluster} can "
        f"run: it is {row.state}, {row.duration} (since {workload.created_at:%Y-%m-%d %H:%M} "
        f"UTC); {row.reason}.\n"
        f"{need.flavor} {need.resource}: guarantee {need.guaranteed_before:g} -> "
        f"{need.guaranteed:g}, limit {need.limit_before:g} -> {need.limit:g}."
    )
    if workload.pending_message:
        reason += f"\nKueue: {workload.pending_message}"
    request = quota_request_create(
        tenant=tenant, cluster=workload.cluster, requester=actor, reason=reason, items=[item]
    )
    audit_record(
        actor=actor, action="workload.request_drafted", obj=workload, tenant=tenant,
        object_id=f"{need.cluster}/{workload.namespace}/{workload.name}",
        after={"request": request.pk, "flavor": need.flavor, "resource": need.resource,
               "guaranteed": str(need.guaranteed), "limit": str(need.limit)},
    )  # fmt: skip
    return request


def change_revert_draft(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    """A draft asking to go back to the quota lines ``request`` replaced (as they were when
    it was approved), in ``actor``'s name, for them to review and submit: filed through
    ``quota_request_create`` (its rules and its permission: a lead of the tenant or a platform
    admin; 403 for members). 409 unless ``request`` has applied and its previous lines were
    kept. The caller has already scoped ``request`` to ``actor``."""
    if request.status != RequestStatus.APPLIED:
        raise Conflict(
            f"Request #{request.pk} is {request.status}: only an applied change is undone.",
            fields={"status": [f"{request.status}, not applied"]},
        )
    items = watch.change_revert_items(request=request)
    if not items or len(items) != len(request.items.all()):
        raise Conflict(
            f"Request #{request.pk} was approved before the portal kept the quota lines it "
            "replaced: file the numbers you want in the request form.",
            fields={"items": ["the previous quota lines were not kept"]},
        )
    lines = ", ".join(
        f"{i.flavor.name} {i.resource} guaranteed {format_quantity(i.guaranteed, i.resource)} "
        f"limit {format_quantity(i.limit, i.resource)}"
        for i in items
    )
    return quota_request_create(
        tenant=request.tenant,
        cluster=request.cluster,
        requester=actor,
        reason=f"Back to the quotas in force before request #{request.pk}: {lines}.",
        items=items,
        submit=False,
    )
