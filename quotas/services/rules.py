"""The rules a quota line keeps: the items a change asks for (``QuotaItem``,
``SchedulingQuotas``), what validation found (``QuotaCheck``) and the checks themselves.

``quota_items_check`` validates every item against the cluster (capacity, elastic cap, MIG
instances, time-sliced shares); ``capacity_lines_check`` gives the same verdicts line by line
for pages; ``pod_caps_check``, ``inference_split_check``, ``department_check`` and
``fair_share_weight_check`` judge the rest of a change. Reads only: nothing here writes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from typing import Any, Protocol

from core.errors import ValidationFailed
from quotas import timeslicing
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MEMORY_RESOURCE,
    FlavorKind,
    is_gpu_resource,
    mig_resource,
)
from quotas.models import (
    Cluster,
    Quota,
    QuotaSet,
    ResourceFlavor,
)
from quotas.quantity import QuantityError, format_quantity, parse_resource_amount, to_display
from quotas.selectors import (
    Capacity,
    FlavorAllocation,
    FleetCapacity,
    flavor_capacities,
    guarantees_by_flavor,
)
from quotas.services.vgpu_amounts import vgpu_amount_parse, vgpu_lines_check
from quotas.vgpu import MIB
from tenants.models import Tenant


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
    # Egress exceptions (``quotas.kube.egress``, as JSON); None leaves those in force.
    egress_rules: list[dict[str, Any]] | None = None


# The error key of line ``index``'s ``attribute`` ("items[3].limit"); a caller that checks a
# list other than the one it was given (a request's lines merged into the quota set in force)
# passes its own, so each error lands on the input it is about.
LineKey = Callable[[int, str], str]


def item_key(index: int, attribute: str) -> str:
    return f"items[{index}].{attribute}"


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
        if flavor.kind == FlavorKind.VGPU or resource in (GPUMEM_RESOURCE, GPUCORES_RESOURCE):
            # GPU memory in GiB or a quantity, whole MiB; compute in percent of a GPU
            amounts[name] = vgpu_amount_parse(resource, raw, field=f"{field_prefix}{name}")
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


def _shown(amount: Decimal, resource: str) -> str:
    """An amount in a rule's message: as Kubernetes writes it ("4Gi", "16"), GPU memory and
    compute of vGPU flavors as people read them ("4.5 GiB", "30% of a GPU")."""
    if resource in (GPUMEM_RESOURCE, GPUCORES_RESOURCE):
        return to_display(amount, resource)
    return format_quantity(amount, resource)


def quota_items_check(
    *,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    quota_set: QuotaSet | None = None,
    department: bool = False,
    capacities: Mapping[tuple[int, str], Capacity] | None = None,
    line_key: LineKey = item_key,
    guaranteed_elsewhere: Mapping[tuple[int, str], Decimal] | None = None,
) -> QuotaCheck:
    """Business rules for a tenant's items on ``cluster``. Errors name the item, the rule and
    the numbers. Capacity sums exclude ``quota_set`` (the set being replaced); a caller that
    read them already (``quotas.selectors.flavor_capacities_and_guarantees``, under the
    cluster's lock) passes them as ``guaranteed_elsewhere``. A MIG flavor's
    capacity is what the fleet has (``quotas.selectors.flavor_capacities``): asking for more
    instances than exist or are planned is refused naming the profile and the counts. A
    ``department``'s limit is a cap over its teams together (R14): it is held to the
    flavor's capacity, not to the elastic cap of a single tenant, which binds each team.
    ``line_key`` names the field of each error (``items[i].<attribute>`` by default)."""
    check = QuotaCheck()
    if capacities is None:  # a caller that read them already passes them
        capacities = flavor_capacities(cluster=cluster)
    if guaranteed_elsewhere is None:
        guaranteed_elsewhere = guarantees_by_flavor(cluster=cluster, exclude_quota_set=quota_set)
    seen: set[tuple[int, str]] = set()
    vgpu_problems = vgpu_lines_check(items)
    for index, item in enumerate(items):
        what = f"{item.resource} on {item.flavor.name}"
        if index in vgpu_problems:  # GPU memory in whole MiB, within what its vGPUs reach
            for attribute, message in vgpu_problems[index].items():
                check.error(line_key(index, attribute), message)
            continue
        if item.flavor.cluster_id != cluster.pk:
            check.error(
                line_key(index, "flavor"),
                f"flavor {item.flavor.name!r} belongs to cluster "
                f"{item.flavor.cluster.name!r}, not {cluster.name!r}",
            )
            continue
        key = (item.flavor.pk, item.resource)
        if key in seen:
            check.error(line_key(index, "resource"), f"{what} is listed twice")
            continue
        seen.add(key)
        if key not in capacities:
            check.error(
                line_key(index, "resource"),
                f"flavor {item.flavor.name!r} does not cover {item.resource!r}",
            )
            continue
        if item.guaranteed > item.limit:
            check.error(
                line_key(index, "guaranteed"),
                f"{what}: guaranteed {_shown(item.guaranteed, item.resource)} "
                f"is above the limit {_shown(item.limit, item.resource)}",
            )
        if item.lending_limit is not None and item.lending_limit > item.guaranteed:
            check.error(
                line_key(index, "lending_limit"),
                f"{what}: lending limit "
                f"{_shown(item.lending_limit, item.resource)} is above guaranteed "
                f"{_shown(item.guaranteed, item.resource)}",
            )
        capacity = capacities[key].amount
        fleet = capacities[key].fleet
        taken = guaranteed_elsewhere.get(key) or Decimal(0)
        if fleet is not None and item.limit > capacity:
            check.error(
                line_key(index, "limit"),
                mig_shortfall(flavor=item.flavor, cluster=cluster, asked=item.limit, fleet=fleet),
            )
            continue
        if (
            fleet is not None
            and not cluster.allow_guarantee_overcommit
            and taken + item.guaranteed > capacity
        ):
            check.error(
                line_key(index, "guaranteed"),
                mig_shortfall(
                    flavor=item.flavor,
                    cluster=cluster,
                    asked=taken + item.guaranteed,
                    fleet=fleet,
                    detail=(
                        f"; guaranteed {_shown(item.guaranteed, item.resource)} here "
                        f"and {_shown(taken, item.resource)} to other tenants"
                    ),
                ),
            )
            continue
        shares_over = _shares_over_capacity(item, taken=taken, capacity=capacity)
        if shares_over:
            check.error(line_key(index, "guaranteed"), shares_over)
            continue
        if not guarantees_fit(
            capacity=capacity,
            guaranteed=taken + item.guaranteed,
            overcommit_allowed=cluster.allow_guarantee_overcommit,
        ):
            check.error(
                line_key(index, "guaranteed"),
                (
                    f"{what}: guaranteed {_shown(item.guaranteed, item.resource)} does not fit: "
                    f"other tenants hold {_shown(taken, item.resource)} of "
                    f"{_shown(capacity, item.resource)} {_capacity_label(item.flavor, item.resource)} on "
                    f"{cluster.name} and the cluster does not allow overcommitting guarantees"
                ),
            )
        cap = elastic_cap(
            capacity=capacity, fraction=cluster.elastic_cap_fraction, resource=item.resource
        )
        if department and item.limit > capacity:
            check.error(
                line_key(index, "limit"),
                f"{what}: the department cap of {_shown(item.limit, item.resource)} "
                f"is above the {_shown(capacity, item.resource)} "
                f"{_capacity_label(item.flavor, item.resource)} of {cluster.name}",
            )
        elif not department and not limit_fits_cap(limit=item.limit, cap=cap):
            check.error(
                line_key(index, "limit"),
                (
                    f"limit {_shown(item.limit, item.resource)} exceeds the elastic cap of "
                    f"{_shown(cap, item.resource)} ({(cluster.elastic_cap_fraction * 100).normalize():f}% of "
                    f"{_shown(capacity, item.resource)} {_capacity_label(item.flavor, item.resource)} on {cluster.name})"
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


def amount_text(amount: Decimal, resource: str) -> str:
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
        shown = amount_text(Decimal(cap), resource)
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
            f"limit of {amount_text(limit, resource)} (on {flavor}): no pod could get that much"
        )
        if name in requested:
            check.error(name, f"{message}; ask for at most {amount_text(limit, resource)}")
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
            f"{amount_text(asked, GPU_RESOURCE)} for inference is above {tenant}'s whole-GPU "
            f"limit of {amount_text(limit, GPU_RESOURCE)}: the split must fit the limit",
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
            f"{amount_text(asked, GPU_RESOURCE)} for inference is more than the "
            f"{amount_text(guaranteed, GPU_RESOURCE)} guaranteed: the rest is borrowed, and "
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
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    department: bool,
    line_key: LineKey = item_key,
) -> QuotaCheck:
    """The department rules (R14) for ``items``, the whole quota set ``tenant`` would have on
    ``cluster``; errors name ``items[i].limit``.

    * A team's limits and its sibling teams' add up to at most its department's cap (the
      department's limit on the same flavor and resource), when the department has one.
    * A department's cap holds at least its own pool (guaranteed) plus its teams' guarantees:
      what the cluster promises below it must fit under it.

    ``department``: whether other tenants name ``tenant`` as parent (the caller knows);
    ``line_key`` as for ``quota_items_check``."""
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
                    line_key(index, "limit"),
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
                line_key(index, "limit"),
                f"{item.resource} on {item.flavor.name}: the department cap of "
                f"{to_display(item.limit, item.resource)} is below what it must hold: its teams' "
                f"guarantees of {to_display(below, item.resource)} plus its own pool of "
                f"{to_display(item.guaranteed, item.resource)} make "
                f"{to_display(below + item.guaranteed, item.resource)}",
            )
    return check


def elastic_cap(*, capacity: Decimal, fraction: Decimal, resource: str) -> Decimal:
    """The most a single tenant's limit may be (R19); whole units for GPUs, MIG slices and
    percent of a GPU, whole MiB of GPU memory (HAMi counts MiB)."""
    cap = capacity * fraction
    if resource == GPUMEM_RESOURCE:
        return (cap / MIB).to_integral_value(rounding=ROUND_FLOOR) * MIB
    if is_gpu_resource(resource) or resource == GPUCORES_RESOURCE:
        return cap.to_integral_value(rounding=ROUND_FLOOR)
    return cap


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
