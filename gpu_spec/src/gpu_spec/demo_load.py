"""The demo's load plan: which tenant holds which simulated GPU, and how busy it is, at a moment.

One story for the whole demo (``make run``): the simulated month (``usage.demo``), the simulated
Kueue (``devcluster.kueue_sim``) and the simulated GPUs (the node agents' ``fake`` backend,
``gpu_node_agent.testing``) read their load from here, so the heatmap, the fleet and the tenants'
pages agree. Free of Django and of the node agent: the portal's demo command writes the plan as
data (``DIR/load.json`` beside the nodes' specs), the agents read it back.

The model, shared by all three:

- a tenant's queue uses ``queue_load`` of its limit: a hot tenant (team-a, whose month climbs
  past 80 %) 88-93 %, the others a working-day rhythm around 40 % (``daily``);
- a GPU a tenant's work holds runs at the mean utilisation of the tenant's GPUs in the last week
  of its usage history (what its usage page shows; the demo command writes it into the plan),
  or, without one, at ``utilisation_level`` of its queue's use (30 % plus 50 % of the fraction
  of its limit in use, the month's own rule), with a fixed noise of up to 8 points per GPU and
  10 minutes (the month's noise is 8 points too), framebuffer memory in step with it;
- each cluster's whole GPUs are handed out in the plan's order, tenant after tenant, as many as
  each tenant's queue uses (floored, as Kueue's totals are), the rest idle; an ``idle`` tenant's
  GPUs are held at 0 % (team-b's notebook on the first cluster, quiet for days).

``{"clusters": [{"name": "demo-a100", "nodes": [["a100-node-1", 8], ...],
"tenants": [{"name": "team-a", "namespace": "team-a-training", "limit": 10, "hot": true,
"idle": false, "utilisation_pct": 61.2}, ...]}]}``
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEMO_LOAD_PLAN_FILE = "load.json"
HOT_TENANTS = ("team-a",)  # devcluster.kueue_sim's default ``hot``
NOISE_PCT = 8.0
NOISE_PERIOD_S = 600  # the month's step: 10 minutes


@dataclass(frozen=True)
class PlanTenant:
    name: str
    namespace: str
    limit: int  # whole GPUs (nominal quota + borrowing limit)
    hot: bool = False
    idle: bool = False  # holds a GPU it does not use
    # The mean utilisation (%) of its GPUs in its usage history's last week, which its usage
    # page shows; None: ``utilisation_level`` of its queue's use.
    utilisation_pct: float | None = None


@dataclass(frozen=True)
class PlanCluster:
    name: str
    nodes: tuple[tuple[str, int], ...]  # (node, whole GPUs the plan hands out), in order
    tenants: tuple[PlanTenant, ...]  # in the order they are handed GPUs


@dataclass(frozen=True)
class LoadPlan:
    clusters: tuple[PlanCluster, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusters": [
                {
                    "name": c.name,
                    "nodes": [[node, count] for node, count in c.nodes],
                    "tenants": [dataclasses.asdict(t) for t in c.tenants],
                }
                for c in self.clusters
            ]
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> LoadPlan:
        return cls(
            tuple(
                PlanCluster(
                    str(c["name"]),
                    tuple((str(n), int(count)) for n, count in c.get("nodes") or []),
                    tuple(
                        PlanTenant(
                            str(t["name"]),
                            str(t.get("namespace") or ""),
                            int(t["limit"]),
                            bool(t.get("hot")),
                            bool(t.get("idle")),
                            None
                            if t.get("utilisation_pct") is None
                            else float(t["utilisation_pct"]),
                        )
                        for t in c.get("tenants") or []
                    ),
                )
                for c in raw.get("clusters") or []
            )
        )


def read_load_plan(path: Path) -> LoadPlan | None:
    """The plan at ``path``, or None where there is none or it does not read."""
    try:
        return LoadPlan.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_load_plan(path: Path, plan: LoadPlan) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_dict()), encoding="utf-8")


def daily(now: datetime) -> float:
    """0.1..1.0: low at night, high in the working afternoon, lower at weekends (UTC)."""
    hour = now.hour + now.minute / 60
    level = 0.55 + 0.45 * math.sin((hour - 8) / 24 * 2 * math.pi)
    return level * (1.0 if now.weekday() < 5 else 0.6)


def queue_load(hot: bool, now: datetime) -> float:
    """The fraction of its limits a tenant's queue uses at ``now``."""
    if hot:
        return 0.88 + 0.05 * daily(now)
    return 0.4 * daily(now)


def utilisation_level(used_fraction: float) -> float:
    """The mean utilisation (%) of the GPUs a tenant holds while it uses ``used_fraction`` of
    its limit (before noise)."""
    return 30 + 50 * used_fraction


def memory_fraction(utilisation_pct: float) -> float:
    """The share of a busy GPU's framebuffer in use at ``utilisation_pct``."""
    return (30 + int(utilisation_pct * 0.6)) / 100


@dataclass(frozen=True)
class GpuLoad:
    """A simulated GPU at one moment: who holds it, its utilisation and memory in use."""

    tenant: str  # "" where idle
    namespace: str
    utilization_pct: int
    memory_fraction: float


IDLE = GpuLoad("", "", 0, 0.0)


def _noise(*parts: object) -> float:
    """-NOISE_PCT..NOISE_PCT, fixed per ``parts``."""
    digest = int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:12], 16)
    return (digest / 0xFFFFFFFFFFFF * 2 - 1) * NOISE_PCT


def held_gpus(cluster: PlanCluster, now: datetime) -> dict[tuple[str, int], PlanTenant]:
    """Which tenant holds each of the cluster's GPUs at ``now`` (the others are idle)."""
    slots = [(node, index) for node, count in cluster.nodes for index in range(count)]
    out: dict[tuple[str, int], PlanTenant] = {}
    for tenant in cluster.tenants:
        held = math.floor(tenant.limit * queue_load(tenant.hot, now))
        if tenant.idle:
            held = max(held, 1)  # the idle notebook holds its GPU all along
        for slot in slots[len(out) : len(out) + held]:
            out[slot] = tenant
    return out


def gpu_load(plan: LoadPlan, node: str, index: int, now: datetime) -> GpuLoad | None:
    """The load on GPU ``index`` of ``node`` at ``now``; None for a node the plan leaves out."""
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    now = now.astimezone(UTC)
    for cluster in plan.clusters:
        counts = dict(cluster.nodes)
        if node not in counts:
            continue
        if index >= counts[node]:
            return None
        tenant = held_gpus(cluster, now).get((node, index))
        if tenant is None:
            return IDLE
        if tenant.idle:
            return GpuLoad(tenant.name, tenant.namespace, 0, 0.05)
        level = (
            tenant.utilisation_pct
            if tenant.utilisation_pct is not None
            else utilisation_level(queue_load(tenant.hot, now))
        )
        bucket = int(now.timestamp()) // NOISE_PERIOD_S
        util = round(min(100.0, max(0.0, level + _noise(node, index, bucket))))
        return GpuLoad(tenant.name, tenant.namespace, util, memory_fraction(util))
    return None
