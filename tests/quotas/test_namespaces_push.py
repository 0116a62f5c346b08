"""What the push does with a tenant's namespaces, against the local API stand-in, read back
with the real kubectl: it never writes into a system namespace or one the cluster reserves
(even where a tenant has it), never takes over a namespace it did not create unless a platform
admin adopted it, and a namespace taken away from a tenant loses what the portal wrote there
(the namespace and users' objects stay). The API's refusals: tests/tenants/
test_namespace_rules.py."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from devcluster.runner import start_in_thread
from identity.models import GroupMapping
from quotas.choices import SyncState
from quotas.models import Cluster, TenantSync
from quotas.sync import tenant_push
from tenants.models import Namespace
from tenants.services import namespace_adopt, namespace_create, namespace_remove
from tests.cluster_access import hold_cluster_access
from tests.standin import KUBECTL, kubectl_json, point_at

PORTAL_KINDS = (
    "resourcequotas",
    "limitranges",
    "networkpolicies",
    "serviceaccounts",
    "rolebindings",
    "localqueues.kueue.x-k8s.io",
)
TENANT_LABEL = "portal.gpu-quota.io/tenant"
MANAGED_BY = "app.kubernetes.io/managed-by"


def portal_objects(handle: Any, namespace: str) -> list[str]:
    """``kind/name`` of every object carrying the portal's tenant label in ``namespace``."""
    found = []
    for kind in PORTAL_KINDS:
        items = kubectl_json(handle, "get", kind, "-n", namespace, "-l", TENANT_LABEL)["items"]
        found.extend(f"{kind}/{item['metadata']['name']}" for item in items)
    return sorted(found)


def create(handle: Any, obj: dict[str, Any]) -> None:
    """``kubectl create -f`` of ``obj`` (the stand-in takes JSON, not kubectl's generators)."""
    subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(handle.kubeconfig_path), "create", "-f", "-"],
        input=json.dumps(obj),
        check=True,
        capture_output=True,
        text=True,
    )


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def configmap(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"a": "b"},
    }


def sync_message(world: Any) -> str:
    return TenantSync.objects.get(tenant=world.team_a, cluster=world.a100).message


def test_a_removed_namespace_loses_what_the_portal_wrote_and_nothing_else(world, standin):
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    written = portal_objects(standin, "team-a-inference")
    for kind in PORTAL_KINDS:
        assert any(o.startswith(f"{kind}/") for o in written), (kind, written)
    create(standin, configmap("notes", "team-a-inference"))

    namespace_remove(tenant=world.team_a, name="team-a-inference", actor=world.admin)
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

    assert outcome.ok, outcome.message
    assert portal_objects(standin, "team-a-inference") == []
    namespace = kubectl_json(standin, "get", "namespace", "team-a-inference")  # still there
    labels = namespace["metadata"].get("labels") or {}
    assert TENANT_LABEL not in labels and MANAGED_BY not in labels  # released
    assert kubectl_json(standin, "get", "configmap", "notes", "-n", "team-a-inference")
    assert portal_objects(standin, "team-a-training")  # the other namespace keeps its objects
    assert outcome.result is not None
    assert "Namespace team-a-inference" in outcome.result.summary()["released"]


def test_a_namespace_the_portal_did_not_create_is_left_alone_until_adopted(world, standin):
    create(standin, namespace("team-a-notebooks"))
    create(standin, configmap("mine", "team-a-notebooks"))
    namespace_create(
        tenant=world.team_a, name="team-a-notebooks", purpose="general", actor=world.admin
    )

    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

    assert not outcome.ok
    message = sync_message(world)
    assert (
        "namespace team-a-notebooks exists on demo-a100 and the portal did not create it" in message
    )
    assert "a platform admin can adopt it" in message
    assert portal_objects(standin, "team-a-notebooks") == []
    labels = kubectl_json(standin, "get", "namespace", "team-a-notebooks")["metadata"]
    assert TENANT_LABEL not in (labels.get("labels") or {})
    assert portal_objects(standin, "team-a-training")  # its other namespaces are pushed
    sync = TenantSync.objects.get(tenant=world.team_a, cluster=world.a100)
    assert sync.state == SyncState.FAILED

    namespace_adopt(tenant=world.team_a, name="team-a-notebooks", actor=world.admin)
    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

    assert outcome.ok, outcome.message
    labels = kubectl_json(standin, "get", "namespace", "team-a-notebooks")["metadata"]["labels"]
    assert labels[TENANT_LABEL] == "team-a" and labels[MANAGED_BY] == "gpu-quota-portal"
    assert "rolebindings/gpu-portal-edit" in portal_objects(standin, "team-a-notebooks")
    assert kubectl_json(standin, "get", "configmap", "mine", "-n", "team-a-notebooks")
    assert sync_message(world) == ""


def test_the_push_never_writes_into_a_system_namespace_a_tenant_has(world, standin):
    # Old data: rows made before the rule (or by hand in the database).
    Namespace.objects.create(tenant=world.team_a, name="kube-system")
    Namespace.objects.create(tenant=world.team_a, name="default")

    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

    assert not outcome.ok
    for name in ("kube-system", "default"):
        assert portal_objects(standin, name) == []
        labels = kubectl_json(standin, "get", "namespace", name)["metadata"].get("labels") or {}
        assert TENANT_LABEL not in labels
    message = sync_message(world)
    assert "kube-system is a system namespace" in message
    assert "default is a system namespace" in message
    assert "the portal does not write into it on demo-a100" in message
    assert portal_objects(standin, "team-a-training")


def test_a_namespace_reserved_later_is_left_as_it_is(world, standin):
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    before = portal_objects(standin, "team-a-inference")
    Cluster.objects.filter(pk=world.a100.pk).update(reserved_namespaces=["team-a-inf*"])
    world.a100.refresh_from_db()

    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

    assert not outcome.ok
    assert "cluster demo-a100 reserves it (team-a-inf*)" in sync_message(world)
    # Neither written nor pruned: the admin takes the namespace away, or the reservation back.
    assert portal_objects(standin, "team-a-inference") == before


def test_an_adopted_namespace_the_cluster_will_not_label_gets_nothing(world, tmp_path):
    def refuse_labelling(obj: dict[str, Any]) -> list[str]:
        labels = obj["metadata"].get("labels") or {}
        ours = obj["kind"] == "Namespace" and obj["metadata"]["name"] == "team-a-notebooks"
        if ours and TENANT_LABEL in labels:
            return ["metadata.labels: namespaces here are labelled by the platform team only"]
        return []

    with start_in_thread(kubeconfig_path=tmp_path / "kc", validator=refuse_labelling) as handle:
        hold_cluster_access(handle)
        point_at(world.a100, handle.kubeconfig_path)
        create(handle, namespace("team-a-notebooks"))
        namespace_create(
            tenant=world.team_a, name="team-a-notebooks", purpose="general", actor=world.admin
        )
        namespace_adopt(tenant=world.team_a, name="team-a-notebooks", actor=world.admin)

        outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

        assert not outcome.ok
        assert "labelled by the platform team only" in sync_message(world)
        assert portal_objects(handle, "team-a-notebooks") == []
        assert Namespace.objects.get(name="team-a-notebooks").adopted_at is not None
        assert portal_objects(handle, "team-a-training")


def test_a_legacy_system_group_mapping_is_never_bound(world, standin):
    GroupMapping.objects.create(
        group="system:authenticated", role="member", tenant=world.team_a, tenant_slug="team-a"
    )
    GroupMapping.objects.create(
        group="ml-engineers", role="member", tenant=world.team_a, tenant_slug="team-a"
    )

    outcome = tenant_push(tenant=world.team_a, cluster=world.a100)

    assert outcome.ok, outcome.message
    binding = kubectl_json(
        standin, "get", "rolebinding", "-n", "team-a-training", "gpu-portal-edit"
    )
    names = [s["name"] for s in binding["subjects"]]
    assert "ml-engineers" in names
    assert not any(name.startswith("system:") for name in names)
    message = sync_message(world)
    assert "group mapping 'system:authenticated' is not bound in the RoleBindings" in message
    assert json.dumps(binding).count("system:") == 0


def test_a_requests_dry_run_says_what_the_push_would_refuse(world, standin):
    from quotas.sync import change_dry_run

    create(standin, namespace("team-a-notebooks"))
    namespace_create(
        tenant=world.team_a, name="team-a-notebooks", purpose="general", actor=world.admin
    )

    result = change_dry_run(tenant=world.team_a, cluster=world.a100, items=[], scheduling={})

    assert result.server_checked
    assert any(
        "Namespace team-a-notebooks: namespace team-a-notebooks exists on demo-a100" in error
        for error in result.server_errors
    ), result.server_errors
