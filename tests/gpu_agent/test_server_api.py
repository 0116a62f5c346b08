"""The agent protocol (PROTOCOL.md) and the admins' fleet endpoints over HTTP: which
credentials each accepts, bodies refused whole, the layout round trip, query counts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from gpu_agent.models import Gpu, MigInstance, MigLayout, Node, NodeToken
from gpu_agent.services import layouts, nodes, reports
from tenants.services import api_token_create

A100 = "NVIDIA A100-SXM4-80GB"
AGENT = "/api/v1/agent"


def instance(gi_id: int, profile: str, start: int, size: int, *pids: int) -> dict[str, Any]:
    return {
        "gi_id": gi_id,
        "profile": profile,
        "start": start,
        "size": size,
        "ci_ids": [0],
        "memory_used_mib": 512,
        "utilization_pct": None,
        "processes": [{"pid": p, "used_memory_mib": 500, "pod_uid": f"pod-{p}"} for p in pids],
    }


def gpu(node: str, index: int, instances: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index:04d}",
        "index": index,
        "name": A100,
        "memory_total_mib": 81920,
        "memory_used_mib": 1024,
        "utilization_pct": None,
        "mig_mode_current": True,
        "mig_mode_pending": True,
        "applied_generation": 0,
        "instances": instances or [],
        "processes": [],
    }


def report(node: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node": node,
        "sent_at": "2026-12-03T08:00:00Z",
        "agent_version": "1.0",
        "driver_version": "580.65.06",
        "gpus": gpus,
    }


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def join(admin_client: APIClient, name: str) -> str:
    response = admin_client.post("/api/v1/nodes/join-tokens/", {"node": name}, format="json")
    assert response.status_code == 201, response.content
    return response.json()["join_token"]


def register(admin_client: APIClient, name: str) -> APIClient:
    response = APIClient().post(
        f"{AGENT}/register/",
        {"join_token": join(admin_client, name), "hostname": f"{name}.lab", "agent_version": "1.0"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["node"] == name
    return bearer(response.json()["node_token"])


@pytest.fixture
def admin_client(world, api_as) -> APIClient:
    return api_as(world.admin)


@pytest.fixture
def agent(admin_client) -> APIClient:
    """gpu-node-1's agent, registered, with one A100 whose instance 1 runs pid 4242."""
    client = register(admin_client, "gpu-node-1")
    busy = [instance(1, "3g.40gb", 0, 4, 4242), instance(2, "3g.40gb", 4, 4)]
    response = client.post(
        f"{AGENT}/report/", report("gpu-node-1", [gpu("gpu-node-1", 0, busy)]), format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json() == {"desired_generation": 0, "probes": 0}
    return client


UUID = "GPU-gpu-node-1-0000"


# --- registration -----------------------------------------------------------------------------


def test_register_is_one_time_and_answers_401_for_used_expired_or_wrong_tokens(admin_client):
    secret = join(admin_client, "gpu-node-1")
    body = {"join_token": secret, "hostname": "gpu-node-1", "agent_version": "1.0"}
    first = APIClient().post(f"{AGENT}/register/", body, format="json")
    assert first.status_code == 201
    assert set(first.json()) == {"node", "node_token"}
    again = APIClient().post(f"{AGENT}/register/", body, format="json")
    assert again.status_code == 401
    assert again.json()["code"] == "authentication_failed"
    wrong = APIClient().post(f"{AGENT}/register/", {**body, "join_token": "x" * 40}, format="json")
    assert wrong.status_code == 401
    expired = join(admin_client, "gpu-node-2")
    from gpu_agent.models import NodeJoinToken

    NodeJoinToken.objects.filter(node_name="gpu-node-2").update(expires_at="2000-01-01T00:00Z")
    late = APIClient().post(f"{AGENT}/register/", {**body, "join_token": expired}, format="json")
    assert late.status_code == 401 and "expired" in late.json()["detail"]
    unknown_field = APIClient().post(f"{AGENT}/register/", {**body, "extra": 1}, format="json")
    assert unknown_field.status_code == 400
    assert list(Node.objects.values_list("name", flat=True)) == ["gpu-node-1"]


def test_register_again_with_the_agent_key_answers_the_same_node(admin_client):
    """The agent's first answer was lost (it timed out); its retry carries the same key."""
    body = {
        "join_token": join(admin_client, "gpu-node-1"),
        "hostname": "gpu-node-1",
        "agent_version": "1.0",
        "agent_key": "k" * 43,
    }
    first = APIClient().post(f"{AGENT}/register/", body, format="json")
    again = APIClient().post(f"{AGENT}/register/", body, format="json")
    assert first.status_code == again.status_code == 201, again.content
    assert again.json()["node"] == first.json()["node"] == "gpu-node-1"
    lost, kept = first.json()["node_token"], again.json()["node_token"]
    assert bearer(lost).get(f"{AGENT}/desired/").status_code == 401
    assert bearer(kept).get(f"{AGENT}/desired/").status_code == 200
    other = APIClient().post(f"{AGENT}/register/", {**body, "agent_key": "o" * 43}, format="json")
    assert other.status_code == 401 and other.json()["code"] == "authentication_failed"
    short = APIClient().post(f"{AGENT}/register/", {**body, "agent_key": "k"}, format="json")
    assert short.status_code == 400
    assert "at least 16" in short.json()["fields"]["agent_key"][0]
    assert list(Node.objects.values_list("name", flat=True)) == ["gpu-node-1"]


def test_join_tokens_are_for_admins_and_validate_their_input(world, api_as, admin_client):
    for user in (world.alice, world.carol):
        refused = api_as(user).post("/api/v1/nodes/join-tokens/", {"node": "n1"}, format="json")
        assert refused.status_code == 403
    assert APIClient().post("/api/v1/nodes/join-tokens/", {"node": "n1"}).status_code == 401
    bad = admin_client.post(
        "/api/v1/nodes/join-tokens/", {"node": "Bad_Name", "cluster": "nope"}, format="json"
    )
    assert bad.status_code == 400 and "node" in bad.json()["fields"]
    no_cluster = admin_client.post(
        "/api/v1/nodes/join-tokens/", {"node": "n1", "cluster": "nope"}, format="json"
    )
    assert no_cluster.status_code == 400 and "cluster" in no_cluster.json()["fields"]
    ok = admin_client.post(
        "/api/v1/nodes/join-tokens/",
        {"node": "n1", "cluster": "demo-h100", "ttl_s": 600},
        format="json",
    )
    assert ok.status_code == 201
    assert set(ok.json()) == {"node", "join_token", "prefix", "expires_at"}
    assert ok.json()["expires_at"].endswith("Z")


# --- which credentials go where ---------------------------------------------------------------


def test_node_tokens_work_only_on_agent_endpoints(agent, world):
    secret = agent._credentials["HTTP_AUTHORIZATION"].split()[1]
    for header in (f"Bearer {secret}", f"Token {secret}"):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        for url in ("/api/v1/me/", "/api/v1/tenants/", "/api/v1/nodes/", "/api/v1/clusters/"):
            assert client.get(url).status_code == 401, (header, url)
        layout = client.put(f"/api/v1/gpus/{UUID}/layout/", {"instances": []}, format="json")
        assert layout.status_code == 401
    assert agent.get(f"{AGENT}/desired/").status_code == 200


def test_user_credentials_are_refused_on_agent_endpoints(agent, world):
    _, user_secret = api_token_create(user=world.admin)
    as_token = APIClient()
    as_token.credentials(HTTP_AUTHORIZATION=f"Token {user_secret}")
    as_bearer = bearer(user_secret)
    as_session = APIClient()
    as_session.force_login(world.admin)
    body = report("gpu-node-1", [])
    for client, expected in ((as_token, 401), (as_bearer, 401), (as_session, 401)):
        assert client.get(f"{AGENT}/desired/").status_code == expected
        assert client.post(f"{AGENT}/report/", body, format="json").status_code == expected
    forced = APIClient()
    forced.force_authenticate(world.admin)  # authenticated, but not as a node
    assert forced.get(f"{AGENT}/desired/").status_code == 403
    assert APIClient().get(f"{AGENT}/desired/").status_code == 401
    assert APIClient().get(f"{AGENT}/desired/")["WWW-Authenticate"].startswith("Bearer")
    # Nothing was reported by any of them: the node still has its one GPU.
    assert Gpu.objects.count() == 1


def test_a_revoked_node_token_answers_401(agent, admin_client):
    revoked = admin_client.post("/api/v1/nodes/gpu-node-1/tokens/revoke/")
    assert revoked.status_code == 200 and revoked.json() == {"node": "gpu-node-1", "revoked": 1}
    assert agent.get(f"{AGENT}/desired/").status_code == 401
    assert (
        agent.post(f"{AGENT}/report/", report("gpu-node-1", []), format="json").status_code == 401
    )
    assert NodeToken.objects.get().revoked_at is not None


def test_a_token_of_node_a_naming_node_b_is_forbidden(agent, admin_client):
    other = register(admin_client, "gpu-node-2")
    other.post(f"{AGENT}/report/", report("gpu-node-2", [gpu("gpu-node-2", 0)]), format="json")
    as_b = agent.post(f"{AGENT}/report/", report("gpu-node-2", []), format="json")
    assert as_b.status_code == 403
    b_gpu = agent.post(
        f"{AGENT}/report/", report("gpu-node-1", [gpu("gpu-node-2", 0)]), format="json"
    )
    assert b_gpu.status_code == 403 and "gpus[0].uuid" in b_gpu.json()["fields"]
    result = agent.post(
        f"{AGENT}/result/",
        {"uuid": "GPU-gpu-node-2-0000", "generation": 1, "state": "success"},
        format="json",
    )
    assert result.status_code == 403
    assert Gpu.objects.get(uuid="GPU-gpu-node-2-0000").node.name == "gpu-node-2"


# --- reports refused whole ---------------------------------------------------------------------


def test_a_malformed_report_is_400_with_the_fields_and_nothing_is_stored(agent):
    before = list(MigInstance.objects.values_list("pk", flat=True))
    broken = gpu("gpu-node-1", 0, [instance(1, "3g.40gb", 0, 4)])
    del broken["uuid"]
    broken["utilization_pct"] = 150
    broken["instances"][0]["start"] = -1
    response = agent.post(f"{AGENT}/report/", report("gpu-node-1", [broken]), format="json")
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert {"gpus[0].uuid", "gpus[0].utilization_pct", "gpus[0].instances[0].start"} <= set(fields)
    surprise = gpu("gpu-node-1", 0)
    surprise["surprise"] = True
    response = agent.post(f"{AGENT}/report/", report("gpu-node-1", [surprise]), format="json")
    assert response.status_code == 400 and "gpus[0].surprise" in response.json()["fields"]
    too_many = report("gpu-node-1", [gpu("gpu-node-1", i) for i in range(65)])
    response = agent.post(f"{AGENT}/report/", too_many, format="json")
    assert response.status_code == 400 and "gpus" in response.json()["fields"]
    long_name = gpu("gpu-node-1", 0)
    long_name["name"] = "N" * 101
    response = agent.post(f"{AGENT}/report/", report("gpu-node-1", [long_name]), format="json")
    assert response.status_code == 400 and "gpus[0].name" in response.json()["fields"]
    not_json = agent.post(f"{AGENT}/report/", "{nope", content_type="application/json")
    assert not_json.status_code == 400
    assert list(MigInstance.objects.values_list("pk", flat=True)) == before


NOT_NVML_UUIDS = [
    "GPU-a/b",
    "GPU-../../admin",
    "nvidia0",
    "GPU-",
    "GPU-1 2",
    "<b>GPU-1</b>",
    "GPU-1?x=1",
]


@pytest.mark.parametrize("uuid", NOT_NVML_UUIDS)
def test_a_uuid_nvml_never_writes_is_400_naming_the_field(agent, uuid):
    bad = gpu("gpu-node-1", 1)
    bad["uuid"] = uuid
    body = report("gpu-node-1", [gpu("gpu-node-1", 0), bad])
    response = agent.post(f"{AGENT}/report/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == ["gpus[1].uuid"]
    assert "GPU-" in response.json()["fields"]["gpus[1].uuid"][0]
    assert not Gpu.objects.filter(uuid=uuid).exists()
    result = agent.post(
        f"{AGENT}/result/", {"uuid": uuid, "generation": 1, "state": "success"}, format="json"
    )
    assert result.status_code == 400, result.content
    assert list(result.json()["fields"]) == ["uuid"]


def test_nvml_uuid_forms_are_accepted(agent):
    gpu_uuid = "GPU-3f5a9c1e-7b2d-4e8f-a1b2-c3d4e5f60718"
    mig_uuid = "MIG-0a1B2c3D-4e5f-6789-abcd-ef0123456789"
    gpus = [gpu("gpu-node-1", 0), gpu("gpu-node-1", 1), gpu("gpu-node-1", 2)]
    gpus[1]["uuid"], gpus[2]["uuid"] = gpu_uuid, mig_uuid
    response = agent.post(f"{AGENT}/report/", report("gpu-node-1", gpus), format="json")
    assert response.status_code == 200, response.content
    assert Gpu.objects.filter(uuid__in=[gpu_uuid, mig_uuid]).count() == 2


def test_the_report_service_refuses_a_uuid_that_is_no_nvml_uuid(agent):
    from core.errors import ValidationFailed

    node = Node.objects.get(name="gpu-node-1")
    bad = gpu("gpu-node-1", 0)
    bad["uuid"] = "GPU-a/b"
    with pytest.raises(ValidationFailed) as refused:
        reports.agent_report_ingest(node=node, report=report("gpu-node-1", [bad]))
    assert list(refused.value.fields) == ["gpus[0].uuid"]


def test_a_body_over_1_mib_is_413_and_nothing_is_stored(agent):
    before = list(MigInstance.objects.values_list("pk", flat=True))
    body = report("gpu-node-1", [gpu("gpu-node-1", 0)])
    body["agent_version"] = "x" * (1024 * 1024)
    response = agent.post(f"{AGENT}/report/", json.dumps(body), content_type="application/json")
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert "1 MiB" in response.json()["detail"]
    assert list(MigInstance.objects.values_list("pk", flat=True)) == before


def test_report_queries_do_not_grow_with_the_report(admin_client):
    """One GPU or eight, each with seven busy MIG instances: the same number of queries."""
    counts = []
    for name, n in (("small-node", 1), ("big-node", 8)):
        client = register(admin_client, name)
        body = report(
            name,
            [
                gpu(name, i, [instance(7 + s, "1g.10gb", s, 1, 100 * i + s) for s in range(7)])
                for i in range(n)
            ],
        )
        assert client.post(f"{AGENT}/report/", body, format="json").status_code == 200
        with CaptureQueriesContext(connection) as captured:
            assert client.post(f"{AGENT}/report/", body, format="json").status_code == 200
        counts.append(len(captured.captured_queries))
    # PostgreSQL: 8 for the report, 1 for the count of open isolation probes in the answer.
    assert counts[0] == counts[1] <= (9 if connection.vendor == "postgresql" else 15), counts
    assert MigInstance.objects.filter(gpu__node__name="big-node").count() == 56


# --- layouts: set, desired, result --------------------------------------------------------------


def test_layout_put_get_desired_and_result_round_trip(agent, admin_client):
    url = f"/api/v1/gpus/{UUID}/layout/"
    assert admin_client.get(url).status_code == 404
    body = {"instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb"}]}
    put = admin_client.put(url, body, format="json")
    assert put.status_code == 200, put.content
    layout = put.json()
    assert layout["generation"] == 1 and layout["state"] == "pending"
    assert layout["instances"] == [
        {"profile": "3g.40gb", "start": 0},
        {"profile": "1g.10gb", "start": 6},
    ]
    assert layout["requested_by"] == "admin" and layout["deadline"].endswith("Z")
    assert admin_client.get(url).json() == layout

    desired = agent.get(f"{AGENT}/desired/")
    assert desired.json() == {
        "node": "gpu-node-1",
        "gpus": [
            {
                "uuid": UUID,
                "generation": 1,
                "mig_enabled": True,
                "instances": layout["instances"],
            }
        ],
    }
    ingest = agent.post(f"{AGENT}/report/", report("gpu-node-1", []), format="json")
    assert ingest.json() == {"desired_generation": 1, "probes": 0}

    def result(generation: int, state: str, message: str = "") -> dict[str, Any]:
        response = agent.post(
            f"{AGENT}/result/",
            {"uuid": UUID, "generation": generation, "state": state, "message": message},
            format="json",
        )
        assert response.status_code == 200, response.content
        return response.json()

    assert result(1, "applying")["accepted"] is True
    assert result(1, "success") == {
        "uuid": UUID,
        "generation": 1,
        "accepted": True,
        "state": "success",
        "detail": "recorded",
    }
    assert admin_client.get(url).json()["state"] == "success"
    assert agent.get(f"{AGENT}/desired/").json()["gpus"] == []
    second = admin_client.put(
        url, {"instances": [{"profile": "3g.40gb", "start": 0}]}, format="json"
    )
    assert second.json()["generation"] == 2
    stale = result(1, "failed", "too late")
    assert stale["accepted"] is False and stale["state"] == "pending"
    bad_state = agent.post(
        f"{AGENT}/result/", {"uuid": UUID, "generation": 2, "state": "pending"}, format="json"
    )
    assert bad_state.status_code == 400 and "state" in bad_state.json()["fields"]


def test_an_invalid_layout_is_400_naming_the_instances_and_rules(agent, admin_client):
    url = f"/api/v1/gpus/{UUID}/layout/"
    response = admin_client.put(
        url,
        {"instances": [{"profile": "3g.40gb", "start": 1}, {"profile": "9g.10gb"}]},
        format="json",
    )
    assert response.status_code == 400
    body = response.json()
    assert set(body["fields"]) == {"instances[0].start", "instances[1].profile"}
    assert "can start only at slice 0 or 4" in body["fields"]["instances[0].start"][0]
    assert body["extra"]["rules"] == ["invalid-start", "unknown-profile"]
    shape = admin_client.put(
        url, {"instances": [{"profile": "1g.10gb", "start": -1}]}, format="json"
    )
    assert shape.status_code == 400 and "instances[0].start" in shape.json()["fields"]
    assert not MigLayout.objects.exists()


def test_a_layout_destroying_a_busy_instance_is_409_unless_drained(agent, admin_client):
    url = f"/api/v1/gpus/{UUID}/layout/"
    body = {"instances": [{"profile": "7g.80gb", "start": 0}]}
    refused = admin_client.put(url, body, format="json")
    assert refused.status_code == 409
    assert "instance 1" in refused.json()["detail"] and "pid 4242" in refused.json()["detail"]
    queued = admin_client.put(url, {**body, "drain": True}, format="json")
    assert queued.status_code == 200
    assert queued.json()["message"] == "waiting for instance 1 to go idle"
    assert queued.json()["waiting_for"] == [1] and queued.json()["deadline"] is None
    assert agent.get(f"{AGENT}/desired/").json()["gpus"] == []
    idle = report("gpu-node-1", [gpu("gpu-node-1", 0, [instance(1, "3g.40gb", 0, 4)])])
    assert agent.post(f"{AGENT}/report/", idle, format="json").json() == {
        "desired_generation": 1,
        "probes": 0,
    }
    assert [g["generation"] for g in agent.get(f"{AGENT}/desired/").json()["gpus"]] == [1]


# --- admin endpoints -------------------------------------------------------------------------


ADMIN_ROUTES = [
    ("get", "/api/v1/nodes/", None),
    ("get", "/api/v1/nodes/gpu-node-1/", None),
    ("post", "/api/v1/nodes/join-tokens/", {"node": "n2"}),
    ("post", "/api/v1/nodes/gpu-node-1/tokens/revoke/", None),
    ("get", f"/api/v1/gpus/{UUID}/layout/", None),
    ("put", f"/api/v1/gpus/{UUID}/layout/", {"instances": []}),
]


@pytest.mark.parametrize(("method", "url", "body"), ADMIN_ROUTES)
def test_fleet_endpoints_are_for_platform_admins_only(agent, world, api_as, method, url, body):
    for persona in (world.alice, world.carol, world.bob):
        response = getattr(api_as(persona), method)(url, body, format="json")
        assert response.status_code == 403, (persona, url)
    assert getattr(APIClient(), method)(url, body, format="json").status_code == 401
    assert NodeToken.objects.filter(revoked_at__isnull=True).count() == 1
    assert not MigLayout.objects.exists()


def test_the_node_list_and_detail(agent, admin_client):
    listed = admin_client.get("/api/v1/nodes/")
    assert listed.status_code == 200
    (row,) = listed.json()["results"]
    assert row["name"] == "gpu-node-1" and row["stale"] is False
    assert (row["gpu_count"], row["instance_count"], row["busy_instance_count"]) == (1, 2, 1)
    detail = admin_client.get("/api/v1/nodes/gpu-node-1/").json()
    (only,) = detail["gpus"]
    assert only["uuid"] == UUID and only["layout"] is None
    assert [i["gi_id"] for i in only["instances"]] == [1, 2]
    assert only["instances"][0]["processes"] == [
        {"pid": 4242, "used_memory_mib": 500, "pod_uid": "pod-4242"}
    ]
    assert admin_client.get("/api/v1/nodes/no-such-node/").status_code == 404
    assert admin_client.get("/api/v1/nodes/?stale=true").json()["count"] == 0


def test_fleet_reads_take_a_constant_number_of_queries(
    world, admin_client, django_assert_max_num_queries
):
    def grow(count: int, start: int) -> None:
        for n in range(start, start + count):
            name = f"node-{n}"
            node, _ = nodes.agent_register(
                join_secret=join(admin_client, name), hostname=name, agent_version="1"
            )
            body = report(name, [gpu(name, i, [instance(1, "3g.40gb", 0, 4, 1)]) for i in range(4)])
            reports.agent_report_ingest(node=node, report=body)

    grow(1, 0)
    keep = [{"profile": "3g.40gb", "start": 0}]
    layouts.layout_set(
        gpu=Gpu.objects.get(uuid="GPU-node-0-0000"), instances=keep, actor=world.admin
    )
    with CaptureQueriesContext(connection) as small_list:
        assert admin_client.get("/api/v1/nodes/").status_code == 200
    with CaptureQueriesContext(connection) as small_detail:
        assert admin_client.get("/api/v1/nodes/node-0/").status_code == 200
    # Counted now: the captured slices index a bounded log that the writes below rotate.
    list_queries, detail_queries = len(small_list), len(small_detail)
    # The page and its count; the node, its GPUs, their instances, their current layouts.
    assert (list_queries, detail_queries) == (2, 4)
    grow(5, 1)
    Gpu.objects.filter(node__name="node-1").update(node=Node.objects.get(name="node-0"))
    for moved in Gpu.objects.filter(node__name="node-0"):
        layouts.layout_set(gpu=moved, instances=keep, actor=world.admin)
    with django_assert_max_num_queries(list_queries):
        assert admin_client.get("/api/v1/nodes/").json()["count"] == 6
    with django_assert_max_num_queries(detail_queries):
        assert len(admin_client.get("/api/v1/nodes/node-0/").json()["gpus"]) == 8


# --- the report's one validator: the agent's JSON Schema, then the named checks -----------------
#
# The same bodies the former validators (the DRF ``ReportInput`` and its hand-written fast path)
# were checked against, each with the fields refused. Where DRF converted a value (a number or a
# boolean as a string, padded text), the schema takes JSON's types as they are and names the
# field: marked "was converted".

GOOD = report("gpu-node-1", [gpu("gpu-node-1", 0, [instance(1, "3g.40gb", 0, 4, 4242)])])
MINIMAL = {"node": "gpu-node-1", "sent_at": "2026-12-03T08:00:00+01:00", "gpus": []}
EDITS: list[tuple[tuple[Any, ...], Any, set[str]]] = [
    (("node",), " gpu-node-1 ", {"node"}),  # was trimmed; now no Kubernetes node name
    (("node",), "", {"node"}),
    (("node",), "n" * 254, {"node"}),
    (("node",), "gpu_node_1", {"node"}),
    (("node",), "gpu-node-1..lab", {"node"}),
    (("node",), 7, {"node"}),  # was converted to "7"
    (("sent_at",), "yesterday", {"sent_at"}),
    (("sent_at",), None, {"sent_at"}),
    (("agent_version",), None, {"agent_version"}),
    (("agent_version",), "   ", set()),
    (("agent_version",), "v" * 65, {"agent_version"}),
    (("driver_version",), "580\x00", {"driver_version"}),
    (("gpus",), None, {"gpus"}),
    (("gpus",), {}, {"gpus"}),
    (("gpus",), [gpu("gpu-node-1", i) for i in range(65)], {"gpus"}),
    (("gpus", 0), "gpu", {"gpus[0]"}),
    (("gpus", 0, "surprise"), True, {"gpus[0].surprise"}),
    (("gpus", 0, "uuid"), None, {"gpus[0].uuid"}),
    (("gpus", 0, "uuid"), "GPU-\u00fc", {"gpus[0].uuid"}),
    (("gpus", 0, "uuid"), "GPU-a/b", {"gpus[0].uuid"}),
    (("gpus", 0, "uuid"), "nvidia0", {"gpus[0].uuid"}),
    (("gpus", 0, "uuid"), " GPU-1", {"gpus[0].uuid"}),  # was trimmed
    (("gpus", 0, "index"), "0", {"gpus[0].index"}),  # was converted
    (("gpus", 0, "index"), 1.0, set()),  # an integer to JSON Schema (the parser reads it as 1)
    (("gpus", 0, "index"), 1.5, {"gpus[0].index"}),
    (("gpus", 0, "index"), True, {"gpus[0].index"}),
    (("gpus", 0, "index"), -1, {"gpus[0].index"}),
    (("gpus", 0, "index"), 1024, {"gpus[0].index"}),
    (("gpus", 0, "memory_total_mib"), 2**31, {"gpus[0].memory_total_mib"}),
    (("gpus", 0, "utilization_pct"), 101, {"gpus[0].utilization_pct"}),
    (("gpus", 0, "utilization_pct"), 55, set()),
    (("gpus", 0, "mig_mode_current"), "true", {"gpus[0].mig_mode_current"}),  # was converted
    (("gpus", 0, "mig_mode_current"), 1, {"gpus[0].mig_mode_current"}),  # was converted
    (("gpus", 0, "mig_mode_pending"), "maybe", {"gpus[0].mig_mode_pending"}),
    (("gpus", 0, "mig_mode_pending"), None, {"gpus[0].mig_mode_pending"}),
    (("gpus", 0, "applied_generation"), None, {"gpus[0].applied_generation"}),
    (("gpus", 0, "instances"), None, {"gpus[0].instances"}),
    (
        ("gpus", 0, "instances"),
        [instance(i, "1g.10gb", i, 1) for i in range(8)],
        {"gpus[0].instances"},
    ),
    (("gpus", 0, "instances", 0, "start"), -1, {"gpus[0].instances[0].start"}),
    (("gpus", 0, "instances", 0, "size"), 0, {"gpus[0].instances[0].size"}),
    (("gpus", 0, "instances", 0, "profile"), "", {"gpus[0].instances[0].profile"}),
    # was converted (DRF named the list, the schema its item)
    (("gpus", 0, "instances", 0, "ci_ids"), [0, "1"], {"gpus[0].instances[0].ci_ids[1]"}),
    (("gpus", 0, "instances", 0, "ci_ids"), [-1], {"gpus[0].instances[0].ci_ids[0]"}),
    (("gpus", 0, "instances", 0, "extra"), 1, {"gpus[0].instances[0].extra"}),
    (
        ("gpus", 0, "instances", 0, "processes", 0, "pid"),
        None,
        {"gpus[0].instances[0].processes[0].pid"},
    ),
    (("gpus", 0, "instances", 0, "processes", 0, "pod_uid"), None, set()),
    (
        ("gpus", 0, "instances", 0, "processes", 0, "pod_uid"),
        "p" * 65,
        {"gpus[0].instances[0].processes[0].pod_uid"},
    ),
    (("gpus", 0, "instances", 0, "processes", 0, "used_memory_mib"), None, set()),
    (("gpus", 0, "processes"), [{"pid": 1}], set()),
    (("gpus", 0, "processes"), [{"pid": 1}] * 257, {"gpus[0].processes"}),
]
NOT_OBJECTS = [[], "text", None]


def _edited(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(GOOD))
    target = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


def _without(*path: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(GOOD))
    target = body
    for step in path[:-1]:
        target = target[step]
    del target[path[-1]]
    return body


def _variants() -> list[tuple[Any, set[str]]]:
    """Valid reports, reports DRF used to convert (strings for numbers, padded text) and broken
    ones, each with the fields the validator refuses (none: valid)."""
    bodies: list[tuple[Any, set[str]]] = [(GOOD, set()), (report("gpu-node-1", []), set())]
    # Unknown, and the required ones missing: every problem named (DRF named the unknown one).
    bodies.append(({"nope": 1}, {"nope", "node", "sent_at", "gpus"}))
    bodies += [(body, {"non_field_errors"}) for body in NOT_OBJECTS]
    bodies.append((MINIMAL, set()))
    bodies += [(_edited(path, value), fields) for path, value, fields in EDITS]
    for path, field in (
        (("sent_at",), "sent_at"),
        (("gpus",), "gpus"),
        (("gpus", 0, "uuid"), "gpus[0].uuid"),
        (("gpus", 0, "instances", 0, "gi_id"), "gpus[0].instances[0].gi_id"),
    ):
        bodies.append((_without(*path), {field}))
    for key in ("agent_version", "driver_version"):
        bodies.append((_without(key), set()))
    for key in ("utilization_pct", "applied_generation", "instances", "processes"):
        bodies.append((_without("gpus", 0, key), set()))
    body = json.loads(json.dumps(GOOD))
    for key in ("ci_ids", "memory_used_mib", "utilization_pct", "processes"):
        del body["gpus"][0]["instances"][0][key]
    bodies.append((body, set()))
    return bodies


@pytest.mark.parametrize(("body", "fields"), _variants())
def test_the_report_validator_names_each_refused_field(body, fields):
    from core.errors import ApplicationError

    node = Node(name="gpu-node-1")  # the checks read no row
    try:
        checked = reports.report_validated(node=node, data=body)
    except ApplicationError as exc:
        assert set(exc.fields) == fields, exc.fields
        assert all(messages and all(messages) for messages in exc.fields.values())
        assert exc.status_code == 400
    else:
        assert not fields, f"valid, expected refused: {fields}"
        assert checked is body  # taken as sent: nothing converted, nothing added


def test_a_clean_report_is_taken_as_sent():
    body = report("gpu-node-1", [gpu("gpu-node-1", 0, [instance(1, "3g.40gb", 0, 4, 4242)])])
    data = reports.report_validated(node=Node(name="gpu-node-1"), data=body)
    assert data["gpus"][0]["instances"][0]["processes"][0]["pid"] == 4242
    assert data == json.loads(json.dumps(body))


def test_a_whole_number_written_as_a_float_is_stored_as_the_integer(agent):
    body = json.dumps(report("gpu-node-1", [gpu("gpu-node-1", 0)])).replace(
        '"index": 0', '"index": 0.0'
    )
    assert '"index": 0.0' in body
    response = agent.post(f"{AGENT}/report/", body, content_type="application/json")
    assert response.status_code == 200, response.content
    assert Gpu.objects.get(uuid=UUID).index == 0
    half = body.replace('"index": 0.0', '"index": 0.5')
    response = agent.post(f"{AGENT}/report/", half, content_type="application/json")
    assert response.status_code == 400 and list(response.json()["fields"]) == ["gpus[0].index"]


def test_the_schema_s_text_limits_fit_the_columns_they_are_stored_in():
    from gpu_agent.models import GPU_NAME_MAX, GPU_UUID_MAX, MIG_PROFILE_MAX, VERSION_MAX
    from gpu_spec.report import report_schema

    schema = report_schema()
    defs, props = schema["$defs"], schema["properties"]
    assert props["agent_version"]["maxLength"] <= VERSION_MAX
    assert props["driver_version"]["maxLength"] <= VERSION_MAX
    assert defs["uuid"]["maxLength"] <= GPU_UUID_MAX
    assert defs["gpu"]["properties"]["name"]["maxLength"] <= GPU_NAME_MAX
    assert defs["instance"]["properties"]["profile"]["maxLength"] <= MIG_PROFILE_MAX
