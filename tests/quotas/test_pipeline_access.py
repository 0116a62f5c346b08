"""R29: the tenant's ServiceAccount is useful. A team's pipeline signs in as it, with edit
rights and Kueue's batch user role in each of the tenant's namespaces; the tenant page says how."""

from __future__ import annotations

import re

from quotas.models import Cluster
from quotas.sync import tenant_push
from tenants.models import Namespace
from tests.standin import kubectl_json

RBAC = "rbac.authorization.k8s.io"


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_pushed_service_account_is_bound_to_edit_and_kueue_in_its_namespaces(world, standin):
    """Read back with the real kubectl: the stand-in has no authorizer, so the bindings' role
    and subjects are what a `kubectl auth can-i` would rest on."""
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    namespaces = list(Namespace.objects.filter(tenant=world.team_a).values_list("name", flat=True))
    assert namespaces
    for namespace in namespaces:
        account = kubectl_json(
            standin, "get", "serviceaccount", "-n", namespace, "team-a-workloads"
        )
        assert account["metadata"]["labels"]["portal.gpu-quota.io/tenant"] == "team-a"
        subject = {"kind": "ServiceAccount", "name": "team-a-workloads", "namespace": namespace}
        for name, role in (
            ("gpu-portal-edit", "edit"),
            ("gpu-portal-kueue-batch-user", "kueue-batch-user-role"),
        ):
            binding = kubectl_json(standin, "get", "rolebinding", "-n", namespace, name)
            assert binding["roleRef"] == {"apiGroup": RBAC, "kind": "ClusterRole", "name": role}
            assert subject in binding["subjects"]
            # The people and groups bound before stay bound.
            assert {"apiGroup": RBAC, "kind": "User", "name": "alice"} in binding["subjects"]
            assert {"apiGroup": RBAC, "kind": "Group", "name": "gpu-portal:team-a:edit"} in (
                binding["subjects"]
            )
        view = kubectl_json(standin, "get", "rolebinding", "-n", namespace, "gpu-portal-view")
        assert subject not in view["subjects"]
    # Another tenant's account is never a subject in team-a's namespaces.
    other = kubectl_json(standin, "get", "rolebinding", "-n", namespaces[0], "gpu-portal-edit")
    assert all(s["name"] != "team-b-workloads" for s in other["subjects"])


def test_the_tenant_page_says_how_a_pipeline_uses_the_service_account(world, client):
    client.force_login(world.carol)  # a member: pipelines are members' business too
    page = client.get("/tenants/team-a/")
    assert page.status_code == 200
    words = text_of(page.content.decode())
    assert "Use from a pipeline" in words
    for namespace in Namespace.objects.filter(tenant=world.team_a).values_list("name", flat=True):
        assert f"kubectl create token team-a-workloads -n {namespace} --duration=1h" in words
    assert "kueue.x-k8s.io/queue-name: default" in words
    assert "demo-a100, demo-h100" in words


def test_without_kueue_the_page_gives_no_queue_label(world, client):
    Cluster.objects.update(has_kueue=False)
    client.force_login(world.alice)
    words = text_of(client.get("/tenants/team-a/").content.decode())
    assert "kubectl create token team-a-workloads" in words
    assert "queue-name" not in words
