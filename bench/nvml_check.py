"""Compare what the real NVML reports with the MIG catalogue. READ-ONLY.

    .venv/bin/python bench/nvml_check.py [--json PATH]

Run it once on a machine with an NVIDIA GPU: it lists the devices (name, UUID, memory, MIG
mode current and pending), and, on GPUs in MIG mode, every GPU-instance profile NVML offers with
its id, memory, slices, count and possible placements, and prints every difference from
``gpu_spec.mig.catalogue`` (a profile the catalogue lacks or has with other numbers, a model
it does not know). It never changes the MIG mode, never creates or destroys an instance and
never resets a GPU: it calls only NVML's query functions, through the agent's own NVML backend
(so the check also exercises that code against the real driver). Exit status 0 when it ran
(differences are findings, not failures), 2 when NVML is not available here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_node_agent.backend import BackendError  # after the path fix above
from gpu_node_agent.nvml import NvmlBackend, load_pynvml
from gpu_spec.mig.catalogue import load_catalogue


def check(backend: NvmlBackend) -> dict[str, Any]:
    catalogue = load_catalogue()
    report: dict[str, Any] = {"driver": backend.driver_version(), "gpus": [], "differences": []}
    differences: list[str] = report["differences"]
    for gpu in backend.list_gpus():
        entry: dict[str, Any] = {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "name": gpu.name,
            "memory_total_mib": gpu.memory_total_mib,
            "mig_capable": gpu.mig_capable,
            "mig_mode_current": gpu.mig_mode_current,
            "mig_mode_pending": gpu.mig_mode_pending,
            "profiles": [],
        }
        report["gpus"].append(entry)
        model = catalogue.find_model(gpu.name)
        where = f"GPU {gpu.index} ({gpu.name})"
        if model is None:
            if gpu.mig_capable:
                differences.append(f"{where}: not in the catalogue")
            continue
        if not gpu.mig_mode_current:
            entry["note"] = "MIG mode is off: profiles are not listed (the mode is not changed)"
            continue
        seen = set()
        for profile in backend.list_profiles(gpu.index):
            placements = [p.start for p in backend.possible_placements(gpu.index, profile.name)]
            entry["profiles"].append(
                {
                    "name": profile.name,
                    "nvml_name": profile.nvml_name,
                    "const": profile.nvml_profile_const,
                    "id": profile.profile_id,
                    "memory_mib": profile.memory_mib,
                    "compute_slices": profile.compute_slices,
                    "max_count": profile.max_count,
                    "placements": placements,
                }
            )
            known = model.profiles.get(profile.name)
            if known is None:
                differences.append(f"{where}: NVML offers {profile.nvml_name}, the catalogue not")
                continue
            seen.add(profile.name)
            for label, real, ours in (
                ("profile id", profile.profile_id, known.nvidia_smi_profile_id),
                ("compute slices", profile.compute_slices, known.compute_slices),
                ("max count", profile.max_count, known.max_count),
                ("placements", tuple(placements), tuple(known.placements)),
                ("memory MiB", profile.memory_mib, known.memory_mib),
            ):
                if ours is not None and real != ours:
                    differences.append(
                        f"{where} {profile.name}: {label} is {real} here, {ours} in the catalogue"
                    )
            if profile.nvml_name != profile.name:
                differences.append(
                    f"{where}: NVML names {profile.name} {profile.nvml_name!r} on this driver"
                )
        for name in sorted(set(model.profiles) - seen):
            differences.append(f"{where}: the catalogue has {name}, NVML does not offer it")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    try:
        backend = NvmlBackend(load_pynvml())
    except BackendError as exc:
        print(f"NVML is not available here: {exc}")
        return 2
    try:
        report = check(backend)
    finally:
        backend.close()
    print(f"driver {report['driver']}")
    for gpu in report["gpus"]:
        mode = f"MIG {'on' if gpu['mig_mode_current'] else 'off'}"
        if gpu["mig_mode_pending"] != gpu["mig_mode_current"]:
            mode += f" (pending {'on' if gpu['mig_mode_pending'] else 'off'})"
        print(
            f"GPU {gpu['index']} {gpu['name']} {gpu['uuid']} {gpu['memory_total_mib']} MiB {mode}"
        )
        for p in gpu["profiles"]:
            print(
                f"  {p['name']:<12} id {p['id']:>2}  {p['compute_slices']} slices  "
                f"x{p['max_count']}  {p['memory_mib']} MiB  placements {p['placements']}"
            )
        if "note" in gpu:
            print(f"  {gpu['note']}")
    print(f"{len(report['differences'])} difference(s) from the catalogue")
    for line in report["differences"]:
        print(f"  - {line}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
