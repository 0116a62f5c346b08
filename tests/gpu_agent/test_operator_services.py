"""MIG through the GPU Operator, end to end against the Kubernetes stand-in: ``layout_set`` on a
``gpu-operator`` cluster pushes the mig-parted ConfigMap and the node label, the test plays the
MIG manager (sets ``nvidia.com/mig.config.state``), the beat reads it back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from kubernetes import config
from kubernetes.dynamic import DynamicClient

from devcluster import Handle
from gpu_agent import tasks
from gpu_agent.models import Gpu, LayoutState, MigLayout, MigOperatorNode, Node
from gpu_agent.services import layouts, mig_operator, nodes, reports
from portal.celery import app
from quotas.choices import MigDriver
from quotas.models import Cluster
from quotas.sync import cluster_reconcile
from tenants.models import AuditEvent, User
from tests.conftest import World
from tests.gpu_agent.test_server_services import gpu, report
from tests.standin import kubectl, kubectl_json, point_at

BALANCED = [
    {"profile": "3g.40gb", "start": 4},
    {"profile": "2g.20gb", "start": 0},
    {"profile": "1g.10gb", "start": 2},
    {"profile": "1g.10gb", "start": 3},
]
SEVEN = [{"profile": "1g.10gb", "start": s} for s in range(7)]
CONFIGMAP = ("gpu-operator", "gpu-portal-mig-parted-config")


@pytest.fixture
def client(standin: Handle) -> DynamicClient:
    return DynamicClient(config.new_client_from_config(config_file=str(standin.kubeconfig_path)))


def k8s_node(client: DynamicClient, name: str, **labels: str) -> None:
    client.resources.get(api_version="v1", kind="Node").create(
        body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    )


def node_labels(client: DynamicClient, name: str) -> dict[str, str]:
    got = client.resources.get(api_version="v1", kind="Node").get(name=name).to_dict()
    return dict(got["metadata"].get("labels") or {})


def play_mig_manager(client: DynamicClient, name: str, state: str) -> None:
    client.resources.get(api_version="v1", kind="Node").patch(
        name=name,
        body={"metadata": {"labels": {"nvidia.com/mig.config.state": state}}},
        content_type="application/merge-patch+json",
    )


def mig_config(handle: Handle) -> dict[str, Any]:
    cm = kubectl_json(handle, "get", "configmap", "-n", CONFIGMAP[0], CONFIGMAP[1])
    return dict(yaml.safe_load(cm["data"]["config.yaml"]))


@pytest.fixture
def h100(world: World, standin: Handle, client: DynamicClient) -> Cluster:
    """demo-h100 on the stand-in with the GPU Operator driving MIG; its namespace exists (the
    operator's install made it)."""
    point_at(world.h100, standin.kubeconfig_path, mig_driver=MigDriver.GPU_OPERATOR)
    client.resources.get(api_version="v1", kind="Namespace").create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
    )
    return world.h100


def portal_node(admin: User, cluster: Cluster, name: str, gpus: int = 2) -> Node:
    _, join = nodes.join_token_create(node_name=name, actor=admin, cluster=cluster)
    node, _ = nodes.agent_register(join_secret=join, hostname=name, agent_version="1.0")
    reports.agent_report_ingest(node=node, report=report(name, [gpu(name, i) for i in range(gpus)]))
    return node


def settled(cluster: Cluster, seconds: int = 120) -> mig_operator.OperatorPushOutcome:
    """A beat's pass ``seconds`` from now: by then the ConfigMap's new configs have settled
    (``MIG_OPERATOR_SETTLE_S``, 90 s) and node labels may name them."""
    return mig_operator.operator_sync(
        cluster=cluster, now=timezone.now() + timedelta(seconds=seconds)
    )


@pytest.fixture
def eager() -> Iterator[None]:
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


def test_a_layout_goes_through_configmap_label_and_state_label(
    world, h100, standin, client, eager, django_capture_on_commit_callbacks
):
    k8s_node(client, "gpu-node-1", **{"nvidia.com/gpu.product": "A100", "team": "ml"})
    node = portal_node(world.admin, h100, "gpu-node-1")
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))

    # layout_set queues the push on commit (no agent involved).
    with django_capture_on_commit_callbacks(execute=True):
        layouts.layout_set(gpu=gpus[0], instances=BALANCED, actor=world.admin)
        layouts.layout_set(gpu=gpus[1], instances=BALANCED, actor=world.admin)

    data = mig_config(standin)
    [name] = [n for n in data["mig-configs"] if n.startswith("portal-")]
    assert data["mig-configs"][name] == [
        {
            "devices": [0, 1],
            "mig-enabled": True,
            "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        }
    ]
    assert "all-disabled" in data["mig-configs"]
    # The label waits until the kubelet has refreshed the mounted ConfigMap.
    assert "nvidia.com/mig.config" not in node_labels(client, "gpu-node-1")
    layout = MigLayout.objects.get(gpu=gpus[0])
    assert layout.state == LayoutState.PENDING
    assert "the node label follows once the kubelet has refreshed it (90 s)" in layout.message
    assert settled(h100, seconds=30).deferred == ["gpu-node-1"]
    assert "nvidia.com/mig.config" not in node_labels(client, "gpu-node-1")

    assert settled(h100).labelled == ["gpu-node-1"]

    labels = node_labels(client, "gpu-node-1")
    assert labels == {
        "nvidia.com/gpu.product": "A100",
        "team": "ml",
        "nvidia.com/mig.config": name,
        "nvidia.com/mig.config.state": "pending",
    }
    layout.refresh_from_db()
    assert layout.state == LayoutState.APPLYING
    shown = kubectl(
        standin, "get", "nodes", "-L", "nvidia.com/mig.config,nvidia.com/mig.config.state"
    ).stdout.splitlines()
    assert shown[1].split()[0] == "gpu-node-1"
    assert shown[1].split()[-2:] == [name, "pending"]

    assert settled(h100).labelled == []  # once is enough
    play_mig_manager(client, "gpu-node-1", "rebooting")
    tasks.operator_sync()
    layout.refresh_from_db()
    assert (layout.state, layout.message) == (
        LayoutState.APPLYING,
        "the node is rebooting to change MIG mode",
    )

    play_mig_manager(client, "gpu-node-1", "success")
    tasks.operator_sync()
    assert set(MigLayout.objects.filter(gpu__node=node).values_list("state", flat=True)) == {
        LayoutState.SUCCESS
    }
    layout.refresh_from_db()
    assert layout.applied_at is not None
    seen = MigOperatorNode.objects.get(cluster=h100, node_name="gpu-node-1")
    assert (seen.desired_config, seen.label_config, seen.label_state) == (name, name, "success")
    assert AuditEvent.objects.filter(action="mig_layout.success").count() == 2

    # Nothing new: a pass writes nothing and the label stays.
    outcome = mig_operator.operator_push(cluster=h100)
    assert outcome.configmap is not None and outcome.configmap.writes == 0
    assert outcome.labelled == []
    assert node_labels(client, "gpu-node-1")["nvidia.com/mig.config.state"] == "success"


def test_a_failed_state_fails_the_layouts_with_the_reason(world, h100, standin, client):
    k8s_node(client, "gpu-node-1")
    node = portal_node(world.admin, h100, "gpu-node-1", gpus=1)
    gpu0 = Gpu.objects.get(node=node)
    layouts.layout_set(gpu=gpu0, instances=SEVEN, actor=world.admin)
    settled(h100, seconds=0)  # the ConfigMap
    settled(h100)  # the labels
    play_mig_manager(client, "gpu-node-1", "failed")
    tasks.operator_sync()
    layout = MigLayout.objects.get(gpu=gpu0)
    assert layout.state == LayoutState.FAILED
    assert "reported nvidia.com/mig.config.state=failed for portal-" in layout.message
    assert "kubectl -n gpu-operator logs -l app=nvidia-mig-manager" in layout.message


def test_nodes_are_never_created_and_overdue_layouts_fail_with_what_the_labels_say(
    world, h100, standin, client
):
    k8s_node(client, "gpu-node-1")
    stuck = portal_node(world.admin, h100, "gpu-node-1", gpus=1)
    absent = portal_node(world.admin, h100, "gpu-node-2", gpus=1)
    for node in (stuck, absent):
        layouts.layout_set(gpu=Gpu.objects.get(node=node), instances=SEVEN, actor=world.admin)
    settled(h100, seconds=0)  # the ConfigMap
    settled(h100)  # the labels

    assert [n["metadata"]["name"] for n in kubectl_json(standin, "get", "nodes")["items"]] == [
        "gpu-node-1"
    ]
    missing = MigLayout.objects.get(gpu__node=absent)
    assert missing.state == LayoutState.PENDING
    assert "node gpu-node-2 is not in cluster demo-h100" in missing.message
    # The agent is not told to apply what the operator applies.
    assert layouts.agent_desired(node=stuck) == []
    assert layouts.agent_desired_generation(node=stuck) == 0

    later = timezone.now() + timedelta(hours=1)
    assert layouts.layouts_fail_overdue(now=later) == []  # not the agent path's business
    failed = mig_operator.operator_layouts_fail_overdue(now=later)
    assert {la.gpu.node.name for la in failed} == {"gpu-node-1", "gpu-node-2"}
    layout = MigLayout.objects.get(gpu__node=stuck)
    assert layout.state == LayoutState.FAILED
    assert layout.message.startswith("not applied by the GPU Operator within 60 minutes")
    assert "nvidia.com/mig.config.state is pending" in layout.message


def test_a_label_the_portal_did_not_set_is_left_alone(world, h100, standin, client):
    k8s_node(client, "gpu-node-9", **{"nvidia.com/mig.config": "all-balanced"})
    portal_node(world.admin, h100, "gpu-node-9", gpus=1)  # reports, but no desired layout
    settled(h100, seconds=0)  # the ConfigMap
    settled(h100)  # the labels
    assert node_labels(client, "gpu-node-9") == {"nvidia.com/mig.config": "all-balanced"}


def test_the_quota_sync_does_not_prune_the_mig_configmap(world, h100, standin, client):
    k8s_node(client, "gpu-node-1")
    node = portal_node(world.admin, h100, "gpu-node-1", gpus=1)
    layouts.layout_set(gpu=Gpu.objects.get(node=node), instances=SEVEN, actor=world.admin)
    mig_operator.operator_push(cluster=h100)

    outcome = cluster_reconcile(cluster=h100)

    assert outcome.ok, outcome.message
    assert outcome.result is not None and outcome.result.created  # the quota objects went in
    assert not [c for c in outcome.result.pruned if c.key[1] == "ConfigMap"]
    assert "all-disabled" in mig_config(standin)["mig-configs"]


def test_the_mig_push_does_not_prune_quota_objects(world, h100, standin, client):
    assert cluster_reconcile(cluster=h100).ok
    # A ConfigMap the quota sync owns in the same namespace (the time-slicing config).
    quota_cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpu-portal-time-slicing",
            "namespace": "gpu-operator",
            "labels": {
                "app.kubernetes.io/managed-by": "gpu-quota-portal",
                "portal.gpu-quota.io/cluster": "demo-h100",
            },
        },
        "data": {"h100-80gb": "version: v1\n"},
    }
    client.resources.get(api_version="v1", kind="ConfigMap").create(body=quota_cm)
    before = kubectl_json(standin, "get", "resourcequotas,clusterqueues,configmaps", "-A")

    outcome = mig_operator.operator_push(cluster=h100)

    assert outcome.ok, outcome.error
    assert outcome.configmap is not None and outcome.configmap.pruned == []
    after = kubectl_json(standin, "get", "resourcequotas,clusterqueues,configmaps", "-A")
    names = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in after["items"]
    }
    assert {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in before["items"]
    } < names
    assert ("ConfigMap", "gpu-operator", "gpu-portal-time-slicing") in names
    assert ("ConfigMap", *CONFIGMAP) in names


def test_an_agent_cluster_gets_no_push(world, standin, client):
    point_at(world.h100, standin.kubeconfig_path)  # mig_driver stays "agent"
    node = portal_node(world.admin, world.h100, "gpu-node-1", gpus=1)
    layouts.layout_set(gpu=Gpu.objects.get(node=node), instances=SEVEN, actor=world.admin)
    assert tasks.operator_sync() == 0
    assert [d.uuid for d in layouts.agent_desired(node=node)] == ["GPU-gpu-node-1-0000"]
    assert kubectl(
        standin, "get", "configmap", "-n", "gpu-operator", CONFIGMAP[1], check=False
    ).returncode


def test_the_fleet_pages_show_the_driver_and_the_label_state(world, h100, standin, client):
    k8s_node(client, "gpu-node-1")
    node = portal_node(world.admin, h100, "gpu-node-1", gpus=1)
    agent_node = portal_node(world.admin, world.a100, "gpu-node-2", gpus=1)
    gpu0 = Gpu.objects.get(node=node)
    layouts.layout_set(gpu=gpu0, instances=SEVEN, actor=world.admin)
    settled(h100, seconds=0)
    settled(h100)
    play_mig_manager(client, "gpu-node-1", "failed")
    settled(h100)
    config_name = MigOperatorNode.objects.get(node_name="gpu-node-1").label_config
    browser = Client()
    browser.force_login(world.admin)

    fleet = browser.get(reverse("portal:fleet")).content.decode()
    operator_block = fleet[fleet.index('id="node-gpu-node-1"') :]
    assert 'data-mig-driver="gpu-operator"' in operator_block.split("</section>")[0]
    assert f"nvidia.com/mig.config={config_name}" in operator_block
    assert 'data-mig-config-state="failed"' in operator_block
    agent_block = fleet[fleet.index(f'id="node-{agent_node.name}"') :].split("</section>")[0]
    assert 'data-mig-driver="agent"' in agent_block

    page = browser.get(reverse("portal:fleet-gpu", args=[gpu0.uuid])).content.decode()
    assert 'data-mig-config-state="failed"' in page
    assert "counts are kept, starts are not" in page
    # Outsiders see nothing of it.
    outsider = Client()
    outsider.force_login(world.bob)
    assert outsider.get(reverse("portal:fleet-gpu", args=[gpu0.uuid])).status_code in (403, 404)


def test_a_cluster_without_a_kubernetes_api_says_why(world, tmp_path):
    Cluster.objects.filter(pk=world.h100.pk).update(
        mig_driver=MigDriver.GPU_OPERATOR, backend="manifests", manifests_dir=str(tmp_path)
    )
    world.h100.refresh_from_db()
    node = portal_node(world.admin, world.h100, "gpu-node-1", gpus=1)
    layouts.layout_set(gpu=Gpu.objects.get(node=node), instances=SEVEN, actor=world.admin)

    outcome = mig_operator.operator_push(cluster=world.h100)

    assert not outcome.ok
    assert "needs the Kubernetes API backend" in outcome.error
    assert "pushing the MIG config failed" in MigLayout.objects.get(gpu__node=node).message
    assert tasks.operator_sync() == 1
