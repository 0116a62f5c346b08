"""Writes for quotas, and the rules a quota line keeps.

Quota sets change only through these functions, which validate every item against the
cluster (``quota_items_check``; ``capacity_lines_check`` gives the same verdicts line by line
for pages), bump the generation and audit the change in one transaction. A change the
cluster must see is recorded in the outbox in the same transaction and pushed after commit
(``outbox_record``; ``outbox_sweep`` re-sends what no worker took, ``outbox_reopen`` an
admin's retry): approved quotas, a tenant's own changes (``quota_sets_resync``) and a hold on
new work at 100% (``quota_set_hold``, R11). Tier templates are written here too."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import ValidationFailed
from core.tasks import enqueue
from quotas import timeslicing
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    MEMORY_RESOURCE,
    Enforcement,
    FlavorKind,
    is_gpu_resource,
    mig_resource,
)
from quotas.kube import enforcement
from quotas.models import (
    Cluster,
    Quota,
    QuotaSet,
    ResourceFlavor,
    SyncOutbox,
    TierTemplate,
)
from quotas.quantity import QuantityError, format_quantity, parse_resource_amount, to_display
from quotas.selectors import (
    Capacity,
    FlavorAllocation,
    FleetCapacity,
    flavor_capacities,
    guarantees_by_flavor,
)
from tenants.models import Tenant, User
from tenants.namespaces import reserved_reason
from tenants.services import audit_record, tenant_ensure_not_archived

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuotaItem:
    """One desired quota line, amounts in base units, its flavor the ``ResourceFlavor`` row
    (what validation and writes take; the compiler's pure counterpart, flavor by name, is
    ``quotas.kube.spec.QuotaSpec``)."""

    flavor: ResourceFlavor
    resource: str
    guaranteed: Decimal
    limit: Decimal
    lending_limit: Decimal | None = None


@dataclass(frozen=True)
class SchedulingQuotas:
    max_running_jobs: int | None = None
    max_queued_jobs: int | None = None
    max_pods: int | None = None
    storage_bytes: Decimal | None = None
    max_pvcs: int | None = None
    fair_share_weight: int | None = None
    # R16: per-pod caps (cores and bytes for CPU and memory); R17: GPUs for inference.
    max_gpus_per_pod: int | None = None
    max_cpu_per_pod: Decimal | None = None
    max_memory_per_pod: Decimal | None = None
    inference_gpus: int | None = None


POD_CAP_FIELDS = {
    "max_gpus_per_pod": GPU_RESOURCE,
    "max_cpu_per_pod": CPU_RESOURCE,
    "max_memory_per_pod": MEMORY_RESOURCE,
}


@dataclass
class QuotaCheck:
    """What validation found: errors refuse the change, warnings do not."""

    errors: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def error(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)

    def raise_if_invalid(self) -> None:
        if self.errors:
            first = next(iter(self.errors.values()))[0]
            raise ValidationFailed(first, fields=self.errors)


def quota_item_parse(
    *,
    flavor: ResourceFlavor,
    resource: str,
    guaranteed: Any,
    limit: Any,
    lending_limit: Any = None,
    field_prefix: str = "",
) -> QuotaItem:
    """Parse the amounts of one item; QuantityError messages name the field."""
    amounts: dict[str, Decimal | None] = {}
    for name, raw in (
        ("guaranteed", guaranteed),
        ("limit", limit),
        ("lending_limit", lending_limit),
    ):
        if raw is None:
            amounts[name] = None
            continue
        if timeslicing.is_percent(raw):
            amounts[name] = _shares_from_percent(
                flavor, resource, str(raw), f"{field_prefix}{name}"
            )
            continue
        try:
            amounts[name] = parse_resource_amount(resource, raw)
        except QuantityError as exc:
            raise ValidationFailed.for_field(f"{field_prefix}{name}", str(exc)) from exc
    if amounts["guaranteed"] is None or amounts["limit"] is None:
        raise ValidationFailed.for_field(
            f"{field_prefix}limit", "guaranteed and limit are required."
        )
    return QuotaItem(
        flavor, resource, amounts["guaranteed"], amounts["limit"], amounts["lending_limit"]
    )


def _shares_from_percent(flavor: ResourceFlavor, resource: str, raw: str, field: str) -> Decimal:
    """R25: a percentage of one GPU, for the GPUs of a time-sliced flavor only, as shares."""
    replicas = flavor.time_slicing_replicas
    if not replicas or resource != GPU_RESOURCE:
        what = f"{resource} on {flavor.name}"
        raise ValidationFailed.for_field(
            field,
            f"{what} is not counted in time-sliced shares: a percentage of a GPU is only for "
            "the GPUs of a time-sliced flavor; give a number",
        )
    try:
        return timeslicing.shares_from_percent(raw, replicas=replicas, flavor=flavor.name)
    except ValueError as exc:
        raise ValidationFailed.for_field(field, str(exc)) from exc


def _shares_over_capacity(item: QuotaItem, *, taken: Decimal, capacity: Decimal) -> str:
    """R25: the shares of a time-sliced flavor granted to all tenants together never exceed
    what its GPUs give (GPUs x shares per GPU), whether or not the cluster lets guarantees
    overcommit: a share the device plugin does not advertise cannot be had. "" when they fit."""
    replicas = item.flavor.time_slicing_replicas
    total = taken + item.guaranteed
    if not replicas or item.resource != GPU_RESOURCE or total <= capacity:
        return ""
    return (
        f"time-sliced flavor {item.flavor.name}: the shares granted to all tenants would total "
        f"{timeslicing.shares_text(total, replicas)} ({to_display(item.guaranteed, item.resource)} "
        f"here, {to_display(taken, item.resource)} to other tenants), above the "
        f"{timeslicing.shares_word(capacity)} its {timeslicing.gpus_text(capacity, replicas)} "
        f"give at {replicas} shares per GPU"
    )


def _capacity_label(flavor: ResourceFlavor, resource: str) -> str:
    """What the capacity counts: "NVIDIA A100-SXM4-80GB" for whole GPUs, "cpu in a100-80gb"
    for the rest (256 cores of a GPU flavor are not 256 GPUs)."""
    if resource == GPU_RESOURCE and flavor.gpu_model:
        if flavor.time_slicing_replicas:  # R25: counted in time-sliced shares, not GPUs
            return f"{flavor.gpu_model} time-sliced shares"
        return flavor.gpu_model
    return f"{resource} in {flavor.name}"


def mig_shortfall(
    *,
    flavor: ResourceFlavor,
    cluster: Cluster,
    asked: Decimal,
    fleet: FleetCapacity,
    detail: str = "",
) -> str:
    """Why ``asked`` instances of a MIG flavor cannot be had: the profile, the count asked and
    what the fleet has, and where an admin plans a repartition."""
    have = fleet.total
    text = (
        f"{flavor.mig_profile} on {cluster.name}: "
        f"{format_quantity(asked, mig_resource(flavor.mig_profile))} asked, "
        f"{have} {'instance exists' if have == 1 else 'instances exist'} or "
        f"{'is' if have == 1 else 'are'} planned"
    )
    if fleet.planned:
        text += f" ({fleet.planned} of them in repartitions under way)"
    text += detail
    link = fleet.plan_for(int(asked))
    if link:
        text += f". A platform admin can plan a repartition for it: {link}"
    return text


def quota_items_check(
    *,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    quota_set: QuotaSet | None = None,
    department: bool = False,
    capacities: Mapping[tuple[int, str], Capacity] | None = None,
) -> QuotaCheck:
    """Business rules for a tenant's items on ``cluster``. Errors name the item, the rule and
    the numbers. Capacity sums exclude ``quota_set`` (the set being replaced). A MIG flavor's
    capacity is what the fleet has (``quotas.selectors.flavor_capacities``): asking for more
    instances than exist or are planned is refused naming the profile and the counts. A
    ``department``'s limit is a cap over its teams together (R14): it is held to the
    flavor's capacity, not to the elastic cap of a single tenant, which binds each team."""
    check = QuotaCheck()
    if capacities is None:  # a caller that read them already passes them
        capacities = flavor_capacities(cluster=cluster)
    guaranteed_elsewhere = guarantees_by_flavor(cluster=cluster, exclude_quota_set=quota_set)
    seen: set[tuple[int, str]] = set()
    for index, item in enumerate(items):
        name = f"items[{index}]"
        what = f"{item.resource} on {item.flavor.name}"
        if item.flavor.cluster_id != cluster.pk:
            check.error(
                f"{name}.flavor",
                f"flavor {item.flavor.name!r} belongs to cluster "
                f"{item.flavor.cluster.name!r}, not {cluster.name!r}",
            )
            continue
        key = (item.flavor.pk, item.resource)
        if key in seen:
            check.error(f"{name}.resource", f"{what} is listed twice")
            continue
        seen.add(key)
        if key not in capacities:
            check.error(
                f"{name}.resource", f"flavor {item.flavor.name!r} does not cover {item.resource!r}"
            )
            continue
        if item.guaranteed > item.limit:
            check.error(
                f"{name}.guaranteed",
                f"{what}: guaranteed {format_quantity(item.guaranteed, item.resource)} "
                f"is above the limit {format_quantity(item.limit, item.resource)}",
            )
        if item.lending_limit is not None and item.lending_limit > item.guaranteed:
            check.error(
                f"{name}.lending_limit",
                f"{what}: lending limit "
                f"{format_quantity(item.lending_limit, item.resource)} is above guaranteed "
                f"{format_quantity(item.guaranteed, item.resource)}",
            )
        capacity = capacities[key].amount
        fleet = capacities[key].fleet
        taken = guaranteed_elsewhere.get(key) or Decimal(0)
        if fleet is not None and item.limit > capacity:
            check.error(
                f"{name}.limit",
                mig_shortfall(flavor=item.flavor, cluster=cluster, asked=item.limit, fleet=fleet),
            )
            continue
        if (
            fleet is not None
            and not cluster.allow_guarantee_overcommit
            and taken + item.guaranteed > capacity
        ):
            check.error(
                f"{name}.guaranteed",
                mig_shortfall(
                    flavor=item.flavor,
                    cluster=cluster,
                    asked=taken + item.guaranteed,
                    fleet=fleet,
                    detail=(
                        f"; guaranteed {format_quantity(item.guaranteed, item.resource)} here "
                        f"and {format_quantity(taken, item.resource)} to other tenants"
                    ),
                ),
            )
            continue
        shares_over = _shares_over_capacity(item, taken=taken, capacity=capacity)
        if shares_over:
            check.error(f"{name}.guaranteed", shares_over)
            continue
        if not guarantees_fit(
            capacity=capacity,
            guaranteed=taken + item.guaranteed,
            overcommit_allowed=cluster.allow_guarantee_overcommit,
        ):
            check.error(
                f"{name}.guaranteed",
                (
                    f"{what}: guaranteed {format_quantity(item.guaranteed, item.resource)} does not fit: "
                    f"other tenants hold {format_quantity(taken, item.resource)} of "
                    f"{format_quantity(capacity, item.resource)} {_capacity_label(item.flavor, item.resource)} on "
                    f"{cluster.name} and the cluster does not allow overcommitting guarantees"
                ),
            )
        cap = elastic_cap(
            capacity=capacity, fraction=cluster.elastic_cap_fraction, resource=item.resource
        )
        if department and item.limit > capacity:
            check.error(
                f"{name}.limit",
                f"{what}: the department cap of {format_quantity(item.limit, item.resource)} "
                f"is above the {format_quantity(capacity, item.resource)} "
                f"{_capacity_label(item.flavor, item.resource)} of {cluster.name}",
            )
        elif not department and not limit_fits_cap(limit=item.limit, cap=cap):
            check.error(
                f"{name}.limit",
                (
                    f"limit {format_quantity(item.limit, item.resource)} exceeds the elastic cap of "
                    f"{format_quantity(cap, item.resource)} ({(cluster.elastic_cap_fraction * 100).normalize():f}% of "
                    f"{format_quantity(capacity, item.resource)} {_capacity_label(item.flavor, item.resource)} on {cluster.name})"
                ),
            )
    return check


FAIR_SHARE_WEIGHT_MAX = 1000


def fair_share_weight_check(check: QuotaCheck, weight: Any) -> None:
    """Kueue's fairSharing.weight as the portal takes it: a whole number from 1 to 1000 (0
    would give the tenant an infinite share of nothing; larger ratios help nobody)."""
    if weight is None:
        return
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1000:
        check.error(
            "fair_share_weight",
            f"fair-share weight must be a whole number from 1 to {FAIR_SHARE_WEIGHT_MAX}; "
            f"got {weight!r}",
        )


def _shown(amount: Decimal, resource: str) -> str:
    """An amount as people read it: "1 GPU", "12 GPUs", "16 cores", "64 GiB"."""
    if resource == GPU_RESOURCE:
        return f"{to_display(amount, resource)} GPU{'' if amount == 1 else 's'}"
    return to_display(amount, resource)


_RESOURCE_WORDS = {GPU_RESOURCE: "GPU", CPU_RESOURCE: "CPU", MEMORY_RESOURCE: "memory"}


def _largest_limits(items: Iterable[QuotaItem]) -> dict[str, tuple[Decimal, str]]:
    """Per resource, the largest limit on one flavor and that flavor's name: a pod runs on
    one flavor's nodes, so no pod can use more than this."""
    largest: dict[str, tuple[Decimal, str]] = {}
    for item in items:
        if item.resource not in largest or item.limit > largest[item.resource][0]:
            largest[item.resource] = (item.limit, item.flavor.name)
    return largest


def pod_caps_check(
    *,
    tenant: str,
    items: Iterable[QuotaItem],
    caps: Mapping[str, Any],
    requested: Iterable[str] = (),
) -> QuotaCheck:
    """The per-pod caps (R16) of ``caps`` (``max_gpus_per_pod``, ``max_cpu_per_pod`` in cores,
    ``max_memory_per_pod`` in bytes; None: derived) against ``items``, the whole quota set
    ``tenant`` would have. A cap must be above zero, and a cap above the largest limit on one
    flavor is refused naming the field, the cap and the limit: no pod could reach it, and the
    cap would promise what the quota never gives. Caps in ``requested`` (what the change
    sets) are errors; a cap already in force that a lower limit leaves above it is a warning,
    so lowering a limit is never blocked by a cap set earlier."""
    check = QuotaCheck()
    requested = set(requested)
    largest = _largest_limits(items)
    for name, resource in POD_CAP_FIELDS.items():
        cap = caps.get(name)
        if cap is None:
            continue
        shown = _shown(Decimal(cap), resource)
        if Decimal(cap) <= 0:
            check.error(name, f"a per-pod cap must be above zero; got {shown}")
            continue
        if resource not in largest:
            continue
        limit, flavor = largest[resource]
        if Decimal(cap) <= limit:
            continue
        message = (
            f"a cap of {shown} per pod is above {tenant}'s largest {_RESOURCE_WORDS[resource]} "
            f"limit of {_shown(limit, resource)} (on {flavor}): no pod could get that much"
        )
        if name in requested:
            check.error(name, f"{message}; ask for at most {_shown(limit, resource)}")
        else:
            check.warnings.append(f"{message}; the cap in force should come down with it")
    return check


def inference_split_check(
    *,
    tenant: str,
    items: Iterable[QuotaItem],
    inference_gpus: int | None,
    production_allowed: bool,
) -> QuotaCheck:
    """R17: the whole GPUs (``nvidia.com/gpu``, summed over flavors as the namespace quota
    sums them) set apart for inference must fit the GPU limit; inference runs at the
    production priority, so a split needs the production grant (R15). Above the guaranteed
    GPUs is allowed with a warning: that part of serving rests on borrowed capacity."""
    check = QuotaCheck()
    if inference_gpus is None:
        return check
    if (
        isinstance(inference_gpus, bool)
        or not isinstance(inference_gpus, int)
        or inference_gpus < 0
    ):
        check.error(
            "inference_gpus", f"must be a whole number of GPUs, 0 or more; got {inference_gpus!r}"
        )
        return check
    gpus = [item for item in items if item.resource == GPU_RESOURCE]
    limit = sum((item.limit for item in gpus), Decimal(0))
    guaranteed = sum((item.guaranteed for item in gpus), Decimal(0))
    asked = Decimal(inference_gpus)
    if asked > limit:
        check.error(
            "inference_gpus",
            f"{_shown(asked, GPU_RESOURCE)} for inference is above {tenant}'s whole-GPU "
            f"limit of {_shown(limit, GPU_RESOURCE)}: the split must fit the limit",
        )
        return check
    if asked > 0 and not production_allowed:
        check.error(
            "inference_gpus",
            f"inference runs at the production priority, which {tenant} may not use; ask for "
            "the production priority in the same request (a platform admin decides)",
        )
    elif asked > guaranteed:
        check.warnings.append(
            f"{_shown(asked, GPU_RESOURCE)} for inference is more than the "
            f"{_shown(guaranteed, GPU_RESOURCE)} guaranteed: the rest is borrowed, and "
            "serving on it can be preempted when the lenders need their GPUs back"
        )
    return check


def _lines_of(quotas: Iterable[Quota]) -> dict[tuple[int, str], tuple[Decimal, Decimal]]:
    """Per (flavor id, resource), the summed (guaranteed, limit) of the quota lines."""
    sums: dict[tuple[int, str], tuple[Decimal, Decimal]] = {}
    for q in quotas:
        g, lim = sums.get((q.flavor_id, q.resource), (Decimal(0), Decimal(0)))
        sums[(q.flavor_id, q.resource)] = (g + q.guaranteed, lim + q.limit)
    return sums


def department_check(
    *, tenant: Tenant, cluster: Cluster, items: Sequence[QuotaItem], department: bool
) -> QuotaCheck:
    """The department rules (R14) for ``items``, the whole quota set ``tenant`` would have on
    ``cluster``; errors name ``items[i].limit``.

    * A team's limits and its sibling teams' add up to at most its department's cap (the
      department's limit on the same flavor and resource), when the department has one.
    * A department's cap holds at least its own pool (guaranteed) plus its teams' guarantees:
      what the cluster promises below it must fit under it.

    ``department``: whether other tenants name ``tenant`` as parent (the caller knows)."""
    check = QuotaCheck()
    parent = tenant.parent
    if parent is not None:
        caps = {
            (q.flavor_id, q.resource): q.limit
            for q in Quota.objects.filter(quota_set__tenant=parent, quota_set__cluster=cluster)
        }
        siblings = _lines_of(
            Quota.objects.filter(
                quota_set__tenant__parent=parent, quota_set__cluster=cluster
            ).exclude(quota_set__tenant=tenant)
        )
        for index, item in enumerate(items):
            key = (item.flavor.pk, item.resource)
            cap = caps.get(key)
            if cap is None:
                continue
            total = siblings.get(key, (Decimal(0), Decimal(0)))[1] + item.limit
            if total > cap:
                check.error(
                    f"items[{index}].limit",
                    f"{item.resource} on {item.flavor.name}: the department {parent.slug} caps "
                    f"its teams at {to_display(cap, item.resource)}; with this limit of "
                    f"{to_display(item.limit, item.resource)} their limits would add up to "
                    f"{to_display(total, item.resource)}",
                )
    if not department:
        return check
    children = _lines_of(
        Quota.objects.filter(quota_set__tenant__parent=tenant, quota_set__cluster=cluster)
    )
    for index, item in enumerate(items):
        below = children.get((item.flavor.pk, item.resource), (Decimal(0), Decimal(0)))[0]
        if below and item.limit < below + item.guaranteed:
            check.error(
                f"items[{index}].limit",
                f"{item.resource} on {item.flavor.name}: the department cap of "
                f"{to_display(item.limit, item.resource)} is below what it must hold: its teams' "
                f"guarantees of {to_display(below, item.resource)} plus its own pool of "
                f"{to_display(item.guaranteed, item.resource)} make "
                f"{to_display(below + item.guaranteed, item.resource)}",
            )
    return check


def elastic_cap(*, capacity: Decimal, fraction: Decimal, resource: str) -> Decimal:
    """The most a single tenant's limit may be (R19); whole units for GPUs and MIG slices."""
    cap = capacity * fraction
    return cap.to_integral_value(rounding=ROUND_FLOOR) if is_gpu_resource(resource) else cap


def guarantees_fit(*, capacity: Decimal, guaranteed: Decimal, overcommit_allowed: bool) -> bool:
    """The capacity rule: all tenants' guarantees (``guaranteed``) on a flavor's resource fit
    its capacity, unless the cluster allows overcommitting guarantees."""
    return overcommit_allowed or guaranteed <= capacity


def limit_fits_cap(*, limit: Decimal, cap: Decimal) -> bool:
    """The elastic-cap rule (R19): one tenant's limit is at most the cap (``elastic_cap``)."""
    return limit <= cap


class ProposedLine(Protocol):
    """A quota line a change proposes (``approvals.services.DiffLine`` is one)."""

    @property
    def flavor(self) -> str: ...  # the flavor's name

    @property
    def resource(self) -> str: ...

    @property
    def guaranteed_before(self) -> Decimal: ...

    @property
    def guaranteed_after(self) -> Decimal: ...

    @property
    def limit_after(self) -> Decimal: ...


@dataclass(frozen=True)
class CapacityLine:
    """A flavor x resource of a cluster against one tenant's proposed line: its capacity, all
    tenants' guarantees, the change of this tenant's guarantee and the limit asked for, and
    the verdict of the rules ``quota_items_check`` applies (``fits``: the capacity rule,
    ``over_cap``: the elastic cap)."""

    allocation: FlavorAllocation
    elastic_cap: Decimal
    overcommit_allowed: bool
    change: Decimal = Decimal(0)  # this tenant's guarantee, after minus before
    limit_after: Decimal | None = None  # None: the change leaves this line alone

    @property
    def resource(self) -> str:
        return self.allocation.resource

    @property
    def free_after(self) -> Decimal:
        return self.allocation.free - self.change

    @property
    def fits(self) -> bool:
        return guarantees_fit(
            capacity=self.allocation.capacity,
            guaranteed=self.allocation.guaranteed + self.change,
            overcommit_allowed=self.overcommit_allowed,
        )

    @property
    def over_cap(self) -> bool:
        return self.limit_after is not None and not limit_fits_cap(
            limit=self.limit_after, cap=self.elastic_cap
        )


def capacity_lines_check(
    *,
    cluster: Cluster,
    allocations: Iterable[FlavorAllocation],
    lines: Iterable[ProposedLine],
    department: bool = False,
) -> list[CapacityLine]:
    """Per line of the cluster (``allocations``, from ``quotas.selectors.cluster_allocations``),
    what the proposed ``lines`` (matched by flavor name and resource) do to it and whether
    they keep the capacity and elastic-cap rules: the same answers as ``quota_items_check``,
    line by line, for pages that show them next to each line (a ``department``'s cap is held
    to the capacity, not the elastic cap)."""
    changes = {(line.flavor, line.resource): line for line in lines}
    out = []
    for allocation in allocations:
        line = changes.get((allocation.flavor.name, allocation.resource))
        out.append(
            CapacityLine(
                allocation,
                allocation.capacity
                if department
                else elastic_cap(
                    capacity=allocation.capacity,
                    fraction=cluster.elastic_cap_fraction,
                    resource=allocation.resource,
                ),
                cluster.allow_guarantee_overcommit,
                line.guaranteed_after - line.guaranteed_before if line else Decimal(0),
                line.limit_after if line else None,
            )
        )
    return out


def _snapshot(quota_set: QuotaSet) -> dict[str, Any]:
    return {
        "generation": quota_set.generation,
        "max_running_jobs": quota_set.max_running_jobs,
        "max_queued_jobs": quota_set.max_queued_jobs,
        "max_pods": quota_set.max_pods,
        "storage_bytes": None if quota_set.storage_bytes is None else str(quota_set.storage_bytes),
        "max_pvcs": quota_set.max_pvcs,
        "fair_share_weight": quota_set.fair_share_weight,
        "max_gpus_per_pod": quota_set.max_gpus_per_pod,
        "max_cpu_per_pod": None
        if quota_set.max_cpu_per_pod is None
        else format_quantity(quota_set.max_cpu_per_pod, CPU_RESOURCE),
        "max_memory_per_pod": None
        if quota_set.max_memory_per_pod is None
        else format_quantity(quota_set.max_memory_per_pod, MEMORY_RESOURCE),
        "inference_gpus": quota_set.inference_gpus,
        "items": [
            {
                "flavor": q.flavor.name,
                "resource": q.resource,
                "guaranteed": format_quantity(q.guaranteed, q.resource),
                "limit": format_quantity(q.limit, q.resource),
                "lending_limit": None
                if q.lending_limit is None
                else format_quantity(q.lending_limit, q.resource),
            }
            for q in quota_set.quotas.select_related("flavor").order_by("flavor__name", "resource")
        ],
    }


@transaction.atomic
def quota_set_write(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    scheduling: SchedulingQuotas,
    actor: User | None,
    tier: TierTemplate | None = None,
    reason: str = "",
) -> QuotaSet:
    """Replace a tenant's quota set on a cluster (creating it if needed) with ``items``.

    Items not listed are removed. The generation increases by one on every write, so the
    cluster side can tell which version it has applied. Callers that hold an approval pass it
    through ``reason``; only approved changes may reach this function (approvals issue).
    An archived tenant gets no new quotas (409)."""
    tenant_ensure_not_archived(tenant=tenant, doing="gets no new quotas")
    quota_set, created = QuotaSet.objects.select_for_update().get_or_create(
        tenant=tenant, cluster=cluster
    )
    # Lock the cluster's quota sets of the flavors involved, so two concurrent writes cannot
    # both pass the capacity check (PostgreSQL; SQLite serialises writers anyway).
    list(Cluster.objects.select_for_update().filter(pk=cluster.pk))
    check = quota_items_check(
        cluster=cluster, items=items, quota_set=quota_set, department=tenant.children.exists()
    )
    check.raise_if_invalid()
    before = None if created else _snapshot(quota_set)

    quota_set.quotas.all().delete()
    Quota.objects.bulk_create(
        Quota(
            quota_set=quota_set,
            flavor=item.flavor,
            resource=item.resource,
            guaranteed=item.guaranteed,
            limit=item.limit,
            lending_limit=item.lending_limit,
        )
        for item in items
    )
    quota_set.max_running_jobs = scheduling.max_running_jobs
    quota_set.max_queued_jobs = scheduling.max_queued_jobs
    quota_set.max_pods = scheduling.max_pods
    quota_set.storage_bytes = scheduling.storage_bytes
    quota_set.max_pvcs = scheduling.max_pvcs
    quota_set.fair_share_weight = scheduling.fair_share_weight
    quota_set.max_gpus_per_pod = scheduling.max_gpus_per_pod
    quota_set.max_cpu_per_pod = scheduling.max_cpu_per_pod
    quota_set.max_memory_per_pod = scheduling.max_memory_per_pod
    quota_set.inference_gpus = scheduling.inference_gpus
    if tier is not None:
        quota_set.tier = tier
    if not created:
        quota_set.generation += 1
    quota_set.save()
    after = _snapshot(quota_set)
    if reason:
        after["reason"] = reason
    audit_record(
        actor=actor,
        action="quota_set.written",
        object_id=f"{tenant.slug}@{cluster.name}",
        obj=quota_set,
        tenant=tenant,
        before=before,
        after=after,
    )
    return quota_set


def tier_items(*, tier: TierTemplate, gpu_flavor: ResourceFlavor) -> list[QuotaItem]:
    """The quota items a tier gives on a GPU flavor: GPUs, and CPU / memory where the flavor
    covers them."""
    covered = set(gpu_flavor.resources.values_list("resource", flat=True))
    amounts = {
        GPU_RESOURCE: (Decimal(tier.gpus_guaranteed), Decimal(tier.gpus_limit)),
        CPU_RESOURCE: (tier.cpu_guaranteed, tier.cpu_limit),
        MEMORY_RESOURCE: (tier.memory_guaranteed, tier.memory_limit),
    }
    return [
        QuotaItem(gpu_flavor, resource, guaranteed, limit)
        for resource, (guaranteed, limit) in amounts.items()
        if resource in covered
    ]


def tier_scheduling(tier: TierTemplate) -> SchedulingQuotas:
    return SchedulingQuotas(
        max_running_jobs=tier.max_running_jobs,
        max_queued_jobs=tier.max_queued_jobs,
        max_pods=tier.max_pods,
        storage_bytes=tier.storage_bytes,
        max_pvcs=tier.max_pvcs,
        max_gpus_per_pod=tier.max_gpus_per_pod,
        max_cpu_per_pod=tier.max_cpu_per_pod,
        max_memory_per_pod=tier.max_memory_per_pod,
        inference_gpus=tier.inference_gpus,
    )


def default_gpu_flavor(*, cluster: Cluster) -> ResourceFlavor:
    flavor = cluster.flavors.filter(kind=FlavorKind.GPU).order_by("name").first()
    if flavor is None:
        raise ValidationFailed.for_field(
            "cluster", f"cluster {cluster.name!r} has no whole-GPU flavor to apply a tier to"
        )
    return flavor


def quota_set_create_from_tier(
    *,
    tenant: Tenant,
    cluster: Cluster,
    tier: TierTemplate,
    actor: User | None,
    gpu_flavor: ResourceFlavor | None = None,
) -> QuotaSet:
    gpu_flavor = gpu_flavor or default_gpu_flavor(cluster=cluster)
    if gpu_flavor.cluster_id != cluster.pk:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} belongs to cluster {gpu_flavor.cluster.name!r}, "
            f"not {cluster.name!r}",
        )
    if gpu_flavor.kind != FlavorKind.GPU:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} is a {gpu_flavor.kind} flavor, not whole GPUs",
        )
    try:
        return quota_set_write(
            tenant=tenant,
            cluster=cluster,
            items=tier_items(tier=tier, gpu_flavor=gpu_flavor),
            scheduling=tier_scheduling(tier),
            actor=actor,
            tier=tier,
            reason=f"tier {tier.name}",
        )
    except ValidationFailed as exc:
        # The caller chose a tier, not items: name the tier and keep every reason.
        reasons = [message for messages in exc.fields.values() for message in messages]
        raise ValidationFailed(
            f"tier {tier.name!r} does not fit on {cluster.name}: {exc.message}",
            fields={"tier": reasons},
        ) from exc


TIER_AMOUNT_FIELDS = {
    "gpus_guaranteed": GPU_RESOURCE,
    "gpus_limit": GPU_RESOURCE,
    "cpu_guaranteed": CPU_RESOURCE,
    "cpu_limit": CPU_RESOURCE,
    "memory_guaranteed": MEMORY_RESOURCE,
    "memory_limit": MEMORY_RESOURCE,
    "storage_bytes": "storage",
}
TIER_COUNT_FIELDS = ("max_running_jobs", "max_queued_jobs", "max_pods", "max_pvcs")
TIER_TEXT_FIELDS = ("display_name", "description", "sort_order")
# Optional: per-pod caps (R16) and the inference split (R17); empty: derived / no split.
TIER_OPTIONAL_FIELDS = {
    "max_gpus_per_pod": GPU_RESOURCE,
    "max_cpu_per_pod": CPU_RESOURCE,
    "max_memory_per_pod": MEMORY_RESOURCE,
    "inference_gpus": GPU_RESOURCE,
}


def _tier_snapshot(tier: TierTemplate) -> dict[str, Any]:
    snapshot: dict[str, Any] = {"name": tier.name, "display_name": tier.display_name}
    for name, resource in TIER_AMOUNT_FIELDS.items():
        snapshot[name] = format_quantity(getattr(tier, name), resource)
    snapshot.update({name: getattr(tier, name) for name in TIER_COUNT_FIELDS})
    for name, resource in TIER_OPTIONAL_FIELDS.items():
        value = getattr(tier, name)
        snapshot[name] = None if value is None else format_quantity(Decimal(value), resource)
    return snapshot


def tier_template_prepare(*, tier: TierTemplate | None = None, **fields: Any) -> TierTemplate:
    """The tier with ``fields`` applied and checked, unsaved; ``tier`` None makes a new one.
    Amounts may be Kubernetes quantities ("64Gi") or numbers. The rules: guaranteed <= limit
    for GPUs, CPU and memory, nothing negative, GPUs whole, a DNS-1123 name that is free.
    Raises ValidationFailed naming every field that breaks one."""
    unknown = set(fields) - {
        "name", *TIER_AMOUNT_FIELDS, *TIER_COUNT_FIELDS, *TIER_TEXT_FIELDS, *TIER_OPTIONAL_FIELDS
    }  # fmt: skip
    if unknown:
        raise ValidationFailed.for_field(sorted(unknown)[0], "not a tier template field")
    if tier is None:
        name = fields.get("name", "")
        if TierTemplate.objects.filter(name=name).exists():
            raise ValidationFailed.for_field("name", f"A tier template {name!r} already exists.")
        tier = TierTemplate(name=name)
    elif "name" in fields and fields["name"] != tier.name:
        raise ValidationFailed.for_field("name", "A tier template's name cannot change.")
    else:
        tier = TierTemplate.objects.get(pk=tier.pk)  # never half-apply to the caller's object
    for name, value in fields.items():
        setattr(tier, name, value)
    check = QuotaCheck()
    for name, resource in TIER_AMOUNT_FIELDS.items():
        value = getattr(tier, name, None)
        if value is None or value == "":
            check.error(name, "This field is required.")
            continue
        try:
            setattr(tier, name, parse_resource_amount(resource, value))
        except QuantityError as exc:
            check.error(name, str(exc))
    for name in TIER_COUNT_FIELDS:
        value = getattr(tier, name, None)
        if value is None or not isinstance(value, int) or value < 0:
            check.error(name, f"must be a whole number >= 0, got {value!r}")
    for what in ("gpus", "cpu", "memory"):
        names = (f"{what}_guaranteed", f"{what}_limit")
        if any(name in check.errors for name in names):
            continue
        guaranteed, limit = (getattr(tier, name) for name in names)
        if guaranteed > limit:
            resource = TIER_AMOUNT_FIELDS[names[1]]
            check.error(
                names[0],
                f"guaranteed {format_quantity(guaranteed, resource)} is above the limit "
                f"{format_quantity(limit, resource)}",
            )
    _tier_optional_check(check, tier)
    check.raise_if_invalid()
    try:
        tier.full_clean(
            exclude=[*TIER_AMOUNT_FIELDS, *TIER_COUNT_FIELDS, *TIER_OPTIONAL_FIELDS],
            validate_unique=False,
        )
    except DjangoValidationError as exc:
        errors = {name: [str(m) for m in messages] for name, messages in exc.message_dict.items()}
        raise ValidationFailed(next(iter(errors.values()))[0], fields=errors) from exc
    return tier


def _tier_optional_check(check: QuotaCheck, tier: TierTemplate) -> None:
    """The tier's per-pod caps and inference split, parsed in place: each empty or above zero
    (the split may be 0), whole GPUs, and none above the tier's own limit."""
    limits = {
        GPU_RESOURCE: getattr(tier, "gpus_limit", None),
        CPU_RESOURCE: getattr(tier, "cpu_limit", None),
        MEMORY_RESOURCE: getattr(tier, "memory_limit", None),
    }
    for name, resource in TIER_OPTIONAL_FIELDS.items():
        value = getattr(tier, name, None)
        if value is None or value == "":
            setattr(tier, name, None)
            continue
        try:
            amount = parse_resource_amount(resource, value)
        except QuantityError as exc:
            check.error(name, str(exc))
            continue
        if amount <= 0 and name != "inference_gpus":
            check.error(name, f"a per-pod cap must be above zero; got {_shown(amount, resource)}")
            continue
        limit = limits[resource]
        if isinstance(limit, Decimal | int) and amount > limit:
            what = "for inference" if name == "inference_gpus" else "per pod"
            check.error(
                name,
                f"{_shown(amount, resource)} {what} is above the tier's limit of "
                f"{_shown(Decimal(limit), resource)}",
            )
        setattr(tier, name, int(amount) if resource == GPU_RESOURCE else amount)


@transaction.atomic
def tier_template_save(
    *, actor: User | None, tier: TierTemplate | None = None, **fields: Any
) -> TierTemplate:
    """Create a tier template (``tier`` None) or change the given fields of one, audited.
    Quota sets already made from the tier keep their numbers: a tier is a template."""
    before = None if tier is None else _tier_snapshot(TierTemplate.objects.get(pk=tier.pk))
    prepared = tier_template_prepare(tier=tier, **fields)
    prepared.save()
    audit_record(
        actor=actor,
        action="tier_template.created" if tier is None else "tier_template.updated",
        obj=prepared,
        before=before,
        after=_tier_snapshot(prepared),
    )
    return prepared


def outbox_record(*, quota_set: QuotaSet) -> SyncOutbox:
    """Write "sync this tenant on this cluster up to this generation" in the caller's
    transaction and enqueue its delivery after commit. If the broker is down then, the row
    stays and ``outbox_sweep`` sends it later: an approved change is never lost."""
    row, _ = SyncOutbox.objects.get_or_create(
        tenant=quota_set.tenant, cluster=quota_set.cluster, generation=quota_set.generation
    )
    transaction.on_commit(lambda: enqueue_outbox(row.pk))
    return row


def _repush(quota_set: QuotaSet) -> None:
    """Something the compiler reads besides the quota lines changed: the next generation and
    an outbox row, so the change is pushed like an approved one (and the reconcile does not
    mistake it for a hand edit). In the caller's transaction, ``quota_set`` locked."""
    quota_set.generation += 1
    quota_set.save(update_fields=["generation", "updated_at"])
    outbox_record(quota_set=quota_set)


@transaction.atomic
def quota_sets_resync(
    *, tenant: Tenant, actor: User | None, exclude: Cluster | None = None
) -> list[QuotaSet]:
    """The tenant changed in a way its clusters see (state, namespaces, members, the
    production grant): each of its quota sets is pushed again at the next generation
    (``exclude``: a cluster the caller pushes already). Nothing is pushed for an archived
    tenant; unarchiving it calls this again, so what changed meanwhile still arrives."""
    if Tenant.objects.filter(pk=tenant.pk, archived_at__isnull=False).exists():
        return []
    query = QuotaSet.objects.select_for_update().filter(tenant=tenant)
    if exclude is not None:
        query = query.exclude(cluster=exclude)
    quota_sets = list(query)
    for quota_set in quota_sets:
        _repush(quota_set)
    return quota_sets


@transaction.atomic
def cluster_enforcement_set(*, cluster: Cluster, mode: str, actor: User | None) -> Cluster:
    """Choose how ``cluster`` keeps tenants within their limits (``quotas.kube.enforcement``)
    and push every tenant's objects again at the next generation. Refused, with the field
    and why, where the cluster cannot run the mode; bad input changes nothing."""
    if mode not in Enforcement.values:
        raise ValidationFailed.for_field(
            "enforcement", f"{mode!r} is not one of {', '.join(Enforcement.values)}."
        )
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if mode == Enforcement.KUEUE:
        if not cluster.has_kueue:
            raise ValidationFailed.for_field(
                "enforcement",
                f"Cluster {cluster.name} runs no Kueue: only a namespace split can bound its "
                "tenants.",
            )
        if (
            enforcement.kubernetes_minor(cluster.kubernetes_version)
            < enforcement.POLICY_MIN_VERSION
        ):
            raise ValidationFailed.for_field(
                "enforcement",
                f"Cluster {cluster.name} runs Kubernetes {cluster.kubernetes_version}; the "
                "admission policy this mode needs is there from 1.30.",
            )
    if cluster.enforcement == mode:
        return cluster
    before = {"enforcement": cluster.enforcement}
    cluster.enforcement = mode
    cluster.save(update_fields=["enforcement"])
    audit_record(
        actor=actor,
        action="cluster.enforcement_set",
        obj=cluster,
        before=before,
        after={"enforcement": mode},
    )
    for quota_set in QuotaSet.objects.select_for_update().filter(cluster=cluster):
        _repush(quota_set)
    return cluster


@transaction.atomic
def quota_set_hold(
    *, tenant_id: int, cluster_id: int, held: bool, detail: Mapping[str, Any] | None = None
) -> QuotaSet | None:
    """New work of a tenant on a cluster is held (``held``: its ClusterQueue's ``stopPolicy:
    Hold``, R11) or allowed again. Whether a tenant is held is what the ``BLOCKED_TENANTS``
    hooks of ``quotas.loader`` answer when its objects are compiled (the alerts app's open
    100% alerts); this pushes the change at the next generation through the outbox and audits
    it (``tenant.new_work_held`` / ``tenant.new_work_allowed``, with ``detail``). None when
    the tenant has no quotas on the cluster."""
    quota_set = (
        QuotaSet.objects.select_for_update()
        .select_related("tenant", "cluster")
        .filter(tenant_id=tenant_id, cluster_id=cluster_id)
        .first()
    )
    if quota_set is None:
        return None
    _repush(quota_set)
    cluster, tenant = quota_set.cluster, quota_set.tenant
    hold, lifted = {"stopPolicy": "Hold"}, {"stopPolicy": "None"}
    audit_record(
        actor=None,
        action="tenant.new_work_held" if held else "tenant.new_work_allowed",
        obj=cluster,
        tenant=tenant,
        object_id=f"{cluster.name}: {tenant.slug}",
        before=None if held else hold,
        after={**(hold if held else lifted), **(detail or {})},
    )
    return quota_set


def enqueue_outbox(outbox_id: int) -> None:
    """Send the row to a worker (``quotas.tasks.deliver_outbox``, by name, so that this module
    does not import the tasks that import it). A broker that is down is logged, not raised:
    the row stays and the sweep sends it later."""
    try:
        enqueue(DELIVER_OUTBOX_TASK, [outbox_id], queue=settings.SYNC_QUEUE or None)
    except Exception:
        logger.warning(
            "outbox %s not enqueued now; the sweep will send it", outbox_id, exc_info=True
        )


DELIVER_OUTBOX_TASK = "quotas.tasks.deliver_outbox"
OUTBOX_RESEND_AFTER = timedelta(minutes=10)
OUTBOX_FIRST_SEND_GRACE = timedelta(seconds=30)


def outbox_reopen(*, tenant: Tenant, cluster: Cluster) -> SyncOutbox | None:
    """Open the newest outbox row of ``tenant`` on ``cluster`` again and send it after commit
    (an admin's retry of a push that failed for good, once the cause is fixed). None when
    there is none."""
    row = SyncOutbox.objects.filter(tenant=tenant, cluster=cluster).order_by("-generation").first()
    if row is None:
        return None
    SyncOutbox.objects.filter(pk=row.pk).update(completed_at=None, last_error="")
    transaction.on_commit(lambda: enqueue_outbox(row.pk))
    return row


def outbox_sweep(*, now: datetime | None = None) -> list[int]:
    """Re-send open rows no worker took (never taken after a short grace, or taken long ago).
    Safe to run twice and from several beats: a row sent twice is taken twice, harmlessly."""
    now = now or timezone.now()
    due = SyncOutbox.objects.filter(completed_at__isnull=True).filter(
        Q(dispatched_at__isnull=True, created_at__lt=now - OUTBOX_FIRST_SEND_GRACE)
        | Q(dispatched_at__lt=now - OUTBOX_RESEND_AFTER)
    )
    ids = list(due.values_list("pk", flat=True)[:1000])
    for outbox_id in ids:
        enqueue_outbox(outbox_id)
    return ids


# --- namespaces a cluster keeps for itself ----------------------------------------------------


def cluster_namespace_rules(cluster: Cluster) -> list[tuple[str, str]]:
    """(pattern, why) for the namespaces ``cluster`` keeps beside the built-in system ones
    (``tenants.namespaces``): the namespace its Kueue configuration names, its GPU Operator's
    namespace and its ``reserved_namespaces`` (a trailing ``*`` matches a prefix)."""
    rules: list[tuple[str, str]] = []
    kueue_namespace = (cluster.kueue_config or {}).get("namespace")
    if kueue_namespace:
        rules.append((str(kueue_namespace), f"Kueue runs there on {cluster.name}"))
    if cluster.mig_operator_namespace:
        rules.append(
            (cluster.mig_operator_namespace, f"the GPU Operator runs there on {cluster.name}")
        )
    reserved = cluster.reserved_namespaces if isinstance(cluster.reserved_namespaces, list) else []
    for pattern in reserved:
        if isinstance(pattern, str) and pattern.strip():
            rules.append(
                (pattern.strip(), f"cluster {cluster.name} reserves it ({pattern.strip()})")
            )
    return rules


def namespace_reserved_on_clusters(name: str) -> str | None:
    """Why no tenant may have ``name`` on some cluster, in words; None when every cluster lets
    it be a tenant's. (``tenants.services.NAMESPACE_RESERVED``, registered in
    ``QuotasConfig.ready``.)"""
    fields = ("name", "kueue_config", "mig_operator_namespace", "reserved_namespaces")
    for cluster in Cluster.objects.only(*fields).order_by("name"):
        reason = reserved_reason(name, portal_namespace="", extra=cluster_namespace_rules(cluster))
        if reason:
            return reason
    return None
