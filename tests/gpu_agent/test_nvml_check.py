"""The read-only real-GPU check (bench/nvml_check.py), run here against the simulated NVML:
a GPU the catalogue describes shows no difference, and a driver that names a profile its own
way, or offers one the catalogue lacks, is reported."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from gpu_node_agent.nvml import NvmlBackend
from gpu_node_agent.testing.simnvml import SimulatedNvml

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def nvml_check() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "nvml_check.py"
    spec = importlib.util.spec_from_file_location("nvml_check", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_gpu_as_the_catalogue_describes_it_shows_no_difference():
    report = nvml_check().check(NvmlBackend(SimulatedNvml([A100, H100, (A100, False)])))

    assert report["differences"] == []
    a100 = report["gpus"][0]
    by_name = {p["name"]: p for p in a100["profiles"]}
    assert by_name["3g.40gb"]["placements"] == [0, 4]
    assert by_name["1g.10gb"]["placements"] == list(range(7))
    assert "MIG mode is off" in report["gpus"][2]["note"]  # and its mode was left alone


def test_a_driver_that_names_a_profile_its_own_way_is_reported():
    sim = SimulatedNvml([A100], profile_names={"7g.80gb": "7g.79gb"})

    report = nvml_check().check(NvmlBackend(sim))

    assert report["differences"] == [f"GPU 0 ({A100}): NVML names 7g.80gb '7g.79gb' on this driver"]
