"""The rules a change keeps, as ordered lists of small named checks (STYLE 22).

A rule judges one input of a request and says what is wrong with it (nothing when it
holds); what it says lands on that input's field, so each error names what the requester
set: ``isolation_level``, ``items[2].flavor``, ``max_gpus_per_pod``. ``RULES`` judge what the
request says, in order; ``QUOTA_SET_RULES`` judge the quota set it would leave (its lines in
place of those they replace) and run only for a request that keeps every one of ``RULES``.
``judge`` runs a list over a ``Change``, the request with what is in force beside it.
Reads only."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property, partial
from typing import Any

from quotas.choices import FlavorKind
from quotas.isolation import flavor_isolation, isolation_rule_broken
from quotas.kube.bandwidth import bandwidth_words, pod_bandwidth_text
from quotas.kube.egress import MAX_RULES, EgressError, read_egress_rule
from quotas.kube.enforcement import POLICY_MIN_VERSION, kubernetes_minor
from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor
from quotas.quantity import to_display
from quotas.selectors import Capacity, flavor_capacities, gpu_units, tenant_gpu_units_by_cluster
from quotas.services import (
    POD_CAP_FIELDS,
    QuotaCheck,
    QuotaItem,
    SchedulingQuotas,
    cluster_hami_problem,
    department_check,
    fair_share_weight_check,
    inference_split_check,
    pod_caps_check,
    quota_items_check,
)
from tenants.choices import IsolationLevel
from tenants.models import Namespace, Tenant

SCHEDULING_FIELDS = (
    "max_running_jobs", "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs",
    "fair_share_weight", "max_gpus_per_pod", "max_cpu_per_pod", "max_memory_per_pod",
    "inference_gpus", "egress_rules",
)  # fmt: skip
# Tenant-wide limits a request may change (on every cluster): null leaves one as it is, 0
# removes it ("" for the per-pod bandwidth cap, R27, a quantity text).
TENANT_FIELDS = ("max_run_time_hours", "gpu_unit_cap", "pod_bandwidth_max")
MAX_RUN_TIME_HOURS_MAX = 24 * 366
Key = tuple[int, str]  # (flavor id, resource)


def line_of(item: QuotaItem) -> Key:
    return (item.flavor.pk, item.resource)


def quotas_in_force(
    tenant: Tenant, cluster: Cluster
) -> tuple[QuotaSet | None, dict[Key, QuotaItem]]:
    """The tenant's quota set on ``cluster`` (None: none yet) and its lines."""
    quota_set = QuotaSet.objects.filter(tenant=tenant, cluster=cluster).first()
    current: dict[Key, QuotaItem] = {}
    if quota_set is not None:
        for q in quota_set.quotas.select_related("flavor"):
            current[(q.flavor_id, q.resource)] = QuotaItem(
                q.flavor, q.resource, q.guaranteed, q.limit, q.lending_limit
            )
    return quota_set, current


def merged_scheduling(quota_set: QuotaSet | None, changes: Mapping[str, Any]) -> SchedulingQuotas:
    """The scheduling quotas in force with the ones ``changes`` sets (not None) in place."""
    values = {name: getattr(quota_set, name, None) for name in SCHEDULING_FIELDS}
    values.update({k: v for k, v in changes.items() if v is not None})
    return SchedulingQuotas(**values)


@dataclass(eq=False)
class Change:
    """A request as the rules read it, with what is in force beside it; what a rule reads from
    the database is read once, when a rule first needs it."""

    tenant: Tenant
    cluster: Cluster
    items: Sequence[QuotaItem]
    scheduling: Mapping[str, Any]
    isolation_level: str
    production_priority: bool | None
    tenant_changes: Mapping[str, Any]  # the tenant-wide limits it sets (None left out)
    quota_set: QuotaSet | None
    current: Mapping[Key, QuotaItem]  # the lines in force
    # What a caller read already (an approval, under the cluster's lock); None: read here.
    department: bool | None = None
    capacities_read: Mapping[Key, Capacity] | None = None
    guaranteed_elsewhere: Mapping[Key, Decimal] | None = None

    @cached_property
    def scheduling_given(self) -> dict[str, Any]:
        """The scheduling values the request sets (None leaves one as it is)."""
        return {name: value for name, value in self.scheduling.items() if value is not None}

    @property
    def only_quotas(self) -> bool:
        """Whether the request changes quotas only (no level, grant or tenant-wide limit)."""
        changes_level = bool(self.isolation_level) or self.production_priority is not None
        return not changes_level and not self.tenant_changes

    @cached_property
    def merged(self) -> dict[Key, QuotaItem]:
        """The quota set the request would leave: its lines in place of those in force."""
        return {**self.current, **{line_of(item): item for item in self.items}}

    @cached_property
    def order(self) -> list[Key]:
        return list(self.merged)

    @cached_property
    def whole(self) -> list[QuotaItem]:
        return [self.merged[key] for key in self.order]

    @cached_property
    def positions(self) -> dict[Key, int]:
        """Where each line of the request is in its items."""
        return {line_of(item): index for index, item in enumerate(self.items)}

    def line_key(self, index: int, attribute: str) -> str:
        """The field an error about line ``index`` of ``whole`` lands on: the request's own
        line, or the quota set for a line in force the request leaves alone."""
        position = self.positions.get(self.order[index])
        return "quota_set" if position is None else f"items[{position}].{attribute}"

    @cached_property
    def limits_in_force(self) -> tuple[int | None, Decimal | None, str]:
        """The tenant's maximum run time, GPU unit cap and pod bandwidth cap in force: read
        again for a request that changes one (the tenant passed in may be older)."""
        tenant = self.tenant
        if not self.tenant_changes:
            return tenant.max_run_time_hours, tenant.gpu_unit_cap, tenant.pod_bandwidth_max
        return (
            Tenant.objects.filter(pk=tenant.pk)
            .values_list("max_run_time_hours", "gpu_unit_cap", "pod_bandwidth_max")
            .get()
        )

    @cached_property
    def is_department(self) -> bool:
        if self.department is not None:
            return self.department
        return self.tenant.children.exists()

    @cached_property
    def capacities(self) -> Mapping[Key, Capacity]:
        if self.capacities_read is not None:
            return self.capacities_read
        return flavor_capacities(cluster=self.cluster)

    @cached_property
    def merged_scheduling(self) -> SchedulingQuotas:
        return merged_scheduling(self.quota_set, self.scheduling)

    @cached_property
    def pod_caps(self) -> QuotaCheck:
        """R16 on the quota set the request would leave (``quotas.services.pod_caps_check``)."""
        return pod_caps_check(
            tenant=self.tenant.slug,
            items=self.whole,
            caps={name: getattr(self.merged_scheduling, name) for name in POD_CAP_FIELDS},
            requested=set(self.scheduling_given),
        )

    @cached_property
    def inference_split(self) -> QuotaCheck:
        """R17 on the quota set the request would leave, with the production grant it asks for
        or the one in force (``quotas.services.inference_split_check``)."""
        allowed = self.production_priority
        if allowed is None:
            allowed = self.tenant.production_priority_allowed
        return inference_split_check(
            tenant=self.tenant.slug,
            items=self.whole,
            inference_gpus=self.merged_scheduling.inference_gpus,
            production_allowed=allowed,
        )


# --- the kinds of rule ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A rule about the input named ``field``: what ``judge`` says is an error there.
    ``final``: a problem found here ends the judging. ``in_force_warns`` (a scheduling value):
    where the request leaves the value as it is, the problem is with the one in force, and a
    warning only (lowering a limit is never blocked by a cap set earlier)."""

    field: str
    judge: Callable[[Change], Iterable[str]]
    final: bool = False
    in_force_warns: bool = False

    def apply(self, change: Change, found: QuotaCheck) -> None:
        warns = self.in_force_warns and self.field not in change.scheduling_given
        for message in self.judge(change):
            if warns:
                found.warnings.append(message)
            else:
                found.error(self.field, message)


@dataclass(frozen=True)
class LineRule:
    """A rule about each line of the request: errors on ``items[i].<attribute>`` (on
    ``items[i]`` for the line as a whole, ``attribute`` "")."""

    attribute: str
    judge: Callable[[Change, int], Iterable[str]]
    final: bool = False

    def apply(self, change: Change, found: QuotaCheck) -> None:
        for index in range(len(change.items)):
            key = f"items[{index}].{self.attribute}" if self.attribute else f"items[{index}]"
            for message in self.judge(change, index):
                found.error(key, message)


@dataclass(frozen=True)
class SchedulingRule:
    """A rule about each scheduling value the request sets: errors on that value's field."""

    judge: Callable[[Change, str], Iterable[str]]
    final: bool = False

    def apply(self, change: Change, found: QuotaCheck) -> None:
        for name in change.scheduling_given:
            for message in self.judge(change, name):
                found.error(name, message)


@dataclass(frozen=True)
class QuotaSetRule:
    """A rule of ``quotas.services`` about every line of the quota set the request would leave,
    handed ``Change.line_key``: its errors land on the request's lines, or on ``quota_set``
    for a line in force the request leaves alone."""

    judge: Callable[[Change], QuotaCheck]
    final: bool = False

    def apply(self, change: Change, found: QuotaCheck) -> None:
        for key, messages in self.judge(change).errors.items():
            for message in messages:
                found.error(key, message)


@dataclass(frozen=True)
class Notice:
    """What the request should know and may go ahead with: warnings only."""

    judge: Callable[[Change], Iterable[str]]
    final: bool = False

    def apply(self, change: Change, found: QuotaCheck) -> None:
        found.warnings.extend(self.judge(change))


@dataclass(frozen=True)
class CheckRule:
    """A rule that finds errors (on the fields it names) and warnings both."""

    judge: Callable[[Change], QuotaCheck]
    final: bool = False

    def apply(self, change: Change, found: QuotaCheck) -> None:
        checked = self.judge(change)
        for key, messages in checked.errors.items():
            for message in messages:
                found.error(key, message)
        found.warnings.extend(checked.warnings)


AnyRule = Rule | LineRule | SchedulingRule | QuotaSetRule | Notice | CheckRule


def judge(change: Change, rules: Sequence[AnyRule]) -> QuotaCheck:
    """What ``rules`` find in ``change``, in their order (a final rule that finds a problem
    ends it)."""
    found = QuotaCheck()
    for rule in rules:
        rule.apply(change, found)
        if rule.final and found.errors:
            break
    return found


# --- the tenant and what the request changes ------------------------------------------------


def tenant_not_archived(change: Change) -> Iterable[str]:
    tenant = change.tenant
    if tenant.archived_at is not None:
        yield (
            f"{tenant.slug} is archived: it gets no new quotas until a platform admin unarchives it"
        )


def line_listed_once(change: Change, index: int) -> Iterable[str]:
    item = change.items[index]
    earlier = [i for i, other in enumerate(change.items[:index]) if line_of(other) == line_of(item)]
    if earlier:
        yield (
            f"{item.resource} on {item.flavor.name} is listed twice (items {earlier[-1]} and {index})"
        )


def request_changes_something(change: Change) -> Iterable[str]:
    if not change.items and change.only_quotas and not change.scheduling_given:
        yield "a request must change at least one quota"


def line_changes_something(change: Change, index: int) -> Iterable[str]:
    """The one rule the form and the API share: a quota line that leaves the one in force as
    it is has no place in a request (approved later, it would put back stale numbers over a
    newer change)."""
    item = change.items[index]
    before = change.current.get(line_of(item))
    if not change.only_quotas or before is None:
        return
    if (before.guaranteed, before.limit, before.lending_limit) != (
        item.guaranteed,
        item.limit,
        item.lending_limit,
    ):
        return
    shown = f"{to_display(item.guaranteed, item.resource)} guaranteed, " + (
        f"{to_display(item.limit, item.resource)} limit"
    )
    yield (
        f"{item.resource} on {item.flavor.name} is already {shown}: this line changes "
        "nothing; leave it out"
    )


def scheduling_changes_something(change: Change, name: str) -> Iterable[str]:
    """A request of scheduling values only, each already in force, is refused naming each."""
    given = change.scheduling_given
    if not change.only_quotas or change.items:
        return
    if all(getattr(change.quota_set, field, None) == value for field, value in given.items()):
        yield f"{name} is already {given[name]}: the request changes nothing"


# --- isolation (R23) and the production grant (R15) -----------------------------------------


def flavor_isolation_broken(level: str, flavor: ResourceFlavor) -> str | None:
    """None when a tenant at ``level`` may hold quota on ``flavor``, else the rule in words:
    what ``line_allowed_at_isolation_level`` refuses, and what the request form offers."""
    return isolation_rule_broken(
        level=level,
        flavor_name=flavor.name,
        isolation=flavor_isolation(
            kind=flavor.kind,
            node_taints=flavor.node_taints,
            time_slicing_replicas=flavor.time_slicing_replicas,
        ),
    )


def _new_level(change: Change) -> str:
    """The isolation level the request asks for, if it is one and not the one in force."""
    level = change.isolation_level
    if level in IsolationLevel.values and level != change.tenant.isolation_level:
        return level
    return ""


def isolation_level_known(change: Change) -> Iterable[str]:
    level = change.isolation_level
    if level and level not in IsolationLevel.values:
        yield f"{level!r} is not an isolation level; choose one of {', '.join(IsolationLevel.values)}"


def isolation_level_changes(change: Change) -> Iterable[str]:
    level = change.isolation_level
    if level and level == change.tenant.isolation_level:
        yield (
            f"{change.tenant.slug} is already at {IsolationLevel(level).label.lower()}: "
            "the request changes nothing there; leave it out"
        )


def line_allowed_at_isolation_level(change: Change, index: int) -> Iterable[str]:
    """R23: the tenant's isolation level (the one asked for, else the one in force) decides
    which flavors its quotas may be on; a line lowering one to 0 is fine."""
    if change.isolation_level and not _new_level(change):
        return  # no level to judge by: isolation_level says why
    item = change.items[index]
    level = change.isolation_level or change.tenant.isolation_level
    broken = flavor_isolation_broken(level, item.flavor) if item.limit > 0 else None
    if broken:
        yield broken


def line_vgpu_cluster_has_hami(change: Change, index: int) -> Iterable[str]:
    """A line on a vGPU flavor needs HAMi, new enough, on its cluster (``quotas.vgpu``):
    without it nothing would cap the memory and compute the quota promises. A line lowering
    one to 0 is fine."""
    item = change.items[index]
    if item.flavor.kind != FlavorKind.VGPU or item.limit <= 0:
        return
    problem = cluster_hami_problem(change.cluster)
    if problem:
        yield f"{item.flavor.name} is a vGPU flavor and {problem}"


def quotas_held_allowed_at_new_level(change: Change) -> Iterable[str]:
    """R23: a new level is refused while any of the tenant's quotas, on any cluster, is on a
    flavor it does not allow, naming each (the request's own lines are judged as lines)."""
    level = _new_level(change)
    if not level:
        return
    tenant, cluster = change.tenant, change.cluster
    requested = {line_of(i) for i in change.items}
    held = [(cluster.name, q) for key, q in change.current.items() if key not in requested]
    others = Quota.objects.filter(quota_set__tenant=tenant).exclude(quota_set__cluster=cluster)
    for q in others.select_related("flavor", "quota_set__cluster"):
        held.append(
            (q.quota_set.cluster.name, QuotaItem(q.flavor, q.resource, q.guaranteed, q.limit))
        )
    for cluster_name, line in sorted(held, key=lambda h: (h[0], h[1].flavor.name, h[1].resource)):
        broken = flavor_isolation_broken(level, line.flavor) if line.limit > 0 else None
        if broken:
            yield (
                f"{broken}; {tenant.slug} holds a limit of "
                f"{to_display(line.limit, line.resource)} {line.resource} on {cluster_name}: "
                "lower it to 0 first"
            )


def production_priority_changes(change: Change) -> Iterable[str]:
    asked = change.production_priority
    if asked is not None and asked == change.tenant.production_priority_allowed:
        state = "may already" if asked else "already may not"
        yield (
            f"{change.tenant.slug} {state} use the production priority: the request changes "
            "nothing there; leave it out"
        )


# --- the tenant-wide limits: run time, pod bandwidth (R27), GPU unit cap (R22) ---------------


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


def pod_bandwidth_allowed(change: Change) -> Iterable[str]:
    if "pod_bandwidth_max" not in change.tenant_changes:
        return
    problem = pod_bandwidth_problem(
        change.tenant_changes["pod_bandwidth_max"],
        tenant=change.tenant,
        cluster=change.cluster,
        in_force=change.limits_in_force[2],
    )
    if problem:
        yield problem


def run_time_in_range(change: Change) -> Iterable[str]:
    if "max_run_time_hours" not in change.tenant_changes:
        return
    hours = _whole(change.tenant_changes["max_run_time_hours"])
    if hours is None or not 0 <= hours <= MAX_RUN_TIME_HOURS_MAX:
        yield (
            f"a whole number of hours from 1 to {MAX_RUN_TIME_HOURS_MAX} (a year), or 0 to "
            "go back to the platform's maximum run time"
        )


def run_time_changes(change: Change) -> Iterable[str]:
    if "max_run_time_hours" not in change.tenant_changes:
        return
    hours = _whole(change.tenant_changes["max_run_time_hours"])
    if hours is None or not 0 <= hours <= MAX_RUN_TIME_HOURS_MAX:
        return  # run_time_in_range says why
    if (hours or None) == change.limits_in_force[0]:
        now = f"{hours} hours" if hours else "the platform's"
        yield (
            f"{change.tenant.slug}'s maximum run time is already {now}: the request changes "
            "nothing there; leave it out"
        )


def _cap_asked(change: Change) -> Decimal | None:
    """The GPU unit cap the request sets, when it sets a valid one (0 removes the cap)."""
    if "gpu_unit_cap" not in change.tenant_changes:
        return None
    asked = _amount(change.tenant_changes["gpu_unit_cap"])
    if asked is None or asked < 0 or asked != asked.quantize(Decimal("0.001")):
        return None
    return asked


def gpu_unit_cap_valid(change: Change) -> Iterable[str]:
    if "gpu_unit_cap" in change.tenant_changes and _cap_asked(change) is None:
        yield "a number of GPU units (at most 3 decimals), or 0 to remove the cap"


def gpu_unit_cap_changes(change: Change) -> Iterable[str]:
    asked = _cap_asked(change)
    if asked is not None and (asked or None) == change.limits_in_force[1]:
        shown = _units(asked) if asked else "no cap"
        yield (
            f"{change.tenant.slug}'s cap is already {shown}: the request changes nothing there; "
            "leave it out"
        )


def _over_cap(change: Change, cap: Decimal, *, new_cap: bool) -> Iterable[str]:
    """R22: the tenant's GPU limits summed over its clusters (this request's lines in place of
    those they replace, each times its GPU model's weight) must fit ``cap``, naming the cap,
    the sum and each cluster's part. Over a cap in force (a flavor's weight rose since), a
    request that lowers the sum passes."""
    tenant, cluster = change.tenant, change.cluster
    parts = tenant_gpu_units_by_cluster(tenant_id=tenant.pk, exclude_cluster_id=cluster.pk)
    parts[cluster.name] = sum(
        (gpu_units(i.limit, resource=i.resource, weight=i.flavor.gpu_weight)
         for i in change.merged.values()),
        Decimal(0),
    )  # fmt: skip
    parts = dict(sorted(parts.items()))
    total = sum(parts.values(), Decimal(0))
    held = sum(tenant_gpu_units_by_cluster(tenant_id=tenant.pk).values(), Decimal(0))
    if total > cap and (new_cap or total > held):
        shown = ", ".join(f"{name} {_units(units)}" for name, units in parts.items())
        yield (
            f"{tenant.slug}'s GPU limits would add up to {_units(total)} over every cluster "
            f"({shown}), above its cap of {_units(cap)} (each limit counts times its GPU "
            "model's weight)"
        )


def new_cap_holds_limits(change: Change) -> Iterable[str]:
    asked = _cap_asked(change)
    if asked and asked != change.limits_in_force[1]:
        yield from _over_cap(change, asked, new_cap=True)


def _cap_in_force(change: Change) -> Decimal | None:
    """The cap the request leaves as it is (None: it changes the cap, or there is none)."""
    return None if "gpu_unit_cap" in change.tenant_changes else change.limits_in_force[1]


def lines_fit_cap(change: Change) -> Iterable[str]:
    cap = _cap_in_force(change)
    if change.items and cap is not None:
        yield from _over_cap(change, cap, new_cap=False)


def quota_set_fits_cap(change: Change) -> Iterable[str]:
    cap = _cap_in_force(change)
    if not change.items and cap is not None:
        yield from _over_cap(change, cap, new_cap=False)


# --- the quota set the request would leave --------------------------------------------------


def pod_cap_reachable(name: str, change: Change) -> Iterable[str]:
    """R16: a per-pod cap above zero and within the largest limit on one flavor."""
    return change.pod_caps.errors.get(name, [])


def inference_split_fits(change: Change) -> Iterable[str]:
    """R17: the GPUs set apart for inference fit the GPU limit, with the production grant."""
    if change.production_priority is False and "inference_gpus" not in change.scheduling_given:
        return []  # the split in force holds the grant: production_kept_for_split says so
    return change.inference_split.errors.get("inference_gpus", [])


def production_kept_for_split(change: Change) -> Iterable[str]:
    """R15: no grant withdrawn while a split in force still sets GPUs apart for production
    work."""
    if change.production_priority is not False or "inference_gpus" in change.scheduling_given:
        return
    if change.inference_split.errors:
        yield (
            f"{change.tenant.slug} sets {change.merged_scheduling.inference_gpus} GPUs apart for "
            "inference, which runs at the production priority: set that split to 0 in the same "
            "request first"
        )


def lines_keep_cluster_rules(change: Change) -> QuotaCheck:
    """Capacity, elastic cap, MIG instances, time-sliced shares (``quota_items_check``)."""
    return quota_items_check(
        cluster=change.cluster,
        items=change.whole,
        quota_set=change.quota_set,
        department=change.is_department,
        capacities=change.capacities,
        line_key=change.line_key,
        guaranteed_elsewhere=change.guaranteed_elsewhere,
    )


def lines_keep_department_rules(change: Change) -> QuotaCheck:
    """R14: a team within its department's cap, a department's cap over its teams."""
    return department_check(
        tenant=change.tenant,
        cluster=change.cluster,
        items=change.whole,
        department=change.is_department,
        line_key=change.line_key,
    )


def fair_share_weight_valid(change: Change) -> Iterable[str]:
    found = QuotaCheck()
    fair_share_weight_check(found, change.scheduling.get("fair_share_weight"))
    return found.errors.get("fair_share_weight", [])


def pod_caps_in_force(change: Change) -> Iterable[str]:
    return change.pod_caps.warnings


def inference_split_in_force(change: Change) -> Iterable[str]:
    return change.inference_split.warnings


# --- egress exceptions ----------------------------------------------------------------------


def egress_rules_check(change: Change) -> QuotaCheck:
    """The egress exceptions a request asks for (``quotas.kube.egress``), each error on
    ``egress_rules[i].<attribute>``. A namespace of the tenant's own is refused (its pods reach
    it already); one of another tenant only when the rule names that tenant, and then the
    deciding admin is warned (that tenant's policy still refuses the traffic unless it lets it
    in); a tenant named for a namespace no tenant has is refused."""
    found = QuotaCheck()
    rules = change.scheduling.get("egress_rules")
    if rules is None:
        return found
    if not isinstance(rules, list):
        found.error("egress_rules", "a list of egress rules")
        return found
    if len(rules) > MAX_RULES:
        found.error("egress_rules", f"at most {MAX_RULES} egress rules")
        return found
    for index, rule in enumerate(rules):
        key = f"egress_rules[{index}]"
        try:
            spec = read_egress_rule(rule)
        except EgressError as error:
            found.error(f"{key}.{error.attribute}" if error.attribute else key, error.message)
            continue
        if not spec.namespace:
            continue
        owner = Namespace.objects.filter(name=spec.namespace).select_related("tenant").first()
        if owner is None:
            if spec.tenant:
                found.error(
                    f"{key}.tenant", f"no tenant has the namespace {spec.namespace}: leave it out"
                )
        elif owner.tenant_id == change.tenant.pk:
            found.error(
                f"{key}.namespace",
                f"{spec.namespace} is {change.tenant.slug}'s own namespace: its pods reach it "
                "already",
            )
        elif spec.tenant != owner.tenant.slug:
            found.error(
                f"{key}.namespace",
                f"{spec.namespace} is another tenant's namespace: name that tenant in the rule "
                '("tenant") to ask for egress there',
            )
        else:
            found.warnings.append(
                f"{change.tenant.slug} asks for egress into {owner.tenant.slug}'s namespace "
                f"{spec.namespace} ({spec.protocol} {spec.port}): approve it only if "
                f"{owner.tenant.slug} agrees; its own policy still refuses the traffic unless it "
                "lets it in."
            )
    return found


# --- the lists ------------------------------------------------------------------------------

RULES: tuple[AnyRule, ...] = (
    Rule("tenant", tenant_not_archived, final=True),
    LineRule("resource", line_listed_once),
    Rule("items", request_changes_something),
    LineRule("", line_changes_something),
    SchedulingRule(scheduling_changes_something),
    Rule("isolation_level", isolation_level_known),
    Rule("isolation_level", isolation_level_changes),
    LineRule("flavor", line_allowed_at_isolation_level),
    LineRule("flavor", line_vgpu_cluster_has_hami),
    Rule("isolation_level", quotas_held_allowed_at_new_level),
    Rule("production_priority", production_priority_changes),
    Rule("pod_bandwidth_max", pod_bandwidth_allowed),
    CheckRule(egress_rules_check),
    Rule("max_run_time_hours", run_time_in_range),
    Rule("max_run_time_hours", run_time_changes),
    Rule("gpu_unit_cap", gpu_unit_cap_valid),
    Rule("gpu_unit_cap", gpu_unit_cap_changes),
    Rule("gpu_unit_cap", new_cap_holds_limits),
    Rule("items", lines_fit_cap),
    Rule("quota_set", quota_set_fits_cap),
)

QUOTA_SET_RULES: tuple[AnyRule, ...] = (
    *(Rule(name, partial(pod_cap_reachable, name), in_force_warns=True) for name in POD_CAP_FIELDS),
    Rule("inference_gpus", inference_split_fits, in_force_warns=True),
    Rule("production_priority", production_kept_for_split),
    QuotaSetRule(lines_keep_cluster_rules),
    QuotaSetRule(lines_keep_department_rules),
    Rule("fair_share_weight", fair_share_weight_valid),
    Notice(pod_caps_in_force),
    Notice(inference_split_in_force),
)
