"""Nodes join as Kubernetes identities: an agent in a cluster registers with its pod's projected
ServiceAccount token, which the portal checks with that cluster's TokenReview, and no join token.

The cluster is the local API stand-in (with deploy/kubernetes/cluster-access applied), reached
as the portal's web pods' account with only the RBAC node-join.yaml grants it; tokens come from
the real TokenRequest (``kubectl create token ... --bound-object-kind Pod``), as the kubelet's
projected tokens are made. The agent is the real ``gpu-node-agent`` command line
(``gpu_node_agent.runner.main``) with the fake NVML backend, against the portal over HTTP.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config
from kubernetes.dynamic import DynamicClient
from rest_framework.test import APIClient

from devcluster.runner import Handle
from gpu_agent.models import Gpu, Node, NodeJoinToken, NodeToken
from gpu_agent.services.nodes import node_token_revoke
from gpu_node_agent import runner
from quotas.models import Cluster
from tenants.models import AuditEvent
from tests.conftest import World
from tests.deploy.manifests import find, overlay
from tests.standin import kubectl, point_at

AGENT_NS = "gpu-agent"
AUDIENCE = "gpu-quota-portal"
PORTAL_NS = "gpu-quota-portal"
WEB_ACCOUNT = "gpu-quota-portal-web"
H100 = "NVIDIA H100 80GB HBM3"
REGISTER = "/api/v1/agent/register/"


def create(handle: Handle, *objects: dict[str, Any]) -> None:
    dynamic = DynamicClient(config.new_client_from_config(config_file=str(handle.kubeconfig_path)))
    for obj in objects:
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.create(body=obj, namespace=obj["metadata"].get("namespace"))


def account(name: str, ns: str = AGENT_NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns},
    }


def k8s_node(name: str, *, gpu: bool = True) -> dict[str, Any]:
    labels = {"nvidia.com/gpu.present": "true"} if gpu else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(name: str, node: str, service_account: str = "gpu-agent") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": AGENT_NS},
        "spec": {
            "serviceAccountName": service_account,
            "nodeName": node,
            "containers": [{"name": "agent", "image": "gpu-node-agent"}],
        },
    }


@pytest.fixture
def cluster(standin: Handle, world: World, tmp_path: Path) -> Handle:
    """The stand-in with GPU nodes gpu-a (the agent's pod agent-a on it, and other-a running as
    another ServiceAccount) and cpu-1 (no GPU, agent-cpu on it); demo-a100 reached as the web
    pods' account."""
    create(
        standin,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NS}},
        account("gpu-agent"),
        account("other"),
        account(WEB_ACCOUNT, PORTAL_NS),
        k8s_node("gpu-a"),
        k8s_node("gpu-b"),
        k8s_node("cpu-1", gpu=False),
        pod("agent-a", "gpu-a"),
        pod("agent-cpu", "cpu-1"),
        pod("other-a", "gpu-a", service_account="other"),
    )
    web = standin.kubeconfig_for(
        WEB_ACCOUNT,
        tmp_path / "web-kubeconfig",
        token=standin.service_account_token(PORTAL_NS, WEB_ACCOUNT, expiration_seconds=86400),
    )
    point_at(world.a100, web)
    return standin


def token(handle: Handle, *args: str, service_account: str = "gpu-agent") -> str:
    """``kubectl create token`` (the real kubectl, as the cluster admin)."""
    return kubectl(handle, "create", "token", service_account, "-n", AGENT_NS, *args).stdout.strip()


def projected(handle: Handle, pod_name: str, service_account: str = "gpu-agent") -> str:
    """The token the kubelet projects into ``pod_name``: bound to it, for the portal."""
    return token(
        handle, "--audience", AUDIENCE, "--bound-object-kind", "Pod",
        "--bound-object-name", pod_name, service_account=service_account,
    )  # fmt: skip


def agent(live_url: str, token_file: Path, state: Path, *extra: str) -> int:
    return runner.main(
        [
            "--portal", live_url, "--service-account-token-file", str(token_file),
            "--cluster", "demo-a100", "--backend", "fake", "--fake-gpus", f"{H100}:2",
            "--state-dir", str(state), "--once", *extra,
        ],
        sleep=lambda _s: None,
    )  # fmt: skip


# The done-when: an in-cluster agent joins with its ServiceAccount token and no join token --------


@pytest.mark.integration
def test_an_in_cluster_agent_joins_with_its_service_account_token_and_reports(
    transactional_db: Any, live_server: Any, world: World, cluster: Handle, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(projected(cluster, "agent-a"))
    state = tmp_path / "state"
    before = Counter(cluster.stats()["verb_kinds"])

    assert agent(live_server.url, token_file, state, "--kubernetes-node", "gpu-a") == 0

    node = Node.objects.select_related("cluster").get(name="gpu-a")
    assert node.cluster == world.a100
    assert Gpu.objects.filter(node=node).count() == 2  # registered, then reported
    assert node.last_report_at is not None
    assert not NodeJoinToken.objects.exists()
    event = AuditEvent.objects.get(action="node.registered")
    assert event.actor is None
    assert event.after["service_account"] == "gpu-agent/gpu-agent"
    assert event.after["pod"] == "gpu-agent/agent-a"
    assert event.after["cluster"] == "demo-a100"
    assert (state / "node-token").read_text().strip()

    # What the join asked the cluster, as the web pods' account: exactly node-join.yaml's grants.
    asked = Counter(cluster.stats()["verb_kinds"]) - before
    assert set(asked) == {"create TokenReview", "get Node"}  # the token names its node
    role = find(overlay("in-cluster"), "ClusterRole", "gpu-quota-portal-node-join")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert granted == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("", "nodes", "get"),
        ("", "pods", "get"),  # for clusters before 1.30 (test_a_token_without_its_node...)
    }

    # A restart keeps its node token: no second registration.
    assert agent(live_server.url, token_file, state) == 0
    assert AuditEvent.objects.filter(action="node.reregistered").count() == 0

    # Its tokens revoked (the kubelet has rotated the projected token meanwhile): the agent
    # registers again with the token now in the file, with no admin step.
    token_file.write_text(projected(cluster, "agent-a"))
    first = NodeToken.objects.get(node=node)
    assert node_token_revoke(node=node, actor=world.admin) == 1
    assert agent(live_server.url, token_file, state) == 0
    assert AuditEvent.objects.filter(action="node.reregistered").count() == 1
    live = NodeToken.objects.get(node=node, revoked_at__isnull=True)
    assert live.pk != first.pk


@pytest.mark.integration
def test_an_eks_node_named_with_dots_joins_and_reports(
    transactional_db: Any, live_server: Any, world: World, cluster: Handle, tmp_path: Path
) -> None:
    """EKS names nodes ip-10-0-1-23.ec2.internal (a DNS-1123 subdomain, as every Node name may
    be): the node registers under that name, reports, and its API URL has the dots."""
    eks = "ip-10-0-1-23.ec2.internal"
    create(cluster, k8s_node(eks), pod("agent-eks", eks))
    token_file = tmp_path / "token"
    token_file.write_text(projected(cluster, "agent-eks"))

    code = agent(live_server.url, token_file, tmp_path / "state", "--kubernetes-node", eks)

    assert code == 0
    node = Node.objects.get(name=eks)
    assert node.cluster == world.a100 and node.last_report_at is not None
    assert Gpu.objects.filter(node=node).count() == 2
    assert AuditEvent.objects.get(action="node.registered").object_id == eks
    admin = APIClient()
    admin.force_authenticate(world.admin)
    assert admin.get(f"/api/v1/nodes/{eks}/").json()["name"] == eks


@pytest.mark.django_db
def test_a_malformed_node_claim_is_400_naming_the_field(cluster: Handle) -> None:
    answer = register(
        {"service_account_token": projected(cluster, "agent-a"), "cluster": "demo-a100",
         "node": "GPU_A.lab"}
    )  # fmt: skip
    assert answer.status_code == 400, answer.content
    assert "a Kubernetes node name" in answer.json()["fields"]["node"][0]
    assert not Node.objects.exists()


# Refused, and nothing registered ---------------------------------------------------------------


def register(body: dict[str, Any]) -> Any:
    return APIClient().post(REGISTER, body, format="json")


def refused(answer: Any, status: int, words: str) -> None:
    assert answer.status_code == status, answer.content
    assert words in answer.json()["detail"], answer.json()
    assert not Node.objects.exists() and not NodeToken.objects.exists()


@pytest.mark.django_db
def test_another_service_accounts_token_is_403(cluster: Handle) -> None:
    answer = register(
        {"service_account_token": projected(cluster, "other-a", "other"), "cluster": "demo-a100"}
    )
    refused(answer, 403, "system:serviceaccount:gpu-agent:other's; only the node agents'")


@pytest.mark.django_db
def test_a_token_for_another_audience_is_401(cluster: Handle) -> None:
    kube_token = token(cluster, "--bound-object-kind", "Pod", "--bound-object-name", "agent-a")
    answer = register({"service_account_token": kube_token, "cluster": "demo-a100"})
    refused(answer, 401, "did not accept the ServiceAccount token")


@pytest.mark.django_db
def test_a_pod_on_node_a_claiming_node_b_is_403(cluster: Handle) -> None:
    answer = register(
        {"service_account_token": projected(cluster, "agent-a"), "cluster": "demo-a100",
         "node": "gpu-b"}
    )  # fmt: skip
    refused(answer, 403, "runs on node gpu-a, not gpu-b")


@pytest.mark.django_db
def test_an_expired_token_is_401(cluster: Handle, monkeypatch: pytest.MonkeyPatch) -> None:
    expired = projected(cluster, "agent-a")
    tokens = cluster.cluster.tokens
    clock = tokens.now
    monkeypatch.setattr(tokens, "now", lambda: clock() + 3601)
    answer = register({"service_account_token": expired, "cluster": "demo-a100"})
    refused(answer, 401, "service account token has expired")


@pytest.mark.django_db
def test_a_token_of_a_deleted_pod_or_made_up_is_401(cluster: Handle) -> None:
    bound = projected(cluster, "agent-a")
    kubectl(cluster, "delete", "pod", "agent-a", "-n", AGENT_NS)
    refused(
        register({"service_account_token": bound, "cluster": "demo-a100"}),
        401,
        "service account token has been invalidated",
    )
    refused(
        register({"service_account_token": "made-up", "cluster": "demo-a100"}),
        401,
        "did not accept",
    )


@pytest.mark.django_db
def test_a_token_not_bound_to_a_pod_is_403(cluster: Handle) -> None:
    unbound = token(cluster, "--audience", AUDIENCE)
    answer = register({"service_account_token": unbound, "cluster": "demo-a100"})
    refused(answer, 403, "not bound to a pod")


@pytest.mark.django_db
def test_an_agent_on_a_node_without_gpus_is_403(cluster: Handle) -> None:
    answer = register({"service_account_token": projected(cluster, "agent-cpu")})
    refused(answer, 403, "Node cpu-1 of cluster demo-a100 is not a GPU node")


@pytest.mark.django_db
def test_a_node_the_portal_has_in_another_cluster_is_403(world: World, cluster: Handle) -> None:
    Node.objects.create(name="gpu-a", cluster=world.h100)
    answer = register({"service_account_token": projected(cluster, "agent-a")})
    assert answer.status_code == 403
    assert "Node gpu-a is registered in cluster demo-h100, not demo-a100" in answer.json()["detail"]
    assert not NodeToken.objects.exists()
    assert Node.objects.get(name="gpu-a").cluster == world.h100


@pytest.mark.django_db
def test_the_portal_without_the_node_join_role_answers_503(
    world: World, cluster: Handle, tmp_path: Path
) -> None:
    """Reached as an account that may not review tokens: the agent retries later."""
    point_at(world.a100, cluster.kubeconfig_for("nobody", tmp_path / "nobody"))
    answer = register({"service_account_token": projected(cluster, "agent-a")})
    refused(answer, 503, "needs create on tokenreviews")


# Kubernetes before 1.30: the token names its pod only ---------------------------------------------


@pytest.mark.django_db
def test_a_token_without_its_node_is_tied_to_the_node_its_pod_runs_on(
    world: World, cluster: Handle
) -> None:
    # Bound while its Node did not exist yet: the token names no node, as before 1.30.
    create(cluster, pod("agent-late", "gpu-late"))
    bound = projected(cluster, "agent-late")
    create(cluster, k8s_node("gpu-late"))
    before = Counter(cluster.stats()["verb_kinds"])
    answer = register({"service_account_token": bound, "node": "gpu-late"})
    assert answer.status_code == 201, answer.content
    assert answer.json()["node"] == "gpu-late"
    assert Node.objects.get(name="gpu-late").cluster == world.a100
    asked = Counter(cluster.stats()["verb_kinds"]) - before
    assert set(asked) == {"create TokenReview", "get Pod", "get Node"}


# Bad input: 400 naming the field, nothing changed ---------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"join_token": "x" * 40, "service_account_token": "y"}, "service_account_token"),
        ({"hostname": "h"}, "join_token"),
        ({"service_account_token": "y", "cluster": "nowhere"}, "cluster"),
        ({"join_token": "x" * 40, "cluster": "demo-a100"}, "cluster"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(
    cluster: Handle, body: dict[str, Any], field: str
) -> None:
    answer = register(body)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["fields"], answer.json()
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_without_a_cluster_name_several_kubernetes_clusters_are_400(
    world: World, cluster: Handle
) -> None:
    Cluster.objects.filter(pk=world.h100.pk).update(backend=world.a100.backend)
    answer = register({"service_account_token": projected(cluster, "agent-a")})
    assert answer.status_code == 400
    assert "several clusters" in answer.json()["fields"]["cluster"][0]


def test_the_agent_without_a_token_file_or_join_token_says_what_to_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        agent("http://127.0.0.1:1", tmp_path / "missing", tmp_path / "state")
    assert "no ServiceAccount token in" in capsys.readouterr().err
