"""Fleet capacity is what the cluster confirms ("Nothing gets around a quota": one node token
inflated fleet capacity). A node's agent says which GPUs and MIG instances it has; the MIG
capacity approvals check against counts them only on nodes whose Node object the cluster has
(read through the Kubernetes API: the device plugin's allocatable, GPU Feature Discovery's
labels), as far as that Node confirms them, and only while the agent reports.

Acting as a hostile node (its token posting made-up GPUs through the real report API), the
capacity does not rise and a request refused before stays refused; the cluster reading goes
through the local API stand-in over HTTP."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F
from django.test import Client, TestCase
from django.utils import timezone
from kubernetes import config
from kubernetes.dynamic import DynamicClient
from rest_framework.test import APIClient

from core.errors import ValidationFailed
from devcluster import Handle
from gpu_agent import tasks
from gpu_agent.cluster_nodes import NodeReading, product_matches, read_node
from gpu_agent.models import LayoutState, MigLayout, Node
from gpu_agent.selectors import mig_capacity
from gpu_agent.services.cluster_nodes import cluster_nodes_read, cluster_nodes_record
from gpu_agent.services.nodes import nodes_mark_stale
from portal.celery import app
from quotas.choices import mig_resource
from quotas.models import FleetNodeCapacity
from quotas.selectors import cluster_allocations, flavor_capacities
from tests.approvals.conftest import file
from tests.cluster_access import hold_cluster_access
from tests.standin import point_at

H100 = "NVIDIA H100 80GB HBM3"
PRODUCT = "NVIDIA-H100-80GB-HBM3"  # GPU Feature Discovery's spelling
MIG_1G = mig_resource("1g.10gb")
AGENT = "/api/v1/agent"


# --- what a Node says (the pure part) ---------------------------------------------------------


def k8s_node(
    name: str,
    *,
    gpus: int | None = None,
    product: str = PRODUCT,
    mig: dict[str, int] | None = None,
    whole: int = 0,
    strategy: str = "mixed",
    allocatable: bool = True,
) -> dict[str, Any]:
    """A Node as the device plugin (``mixed`` strategy) and GPU Feature Discovery leave it."""
    mig = mig or {}
    labels = {"kubernetes.io/hostname": name}
    if product:
        labels["nvidia.com/gpu.product"] = product
    if gpus is not None:
        labels["nvidia.com/gpu.count"] = str(gpus)
    if strategy:
        labels["nvidia.com/mig.strategy"] = strategy
    labels.update({f"nvidia.com/mig-{p}.count": str(n) for p, n in mig.items()})
    resources = {"cpu": "64", "nvidia.com/gpu": str(whole)}
    resources.update({f"nvidia.com/mig-{p}": str(n) for p, n in mig.items()})
    status = {"allocatable": resources, "capacity": resources} if allocatable else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": status}  # fmt: skip


def test_a_mixed_strategy_node_confirms_its_gpus_and_advertised_instances() -> None:
    reading = read_node(k8s_node("n", gpus=4, mig={"1g.10gb": 22, "3g.40gb": 2}))
    assert reading == NodeReading(gpus=4, product=PRODUCT, mig={"1g.10gb": 22, "3g.40gb": 2})
    # Allocatable is what pods get: a label saying more does not count.
    node = k8s_node("n", gpus=4, mig={"1g.10gb": 22})
    node["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] = "99"
    assert read_node(node).mig == {"1g.10gb": 22}
    # No device plugin resources at all: GPU Feature Discovery's labels stand in.
    assert read_node(k8s_node("n", gpus=2, mig={"1g.10gb": 14}, allocatable=False)).mig == {
        "1g.10gb": 14
    }


def test_single_strategy_none_and_time_slicing_and_garbage() -> None:
    single = {
        "metadata": {"name": "s", "labels": {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
            "nvidia.com/gpu.count": "56",
        }},
        "status": {"allocatable": {"nvidia.com/gpu": "56"}},
    }  # fmt: skip
    assert read_node(single) == NodeReading(
        gpus=56, product="NVIDIA-A100-SXM4-40GB", mig={"1g.5gb": 56}
    )
    whole = k8s_node("w", product="NVIDIA-A100-SXM4-80GB", whole=8, strategy="")
    assert read_node(whole) == NodeReading(gpus=8, product="NVIDIA-A100-SXM4-80GB")
    shared = {
        "metadata": {"name": "t", "labels": {
            "nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "10",
        }},
        "status": {"allocatable": {"nvidia.com/gpu": "10"}},
    }  # fmt: skip
    assert read_node(shared) == NodeReading(gpus=1, product="Tesla-T4")
    bad = {"metadata": {"name": "b", "labels": {"nvidia.com/gpu.count": "-3"}},
           "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "1e9", "nvidia.com/gpu": []}}}  # fmt: skip
    assert read_node(bad) == NodeReading(gpus=0)
    assert read_node({}) == NodeReading(gpus=0)


def test_product_labels_match_nvml_names() -> None:
    assert product_matches("NVIDIA-H100-80GB-HBM3", H100)
    assert product_matches("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB")
    assert product_matches("", H100)  # unlabelled: no contradiction
    assert not product_matches("NVIDIA-A100-SXM4-80GB", H100)


# --- agents over the real report API ---------------------------------------------------------


def gpu(node: str, index: int, profiles: list[str]) -> dict[str, Any]:
    """One H100 as the agent reports it, with 1-slice instances side by side."""
    return {
        "uuid": f"GPU-{node}-{index:04d}",
        "index": index,
        "name": H100,
        "memory_total_mib": 81559,
        "memory_used_mib": 0,
        "utilization_pct": None,
        "mig_mode_current": bool(profiles),
        "mig_mode_pending": bool(profiles),
        "applied_generation": 0,
        "instances": [
            {
                "gi_id": i + 1,
                "profile": p,
                "start": i,
                "size": 1,
                "ci_ids": [0],
                "memory_used_mib": 0,
                "utilization_pct": None,
                "processes": [],
            }
            for i, p in enumerate(profiles)
        ],
        "processes": [],
    }


def register(admin: APIClient, name: str, cluster: str = "demo-h100") -> APIClient:
    """A node's agent, registered with a join token an admin issued: its node token."""
    made = admin.post("/api/v1/nodes/join-tokens/", {"node": name, "cluster": cluster},
                      format="json")  # fmt: skip
    assert made.status_code == 201, made.content
    answer = APIClient().post(
        f"{AGENT}/register/",
        {"join_token": made.json()["join_token"], "hostname": name, "agent_version": "1.0"},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['node_token']}")
    return client


def post_report(agent: APIClient, node: str, gpus: list[dict[str, Any]]) -> None:
    body = {"node": node, "sent_at": "2026-12-03T08:00:00Z", "agent_version": "1.0",
            "driver_version": "580.65.06", "gpus": gpus}  # fmt: skip
    # The report's MIG capacity reaches quotas once it commits (gpu_agent.services.capacity):
    # run what waits for the commit, which the test's transaction never makes.
    with TestCase.captureOnCommitCallbacks(execute=True):
        answer = agent.post(f"{AGENT}/report/", body, format="json")
    assert answer.status_code == 200, answer.content


def seven(node: str, count: int) -> list[dict[str, Any]]:
    return [gpu(node, i, ["1g.10gb"] * 7) for i in range(count)]


def capacity(world: Any) -> Decimal:
    return flavor_capacities(cluster=world.h100)[(world.h100_mig.pk, MIG_1G)].amount


def mig_item(guaranteed: int, limit: int) -> dict[str, Any]:
    return {"flavor": "h100-mig-1g-10gb", "resource": MIG_1G, "guaranteed": guaranteed,
            "limit": limit}  # fmt: skip


def refused(world: Any, limit: int) -> str:
    with pytest.raises(ValidationFailed) as caught:
        file(world, cluster=world.h100, items=[mig_item(0, limit)])
    return str(caught.value.fields["items[0].limit"][0])


@pytest.fixture
def fleet(world: Any, api_as: Any) -> dict[str, Any]:
    """demo-h100 with one real MIG node: h100-mig-1's agent reports 2 H100s of seven 1g.10gb,
    and the cluster's Node h100-mig-1 advertises those 14 instances on 2 GPUs (entered: 14;
    the fleet then says 14 too). Everything fits a request up to 14."""
    world.h100.elastic_cap_fraction = Decimal("1")
    world.h100.save(update_fields=["elastic_cap_fraction"])
    admin = api_as(world.admin)
    real = register(admin, "h100-mig-1")
    post_report(real, "h100-mig-1", seven("h100-mig-1", 2))
    cluster_nodes_record(
        cluster=world.h100, objects=[k8s_node("h100-mig-1", gpus=2, mig={"1g.10gb": 14})]
    )
    return {"admin": admin, "real": real}


def test_the_cluster_confirms_a_node_with_matching_allocatable(world, fleet):
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.observed, got.planned, got.gpus, got.confirmed) == (14, 0, 2, True)
    assert got.not_counted == ""
    assert capacity(world) == 14
    node = Node.objects.get(name="h100-mig-1")
    assert (node.cluster_gpus, node.cluster_gpu_product, node.cluster_mig) == (
        2,
        PRODUCT,
        {"1g.10gb": 14},
    )


def test_a_node_token_reporting_made_up_gpus_does_not_raise_capacity(world, fleet):
    assert "15 asked, 14 instances exist" in refused(world, 15)
    # A node the cluster has no Node object of: eight made-up H100s of seven instances each.
    evil = register(fleet["admin"], "h100-evil")
    post_report(evil, "h100-evil", seven("h100-evil", 8))
    # The real node's own token, claiming eight GPUs where the cluster counts two.
    post_report(fleet["real"], "h100-mig-1", seven("h100-mig-1", 8))
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.total, got.gpus) == (14, 2)
    assert (got.unconfirmed_nodes, got.unconfirmed_gpus) == (1, 6)
    assert capacity(world) == 14
    assert "15 asked, 14 instances exist" in refused(world, 15)
    assert "100 asked, 14 instances exist" in refused(world, 100)
    # The cluster page says what was left out, in words.
    client = Client()
    client.force_login(world.alice)
    html = client.get("/clusters/demo-h100/").content.decode()
    row = html[html.index('data-flavor="h100-mig-1g-10gb"') :].split("</tr>")[0]
    assert "the fleet: 14 instances observed on 2 GPUs" in row
    assert (
        "not counted: 1 node the cluster does not confirm, 6 GPUs beyond what the cluster sees"
        in row
    )


def test_instances_beyond_what_the_device_plugin_advertises_do_not_count(world, fleet):
    cluster_nodes_record(
        cluster=world.h100, objects=[k8s_node("h100-mig-1", gpus=2, mig={"1g.10gb": 9})]
    )
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.observed, got.unconfirmed_instances) == (9, 5)
    assert "5 instances the device plugin does not advertise" in got.not_counted


def test_a_node_of_another_product_confirms_no_h100(world, fleet):
    other = k8s_node("h100-mig-1", gpus=2, product="NVIDIA-A100-SXM4-80GB", mig={"1g.10gb": 14})
    cluster_nodes_record(cluster=world.h100, objects=[other])
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.confirmed, got.unconfirmed_nodes) == (False, 1)


def test_with_nothing_confirmed_the_entered_number_stands_whatever_agents_say(world, api_as):
    world.h100.elastic_cap_fraction = Decimal("1")
    world.h100.save(update_fields=["elastic_cap_fraction"])

    def guarantee_refused(amount: int) -> str:
        with pytest.raises(ValidationFailed) as caught:
            file(world, cluster=world.h100, items=[mig_item(amount, amount)])
        return str(caught.value.fields["items[0].guaranteed"][0])

    before = guarantee_refused(15)
    evil = register(api_as(world.admin), "h100-evil")
    post_report(evil, "h100-evil", seven("h100-evil", 8))  # 56 made-up instances
    assert capacity(world) == 14  # the number an admin entered, not 56
    assert guarantee_refused(15) == before  # refused before, refused after
    rows = {r.flavor.name: r for r in cluster_allocations(cluster=world.h100)}
    mig = rows["h100-mig-1g-10gb"]
    assert mig.fleet is None and mig.capacity == 14
    assert mig.not_counted == "not counted: 1 node the cluster does not confirm"
    client = Client()
    client.force_login(world.alice)
    html = client.get("/clusters/demo-h100/").content.decode()
    row = html[html.index('data-flavor="h100-mig-1g-10gb"') :].split("</tr>")[0]
    assert (
        "entered by an admin (the cluster confirms no node of this GPU model that reports; "
        "not counted: 1 node the cluster does not confirm)"
    ) in row
    answer = api_as(world.alice).get("/api/v1/clusters/demo-h100/").json()
    (line,) = [a for a in answer["allocations"] if a["flavor"] == "h100-mig-1g-10gb"]
    assert line["fleet"] is None
    assert line["not_counted"] == "not counted: 1 node the cluster does not confirm"


def test_a_node_that_goes_stale_stops_counting(world, fleet):
    assert capacity(world) == 14
    Node.objects.filter(name="h100-mig-1").update(
        last_report_at=timezone.now() - timedelta(hours=1)
    )
    assert nodes_mark_stale() == ["h100-mig-1"]
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.total, got.stale_nodes, got.confirmed) == (0, 1, True)
    assert capacity(world) == 0
    assert "1 asked, 0 instances exist" in refused(world, 1)
    # Its agent reports again: it counts again.
    post_report(fleet["real"], "h100-mig-1", seven("h100-mig-1", 2))
    assert capacity(world) == 14


def test_an_old_reading_ages_out_like_a_stale_report(world, fleet, settings):
    settings.CLUSTER_NODES_STALE_AFTER_S = 300
    age_the_reading("h100-mig-1", timedelta(seconds=301))
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.confirmed, got.unconfirmed_nodes) == (False, 1)
    assert capacity(world) == 14  # back to the number entered (14 here too)
    # What quotas reads ages out with it, with no push: the number entered, not the fleet's.
    assert flavor_capacities(cluster=world.h100)[(world.h100_mig.pk, MIG_1G)].fleet is None


def test_a_repartition_counts_only_on_gpus_the_cluster_confirms(world, fleet):
    evil = register(fleet["admin"], "h100-evil")
    post_report(evil, "h100-evil", seven("h100-evil", 4))
    node_gpus = list(Node.objects.get(name="h100-mig-1").gpus.order_by("index"))
    for g in node_gpus + list(Node.objects.get(name="h100-evil").gpus.all()):
        MigLayout.objects.create(
            gpu=g,
            generation=1,
            instances=[{"profile": "1g.10gb", "start": i} for i in range(7)],
            state=LayoutState.PENDING,
        )
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    # h100-mig-1's 2 GPUs: 14 planned; h100-evil's 4 unconfirmed GPUs: nothing.
    assert (got.observed, got.planned, got.gpus, got.unconfirmed_nodes) == (0, 14, 2, 1)


def age_the_reading(name: str, by: timedelta) -> None:
    """Time passes (``by``) since the cluster's last reading of node ``name``: the reading and
    what the fleet pushed into quotas from it (``FleetNodeCapacity.confirmed_until``) both
    get older."""
    Node.objects.filter(name=name).update(cluster_seen_at=F("cluster_seen_at") - by)
    FleetNodeCapacity.objects.filter(node=name).update(confirmed_until=F("confirmed_until") - by)


# --- the reading, through the stand-in over HTTP ------------------------------------------------


def dynamic(handle: Handle) -> DynamicClient:
    return DynamicClient(config.new_client_from_config(config_file=str(handle.kubeconfig_path)))


def test_the_cluster_is_read_through_the_kubernetes_api(world, fleet, standin_server, tmp_path):
    standin_server.reset()
    hold_cluster_access(standin_server)
    point_at(world.h100, standin_server.kubeconfig_path)
    api = dynamic(standin_server)
    nodes = api.resources.get(api_version="v1", kind="Node")
    body = k8s_node("h100-mig-1", gpus=2, mig={"1g.10gb": 14})
    status = body.pop("status")
    nodes.create(body={**body, "status": {}})
    # The device plugin writes the node's status through its subresource.
    api.request(
        "patch",
        "/api/v1/nodes/h100-mig-1/status",
        body={"status": status},
        content_type="application/merge-patch+json",
    )
    nodes.create(body=k8s_node("cpu-1", product="", strategy=""))
    Node.objects.filter(name="h100-mig-1").update(cluster_seen_at=None, cluster_mig={})
    evil = register(fleet["admin"], "h100-evil")
    post_report(evil, "h100-evil", seven("h100-evil", 8))

    outcome = cluster_nodes_read(cluster=world.h100)
    assert outcome.ok and outcome.confirmed == ["h100-mig-1"]
    assert outcome.unknown == ["h100-evil"]
    assert capacity(world) == 14
    assert Node.objects.get(name="h100-mig-1").cluster_mig == {"1g.10gb": 14}

    # The device plugin advertises fewer (an instance went away): the next read counts that.
    api.request(
        "patch",
        "/api/v1/nodes/h100-mig-1/status",
        body={"status": {"allocatable": {"nvidia.com/mig-1g.10gb": "10"}}},
        content_type="application/merge-patch+json",
    )
    assert tasks.read_cluster_nodes() == 0  # the beat's task: every Kubernetes cluster
    assert capacity(world) == 10

    # The cluster out of reach: the last reading is kept, then ages out.
    dead = tmp_path / "dead.kubeconfig"
    text = Path(standin_server.kubeconfig_path).read_text()
    dead.write_text(text.replace(standin_server.url, "http://127.0.0.1:9"))
    point_at(world.h100, dead)
    assert not cluster_nodes_read(cluster=world.h100).ok
    assert capacity(world) == 10
    age_the_reading("h100-mig-1", timedelta(minutes=10))
    assert flavor_capacities(cluster=world.h100)[(world.h100_mig.pk, MIG_1G)].fleet is None

    # Back in reach, the Node gone: the node is not confirmed any more.
    point_at(world.h100, standin_server.kubeconfig_path)
    nodes.delete(name="h100-mig-1")
    outcome = cluster_nodes_read(cluster=world.h100)
    assert outcome.unknown == ["h100-evil", "h100-mig-1"]
    node = Node.objects.get(name="h100-mig-1")
    assert (node.cluster_seen_at, node.cluster_gpus, node.cluster_mig) == (None, None, {})


def test_the_beat_reads_the_nodes_every_minute():
    entry = app.conf.beat_schedule["gpu-agent-read-cluster-nodes"]
    assert entry == {"task": "gpu_agent.tasks.read_cluster_nodes", "schedule": 60.0}


def test_moving_a_node_to_another_cluster_forgets_the_old_clusters_word(world, fleet):
    from gpu_agent.services.nodes import node_update

    node = Node.objects.get(name="h100-mig-1")
    node_update(node=node, actor=world.admin, cluster=world.a100)
    node.refresh_from_db()
    assert (node.cluster_seen_at, node.cluster_gpus, node.cluster_mig) == (None, None, {})


# --- the demo ---------------------------------------------------------------------------------


def test_the_demo_seeds_its_standins_with_nodes_that_confirm_its_agents(standin_server, tmp_path):
    """``manage.py demo`` puts each demo GPU node in its cluster's stand-in as the device
    plugin and GPU Feature Discovery would leave it, once: demo-h100's two MIG nodes advertise
    22 1g.10gb and 2 3g.40gb each (44 and 4, the capacities the demo enters)."""
    from portal.management.commands.demo import H100_MIG_NODE, _standin_nodes, standin_node

    assert read_node(standin_node("h100-mig-1", H100_MIG_NODE) or {}) == NodeReading(
        gpus=4, product=PRODUCT, mig={"1g.10gb": 22, "3g.40gb": 2}
    )
    assert standin_node("t4-node-1", "Tesla T4:1:nomig") is None  # devcluster.demo's own
    standin_server.reset()
    hold_cluster_access(standin_server)
    for cluster in ("demo-a100", "demo-h100"):  # both at the one stand-in here
        (tmp_path / f"{cluster}.kubeconfig").write_text(
            Path(standin_server.kubeconfig_path).read_text()
        )
    assert _standin_nodes(str(tmp_path)).startswith("Stand-in GPU nodes: 6 new")
    assert _standin_nodes(str(tmp_path)).startswith("Stand-in GPU nodes: 0 new")  # a restart
    nodes = dynamic(standin_server).resources.get(api_version="v1", kind="Node")
    got = nodes.get(name="h100-mig-2").to_dict()
    assert got["status"]["allocatable"] == {
        "nvidia.com/gpu": "0",
        "nvidia.com/mig-1g.10gb": "22",
        "nvidia.com/mig-3g.40gb": "2",
    }
    assert got["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert nodes.get(name="h100-node-1").to_dict()["status"]["allocatable"] == {
        "nvidia.com/gpu": "8"
    }


def test_the_fleet_page_says_what_the_cluster_confirms_of_each_node(world, fleet):
    evil = register(fleet["admin"], "h100-evil")
    post_report(evil, "h100-evil", seven("h100-evil", 1))
    client = Client()
    client.force_login(world.admin)
    html = client.get("/fleet/").content.decode()

    def said(node: str) -> str:
        section = html[html.index(f'data-node="{node}"') :]
        return section[section.index("data-confirmation") :].split("</span>")[0]

    assert "the cluster confirms 2 GPUs (NVIDIA-H100-80GB-HBM3), advertising 14 x 1g.10gb" in said(
        "h100-mig-1"
    )
    assert 'class="tag bad wrap"' in said("h100-evil")  # marked, and wraps on a phone
    assert "not confirmed by the cluster: no Node of this name was read there" in said("h100-evil")
