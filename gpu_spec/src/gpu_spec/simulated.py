"""The simulated GPUs of the demo and the tests, as both sides spell them.

The node agent's ``fake`` backend simulates the GPUs of a ``--fake-gpus`` value and the portal's
demo command creates the matching nodes and cluster Nodes from the same value, so its grammar
lives here, free of both: entries ``NAME[:COUNT[:nomig|mig[:LAYOUT]]]`` separated by commas;
GPUs start with MIG mode on unless ``nomig``, and with no GPU instance unless a ``LAYOUT`` names
the instances they start with: profiles separated by ``/``, ``4x`` for four of one
(``3g.40gb/4x1g.10gb``), checked against the catalogue's rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpu_spec.mig.catalogue import Catalogue, GpuModel, load_catalogue
from gpu_spec.mig.layout import InstanceRequest, validate_layout

# The demo exporter's plan (which nodes and namespaces it simulates), written by the portal's
# demo command into the agents' directory beside the nodes' specs.
DEMO_METRICS_PLAN_FILE = "prometheus.json"

LAYOUT_SEPARATOR = "/"
_REPEAT = re.compile(r"(\d{1,2})x(.+)\Z")

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


@dataclass(frozen=True)
class SimGpuSpec:
    """A GPU to simulate: a catalogue model name (MIG-capable) or any other name (not)."""

    name: str
    mig: bool = True
    memory_mib: int | None = None  # default: from the catalogue's whole-GPU profile
    instances: tuple[str, ...] = ()  # MIG profiles the GPU starts with (``fake`` places them)


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
