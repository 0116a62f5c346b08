"""ResourceQuota usage and admission, as Kubernetes' quota evaluators count it.

* Pods (``pkg/quota/v1/evaluator/core/pods.go``): ``pods``, ``count/pods``, ``cpu``/``memory``
  (= requests), ``requests.*``/``limits.*`` of cpu, memory and ephemeral-storage, hugepages,
  ``requests.<extended>`` (e.g. ``requests.nvidia.com/gpu``; a limit alone counts because pod
  defaulting copies it to the request). A pod's requests are the sum of its containers, or its
  largest init container if larger (sidecars, ``restartPolicy: Always``, run alongside), plus
  ``spec.overhead``. Pods in phase Succeeded or Failed count only in ``count/pods``. Scopes:
  PriorityClass (In, NotIn, Exists, DoesNotExist), Terminating / NotTerminating, BestEffort /
  NotBestEffort, CrossNamespacePodAffinity.
* PersistentVolumeClaims (``persistent_volume_claims.go``): ``persistentvolumeclaims``,
  ``count/persistentvolumeclaims``, ``requests.storage`` and, per storage class,
  ``<class>.storageclass.storage.k8s.io/requests.storage`` and ``.../persistentvolumeclaims``.
* Every other namespaced kind: ``count/<plural>.<group>`` (``count/jobs.batch``), and the legacy
  names ``configmaps``, ``secrets``, ``resourcequotas``.

Admission (``plugin/pkg/admission/resourcequota``): pods on create; PVCs on create and update
(charged the increase); other kinds on create. Every quota of the namespace that matches (a
tracked resource, and every scope) must allow it, else ``exceeded quota: NAME, requested: ...,
used: ..., limited: ...``; a quota tracking cpu or memory refuses a pod whose containers do not
all set them (``failed quota: NAME: must specify ...``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

from devcluster.limitranger import all_containers
from devcluster.quantity import Quantity, ResourceList, add, maximum, pretty, resource_list

STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"
STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
TERMINAL_PHASES = ("Succeeded", "Failed")
LEGACY_COUNT_NAMES = {
    "configmaps": "configmaps",
    "secrets": "secrets",
    "resourcequotas": "resourcequotas",
}
ONE = Quantity.of(1)

_POD_RESOURCES = frozenset(
    {
        "count/pods",
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
    }
)
# The cpu/memory keys a pod must set in every container when a quota tracks them.
_MUST_SPECIFY = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
_PVC_RESOURCES = ("persistentvolumeclaims", "requests.storage")

Scope = dict[str, Any]  # {"scopeName", "operator", "values"}


class QuotaRefused(Exception):
    """The text after ``is forbidden: `` of a quota refusal."""


# Resource names ---------------------------------------------------------------------------------


def _is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def _is_extended(name: str) -> bool:
    return not _is_native(name) and not name.startswith("requests.")


def count_name(plural: str, group: str) -> str:
    return f"count/{plural}.{group}" if group else f"count/{plural}"


# Scopes -----------------------------------------------------------------------------------------


def quota_scopes(quota: dict[str, Any]) -> list[Scope]:
    """``spec.scopes`` (as Exists) and ``spec.scopeSelector.matchExpressions``."""
    spec = quota.get("spec") or {}
    scopes: list[Scope] = [{"scopeName": s, "operator": "Exists"} for s in spec.get("scopes") or []]
    return scopes + list((spec.get("scopeSelector") or {}).get("matchExpressions") or [])


def _selector_matches(scope: Scope, value: str | None) -> bool:
    """A scope selector requirement as a label selector over ``{scopeName: value}``."""
    operator, values = scope.get("operator"), scope.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    return False


def _best_effort(pod: dict[str, Any]) -> bool:
    for _, container in all_containers(pod):
        resources = container.get("resources") or {}
        for key in ("requests", "limits"):
            if any(name in ("cpu", "memory") for name in resources.get(key) or {}):
                return False
    return True


def _cross_namespace_affinity(pod: dict[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            (w.get("podAffinityTerm") or {})
            for w in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms):
            return True
    return False


def _pod_scope(scope: Scope, pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    name = scope.get("scopeName")
    if name == "PriorityClass":
        return _selector_matches(scope, spec.get("priorityClassName") or None)
    terminating = isinstance(spec.get("activeDeadlineSeconds"), int) and (
        spec["activeDeadlineSeconds"] >= 0
    )
    return {
        "Terminating": terminating,
        "NotTerminating": not terminating,
        "BestEffort": _best_effort(pod),
        "NotBestEffort": not _best_effort(pod),
        "CrossNamespacePodAffinity": _cross_namespace_affinity(pod),
    }.get(str(name), False)


def _pvc_scope(scope: Scope, pvc: dict[str, Any]) -> bool:
    if scope.get("scopeName") != "VolumeAttributesClass":
        return False
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    names = {spec.get("volumeAttributesClassName"), status.get("currentVolumeAttributesClassName")}
    return any(_selector_matches(scope, name or None) for name in names)


# Evaluators -------------------------------------------------------------------------------------


class Evaluator:
    """How one kind is counted: the quota keys it answers, its usage, its scopes."""

    operations: tuple[str, ...] = ("CREATE",)

    def matching(self, names: Iterable[str]) -> list[str]:
        raise NotImplementedError

    def usage(self, obj: dict[str, Any]) -> ResourceList:
        raise NotImplementedError

    def scope_matches(self, scope: Scope, obj: dict[str, Any]) -> bool:
        return False

    def constraints(self, required: list[str], obj: dict[str, Any]) -> str:
        return ""

    def matches(self, quota: dict[str, Any], obj: dict[str, Any]) -> bool:
        """``generic.Matches``: the quota tracks a resource of this kind, and every scope."""
        if not self.matching(hard_of(quota)):
            return False
        return all(self.scope_matches(scope, obj) for scope in quota_scopes(quota))


def _terminated(pod: dict[str, Any], now: datetime) -> bool:
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return True
    metadata = pod.get("metadata") or {}
    deleted, grace = metadata.get("deletionTimestamp"), metadata.get("deletionGracePeriodSeconds")
    if deleted and isinstance(grace, int):
        try:
            when = datetime.strptime(str(deleted), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return False
        return now > when + timedelta(seconds=grace)
    return False


def _resize_infeasible(pod: dict[str, Any]) -> bool:
    """``IsPodResizeInfeasible``: the PodResizePending condition with reason Infeasible (or
    the older ``status.resize: Infeasible``)."""
    status = pod.get("status") or {}
    if status.get("resize") == "Infeasible":
        return True
    return any(
        isinstance(c, dict)
        and c.get("type") == "PodResizePending"
        and c.get("status") == "True"
        and c.get("reason") == "Infeasible"
        for c in status.get("conditions") or ()
    )


def _statuses(pod: dict[str, Any], label: str) -> dict[str, dict[str, Any]]:
    key = "containerStatuses" if label == "container" else "initContainerStatuses"
    return {
        str(s.get("name")): s
        for s in (pod.get("status") or {}).get(key) or ()
        if isinstance(s, dict) and isinstance(s.get("resources"), dict)
    }


_MILLI = Decimal("0.001")


def _milli_cpu(values: ResourceList) -> ResourceList:
    """CPU is charged in whole milli-cores, rounded up (``1n`` counts ``1m``)."""
    cpu = values.get("cpu")
    if cpu is None or cpu.value == cpu.value.quantize(_MILLI, rounding=ROUND_CEILING):
        return values
    return {
        **values,
        "cpu": Quantity(cpu.value.quantize(_MILLI, rounding=ROUND_CEILING), cpu.format),
    }


def _container_lists(
    container: dict[str, Any], status: dict[str, Any] | None = None, infeasible: bool = False
) -> tuple[ResourceList, ResourceList]:
    """A container's requests and limits; with a status carrying ``resources`` (an in-place
    resize), ``determineContainerReqs``/``Limits``: max(spec, status), or the status alone
    when the resize is infeasible."""
    resources = container.get("resources") or {}
    requests = _milli_cpu(resource_list(resources.get("requests")))
    limits = _milli_cpu(resource_list(resources.get("limits")))
    if status is None:
        return requests, limits
    actual = status.get("resources") or {}
    actual_requests = _milli_cpu(resource_list(actual.get("requests")))
    actual_limits = _milli_cpu(resource_list(actual.get("limits")))
    if infeasible:
        return actual_requests, actual_limits
    return maximum(requests, actual_requests), maximum(limits, actual_limits)


def pod_requests_limits(pod: dict[str, Any]) -> tuple[ResourceList, ResourceList]:
    """``resourcehelper.PodRequests`` / ``PodLimits`` with ``UseStatusResources`` (the quota
    evaluator's, InPlacePodVerticalScaling being on): a resized container counts
    max(spec, status.containerStatuses[].resources)."""
    spec = pod.get("spec") or {}
    infeasible = _resize_infeasible(pod)
    statuses = {label: _statuses(pod, label) for label in ("container", "init container")}

    def lists(label: str, container: dict[str, Any]) -> tuple[ResourceList, ResourceList]:
        status = statuses[label].get(str(container.get("name")))
        if label == "init container" and container.get("restartPolicy") != "Always":
            status = None  # only sidecars are resized in place
        return _container_lists(container, status, infeasible)

    totals: list[ResourceList] = [{}, {}]
    for label, container in all_containers(pod):
        if label == "container":
            for index, values in enumerate(lists(label, container)):
                totals[index] = add(totals[index], values)
    results: list[ResourceList] = []
    for index in (0, 1):
        total = totals[index]
        sidecars: ResourceList = {}
        init_peak: ResourceList = {}
        for label, container in all_containers(pod):
            if label != "init container":
                continue
            values = lists(label, container)[index]
            if container.get("restartPolicy") == "Always":
                total = add(total, values)
                sidecars = add(sidecars, values)
                values = sidecars
            else:
                values = add(values, sidecars)
            init_peak = maximum(init_peak, values)
        results.append(maximum(total, init_peak))
    requests, limits = results
    overhead = resource_list(spec.get("overhead"))
    requests = add(requests, overhead)
    limits = {
        name: value + overhead[name] if name in overhead else value
        for name, value in limits.items()
    }
    return requests, limits


def _compute_usage(requests: ResourceList, limits: ResourceList) -> ResourceList:
    """``podComputeUsageHelper``."""
    result: ResourceList = {"pods": ONE}
    for name in ("cpu", "memory", "ephemeral-storage"):
        if name in requests:
            result[name] = result[f"requests.{name}"] = requests[name]
        if name in limits:
            result[f"limits.{name}"] = limits[name]
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            result[name] = result[f"requests.{name}"] = value
        elif _is_extended(name):
            result[f"requests.{name}"] = value
    return result


class PodEvaluator(Evaluator):
    def __init__(self, now: Callable[[], datetime]) -> None:
        self.now = now

    def matching(self, names: Iterable[str]) -> list[str]:
        return [
            n
            for n in names
            if n in _POD_RESOURCES
            or n.startswith(("hugepages-", "requests.hugepages-"))
            or (not _is_native(n) and n.startswith("requests."))
        ]

    def usage(self, obj: dict[str, Any]) -> ResourceList:
        result: ResourceList = {"count/pods": ONE}
        if _terminated(obj, self.now()):
            return result
        return add(result, _compute_usage(*pod_requests_limits(obj)))

    def scope_matches(self, scope: Scope, obj: dict[str, Any]) -> bool:
        return _pod_scope(scope, obj)

    def constraints(self, required: list[str], obj: dict[str, Any]) -> str:
        needed = set(required) & _MUST_SPECIFY
        missing: dict[str, set[str]] = {}
        for _, container in all_containers(obj):
            present = set(_compute_usage(*_container_lists(container)))
            for name in needed - present:
                missing.setdefault(name, set()).add(str(container.get("name", "")))
        if not missing:
            return ""
        parts = [f"{name} for: {','.join(sorted(missing[name]))}" for name in sorted(missing)]
        return "must specify " + "; ".join(parts)


class PvcEvaluator(Evaluator):
    operations = ("CREATE", "UPDATE")

    def matching(self, names: Iterable[str]) -> list[str]:
        return [
            n
            for n in names
            if n in ("count/persistentvolumeclaims", *_PVC_RESOURCES)
            or any(n.endswith(STORAGE_CLASS_SUFFIX + r) for r in _PVC_RESOURCES)
        ]

    def usage(self, obj: dict[str, Any]) -> ResourceList:
        result: ResourceList = {"persistentvolumeclaims": ONE, "count/persistentvolumeclaims": ONE}
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        storage_class = annotations.get(STORAGE_CLASS_ANNOTATION) or (
            (obj.get("spec") or {}).get("storageClassName") or ""
        )
        if storage_class:
            result[f"{storage_class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"] = ONE
        requested = resource_list(((obj.get("spec") or {}).get("resources") or {}).get("requests"))
        storage = requested.get("storage")
        allocated = resource_list((obj.get("status") or {}).get("allocatedResources")).get(
            "storage"
        )
        if allocated is not None and (storage is None or allocated.value > storage.value):
            storage = allocated
        if storage is not None:
            storage = Quantity(
                storage.value.to_integral_value(rounding=ROUND_CEILING), storage.format
            )
            result["requests.storage"] = storage
            if storage_class:
                result[f"{storage_class}{STORAGE_CLASS_SUFFIX}requests.storage"] = storage
        return result

    def scope_matches(self, scope: Scope, obj: dict[str, Any]) -> bool:
        return _pvc_scope(scope, obj)


class CountEvaluator(Evaluator):
    """``generic.NewObjectCountEvaluator``: one per kind, no scopes."""

    def __init__(self, plural: str, group: str) -> None:
        self.names = {count_name(plural, group)}
        if not group and plural in LEGACY_COUNT_NAMES:
            self.names.add(LEGACY_COUNT_NAMES[plural])

    def matching(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if n in self.names]

    def usage(self, obj: dict[str, Any]) -> ResourceList:
        return dict.fromkeys(self.names, ONE)


def evaluator_for(plural: str, group: str, now: Callable[[], datetime]) -> Evaluator:
    if not group and plural == "pods":
        return PodEvaluator(now)
    if not group and plural == "persistentvolumeclaims":
        return PvcEvaluator()
    return CountEvaluator(plural, group)


# Quotas -----------------------------------------------------------------------------------------


def hard_of(quota: dict[str, Any]) -> ResourceList:
    return resource_list((quota.get("spec") or {}).get("hard"))


Kinds = Iterable[tuple[Evaluator, Callable[[], list[dict[str, Any]]]]]


def used(quota: dict[str, Any], kinds: Kinds) -> ResourceList:
    """What the quota controller writes to ``status.used``: for every tracked resource, the
    usage of the objects of the namespace (``kinds``: each evaluator with a function listing
    its objects) that match the quota's scopes; 0 where nothing counts."""
    hard = hard_of(quota)
    scopes = quota_scopes(quota)
    total: ResourceList = {}
    for evaluator, objects in kinds:
        tracked = evaluator.matching(hard)
        if not tracked:
            continue
        for obj in objects():
            if all(evaluator.scope_matches(scope, obj) for scope in scopes):
                usage = evaluator.usage(obj)
                total = add(total, {n: usage[n] for n in tracked if n in usage})
    return {name: total.get(name, Quantity.of(0)) for name in hard}


def quota_status(quota: dict[str, Any], used_now: ResourceList) -> dict[str, Any]:
    hard = dict((quota.get("spec") or {}).get("hard") or {})
    return {"hard": hard, "used": {name: str(used_now.get(name, Quantity.of(0))) for name in hard}}


def check(
    evaluator: Evaluator,
    operation: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    quotas: list[tuple[dict[str, Any], ResourceList]],
) -> None:
    """``CheckRequest``: raise :class:`QuotaRefused` unless every matching quota (with its
    current usage) has room for ``obj``."""
    if operation not in evaluator.operations:
        return
    interesting: list[tuple[dict[str, Any], ResourceList]] = []
    for quota, used_now in quotas:
        if not evaluator.matches(quota, obj):
            continue
        required = evaluator.matching(hard_of(quota))
        problem = evaluator.constraints(required, obj)
        if problem:
            raise QuotaRefused(f"failed quota: {quota['metadata']['name']}: {problem}")
        interesting.append((quota, used_now))
    if not interesting:
        return
    usage = evaluator.usage(obj)
    negative = sorted(name for name, value in usage.items() if value.value < 0)
    if negative:
        raise QuotaRefused(f"quota usage is negative for resource(s): {','.join(negative)}")
    for quota, used_now in interesting:
        delta = usage
        if operation == "UPDATE" and old is not None and evaluator.matches(quota, old):
            previous = evaluator.usage(old)
            delta = {
                name: Quantity(max(value.value - previous[name].value, Decimal(0)), value.format)
                if name in previous
                else value
                for name, value in usage.items()
            }
        hard = hard_of(quota)
        requested = {n: v for n, v in delta.items() if n in hard and v.value != 0}
        exceeded = sorted(
            name
            for name, value in requested.items()
            if used_now.get(name, Quantity.of(0)).value + value.value > hard[name].value
        )
        if exceeded:
            raise QuotaRefused(
                f"exceeded quota: {quota['metadata']['name']}, "
                f"requested: {pretty({n: requested[n] for n in exceeded})}, "
                f"used: {pretty({n: used_now[n] for n in exceeded if n in used_now})}, "
                f"limited: {pretty({n: hard[n] for n in exceeded})}"
            )
