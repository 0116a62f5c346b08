"""Isolation levels (R23): what each of the seed's five options keeps apart, and which flavors
a tenant at each level may hold quota on.

The seed compares the options on three layers, fault, performance and security isolation (its
table rates fault and performance; security comes from its text: physical partitions are the
most secure, MIG gives each tenant its own memory, time slices share one GPU's memory). A
tenant's level decides its flavors: a time-sliced tenant holds time-sliced shares, not whole
A100s. CPU and storage flavors are open to every level.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from quotas.choices import FlavorKind
from tenants.choices import IsolationLevel


class FlavorIsolation:
    """What a flavor gives a tenant, as the isolation levels name it."""

    NONE: Final = "no-gpu"  # CPU nodes, storage classes: any level
    TIME_SLICED: Final = "time-sliced"
    VGPU: Final = "vgpu"
    MIG: Final = "mig"
    WHOLE_GPU: Final = "whole-gpu"
    DEDICATED: Final = "dedicated"


FLAVOR_ISOLATION_WORDS: Final = {
    FlavorIsolation.TIME_SLICED: "time-sliced GPU shares",
    FlavorIsolation.VGPU: "vGPU shares (HAMi)",
    FlavorIsolation.MIG: "MIG instances",
    FlavorIsolation.WHOLE_GPU: "whole GPUs on shared nodes",
    FlavorIsolation.DEDICATED: "GPUs on dedicated nodes",
}

# The GPU flavors each level may hold (CPU and storage: every level).
ALLOWED: Final[Mapping[str, frozenset[str]]] = {
    # No promise beyond the namespace: any shared GPU flavor, not another tenant's own nodes.
    IsolationLevel.NAMESPACE: frozenset(
        {
            FlavorIsolation.TIME_SLICED,
            FlavorIsolation.VGPU,
            FlavorIsolation.MIG,
            FlavorIsolation.WHOLE_GPU,
        }
    ),
    # A GPU shared with other tenants: by time slices, or by HAMi's vGPU shares (memory and
    # compute each capped inside the container, the GPU's faults still shared).
    IsolationLevel.TIME_SLICED: frozenset({FlavorIsolation.TIME_SLICED, FlavorIsolation.VGPU}),
    IsolationLevel.MIG: frozenset({FlavorIsolation.MIG}),
    # The device plugin hands out whole GPUs and MIG instances alike, each to one pod.
    IsolationLevel.WHOLE_GPU: frozenset({FlavorIsolation.WHOLE_GPU, FlavorIsolation.MIG}),
    IsolationLevel.DEDICATED: frozenset({FlavorIsolation.DEDICATED}),
}


@dataclass(frozen=True)
class Layers:
    """One option of the seed's table: its isolation on the three layers and what it suits."""

    fault: str
    performance: str
    security: str
    utilisation: str
    suits: str
    how: str


LAYERS: Final[Mapping[str, Layers]] = {
    IsolationLevel.NAMESPACE: Layers(
        "low", "low", "low", "high", "development and tests",
        "Own namespaces; cgroups limit CPU and memory; GPUs are shared with no boundary.",
    ),
    IsolationLevel.TIME_SLICED: Layers(
        "medium", "medium", "low", "very high", "mostly inference",
        "Shares of a GPU by time slices: time is shared, memory is not kept apart.",
    ),
    IsolationLevel.MIG: Layers(
        "high", "high", "high", "medium", "multi-tenant production",
        "MIG instances: each has its own GPU memory and compute units.",
    ),
    IsolationLevel.WHOLE_GPU: Layers(
        "medium", "medium", "medium", "high", "internal teams",
        "Whole GPUs (or MIG instances) from the device plugin, on nodes other tenants share.",
    ),
    IsolationLevel.DEDICATED: Layers(
        "very high", "very high", "very high", "low", "finance and government",
        "Nodes of its own (labelled and tainted), shared with no other tenant.",
    ),
}  # fmt: skip


def flavor_isolation(
    *, kind: str, node_taints: Sequence[Any] | None, time_slicing_replicas: int | None
) -> str:
    """What a flavor gives: time-sliced shares, MIG instances, whole GPUs, dedicated nodes."""
    if kind == FlavorKind.VGPU:
        return FlavorIsolation.VGPU
    if kind not in (FlavorKind.GPU, FlavorKind.MIG):
        return FlavorIsolation.NONE
    if time_slicing_replicas:
        return FlavorIsolation.TIME_SLICED
    if node_taints:
        return FlavorIsolation.DEDICATED
    return FlavorIsolation.MIG if kind == FlavorKind.MIG else FlavorIsolation.WHOLE_GPU


def allowed_words(level: str) -> str:
    """The GPU flavors ``level`` may hold, in words."""
    return " and ".join(sorted(FLAVOR_ISOLATION_WORDS[i] for i in ALLOWED[level]))


def isolation_rule_broken(*, level: str, flavor_name: str, isolation: str) -> str | None:
    """None when a flavor of ``isolation`` fits ``level``, else the rule, in words."""
    if isolation == FlavorIsolation.NONE or isolation in ALLOWED[level]:
        return None
    return (
        f"flavor {flavor_name} gives {FLAVOR_ISOLATION_WORDS[isolation]}; at the isolation level "
        f"{IsolationLevel(level).label.lower()} a tenant holds only {allowed_words(level)} "
        "(and CPU and storage)"
    )


def levels_allowing(isolations: Iterable[str]) -> list[str]:
    """The levels under which every one of ``isolations`` is allowed."""
    wanted = set(isolations) - {FlavorIsolation.NONE}
    return [level for level in IsolationLevel.values if wanted <= ALLOWED[level]]
