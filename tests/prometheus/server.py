"""A real Prometheus for the tests (Debian's ``prometheus`` package), scraping exporters the
tests serve with ``prometheus_client`` under the real exporters' metric and label names.

``prometheus_server`` (session): the binary started on a free local port with a scrape config
written here (1 s scrape interval, storage in a temporary folder), scraping four simulated
exporters: NVIDIA's DCGM exporter, HAMi's vGPU monitor, kube-state-metrics (with Kueue's and the kubelet's volume
series, each a job of its own in a real cluster: one endpoint here) and whatever the test adds
with ``Handle.extra_target``. Every simulated series carries a ``cluster`` label, as a store
holding several clusters has: a test picks a fresh one and reads back only its own series
(the Prometheus source's label matchers), so tests sharing the server do not see each other.

Skipped where the binary is absent, a failure under REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from tests.conftest import require_service  # the tests' rule: skip, or fail in CI

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

DCGM_LABELS = [
    "cluster", "gpu", "UUID", "device", "modelName", "Hostname", "hostname", "GPU_I_PROFILE",
    "GPU_I_ID", "container", "namespace", "pod",
]  # fmt: skip
# The DCGM exporter's releases so far label the node ``Hostname``; its next one ``hostname``.
DCGM_HOST_LABELS = ("Hostname", "hostname")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exporters:
    """The simulated exporters' series (prometheus_client gauges, one registry each)."""

    def __init__(self) -> None:
        self.dcgm = CollectorRegistry()
        self.kube = CollectorRegistry()
        self.gpu_util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", DCGM_LABELS,
                              registry=self.dcgm)  # fmt: skip
        self.engine_active = Gauge(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.",
            DCGM_LABELS, registry=self.dcgm,
        )  # fmt: skip
        self.fb_used = Gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
                             DCGM_LABELS, registry=self.dcgm)  # fmt: skip
        self.requests = Gauge(
            "kube_pod_container_resource_requests",
            "The number of requested request resource by a container.",
            ["cluster", "namespace", "pod", "uid", "container", "node", "resource", "unit"],
            registry=self.kube,
        )
        self.phase = Gauge(
            "kube_pod_status_phase", "The pods current phase.",
            ["cluster", "namespace", "pod", "uid", "phase"], registry=self.kube,
        )  # fmt: skip
        self.cq_usage = Gauge(
            "kueue_cluster_queue_resource_usage", "Reports the cluster_queue's total resource usage.",
            ["cluster", "cohort", "cluster_queue", "flavor", "resource"], registry=self.kube,
        )  # fmt: skip
        self.cq_reservation = Gauge(
            "kueue_cluster_queue_resource_reservation",
            "Reports the cluster_queue's total resource reservation.",
            ["cluster", "cohort", "cluster_queue", "flavor", "resource"], registry=self.kube,
        )  # fmt: skip
        self.pending = Gauge(
            "kueue_pending_workloads", "The number of pending workloads, per cluster_queue and status.",
            ["cluster", "cluster_queue", "status"], registry=self.kube,
        )  # fmt: skip
        self.admitted = Gauge(
            "kueue_admitted_active_workloads", "The number of admitted Workloads that are active.",
            ["cluster", "cluster_queue"], registry=self.kube,
        )  # fmt: skip
        # Kueue's (pkg/metrics): exponential buckets; its _count and _sum are what is read.
        self.admission_wait = Histogram(
            "kueue_admission_wait_time_seconds",
            "The time between a workload was created or requeued until admission, "
            "per 'cluster_queue'",
            ["cluster", "cluster_queue"], registry=self.kube,
            buckets=[1.0 * 2.5**i for i in range(14)],
        )  # fmt: skip
        # kube-state-metrics exports the node labels its --metric-labels-allowlist names, in
        # its spelling: ``nvidia.com/gpu.product`` -> ``label_nvidia_com_gpu_product``,
        # ``example.com/gpuPool`` -> ``label_example_com_gpu_pool`` (snake_case). An empty value
        # is a label the node lacks (Prometheus stores no empty label).
        self.node_labels = Gauge(
            "kube_node_labels", "Kubernetes labels converted to Prometheus labels.",
            ["cluster", "node", "label_nvidia_com_gpu_product", "label_example_com_gpu_pool"],
            registry=self.kube,
        )  # fmt: skip
        self.volume_available = Gauge(
            "kubelet_volume_stats_available_bytes", "Number of available bytes in the volume.",
            ["cluster", "namespace", "persistentvolumeclaim"], registry=self.kube,
        )  # fmt: skip
        self.volume_capacity = Gauge(
            "kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume.",
            ["cluster", "namespace", "persistentvolumeclaim"], registry=self.kube,
        )  # fmt: skip

        # HAMi's vGPU monitor (cmd/vGPUmonitor/metrics.go): the names and labels since 2.10,
        # and the older ones (2.10's --legacy-metrics).
        self.hami = CollectorRegistry()
        ctr = ["cluster", "namespace", "pod", "container", "vdevice_index", "device_uuid"]
        legacy = ["cluster", "podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid"]
        host = ["cluster", "node", "device_index", "device_uuid", "device_type"]
        legacy_host = ["cluster", "nodeid", "deviceidx", "deviceuuid", "devicetype"]
        self.hami_memory = Gauge("hami_vgpu_memory_used_bytes",
                                 "vGPU device memory usage in bytes", ctr, registry=self.hami)  # fmt: skip
        self.hami_util = Gauge("hami_container_device_utilization_ratio",
                               "Container device SM utilization ratio", ctr, registry=self.hami)  # fmt: skip
        self.hami_host = Gauge("hami_host_gpu_memory_used_bytes",
                               "GPU device memory usage in bytes", host, registry=self.hami)  # fmt: skip
        self.hami_memory_legacy = Gauge("vGPU_device_memory_usage_in_bytes", "vGPU device usage",
                                        legacy, registry=self.hami)  # fmt: skip
        self.hami_util_legacy = Gauge("Device_utilization_desc_of_container",
                                      "Container device utilization description", legacy,
                                      registry=self.hami)  # fmt: skip
        self.hami_host_legacy = Gauge("HostGPUMemoryUsage", "GPU device memory usage",
                                      legacy_host, registry=self.hami)  # fmt: skip

    def hami_container(
        self, cluster: str, *, namespace: str, pod: str, memory_bytes: float, util: float,
        device_uuid: str, device_type: str = "NVIDIA-Tesla T4", legacy: bool = False,
        vdevice: str = "0",
    ) -> None:  # fmt: skip
        """One container's vGPU as HAMi's monitor reports it (new names, or ``legacy``)."""
        if legacy:
            labels = {"cluster": cluster, "podnamespace": namespace, "podname": pod,
                      "ctrname": "main", "vdeviceid": vdevice, "deviceuuid": device_uuid}  # fmt: skip
            self.hami_memory_legacy.labels(**labels).set(memory_bytes)
            self.hami_util_legacy.labels(**labels).set(util)
            self.hami_host_legacy.labels(
                cluster=cluster, nodeid="gpu-node-1", deviceidx="0", deviceuuid=device_uuid,
                devicetype=device_type,
            ).set(memory_bytes)  # fmt: skip
            return
        labels = {"cluster": cluster, "namespace": namespace, "pod": pod, "container": "main",
                  "vdevice_index": vdevice, "device_uuid": device_uuid}  # fmt: skip
        self.hami_memory.labels(**labels).set(memory_bytes)
        self.hami_util.labels(**labels).set(util)
        self.hami_host.labels(
            cluster=cluster, node="gpu-node-1", device_index="0", device_uuid=device_uuid,
            device_type=device_type,
        ).set(memory_bytes)  # fmt: skip

    def gpu(
        self,
        cluster: str,
        *,
        gpu: int,
        namespace: str,
        pod: str,
        util: float,
        memory_mib: float,
        model: str = "NVIDIA A100-SXM4-80GB",
        engine_active: float | None = None,
        mig_profile: str = "",
        gi_id: str = "",
        host: str = "gpu-node-1",
        host_label: str = "Hostname",
        uuid: str = "",
    ) -> None:
        """One GPU (or MIG instance) busy with a pod, as the DCGM exporter reports it; its node
        under ``host_label`` (one of ``DCGM_HOST_LABELS``: the exporter's release)."""
        assert host_label in DCGM_HOST_LABELS, host_label
        labels = {
            "cluster": cluster, "gpu": str(gpu), "UUID": uuid or f"GPU-{cluster[:8]}-{gpu:04d}",
            "device": f"nvidia{gpu}", "modelName": model, "Hostname": "", "hostname": "",
            "GPU_I_PROFILE": mig_profile, "GPU_I_ID": gi_id, "container": "main",
            "namespace": namespace, "pod": pod,
        }  # fmt: skip
        labels[host_label] = host
        if not mig_profile:
            self.gpu_util.labels(**labels).set(util)
        if engine_active is not None:
            self.engine_active.labels(**labels).set(engine_active)
        self.fb_used.labels(**labels).set(memory_mib)

    def pod_requests(
        self, cluster: str, *, namespace: str, pod: str, gpus: float,
        resource: str = "nvidia_com_gpu", phase: str = "Running", node: str = "gpu-node-1",
    ) -> None:  # fmt: skip
        """A pod's GPU request as kube-state-metrics reports it, and its phase."""
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{cluster}/{namespace}/{pod}"))
        self.requests.labels(
            cluster=cluster, namespace=namespace, pod=pod, uid=uid, container="main",
            node=node, resource=resource, unit="integer",
        ).set(gpus)  # fmt: skip
        for name in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            self.phase.labels(
                cluster=cluster, namespace=namespace, pod=pod, uid=uid, phase=name
            ).set(1.0 if name == phase else 0.0)


@dataclass
class Handle:
    url: str
    port: int
    exporters: Exporters
    config_path: Path
    process: subprocess.Popen[bytes]
    extra: list[str] = field(default_factory=list)

    def api(self, path: str, **params: str) -> Any:
        return requests.get(f"{self.url}{path}", params=params, timeout=10).json()

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = self.api("/api/v1/query", query=expr)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def wait_for(self, expr: str, *, count: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
        """Until ``expr`` gives at least ``count`` series (the scrapes have happened)."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if len(result) >= count:
                return result
            time.sleep(0.25)
        raise AssertionError(f"{expr}: {len(result)} series after {timeout}s, wanted {count}")


def new_cluster_label() -> str:
    return f"c{uuid.uuid4().hex[:12]}"


def write_config(path: Path, targets: dict[str, list[str]], interval: str = "1s") -> None:
    jobs = [
        {
            "job_name": job,
            "honor_labels": True,  # the exporters' own namespace / pod labels stay as they are
            "scrape_interval": interval,
            "static_configs": [{"targets": hosts}],
        }
        for job, hosts in targets.items()
    ]
    rules = [str(p) for p in sorted(path.parent.glob("*.rules.yml"))]
    config = {"global": {"scrape_interval": interval, "evaluation_interval": interval},
              "scrape_configs": jobs, "rule_files": rules}  # fmt: skip
    path.write_text(json.dumps(config))  # JSON is YAML


def start_prometheus(folder: Path, exporters: Exporters, targets: dict[str, list[str]]) -> Handle:
    """Prometheus on a free local port scraping ``targets`` every second, storage in
    ``folder``; returns once it is ready (stop it with ``stop_prometheus``)."""
    config = folder / "prometheus.yml"
    write_config(config, targets)
    port = free_port()
    log_path = folder / "prometheus.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1h", "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    handle = Handle(f"http://127.0.0.1:{port}", port, exporters, config, process)
    deadline = time.monotonic() + 60
    while True:
        try:
            if requests.get(f"{handle.url}/-/ready", timeout=2).status_code == 200:
                return handle
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            stop_prometheus(handle)
            raise AssertionError("prometheus did not start: " + log_path.read_text()[-2000:])
        time.sleep(0.2)


def stop_prometheus(handle: Handle) -> None:
    handle.process.terminate()
    try:
        handle.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        handle.process.kill()


def serve(registry: CollectorRegistry) -> tuple[Any, int]:
    """A simulated exporter: ``registry`` on a free local port (the server, its port)."""
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    return server, int(server.server_port)


@pytest.fixture(scope="session")
def prometheus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handle]:
    require_service(
        "prometheus", Path(PROMETHEUS).exists(), "install the Debian package prometheus"
    )
    exporters = Exporters()
    dcgm_server, dcgm_port = serve(exporters.dcgm)
    kube_server, kube_port = serve(exporters.kube)
    hami_server, hami_port = serve(exporters.hami)
    try:
        handle = start_prometheus(
            tmp_path_factory.mktemp("prometheus"),
            exporters,
            {"dcgm-exporter": [f"127.0.0.1:{dcgm_port}"],
             "kube-state-metrics": [f"127.0.0.1:{kube_port}"],
             "hami-device-plugin": [f"127.0.0.1:{hami_port}"]},
        )  # fmt: skip
        try:
            yield handle
        finally:
            stop_prometheus(handle)
    finally:
        dcgm_server.shutdown()
        kube_server.shutdown()
        hami_server.shutdown()


def reload(handle: Handle) -> None:
    """Ask the running Prometheus to read its configuration (and rule files) again."""
    assert requests.post(f"{handle.url}/-/reload", timeout=10).status_code == 200
