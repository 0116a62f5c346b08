"""What a request would do and which rules it breaks: ``quota_request_check`` (the one
validation of a change, at submit, at approval and in the live check of the portal and the
API), the diff of each quota line before -> after (``DiffLine``) and how many approvals the
change needs, for a request being filed or one already stored. Reads only."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from approvals.choices import OPEN_STATUSES
from approvals.models import QuotaChangeItem, QuotaChangeRequest
from approvals.services.policy import approval_policy
from core.errors import (
    ApplicationError,
    ValidationFailed,
)
from quotas.choices import GPU_RESOURCE
from quotas.isolation import flavor_isolation, isolation_rule_broken
from quotas.kube.bandwidth import bandwidth_words, pod_bandwidth_text
from quotas.kube.enforcement import POLICY_MIN_VERSION, kubernetes_minor
from quotas.models import (
    Cluster,
    Quota,
    QuotaSet,
    ResourceFlavor,
)
from quotas.quantity import format_quantity, to_display
from quotas.selectors import flavor_capacities, gpu_units, tenant_gpu_units_by_cluster
from quotas.services import (
    POD_CAP_FIELDS,
    QuotaItem,
    SchedulingQuotas,
    department_check,
    fair_share_weight_check,
    inference_split_check,
    pod_caps_check,
    quota_items_check,
)
from tenants.choices import IsolationLevel
from tenants.models import Tenant

SCHEDULING_FIELDS = (
    "max_running_jobs", "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs",
    "fair_share_weight", "max_gpus_per_pod", "max_cpu_per_pod", "max_memory_per_pod",
    "inference_gpus",
)  # fmt: skip


# Tenant-wide limits a request may change (on every cluster): null leaves one as it is, 0
# removes it ("" for the per-pod bandwidth cap, R27, a quantity text).
TENANT_FIELDS = ("max_run_time_hours", "gpu_unit_cap", "pod_bandwidth_max")


MAX_RUN_TIME_HOURS_MAX = 24 * 366


Key = tuple[int, str]  # (flavor id, resource)


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
        _shares_per_gpu(item.flavor, item.resource),
    )


def _shares_per_gpu(flavor: ResourceFlavor, resource: str) -> int | None:
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


def quotas_in_force(
    tenant: Tenant, cluster: Cluster
) -> tuple[QuotaSet | None, dict[Key, QuotaItem]]:
    quota_set = QuotaSet.objects.filter(tenant=tenant, cluster=cluster).first()
    current: dict[Key, QuotaItem] = {}
    if quota_set is not None:
        for q in quota_set.quotas.select_related("flavor"):
            current[(q.flavor_id, q.resource)] = QuotaItem(
                q.flavor, q.resource, q.guaranteed, q.limit, q.lending_limit
            )
    return quota_set, current


def merged_scheduling(quota_set: QuotaSet | None, changes: Mapping[str, Any]) -> SchedulingQuotas:
    values = {name: getattr(quota_set, name, None) for name in SCHEDULING_FIELDS}
    values.update({k: v for k, v in changes.items() if v is not None})
    return SchedulingQuotas(**values)


def _refuse_what_changes_nothing(
    check: RequestCheck,
    quota_set: QuotaSet | None,
    current: Mapping[Key, QuotaItem],
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any],
) -> None:
    """The one rule the form and the API share: a quota line that leaves the one in force as
    it is has no place in a request (approved later, it would put back stale numbers over a
    newer change), and a request that changes nothing at all is refused, naming each field."""
    for index, item in enumerate(items):
        before = current.get((item.flavor.pk, item.resource))
        if before is None or (before.guaranteed, before.limit, before.lending_limit) != (
            item.guaranteed,
            item.limit,
            item.lending_limit,
        ):
            continue
        shown = f"{to_display(item.guaranteed, item.resource)} guaranteed, " + (
            f"{to_display(item.limit, item.resource)} limit"
        )
        check.errors.setdefault(f"items[{index}]", []).append(
            f"{item.resource} on {item.flavor.name} is already {shown}: this line changes "
            "nothing; leave it out"
        )
    if items:
        return
    given = {name: value for name, value in scheduling.items() if value is not None}
    if given and all(getattr(quota_set, name, None) == value for name, value in given.items()):
        for name, value in given.items():
            check.errors.setdefault(name, []).append(
                f"{name} is already {value}: the request changes nothing"
            )


def quota_request_check(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any] | None = None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
) -> RequestCheck:
    """The one validation of a change, used at submit, at approval and by the live check of
    the portal and the API: the merged quota set must pass every rule of
    ``quotas.services.quota_items_check``; errors are reported against the request's items.
    The per-pod caps, the inference split and the production grant are checked on the merged
    quota set too (``_pod_rules``)."""
    quota_set, current = quotas_in_force(tenant, cluster)
    check = RequestCheck(base_generation=quota_set.generation if quota_set else 0)
    if tenant.archived_at is not None:
        check.errors["tenant"] = [
            f"{tenant.slug} is archived: it gets no new quotas until a platform admin unarchives it"
        ]
        return check
    seen: dict[Key, int] = {}
    for index, item in enumerate(items):
        key = (item.flavor.pk, item.resource)
        if key in seen:
            check.errors.setdefault(f"items[{index}].resource", []).append(
                f"{item.resource} on {item.flavor.name} is listed twice (items {seen[key]} and {index})"
            )
        seen[key] = index
    changes_level = bool(isolation_level) or production_priority is not None
    tenant_given = {k: v for k, v in (tenant_changes or {}).items() if v is not None}
    if (
        not items
        and not changes_level
        and not tenant_given
        and not any(v is not None for v in (scheduling or {}).values())
    ):
        check.errors["items"] = ["a request must change at least one quota"]
    if not changes_level and not tenant_given:
        _refuse_what_changes_nothing(check, quota_set, current, items, scheduling or {})
    _isolation_check(
        check, tenant=tenant, cluster=cluster, current=current, items=items, level=isolation_level
    )
    if (
        production_priority is not None
        and production_priority == tenant.production_priority_allowed
    ):
        state = "may already" if production_priority else "already may not"
        check.errors.setdefault("production_priority", []).append(
            f"{tenant.slug} {state} use the production priority: the request changes nothing "
            "there; leave it out"
        )
    _tenant_limits_check(
        check, tenant=tenant, cluster=cluster, current=current, items=items, changes=tenant_given
    )
    if check.errors:
        return check

    merged = {**current, **{(i.flavor.pk, i.resource): i for i in items}}
    order = list(merged)
    whole = [merged[k] for k in order]
    is_department = tenant.children.exists()
    in_force = flavor_capacities(cluster=cluster)  # read once for both checks below
    rules = quota_items_check(
        cluster=cluster,
        items=whole,
        quota_set=quota_set,
        department=is_department,
        capacities=in_force,
    )
    department = department_check(
        tenant=tenant, cluster=cluster, items=whole, department=is_department
    )
    fair_share_weight_check(department, (scheduling or {}).get("fair_share_weight"))
    _pod_rules(
        check,
        tenant=tenant,
        whole=whole,
        quota_set=quota_set,
        scheduling=scheduling or {},
        production_priority=production_priority,
    )
    for name, messages in [*rules.errors.items(), *department.errors.items()]:
        if not name.startswith("items["):
            check.errors.setdefault(name, []).extend(messages)
            continue
        # "items[7].limit" of the merged list -> the request's own index, or the line in force.
        position, _, attribute = name.partition("].")
        key = order[int(position.removeprefix("items["))]
        target = f"items[{seen[key]}].{attribute}" if key in seen else "quota_set"
        check.errors.setdefault(target, []).extend(messages)

    capacities = {key: capacity.amount for key, capacity in in_force.items()}
    policy = approval_policy()
    two_approvers = False
    for item in items:
        before = current.get((item.flavor.pk, item.resource))
        g0 = before.guaranteed if before else Decimal(0)
        l0 = before.limit if before else Decimal(0)
        line = diff_line(item, before)
        check.diff.append(line)
        capacity = capacities.get((item.flavor.pk, item.resource)) or Decimal(0)
        increase = max(item.guaranteed - g0, item.limit - l0)
        if capacity and increase > capacity * policy.two_approvers_above_capacity_fraction:
            two_approvers = True
        if item.limit < l0 or item.guaranteed < g0:
            check.warnings.append(
                f"{item.resource} on {item.flavor.name} goes down from "
                f"{format_quantity(g0, item.resource)}/{format_quantity(l0, item.resource)} to "
                f"{format_quantity(item.guaranteed, item.resource)}/"
                f"{format_quantity(item.limit, item.resource)}: running work above the new "
                "limit keeps running, new work waits"
            )
    if check.gpu_units_increase > policy.two_approvers_above_gpu_units:
        two_approvers = True
    check.required_approvals = 2 if two_approvers else 1
    return check


def _pod_rules(
    check: RequestCheck,
    *,
    tenant: Tenant,
    whole: Sequence[QuotaItem],
    quota_set: QuotaSet | None,
    scheduling: Mapping[str, Any],
    production_priority: bool | None,
) -> None:
    """R16, R17 and R15 on the quota set the request would leave: per-pod caps within the
    limits, the inference split within the GPU limit and only with the production grant (the
    one in force, or the one this request asks for), and no grant withdrawn while a split
    still sets GPUs apart for production work. A rule the request itself breaks is an error
    on its field; one only the numbers in force break is a warning."""
    merged = merged_scheduling(quota_set, scheduling)
    given = {name for name, value in scheduling.items() if value is not None}
    caps = pod_caps_check(
        tenant=tenant.slug,
        items=whole,
        caps={name: getattr(merged, name) for name in POD_CAP_FIELDS},
        requested=given,
    )
    allowed = (
        tenant.production_priority_allowed if production_priority is None else production_priority
    )
    split = inference_split_check(
        tenant=tenant.slug,
        items=whole,
        inference_gpus=merged.inference_gpus,
        production_allowed=allowed,
    )
    for name, messages in [*caps.errors.items(), *split.errors.items()]:
        if name in given:
            check.errors.setdefault(name, []).extend(messages)
        elif production_priority is False and name == "inference_gpus":
            check.errors.setdefault("production_priority", []).append(
                f"{tenant.slug} sets {merged.inference_gpus} GPUs apart for inference, which "
                "runs at the production priority: set that split to 0 in the same request first"
            )
        else:
            check.warnings.extend(messages)
    check.warnings.extend([*caps.warnings, *split.warnings])


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return None


def _amount(value: Any) -> Decimal | None:
    try:
        amount = Decimal(str(value).strip())
    except (ArithmeticError, ValueError):
        return None
    return amount if amount.is_finite() else None


def _units(amount: Decimal) -> str:
    text = format(amount.normalize(), "f") if amount else "0"
    return f"{text} GPU unit" if amount == 1 else f"{text} GPU units"


def _tenant_limits_check(
    check: RequestCheck,
    *,
    tenant: Tenant,
    cluster: Cluster,
    current: Mapping[Key, QuotaItem],
    items: Sequence[QuotaItem],
    changes: Mapping[str, Any],
) -> None:
    """The tenant-wide limits a request sets: the maximum run time (whole hours, 0 removes
    it) and the cap on normalised GPU units over every cluster (R22, 0 removes it). The cap in
    force after the request must hold the tenant's limits summed over its clusters, with this
    request's lines in place of those it replaces: refused naming the cap, the sum and each
    cluster's part. A change is read against the tenant's values in the database now (the
    object passed in may be older); with none, the cap is the one the caller loaded."""
    if changes:
        in_force_hours, in_force_cap, in_force_bandwidth = (
            Tenant.objects.filter(pk=tenant.pk)
            .values_list("max_run_time_hours", "gpu_unit_cap", "pod_bandwidth_max")
            .get()
        )
    else:
        in_force_hours, in_force_cap = tenant.max_run_time_hours, tenant.gpu_unit_cap
        in_force_bandwidth = tenant.pod_bandwidth_max
    if "pod_bandwidth_max" in changes:
        problem = pod_bandwidth_problem(
            changes["pod_bandwidth_max"],
            tenant=tenant,
            cluster=cluster,
            in_force=in_force_bandwidth,
        )
        if problem:
            check.errors.setdefault("pod_bandwidth_max", []).append(problem)
    if "max_run_time_hours" in changes:
        hours = _whole(changes["max_run_time_hours"])
        if hours is None or not 0 <= hours <= MAX_RUN_TIME_HOURS_MAX:
            check.errors.setdefault("max_run_time_hours", []).append(
                f"a whole number of hours from 1 to {MAX_RUN_TIME_HOURS_MAX} (a year), or 0 to "
                "go back to the platform's maximum run time"
            )
        elif (hours or None) == in_force_hours:
            now = f"{hours} hours" if hours else "the platform's"
            check.errors.setdefault("max_run_time_hours", []).append(
                f"{tenant.slug}'s maximum run time is already {now}: the request changes nothing "
                "there; leave it out"
            )
    cap = in_force_cap
    field = "items" if items else "quota_set"
    if "gpu_unit_cap" in changes:
        asked = _amount(changes["gpu_unit_cap"])
        if asked is None or asked < 0 or asked != asked.quantize(Decimal("0.001")):
            check.errors.setdefault("gpu_unit_cap", []).append(
                "a number of GPU units (at most 3 decimals), or 0 to remove the cap"
            )
            return
        if (asked or None) == in_force_cap:
            shown = _units(asked) if asked else "no cap"
            check.errors.setdefault("gpu_unit_cap", []).append(
                f"{tenant.slug}'s cap is already {shown}: the request changes nothing there; "
                "leave it out"
            )
            return
        cap, field = (asked or None), "gpu_unit_cap"
    if cap is None:
        return
    merged = {**current, **{(i.flavor.pk, i.resource): i for i in items}}
    parts = tenant_gpu_units_by_cluster(tenant_id=tenant.pk, exclude_cluster_id=cluster.pk)
    parts[cluster.name] = sum(
        (gpu_units(i.limit, resource=i.resource, weight=i.flavor.gpu_weight)
         for i in merged.values()),
        Decimal(0),
    )  # fmt: skip
    parts = dict(sorted(parts.items()))
    total = sum(parts.values(), Decimal(0))
    held = sum(tenant_gpu_units_by_cluster(tenant_id=tenant.pk).values(), Decimal(0))
    # Over a cap in force (a flavor's weight rose since), a request that lowers the sum passes.
    if total > cap and (field == "gpu_unit_cap" or total > held):
        shown = ", ".join(f"{name} {_units(units)}" for name, units in parts.items())
        check.errors.setdefault(field, []).append(
            f"{tenant.slug}'s GPU limits would add up to {_units(total)} over every cluster "
            f"({shown}), above its cap of {_units(cap)} (each limit counts times its GPU "
            "model's weight)"
        )


def pod_bandwidth_problem(value: Any, *, tenant: Tenant, cluster: Cluster, in_force: str) -> str:
    """R27: what is wrong with ``value`` as the tenant's new per-pod bandwidth cap ("" when
    nothing): a quantity of bits per second from 1k to 400G (``quotas.kube.bandwidth``), ""
    to withdraw the cap; not the cap in force; and every cluster the tenant has quotas on (and
    this request's) new enough for the admission policy that holds pods to it."""
    text = "" if value is None else str(value).strip()
    if text:
        try:
            text = pod_bandwidth_text(text)
        except ValueError as error:
            return str(error)
    if text == in_force:
        now = f"{in_force} ({bandwidth_words(in_force)})" if in_force else "no cap"
        return (
            f"{tenant.slug}'s pod bandwidth cap is already {now}: the request changes nothing "
            "there; leave it out"
        )
    if not text:
        return ""
    clusters = {cluster.name: cluster.kubernetes_version}
    clusters.update(
        Cluster.objects.filter(quota_sets__tenant=tenant).values_list("name", "kubernetes_version")
    )
    old = sorted(
        f"{name} (Kubernetes {version})"
        for name, version in clusters.items()
        if kubernetes_minor(version) < POLICY_MIN_VERSION
    )
    if old:
        return (
            f"a pod bandwidth cap needs Kubernetes 1.30 or later (a ValidatingAdmissionPolicy "
            f"holds pods to it); {tenant.slug} is on {', '.join(old)}"
        )
    return ""


def _isolation_check(
    check: RequestCheck,
    *,
    tenant: Tenant,
    cluster: Cluster,
    current: Mapping[Key, QuotaItem],
    items: Sequence[QuotaItem],
    level: str,
) -> None:
    """R23: the tenant's isolation level (the requested one, else the one in force) decides
    which flavors its quotas may be on. A line of the request on a flavor the level does not
    allow is refused (a line lowering it to 0 is fine); a new level is refused while any of the
    tenant's quotas, on any cluster, is on a flavor it does not allow, naming each."""
    if level and level not in IsolationLevel.values:
        check.errors.setdefault("isolation_level", []).append(
            f"{level!r} is not an isolation level; choose one of {', '.join(IsolationLevel.values)}"
        )
        return
    if level and level == tenant.isolation_level:
        check.errors.setdefault("isolation_level", []).append(
            f"{tenant.slug} is already at {IsolationLevel(level).label.lower()}: "
            "the request changes nothing there; leave it out"
        )
        return
    in_force = level or tenant.isolation_level
    for index, item in enumerate(items):
        broken = _isolation_broken(in_force, item.flavor) if item.limit > 0 else None
        if broken:
            check.errors.setdefault(f"items[{index}].flavor", []).append(broken)
    if not level:
        return
    requested = {(i.flavor.pk, i.resource) for i in items}
    held = [(cluster.name, q) for key, q in current.items() if key not in requested]
    others = Quota.objects.filter(quota_set__tenant=tenant).exclude(quota_set__cluster=cluster)
    for q in others.select_related("flavor", "quota_set__cluster"):
        held.append(
            (q.quota_set.cluster.name, QuotaItem(q.flavor, q.resource, q.guaranteed, q.limit))
        )
    for cluster_name, line in sorted(held, key=lambda h: (h[0], h[1].flavor.name, h[1].resource)):
        broken = _isolation_broken(level, line.flavor) if line.limit > 0 else None
        if broken:
            check.errors.setdefault("isolation_level", []).append(
                f"{broken}; {tenant.slug} holds a limit of "
                f"{to_display(line.limit, line.resource)} {line.resource} on {cluster_name}: "
                "lower it to 0 first"
            )


def _isolation_broken(level: str, flavor: ResourceFlavor) -> str | None:
    return isolation_rule_broken(
        level=level,
        flavor_name=flavor.name,
        isolation=flavor_isolation(
            kind=flavor.kind,
            node_taints=flavor.node_taints,
            time_slicing_replicas=flavor.time_slicing_replicas,
        ),
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
    approved ([] when that was not kept: not approved yet, or approved before it was)."""
    lines = []
    for item in _item_rows(request):
        if item.guaranteed_before is None or item.limit_before is None:
            return []
        lines.append(
            DiffLine(
                item.flavor.name,
                item.resource,
                item.guaranteed_before,
                item.limit_before,
                item.guaranteed,
                item.limit,
                item.flavor.gpu_weight,
                _shares_per_gpu(item.flavor, item.resource),
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
