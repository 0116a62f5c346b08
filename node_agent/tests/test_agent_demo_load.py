"""The demo's simulated GPUs carry the demo's load plan (``gpu_spec.demo_load``): a whole GPU a
busy tenant holds reports the utilisation and memory the plan gives it, at the level of that
tenant's usage (30 % plus 50 % of the share of its limit in use), idle GPUs report none.

The demo runner and its DCGM exporter need the agent's demo extra (prometheus-client), which a
node does not install: their side is tested in tests/prometheus/test_demo_load.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpu_node_agent.runner import Agent, AgentState
from gpu_node_agent.testing.fake import build_fake_node
from gpu_spec import demo_load

A100_NODE = "NVIDIA A100-SXM4-80GB:8:nomig"
# A Wednesday afternoon (UTC) and the Sunday night after it.
BUSY = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
NIGHT = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)

PLAN = demo_load.LoadPlan(
    (
        demo_load.PlanCluster(
            "demo-a100",
            (("a100-node-1", 8), ("a100-node-2", 8)),
            (
                demo_load.PlanTenant("team-a", "team-a-training", 10, hot=True),
                demo_load.PlanTenant("team-b", "team-b-training", 6, idle=True),
                demo_load.PlanTenant("team-c", "team-c-training", 4),
            ),
        ),
    )
)


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / demo_load.DEMO_LOAD_PLAN_FILE
    demo_load.write_load_plan(path, PLAN)
    return path


def _inventory(node: str, plan: Path | None, at: datetime) -> list[dict[str, object]]:
    fake = build_fake_node(
        A100_NODE, state_path=None, seed=node, load_plan=plan, clock=at.timestamp
    )
    agent = Agent(
        backend=fake.backend,
        client=None,  # type: ignore[arg-type] - inventory() talks to no portal
        state=AgentState(None),
        node=node,
        pod_lookup=fake.pod_uid_for_pid,
    )
    return list(agent.inventory()["gpus"])


def test_the_gpus_a_busy_tenant_holds_report_its_load(plan_file: Path) -> None:
    gpus = _inventory("a100-node-1", plan_file, BUSY)
    # team-a uses 88-93 % of its 10 GPUs: it holds the first 8 (all of a100-node-1).
    level = demo_load.utilisation_level(demo_load.queue_load(True, BUSY))
    assert 74 <= level <= 77
    utils = [int(g["utilization_pct"]) for g in gpus]  # type: ignore[call-overload]
    assert all(
        level - demo_load.NOISE_PCT - 1 <= u <= level + demo_load.NOISE_PCT + 1 for u in utils
    )
    assert sum(utils) / len(utils) == pytest.approx(level, abs=5)
    for gpu in gpus:
        total = int(gpu["memory_total_mib"])  # type: ignore[call-overload]
        assert 0.5 * total < int(gpu["memory_used_mib"]) < total  # type: ignore[call-overload]


def test_idle_gpus_and_an_idle_tenants_gpus_report_no_load(plan_file: Path) -> None:
    held = demo_load.held_gpus(PLAN.clusters[0], BUSY)
    owners = [held[("a100-node-2", i)].name if ("a100-node-2", i) in held else "" for i in range(8)]
    # team-a's ninth GPU, team-b's two (its idle notebook among them), team-c's one, four idle.
    assert owners == ["team-a", "team-b", "team-b", "team-c", "", "", "", ""]
    gpus = _inventory("a100-node-2", plan_file, BUSY)
    utils = [g["utilization_pct"] for g in gpus]
    assert utils[0] > 0 and utils[3] > 0  # type: ignore[operator]
    assert utils[1:3] == [0, 0] and utils[4:] == [0, 0, 0, 0]
    assert [g["memory_used_mib"] for g in gpus[4:]] == [0, 0, 0, 0]
    # At night only team-a and team-b's notebook hold GPUs.
    night = demo_load.held_gpus(PLAN.clusters[0], NIGHT)
    assert sorted({t.name for t in night.values()}) == ["team-a", "team-b"]


def test_without_a_plan_or_outside_it_the_gpus_stay_idle(plan_file: Path, tmp_path: Path) -> None:
    assert {g["utilization_pct"] for g in _inventory("a100-node-1", None, BUSY)} == {0}
    assert {g["utilization_pct"] for g in _inventory("other-node", plan_file, BUSY)} == {0}
    missing = tmp_path / "none.json"
    assert {g["utilization_pct"] for g in _inventory("a100-node-1", missing, BUSY)} == {0}
    unreadable = tmp_path / "bad.json"
    unreadable.write_text("{not json")
    assert {g["utilization_pct"] for g in _inventory("a100-node-1", unreadable, BUSY)} == {0}


def test_a_changed_plan_is_read_again(plan_file: Path) -> None:
    fake = build_fake_node(
        A100_NODE, state_path=None, seed="a100-node-1", load_plan=plan_file, clock=BUSY.timestamp
    )
    assert fake.backend.list_gpus()[0].utilization_pct
    quiet = demo_load.LoadPlan((demo_load.PlanCluster("demo-a100", (("a100-node-1", 8),), ()),))
    plan_file.write_text(json.dumps(quiet.to_dict()) + " ")  # another size: read again
    assert fake.backend.list_gpus()[0].utilization_pct == 0


def test_a_tenants_recorded_level_sets_its_gpus_utilisation(tmp_path: Path) -> None:
    """The demo command writes each tenant's utilisation of its history's last week into the
    plan (what its usage page shows): its GPUs run at that level, within the plan's noise."""
    path = tmp_path / demo_load.DEMO_LOAD_PLAN_FILE
    tenant = demo_load.PlanTenant("team-a", "team-a-training", 10, hot=True, utilisation_pct=58.4)
    cluster = demo_load.PlanCluster("demo-a100", (("a100-node-1", 8),), (tenant,))
    demo_load.write_load_plan(path, demo_load.LoadPlan((cluster,)))
    assert demo_load.read_load_plan(path) == demo_load.LoadPlan((cluster,))
    utils = [int(g["utilization_pct"]) for g in _inventory("a100-node-1", path, BUSY)]  # type: ignore[call-overload]
    assert all(abs(u - 58.4) <= demo_load.NOISE_PCT + 0.5 for u in utils)
    assert len(set(utils)) > 1  # not one flat figure
