"""A change to a Kubernetes object in words a person reads. Pure functions, no I/O.

A dry run lists the fields a change touches as JSON paths
(``.spec.resourceGroups[0].flavors[0].resources[2].nominalQuota``); a person wants
"nvidia.com/gpu on a100-80gb: guaranteed 6 → 7". ``describe_changes`` gives each path such a
line, by the object's kind:

- ClusterQueue (Kueue): per flavor and resource, ``nominalQuota`` is the guarantee and the
  limit is ``nominalQuota + borrowingLimit`` (no ``borrowingLimit``: no limit), as the portal
  writes them; a lending limit is named as such.
- ResourceQuota: per namespace, each ``hard`` key by name ("team-a-training: GPUs 10 → 11").
- LimitRange: per namespace, the bound per container or per pod.
- Anything else: "<Kind> <name>: <field> changed".

Amounts read as on the portal's pages (``quotas.quantity.to_display``: "64 GiB", "2 cores").
On a time-sliced flavor ``nvidia.com/gpu`` counts shares, not GPUs: given ``GpuShares``, such
amounts read "4 shares (40% of a GPU)" (``quotas.timeslicing.shares_text``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from quotas.kube import job_caps, vgpu
from quotas.quantity import QuantityError, parse_quantity, to_display
from quotas.timeslicing import shares_text

__all__ = ["GpuShares", "describe_changes"]

_GPU = "nvidia.com/gpu"
_GPU_KEYS = (_GPU, f"requests.{_GPU}", f"limits.{_GPU}")


@dataclass(frozen=True)
class GpuShares:
    """Where ``nvidia.com/gpu`` counts time-sliced shares: per flavor name, its shares per
    GPU; ``everywhere``: the shares per GPU when every GPU the tenant's namespaces may use is
    time-sliced alike (a ResourceQuota or LimitRange counts all flavors at once), else None."""

    by_flavor: dict[str, int] = field(default_factory=dict)
    everywhere: int | None = None


_NO_SHARES = GpuShares()

Line = tuple[str, str]  # (flavor, resource) of a ClusterQueue
Amounts = dict[str, Decimal | None]  # nominalQuota, borrowingLimit, lendingLimit

_CQ_FIELD = re.compile(
    r"^\.spec\.resourceGroups\[(\d+)\]\.flavors\[(\d+)\]\.resources\[(\d+)\](?:\..*)?$"
)
_LIMIT_RANGE_FIELD = re.compile(
    r"^\.spec\.limits\[(\d+)\]\.(max|min|default|defaultRequest)\.(.+)$"
)
_RESOURCE_WORDS = {
    "nvidia.com/gpu": "GPUs",
    "requests.nvidia.com/gpu": "GPUs",
    "limits.nvidia.com/gpu": "GPUs",
    "cpu": "CPU",
    "memory": "memory",
    "requests.cpu": "CPU requests",
    "limits.cpu": "CPU limits",
    "requests.memory": "memory requests",
    "limits.memory": "memory limits",
    "requests.storage": "storage",
    "persistentvolumeclaims": "PVCs",
    "pods": "pods",
    job_caps.WORKLOAD_COUNT_KEY: "jobs running and queued (every kind Kueue manages)",
    job_caps.JOB_COUNT_KEY: "batch Jobs running and queued",
    "requests.nvidia.com/gpumem": "GPU memory",
    "limits.nvidia.com/gpumem": "GPU memory (HAMi's count)",
    "requests.nvidia.com/gpucores": "GPU compute",
    "limits.nvidia.com/gpucores": "GPU compute (HAMi's count)",
}
_BOUND_WORDS = {
    "max": "at most",
    "min": "at least",
    "default": "default limit of",
    "defaultRequest": "default request of",
}


def _amount(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool) or not isinstance(value, str | int):
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _shown(value: Any, resource: str, absent: str = "not set", replicas: int | None = None) -> str:
    if value is None:
        return absent
    amount = _amount(value)
    if amount is None:
        return str(value)
    if replicas and resource in _GPU_KEYS:
        return shares_text(amount, replicas)
    return to_display(*vgpu.shown(amount, resource))


def _resource_words(resource: str, replicas: int | None = None) -> str:
    if replicas and resource in _GPU_KEYS:
        return "GPU shares"
    return _RESOURCE_WORDS.get(resource, resource)


def _where(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name", "")
    return f"{namespace}/{name}" if namespace else str(name)


def _field_name(path: str) -> str:
    """ ".spec.cohort" -> "cohort", ".metadata.labels.a" -> "labels.a"."""
    parts = path.lstrip(".").split(".")
    if len(parts) > 1 and parts[0] in ("spec", "metadata"):
        parts = parts[1:]
    return ".".join(parts)


def _other(obj: Mapping[str, Any], path: str) -> str:
    return f"{obj.get('kind', 'Object')} {_where(obj)}: {_field_name(path)} changed"


# --- ClusterQueue -----------------------------------------------------------------------------


def _cq_lines(obj: Mapping[str, Any]) -> dict[Line, Amounts]:
    lines: dict[Line, Amounts] = {}
    for group in (obj.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for resource in flavor.get("resources") or []:
                lines[(str(flavor.get("name", "")), str(resource.get("name", "")))] = {
                    name: _amount(resource.get(name))
                    for name in ("nominalQuota", "borrowingLimit", "lendingLimit")
                }
    return lines


def _cq_line_at(obj: Mapping[str, Any], match: re.Match[str]) -> Line | None:
    group, flavor, resource = (int(i) for i in match.groups())
    try:
        f = (obj.get("spec") or {})["resourceGroups"][group]["flavors"][flavor]
        return (str(f["name"]), str(f["resources"][resource]["name"]))
    except (KeyError, IndexError, TypeError):
        return None


def _limit(amounts: Amounts) -> Decimal | None:
    """Guaranteed plus what may be borrowed; None: borrowing has no bound."""
    nominal, borrowing = amounts["nominalQuota"] or Decimal(0), amounts["borrowingLimit"]
    return None if borrowing is None else nominal + borrowing


def _cq_line_words(
    line: Line, old: Amounts | None, new: Amounts | None, shares: GpuShares = _NO_SHARES
) -> str:
    flavor, resource = line
    if flavor == job_caps.JOB_SLOTS_FLAVOR:
        # The running-job cap (quotas.kube.job_caps): a nominal quota of pods, nothing borrowed.
        head = "running jobs (pods admitted at once):"
        if new is None:
            return f"{head} no cap"
        cap = to_display(new["nominalQuota"] or Decimal(0), resource)
        if old is None:
            return f"{head} at most {cap}"
        return f"{head} at most {to_display(old['nominalQuota'] or Decimal(0), resource)} → {cap}"
    replicas = shares.by_flavor.get(flavor) if resource == _GPU else None

    def amount(value: Decimal | None, absent: str = "0") -> str:
        if value is None:
            return absent
        return (
            shares_text(value, replicas) if replicas else to_display(*vgpu.shown(value, resource))
        )

    head = f"{resource} on {flavor}:"
    if old is None and new is not None:
        limit = _limit(new)
        limit_words = "no limit" if limit is None else f"limit {amount(limit)}"
        return f"{head} new, guaranteed {amount(new['nominalQuota'])}, {limit_words}"
    if new is None and old is not None:
        return f"{head} removed (it guaranteed {amount(old['nominalQuota'])})"
    assert old is not None and new is not None
    parts = []
    if old["nominalQuota"] != new["nominalQuota"]:
        parts.append(f"guaranteed {amount(old['nominalQuota'])} → {amount(new['nominalQuota'])}")
    if _limit(old) != _limit(new):
        parts.append(f"limit {amount(_limit(old), 'no limit')} → {amount(_limit(new), 'no limit')}")
    if old["lendingLimit"] != new["lendingLimit"]:
        parts.append(
            f"lending limit {amount(old['lendingLimit'], 'none')} → "
            f"{amount(new['lendingLimit'], 'none')}"
        )
    return f"{head} {', '.join(parts)}" if parts else f"{head} changed"


def _cluster_queue(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, shares: GpuShares
) -> str:
    before, after = _cq_lines(old), _cq_lines(new)
    match = _CQ_FIELD.match(path)
    if match:
        line = _cq_line_at(new, match) or _cq_line_at(old, match)
        if line is not None:
            return _cq_line_words(line, before.get(line), after.get(line), shares)
    if path.startswith(".spec.resourceGroups"):  # a list of flavors or resources as a whole
        changed = [
            _cq_line_words(line, before.get(line), after.get(line), shares)
            for line in sorted(before.keys() | after.keys())
            if before.get(line) != after.get(line)
        ]
        if changed:
            return "; ".join(changed)
    return _other(new, path)


# --- ResourceQuota and LimitRange -----------------------------------------------------------


def _resource_quota(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, shares: GpuShares
) -> str:
    if not path.startswith(".spec.hard."):
        return _other(new, path)
    key = path.removeprefix(".spec.hard.")
    before = ((old.get("spec") or {}).get("hard") or {}).get(key)
    after = ((new.get("spec") or {}).get("hard") or {}).get(key)
    namespace = (new.get("metadata") or {}).get("namespace", "")
    replicas = shares.everywhere
    return (
        f"{namespace}: {_resource_words(key, replicas)} "
        f"{_shown(before, key, replicas=replicas)} → "
        f"{_shown(after, key, absent='removed', replicas=replicas)}"
    )


def _limit_range(
    old: Mapping[str, Any], new: Mapping[str, Any], path: str, shares: GpuShares
) -> str:
    match = _LIMIT_RANGE_FIELD.match(path)
    if not match:
        return _other(new, path)
    index, bound, resource = int(match[1]), match[2], match[3]

    def entry(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        limits = (obj.get("spec") or {}).get("limits") or []
        return limits[index] if index < len(limits) else {}

    before = (entry(old).get(bound) or {}).get(resource)
    after = (entry(new).get(bound) or {}).get(resource)
    kind = str(entry(new).get("type") or entry(old).get("type") or "").lower() or "object"
    namespace = (new.get("metadata") or {}).get("namespace", "")
    replicas = shares.everywhere
    return (
        f"{namespace}: {_BOUND_WORDS[bound]} {_resource_words(resource, replicas)} per {kind} "
        f"{_shown(before, resource, replicas=replicas)} → "
        f"{_shown(after, resource, absent='removed', replicas=replicas)}"
    )


_BY_KIND = {
    "ClusterQueue": _cluster_queue,
    "ResourceQuota": _resource_quota,
    "LimitRange": _limit_range,
}


def describe_changes(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    paths: Iterable[str],
    shares: GpuShares = _NO_SHARES,
) -> dict[str, str]:
    """Each changed field ``path`` of an object (``old`` -> ``new``, one kind and name) in
    words; fields of one ClusterQueue line share the line's words. ``shares``: where GPUs
    are time-sliced shares."""
    kind = str(new.get("kind") or old.get("kind") or "")
    words = _BY_KIND.get(kind)
    return {
        path: words(old, new, path, shares) if words else _other(new or old, path) for path in paths
    }
