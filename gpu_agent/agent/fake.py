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
import re
from dataclasses import dataclass
from pathlib import Path

from gpu_agent.agent.nvml import NvmlBackend
from gpu_agent.agent.simnvml import SimGpuSpec, SimulatedNvml
from gpu_agent.mig.catalogue import Catalogue, GpuModel, load_catalogue
from gpu_agent.mig.layout import InstanceRequest, validate_layout

logger = logging.getLogger("gpu_agent.fake")

LAYOUT_SEPARATOR = "/"
_REPEAT = re.compile(r"(\d{1,2})x(.+)\Z")

STATE_FILE = "fake-nvml.json"


# GPUs without MIG that the fake backend simulates outside the MIG catalogue (time-sliced
# shares run on them), with the memory NVML reports for each.
NON_MIG_MODELS: dict[str, int] = {
    "Tesla T4": 15360,
    "NVIDIA L4": 23034,
    "NVIDIA L40S": 46068,
    "NVIDIA A10": 23028,
    "Tesla V100-SXM2-32GB": 32768,
}


class FakeSpecError(ValueError):
    """A ``--fake-gpus`` value that does not parse."""


def parse_fake_gpus(spec: str, *, catalogue: Catalogue | None = None) -> list[SimGpuSpec]:
    """``"NVIDIA A100-SXM4-80GB:2,NVIDIA H100 80GB HBM3"`` -> one ``SimGpuSpec`` per GPU."""
    catalogue = catalogue if catalogue is not None else load_catalogue()
    gpus: list[SimGpuSpec] = []
    for entry in (part.strip() for part in spec.split(",")):
        if not entry:
            continue
        fields = [field.strip() for field in entry.split(":")]
        name, count, mig = fields[0], 1, True
        if len(fields) > 4:
            raise FakeSpecError(f"{entry!r}: expected NAME[:COUNT[:nomig|mig[:LAYOUT]]]")
        if len(fields) >= 2 and fields[1]:
            digits = fields[1].isascii() and fields[1].isdigit() and len(fields[1]) <= 3
            if not digits or not 1 <= int(fields[1]) <= 64:
                raise FakeSpecError(f"{entry!r}: the count must be a number from 1 to 64")
            count = int(fields[1])
        if len(fields) >= 3:
            if fields[2] not in ("mig", "nomig"):
                raise FakeSpecError(f"{entry!r}: the third field is 'mig' or 'nomig'")
            mig = fields[2] == "mig"
        model = catalogue.find_model(name)
        if model is None:
            gpus.extend([_non_mig_gpu(entry, name, mig, len(fields), catalogue)] * count)
            continue
        layout: tuple[str, ...] = ()
        if len(fields) == 4:
            if not mig:
                raise FakeSpecError(f"{entry!r}: only a GPU in MIG mode ('mig') takes a layout")
            layout = _parse_layout(entry, fields[3], model)
        gpus.extend(SimGpuSpec(model.name, mig=mig, instances=layout) for _ in range(count))
    if not gpus:
        raise FakeSpecError("--fake-gpus names no GPU")
    return gpus


def _non_mig_gpu(entry: str, name: str, mig: bool, fields: int, catalogue: Catalogue) -> SimGpuSpec:
    """A GPU outside the MIG catalogue: one of ``NON_MIG_MODELS``, written with ``nomig``."""
    if name not in NON_MIG_MODELS:
        raise FakeSpecError(
            f"{name!r} is not a GPU the fake backend knows; MIG GPUs: "
            + ", ".join(catalogue.model_names())
            + "; GPUs without MIG (written NAME:COUNT:nomig): "
            + ", ".join(NON_MIG_MODELS)
        )
    if mig or fields < 3:
        raise FakeSpecError(f"{entry!r}: {name} has no MIG mode; write it {name}:COUNT:nomig")
    return SimGpuSpec(name, mig=False, memory_mib=NON_MIG_MODELS[name])


def _parse_layout(entry: str, text: str, model: GpuModel) -> tuple[str, ...]:
    """``3g.40gb/4x1g.10gb`` -> the profiles, checked against ``model``'s MIG rules."""
    profiles: list[str] = []
    for part in (p.strip() for p in text.split(LAYOUT_SEPARATOR)):
        repeat = _REPEAT.match(part)
        times, profile = (int(repeat[1]), repeat[2]) if repeat else (1, part)
        profiles.extend([profile] * times)
    checked = validate_layout(model, [InstanceRequest(p) for p in profiles])
    if not checked.ok:
        raise FakeSpecError(f"{entry!r}: not a layout of {model.name}: {'; '.join(checked.errors)}")
    return tuple(profiles)


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
