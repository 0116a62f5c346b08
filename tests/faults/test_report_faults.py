"""Faults in report protocol 2 between the real agent and the real portal (``live_server``):
an acknowledgement lost on its way back (the portal applied the report, the agent never heard),
the same report delivered twice (a retrying proxy), and an old report arriving late. In each,
the state the portal holds for the node ends equal to what the agent sees on its GPUs: it
never diverges, and a MIG layout set meanwhile still succeeds.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpu_agent.models import Gpu, LayoutState, MigInstance, MigLayout, Node
from gpu_agent.services.nodes import join_token_create
from gpu_node_agent.delta import gpu_state
from gpu_node_agent.runner import PortalClient, PortalUnavailable, ReportAnswer
from tests.faults.test_agent_faults import FIRST, NODE, Node1, check_layouts, set_layout

pytestmark = [pytest.mark.integration]


class FaultyClient(PortalClient):
    """The agent's HTTP client with faults on ``POST report/``: ``lose_answers`` answers
    dropped after the portal took the report, ``duplicate`` every report posted twice, and
    every body kept so a test can deliver an old one late."""

    lose_answers = 0
    duplicate = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bodies: list[dict[str, Any]] = []
        self.answers: list[dict[str, Any]] = []

    def report(self, body: dict[str, Any]) -> ReportAnswer:
        self.bodies.append(body)
        if self.duplicate:
            super().report(body)  # the first delivery; its answer goes nowhere
        answer = super().report(body)
        self.answers.append(answer.raw)
        if self.lose_answers:
            self.lose_answers -= 1
            raise PortalUnavailable("POST report/: the connection dropped before the answer")
        return answer


@pytest.fixture
def node(transactional_db, live_server, world, tmp_path) -> Node1:  # type: ignore[no-untyped-def]
    _, join = join_token_create(node_name=NODE, actor=world.admin, cluster=world.h100)
    result = Node1(live_server.url, tmp_path / "agent", protocol=2)
    result.client_class = FaultyClient
    agent, _, client = result.start()
    _, result.token = client.register(join, NODE)
    agent.state.write_token(result.token, join_token=join)
    agent.state.node = NODE
    agent.state.save()
    return result


def held() -> dict[str, dict[str, Any]]:
    """What the portal holds for the node, in the shape the agent measures changes on."""
    states = {}
    for g in Gpu.objects.filter(node__name=NODE):
        instances = [
            {"gi_id": i.gi_id, "profile": i.profile, "start": i.start, "size": i.size,
             "ci_ids": i.ci_ids, "processes": i.processes}
            for i in MigInstance.objects.filter(gpu=g).order_by("gi_id")
        ]  # fmt: skip
        states[g.uuid] = gpu_state(
            {"uuid": g.uuid, "index": g.index, "name": g.name,
             "memory_total_mib": g.memory_total_mib, "mig_mode_current": g.mig_mode_current,
             "mig_mode_pending": g.mig_mode_pending, "applied_generation": g.applied_generation,
             "instances": instances, "processes": g.processes}
        )  # fmt: skip
    return states


def seen(agent: Any) -> dict[str, dict[str, Any]]:
    """What the agent sees on its GPUs (its inventory), same shape."""
    return {
        g["uuid"]: gpu_state({**g, "instances": sorted(g["instances"], key=lambda i: i["gi_id"])})
        for g in agent.inventory()["gpus"]
    }


def test_a_lost_acknowledgement_ends_in_a_full_report_and_the_same_state(world, node):
    agent, _, client = node.start()
    assert agent.run_cycle()  # the full report of a new session
    layout = set_layout(world, FIRST)
    started = time.monotonic()
    assert agent.run_cycle()  # applied; the report after it carries the new instances
    assert MigLayout.objects.get(pk=layout.pk).state == LayoutState.SUCCESS
    assert held() == seen(agent)

    # A process starts; the portal takes the report but its answer is lost.
    assert node.fake is not None
    gi = node.fake.backend.list_gpu_instances(0)[0].gi_id
    pid = node.fake.nvml.start_process(0, gi_id=gi)
    client.lose_answers = 1
    assert not agent.run_cycle()
    assert client.answers[-1]["ack"] == client.bodies[-1]["seq"]  # it was applied
    applied = held()
    assert applied == seen(agent)
    # The process ends; the agent's report is relative to the base it knows, which the
    # portal no longer holds: not applied, a full report asked for and sent at once.
    node.fake.nvml.stop_process(pid)
    sent = len(client.bodies)
    assert agent.run_cycle()
    stale, full = client.bodies[sent:]
    assert stale["full"] is False and stale["base"] < client.bodies[sent - 1]["seq"]
    assert client.answers[sent]["full_report"] is True and client.answers[sent]["ack"] is None
    assert full["full"] is True and client.answers[sent + 1]["ack"] == full["seq"]
    assert held() == seen(agent) != applied
    assert Node.objects.get(name=NODE).report_seq == full["seq"]
    # Quiet again: the next report sends no GPU and is acknowledged.
    assert agent.run_cycle()
    assert client.bodies[-1]["gpus"] == [] and client.answers[-1]["ack"] == client.bodies[-1]["seq"]
    check_layouts(
        fault="report protocol 2: an acknowledgement lost", injected=1, layouts=[layout],
        started=started,
    )  # fmt: skip


def test_reports_delivered_twice_and_late_are_applied_once(world, node):
    agent, _, client = node.start()
    client.duplicate = True
    assert agent.run_cycle()
    layout = set_layout(world, FIRST)
    started = time.monotonic()
    assert agent.run_cycle()
    assert MigLayout.objects.get(pk=layout.pk).state == LayoutState.SUCCESS
    # Every report reached the portal twice; each second delivery was acknowledged as the
    # report it already held, and no full report was ever asked for.
    assert all(a["ack"] == b["seq"] for a, b in zip(client.answers, client.bodies, strict=True))
    assert not any(a["full_report"] for a in client.answers)
    assert held() == seen(agent)

    # A report from before the layout arrives late: not applied over the newer state.
    client.duplicate = False
    old = next(b for b in client.bodies if not b["full"] and b["gpus"] == [])
    before = held()
    late = PortalClient(node.portal, token=node.token, timeout=5).report(old)
    assert late.raw["ack"] is None and late.raw["full_report"] is True
    assert held() == before == seen(agent)
    check_layouts(
        fault="report protocol 2: reports delivered twice and late", injected=2,
        layouts=[layout], started=started,
    )  # fmt: skip
