"""Isolation probes (R30) over HTTP: an admin asks, the node's agent learns of it from its
report's answer, fetches it, and posts running then the outcome; the slowdown is computed by
the portal; other nodes' tokens get 403; bad requests 400/404/409 with nothing stored."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from gpu_agent.models import IsolationProbe, Node, ProbeState
from gpu_agent.services.probes import probes_fail_overdue
from tests.gpu_agent.test_server_api import (
    AGENT,
    UUID,
    gpu,
    instance,
    register,
    report,
)

PROBES = f"/api/v1/gpus/{UUID}/probes/"


@pytest.fixture
def admin_client(world, api_as) -> APIClient:
    return api_as(world.admin)


@pytest.fixture
def agent(admin_client) -> APIClient:
    """gpu-node-1 with one A100 in MIG mode: instance 1 busy (pid 4242), 2 and 3 idle."""
    client = register(admin_client, "gpu-node-1")
    instances = [
        instance(1, "3g.40gb", 0, 4, 4242),
        instance(2, "2g.20gb", 4, 2),
        instance(3, "1g.10gb", 6, 1),
    ]
    response = client.post(
        f"{AGENT}/report/", report("gpu-node-1", [gpu("gpu-node-1", 0, instances)]), format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json() == {"desired_generation": 0, "probes": 0}
    return client


def _report(client: APIClient, node: str, instances: list[dict[str, Any]]) -> dict[str, Any]:
    response = client.post(
        f"{AGENT}/report/", report(node, [gpu(node, 0, instances)]), format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_the_round_trip_from_request_to_slowdown(agent, admin_client):
    response = admin_client.post(PROBES, {}, format="json")
    assert response.status_code == 201, response.content
    probe = response.json()
    # The idle instances are picked, by start: the busy one is left alone.
    assert (probe["target_gi_id"], probe["neighbour_gi_id"]) == (2, 3)
    assert (probe["target_profile"], probe["neighbour_profile"]) == ("2g.20gb", "1g.10gb")
    assert probe["state"] == "requested" and probe["slowdown_pct"] is None
    assert probe["passed"] is None and probe["requested_by"] == "admin"

    assert _report(agent, "gpu-node-1", [instance(2, "2g.20gb", 4, 2)])["probes"] == 1
    listed = agent.get(f"{AGENT}/probes/").json()
    assert listed == {
        "node": "gpu-node-1",
        "probes": [
            {
                "id": probe["id"],
                "uuid": UUID,
                "mig": True,
                "target_gi_id": 2,
                "neighbour_gi_id": 3,
                "vgpu": None,
                "state": "requested",
            }
        ],
    }
    result = f"{AGENT}/probes/{probe['id']}/result/"
    running = agent.post(result, {"state": "running"}, format="json")
    assert running.json()["accepted"] is True and running.json()["state"] == "running"
    again = agent.post(result, {"state": "running"}, format="json")
    assert again.json()["accepted"] is False  # running twice is ignored
    done = agent.post(
        result,
        {"state": "done", "t_alone_s": 2.0, "t_together_s": 2.05, "simulated": True},
        format="json",
    )
    assert done.status_code == 200, done.content
    assert done.json() == {
        "id": probe["id"],
        "accepted": True,
        "state": "done",
        "slowdown_pct": 2.5,
        "detail": "recorded",
    }
    late = agent.post(result, {"state": "failed", "message": "late"}, format="json")
    assert late.json()["accepted"] is False and late.json()["state"] == "done"

    history = admin_client.get(PROBES).json()
    assert [(p["state"], p["slowdown_pct"], p["passed"], p["simulated"]) for p in history] == [
        ("done", 2.5, True, True)
    ]
    assert history[0]["started_at"] and history[0]["finished_at"]
    assert _report(agent, "gpu-node-1", [])["probes"] == 0  # nothing left to run


def test_a_slowdown_over_5_percent_fails_the_line(agent, admin_client):
    probe = admin_client.post(PROBES, {"target_gi_id": 1, "neighbour_gi_id": 3}, format="json")
    assert probe.status_code == 201, probe.content
    done = agent.post(
        f"{AGENT}/probes/{probe.json()['id']}/result/",
        {"state": "done", "t_alone_s": 1.0, "t_together_s": 1.8},
        format="json",
    )
    assert done.json()["slowdown_pct"] == 80.0
    assert admin_client.get(PROBES).json()[0]["passed"] is False


def test_another_nodes_token_is_forbidden_and_nothing_changes(agent, admin_client):
    probe_id = admin_client.post(PROBES, {}, format="json").json()["id"]
    other = register(admin_client, "gpu-node-2")
    _report(other, "gpu-node-2", [])
    assert other.get(f"{AGENT}/probes/").json()["probes"] == []
    response = other.post(
        f"{AGENT}/probes/{probe_id}/result/",
        {"state": "done", "t_alone_s": 1.0, "t_together_s": 1.0},
        format="json",
    )
    assert response.status_code == 403, response.content
    assert IsolationProbe.objects.get(pk=probe_id).state == ProbeState.REQUESTED
    assert agent.post(f"{AGENT}/probes/999999/result/", {"state": "running"}).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"state": "done", "t_alone_s": 1.0}, "t_together_s"),
        ({"state": "done", "t_alone_s": 0, "t_together_s": 1.0}, "t_alone_s"),
        ({"state": "requested"}, "state"),
        ({"state": "running", "extra": 1}, "extra"),
    ],
)
def test_a_malformed_result_is_400_naming_the_field(agent, admin_client, body, field):
    probe_id = admin_client.post(PROBES, {}, format="json").json()["id"]
    response = agent.post(f"{AGENT}/probes/{probe_id}/result/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert IsolationProbe.objects.get(pk=probe_id).state == ProbeState.REQUESTED


def test_bad_requests_are_refused_and_store_nothing(agent, admin_client, world, api_as):
    assert admin_client.post("/api/v1/gpus/GPU-nope/probes/", {}).status_code == 404
    assert api_as(world.alice).post(PROBES, {}).status_code == 403
    unknown = admin_client.post(PROBES, {"target_gi_id": 9}, format="json")
    assert unknown.status_code == 400 and "target_gi_id" in unknown.json()["fields"]
    same = admin_client.post(PROBES, {"target_gi_id": 2, "neighbour_gi_id": 2}, format="json")
    assert same.status_code == 400 and "neighbour_gi_id" in same.json()["fields"]

    _report(agent, "gpu-node-1", [instance(1, "3g.40gb", 0, 4)])  # one instance left
    response = admin_client.post(PROBES, {}, format="json")
    assert response.status_code == 400, response.content
    assert "a probe needs two GPU instances" in response.json()["fields"]["gpu"][0]
    assert not IsolationProbe.objects.exists()

    Node.objects.filter(name="gpu-node-1").update(
        last_report_at=timezone.now() - timedelta(hours=1)
    )
    stale = admin_client.post(PROBES, {}, format="json")
    assert stale.status_code == 409 and "stale" in stale.json()["detail"]
    assert not IsolationProbe.objects.exists()


def test_one_open_probe_per_gpu_and_overdue_ones_fail(agent, admin_client, settings):
    first = admin_client.post(PROBES, {}, format="json").json()["id"]
    second = admin_client.post(PROBES, {}, format="json")
    assert second.status_code == 409 and f"Probe {first}" in second.json()["detail"]
    later = timezone.now() + timedelta(seconds=settings.AGENT_LAYOUT_DEADLINE_S + 1)
    assert probes_fail_overdue(now=later) == [first]
    probe = IsolationProbe.objects.get(pk=first)
    assert probe.state == ProbeState.FAILED and "no result from node gpu-node-1" in probe.message
    assert admin_client.post(PROBES, {}, format="json").status_code == 201
