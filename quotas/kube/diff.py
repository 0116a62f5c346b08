"""Does a live object still hold what the portal applied? Pure functions, no I/O.

The applier writes an object only when its portal-owned fields differ from the desired ones.
It compares the fields themselves (a hash annotation alone would miss a hand edit made with
kubectl) and the set of fields the portal's field manager owns (a field the portal set before
and no longer wants must be removed by a new apply).

Quantity fields (a ResourceQuota's ``hard``, a LimitRange's ``max``, a ClusterQueue's
``nominalQuota``, ...) are compared as Kubernetes compares quantities, by value: the API server
re-writes "1000" as "1k" and "1024Mi" as "1Gi", so those are no difference. Where they do
differ, both sides are shown in Kubernetes' canonical text, as ``kubectl get`` would.
"""

from __future__ import annotations

from typing import Any, Final

from quotas.kube.spec import ANNOTATION_GENERATION
from quotas.quantity import QuantityError, canonical, parse_quantity

# Written by the API server, never by the portal: not part of what is compared.
SERVER_METADATA = {
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
}

# Maps from a resource name to a quantity: ResourceQuota (hard, used), LimitRange (max, min,
# default, defaultRequest, maxLimitRequestRatio), containers (requests, limits), nodes
# (capacity, allocatable), Volcano Queue (capability, deserved, guarantee.resource).
QUANTITY_MAPS = frozenset(
    {
        "hard",
        "used",
        "max",
        "min",
        "default",
        "defaultRequest",
        "maxLimitRequestRatio",
        "requests",
        "limits",
        "capacity",
        "allocatable",
        "capability",
        "deserved",
        "resource",
    }
)
# Fields that are themselves a quantity: Kueue ClusterQueue resources[], fairSharing.weight.
QUANTITY_FIELDS = frozenset({"nominalQuota", "borrowingLimit", "lendingLimit"})


def is_quantity_path(path: tuple[str, ...]) -> bool:
    """Whether the scalar at ``path`` (keys from the object's root; list items as
    ``name[i]``) is a Kubernetes quantity."""
    if not path:
        return False
    parent = path[-2].split("[", 1)[0] if len(path) > 1 else ""
    return (
        path[-1] in QUANTITY_FIELDS
        or parent in QUANTITY_MAPS
        or (parent, path[-1]) == ("fairSharing", "weight")
    )


def _quantity(value: Any) -> str | None:
    """Canonical text of a quantity value, None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    try:
        return canonical(value)
    except QuantityError:
        return None


def _same_scalar(desired: Any, live: Any, path: tuple[str, ...]) -> bool:
    if desired == live:
        return True
    if not is_quantity_path(path) or _quantity(desired) is None or _quantity(live) is None:
        return False
    return parse_quantity(desired) == parse_quantity(live)


def differences(desired: Any, live: Any) -> dict[str, tuple[Any, Any]]:
    """Paths where ``live`` does not hold ``desired``, with both values (extra live fields are
    fine: defaults the server fills in, or fields other managers own). Lists must match
    element by element."""
    found: dict[str, tuple[Any, Any]] = {}
    _walk(desired, live, (), found)
    return found


def _walk(
    desired: Any, live: Any, path: tuple[str, ...], found: dict[str, tuple[Any, Any]]
) -> None:
    # The path's text is made only where a difference is recorded (a no-op pass walks every
    # field of every object and records none), and an equal subtree is not walked: equal
    # values (Python's ==, as _same_scalar compares) hold no difference below.
    if desired == live:
        return
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            found["." + ".".join(path)] = (desired, live)
            return
        for key, value in desired.items():
            if not path and key == "status":
                continue
            if path == ("metadata",) and key in SERVER_METADATA:
                continue
            if path == ("metadata", "annotations") and key == ANNOTATION_GENERATION:
                continue  # bookkeeping, not content: needs_write restamps it on its own
            if key not in live:
                found["." + ".".join((*path, key))] = (value, None)
            else:
                _walk(value, live[key], (*path, key), found)
        return
    if isinstance(desired, list):
        if not isinstance(live, list) or len(desired) != len(live):
            found["." + ".".join(path)] = (desired, live)
            return
        for index, (d, v) in enumerate(zip(desired, live, strict=True)):
            _walk(d, v, (*path[:-1], f"{path[-1]}[{index}]") if path else (f"[{index}]",), found)
        return
    if _same_scalar(desired, live, path):
        return
    if is_quantity_path(path):
        desired = _quantity(desired) or desired
        live = _quantity(live) or live
    found["." + ".".join(path)] = (desired, live)


def _desired_paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Field paths of ``obj`` down to scalars or lists (a list counts as one field)."""
    if isinstance(obj, dict) and obj:
        paths: set[tuple[str, ...]] = set()
        for key, value in obj.items():
            paths |= _desired_paths(value, (*prefix, key))
        return paths
    return {prefix}


def _owned_paths(fields: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Paths in a managedFields ``fieldsV1`` set, truncated at lists (``k:``/``i:``/``v:``
    entries) like ``_desired_paths``."""
    keys = [k for k in fields if k.startswith("f:")]
    if not keys:
        return {prefix} if prefix else set()
    if any(not k.startswith("f:") and k != "." for k in fields):
        return {prefix}
    paths: set[tuple[str, ...]] = set()
    for key in keys:
        value = fields[key]
        sub = (*prefix, key[2:])
        paths |= _owned_paths(value, sub) if isinstance(value, dict) and value else {sub}
    return paths


def owned_field_paths(live: dict[str, Any], manager: str) -> set[tuple[str, ...]]:
    owned: set[tuple[str, ...]] = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            owned |= _owned_paths(entry.get("fieldsV1") or {})
    return owned


def stale_owned_fields(desired: dict[str, Any], live: dict[str, Any], manager: str) -> list[str]:
    """Fields ``manager`` applied before that ``desired`` no longer has: the paths of
    ``owned_field_paths`` (not under ``status``) that are neither a prefix of a path of
    ``desired`` (down to scalars, lists and empty objects) nor start with one. Found by walking
    each fieldsV1 tree beside ``desired``, without building either set of paths (a no-op pass
    asks this of every object)."""
    top = {k: v for k, v in desired.items() if k not in ("apiVersion", "kind")}
    start = top if top else _COVERED
    stale: set[tuple[str, ...]] = set()
    for entry in live.get("metadata", {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            _stale_walk(entry.get("fieldsV1") or {}, start, (), stale)
    return sorted("." + ".".join(path) for path in stale)


# Where a fieldsV1 walk stands against ``desired``: a non-empty dict (desired goes on below),
# _COVERED (a desired path ended here or above: nothing below is stale) or _ABSENT (no desired
# path comes through here: every owned path below is stale).
_COVERED: Final = object()
_ABSENT: Final = object()


def _stale_walk(
    fields: dict[str, Any], want: Any, prefix: tuple[str, ...], stale: set[tuple[str, ...]]
) -> None:
    """``_owned_paths``'s walk of ``fields``, each owned path checked against ``want``."""
    keys = [k for k in fields if k.startswith("f:")]
    if not keys or any(not k.startswith("f:") and k != "." for k in fields):
        if prefix and want is _ABSENT:
            stale.add(prefix)
        return
    for key in keys:
        name = key[2:]
        path = (*prefix, name)
        if not prefix and name == "status":
            continue
        if want is _COVERED or want is _ABSENT:
            below = want
        elif name in want:
            value = want[name]
            below = value if isinstance(value, dict) and value else _COVERED
        else:
            below = _ABSENT
        value = fields[key]
        if isinstance(value, dict) and value:
            _stale_walk(value, below, path, stale)
        elif below is _ABSENT:
            stale.add(path)


# The reason given when an object's content is as desired but its generation annotation is
# older: written again so that every object of a tenant says the generation the cluster has
# (what the portal's pages say), not the one it last changed at.
GENERATION_ONLY: Final = "generation annotation"


def _generation(obj: dict[str, Any]) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_GENERATION)
    return None if value is None else str(value)


def needs_write(desired: dict[str, Any], live: dict[str, Any] | None, manager: str) -> list[str]:
    """Why ``desired`` must be applied over ``live`` ([] when it need not be): its fields, or
    only its generation annotation (``GENERATION_ONLY``: a push at a new generation restamps
    the objects it leaves as they were; a pass at the same generation writes nothing)."""
    if live is None:
        return ["missing"]
    reasons = list(differences(desired, live)) + stale_owned_fields(desired, live, manager)
    if not reasons and _generation(desired) not in (None, _generation(live)):
        return [GENERATION_ONLY]
    return reasons
