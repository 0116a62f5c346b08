"""R25 on the cluster: a time-sliced flavor's sharing config reaches the device plugin. The quota
sync pushes the ConfigMap the plugin reads; the beat labels the flavor's nodes with their key
(``nvidia.com/device-plugin.config``, which the plugin's config-manager watches) and restarts
the plugin's pods where only the content under a label changed. Against the stand-in, read
back with kubectl."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import yaml
from kubernetes import config
from kubernetes.dynamic import DynamicClient

from devcluster import Handle
from gpu_agent import tasks
from gpu_agent import time_slicing as pure
from gpu_agent.services.time_slicing import time_slicing_push
from portal.celery import app
from quotas.choices import GPU_RESOURCE, FlavorKind
from quotas.models import Cluster, FlavorResource, ResourceFlavor
from quotas.sync import cluster_reconcile
from tenants.models import AuditEvent
from tests.conftest import World
from tests.standin import kubectl, kubectl_json

CONFIG_LABEL = "nvidia.com/device-plugin.config"
PLUGIN = {"app": "nvidia-device-plugin-daemonset"}


# --- the pure plan ----------------------------------------------------------------------------

T4 = pure.SharedFlavor("t4-shared", {"nvidia.com/gpu.product": "Tesla-T4"})
DATA = {"t4-shared": "version: v1\n"}


def meta(**labels: str) -> dict[str, Any]:
    return {"labels": labels, "resourceVersion": "7"}


def test_plan_labels_the_flavors_nodes_once_their_key_is_in_the_configmap() -> None:
    nodes = {
        "t4-1": meta(**{"nvidia.com/gpu.product": "Tesla-T4"}),
        "t4-2": meta(**{"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),  # GFD's name once shared
        "a100": meta(**{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}),
    }
    assert pure.plan([T4], live_nodes=nodes, configmap_data={}).waiting == {
        "t4-1": "the device plugin's ConfigMap has no key t4-shared yet",
        "t4-2": "the device plugin's ConfigMap has no key t4-shared yet",
    }
    patches = pure.plan([T4], live_nodes=nodes, configmap_data=DATA).patches
    assert [(p.node, p.config, p.restart) for p in patches] == [
        ("t4-1", "t4-shared", False),
        ("t4-2", "t4-shared", False),
    ]
    assert patches[0].body["metadata"]["labels"] == {CONFIG_LABEL: "t4-shared"}
    assert patches[0].body["metadata"]["resourceVersion"] == "7"


def test_plan_restarts_only_when_the_content_under_the_label_changed() -> None:
    given = f"t4-shared@{pure.content_hash(DATA['t4-shared'])}"
    node = meta(**{"nvidia.com/gpu.product": "Tesla-T4", CONFIG_LABEL: "t4-shared"})
    node["annotations"] = {pure.ANNOTATION_CONFIG: given}
    assert pure.plan([T4], live_nodes={"t4-1": node}, configmap_data=DATA).patches == []
    changed = {"t4-shared": "version: v1\nreplicas: 4\n"}
    (patch,) = pure.plan([T4], live_nodes={"t4-1": node}, configmap_data=changed).patches
    assert patch.restart
    assert "labels" not in patch.body["metadata"]


def test_plan_leaves_a_node_two_flavors_select_and_unlabels_one_none_selects() -> None:
    other = pure.SharedFlavor("t4-other", {"nvidia.com/gpu.product": "Tesla-T4"})
    node = meta(**{"nvidia.com/gpu.product": "Tesla-T4"})
    out = pure.plan([T4, other], live_nodes={"t4-1": node}, configmap_data=DATA)
    assert out.conflicts == {"t4-1": ["t4-other", "t4-shared"]}
    assert out.patches == []
    once = meta(**{"nvidia.com/gpu.product": "Tesla-T4", CONFIG_LABEL: "t4-shared"})
    once["annotations"] = {pure.ANNOTATION_CONFIG: "t4-shared@abc"}
    (patch,) = pure.plan([], live_nodes={"t4-1": once}, configmap_data={}).patches
    assert patch.body["metadata"]["labels"] == {CONFIG_LABEL: None}
    by_hand = meta(**{"nvidia.com/gpu.product": "Tesla-T4", CONFIG_LABEL: "mine"})
    assert pure.plan([], live_nodes={"t4-1": by_hand}, configmap_data={}).patches == []


def test_an_empty_selector_selects_no_node() -> None:
    everything = pure.SharedFlavor("all", {})
    assert not pure.selects(everything, {"nvidia.com/gpu.product": "Tesla-T4"})


# --- against the stand-in ---------------------------------------------------------------------


@pytest.fixture
def client(standin: Handle) -> DynamicClient:
    return DynamicClient(config.new_client_from_config(config_file=str(standin.kubeconfig_path)))


def create(client: DynamicClient, kind: str, body: dict[str, Any]) -> None:
    client.resources.get(api_version="v1", kind=kind).create(
        body={"apiVersion": "v1", "kind": kind, **body}
    )


def node(handle: Handle, name: str) -> dict[str, Any]:
    return dict(kubectl_json(handle, "get", "node", name)["metadata"])


def plugin_pods(handle: Handle) -> list[str]:
    pods = kubectl_json(
        handle, "get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-device-plugin-daemonset"
    )
    return sorted(p["metadata"]["name"] for p in pods["items"])


def t4_flavor(cluster: Cluster) -> ResourceFlavor:
    """A T4 flavor of ``cluster``, one GPU shared 10 ways."""
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name="t4-shared",
        kind=FlavorKind.GPU,
        gpu_model="Tesla T4",
        time_slicing_replicas=10,
        node_labels={"nvidia.com/gpu.product": "Tesla-T4"},
    )
    FlavorResource.objects.create(flavor=flavor, resource=GPU_RESOURCE, capacity=Decimal(10))
    return flavor


def device_plugin_pod(client: DynamicClient, node: str) -> None:
    """The device plugin's pod on ``node``, as its DaemonSet runs it in gpu-operator."""
    create(
        client,
        "Pod",
        {
            "metadata": {"name": f"plugin-{node}", "namespace": "gpu-operator", "labels": PLUGIN},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin"}],
            },
        },
    )


@pytest.fixture
def t4(world: World, standin: Handle, client: DynamicClient) -> ResourceFlavor:
    """demo-a100 on the stand-in, with one T4 node shared 10 ways, an A100 node beside it,
    and the device plugin's pod on each."""
    flavor = t4_flavor(world.a100)
    create(client, "Namespace", {"metadata": {"name": "gpu-operator"}})
    for name, product in (("t4-node-1", "Tesla-T4"), ("a100-node-1", "NVIDIA-A100-SXM4-80GB")):
        create(
            client,
            "Node",
            {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}}},
        )
        device_plugin_pod(client, name)
    return flavor


def replicas_in_configmap(handle: Handle) -> int:
    cm = kubectl_json(handle, "get", "configmap", "-n", "gpu-operator", "gpu-portal-time-slicing")
    config_ = yaml.safe_load(cm["data"]["t4-shared"])
    (resource,) = config_["sharing"]["timeSlicing"]["resources"]
    assert resource["name"] == "nvidia.com/gpu"
    return int(resource["replicas"])


@pytest.mark.django_db
def test_the_t4_node_reads_the_shared_config_and_restarts_when_it_changes(
    world: World, standin: Handle, t4: ResourceFlavor
) -> None:
    cluster: Cluster = world.a100
    # Before the ConfigMap is there, no label may name a key the plugin cannot find.
    early = time_slicing_push(cluster=cluster)
    assert early.waiting == {"t4-node-1": "the device plugin's ConfigMap has no key t4-shared yet"}
    assert CONFIG_LABEL not in node(standin, "t4-node-1").get("labels", {})

    assert cluster_reconcile(cluster=cluster).ok
    assert replicas_in_configmap(standin) == 10
    first = time_slicing_push(cluster=cluster)
    assert first.ok, first.error
    assert first.labelled == ["t4-node-1"]
    assert node(standin, "t4-node-1")["labels"][CONFIG_LABEL] == "t4-shared"
    assert CONFIG_LABEL not in node(standin, "a100-node-1")["labels"]
    assert plugin_pods(standin) == [
        "plugin-a100-node-1",
        "plugin-t4-node-1",
    ]  # the sidecar restarts it
    assert AuditEvent.objects.filter(action="time_slicing.nodes_configured").count() == 1

    again = time_slicing_push(cluster=cluster)
    assert not again.changed  # a pass with nothing new writes nothing

    # An admin shares each T4 four ways instead: same label, new content -> plugin restarted.
    ResourceFlavor.objects.filter(pk=t4.pk).update(time_slicing_replicas=4)
    assert cluster_reconcile(cluster=cluster).ok
    assert replicas_in_configmap(standin) == 4
    restarted = time_slicing_push(cluster=cluster)
    assert restarted.restarted == {"t4-node-1": ["plugin-t4-node-1"]}
    assert plugin_pods(standin) == ["plugin-a100-node-1"]  # its DaemonSet would start a new one
    given = node(standin, "t4-node-1")["annotations"][pure.ANNOTATION_CONFIG]
    assert given.startswith("t4-shared@")

    # No longer time-sliced: the label goes, the plugin returns to whole GPUs.
    ResourceFlavor.objects.filter(pk=t4.pk).update(time_slicing_replicas=None)
    assert cluster_reconcile(cluster=cluster).ok
    assert (
        kubectl(
            standin,
            "get",
            "configmap",
            "-n",
            "gpu-operator",
            "gpu-portal-time-slicing",
            check=False,
        ).returncode
        != 0
    )
    gone = time_slicing_push(cluster=cluster)
    assert gone.unlabelled == ["t4-node-1"]
    assert CONFIG_LABEL not in node(standin, "t4-node-1").get("labels", {})


@pytest.mark.django_db
def test_the_beat_task_reaches_every_kubernetes_cluster(
    world: World, standin: Handle, t4: ResourceFlavor
) -> None:
    schedule = app.conf.beat_schedule["gpu-agent-time-slicing-sync"]
    assert schedule["task"] == "gpu_agent.tasks.time_slicing_sync"
    assert cluster_reconcile(cluster=world.a100).ok
    assert tasks.time_slicing_sync() == 0
    assert node(standin, "t4-node-1")["labels"][CONFIG_LABEL] == "t4-shared"
