"""What a request would do and which rules it breaks: ``quota_request_check`` (the one
validation of a change, at submit, at approval and in the live check of the portal and the
API), the diff of each quota line before -> after (``DiffLine``) and how many approvals the
change needs, for a request being filed or one already stored. Reads only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from approvals.choices import OPEN_STATUSES
from approvals.models import QuotaChangeItem, QuotaChangeRequest
from approvals.services.policy import approval_policy
from approvals.services.rules import (
    QUOTA_SET_RULES,
    RULES,
    SCHEDULING_FIELDS,
    TENANT_FIELDS,
    Change,
    Key,
    judge,
    line_of,
    quotas_in_force,
)
from core.errors import (
    ApplicationError,
    ValidationFailed,
)
from quotas.choices import GPU_RESOURCE
from quotas.models import (
    Cluster,
    Grant,
    QuotaSet,
    ResourceFlavor,
)
from quotas.quantity import format_quantity
from quotas.selectors import (
    Capacity,
    Peak,
    flavor_capacities,
    gpu_units,
    grant_peaks,
    guarantees_by_flavor,
)
from quotas.services import (
    QuotaItem,
    SchedulingQuotas,
    elastic_cap,
)
from tenants.models import Tenant


@dataclass(frozen=True)
class DiffLine:
    """One quota line before -> after; ``weight`` converts its GPU resource to normalised
    GPU units (R5)."""

    flavor: str
    resource: str
    guaranteed_before: Decimal
    limit_before: Decimal
    guaranteed_after: Decimal
    limit_after: Decimal
    weight: Decimal = Decimal(1)
    # R25: shares per GPU when the line counts time-sliced shares of a GPU, else None.
    shares_per_gpu: int | None = None

    def _units(self, amount: Decimal) -> Decimal:
        return gpu_units(amount, resource=self.resource, weight=self.weight)

    @property
    def gpu_units_before(self) -> Decimal:
        return self._units(self.limit_before)

    @property
    def gpu_units_after(self) -> Decimal:
        return self._units(self.limit_after)

    @property
    def guaranteed_units_before(self) -> Decimal:
        return self._units(self.guaranteed_before)

    @property
    def guaranteed_units_after(self) -> Decimal:
        return self._units(self.guaranteed_after)

    @property
    def units_increase(self) -> Decimal:
        """The larger rise, of the guarantee or of the limit, in normalised GPU units: raising
        only the guarantee under the same limit takes capacity from everyone else too."""
        return max(
            Decimal(0),
            self.guaranteed_units_after - self.guaranteed_units_before,
            self.gpu_units_after - self.gpu_units_before,
        )

    @property
    def changed(self) -> bool:
        return (self.guaranteed_before, self.limit_before) != (
            self.guaranteed_after,
            self.limit_after,
        )


def diff_line(item: QuotaItem | QuotaChangeItem, before: Any | None) -> DiffLine:
    """``item`` against the line in force (anything with ``guaranteed`` and ``limit``; None
    when the tenant has none)."""
    return DiffLine(
        item.flavor.name,
        item.resource,
        before.guaranteed if before else Decimal(0),
        before.limit if before else Decimal(0),
        item.guaranteed,
        item.limit,
        item.flavor.gpu_weight,
        shares_per_gpu(item.flavor, item.resource),
    )


def shares_per_gpu(flavor: ResourceFlavor, resource: str) -> int | None:
    return flavor.time_slicing_replicas if resource == GPU_RESOURCE else None


@dataclass
class RequestCheck:
    """What a request would do to the quotas in force, and which rules it breaks."""

    errors: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    diff: list[DiffLine] = field(default_factory=list)
    required_approvals: int = 1
    base_generation: int = 0

    @property
    def gpu_units_increase(self) -> Decimal:
        return sum((d.units_increase for d in self.diff), Decimal(0))

    def raise_if_invalid(self, error: type[ApplicationError] = ValidationFailed) -> None:
        if self.errors:
            first = next(iter(self.errors.values()))[0]
            raise error(first, fields=self.errors)


def scheduling_fields(scheduling: SchedulingQuotas) -> dict[str, Any]:
    return {name: getattr(scheduling, name) for name in SCHEDULING_FIELDS}


def quota_request_check(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any] | None = None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
    read: ReadAlready | None = None,
) -> RequestCheck:
    """The one validation of a change, used at submit, at approval and by the live check of
    the portal and the API: the request keeps each of ``rules.RULES`` (what it says), then the
    quota set it would leave keeps each of ``rules.QUOTA_SET_RULES`` (every rule of
    ``quotas.services.quota_items_check``, the department's, the per-pod caps, the inference
    split and the production grant), each error on the field it is about. A change that
    keeps ``RULES`` gets its diff and the number of approvals it needs (not weighed when
    ``read`` is given: an approval, which reads what the rules need itself, under its
    locks, and only needs the errors)."""
    current: Mapping[Key, QuotaItem]
    if read is None:
        quota_set, current = quotas_in_force(tenant, cluster)
    else:
        quota_set, current = read.quota_set, read.current
    check = RequestCheck(base_generation=quota_set.generation if quota_set else 0)
    change = Change(
        tenant=tenant,
        cluster=cluster,
        items=items,
        scheduling=scheduling or {},
        isolation_level=isolation_level,
        production_priority=production_priority,
        tenant_changes={k: v for k, v in (tenant_changes or {}).items() if v is not None},
        quota_set=quota_set,
        current=current,
    )
    if read is not None:
        change.department = read.department
        change.capacities_read = read.capacities
        change.guaranteed_elsewhere = read.guaranteed_elsewhere
    for rules in (RULES, QUOTA_SET_RULES):
        if check.errors:  # the quota set is judged only for a request that keeps RULES
            return check
        found = judge(change, rules)
        check.errors.update(found.errors)
        check.warnings.extend(found.warnings)
    if read is None:
        _weigh(check, change)  # shown beside what the quota set would break
    return check


@dataclass(frozen=True)
class ReadAlready:
    """What an approval read for ``quota_request_check`` under its locks: the quota set in
    force (None: none before) and its lines, whether the tenant is a department (None: not
    known), the cluster's capacities and what other tenants are guaranteed."""

    quota_set: QuotaSet | None
    current: Mapping[Key, QuotaItem]
    department: bool | None
    capacities: Mapping[Key, Capacity]
    guaranteed_elsewhere: Mapping[Key, Decimal]


def _weigh(check: RequestCheck, change: Change) -> None:
    """The diff of each line of the request, a warning for each line that goes down, and
    the approvals the change needs: two above the policy's share of a line's capacity or its
    number of normalised GPU units."""
    policy = approval_policy()
    fraction = policy.two_approvers_above_capacity_fraction
    two_approvers = False
    for item in change.items:
        before = change.current.get(line_of(item))
        check.diff.append(diff_line(item, before))
        g0 = before.guaranteed if before else Decimal(0)
        l0 = before.limit if before else Decimal(0)
        capacity = change.capacities.get(line_of(item))
        amount = capacity.amount if capacity else Decimal(0)
        increase = max(item.guaranteed - g0, item.limit - l0)
        if amount and increase > amount * fraction:
            two_approvers = True
        if item.limit < l0 or item.guaranteed < g0:
            check.warnings.append(_goes_down(item, g0, l0))
    if check.gpu_units_increase > policy.two_approvers_above_gpu_units:
        two_approvers = True
    check.required_approvals = 2 if two_approvers else 1


def _goes_down(item: QuotaItem, guaranteed_before: Decimal, limit_before: Decimal) -> str:
    resource = item.resource
    return (
        f"{resource} on {item.flavor.name} goes down from "
        f"{format_quantity(guaranteed_before, resource)}/{format_quantity(limit_before, resource)} "
        f"to {format_quantity(item.guaranteed, resource)}/{format_quantity(item.limit, resource)}: "
        "running work above the new limit keeps running, new work waits"
    )


def _item_rows(request: QuotaChangeRequest) -> Iterable[QuotaChangeItem]:
    """The request's item rows with their flavors: those the selectors prefetched (no
    query), else read."""
    prefetched = getattr(request, "_prefetched_objects_cache", {}).get("items")
    return prefetched if prefetched is not None else request.items.select_related("flavor")


def quota_request_items(request: QuotaChangeRequest) -> list[QuotaItem]:
    """The request's lines as the services take them (also what a form edited from it starts
    with)."""
    return [
        QuotaItem(i.flavor, i.resource, i.guaranteed, i.limit, i.lending_limit)
        for i in _item_rows(request)
    ]


def quota_request_scheduling(request: QuotaChangeRequest) -> dict[str, Any]:
    return {name: getattr(request, name) for name in SCHEDULING_FIELDS}


def quota_request_tenant_changes(request: QuotaChangeRequest) -> dict[str, Any]:
    """The tenant-wide limits the request changes (null ones left out)."""
    values = {name: getattr(request, name) for name in TENANT_FIELDS}
    return {name: value for name, value in values.items() if value is not None}


def quota_request_check_stored(*, request: QuotaChangeRequest) -> RequestCheck:
    if request.ends_at is not None:  # a grant for a time: its own check
        return grant_request_check_stored(request=request)
    return quota_request_check(
        tenant=request.tenant,
        cluster=request.cluster,
        items=quota_request_items(request),
        scheduling=quota_request_scheduling(request),
        isolation_level=request.isolation_level,
        production_priority=request.production_priority,
        tenant_changes=quota_request_tenant_changes(request),
    )


def quota_request_approved_diff(*, request: QuotaChangeRequest) -> list[DiffLine]:
    """What an approved request changed: each line against the one in force when it was
    approved ([] when that was not kept: not approved yet, or approved before it was). A
    grant for a time added its lines to those in effect then."""
    lines = []
    added = request.ends_at is not None
    for item in _item_rows(request):
        if item.guaranteed_before is None or item.limit_before is None:
            return []
        lines.append(
            DiffLine(
                item.flavor.name,
                item.resource,
                item.guaranteed_before,
                item.limit_before,
                item.guaranteed + (item.guaranteed_before if added else 0),
                item.limit + (item.limit_before if added else 0),
                item.flavor.gpu_weight,
                shares_per_gpu(item.flavor, item.resource),
            )
        )
    return lines


def quota_request_check_shown(*, request: QuotaChangeRequest) -> RequestCheck:
    """What a request's page and the API show of it: while it is open, its check against the
    quotas in force now; once approved, what it changed then (where that was kept)."""
    if request.status not in OPEN_STATUSES:
        diff = quota_request_approved_diff(request=request)
        if diff:
            return RequestCheck(
                diff=diff,
                required_approvals=request.required_approvals,
                base_generation=request.base_generation,
            )
    return quota_request_check_stored(request=request)


# --- grants for a time: a request with ``starts_at`` and ``ends_at`` (``granting``) ---

GRANT_ONLY = "a grant for a time adds quota lines only: file this change as a standing request"


def grant_window_errors(
    *, starts_at: datetime | None, ends_at: datetime | None, now: datetime | None = None
) -> dict[str, list[str]]:
    """The window's errors, each on its field: an end is required with a start, after it,
    not in the past, and the window no longer than the policy's ``grant_max_days``."""
    now = now or timezone.now()
    if ends_at is None:
        return {"ends_at": ["a grant for a time needs an end"]} if starts_at is not None else {}
    start = starts_at or now
    if ends_at <= start:
        return {"ends_at": ["the end must come after the start"]}
    if ends_at <= now:
        return {"ends_at": ["the end is in the past"]}
    longest = approval_policy().grant_max_days
    if ends_at - start > timedelta(days=longest):
        days = "day" if longest == 1 else "days"
        return {"ends_at": [f"the window is longer than the {longest} {days} the policy allows"]}
    return {}


def grant_request_check(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    starts_at: datetime | None,
    ends_at: datetime | None,
    others: Mapping[str, Any] | None = None,
    now: datetime | None = None,
    exclude: Grant | None = None,
) -> RequestCheck:
    """The one validation of a grant for a time (filing, its live check, submit, approval).
    ``items`` are what it adds on top of the standing lines; ``others`` the request's other
    fields, which must be empty. ``starts_at`` None or past: it starts when approved."""
    now = now or timezone.now()
    quota_set, current = quotas_in_force(tenant, cluster)
    check = RequestCheck(base_generation=quota_set.generation if quota_set else 0)
    check.errors.update(grant_window_errors(starts_at=starts_at, ends_at=ends_at, now=now))
    for name, value in (others or {}).items():
        if value is not None and value != "":
            check.errors[name] = [GRANT_ONLY]
    if not items:
        check.errors["items"] = ["a grant for a time needs at least one quota line"]
    if check.errors:
        return check
    assert ends_at is not None
    start = max(starts_at or now, now)
    _capacity(check, tenant, cluster, items, start, ends_at, current, exclude)
    return check


_NONE = Peak()


def _capacity(
    check: RequestCheck,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    start: datetime,
    end: datetime,
    current: Mapping[tuple[int, str], QuotaItem],
    exclude: Grant | None,
) -> None:
    capacities = flavor_capacities(cluster=cluster)
    standing = guarantees_by_flavor(cluster=cluster, with_grants=False)
    keys = [line_of(item) for item in items]
    others = grant_peaks(cluster=cluster, keys=keys, starts_at=start, ends_at=end, exclude=exclude)
    own = grant_peaks(
        cluster=cluster, keys=keys, starts_at=start, ends_at=end, tenant=tenant, exclude=exclude
    )
    department = tenant.children.exists()
    policy = approval_policy()
    two = False
    seen: set[tuple[int, str]] = set()
    for index, item in enumerate(items):
        key, prefix = line_of(item), f"items[{index}]."
        what = f"{item.resource} on {item.flavor.name}"
        if item.flavor.cluster_id != cluster.pk or key not in capacities:
            check.errors[f"{prefix}resource"] = [f"{cluster.name} has no {what}"]
            continue
        if key in seen:
            check.errors[f"{prefix}resource"] = [f"{what} is listed twice"]
            continue
        seen.add(key)
        if item.lending_limit is not None:
            check.errors[f"{prefix}lending_limit"] = [
                "a grant for a time adds guaranteed and limit only; it lends nothing"
            ]
            continue
        if item.limit <= 0:
            check.errors[f"{prefix}limit"] = [f"{what}: the grant adds nothing"]
            continue
        capacity = capacities[key].amount
        taken = (standing.get(key) or Decimal(0)) + others.get(key, _NONE).guaranteed
        if not cluster.allow_guarantee_overcommit and taken + item.guaranteed > capacity:
            check.errors[f"{prefix}guaranteed"] = [
                f"{what}: {format_quantity(item.guaranteed, item.resource)} more guaranteed "
                f"does not fit over this window: standing guarantees and other grants hold "
                f"up to {format_quantity(taken, item.resource)} of "
                f"{format_quantity(capacity, item.resource)} on {cluster.name} then"
            ]
            continue
        before = current.get(key)
        g0 = (before.guaranteed if before else Decimal(0)) + own.get(key, _NONE).guaranteed
        l0 = (before.limit if before else Decimal(0)) + own.get(key, _NONE).limit
        cap = elastic_cap(
            capacity=capacity, fraction=cluster.elastic_cap_fraction, resource=item.resource
        )
        if (department and l0 + item.limit > capacity) or (
            not department and l0 + item.limit > cap
        ):
            bound = capacity if department else cap
            check.errors[f"{prefix}limit"] = [
                f"{what}: a limit of {format_quantity(l0 + item.limit, item.resource)} with "
                f"the grant is above the {format_quantity(bound, item.resource)} a tenant "
                f"may hold on {cluster.name}"
            ]
            continue
        check.diff.append(
            DiffLine(
                item.flavor.name,
                item.resource,
                g0,
                l0,
                g0 + item.guaranteed,
                l0 + item.limit,
                item.flavor.gpu_weight,
                shares_per_gpu(item.flavor, item.resource),
            )
        )
        if capacity and item.limit > capacity * policy.two_approvers_above_capacity_fraction:
            two = True
    if check.gpu_units_increase > policy.two_approvers_above_gpu_units:
        two = True
    check.required_approvals = 2 if two else 1


def request_others(request: QuotaChangeRequest) -> dict[str, Any]:
    """The stored request's fields a grant must leave empty."""
    names = (*SCHEDULING_FIELDS, *TENANT_FIELDS, "isolation_level", "production_priority")
    values = {name: getattr(request, name) for name in names}
    values["tier"] = request.tier_id
    return values


def grant_request_check_stored(
    *, request: QuotaChangeRequest, now: datetime | None = None
) -> RequestCheck:
    return grant_request_check(
        tenant=request.tenant,
        cluster=request.cluster,
        items=quota_request_items(request),
        starts_at=request.starts_at,
        ends_at=request.ends_at,
        others=request_others(request),
        now=now,
    )
