"""A cluster's Prometheus as the usage source, against a real Prometheus scraping simulated
DCGM-exporter and kube-state-metrics endpoints (tests/prometheus/server.py): what the simulated
load says comes back through PromQL as the tenant's samples, rollups, usage page and volume
room; and a Prometheus that is down, slow, partial, or holds namespaces no tenant owns."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from django.test import Client
from django.utils import timezone

from alerts import services as alert_services
from alerts.models import Alert
from quotas.choices import SyncBackend
from quotas.models import Cluster
from tenants.models import Namespace, Tenant
from tests.conftest import World
from tests.prometheus.server import Handle, free_port, new_cluster_label
from usage import collector, selectors, services
from usage.choices import Metric, PrometheusFigure, Source
from usage.models import PrometheusSource, Sample, VolumeRoom
from usage.prometheus import prometheus_collect

GIB = 1024**3
ALL_FIGURES = [str(f) for f in PrometheusFigure.values]


def _namespace(tenant: Tenant) -> str:
    return str(
        Namespace.objects.filter(tenant=tenant).order_by("name").values_list("name", flat=True)[0]
    )


def _source(
    world: World, cluster: Cluster, url: str, label: str, **extra: object
) -> PrometheusSource:
    cluster.backend = SyncBackend.NONE  # only Prometheus: no Kubernetes API in these tests
    cluster.save(update_fields=["backend"])
    settings_ = {
        "url": url,
        "label_matchers": f'cluster="{label}"',
        "step_s": 15,
        "query_timeout_s": 5,
        "figures": ALL_FIGURES,
        "node_agent_samples": False,
    } | extra
    return services.prometheus_source_set(cluster=cluster, actor=world.admin, settings_=settings_)


def _soon() -> datetime:
    """A step past now: the range read ends after the scrapes the test waited for."""
    return timezone.now() + timedelta(seconds=15)


def _values(tenant: Tenant, metric: int) -> list[float]:
    return sorted(
        Sample.objects.filter(
            tenant_id=tenant.pk, metric=metric, source=Source.PROMETHEUS
        ).values_list("value", flat=True)
    )


def test_simulated_dcgm_and_kube_state_metrics_become_the_tenants_usage(
    world: World,
    prometheus_server: Handle,
    client: Client,
    api_as: Any,
) -> None:
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    ns_a = _namespace(world.team_a)
    # Two GPUs busy with team-a's pods: one reports only DCGM_FI_DEV_GPU_UTIL, the other also
    # the graphics engine activity, which the collector prefers (50 %, not the 99 % beside it).
    exporters.gpu(label, gpu=0, namespace=ns_a, pod="train-0", util=70, memory_mib=40960)
    exporters.gpu(label, gpu=1, namespace=ns_a, pod="train-1", util=99, memory_mib=20480,
                  engine_active=0.5)  # fmt: skip
    exporters.pod_requests(label, namespace=ns_a, pod="train-0", gpus=1)
    exporters.pod_requests(label, namespace=ns_a, pod="train-1", gpus=1)
    exporters.pod_requests(label, namespace=ns_a, pod="done-0", gpus=4, phase="Succeeded")
    exporters.cq_usage.labels(label, "gpu", world.team_a.slug, "a100-80gb", "nvidia.com/gpu").set(9)
    exporters.pending.labels(label, world.team_a.slug, "active").set(3)
    exporters.pending.labels(label, world.team_a.slug, "inadmissible").set(1)
    exporters.volume_available.labels(label, ns_a, "datasets").set(5 * GIB)
    exporters.volume_capacity.labels(label, ns_a, "datasets").set(100 * GIB)
    prometheus_server.wait_for(f'DCGM_FI_DEV_FB_USED{{cluster="{label}"}}', count=2)
    prometheus_server.wait_for(f'kubelet_volume_stats_available_bytes{{cluster="{label}"}}')
    _source(world, world.a100, prometheus_server.url, label)

    now = _soon()
    outcome = collector.cluster_collect(cluster=world.a100, now=now)

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    # Every figure but HAMi's (no vGPU flavor here: tests/usage/test_vgpu_usage.py reads it).
    assert sorted(outcome.prometheus.figures) == sorted(
        f for f in ALL_FIGURES if f != PrometheusFigure.VGPU_USAGE
    )
    assert any("vGPU flavors" in w for w in outcome.prometheus.warnings)
    assert set(_values(world.team_a, Metric.GPU_UTILIZATION)) == {50.0, 70.0}
    assert set(_values(world.team_a, Metric.GPU_MEMORY_USED)) == {20480.0, 40960.0}
    assert set(_values(world.team_a, Metric.GPUS_ALLOCATED)) == {2.0}  # the finished pod: no
    assert set(_values(world.team_a, Metric.QUOTA_USED)) == {9.0}
    assert set(_values(world.team_a, Metric.WORKLOADS_PENDING)) == {4.0}
    flavors = set(
        Sample.objects.filter(tenant_id=world.team_a.pk, source=Source.PROMETHEUS)
        .exclude(metric=Metric.WORKLOADS_PENDING)
        .values_list("flavor_id", flat=True)
    )
    assert flavors == {world.a100_gpu.pk}
    room = VolumeRoom.objects.get(cluster=world.a100, namespace=ns_a, claim="datasets")
    assert (room.tenant_id, room.available_bytes, room.capacity_bytes) == (
        world.team_a.pk, 5 * GIB, 100 * GIB,
    )  # fmt: skip
    assert [
        r.claim for r in selectors.volume_room(tenant_id=world.team_a.pk, cluster_id=world.a100.pk)
    ] == ["datasets"]
    status = PrometheusSource.objects.get(cluster=world.a100)
    assert status.last_error == "" and status.last_success_at == now
    assert status.last_samples == outcome.prometheus.samples > 0
    assert status.read_until is not None

    # The rollups and the tenant's usage page show the same figures, and say where from.
    services.rollups_run_all(now=now)
    current = selectors.usage_now(tenant_ids=[world.team_a.pk], now=now)
    figures = current[(world.a100.pk, world.team_a.pk, world.a100_gpu.pk)]
    assert figures[Metric.GPU_UTILIZATION] == pytest.approx(60.0)
    assert figures[Metric.GPUS_ALLOCATED] == pytest.approx(2.0)
    client.force_login(world.alice)
    page = client.get(f"/tenants/{world.team_a.slug}/usage/?range=24h")
    assert page.status_code == 200
    html = page.content.decode()
    assert "GPU utilisation from Prometheus" in html
    assert "GPUs requested by running pods from Prometheus" in html
    assert '<span class="kpi-value">60 %</span><span class="kpi-label">mean GPU utilisation' in html

    # Its alerts: 9 of its 10 A100s in use (Kueue's metric through Prometheus) warns.
    alert_services.evaluate(now=now)
    warned = Alert.objects.filter(
        tenant=world.team_a, cluster=world.a100, rule__name="quota-warning"
    )
    assert warned.exists()
    # The admission pre-check: 9 in use + 2 asked > 10, and 10 GiB to write to a volume the
    # kubelet says has 5 GiB free would end in "No space left on device".
    answer = api_as(world.alice).post(
        f"/api/v1/tenants/{world.team_a.slug}/admission-check/",
        {
            "cluster": "demo-a100",
            "gpus": {"a100-80gb": "2"},
            "volumes": {f"{ns_a}/datasets": "10Gi"},
        },
        format="json",
    )
    assert answer.status_code == 200, answer.content
    verdicts = {r["resource"]: r for r in answer.json()["resources"]}
    assert answer.json()["fits"] is False
    assert verdicts["gpu:a100-80gb"]["used"] == 9
    assert "9 in use + 2 asked = 11 > the limit 10" in verdicts["gpu:a100-80gb"]["reason"]
    volume = verdicts[f"volume:{ns_a}/datasets"]
    assert volume["fits"] is False and volume["headroom"] == 5 * GIB
    assert (
        volume["reason"]
        == "10.0 GiB to write, 5.0 GiB free: the job would fail with 'No space left on device'."
    )
    other = api_as(world.alice).post(
        f"/api/v1/tenants/{world.team_a.slug}/admission-check/",
        {"cluster": "demo-a100", "volumes": {"zephyr-vault/secrets": "1Gi"}},
        format="json",
    )
    assert other.status_code == 400
    assert "volumes.zephyr-vault/secrets" in other.json()["fields"]

    # The next pass reads on from where this one ended: nothing twice.
    before = Sample.objects.filter(source=Source.PROMETHEUS).count()
    again = prometheus_collect(cluster=world.a100, now=now)
    assert again is not None and again.samples == 0
    assert Sample.objects.filter(source=Source.PROMETHEUS).count() == before


def test_with_prometheus_for_gpu_figures_the_node_agents_samples_can_be_turned_off(
    world: World,
) -> None:
    now = timezone.now()
    assert services.agent_samples_wanted(world.h100.pk, now)
    services.prometheus_source_set(
        cluster=world.h100, actor=world.admin,
        settings_={"url": "http://prometheus:9090", "figures": ["gpu_usage"],
                   "node_agent_samples": False},
    )  # fmt: skip
    assert not services.agent_samples_wanted(world.h100.pk, now)
    services.prometheus_source_set(
        cluster=world.h100, actor=world.admin,
        settings_={"url": "http://prometheus:9090", "figures": ["gpu_requests"],
                   "node_agent_samples": False},
    )  # fmt: skip
    assert services.agent_samples_wanted(world.h100.pk, now)  # no GPU figures from it


def test_a_prometheus_that_refuses_connections_is_recorded_and_other_clusters_still_collected(
    world: World,
    prometheus_server: Handle,
) -> None:
    label = new_cluster_label()
    ns_a = _namespace(world.team_a)
    prometheus_server.exporters.gpu(label, gpu=0, namespace=ns_a, pod="p", util=42, memory_mib=1)
    prometheus_server.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{cluster="{label}"}}')
    _source(world, world.a100, f"http://127.0.0.1:{free_port()}", label)  # nothing listens
    _source(world, world.h100, prometheus_server.url, label, figures=["gpu_usage"])
    now = _soon()

    outcomes = [
        collector.cluster_collect(cluster=Cluster.objects.get(pk=pk), now=now)
        for pk in collector.collectable_cluster_ids()
    ]

    assert len(outcomes) == 2
    down = PrometheusSource.objects.get(cluster=world.a100)
    assert "connection refused" in down.last_error
    assert down.last_success_at is None and down.last_attempt_at == now
    up = PrometheusSource.objects.get(cluster=world.h100)
    assert up.last_error == "" and up.last_success_at == now
    assert set(
        Sample.objects.filter(cluster_id=world.h100.pk, metric=Metric.GPU_UTILIZATION).values_list(
            "value", flat=True
        )
    ) == {42.0}
    assert not Sample.objects.filter(cluster_id=world.a100.pk).exists()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A server that accepts connections and never answers (a Prometheus stuck on a query)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


def test_a_slow_prometheus_times_out_within_the_query_timeout(
    world: World, silent_server: int
) -> None:
    _source(world, world.a100, f"http://127.0.0.1:{silent_server}", new_cluster_label(),
            query_timeout_s=1)  # fmt: skip
    started = time.monotonic()
    outcome = prometheus_collect(cluster=world.a100, now=_soon())
    elapsed = time.monotonic() - started

    assert outcome is not None and not outcome.ok
    assert elapsed < 4  # one timeout, no read retries, the other figures not tried
    status = PrometheusSource.objects.get(cluster=world.a100)
    assert status.last_error.endswith("did not answer within 1 second.")
    assert not Sample.objects.filter(source=Source.PROMETHEUS).exists()


class _PartialProxy(BaseHTTPRequestHandler):
    """In front of the real Prometheus, answering like a federated store (Thanos, Mimir) whose
    one store was unreachable: the data, plus a warning."""

    upstream = ""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = requests.post(
            f"{self.upstream}{self.path}",
            data=body,
            headers={"Content-Type": self.headers.get("Content-Type", "")},
            timeout=10,
        ).json()
        answer["warnings"] = ["partial response: store eu-2 could not be reached"]
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_a_partial_answer_keeps_what_came_and_records_the_warnings(
    world: World,
    prometheus_server: Handle,
) -> None:
    label = new_cluster_label()
    ns_a = _namespace(world.team_a)
    # DCGM series only: kube-state-metrics has nothing for this cluster (one figure missing).
    prometheus_server.exporters.gpu(label, gpu=3, namespace=ns_a, pod="p", util=33, memory_mib=7)
    prometheus_server.wait_for(f'DCGM_FI_DEV_FB_USED{{cluster="{label}"}}')
    handler = type("Proxy", (_PartialProxy,), {"upstream": prometheus_server.url})
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        _source(world, world.a100, f"http://127.0.0.1:{proxy.server_port}", label,
                figures=["gpu_usage", "gpu_requests"])  # fmt: skip
        outcome = prometheus_collect(cluster=world.a100, now=_soon())
    finally:
        proxy.shutdown()
        proxy.server_close()

    assert outcome is not None and outcome.ok
    assert outcome.figures == ["gpu_usage"]
    assert set(_values(world.team_a, Metric.GPU_UTILIZATION)) == {33.0}
    assert not _values(world.team_a, Metric.GPUS_ALLOCATED)
    status = PrometheusSource.objects.get(cluster=world.a100)
    assert "partial response: store eu-2 could not be reached" in status.last_warnings
    assert any("GPUs requested by pods" in w for w in status.last_warnings)
    assert status.last_error == ""


def test_series_in_a_namespace_no_tenant_owns_are_ignored_counted_and_logged_once(
    world: World,
    prometheus_server: Handle,
    caplog: pytest.LogCaptureFixture,
) -> None:
    label = new_cluster_label()
    ns_a = _namespace(world.team_a)
    exporters = prometheus_server.exporters
    exporters.gpu(label, gpu=0, namespace=ns_a, pod="mine", util=10, memory_mib=1)
    exporters.gpu(label, gpu=1, namespace="nobody-owns-this", pod="x", util=90, memory_mib=2)
    prometheus_server.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{cluster="{label}"}}', count=2)
    _source(world, world.a100, prometheus_server.url, label, figures=["gpu_usage"])
    caplog.set_level(logging.WARNING, logger="usage.prometheus")

    first = prometheus_collect(cluster=world.a100, now=_soon())
    second = prometheus_collect(cluster=world.a100, now=_soon() + timedelta(seconds=15))

    assert first is not None and second is not None and first.ok and second.ok
    assert first.unknown_namespaces == ["nobody-owns-this"]
    assert first.unknown_series == 2  # its utilisation and its memory
    status = PrometheusSource.objects.get(cluster=world.a100)
    assert status.last_unknown_namespaces == ["nobody-owns-this"]
    assert status.last_unknown_series == 2
    logged = [r for r in caplog.records if "nobody-owns-this" in r.getMessage()]
    assert len(logged) == 1
    assert set(
        Sample.objects.filter(source=Source.PROMETHEUS, metric=Metric.GPU_UTILIZATION).values_list(
            "value", flat=True
        )
    ) == {10.0}  # the 90 % of the unknown namespace is nobody's
