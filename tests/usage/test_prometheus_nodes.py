"""What a pod's or a GPU's node tells, read from a real Prometheus (tests/prometheus/server.py):
on a cluster with several whole-GPU flavors, kube-state-metrics' GPU requests get the flavor
whose node labels the pod's node carries (kube_node_labels); DCGM series put each GPU on its
node, so the admin heatmap draws GPUs no node agent reports."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

from django.test import Client
from django.utils import timezone

from dashboards.charts import admin_figures
from dashboards.selectors import admin_dashboard, period_resolve
from gpu_agent.models import Node
from quotas.choices import SyncBackend
from quotas.models import Cluster
from tenants.models import Namespace, Tenant
from tests.conftest import World
from tests.factories import gpu_flavor
from tests.prometheus.server import Handle, new_cluster_label
from usage import collector, services
from usage.choices import Metric, PrometheusFigure, Source
from usage.models import PrometheusGpu, PrometheusSource, Sample
from usage.prometheus import kube_label_name

STEP = timedelta(seconds=15)  # a step past now: the range read ends after the scrapes


def _namespace(tenant: Tenant) -> str:
    return str(Namespace.objects.filter(tenant=tenant).order_by("name")[0].name)


def _source(world: World, cluster: Cluster, url: str, label: str, figures: list[str]) -> None:
    cluster.backend = SyncBackend.NONE  # only Prometheus: no Kubernetes API here
    cluster.save(update_fields=["backend"])
    services.prometheus_source_set(
        cluster=cluster,
        actor=world.admin,
        settings_={
            "url": url, "label_matchers": f'cluster="{label}"', "step_s": 15,
            "query_timeout_s": 5, "figures": figures, "node_agent_samples": False,
        },
    )  # fmt: skip


def test_gpu_requests_take_the_flavor_of_their_pods_node(world: World, prometheus_server: Handle):
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    a100_40 = gpu_flavor(world.a100, "a100-40gb", gpus=8, gpu_model="NVIDIA A100-SXM4-40GB")
    ns = _namespace(world.team_a)
    exporters.node_labels.labels(label, "big-1", "NVIDIA-A100-SXM4-80GB", "").set(1)
    exporters.node_labels.labels(label, "small-1", "NVIDIA-A100-SXM4-40GB", "").set(1)
    exporters.node_labels.labels(label, "odd-1", "NVIDIA-L4", "").set(1)
    exporters.pod_requests(label, namespace=ns, pod="train-80", gpus=1, node="big-1")
    exporters.pod_requests(label, namespace=ns, pod="train-40", gpus=2, node="small-1")
    exporters.pod_requests(label, namespace=ns, pod="train-40b", gpus=1, node="small-1")
    exporters.pod_requests(label, namespace=ns, pod="stray", gpus=4, node="odd-1")
    prometheus_server.wait_for(f'kube_node_labels{{cluster="{label}"}}', count=3)
    prometheus_server.wait_for(
        f'kube_pod_container_resource_requests{{cluster="{label}"}}', count=4
    )
    _source(world, world.a100, prometheus_server.url, label, [PrometheusFigure.GPU_REQUESTS])

    outcome = collector.cluster_collect(cluster=world.a100, now=timezone.now() + STEP)

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    per_flavor = {
        flavor_id: value
        for flavor_id, value in Sample.objects.filter(
            tenant_id=world.team_a.pk, metric=Metric.GPUS_ALLOCATED, source=Source.PROMETHEUS
        ).values_list("flavor_id", "value")
    }
    assert per_flavor == {world.a100_gpu.pk: 1.0, a100_40.pk: 3.0, None: 4.0}
    # The GPUs on a node no flavor's labels match are counted, and the admin told why.
    status = PrometheusSource.objects.get(cluster=world.a100)
    assert any("match no single GPU flavor" in w for w in status.last_warnings)


def test_node_label_names_are_spelt_as_kube_state_metrics_spells_them():
    # kube-state-metrics (internal/store/utils.go): invalid characters to "_", then snake_case
    # ("_" before an upper-case letter that follows a lower-case letter or a digit), lower-cased.
    assert kube_label_name("nvidia.com/gpu.product") == "label_nvidia_com_gpu_product"
    assert kube_label_name("camelCase") == "label_camel_case"
    assert kube_label_name("example.com/gpuPool") == "label_example_com_gpu_pool"
    assert kube_label_name("gpu2Model") == "label_gpu2_model"
    assert kube_label_name("nodeGPUType") == "label_node_gputype"  # no "_" between capitals
    assert kube_label_name("k8s.io/Accelerator") == "label_k8s_io_accelerator"
    assert kube_label_name("topology.kubernetes.io/zone") == "label_topology_kubernetes_io_zone"


def test_flavor_node_labels_with_capitals_match_kube_state_metrics_snake_case(
    world: World, prometheus_server: Handle
):
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    world.a100_gpu.node_labels = {"example.com/gpuPool": "big"}
    world.a100_gpu.save(update_fields=["node_labels"])
    small = gpu_flavor(world.a100, "a100-40gb", gpus=8, gpu_model="NVIDIA A100-SXM4-40GB")
    small.node_labels = {"example.com/gpuPool": "small"}
    small.save(update_fields=["node_labels"])
    ns = _namespace(world.team_a)
    exporters.node_labels.labels(label, "big-1", "", "big").set(1)
    exporters.node_labels.labels(label, "small-1", "", "small").set(1)
    exporters.pod_requests(label, namespace=ns, pod="train-80", gpus=1, node="big-1")
    exporters.pod_requests(label, namespace=ns, pod="train-40", gpus=2, node="small-1")
    prometheus_server.wait_for(
        f'kube_node_labels{{cluster="{label}", label_example_com_gpu_pool!=""}}', count=2
    )
    prometheus_server.wait_for(
        f'kube_pod_container_resource_requests{{cluster="{label}"}}', count=2
    )
    _source(world, world.a100, prometheus_server.url, label, [PrometheusFigure.GPU_REQUESTS])

    outcome = collector.cluster_collect(cluster=world.a100, now=timezone.now() + STEP)

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    assert set(
        Sample.objects.filter(
            tenant_id=world.team_a.pk, metric=Metric.GPUS_ALLOCATED, source=Source.PROMETHEUS
        ).values_list("flavor_id", "value")
    ) == {(world.a100_gpu.pk, 1.0), (small.pk, 2.0)}
    status = PrometheusSource.objects.get(cluster=world.a100)
    assert not any("match no single GPU flavor" in w for w in status.last_warnings)


def test_with_one_whole_gpu_flavor_no_node_labels_are_asked_for(
    world: World, prometheus_server: Handle
):
    label = new_cluster_label()
    ns = _namespace(world.team_b)
    prometheus_server.exporters.pod_requests(label, namespace=ns, pod="p", gpus=2, node="n-9")
    prometheus_server.wait_for(f'kube_pod_container_resource_requests{{cluster="{label}"}}')
    _source(world, world.a100, prometheus_server.url, label, [PrometheusFigure.GPU_REQUESTS])
    outcome = collector.cluster_collect(cluster=world.a100, now=timezone.now() + STEP)
    assert outcome.prometheus is not None and outcome.prometheus.requests == 1
    assert set(
        Sample.objects.filter(tenant_id=world.team_b.pk, metric=Metric.GPUS_ALLOCATED).values_list(
            "flavor_id", "value"
        )
    ) == {(world.a100_gpu.pk, 2.0)}


def _charts(response: Any) -> dict[str, Any]:
    match = re.search(
        r'<script id="dashboard-charts" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page embeds no chart data"
    return json.loads(match[1])  # type: ignore[no-any-return]


def test_the_heatmap_draws_gpus_only_prometheus_shows_on_their_nodes(
    world: World, prometheus_server: Handle
):
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    ns = _namespace(world.team_a)
    # No agent runs anywhere here, but one node is registered (its agent sends no usage).
    registered = Node.objects.create(name="dgx-2", cluster=world.a100)
    exporters.gpu(label, gpu=0, namespace=ns, pod="a", util=80, memory_mib=1024, host="dgx-1")
    exporters.gpu(label, gpu=1, namespace=ns, pod="b", util=20, memory_mib=1024, host="dgx-1")
    exporters.gpu(label, gpu=0, namespace=ns, pod="c", util=50, memory_mib=1024, host="dgx-2",
                  uuid=f"GPU-{label[:8]}-dgx2")  # fmt: skip
    prometheus_server.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{cluster="{label}"}}', count=3)
    _source(world, world.a100, prometheus_server.url, label, [PrometheusFigure.GPU_USAGE])
    now = timezone.now() + timedelta(seconds=15)

    outcome = collector.cluster_collect(cluster=world.a100, now=now)

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    gpus = {(g.node, g.index): g.model for g in PrometheusGpu.objects.filter(cluster=world.a100)}
    assert gpus == {
        ("dgx-1", 0): "NVIDIA A100-SXM4-80GB",
        ("dgx-1", 1): "NVIDIA A100-SXM4-80GB",
        ("dgx-2", 0): "NVIDIA A100-SXM4-80GB",
    }
    # The registered node's samples carry its id; the other node has none to carry.
    nodes = set(
        Sample.objects.filter(metric=Metric.GPU_UTILIZATION, source=Source.PROMETHEUS)
        .values_list("gpu_uuid", "node_id")
        .distinct()
    )
    assert nodes == {
        (f"GPU-{label[:8]}-0000", None),
        (f"GPU-{label[:8]}-0001", None),
        (f"GPU-{label[:8]}-dgx2", registered.pk),
    }

    client = Client()
    client.force_login(world.admin)
    response = client.get("/usage/?range=24h&cluster=demo-a100")
    assert response.status_code == 200
    heatmap = _charts(response)["heatmap-0"]["data"][0]
    assert heatmap["y"] == ["dgx-1", "dgx-2"]
    assert heatmap["text"][0][0] == "NVIDIA A100-SXM4-80GB, from Prometheus"
    # The read ended a step ahead of the clock: the figures as of then.
    later = admin_figures(
        admin_dashboard(period=period_resolve(name="24h", now=now), cluster="demo-a100", now=now)
    )
    assert later["heatmap-0"]["data"][0]["z"] == [[80.0, 20.0], [50.0, None]]


def test_dcgm_series_labelled_hostname_are_put_on_their_node(
    world: World, prometheus_server: Handle
):
    """The DCGM exporter's next release renames its ``Hostname`` label ``hostname``: both
    are read, so a cluster upgrading its exporter keeps its GPUs on their nodes."""
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    ns = _namespace(world.team_a)
    registered = Node.objects.create(name="dgx-new", cluster=world.a100)
    exporters.gpu(label, gpu=0, namespace=ns, pod="a", util=70, memory_mib=512, host="dgx-old")
    exporters.gpu(label, gpu=0, namespace=ns, pod="b", util=30, memory_mib=512, host="dgx-new",
                  host_label="hostname", uuid=f"GPU-{label[:8]}-new")  # fmt: skip
    prometheus_server.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{cluster="{label}"}}', count=2)
    assert prometheus_server.query(f'DCGM_FI_DEV_GPU_UTIL{{cluster="{label}", hostname!=""}}')
    _source(world, world.a100, prometheus_server.url, label, [PrometheusFigure.GPU_USAGE])

    outcome = collector.cluster_collect(cluster=world.a100, now=timezone.now() + STEP)

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    gpus = {g.uuid: g.node for g in PrometheusGpu.objects.filter(cluster=world.a100)}
    assert gpus == {f"GPU-{label[:8]}-0000": "dgx-old", f"GPU-{label[:8]}-new": "dgx-new"}
    nodes = set(
        Sample.objects.filter(metric=Metric.GPU_UTILIZATION, source=Source.PROMETHEUS)
        .values_list("gpu_uuid", "node_id")
        .distinct()
    )
    assert (f"GPU-{label[:8]}-new", registered.pk) in nodes
