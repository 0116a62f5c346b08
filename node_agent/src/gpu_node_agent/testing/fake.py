"""The ``fake`` backend: ``NvmlBackend`` over a ``SimulatedNvml`` node, kept in a JSON file.

``--fake-gpus "NVIDIA A100-SXM4-80GB:2,NVIDIA H100 80GB HBM3:2"`` simulates two A100s and two
H100s (names as the catalogue and ``nvmlDeviceGetName`` spell them). Each entry is
``NAME[:COUNT[:nomig|mig[:LAYOUT]]]``; GPUs start with MIG mode on unless ``nomig``, and with
no GPU instance unless a ``LAYOUT`` names the instances they start with: profiles separated by
``/``, ``4x`` for four of one (``3g.40gb/4x1g.10gb``), placed by the catalogue's rules, each
with one compute instance (as ``nvidia-smi mig -cgi ... -C`` makes them). The simulated node is
saved after every change, so an agent restart finds the layout it left. The GPU UUIDs derive
from the node name, so fake nodes on one portal do not collide.

With a load plan (``--fake-load``: the file the portal's demo command writes, read by
``gpu_spec.demo_load``), the whole GPUs carry the utilisation and framebuffer memory the plan
gives them at each reading: the tenants the demo's usage history and simulated Kueue call busy
hold busy GPUs. The file is read again when it changes; without it (or for a node it leaves
out) the GPUs are idle, as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpu_node_agent.nvml import NvmlBackend
from gpu_node_agent.testing.simnvml import SimGpuSpec, SimulatedNvml
from gpu_spec import demo_load
from gpu_spec.mig.catalogue import Catalogue, load_catalogue
from gpu_spec.mig.layout import InstanceRequest, validate_layout
from gpu_spec.simulated import parse_fake_gpus

logger = logging.getLogger("gpu_node_agent.fake")

STATE_FILE = "fake-nvml.json"


def _create_instances(node: FakeNode, specs: list[SimGpuSpec], catalogue: Catalogue) -> None:
    """The instances the spec's layouts name, on a fresh node (placed by the catalogue)."""
    for index, spec in enumerate(specs):
        model = catalogue.find_model(spec.name)
        if not spec.instances or model is None:
            continue
        placed = validate_layout(model, [InstanceRequest(p) for p in spec.instances])
        for placement in placed.placements:
            instance = node.backend.create_gpu_instance(index, placement.profile, placement.start)
            node.backend.create_compute_instance(index, instance.gi_id)


@dataclass
class FakeNode:
    """The simulated node and the backend over it (the simulator stays reachable for tests and
    for the pod lookup of simulated processes)."""

    nvml: SimulatedNvml
    backend: NvmlBackend

    def pod_uid_for_pid(self, pid: int) -> str | None:
        return self.nvml.pod_uid_for_pid(pid)


class PlannedLoad:
    """The load of ``node``'s whole GPUs by the demo's plan at ``path`` (a ``load_source`` of
    ``SimulatedNvml``), the file read again when it changes."""

    def __init__(
        self, path: Path | str, node: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = Path(path)
        self.node = node
        self.clock = clock
        self._stamp: tuple[int, int] | None = None
        self._plan: demo_load.LoadPlan | None = None

    def plan(self) -> demo_load.LoadPlan | None:
        try:
            stat = self.path.stat()
        except OSError:
            self._stamp, self._plan = None, None
            return None
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._stamp, self._plan = stamp, demo_load.read_load_plan(self.path)
            if self._plan is None:
                logger.warning("ignoring unreadable load plan %s", self.path)
        return self._plan

    def __call__(self, index: int, memory_total_mib: int) -> tuple[int, int] | None:
        plan = self.plan()
        if plan is None:
            return None
        now = datetime.fromtimestamp(self.clock(), tz=UTC)
        load = demo_load.gpu_load(plan, self.node, index, now)
        if load is None:
            return None
        return load.utilization_pct, int(memory_total_mib * load.memory_fraction)


def _same_gpus(simulated: SimulatedNvml, specs: list[SimGpuSpec]) -> bool:
    saved = simulated.to_dict()["gpus"]
    return [g["name"] for g in saved] == [s.name for s in specs]


def build_fake_node(
    spec: str,
    *,
    state_path: Path | str | None,
    seed: str = "fake-node",
    catalogue: Catalogue | None = None,
    load_plan: Path | str | None = None,
    clock: Callable[[], float] = time.time,
) -> FakeNode:
    """The fake node for ``spec``, resumed from ``state_path`` when it holds the same GPUs;
    with ``load_plan``, its whole GPUs carry the demo plan's load for the node named ``seed``
    (the agent's node name)."""
    node = _build_fake_node(spec, state_path=state_path, seed=seed, catalogue=catalogue)
    if load_plan is not None:
        node.nvml.load_source = PlannedLoad(load_plan, seed, clock=clock)
    return node


def _build_fake_node(
    spec: str,
    *,
    state_path: Path | str | None,
    seed: str,
    catalogue: Catalogue | None,
) -> FakeNode:
    catalogue = catalogue if catalogue is not None else load_catalogue()
    specs = parse_fake_gpus(spec, catalogue=catalogue)
    path = Path(state_path) if state_path is not None else None
    simulated: SimulatedNvml | None = None
    if path is not None and path.exists():
        try:
            simulated = SimulatedNvml.load(path, catalogue=catalogue)
        except (OSError, ValueError, KeyError, TypeError) as error:
            logger.warning("ignoring unreadable fake state %s: %s", path, error)
            simulated = None
        if simulated is not None and not _same_gpus(simulated, specs):
            logger.warning("%s holds other GPUs than --fake-gpus; starting afresh", path)
            simulated = None
    if simulated is None:
        simulated = SimulatedNvml(specs, catalogue=catalogue, seed=seed, state_path=path)
        node = FakeNode(simulated, NvmlBackend(simulated, catalogue=catalogue))
        _create_instances(node, specs, catalogue)
        simulated.save()
        return node
    return FakeNode(simulated, NvmlBackend(simulated, catalogue=catalogue))
