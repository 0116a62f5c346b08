"""Report protocol 2 over HTTP (PROTOCOL.md): the bodies come from the agent's own
``ReportTracker``, the answers from the portal's endpoint. A report with nothing changed costs
next to nothing and changes nothing; a change report replaces only the GPUs it names; a report
on a base the portal does not hold is not applied and a full report is asked for; the same
report delivered twice is applied once; protocol 1 agents keep working and keep their answer;
the node says which protocol it speaks, in the API and on the fleet page."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from gpu_agent.models import Gpu, MigInstance, Node
from gpu_agent.services import probes, reports
from gpu_node_agent.delta import ReportTracker, gpu_state
from tenants.models import AuditEvent
from tests.gpu_agent.test_server_api import AGENT, gpu, instance, register, report

NODE = "gpu-node-1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def admin_client(world, api_as) -> APIClient:
    return api_as(world.admin)


def inventory(*, busy_pid: int | None = 4242, second_gpu_instances: int = 1) -> dict[str, Any]:
    """What the agent's ``inventory()`` returns for gpu-node-1: two A100s in MIG mode."""
    first = [instance(1, "3g.40gb", 0, 4, *([busy_pid] if busy_pid else [])),
             instance(2, "3g.40gb", 4, 4)]  # fmt: skip
    second = [instance(i + 1, "1g.10gb", i, 1) for i in range(second_gpu_instances)]
    return report(NODE, [gpu(NODE, 0, first), gpu(NODE, 1, second)])


class Agent2:
    """gpu-node-1's agent speaking protocol 2: its tracker and its client."""

    def __init__(self, client: APIClient) -> None:
        self.client = client
        self.clock = Clock()
        self.tracker = ReportTracker(clock=self.clock)
        self.sent: list[dict[str, Any]] = []

    def body(self, inv: dict[str, Any]) -> dict[str, Any]:
        body = self.tracker.body(copy.deepcopy(inv))
        self.sent.append(body)
        return body

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(f"{AGENT}/report/", body, format="json")
        assert response.status_code == 200, response.content
        return response.json()

    def report(self, inv: dict[str, Any]) -> dict[str, Any]:
        answer = self.post(self.body(inv))
        self.tracker.answered(answer)
        return answer


def stored_state() -> dict[str, dict[str, Any]]:
    """What the portal holds for gpu-node-1, in the shape a change is measured on."""
    states = {}
    for g in Gpu.objects.filter(node__name=NODE).order_by("index"):
        instances = [
            {
                "gi_id": i.gi_id, "profile": i.profile, "start": i.start, "size": i.size,
                "ci_ids": i.ci_ids, "processes": i.processes,
            }
            for i in MigInstance.objects.filter(gpu=g).order_by("gi_id")
        ]  # fmt: skip
        states[g.uuid] = gpu_state(
            {
                "uuid": g.uuid, "index": g.index, "name": g.name,
                "memory_total_mib": g.memory_total_mib, "mig_mode_current": g.mig_mode_current,
                "mig_mode_pending": g.mig_mode_pending,
                "applied_generation": g.applied_generation, "instances": instances,
                "processes": g.processes,
            }
        )  # fmt: skip
    return states


def agent_state(inv: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["uuid"]: gpu_state(g) for g in inv["gpus"]}


@pytest.fixture
def agent(admin_client) -> Agent2:
    node = Agent2(register(admin_client, NODE))
    answer = node.report(inventory())
    assert node.sent[-1]["full"] is True  # the first report of a session is whole
    assert answer["ack"] == node.sent[-1]["seq"] and answer["full_report"] is False
    return node


def test_a_quiet_report_is_acknowledged_from_one_read_and_writes_nothing(agent):
    """Nothing changed, the node's last-report time written less than
    AGENT_LAST_REPORT_WRITE_S ago: acknowledged, and the database untouched (one read of the
    node's open work besides the token lookup)."""
    node_before = Node.objects.values().get(name=NODE)
    gpus_before = list(Gpu.objects.filter(node__name=NODE).values_list("pk", "last_seen_at"))
    body = agent.body(inventory())
    assert body["full"] is False and body["gpus"] == [] and body["base"] == agent.sent[0]["seq"]

    with CaptureQueriesContext(connection) as queries:
        answer = agent.post(body)
    agent.tracker.answered(answer)

    assert answer == {"desired_generation": 0, "probes": 0, "ack": body["seq"],
                      "full_report": False, "sample_every_s": 60}  # fmt: skip
    assert Node.objects.values().get(name=NODE) == node_before  # seq and time not written
    assert list(Gpu.objects.filter(node__name=NODE).values_list("pk", "last_seen_at")) == (
        gpus_before
    )
    # One query in all: the token lookup, which also reads the node's open work.
    assert [q["sql"].split()[0] for q in queries.captured_queries] == ["SELECT"], queries
    assert "gpu_agent_nodetoken" in queries.captured_queries[0]["sql"]
    # The next quiet report names the acknowledged report as its base, which the portal never
    # stored: the state it describes (same session, same digest) is the one held, so it is on
    # the base, and so is a change after it.
    assert agent.report(inventory())["ack"] == agent.sent[-1]["seq"]
    changed = inventory(busy_pid=None)
    answer = agent.report(changed)
    assert answer["ack"] == agent.sent[-1]["seq"] and answer["full_report"] is False
    assert stored_state() == agent_state(changed)
    assert Node.objects.get(name=NODE).report_seq == agent.sent[-1]["seq"]


def test_a_quiet_report_answers_the_open_work_read_with_the_token(world, agent):
    """The work a quiet node has (here an isolation probe to run) is in the answer to its
    quiet report, read in the token lookup: nothing is missed by not writing."""
    assert agent.report(inventory())["probes"] == 0
    gpu = Gpu.objects.get(uuid=f"GPU-{NODE}-0000")
    probes.probe_request(gpu=gpu, actor=world.admin)
    answer = agent.report(inventory())
    assert answer["probes"] == 1 and answer["ack"] == agent.sent[-1]["seq"]
    assert Node.objects.get(name=NODE).report_seq < agent.sent[-1]["seq"]  # still not written


def test_a_quiet_report_writes_the_last_report_time_once_it_is_old(agent, settings):
    settings.AGENT_LAST_REPORT_WRITE_S = 20
    old = timezone.now() - timedelta(seconds=21)
    Node.objects.filter(name=NODE).update(last_report_at=old)
    gpus_before = list(Gpu.objects.filter(node__name=NODE).values_list("pk", "last_seen_at"))
    body = agent.body(inventory())
    with CaptureQueriesContext(connection) as queries:
        answer = agent.post(body)
    agent.tracker.answered(answer)
    assert answer["ack"] == body["seq"]
    node = Node.objects.get(name=NODE)
    assert node.report_seq == body["seq"] and node.last_report_at > old
    assert list(Gpu.objects.filter(node__name=NODE).values_list("pk", "last_seen_at")) == (
        gpus_before
    )
    assert stored_state() == agent_state(inventory())
    writes = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith("SELECT")]
    assert all("gpu_agent_gpu" not in sql.split(" SET ")[0] for sql in writes), writes
    if connection.vendor == "postgresql":  # the node moved to the report: one statement
        report_queries = [
            q["sql"]
            for q in queries.captured_queries
            if "gpu_agent_nodetoken" not in q["sql"] and "SAVEPOINT" not in q["sql"]
        ]
        assert len(report_queries) == 1, report_queries
    # A stale node's quiet report is written at once, whatever the time, and says so.
    Node.objects.filter(name=NODE).update(stale=True, last_report_at=timezone.now())
    agent.report(inventory())
    assert not Node.objects.get(name=NODE).stale
    assert AuditEvent.objects.filter(action="node.reporting").count() == 1


def test_a_change_report_replaces_only_the_gpus_that_changed(agent):
    untouched = Gpu.objects.get(uuid=f"GPU-{NODE}-0001")
    untouched_instances = list(
        MigInstance.objects.filter(gpu=untouched).values_list("pk", flat=True)
    )
    changed = inventory(busy_pid=None)  # the process on GPU 0 ended

    answer = agent.report(changed)

    body = agent.sent[-1]
    assert [g["uuid"] for g in body["gpus"]] == [f"GPU-{NODE}-0000"]
    assert answer["ack"] == body["seq"]
    assert stored_state() == agent_state(changed)
    assert not MigInstance.objects.filter(gpu__uuid=f"GPU-{NODE}-0000", busy=True).exists()
    assert list(MigInstance.objects.filter(gpu=untouched).values_list("pk", flat=True)) == (
        untouched_instances
    )


def test_a_metric_alone_is_no_change_and_readings_go_once_a_sampling_interval(agent):
    heard: list[Any] = []
    reports.REPORT_INGESTED.append(lambda readings: heard.append(readings))
    try:
        busier = inventory()
        busier["gpus"][0]["instances"][0]["memory_used_mib"] = 9000
        first = agent.body(busier)
        assert first["gpus"] == [] and "readings" not in first  # sampled with the full report
        agent.tracker.answered(agent.post(first))
        agent.clock.now += 60
        second = agent.body(busier)
        assert second["gpus"] == [] and len(second["readings"]) == 3  # 2 + 1 MIG instances
        with TestCase.captureOnCommitCallbacks(execute=True):
            agent.tracker.answered(agent.post(second))
    finally:
        reports.REPORT_INGESTED.pop()
    memory = {(d.gpu_uuid, d.gi_id): d.memory_used_mib for r in heard for d in r.devices}
    assert memory[(f"GPU-{NODE}-0000", 1)] == 9000


def test_a_report_on_a_base_the_portal_does_not_hold_is_not_applied(agent):
    lost = agent.body(inventory(busy_pid=None))
    answer = agent.post(lost)  # applied by the portal: its answer never reaches the agent
    assert answer["ack"] == lost["seq"]
    agent.tracker.lost()
    held = stored_state()

    # The agent's next report is relative to the base it knows: the portal holds a newer one.
    again = inventory(busy_pid=None, second_gpu_instances=2)
    stale = agent.body(again)
    assert stale["base"] == agent.sent[0]["seq"]
    answer = agent.post(stale)
    agent.tracker.answered(answer)

    assert answer["ack"] is None and answer["full_report"] is True
    assert stored_state() == held  # nothing applied on the wrong base
    full = agent.body(again)
    assert full["full"] is True
    assert agent.post(full)["ack"] == full["seq"]
    assert stored_state() == agent_state(again)


def test_the_same_change_report_delivered_twice_is_applied_once(agent):
    body = agent.body(inventory(busy_pid=None))
    first = agent.post(body)
    seq_after = Node.objects.get(name=NODE).report_seq
    instances = list(MigInstance.objects.filter(gpu__node__name=NODE).values_list("pk", flat=True))

    second = agent.post(body)  # a proxy retried it

    assert first["ack"] == second["ack"] == body["seq"] and not second["full_report"]
    assert Node.objects.get(name=NODE).report_seq == seq_after
    assert list(MigInstance.objects.filter(gpu__node__name=NODE).values_list("pk", flat=True)) == (
        instances
    )
    # An older report arriving late (after a newer one was applied) is not applied over it.
    agent.tracker.answered(first)
    newer = inventory(busy_pid=77)
    agent.report(newer)
    late = agent.post(body)
    assert late["ack"] is None and late["full_report"] is True
    assert stored_state() == agent_state(newer)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"base": None}, "base"),
        ({"base_digest": ""}, "base_digest"),
        ({"seq": None}, "seq"),
        ({"session": ""}, "session"),
        ({"session": "NOT-HEX"}, "session"),
        ({"protocol": 3}, "protocol"),
    ],
)
def test_a_malformed_change_report_is_refused_naming_the_field(agent, change, field):
    body = {**agent.body(inventory()), **change}
    held = (stored_state(), Node.objects.get(name=NODE).report_seq)

    response = agent.client.post(f"{AGENT}/report/", body, format="json")

    assert response.status_code == 400, response.content
    assert field in str(response.json()), response.json()
    assert (stored_state(), Node.objects.get(name=NODE).report_seq) == held


def test_protocol_2_fields_in_a_protocol_1_report_are_refused(admin_client):
    client = register(admin_client, NODE)
    response = client.post(f"{AGENT}/report/", {**inventory(), "seq": 3}, format="json")
    assert response.status_code == 400 and "seq" in str(response.json())
    assert not Gpu.objects.filter(node__name=NODE).exists()


def test_readings_naming_a_gpu_of_another_node_are_refused(agent, admin_client):
    other = register(admin_client, "gpu-node-2")
    assert other.post(f"{AGENT}/report/", report("gpu-node-2", [gpu("gpu-node-2", 0)]),
                      format="json").status_code == 200  # fmt: skip
    agent.clock.now += 3600
    body = agent.body(inventory())
    body["full"] = False
    body.setdefault("base", agent.sent[0]["seq"])
    body.setdefault("base_digest", agent.sent[0]["digest"])
    body["gpus"] = []
    body["readings"] = [
        {"uuid": "GPU-gpu-node-2-0000", "model": "NVIDIA A100-SXM4-80GB", "gi_id": None,
         "profile": None, "utilization_pct": 50, "memory_used_mib": 1, "processes": 0,
         "pod_uids": []}
    ]  # fmt: skip
    response = agent.client.post(f"{AGENT}/report/", body, format="json")
    assert response.status_code == 400
    assert "readings[0].uuid" in response.json()["fields"], response.json()


def test_protocol_1_agents_keep_working_and_the_node_says_which_protocol(admin_client, agent):
    old = register(admin_client, "gpu-node-2")
    response = old.post(f"{AGENT}/report/", report("gpu-node-2", [gpu("gpu-node-2", 0)]),
                        format="json")  # fmt: skip
    assert response.status_code == 200
    assert response.json() == {"desired_generation": 0, "probes": 0}  # the answer it always had
    nodes = {n["name"]: n for n in admin_client.get("/api/v1/nodes/").json()["results"]}
    assert nodes["gpu-node-2"]["report_protocol"] == 1
    assert nodes[NODE]["report_protocol"] == 2


def test_the_fleet_page_shows_which_protocol_each_node_speaks(world, admin_client, agent, client):
    old = register(admin_client, "gpu-node-2")
    old.post(f"{AGENT}/report/", report("gpu-node-2", [gpu("gpu-node-2", 0)]), format="json")
    client.force_login(world.admin)
    page = client.get("/fleet/").content.decode()
    assert "reports changes only (protocol 2)" in page
    assert "reports everything each time (protocol 1)" in page
