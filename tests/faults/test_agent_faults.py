"""Faults between the portal and a GPU node agent: the agent disconnected in the middle of a MIG
apply (killed between destroying and creating instances, or the portal unreachable from
there on), and the agent's clock hours off the portal's. Each under both report protocols: 1
(every report whole) and 2 (what changed since the acknowledged report).

The portal is the real one (``live_server``: Django over HTTP on the test database); the agent
is the real ``gpu_node_agent.runner.Agent`` with the fake backend (the simulated NVML, saved
to its state file after every change), so "the process restarted" is a new ``Agent`` built
from the state directory, as ``gpu-node-agent`` builds it. Each test ends with the layout
invariants: every layout the admin set is on the GPU and ``success`` in the portal, none stuck,
no work redone after the restart, the busy instance never destroyed.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from gpu_agent.models import Gpu, LayoutState, MigLayout, Node
from gpu_agent.services.layouts import layout_set, layouts_fail_overdue
from gpu_agent.services.nodes import join_token_create, nodes_mark_stale
from gpu_node_agent.probe import SimulatedProber
from gpu_node_agent.runner import Agent, AgentState, PortalClient, PortalUnavailable
from gpu_node_agent.testing.fake import STATE_FILE as FAKE_STATE_FILE
from gpu_node_agent.testing.fake import FakeNode, build_fake_node
from tests.faults.invariants import Outcome, record

pytestmark = [pytest.mark.integration]

NODE = "gpu-node-f1"
H100 = "NVIDIA H100 80GB HBM3"
MUTATIONS = (
    "create_gpu_instance",
    "create_compute_instance",
    "destroy_compute_instance",
    "destroy_gpu_instance",
    "set_mig_mode",
)


class AgentKilled(BaseException):
    """The agent process dying: not an ``Exception``, so nothing in the agent catches it."""


@dataclass
class Recording:
    """The backend's state-changing calls, and what happens before the next one."""

    backend: Any
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    before_create: Any = None  # called once, at the first create_gpu_instance

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.backend, name)
        if name not in MUTATIONS:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "create_gpu_instance" and self.before_create is not None:
                hook, self.before_create = self.before_create, None
                hook()
            self.calls.append((name, args))
            return attribute(*args, **kwargs)

        return call


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens there


@dataclass
class Node1:
    """One simulated H100 node; ``start()`` is the agent process starting (state dir read)."""

    portal: str
    directory: Path
    token: str = ""
    fake: FakeNode | None = None
    protocol: int = 2  # the report protocol the agent speaks

    def start(
        self, *, portal: str | None = None, now: Any = None
    ) -> tuple[Agent, Recording, PortalClient]:
        self.fake = build_fake_node(
            f"{H100}:1", state_path=self.directory / FAKE_STATE_FILE, seed=NODE
        )
        backend = Recording(self.fake.backend)
        client = self.client_class(portal or self.portal, token=self.token or None, timeout=5)
        state = AgentState(self.directory)
        extra = {"now": now} if now is not None else {}
        agent = Agent(
            backend=backend,
            client=client,
            state=state,
            node=NODE,
            pod_lookup=self.fake.pod_uid_for_pid,
            prober=SimulatedProber(seed=NODE),
            sleep=lambda _s: None,
            report_protocol=self.protocol,
            **extra,
        )
        return agent, backend, client

    client_class: Any = PortalClient


@pytest.fixture(params=[1, 2], ids=["protocol-1", "protocol-2"])
def node(request, transactional_db, live_server, world, tmp_path) -> Node1:  # type: ignore[no-untyped-def]
    _, join = join_token_create(node_name=NODE, actor=world.admin, cluster=world.h100)
    result = Node1(live_server.url, tmp_path / "agent", protocol=request.param)
    agent, _, client = result.start()
    _, result.token = client.register(join, NODE)
    agent.state.write_token(result.token, join_token=join)
    agent.state.node = NODE
    agent.state.save()
    return result


def gpu() -> Gpu:
    return Gpu.objects.get(node__name=NODE)


def set_layout(world: Any, instances: list[tuple[str, int]]) -> MigLayout:
    return layout_set(
        gpu=gpu(), instances=[{"profile": p, "start": s} for p, s in instances], actor=world.admin
    )


def observed(fake: FakeNode) -> list[tuple[str, int]]:
    return sorted((i.profile, i.start) for i in fake.backend.list_gpu_instances(0))


def check_layouts(*, fault: str, injected: int, layouts: list[MigLayout], started: float) -> None:
    states = {layout.generation: MigLayout.objects.get(pk=layout.pk).state for layout in layouts}
    converge_s = time.monotonic() - started
    lost = [g for g, s in states.items() if s != LayoutState.SUCCESS]
    problems = [f"layout generation {g} is {states[g]}" for g in lost]
    outcome = Outcome(round(converge_s, 1), len(layouts), len(lost), problems)
    record(fault, injected=injected, outcome=outcome)
    assert not problems, problems


FIRST = [("3g.40gb", 0), ("3g.40gb", 4)]
SECOND = [("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("3g.40gb", 4)]


def _busy_second_layout(world: Any, node: Node1) -> tuple[MigLayout, int, int]:
    """The first layout applied, a process on the 3g.40gb at slice 4, and a second layout that
    keeps it and splits the other half: (second layout, the busy GI's id, the pid)."""
    agent, _, _ = node.start()
    assert agent.run_cycle()  # the GPU reported
    first = set_layout(world, FIRST)
    assert agent.run_cycle()
    assert MigLayout.objects.get(pk=first.pk).state == LayoutState.SUCCESS
    assert node.fake is not None and observed(node.fake) == sorted(FIRST)
    busy_gi = next(i.gi_id for i in node.fake.backend.list_gpu_instances(0) if i.start == 4)
    pid = node.fake.nvml.start_process(0, gi_id=busy_gi)
    assert agent.run_cycle()  # the portal learns it is busy
    return set_layout(world, SECOND), busy_gi, pid


def _converged_without_redoing(node: Node1, second: MigLayout, busy_gi: int, pid: int) -> None:
    assert node.fake is not None
    assert observed(node.fake) == sorted(SECOND)
    kept = {i.start: i for i in node.fake.backend.list_gpu_instances(0)}[4]
    assert kept.gi_id == busy_gi and [p.pid for p in kept.processes] == [pid]
    # A restart after success changes nothing: the state file says generation 2 is applied.
    agent, backend, _ = node.start()
    assert agent.run_cycle()
    assert backend.calls == []
    assert agent.state.applied_generation(gpu().uuid) == second.generation


def test_agent_killed_between_destroy_and_create(world, node):
    second, busy_gi, pid = _busy_second_layout(world, node)
    agent, backend, _ = node.start()

    def die() -> None:
        raise AgentKilled

    backend.before_create = die
    with pytest.raises(AgentKilled):
        agent.run_cycle()
    killed_at = time.monotonic()
    destroyed = [c for c in backend.calls if c[0].startswith("destroy")]
    assert destroyed and not [c for c in backend.calls if c[0].startswith("create")]
    assert MigLayout.objects.get(pk=second.pk).state == LayoutState.APPLYING

    # The process starts again; the portal is unreachable for its first cycles.
    agent, backend, client = node.start(portal=dead_url())
    assert not agent.run_cycle() and not agent.run_cycle()
    assert backend.calls == []  # nothing done without the portal's layout
    client.base_url = node.portal
    assert agent.run_cycle()
    # Only what was left: the three 1g.10gb instances, nothing destroyed again.
    assert [c[0] for c in backend.calls if c[0] == "destroy_gpu_instance"] == []
    assert [c for c in backend.calls if c[0] == "create_gpu_instance"] == [
        ("create_gpu_instance", (0, "1g.10gb", s)) for s in (0, 1, 2)
    ]
    _converged_without_redoing(node, second, busy_gi, pid)
    check_layouts(
        fault="agent killed between MIG destroy and create",
        injected=1,
        layouts=[second],
        started=killed_at,
    )


def test_portal_unreachable_in_the_middle_of_a_mig_apply(world, node):
    second, busy_gi, pid = _busy_second_layout(world, node)
    agent, backend, client = node.start()

    def disconnect() -> None:
        client.base_url = dead_url()

    backend.before_create = disconnect
    assert not agent.run_cycle()  # applied on the node; the result could not be posted
    cut_at = time.monotonic()
    assert MigLayout.objects.get(pk=second.pk).state == LayoutState.APPLYING
    assert node.fake is not None and observed(node.fake) == sorted(SECOND)
    with pytest.raises(PortalUnavailable):
        client.report({"node": NODE, "sent_at": "2026-12-03T07:00:00Z", "gpus": []})
    client.base_url = node.portal
    calls = len(backend.calls)
    assert agent.run_cycle()
    assert len(backend.calls) == calls  # the result was posted; nothing applied twice
    _converged_without_redoing(node, second, busy_gi, pid)
    check_layouts(
        fault="portal unreachable mid MIG apply",
        injected=1,
        layouts=[second],
        started=cut_at,
    )


@pytest.mark.parametrize("skew_h", [-6, 6])
def test_agent_clock_hours_off_the_portal(world, node, skew_h):
    """The agent's ``sent_at`` is hours off: the portal keeps time by its own clock, so the
    node is neither stale nor fresh by the agent's word, and a layout's deadline runs from the
    portal's now."""

    def skewed() -> str:
        when = timezone.now() + timedelta(hours=skew_h)
        return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")

    agent, _, _ = node.start(now=skewed)
    started = time.monotonic()
    before = timezone.now()
    assert agent.run_cycle()
    after = timezone.now()
    seen = Node.objects.get(name=NODE)
    assert seen.last_report_at is not None and before <= seen.last_report_at <= after
    assert nodes_mark_stale() == [] and not Node.objects.get(name=NODE).stale
    layout = set_layout(world, FIRST)
    assert layout.deadline is not None
    assert abs((layout.deadline - timezone.now()).total_seconds()) < 3600  # 10 min by default
    assert layouts_fail_overdue() == []
    assert agent.run_cycle()
    assert MigLayout.objects.get(pk=layout.pk).state == LayoutState.SUCCESS
    # Staleness still follows the portal's clock: without reports, stale after the period.
    assert nodes_mark_stale(now=timezone.now() + timedelta(minutes=5)) == [NODE]
    check_layouts(
        fault=f"agent clock {skew_h:+d} h off the portal",
        injected=2,  # the skewed reports
        layouts=[layout],
        started=started,
    )
