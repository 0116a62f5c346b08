"""The demo's Prometheus path (``make run`` with the prometheus binary installed): the simulated
agents' DCGM exporter (``gpu_node_agent.testing.demo_metrics``) scraped by a real Prometheus, read by
the collector for the cluster ``manage.py demo`` pointed at it, as the tenants' usage."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from gpu_node_agent.testing.demo_metrics import serve
from gpu_node_agent.testing.fake import STATE_FILE, build_fake_node
from portal.management.commands.demo import DEMO_NODES, PROMETHEUS_PLAN, _prometheus_source
from tenants.models import Namespace
from tests.conftest import World, require_service
from tests.prometheus.server import (
    PROMETHEUS,
    Exporters,
    Handle,
    free_port,
    start_prometheus,
    stop_prometheus,
)
from usage import selectors, services
from usage.choices import Metric, Source
from usage.models import PrometheusSource, Sample
from usage.prometheus import prometheus_collect

ROOT = Path(__file__).resolve().parents[2]
FIXED_NOW = 1_765_000_000.0  # the simulated load at one moment: the same figures every scrape


def _demo_nodes(spec_dir: Path, state_dir: Path) -> None:
    """demo-h100's simulated nodes as the agents leave them: whole GPUs, and MIG GPUs with the
    instances the demo's layouts start them with (3g.40gb and 1g.10gb)."""
    spec_dir.mkdir()
    for name, cluster, gpus in DEMO_NODES:
        if cluster != "demo-h100":
            continue
        (spec_dir / f"{name}.json").write_text(json.dumps({"node": name, "gpus": gpus}))
        fake = build_fake_node(gpus, state_path=state_dir / name / STATE_FILE, seed=name)
        if ":nomig" in gpus:
            continue
        profiles = {
            instance.profile
            for index in range(fake.nvml.nvmlDeviceGetCount())
            for instance in fake.backend.list_gpu_instances(index)
        }
        assert profiles == {"3g.40gb", "1g.10gb"}


@pytest.fixture
def demo_prometheus(tmp_path: Path) -> Iterator[tuple[Handle, Path, int]]:
    require_service(
        "prometheus", Path(PROMETHEUS).exists(), "install the Debian package prometheus"
    )
    spec_dir, state_dir = tmp_path / "agents", tmp_path / "state"
    _demo_nodes(spec_dir, state_dir)
    server, port = serve(port=0, spec_dir=spec_dir, state_dir=state_dir, clock=lambda: FIXED_NOW)
    folder = tmp_path / "prometheus"
    folder.mkdir()
    try:
        handle = start_prometheus(folder, Exporters(), {"dcgm-exporter": [f"127.0.0.1:{port}"]})
        try:
            yield handle, spec_dir, port
        finally:
            stop_prometheus(handle)
    finally:
        server.shutdown()


def _clear_of_a_five_minute_boundary() -> None:
    """The usage page reads five-minute rollups up to now: scrapes, samples and the page's now
    must fall in one five-minute window, or the newest samples are in a window still open."""
    left = 300 - time.time() % 300
    if left < 60:
        time.sleep(left + 1)


def _served(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """What the demo exporter says, read from its /metrics as Prometheus reads it."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return out


def test_the_demo_exporters_figures_become_the_demo_tenants_usage_through_prometheus(
    world: World, demo_prometheus: tuple[Handle, Path, int], client: Client
) -> None:
    handle, spec_dir, port = demo_prometheus
    _clear_of_a_five_minute_boundary()
    # What manage.py demo does when make run started a Prometheus: demo-h100 reads it, and the
    # exporter learns the nodes and the tenants' namespaces.
    said = _prometheus_source(handle.url, str(spec_dir), world.admin)
    assert said == f"Prometheus: demo-h100's GPU usage is read from {handle.url}"
    assert (spec_dir / PROMETHEUS_PLAN).exists()
    source = PrometheusSource.objects.get(cluster=world.h100)
    assert source.enabled and not source.node_agent_samples

    served = _served(port)
    busy = [
        (labels, value)
        for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        for labels, value in served[name]
        if labels.get("namespace")
    ]
    handle.wait_for('DCGM_FI_DEV_FB_USED{namespace!=""}', count=len(busy))
    handle.wait_for('kube_pod_status_phase{phase="Running"}', count=len(busy))

    tenant_of = dict(Namespace.objects.values_list("name", "tenant_id"))
    expected_util: dict[int, set[float]] = defaultdict(set)
    for labels, value in busy:
        percent = value if "GPU_I_ID" not in labels or not labels["GPU_I_ID"] else value * 100
        expected_util[tenant_of[labels["namespace"]]].add(round(percent, 6))
    expected_memory: dict[int, set[float]] = defaultdict(set)
    for labels, value in served["DCGM_FI_DEV_FB_USED"]:
        if labels.get("namespace"):
            expected_memory[tenant_of[labels["namespace"]]].add(value)
    expected_requests: dict[tuple[int, str], float] = defaultdict(float)
    for labels, value in served["kube_pod_container_resource_requests"]:
        expected_requests[(tenant_of[labels["namespace"]], labels["resource"])] += value
    # The simulated load covers several tenants, whole GPUs and MIG instances.
    assert len(expected_util) >= 2
    assert {r for _t, r in expected_requests} >= {"nvidia_com_gpu", "nvidia_com_mig_1g_10gb"}

    now = timezone.now() + timedelta(seconds=15)
    outcome = prometheus_collect(cluster=world.h100, now=now)

    assert outcome is not None and outcome.ok, outcome
    assert sorted(outcome.figures) == ["gpu_requests", "gpu_usage"]
    assert outcome.unknown_series == 0  # every namespace the demo uses is a tenant's
    rows = Sample.objects.filter(cluster_id=world.h100.pk, source=Source.PROMETHEUS)
    util: dict[int, set[float]] = defaultdict(set)
    memory: dict[int, set[float]] = defaultdict(set)
    for tenant_id, metric, value in rows.values_list("tenant_id", "metric", "value"):
        if metric == Metric.GPU_UTILIZATION and tenant_id is not None:
            util[tenant_id].add(round(value, 6))
        elif metric == Metric.GPU_MEMORY_USED and tenant_id is not None:
            memory[tenant_id].add(value)
    assert util == expected_util
    assert memory == expected_memory
    flavor_of = {
        "nvidia_com_gpu": world.h100_gpu.pk,
        "nvidia_com_mig_1g_10gb": world.h100_mig.pk,
        "nvidia_com_mig_3g_40gb": None,  # no such flavor in this world
    }
    allocated: dict[tuple[int, int | None], set[float]] = defaultdict(set)
    for tenant_id, flavor_id, value in rows.filter(metric=Metric.GPUS_ALLOCATED).values_list(
        "tenant_id", "flavor_id", "value"
    ):
        allocated[(tenant_id, flavor_id)].add(value)
    wanted: dict[tuple[int, int | None], float] = defaultdict(float)
    for (tenant_id, resource), count in expected_requests.items():
        wanted[(tenant_id, flavor_of[resource])] += count
    assert allocated == {key: {count} for key, count in wanted.items()}
    # MIG instances keep their profile and flavor.
    mig = rows.filter(metric=Metric.GPU_UTILIZATION, mig_profile="1g.10gb")
    assert mig.exists() and set(mig.values_list("flavor_id", flat=True)) == {world.h100_mig.pk}

    # The tenant's usage page shows the figures and says they came from Prometheus.
    services.rollups_run_all(now=now)
    team = next(t for t in (world.team_a, world.team_b, world.team_c) if t.pk in expected_util)
    current = selectors.usage_now(tenant_ids=[team.pk], now=now)
    assert any(
        (world.h100.pk, team.pk, flavor) in current
        for flavor in (world.h100_gpu.pk, world.h100_mig.pk)
    )
    lead = team.memberships.filter(role="lead").select_related("user").first()
    client.force_login(lead.user if lead is not None else world.admin)
    page = client.get(f"/tenants/{team.slug}/usage/?range=24h")
    assert page.status_code == 200
    html = page.content.decode()
    assert "GPU utilisation from Prometheus" in html
    assert "GPUs requested by running pods from Prometheus" in html

    # Without a Prometheus on the next make run, demo-h100 reads its node agents again.
    said = _prometheus_source("", str(spec_dir), world.admin)
    assert said == "Prometheus: not running, demo-h100 reads its node agents again"
    assert not PrometheusSource.objects.get(cluster=world.h100).enabled
    assert not (spec_dir / PROMETHEUS_PLAN).exists()


def test_the_demo_agents_serve_the_exporter_with_metrics_port(tmp_path: Path) -> None:
    """``python -m gpu_node_agent.testing.demo --metrics-port`` serves the simulated devices (no portal
    needed: with no node specs it starts no agent), and refuses a port number out of range."""
    state_dir = tmp_path / "state"
    build_fake_node(
        "NVIDIA H100 80GB HBM3:2:nomig",
        state_path=state_dir / "h100-node-1" / STATE_FILE,
        seed="h100-node-1",
    )
    # The agent dir holds the exporter's plan but no node spec (so no agent starts, and the
    # plan is not taken for a node's spec).
    spec_only = tmp_path / "specs"
    spec_only.mkdir()
    (spec_only / PROMETHEUS_PLAN).write_text(
        json.dumps({"nodes": ["h100-node-1"], "namespaces": ["team-a-training"]})
    )
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpu_node_agent.testing.demo", "--portal", "http://127.0.0.1:9",
         "--dir", str(spec_only), "--state-dir", str(state_dir), "--metrics-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    try:
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                break
            except requests.RequestException:
                time.sleep(0.2)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        util = families["DCGM_FI_DEV_GPU_UTIL"].samples
        assert sorted(s.labels["gpu"] for s in util) == ["0", "1"]
        assert {s.labels["Hostname"] for s in util} == {"h100-node-1"}
        assert {s.labels["modelName"] for s in util} == {"NVIDIA H100 80GB HBM3"}
        assert {s.labels["namespace"] for s in util} <= {"team-a-training", ""}
        assert process.poll() is None  # still serving
    finally:
        process.terminate()
        process.wait(timeout=20)

    taken = subprocess.run(
        [sys.executable, "-m", "gpu_node_agent.testing.demo", "--portal", "http://127.0.0.1:9",
         "--dir", str(spec_only), "--state-dir", str(state_dir), "--metrics-port", "70000"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert taken.returncode == 2
    assert "--metrics-port: a port number from 0 to 65535" in taken.stderr
