"""The demo's load plan (``gpu_spec.demo_load``) reaches the demo runner's agents and its
simulated DCGM exporter (``gpu_node_agent.testing.demo``, ``demo_metrics``: the agent's demo
extra, prometheus-client, which a node does not install, hence here and not in node_agent/tests)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from gpu_node_agent.runner import build_parser
from gpu_node_agent.testing import demo as demo_runner
from gpu_node_agent.testing.demo_metrics import PLAN_FILE, SimulatedExporter
from gpu_node_agent.testing.fake import STATE_FILE, build_fake_node
from gpu_spec import demo_load

A100_NODE = "NVIDIA A100-SXM4-80GB:8:nomig"
# A Wednesday afternoon (UTC).
BUSY = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)


def test_the_demo_starts_each_agent_with_the_load_plan(tmp_path: Path) -> None:
    spec = tmp_path / "a100-node-1.json"
    spec.write_text(json.dumps({"node": "a100-node-1", "gpus": A100_NODE}))
    command = demo_runner.agent_command("http://portal", spec, tmp_path / "state", 5.0)
    plan = command[command.index("--fake-load") + 1]
    assert plan == str(tmp_path / demo_load.DEMO_LOAD_PLAN_FILE)
    args = build_parser().parse_args(command[3:])
    assert args.fake_load == plan


def test_the_demo_exporter_serves_the_plans_load(tmp_path: Path) -> None:
    """demo-h100's simulated DCGM exporter and its node agents tell the same story: a whole GPU
    the plan gives a tenant is served busy in that tenant's namespace, at the agent's figure."""
    spec_dir, state_dir = tmp_path / "agents", tmp_path / "state"
    spec_dir.mkdir()
    h100 = "NVIDIA H100 80GB HBM3:8:nomig"
    (spec_dir / "h100-node-1.json").write_text(json.dumps({"node": "h100-node-1", "gpus": h100}))
    (spec_dir / PLAN_FILE).write_text(
        json.dumps({"nodes": ["h100-node-1"], "namespaces": ["team-a-training"]})
    )
    tenant = demo_load.PlanTenant("team-a", "team-a-training", 6, hot=True, utilisation_pct=70)
    plan = demo_load.LoadPlan(
        (demo_load.PlanCluster("demo-h100", (("h100-node-1", 8),), (tenant,)),)
    )
    demo_load.write_load_plan(spec_dir / demo_load.DEMO_LOAD_PLAN_FILE, plan)
    fake = build_fake_node(
        h100,
        state_path=state_dir / "h100-node-1" / STATE_FILE,
        seed="h100-node-1",
        load_plan=spec_dir / demo_load.DEMO_LOAD_PLAN_FILE,
        clock=BUSY.timestamp,
    )
    readings = SimulatedExporter(
        spec_dir=spec_dir, state_dir=state_dir, clock=BUSY.timestamp
    ).readings()
    held = demo_load.held_gpus(plan.clusters[0], BUSY)
    assert len(readings) == 8 and len(held) == 5  # 88-93 % of 6
    agent = fake.backend.list_gpus()
    for r in readings:
        if ("h100-node-1", r.device.gpu) in held:
            assert r.namespace == "team-a-training" and r.pod
            assert r.util_pct == agent[r.device.gpu].utilization_pct > 0
            assert r.memory_used_mib == agent[r.device.gpu].memory_used_mib > 0
        else:
            assert (r.namespace, r.util_pct, r.memory_used_mib) == ("", 0.0, 0.0)
