"""The ``fake`` backend: ``NvmlBackend`` over a ``SimulatedNvml`` node, kept in a JSON file.

``--fake-gpus "NVIDIA A100-SXM4-80GB:2,NVIDIA H100 80GB HBM3:2"`` simulates two A100s and two
H100s (names as the catalogue and ``nvmlDeviceGetName`` spell them). Each entry is
``NAME[:COUNT[:nomig]]``; GPUs start with MIG mode on unless ``nomig``. The simulated node is
saved after every change, so an agent restart finds the layout it left. The GPU UUIDs derive
from the node name, so fake nodes on one portal do not collide.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gpu_agent.agent.nvml import NvmlBackend
from gpu_agent.agent.simnvml import SimGpuSpec, SimulatedNvml
from gpu_agent.mig.catalogue import Catalogue, load_catalogue

logger = logging.getLogger("gpu_agent.fake")

STATE_FILE = "fake-nvml.json"


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
        if len(fields) > 3:
            raise FakeSpecError(f"{entry!r}: expected NAME[:COUNT[:nomig]]")
        if len(fields) >= 2 and fields[1]:
            digits = fields[1].isascii() and fields[1].isdigit() and len(fields[1]) <= 3
            if not digits or not 1 <= int(fields[1]) <= 64:
                raise FakeSpecError(f"{entry!r}: the count must be a number from 1 to 64")
            count = int(fields[1])
        if len(fields) == 3:
            if fields[2] not in ("mig", "nomig"):
                raise FakeSpecError(f"{entry!r}: the third field is 'mig' or 'nomig'")
            mig = fields[2] == "mig"
        model = catalogue.find_model(name)
        if model is None:
            raise FakeSpecError(
                f"{name!r} is not a GPU model in the MIG catalogue; known: "
                + ", ".join(catalogue.model_names())
            )
        gpus.extend(SimGpuSpec(model.name, mig=mig) for _ in range(count))
    if not gpus:
        raise FakeSpecError("--fake-gpus names no GPU")
    return gpus


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
        simulated.save()
    return FakeNode(simulated, NvmlBackend(simulated, catalogue=catalogue))
