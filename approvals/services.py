"""Change: quota change requests and their approval (DESIGN flow 2), and onboarding (flow 1).

Quotas change at a user's request only here. Every transition is a conditional update or
happens under a row lock; approval writes the decision, the new quota set (next generation),
the audit rows and the outbox row in one transaction, and the quotas app pushes it after
commit. Where the push stands comes back through ``quotas.sync``'s hooks
(``quota_requests_push_started``, ``quota_requests_pushed``): a request is applied once the
cluster has observed its approved generation, failed when the cluster refused it for good.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from approvals.choices import OPEN_STATUSES, TRANSITIONS, DecisionKind, RequestStatus
from approvals.models import ApprovalDecision, ApprovalPolicy, QuotaChangeItem, QuotaChangeRequest
from core.errors import (
    ApplicationError,
    Conflict,
    NotFound,
    PermissionDenied,
    ValidationFailed,
)
from quotas import sync
from quotas.choices import GPU_RESOURCE, FlavorKind, SyncBackend
from quotas.isolation import flavor_isolation, isolation_rule_broken
from quotas.kube.bandwidth import bandwidth_words, pod_bandwidth_text
from quotas.kube.enforcement import POLICY_MIN_VERSION, kubernetes_minor
from quotas.kube.spec import QuotaSpec
from quotas.models import (
    Cluster,
    Quota,
    QuotaSet,
    ResourceFlavor,
    TierTemplate,
)
from quotas.quantity import format_quantity, to_display
from quotas.selectors import flavor_capacities, gpu_units, tenant_gpu_units_by_cluster
from quotas.services import (
    POD_CAP_FIELDS,
    QuotaItem,
    SchedulingQuotas,
    default_gpu_flavor,
    department_check,
    fair_share_weight_check,
    inference_split_check,
    outbox_record,
    outbox_reopen,
    pod_caps_check,
    quota_item_parse,
    quota_items_check,
    quota_set_write,
    quota_sets_resync,
    tier_items,
    tier_scheduling,
)
from tenants.choices import AuditSource, IsolationLevel, MembershipRole, Priority
from tenants.models import Tenant, User
from tenants.selectors import membership_role
from tenants.services import (
    audit_record,
    audit_source,
    membership_set,
    notify,
    tenant_create,
    tenant_isolation_level_set,
    tenant_limits_set,
    tenant_production_priority_set,
)

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
# What the requester is told when their request becomes one of these ({cluster}: its cluster).
DECISION_NOTICES: dict[str, str] = {
    RequestStatus.APPROVED: "was approved",
    RequestStatus.REJECTED: "was rejected",
    RequestStatus.EXPIRED: "expired unanswered",
    RequestStatus.APPLIED: "was applied in {cluster}",
    RequestStatus.FAILED: "could not be applied in {cluster}",
}


# --- reading what a request would do -------------------------------------------------------


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


def approval_policy() -> ApprovalPolicy:
    policy, _ = ApprovalPolicy.objects.get_or_create(pk=1)
    return policy


POLICY_FIELDS = (
    "two_approvers_above_gpu_units",
    "two_approvers_above_capacity_fraction",
    "pending_expires_after_days",
)


def _policy_snapshot(policy: ApprovalPolicy) -> dict[str, Any]:
    return {name: str(getattr(policy, name)) for name in POLICY_FIELDS}


@transaction.atomic
def approval_policy_update(*, actor: User | None, **fields: Any) -> ApprovalPolicy:
    """Change the approval policy (Django admin), audited. Applies to requests submitted from
    now on; pending ones keep the number of approvals they were filed with."""
    unknown = set(fields) - set(POLICY_FIELDS)
    if unknown:
        raise ValidationFailed.for_field(sorted(unknown)[0], "not an approval policy field")
    approval_policy()
    policy = ApprovalPolicy.objects.select_for_update().get(pk=1)
    before = _policy_snapshot(policy)
    for name, value in fields.items():
        setattr(policy, name, value)
    try:
        policy.full_clean()
    except DjangoValidationError as exc:
        errors = {name: [str(m) for m in messages] for name, messages in exc.message_dict.items()}
        raise ValidationFailed(next(iter(errors.values()))[0], fields=errors) from exc
    policy.save()
    after = _policy_snapshot(policy)
    if after != before:
        audit_record(
            actor=actor,
            action="approval_policy.updated",
            obj=policy,
            object_id="approval-policy",
            before=before,
            after=after,
        )
    return policy


def request_changes(
    *,
    cluster: Cluster,
    raw_items: Sequence[Mapping[str, Any]],
    scheduling: Mapping[str, Any],
    tier: TierTemplate | None,
) -> dict[str, Any]:
    """The ``items``, ``scheduling`` and ``tier`` of a request from its raw body. A tier change
    with no items is prefilled from the template (GPU, CPU and memory on the cluster's first
    whole-GPU flavor; scheduling and storage quotas the body leaves empty)."""
    items = request_items_parse(cluster=cluster, raw_items=raw_items)
    scheduling = dict(scheduling)
    if tier is not None and not raw_items:
        items = tier_items(tier=tier, gpu_flavor=default_gpu_flavor(cluster=cluster))
        for name, value in _scheduling_fields(tier_scheduling(tier)).items():
            if scheduling.get(name) is None:
                scheduling[name] = value
    return {"items": items, "scheduling": scheduling, "tier": tier}


def request_items_parse(
    *, cluster: Cluster, raw_items: Sequence[Mapping[str, Any]]
) -> list[QuotaItem]:
    """Resolve flavor names on ``cluster`` and parse amounts; errors name ``items[i].field``."""
    names = {str(raw.get("flavor", "")) for raw in raw_items}
    flavors = {
        f.name: f for f in ResourceFlavor.objects.filter(name__in=names).select_related("cluster")
    }
    on_cluster = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster, name__in=names)}
    items: list[QuotaItem] = []
    errors: dict[str, list[str]] = {}
    for index, raw in enumerate(raw_items):
        prefix = f"items[{index}]."
        name = str(raw.get("flavor", ""))
        flavor = on_cluster.get(name) or flavors.get(name)
        if flavor is None:
            errors[f"{prefix}flavor"] = [f"no flavor {name!r} on cluster {cluster.name!r}"]
            continue
        try:
            items.append(
                quota_item_parse(
                    flavor=flavor,
                    resource=str(raw.get("resource", "")),
                    guaranteed=raw.get("guaranteed"),
                    limit=raw.get("limit"),
                    lending_limit=raw.get("lending_limit"),
                    field_prefix=prefix,
                )
            )
        except ValidationFailed as exc:
            for key, messages in exc.fields.items():
                errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationFailed(next(iter(errors.values()))[0], fields=errors)
    return items


def _current(tenant: Tenant, cluster: Cluster) -> tuple[QuotaSet | None, dict[Key, QuotaItem]]:
    quota_set = QuotaSet.objects.filter(tenant=tenant, cluster=cluster).first()
    current: dict[Key, QuotaItem] = {}
    if quota_set is not None:
        for q in quota_set.quotas.select_related("flavor"):
            current[(q.flavor_id, q.resource)] = QuotaItem(
                q.flavor, q.resource, q.guaranteed, q.limit, q.lending_limit
            )
    return quota_set, current


def _merged_scheduling(quota_set: QuotaSet | None, changes: Mapping[str, Any]) -> SchedulingQuotas:
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
    quota_set, current = _current(tenant, cluster)
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
    merged = _merged_scheduling(quota_set, scheduling)
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


def _canonical_changes(changes: Mapping[str, Any]) -> dict[str, Any]:
    """The tenant changes as stored: a bandwidth cap in its canonical text ("1000M" -> "1G")."""
    values = {k: v for k, v in changes.items() if k in TENANT_FIELDS}
    if values.get("pod_bandwidth_max"):
        values["pod_bandwidth_max"] = pod_bandwidth_text(values["pod_bandwidth_max"])
    elif values.get("pod_bandwidth_max") is not None:
        values["pod_bandwidth_max"] = ""
    return values


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


# --- permissions ----------------------------------------------------------------------------


def quota_request_ensure_can_file(*, actor: User, tenant: Tenant) -> None:
    """A lead of ``tenant`` or a platform admin files its requests: 404 for a tenant the
    actor cannot see, 403 for a member or viewer."""
    if actor.is_platform_admin:
        return
    role = membership_role(user=actor, tenant=tenant)
    if role is None:
        raise NotFound("No such tenant, or it is not yours to see.")
    if role != MembershipRole.LEAD:
        raise PermissionDenied(
            f"Only a lead of {tenant.slug} or a platform admin files its requests; you are a {role}."
        )


def _ensure_can_decide(*, actor: User, request: QuotaChangeRequest) -> None:
    if not actor.is_platform_admin:
        raise PermissionDenied("Only platform admins approve or reject requests.")
    if request.requester_id == actor.pk:
        raise PermissionDenied("Nobody approves or rejects their own request: another admin must.")


def _ensure_may_become(request: QuotaChangeRequest, to: str) -> None:
    """409 unless ``to`` may follow the request's status now."""
    if to not in TRANSITIONS[request.status]:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; it cannot become {to}.",
            fields={"status": [f"{request.status} -> {to} is not allowed"]},
        )


def _transition(request: QuotaChangeRequest, to: str, *, actor: User | None, **fields: Any) -> None:
    """Move ``request`` to ``to`` if that is legal from its status now (conditional update)."""
    _ensure_may_become(request, to)
    updated = QuotaChangeRequest.objects.filter(pk=request.pk, status=request.status).update(
        status=to, **fields
    )
    if updated != 1:
        request.refresh_from_db()
        raise Conflict(
            f"Request #{request.pk} changed meanwhile; it is now {request.status}.",
            fields={"status": [f"now {request.status}"]},
        )
    before = request.status
    request.status = to
    for name, value in fields.items():
        setattr(request, name, value)
    if (
        to in DECISION_NOTICES
        and request.requester is not None
        and request.requester_id != getattr(actor, "pk", None)
    ):
        what = DECISION_NOTICES[to].format(cluster=request.cluster.name)
        notify(
            users=[request.requester],
            subject=f"Request #{request.pk} for {request.tenant.slug} {what}",
            body=_notice_body(request, to),
            url=f"/requests/{request.pk}/",
        )
    audit_record(
        actor=actor,
        action=f"quota_request.{to}",
        obj=request,
        tenant=request.tenant,
        object_id=f"#{request.pk}",
        before={"status": before},
        after={"status": to, **_jsonable(fields)},
    )


def _notice_body(request: QuotaChangeRequest, to: str) -> str:
    """What the requester reads with the news: the approvers' comments on a decision, where
    the change stands in the cluster, the cluster's message on a failure, and their reason."""
    cluster = request.cluster.name
    parts: list[str] = []
    if to in (RequestStatus.APPROVED, RequestStatus.REJECTED):
        kind = DecisionKind.APPROVE if to == RequestStatus.APPROVED else DecisionKind.REJECT
        for decision in request.decisions.filter(decision=kind).select_related("approver"):
            said = decision.comment.strip() or "(no comment)"
            verb = "Approved" if kind == DecisionKind.APPROVE else "Rejected"
            parts.append(f"{verb} by {decision.approver.get_username()}: {said}")
    if to == RequestStatus.APPROVED:
        if request.cluster.backend == SyncBackend.NONE:
            parts.append(f"The new quotas are in force ({cluster} is kept in the portal only).")
        else:
            parts.append(
                f"The new quotas are being pushed to {cluster}. "
                f"You will be told when they are applied in {cluster}."
            )
    elif to == RequestStatus.APPLIED:
        parts.append(f"The new quotas are in force in {cluster}.")
    elif to == RequestStatus.FAILED:
        parts.append(
            f"{cluster} did not accept the new quotas: {request.failure_message or 'no reason given'}"
            "\nA platform admin can retry the push once the cause is fixed."
        )
    parts.append(f"Your reason: {request.reason}")
    return "\n\n".join(parts)


def _jsonable(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in fields.items()}


REASON_REQUIRED = "a reason is required: say why the team needs it"


def quota_request_validate(
    *,
    actor: User,
    tenant: Tenant,
    cluster: Cluster,
    reason: str,
    raw_items: Sequence[Mapping[str, Any]],
    scheduling: Mapping[str, Any] | None = None,
    tier: TierTemplate | None = None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
) -> RequestCheck:
    """What filing this request would answer, storing nothing (the API's and the portal's
    live check). Who may file is enforced as for ``quota_request_create`` (404 / 403); every
    rule the request breaks comes back in ``errors`` instead of being raised."""
    quota_request_ensure_can_file(actor=actor, tenant=tenant)
    errors: dict[str, list[str]] = {} if reason.strip() else {"reason": [REASON_REQUIRED]}
    try:
        changes = request_changes(
            cluster=cluster, raw_items=raw_items, scheduling=scheduling or {}, tier=tier
        )
    except ValidationFailed as exc:
        return RequestCheck(errors={**errors, **exc.fields})
    check = quota_request_check(
        tenant=tenant,
        cluster=cluster,
        items=changes["items"],
        scheduling=changes["scheduling"],
        isolation_level=isolation_level,
        production_priority=production_priority,
        tenant_changes=tenant_changes,
    )
    check.errors = {**errors, **check.errors}
    return check


# --- writes ---------------------------------------------------------------------------------


def quota_request_create(**filing: Any) -> QuotaChangeRequest:
    """``quota_request_file``'s request (the callers that do not show its check)."""
    return quota_request_file(**filing).request


@dataclass(frozen=True)
class Filed:
    """A request just filed and its check, made once: the answer shows that check rather than
    running it again (the filing's own check, its submit and its answer ran it three times)."""

    request: QuotaChangeRequest
    check: RequestCheck


@transaction.atomic
def quota_request_file(
    *,
    tenant: Tenant,
    cluster: Cluster,
    requester: User,
    reason: str,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any] | None = None,
    submit: bool = False,
    tier: TierTemplate | None = None,
    replaces: QuotaChangeRequest | None = None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
) -> Filed:
    """File a request (a draft, or pending with ``submit``). Refused whole, storing nothing,
    when it breaks a rule. ``replaces``: a draft of the same tenant and cluster (a suggested
    change, say) that the new request supersedes; it is cancelled in the same transaction,
    so the old numbers and the new never wait side by side.

    The check runs once, on the tenant and cluster as they are now (read again: a caller's
    copy may predate a limit approved since), and serves the submit too."""
    quota_request_ensure_can_file(actor=requester, tenant=tenant)
    if not reason.strip():
        raise ValidationFailed.for_field("reason", REASON_REQUIRED)
    tenant = Tenant.objects.get(pk=tenant.pk)
    cluster = Cluster.objects.get(pk=cluster.pk)
    scheduling = dict(scheduling or {})
    check = quota_request_check(
        tenant=tenant,
        cluster=cluster,
        items=items,
        scheduling=scheduling,
        isolation_level=isolation_level,
        production_priority=production_priority,
        tenant_changes=tenant_changes,
    )
    check.raise_if_invalid()
    with transaction.atomic():
        replaced = _replaceable(replaces, tenant=tenant, cluster=cluster, actor=requester)
        request = _create(
            tenant=tenant, cluster=cluster, requester=requester, reason=reason, check=check,
            items=items, scheduling=scheduling, tier=tier, replaced=replaced,
            isolation_level=isolation_level, production_priority=production_priority,
            tenant_changes=tenant_changes or {},
        )  # fmt: skip
        if submit:
            _submit(request, actor=requester, check=check)  # its own row: no lock to take
    return Filed(request, check)


def _replaceable(
    draft: QuotaChangeRequest | None, *, tenant: Tenant, cluster: Cluster, actor: User
) -> QuotaChangeRequest | None:
    """``draft`` locked, if a new request may supersede it: a draft still, of the same tenant
    and cluster, that ``actor`` could submit (its requester or a platform admin). 409 when it
    is no longer a draft (submitted or cancelled meanwhile), 400 naming ``replaces`` else."""
    if draft is None:
        return None
    draft = _locked(draft)
    if draft.tenant_id != tenant.pk or draft.cluster_id != cluster.pk:
        raise ValidationFailed.for_field(
            "replaces", f"request #{draft.pk} is for another tenant or cluster"
        )
    if draft.requester_id != actor.pk and not actor.is_platform_admin:
        raise PermissionDenied("Only the draft's requester or a platform admin replaces it.")
    if draft.status != RequestStatus.DRAFT:
        raise Conflict(
            f"Request #{draft.pk} is {draft.status}, no longer a draft: it cannot be replaced.",
            fields={"replaces": [f"request #{draft.pk} is {draft.status}"]},
        )
    return draft


def _create(
    *,
    tenant: Tenant,
    cluster: Cluster,
    requester: User,
    reason: str,
    check: RequestCheck,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any],
    tier: TierTemplate | None,
    replaced: QuotaChangeRequest | None,
    isolation_level: str = "",
    production_priority: bool | None = None,
    tenant_changes: Mapping[str, Any] | None = None,
) -> QuotaChangeRequest:
    request = QuotaChangeRequest.objects.create(
        tenant=tenant,
        cluster=cluster,
        requester=requester,
        reason=reason.strip(),
        source=audit_source.get(),
        base_generation=check.base_generation,
        required_approvals=check.required_approvals,
        tier=tier,
        isolation_level=isolation_level,
        production_priority=production_priority,
        **{k: v for k, v in scheduling.items() if k in SCHEDULING_FIELDS},
        **_canonical_changes(tenant_changes or {}),
    )
    _store_items(request, items)
    audit_record(
        actor=requester,
        action="quota_request.created",
        obj=request,
        tenant=tenant,
        object_id=f"#{request.pk}",
        after=_request_snapshot(request, check)
        | ({"replaces": f"#{replaced.pk}"} if replaced is not None else {}),
    )
    if replaced is not None:
        _transition(
            replaced,
            RequestStatus.CANCELLED,
            actor=requester,
            decided_at=timezone.now(),
        )
    return request


def _store_items(request: QuotaChangeRequest, items: Sequence[QuotaItem]) -> None:
    QuotaChangeItem.objects.bulk_create(
        QuotaChangeItem(
            request=request,
            flavor=i.flavor,
            resource=i.resource,
            guaranteed=i.guaranteed,
            limit=i.limit,
            lending_limit=i.lending_limit,
        )
        for i in items
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


def _request_scheduling(request: QuotaChangeRequest) -> dict[str, Any]:
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
        scheduling=_request_scheduling(request),
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


def _request_snapshot(request: QuotaChangeRequest, check: RequestCheck) -> dict[str, Any]:
    return {
        "cluster": request.cluster.name,
        "reason": request.reason,
        "items": [
            {
                "flavor": d.flavor,
                "resource": d.resource,
                "before": f"{format_quantity(d.guaranteed_before, d.resource)}/{format_quantity(d.limit_before, d.resource)}",
                "after": f"{format_quantity(d.guaranteed_after, d.resource)}/{format_quantity(d.limit_after, d.resource)}",
            }
            for d in check.diff
        ],
        "required_approvals": check.required_approvals,
        **({"tier": request.tier.name} if request.tier else {}),
        **({"isolation_level": request.isolation_level} if request.isolation_level else {}),
        **(
            {"production_priority": request.production_priority}
            if request.production_priority is not None
            else {}
        ),
        **{
            name: str(value)
            for name in (
                "max_gpus_per_pod",
                "max_cpu_per_pod",
                "max_memory_per_pod",
                "inference_gpus",
            )
            if (value := getattr(request, name)) is not None
        },
        **{k: str(v) for k, v in quota_request_tenant_changes(request).items()},
    }


def _locked(request: QuotaChangeRequest) -> QuotaChangeRequest:
    try:
        return (
            QuotaChangeRequest.objects.select_for_update(of=("self",))
            .select_related("tenant", "cluster", "requester")
            .get(pk=request.pk)
        )
    except QuotaChangeRequest.DoesNotExist as exc:
        raise NotFound("No such request.") from exc


@transaction.atomic
def quota_request_submit(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    """The requester (a lead of the tenant still: the role now, not when the draft was filed)
    or a platform admin submits a draft."""
    request = _locked(request)
    if request.requester_id != actor.pk and not actor.is_platform_admin:
        raise PermissionDenied("Only the requester or a platform admin submits a draft.")
    quota_request_ensure_can_file(actor=actor, tenant=request.tenant)
    _ensure_may_become(request, RequestStatus.PENDING)  # a decided one: 409, before its numbers
    check = quota_request_check_stored(request=request)
    check.raise_if_invalid()
    return _submit(request, actor=actor, check=check)


def _submit(request: QuotaChangeRequest, *, actor: User, check: RequestCheck) -> QuotaChangeRequest:
    """Pending, locked ``request`` with its ``check`` passed: the notices to the approvers."""
    _transition(
        request,
        RequestStatus.PENDING,
        actor=actor,
        submitted_at=timezone.now(),
        base_generation=check.base_generation,
        required_approvals=check.required_approvals,
        needs_revalidation=False,
    )
    approvers = User.objects.filter(is_platform_admin=True, is_active=True).exclude(
        pk=actor.pk if request.requester_id is None else request.requester_id
    )
    notify(
        users=approvers,
        subject=f"Request #{request.pk} for {request.tenant.slug} on {request.cluster.name} awaits approval",
        body=f"{actor.get_username()} asks: {request.reason}\nIt needs {request.required_approvals} approval(s).",
        url=f"/requests/{request.pk}/",
    )
    return request


@transaction.atomic
def quota_request_cancel(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    request = _locked(request)
    if request.requester_id != actor.pk:
        raise PermissionDenied("Only the requester cancels a request; admins reject instead.")
    _transition(request, RequestStatus.CANCELLED, actor=actor, decided_at=timezone.now())
    return request


def _decide(request: QuotaChangeRequest, approver: User, kind: str, comment: str) -> None:
    if request.status != RequestStatus.PENDING:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; only a pending request can be decided.",
            fields={"status": [f"{request.status} is already final or not submitted"]},
        )
    if request.decisions.filter(approver=approver).exists():
        raise Conflict(
            f"You have already decided on request #{request.pk}; a second approver must be someone else.",
            fields={"approver": ["already decided"]},
        )
    ApprovalDecision.objects.create(
        request=request, approver=approver, decision=kind, comment=comment
    )


@transaction.atomic
def quota_request_reject(
    *, request: QuotaChangeRequest, approver: User, comment: str = ""
) -> QuotaChangeRequest:
    request = _locked(request)
    _ensure_can_decide(actor=approver, request=request)
    _decide(request, approver, DecisionKind.REJECT, comment)
    _transition(request, RequestStatus.REJECTED, actor=approver, decided_at=timezone.now())
    return request


@transaction.atomic
def quota_request_approve(
    *, request: QuotaChangeRequest, approver: User, comment: str = ""
) -> QuotaChangeRequest:
    """Record an approval; with enough of them, apply the change: the decision, the next
    quota set generation, the audit rows and the outbox row commit together or not at all.
    A rule broken now (capacity taken meanwhile) is a 409 naming it."""
    request = _locked(request)
    _ensure_can_decide(actor=approver, request=request)
    _decide(request, approver, DecisionKind.APPROVE, comment)
    approvals = request.decisions.filter(decision=DecisionKind.APPROVE).count()
    if approvals < request.required_approvals:
        audit_record(
            actor=approver,
            action="quota_request.approval_recorded",
            obj=request,
            tenant=request.tenant,
            object_id=f"#{request.pk}",
            after={"approvals": approvals, "required": request.required_approvals},
        )
        return request
    _apply(request, actor=approver)
    return request


def _apply(request: QuotaChangeRequest, *, actor: User | None) -> None:
    if request.tenant.gpu_unit_cap is not None or quota_request_tenant_changes(request):
        # The cap spans clusters, whose quota sets lock one by one: approvals for the tenant
        # on two clusters take turns here, so the second counts what the first wrote.
        request.tenant = Tenant.objects.select_for_update().get(pk=request.tenant_id)
    items = quota_request_items(request)
    check = quota_request_check_stored(request=request)
    check.raise_if_invalid(error=Conflict)
    quota_set, current = _current(request.tenant, request.cluster)
    merged = {**current, **{(i.flavor.pk, i.resource): i for i in items}}
    try:
        written = quota_set_write(
            tenant=request.tenant,
            cluster=request.cluster,
            items=list(merged.values()),
            scheduling=_merged_scheduling(quota_set, _request_scheduling(request)),
            actor=actor,
            tier=request.tier,
            reason=f"request #{request.pk}: {request.reason}",
        )
    except ValidationFailed as exc:  # a concurrent approval took the capacity first
        # Checked again under the cluster lock, the errors name the request's own items
        # (``exc`` numbers the merged quota set's lines).
        errors = quota_request_check_stored(request=request).errors or exc.fields
        raise Conflict(next(iter(errors.values()))[0], fields=errors) from exc
    # What it changed, as it stood when approved: the request keeps showing "6 -> 8".
    lines = list(request.items.all())
    for line in lines:
        before = current.get((line.flavor_id, line.resource))
        line.guaranteed_before = before.guaranteed if before else Decimal(0)
        line.limit_before = before.limit if before else Decimal(0)
    QuotaChangeItem.objects.bulk_update(lines, ["guaranteed_before", "limit_before"])
    if request.isolation_level:
        tenant_isolation_level_set(
            tenant=request.tenant,
            isolation_level=request.isolation_level,
            actor=actor,
            reason=f"request #{request.pk}: {request.reason}",
        )
    if request.production_priority is not None:
        tenant_production_priority_set(
            tenant=request.tenant,
            allowed=request.production_priority,
            actor=actor,
            reason=f"request #{request.pk}: {request.reason}",
        )
        # A tenant attribute every cluster compiles: push the tenant's other clusters too.
        quota_sets_resync(tenant=request.tenant, actor=actor, exclude=request.cluster)
    limits = quota_request_tenant_changes(request)
    if limits:
        tenant_limits_set(
            tenant=request.tenant,
            changes=limits,
            actor=actor,
            reason=f"request #{request.pk}: {request.reason}",
        )
        if "pod_bandwidth_max" in limits:
            # R27: its namespaces carry the cap on every cluster: push the others too.
            quota_sets_resync(tenant=request.tenant, actor=actor, exclude=request.cluster)
    _transition(
        request,
        RequestStatus.APPROVED,
        actor=actor,
        decided_at=timezone.now(),
        approved_generation=written.generation,
    )
    outbox_record(quota_set=written)
    # Older open requests for this tenant and cluster were checked against numbers that are
    # no longer in force: they must be checked again before anyone approves them.
    QuotaChangeRequest.objects.filter(
        tenant=request.tenant, cluster=request.cluster, status__in=OPEN_STATUSES
    ).exclude(pk=request.pk).update(needs_revalidation=True)


@transaction.atomic
def quota_requests_expire(*, now: Any = None) -> int:
    """Pending requests older than the policy allows become expired. Safe to run twice."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=approval_policy().pending_expires_after_days)
    expired = 0
    for request in QuotaChangeRequest.objects.filter(
        status=RequestStatus.PENDING, submitted_at__lt=cutoff
    ).select_related("tenant"):
        try:
            _transition(request, RequestStatus.EXPIRED, actor=None, decided_at=now)
            expired += 1
        except Conflict:
            continue  # decided meanwhile
    return expired


# --- onboarding -----------------------------------------------------------------------------


@transaction.atomic
def tenant_onboard(
    *,
    slug: str,
    display_name: str,
    tier: TierTemplate,
    cluster: Cluster,
    actor: User | None,
    gpu_flavor: ResourceFlavor | None = None,
    parent: Tenant | None = None,
    cohort: str = "",
    description: str = "",
    default_priority: str = Priority.DEFAULT,
    leads: Sequence[User] = (),
) -> Tenant:
    """Create a tenant with its namespaces, its leads and the tier's quotas on ``cluster``, all
    or nothing. The quotas go through an auto-approved request (source "system"), so the
    audit trail has no gap."""
    if parent is not None and parent.slug == slug:
        raise ValidationFailed.for_field("parent", "A tenant cannot be its own parent.")
    tenant = tenant_create(
        slug=slug,
        display_name=display_name,
        parent=parent,
        cohort=cohort,
        description=description,
        default_priority=default_priority,
        actor=actor,
    )
    for lead in leads:
        membership_set(tenant=tenant, user=lead, role=MembershipRole.LEAD, actor=actor)
    gpu_flavor = gpu_flavor or default_gpu_flavor(cluster=cluster)
    if gpu_flavor.cluster_id != cluster.pk:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} belongs to cluster {gpu_flavor.cluster.name!r}, not {cluster.name!r}",
        )
    if gpu_flavor.kind != FlavorKind.GPU:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} is a {gpu_flavor.kind} flavor, not whole GPUs",
        )
    try:
        request = quota_request_grant(
            tenant=tenant,
            cluster=cluster,
            items=tier_items(tier=tier, gpu_flavor=gpu_flavor),
            scheduling=_scheduling_fields(tier_scheduling(tier)),
            reason=f"onboarding on tier {tier.name}",
            actor=actor,
            tier=tier,
            # A tier that sets GPUs apart for inference, or a tenant whose work defaults to
            # production, is made to run at the production priority: the admin who onboards
            # it grants that too (R15).
            production_priority=True
            if (tier.inference_gpus or default_priority == Priority.PRODUCTION)
            else None,
        )
    except Conflict as exc:
        # The caller chose a tier, not items: name the tier and keep every reason.
        reasons = [m for messages in exc.fields.values() for m in messages]
        raise ValidationFailed(
            f"tier {tier.name!r} does not fit on {cluster.name}: {exc.message}",
            fields={"tier": reasons},
        ) from exc
    audit_record(
        actor=actor,
        action="tenant.onboarded",
        obj=tenant,
        tenant=tenant,
        after={
            "tier": tier.name,
            "cluster": cluster.name,
            "generation": request.approved_generation,
            "request": request.pk,
        },
    )
    return tenant


@transaction.atomic
def quota_request_grant(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    scheduling: Mapping[str, Any],
    reason: str,
    actor: User | None,
    tier: TierTemplate | None = None,
    production_priority: bool | None = None,
) -> QuotaChangeRequest:
    """A change the system makes (onboarding, seed data): an auto-approved request with
    source "system", applied like any approval (generation, audit, outbox), so the audit trail
    has no gap. Raises Conflict, naming the rule, when it does not fit."""
    request = QuotaChangeRequest.objects.create(
        tenant=tenant,
        cluster=cluster,
        requester=actor,
        source=AuditSource.SYSTEM,
        reason=reason,
        status=RequestStatus.PENDING,
        submitted_at=timezone.now(),
        tier=tier,
        production_priority=production_priority,
        **{k: v for k, v in scheduling.items() if k in SCHEDULING_FIELDS},
    )
    _store_items(request, items)
    _apply(request, actor=actor)
    return request


def _scheduling_fields(scheduling: SchedulingQuotas) -> dict[str, Any]:
    return {name: getattr(scheduling, name) for name in SCHEDULING_FIELDS}


# --- what the push says (hooks of ``quotas.sync``, registered in approvals/apps.py) ----------


def _requests_up_to(
    tenant_id: int, cluster_id: int, generation: int, statuses: Sequence[str]
) -> list[QuotaChangeRequest]:
    """The tenant's requests in ``statuses`` whose approved generation is at most
    ``generation``: a push of the state in force covers every older approval."""
    return list(
        QuotaChangeRequest.objects.filter(
            tenant_id=tenant_id,
            cluster_id=cluster_id,
            status__in=statuses,
            approved_generation__lte=generation,
        ).select_related("tenant", "requester")
    )


def _move(requests: Sequence[QuotaChangeRequest], to: str, **fields: Any) -> None:
    for request in requests:
        try:
            _transition(request, to, actor=None, **fields)
        except Conflict:
            continue  # another worker moved it first: fine, it is where it should be


def quota_requests_push_started(*, tenant_id: int, cluster_id: int, generation: int) -> None:
    """A push of the tenant's quotas up to ``generation`` starts: its approved requests are
    applying (``quotas.sync.PUSH_STARTED``)."""
    _move(
        _requests_up_to(tenant_id, cluster_id, generation, [RequestStatus.APPROVED]),
        RequestStatus.APPLYING,
    )


def quota_requests_pushed(
    *, tenant_id: int, cluster_id: int, generation: int, outcome: sync.PushOutcome
) -> None:
    """A push ended (``quotas.sync.PUSHED``, in the transaction that records it): the
    requests whose approved generation the cluster has now observed are applied; a push the
    cluster refused for good fails them with its message; one to be retried leaves them
    applying."""
    if outcome.ok:
        _move(
            _requests_up_to(
                tenant_id,
                cluster_id,
                generation,
                [RequestStatus.APPROVED, RequestStatus.APPLYING, RequestStatus.FAILED],
            ),
            RequestStatus.APPLIED,
            failure_message="",
        )
    elif not outcome.retryable:
        _move(
            _requests_up_to(
                tenant_id, cluster_id, generation, [RequestStatus.APPROVED, RequestStatus.APPLYING]
            ),
            RequestStatus.FAILED,
            failure_message=outcome.message[:2000],
        )


@transaction.atomic
def quota_request_retry(*, request: QuotaChangeRequest, actor: User) -> QuotaChangeRequest:
    """Push a failed request's quota set again (after the cluster or the portal was fixed)."""
    if not actor.is_platform_admin:
        raise PermissionDenied("Only platform admins retry a push.")
    request = _locked(request)
    if request.status != RequestStatus.FAILED:
        raise Conflict(
            f"Request #{request.pk} is {request.status}; only a failed push is retried.",
            fields={"status": [f"{request.status} cannot be retried"]},
        )
    row = outbox_reopen(tenant=request.tenant, cluster=request.cluster)
    if row is None:  # pragma: no cover - an approval always writes one
        raise Conflict(f"Request #{request.pk} has nothing to push.")
    audit_record(
        actor=actor,
        action="quota_request.retried",
        obj=request,
        tenant=request.tenant,
        object_id=f"#{request.pk}",
        before={"status": request.status, "failure_message": request.failure_message},
    )
    return request


def quota_request_dry_run(*, request: QuotaChangeRequest, server: bool = True) -> sync.DryRun:
    """What approving ``request`` would change in the cluster, object by object (computed
    from the compiler), and the cluster's own verdict from a server-side dry run."""
    return sync.change_dry_run(
        tenant=request.tenant,
        cluster=request.cluster,
        items=[
            QuotaSpec(i.flavor.name, i.resource, i.guaranteed, i.limit, i.lending_limit)
            for i in request.items.select_related("flavor")
        ],
        scheduling=_request_scheduling(request),
        server=server,
    )
