"""The ``fake`` backend: ``NvmlBackend`` over a ``SimulatedNvml`` node, kept in a JSON file.

``--fake-gpus "NVIDIA A100-SXM4-80GB:2,NVIDIA H100 80GB HBM3:2"`` simulates two A100s and two
H100s (names as the catalogue and ``nvmlDeviceGetName`` spell them). Each entry is
``NAME[:COUNT[:nomig|mig[:LAYOUT]]]``; GPUs start with MIG mode on unless ``nomig``, and with
no GPU instance unless a ``LAYOUT`` names the instances they start with: profiles separated by
``/``, ``4x`` for four of one (``3g.40gb/4x1g.10gb``), placed by the catalogue's rules, each
with one compute instance (as ``nvidia-smi mig -cgi ... -C`` makes them). The simulated node is
saved after every change, so an agent restart finds the layout it left. The GPU UUIDs derive
from the node name, so fake nodes on one portal do not collide.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gpu_node_agent.nvml import NvmlBackend
from gpu_node_agent.testing.simnvml import SimGpuSpec, SimulatedNvml
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


def _same_gpus(simulated: SimulatedNvml, specs: list[SimGpuSpec]) -> bool:
    saved = simulated.to_dict()["gpus"]
    return [g["name"] for g in saved] == [s.name for s in specs]


def build_fake_node(
    spec: str,
    *,
    state_path: Path | str | None,
    seed: str = "fake-node",
    catalogue: Catalogue | None = None,
) -> FakeNode:
    """The fake node for ``spec``, resumed from ``state_path`` when it holds the same GPUs."""
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
