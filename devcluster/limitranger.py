"""LimitRange admission for Pods, as Kubernetes' LimitRanger plugin and Pod defaulting do it.

On create, before any validating admission:

1. Pod defaulting (``SetDefaults_Pod``): a container with a limit and no request for a resource
   gets the limit as its request.
2. For each LimitRange of the namespace, its ``type: Container`` item is defaulted as the API
   server stores it (``SetDefaults_LimitRangeItem``: ``default`` from ``max``,
   ``defaultRequest`` from ``default``, then from ``min``); containers and init containers that
   lack a limit or request get ``default`` / ``defaultRequest`` (and the
   ``kubernetes.io/limit-ranger`` annotation says what was set).
3. ``min`` and ``max`` of ``type: Container`` (each container and init container) and of
   ``type: Pod`` (sum of the containers, or the largest init container if larger) are enforced;
   a violation is ``pods "p" is forbidden: maximum nvidia.com/gpu usage per Container is 8, but
   limit is 11.`` (403). ``maxLimitRequestRatio`` is enforced too.

Pod updates are not limited (their containers' resources are immutable), as upstream.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from devcluster.quantity import DECIMAL_SI, Quantity, ResourceList, resource_list

ANNOTATION = "kubernetes.io/limit-ranger"
CPU = "cpu"


def _containers(pod: dict[str, Any], key: str) -> list[dict[str, Any]]:
    spec = pod.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get(key), list):
        return []
    return [c for c in spec[key] if isinstance(c, dict)]


def all_containers(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(``"container"`` or ``"init container"``, container), containers first."""
    return [
        *(("container", c) for c in _containers(pod, "containers")),
        *(("init container", c) for c in _containers(pod, "initContainers")),
    ]


def _resources(container: dict[str, Any]) -> dict[str, Any]:
    resources = container.get("resources")
    if not isinstance(resources, dict):
        resources = container["resources"] = {}
    return resources


def default_pod(pod: dict[str, Any]) -> None:
    """``SetDefaults_Pod``: requests default to limits, per container."""
    for _, container in all_containers(pod):
        resources = container.get("resources")
        if not isinstance(resources, dict) or not isinstance(resources.get("limits"), dict):
            continue
        requests = resources.get("requests")
        if not isinstance(requests, dict):
            requests = {}
        for name, value in resources["limits"].items():
            requests.setdefault(name, value)
        if requests:
            resources["requests"] = requests


def defaulted_item(item: dict[str, Any]) -> dict[str, Any]:
    """A LimitRange item as the API server stores it (``SetDefaults_LimitRangeItem``)."""
    item = copy.deepcopy(item)
    if item.get("type") != "Container":
        return item
    default = item.setdefault("default", {}) or {}
    default_request = item.setdefault("defaultRequest", {}) or {}
    for name, value in (item.get("max") or {}).items():
        default.setdefault(name, value)
    for name, value in default.items():
        default_request.setdefault(name, value)
    for name, value in (item.get("min") or {}).items():
        default_request.setdefault(name, value)
    item["default"], item["defaultRequest"] = default, default_request
    return item


def _items(limit_range: dict[str, Any]) -> list[dict[str, Any]]:
    limits = (limit_range.get("spec") or {}).get("limits") or []
    return [defaulted_item(item) for item in limits if isinstance(item, dict)]


def _merge_defaults(pod: dict[str, Any], items: list[dict[str, Any]]) -> None:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    for item in items:
        if item.get("type") == "Container":
            requests.update(item.get("defaultRequest") or {})
            limits.update(item.get("default") or {})
    notes: list[str] = []
    for label, container in all_containers(pod):
        resources = _resources(container)
        set_requests: list[str] = []
        set_limits: list[str] = []
        for key, defaults, changed in (
            ("limits", limits, set_limits),
            ("requests", requests, set_requests),
        ):
            if not defaults:
                continue
            current = resources.get(key)
            if not isinstance(current, dict):
                current = resources[key] = {}
            for name, value in defaults.items():
                if name not in current:
                    current[name] = str(Quantity.parse(value))
                    changed.append(name)
        name = container.get("name", "")
        if set_requests:
            notes.append(f"{', '.join(sorted(set_requests))} request for {label} {name}")
        if set_limits:
            notes.append(f"{', '.join(sorted(set_limits))} limit for {label} {name}")
    if notes:
        metadata = pod.setdefault("metadata", {})
        annotations = metadata.get("annotations")
        if not isinstance(annotations, dict):
            annotations = metadata["annotations"] = {}
        annotations[ANNOTATION] = "LimitRanger plugin set: " + "; ".join(notes)


def _comparable(observed: Quantity | None, enforced: Quantity) -> tuple[int, int]:
    observed_value = observed.milli_value() if observed is not None else 0
    return observed_value, enforced.milli_value()


def _min(kind: str, name: str, enforced: Quantity, req: ResourceList, lim: ResourceList) -> str:
    request, limit = req.get(name), lim.get(name)
    if request is None:
        return f"minimum {name} usage per {kind} is {enforced}.  No request is specified."
    observed, bound = _comparable(request, enforced)
    if observed < bound:
        return f"minimum {name} usage per {kind} is {enforced}, but request is {request}."
    observed, bound = _comparable(limit, enforced)
    if limit is not None and observed < bound:
        return f"minimum {name} usage per {kind} is {enforced}, but limit is {limit}."
    return ""


def _max(kind: str, name: str, enforced: Quantity, req: ResourceList, lim: ResourceList) -> str:
    request, limit = req.get(name), lim.get(name)
    if limit is None:
        return f"maximum {name} usage per {kind} is {enforced}.  No limit is specified."
    observed, bound = _comparable(limit, enforced)
    if observed > bound:
        return f"maximum {name} usage per {kind} is {enforced}, but limit is {limit}."
    observed, bound = _comparable(request, enforced)
    if request is not None and observed > bound:
        return f"maximum {name} usage per {kind} is {enforced}, but request is {request}."
    return ""


def _ratio(kind: str, name: str, enforced: Quantity, req: ResourceList, lim: ResourceList) -> str:
    request, limit = req.get(name), lim.get(name)
    if request is None or request.milli_value() == 0:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but no request is "
            "specified or request is 0."
        )
    if limit is None or limit.milli_value() == 0:
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but no limit is "
            "specified or limit is 0."
        )
    ratio = limit.milli_value() / request.milli_value()
    if ratio * 1000 > enforced.milli_value():
        return (
            f"{name} max limit to request ratio per {kind} is {enforced}, but provided ratio "
            f"is {ratio:f}."
        )
    return ""


def _check(kind: str, item: dict[str, Any], req: ResourceList, lim: ResourceList) -> list[str]:
    errors = []
    for field, check in (("min", _min), ("max", _max), ("maxLimitRequestRatio", _ratio)):
        for name, enforced in resource_list(item.get(field)).items():
            message = check(kind, name, enforced, req, lim)
            if message:
                errors.append(message)
    return errors


def _pod_sum(lists: Iterable[ResourceList]) -> ResourceList:
    """The LimitRanger's ``sum``: a resource missing from any container is left out; whole
    units (milli for cpu), printed as DecimalSI."""
    lists = list(lists)
    names = {name for resources in lists for name in resources}
    result: ResourceList = {}
    for name in names:
        if all(name in resources for resources in lists):
            if name == CPU:
                total = sum(resources[name].milli_value() for resources in lists)
                result[name] = Quantity(Decimal(total).scaleb(-3), DECIMAL_SI)
            else:
                total = sum(resources[name].int_value() for resources in lists)
                result[name] = Quantity.of(total)
    return result


def _check_pod(item: dict[str, Any], pod: dict[str, Any]) -> list[str]:
    containers = _containers(pod, "containers")
    requests = _pod_sum(resource_list(_resources(c).get("requests")) for c in containers)
    limits = _pod_sum(resource_list(_resources(c).get("limits")) for c in containers)
    for container in _containers(pod, "initContainers"):
        for totals, key in ((requests, "requests"), (limits, "limits")):
            for name, quantity in resource_list(_resources(container).get(key)).items():
                if name not in totals or quantity.value > totals[name].value:
                    totals[name] = quantity
    return _check("Pod", item, requests, limits)


def limit_pod(pod: dict[str, Any], limit_ranges: list[dict[str, Any]]) -> str:
    """Default and check ``pod`` (changed in place) against the namespace's LimitRanges.
    Returns the refusal (what follows ``is forbidden: ``), or ``""``."""
    for limit_range in limit_ranges:
        items = _items(limit_range)
        _merge_defaults(pod, items)
        errors: list[str] = []
        for item in items:
            if item.get("type") == "Container":
                for _, container in all_containers(pod):
                    resources = _resources(container)
                    errors += _check(
                        "Container",
                        item,
                        resource_list(resources.get("requests")),
                        resource_list(resources.get("limits")),
                    )
            elif item.get("type") == "Pod":
                errors += _check_pod(item, pod)
        unique = list(dict.fromkeys(errors))
        if len(unique) == 1:
            return unique[0]
        if unique:
            return "[" + ", ".join(unique) + "]"
    return ""
