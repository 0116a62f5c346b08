"""The demo's DCGM exporter: what NVIDIA's DCGM exporter and kube-state-metrics would say about
the simulated GPU nodes, for a Prometheus beside ``make run`` to scrape.

Development infrastructure, like ``gpu_node_agent.testing.demo`` (which serves it with
``--metrics-port``). On every scrape it reads each simulated node's devices from the state the
fake backend keeps (``STATE/<node>/fake-nvml.json``: the whole GPUs, and the MIG instances the
portal's layouts created), so the series follow the same devices the agents report. The fake
GPUs run no processes, so the load is simulated here: most devices are busy with a pod in one of
the demo tenants' namespaces, each with a utilisation that changes every ``period_s`` seconds and
framebuffer memory in step with it; the rest are idle (no pod labels, as the exporter reports an
unused GPU). Where the demo's load plan (``DIR/load.json``, ``gpu_spec.demo_load``) covers a whole
GPU, its tenant and load are the plan's, the same the node agents' fake GPUs report.

Which nodes and namespaces: ``DIR/prometheus.json``, written by ``manage.py demo``::

    {"cluster": "demo-h100", "nodes": ["h100-node-1", ...], "namespaces": ["team-a-training", ...]}

Without it every node in ``DIR/*.json`` is served, idle. Metric and label names are the
exporters' own: ``DCGM_FI_DEV_GPU_UTIL`` (percent, whole GPUs), ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
(a ratio; served here for MIG instances, which report no ``DCGM_FI_DEV_GPU_UTIL``), ``DCGM_FI_DEV_FB_USED`` (MiB) labelled ``gpu``, ``UUID``,
``device``, ``modelName``, ``Hostname``, ``GPU_I_PROFILE``, ``GPU_I_ID``, ``container``,
``namespace``, ``pod``; kube-state-metrics' ``kube_pod_container_resource_requests`` (resource
``nvidia_com_gpu`` or ``nvidia_com_mig_<profile>``) and ``kube_pod_status_phase`` for the
busy devices' pods. Both come from one endpoint (in a cluster they are two jobs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_spec import demo_load
from gpu_spec.demo_load import DEMO_LOAD_PLAN_FILE
from gpu_spec.mig.catalogue import Catalogue, load_catalogue
from gpu_spec.simulated import DEMO_METRICS_PLAN_FILE

logger = logging.getLogger("gpu_node_agent.demo_metrics")

PLAN_FILE = DEMO_METRICS_PLAN_FILE
STATE_FILE = "fake-nvml.json"  # gpu_node_agent.testing.fake.STATE_FILE, without loading NVML code
DEFAULT_PERIOD_S = 60.0

DCGM_LABELS = [
    "gpu", "UUID", "device", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID",
    "container", "namespace", "pod",
]  # fmt: skip
KSM_REQUEST_LABELS = ["namespace", "pod", "uid", "container", "node", "resource", "unit"]
KSM_PHASE_LABELS = ["namespace", "pod", "uid", "phase"]
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


@dataclass(frozen=True)
class Plan:
    """What to serve: these nodes, busy with pods in these namespaces."""

    nodes: tuple[str, ...]
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class Device:
    """A whole GPU or a MIG instance of one simulated node, as the DCGM exporter lists it."""

    node: str
    gpu: int
    uuid: str  # the GPU's (the exporter labels a MIG instance with its parent's UUID)
    model: str
    memory_total_mib: int
    mig_profile: str = ""  # "1g.10gb"
    gi_id: int | None = None


@dataclass(frozen=True)
class Reading:
    """One device's figures at one moment; ``namespace`` empty where it is idle."""

    device: Device
    namespace: str
    pod: str
    util_pct: float
    memory_used_mib: float


def read_plan(spec_dir: Path) -> Plan:
    """The plan ``manage.py demo`` wrote, or every node in ``spec_dir``, idle."""
    path = spec_dir / PLAN_FILE
    if path.is_file():
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return Plan(
                tuple(str(n) for n in raw.get("nodes") or []),
                tuple(sorted(str(n) for n in raw.get("namespaces") or [])),
            )
        except (OSError, ValueError, AttributeError) as error:
            logger.warning("ignoring unreadable %s: %s", path, error)
    nodes = []
    for spec in sorted(spec_dir.glob("*.json")) if spec_dir.is_dir() else []:
        if spec.name in (PLAN_FILE, DEMO_LOAD_PLAN_FILE):
            continue
        try:
            nodes.append(str(json.loads(spec.read_text(encoding="utf-8"))["node"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return Plan(tuple(nodes), ())


def node_devices(node: str, state: dict[str, Any], catalogue: Catalogue) -> list[Device]:
    """The devices in a fake node's saved state: each GPU without MIG, each GPU instance of a
    GPU with MIG on (none while it has no instances yet)."""
    devices = []
    for index, gpu in enumerate(state.get("gpus") or []):
        name, gpu_uuid = str(gpu["name"]), str(gpu["uuid"])
        total = int(gpu["memory_total_mib"])
        if not gpu.get("mig_current"):
            devices.append(Device(node, index, gpu_uuid, name, total))
            continue
        model = catalogue.find_model(name)
        for gi in sorted(gpu.get("gpu_instances") or [], key=lambda g: int(g["gi_id"])):
            profile = model.find_profile(str(gi["profile"])) if model is not None else None
            if profile is None:
                continue
            memory = profile.memory_mib or profile.memory_gb_nominal * 1024
            devices.append(
                Device(node, index, gpu_uuid, name, memory, profile.name, int(gi["gi_id"]))
            )
    return devices


def _number(*parts: object) -> int:
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def simulated_reading(
    device: Device, namespaces: Sequence[str], now: float, period_s: float
) -> Reading:
    """The simulated load on a device at ``now``: three in four devices busy (the same pod all
    along), at 15 to 95 % that changes each period, memory in step; the rest idle."""
    key = (device.node, device.uuid, device.gi_id)
    owner = _number(*key)
    if not namespaces or owner % 4 == 0:
        return Reading(device, "", "", 0.0, 0.0)
    namespace = namespaces[(owner // 4) % len(namespaces)]
    pod = f"{namespace}-{device.node}-gpu{device.gpu}"
    if device.gi_id is not None:
        pod += f"-mig{device.gi_id}"
    bucket = int(now // period_s)
    util = float(15 + _number(*key, bucket) % 81)
    memory = float(device.memory_total_mib * (30 + int(util * 0.6)) // 100)
    return Reading(device, namespace, pod, util, memory)


def planned_reading(device: Device, plan: demo_load.LoadPlan, now: float) -> Reading | None:
    """A whole GPU's load by the demo's load plan (the same the node agents' fake GPUs carry,
    ``gpu_spec.demo_load``); None for a MIG instance or a GPU the plan leaves out."""
    if device.gi_id is not None:
        return None
    load = demo_load.gpu_load(plan, device.node, device.gpu, datetime.fromtimestamp(now, tz=UTC))
    if load is None:
        return None
    if not load.namespace:
        return Reading(device, "", "", 0.0, 0.0)
    pod = f"{load.namespace}-{device.node}-gpu{device.gpu}"
    memory = float(int(device.memory_total_mib * load.memory_fraction))
    return Reading(device, load.namespace, pod, float(load.utilization_pct), memory)


def kube_resource(device: Device) -> str:
    """kube-state-metrics' name of the resource the device's pod requests."""
    if not device.mig_profile:
        return "nvidia_com_gpu"
    return "nvidia_com_mig_" + re.sub(r"[^a-zA-Z0-9_]", "_", device.mig_profile)


class SimulatedExporter(Collector):
    """A ``prometheus_client`` collector over the simulated nodes, read afresh each scrape."""

    def __init__(
        self,
        *,
        spec_dir: Path,
        state_dir: Path,
        period_s: float = DEFAULT_PERIOD_S,
        clock: Callable[[], float] = time.time,
        catalogue: Catalogue | None = None,
    ) -> None:
        self.spec_dir = Path(spec_dir)
        self.state_dir = Path(state_dir)
        self.period_s = period_s
        self.clock = clock
        self.catalogue = catalogue if catalogue is not None else load_catalogue()

    def readings(self) -> list[Reading]:
        plan = read_plan(self.spec_dir)
        load_plan = demo_load.read_load_plan(self.spec_dir / DEMO_LOAD_PLAN_FILE)
        now = self.clock()
        out = []
        for node in plan.nodes:
            path = self.state_dir / node / STATE_FILE
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # its agent has not started yet
            for device in node_devices(node, state, self.catalogue):
                planned = planned_reading(device, load_plan, now) if load_plan else None
                out.append(
                    planned
                    if planned is not None
                    else simulated_reading(device, plan.namespaces, now, self.period_s)
                )
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        util = GaugeMetricFamily(
            "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=DCGM_LABELS
        )
        engine = GaugeMetricFamily(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "Ratio of time the graphics engine is active.",
            labels=DCGM_LABELS,
        )
        memory = GaugeMetricFamily(
            "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=DCGM_LABELS
        )
        requests = GaugeMetricFamily(
            "kube_pod_container_resource_requests",
            "The number of requested request resource by a container.",
            labels=KSM_REQUEST_LABELS,
        )
        phase = GaugeMetricFamily(
            "kube_pod_status_phase", "The pods current phase.", labels=KSM_PHASE_LABELS
        )
        for r in self.readings():
            d = r.device
            gi = "" if d.gi_id is None else str(d.gi_id)
            labels = [
                str(d.gpu), d.uuid, f"nvidia{d.gpu}", d.model, d.node, d.mig_profile, gi,
                "main" if r.pod else "", r.namespace, r.pod,
            ]  # fmt: skip
            if d.mig_profile:  # MIG instances report no DCGM_FI_DEV_GPU_UTIL
                engine.add_metric(labels, r.util_pct / 100)
            else:
                util.add_metric(labels, r.util_pct)
            memory.add_metric(labels, r.memory_used_mib)
            if r.pod:
                uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{r.namespace}/{r.pod}"))
                requests.add_metric(
                    [r.namespace, r.pod, uid, "main", d.node, kube_resource(d), "integer"], 1.0
                )
                for name in PHASES:
                    phase.add_metric(
                        [r.namespace, r.pod, uid, name], 1.0 if name == "Running" else 0.0
                    )
        yield from (util, engine, memory, requests, phase)


def serve(
    *,
    port: int,
    spec_dir: Path,
    state_dir: Path,
    address: str = "127.0.0.1",
    period_s: float = DEFAULT_PERIOD_S,
    clock: Callable[[], float] = time.time,
) -> tuple[Any, int]:
    """Serve the simulated exporter's ``/metrics`` on ``address:port`` (0: a free port) in a
    background thread; returns the server (``shutdown()`` stops it) and its port."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        SimulatedExporter(spec_dir=spec_dir, state_dir=state_dir, period_s=period_s, clock=clock)
    )
    server, _thread = start_http_server(port, addr=address, registry=registry)
    return server, int(server.server_port)
