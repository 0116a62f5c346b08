"""Node names are Kubernetes node names: DNS-1123 subdomains, as EKS names its nodes
(``ip-10-0-1-23.ec2.internal``) and many on-premises clusters theirs (the host's FQDN), not only
DNS-1123 labels. A node so named gets a join token, registers, reports, and shows on the fleet
page, its GPU's page and the node API (URLs with dots); a name Kubernetes would refuse is 400
naming the field, and nothing is stored. (The in-cluster join of such a node:
``test_in_cluster_join.py``.)"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import DataError, IntegrityError, transaction
from rest_framework.test import APIClient

from gpu_agent.models import Gpu, Node, NodeJoinToken, NodeToken
from tenants.models import AuditEvent
from tests.conftest import World
from tests.pages import logged_in, main

EKS = "ip-10-0-1-23.ec2.internal"
UUID = "GPU-5e1f0000-aaaa-bbbb-cccc-000000000001"  # NVML UUIDs have no dots
A100 = "NVIDIA A100-SXM4-80GB"
RULE = "a Kubernetes node name: lowercase letters, digits, '-' and '.'"
# 3 labels of 63 and one of 61, joined by dots: 253 characters, the longest node name.
LONGEST = ".".join(["a" * 63] * 3 + ["b" * 61])


def report(node: str) -> dict[str, Any]:
    return {
        "node": node,
        "sent_at": "2026-12-03T08:00:00Z",
        "agent_version": "1.0",
        "driver_version": "580.65.06",
        "gpus": [
            {
                "uuid": UUID,
                "index": 0,
                "name": A100,
                "memory_total_mib": 81920,
                "memory_used_mib": 1024,
                "utilization_pct": 12,
                "mig_mode_current": False,
                "mig_mode_pending": False,
                "applied_generation": 0,
                "instances": [],
                "processes": [],
            }
        ],
    }


def join_token(admin: APIClient, name: str) -> Any:
    return admin.post("/api/v1/nodes/join-tokens/", {"node": name}, format="json")


def registered(admin: APIClient, name: str) -> APIClient:
    """``name``'s agent: a join token from the API, exchanged for a node token."""
    made = join_token(admin, name)
    assert made.status_code == 201, made.content
    assert made.json()["node"] == name
    answer = APIClient().post(
        "/api/v1/agent/register/",
        {"join_token": made.json()["join_token"], "hostname": name, "agent_version": "1.0"},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["node"] == name
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['node_token']}")
    return agent


@pytest.fixture
def admin(world: World, api_as: Any) -> APIClient:
    return api_as(world.admin)


@pytest.mark.django_db
def test_an_eks_node_registers_reports_and_shows_everywhere(world: World, admin: APIClient):
    agent = registered(admin, EKS)
    answer = agent.post("/api/v1/agent/report/", report(EKS), format="json")
    assert answer.status_code == 200, answer.content
    assert Gpu.objects.get(uuid=UUID).node.name == EKS

    # The node API, by name (dots in the URL).
    detail = admin.get(f"/api/v1/nodes/{EKS}/")
    assert detail.status_code == 200, detail.content
    assert detail.json()["name"] == EKS
    assert [g["uuid"] for g in detail.json()["gpus"]] == [UUID]
    assert [n["name"] for n in admin.get("/api/v1/nodes/").json()["results"]] == [EKS]
    # Another name that only differs after a dot is another node.
    assert admin.get("/api/v1/nodes/ip-10-0-1-23.ec2/").status_code == 404

    # The fleet page: its section and its GPU's link; the GPU's page links back to it.
    client = logged_in(world.admin)
    fleet = main(client.get("/fleet/"))
    section = re.search(
        rf'<section [^>]*id="node-{re.escape(EKS)}"[^>]*>.*?</section>', fleet, re.S
    )
    assert section, fleet
    assert f"<h2>{EKS}" in section.group(0)
    assert f'href="/fleet/gpus/{UUID}/"' in section.group(0)
    gpu_page = client.get(f"/fleet/gpus/{UUID}/")
    assert gpu_page.status_code == 200
    assert f'<a href="/fleet/#node-{EKS}">{EKS}</a>' in main(gpu_page)

    # Revoking its tokens, by name: its agent is 401 until it registers again.
    revoked = admin.post(f"/api/v1/nodes/{EKS}/tokens/revoke/", format="json")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json() == {"node": EKS, "revoked": 1}
    assert agent.post("/api/v1/agent/report/", report(EKS), format="json").status_code == 401


@pytest.mark.django_db
def test_the_longest_node_name_kubernetes_allows_registers(admin: APIClient):
    assert len(LONGEST) == 253
    agent = registered(admin, LONGEST)
    assert agent.post("/api/v1/agent/report/", report(LONGEST), format="json").status_code == 200
    assert admin.get(f"/api/v1/nodes/{LONGEST}/").json()["name"] == LONGEST
    # The audit log's object id holds 200 characters: the name's start and a hash of it.
    event = AuditEvent.objects.get(action="node.registered")
    assert len(event.object_id) == 200 and event.object_id.startswith(LONGEST[:180])
    assert event.object_id != LONGEST[:200]


BAD_NAMES = [
    pytest.param("IP-10-0-1-23.ec2.internal", id="uppercase"),
    pytest.param("ip-10-0-1-23..ec2.internal", id="two-dots"),
    pytest.param(".ip-10-0-1-23", id="leading-dot"),
    pytest.param("ip-10-0-1-23.", id="trailing-dot"),
    pytest.param("ip-10-0-1-23.-ec2", id="part-starting-with-dash"),
    pytest.param("gpu_node_1", id="underscore"),
    pytest.param("a" * 254, id="254-characters"),
    pytest.param("gpu node", id="space"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_join_token_for_a_name_kubernetes_refuses_is_400_naming_the_field(
    admin: APIClient, name: str
):
    answer = join_token(admin, name)
    assert answer.status_code == 400, answer.content
    (message,) = answer.json()["fields"]["node"]
    assert RULE in message
    if len(name) > 253:
        assert "254 characters" in message
    assert not NodeJoinToken.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_report_naming_such_a_node_is_400_naming_the_field(admin: APIClient, name: str):
    agent = registered(admin, EKS)
    answer = agent.post("/api/v1/agent/report/", report(name), format="json")
    assert answer.status_code == 400, answer.content
    assert list(answer.json()["fields"]) == ["node"]
    assert not Gpu.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["ip-10-0-1-23..ec2.internal", ".a", "A.b", "a_b", "a" * 254])
def test_the_database_refuses_what_the_checks_refuse(name: str):
    """Rows written around the services (a script, the shell) keep the rule too."""
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        Node.objects.create(name=name)
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        NodeJoinToken.objects.create(
            node_name=name, prefix="p", digest="d" * 64, expires_at="2030-01-01T00:00:00Z"
        )
    Node.objects.create(name=EKS)  # and takes what Kubernetes takes
    Node.objects.create(name=LONGEST)
    assert not NodeToken.objects.exists()


def test_the_agent_and_the_portal_check_one_rule():
    """The report's schema (the agent checks its reports with it) says what the portal's
    validator and database check say."""
    from gpu_spec.report import node_name_problem, report_schema
    from tenants.validators import DNS1123_SUBDOMAIN_REGEX, NODE_NAME_MAX

    rule = report_schema()["$defs"]["nodeName"]
    assert rule["pattern"] == DNS1123_SUBDOMAIN_REGEX
    assert rule["maxLength"] == NODE_NAME_MAX == Node._meta.get_field("name").max_length
    assert node_name_problem(EKS) is None and node_name_problem(LONGEST) is None
    assert RULE in (node_name_problem("ip..x") or "")
    assert "254 characters" in (node_name_problem("a" * 254) or "")


def test_the_agent_refuses_a_node_flag_kubernetes_would_refuse(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
):
    from gpu_node_agent import runner

    for flag in ("--node", "--kubernetes-node"):
        with pytest.raises(SystemExit):
            runner.main(
                ["--portal", "http://127.0.0.1:1", "--token", "t", flag, "GPU_Node.lab",
                 "--state-dir", str(tmp_path), "--once"],
                sleep=lambda _s: None,
            )  # fmt: skip
        err = capsys.readouterr().err
        assert f"{flag}: " in err and RULE in err
