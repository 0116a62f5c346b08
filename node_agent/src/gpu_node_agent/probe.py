"""Isolation probes (R30) on the node: a compute-bound kernel on the target alone, then the same
beside a saturating neighbour; the portal computes ``(t_together / t_alone - 1) * 100``.

Two probers behind one interface:

- ``CudaProber`` (``--backend nvml``): runs ``probe_kernel.py`` in child processes, each with
  ``CUDA_VISIBLE_DEVICES`` set to one MIG device's UUID (``MIG-...``, read from NVML) or, on a
  GPU without MIG, both to the GPU's UUID (two processes time-slicing one GPU). It uses CuPy
  or PyTorch, whichever the agent's Python can import, and reports ``skipped`` saying so when
  neither can.
- ``SimulatedProber`` (``--backend fake``): no GPU work. MIG instances are isolated, so the
  slowdown is small (0-3 %); two processes on one GPU share its SMs, so it is large (40-100 %).
  The numbers come from an RNG seeded with the node, GPU and probe, and the result says
  ``simulated: true``.

Nothing here imports Django.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpu_node_agent.backend import Backend, BackendError

logger = logging.getLogger("gpu_node_agent.probe")

KERNEL = Path(__file__).with_name("probe_kernel.py")
STATE_RUNNING = "running"
STATE_DONE = "done"
STATE_SKIPPED = "skipped"
STATE_FAILED = "failed"
LIBRARIES = ("cupy", "torch")
NO_LIBRARY_EXIT = 3  # probe_kernel.NO_LIBRARY


class ProbeRequestError(ValueError):
    """A probe in the portal's answer that does not parse."""


@dataclass(frozen=True)
class ProbeRequest:
    id: int
    uuid: str
    mig: bool
    target_gi_id: int | None
    neighbour_gi_id: int | None

    @classmethod
    def from_json(cls, data: Any) -> ProbeRequest:
        if not isinstance(data, dict):
            raise ProbeRequestError(f"a probe must be an object, not {data!r}")
        probe_id, uuid, mig = data.get("id"), data.get("uuid"), data.get("mig")
        if not isinstance(probe_id, int) or not isinstance(uuid, str) or not isinstance(mig, bool):
            raise ProbeRequestError(f"a probe needs id, uuid and mig: {data!r}")
        target, neighbour = data.get("target_gi_id"), data.get("neighbour_gi_id")
        if mig and not (isinstance(target, int) and isinstance(neighbour, int)):
            raise ProbeRequestError(f"a MIG probe needs two GPU instances: {data!r}")
        return cls(probe_id, uuid, mig, target if mig else None, neighbour if mig else None)


@dataclass(frozen=True)
class ProbeOutcome:
    state: str
    message: str = ""
    t_alone_s: float | None = None
    t_together_s: float | None = None
    simulated: bool = False
    library: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "t_alone_s": self.t_alone_s,
            "t_together_s": self.t_together_s,
            "simulated": self.simulated,
            "library": self.library,
            "message": self.message,
        }

    @property
    def slowdown_pct(self) -> float | None:
        if self.t_alone_s is None or self.t_together_s is None:
            return None
        return (self.t_together_s / self.t_alone_s - 1) * 100


class Prober(Protocol):
    def run(self, backend: Backend, request: ProbeRequest) -> ProbeOutcome: ...


def _gpu_index(backend: Backend, uuid: str) -> int | None:
    for gpu in backend.list_gpus():
        if gpu.uuid == uuid:
            return gpu.index
    return None


def _check(backend: Backend, request: ProbeRequest) -> tuple[int, ProbeOutcome | None]:
    """The GPU's index, or a ``failed`` outcome saying what no longer matches."""
    index = _gpu_index(backend, request.uuid)
    if index is None:
        return -1, ProbeOutcome(STATE_FAILED, f"GPU {request.uuid} is not on this node")
    gpu = next(g for g in backend.list_gpus() if g.index == index)
    if gpu.mig_mode_current != request.mig:
        mode = "on" if gpu.mig_mode_current else "off"
        return index, ProbeOutcome(
            STATE_FAILED, f"GPU {request.uuid} has MIG mode {mode} now; ask for a new probe"
        )
    if request.mig:
        have = {i.gi_id for i in backend.list_gpu_instances(index)}
        missing = [gi for gi in (request.target_gi_id, request.neighbour_gi_id) if gi not in have]
        if missing:
            return index, ProbeOutcome(
                STATE_FAILED,
                f"GPU instance {missing[0]} is no longer on GPU {request.uuid}; "
                "ask for a new probe",
            )
    return index, None


class SimulatedProber:
    """The fake backend's probe: no GPU work, deterministic numbers per (seed, GPU, probe)."""

    def __init__(self, seed: str = "fake-node", t_alone_s: float = 2.0) -> None:
        self.seed = seed
        self.t_alone_s = t_alone_s

    def run(self, backend: Backend, request: ProbeRequest) -> ProbeOutcome:
        _, failed = _check(backend, request)
        if failed is not None:
            return failed
        rng = random.Random(f"{self.seed}:{request.uuid}:{request.id}")  # noqa: S311 - simulation
        alone = round(self.t_alone_s * rng.uniform(0.97, 1.03), 4)
        slowdown = rng.uniform(0.0, 3.0) if request.mig else rng.uniform(40.0, 100.0)
        together = round(alone * (1 + slowdown / 100), 4)
        what = (
            f"GPU instances {request.target_gi_id} (probed) and {request.neighbour_gi_id} "
            "(saturating neighbour)"
            if request.mig
            else "two processes time-slicing the whole GPU"
        )
        return ProbeOutcome(
            STATE_DONE,
            f"simulated: {what}; no GPU work was done",
            alone,
            together,
            simulated=True,
            library="simulated",
        )


class CudaProber:
    """Real GPUs: ``probe_kernel.py`` in child processes pinned by ``CUDA_VISIBLE_DEVICES``."""

    def __init__(
        self,
        *,
        python: str = sys.executable,
        seconds: float = 2.0,
        timeout: float = 180.0,
        library: str | None = None,
    ) -> None:
        self.python = python
        self.seconds = seconds
        self.timeout = timeout
        self.library = library

    def available_library(self) -> str | None:
        """The first of CuPy and PyTorch the agent's Python can import (not imported here)."""
        if self.library is not None:
            return self.library or None
        for name in LIBRARIES:
            if importlib.util.find_spec(name) is not None:
                return name
        return None

    def _devices(self, backend: Backend, index: int, request: ProbeRequest) -> tuple[str, str]:
        if not request.mig:
            return request.uuid, request.uuid
        lookup = getattr(backend, "mig_device_uuids", None)
        if lookup is None:
            raise BackendError("not-supported", "this backend cannot name MIG devices")
        uuids: dict[int, str] = lookup(index)
        for gi in (request.target_gi_id, request.neighbour_gi_id):
            if gi not in uuids:
                raise BackendError(
                    "not-found",
                    f"GPU instance {gi} of GPU {request.uuid} has no compute instance "
                    "(no MIG device to run on)",
                )
        assert request.target_gi_id is not None and request.neighbour_gi_id is not None
        return uuids[request.target_gi_id], uuids[request.neighbour_gi_id]

    def _command(self, library: str, role: str, *extra: str) -> list[str]:
        return [self.python, str(KERNEL), "--role", role, "--library", library, *extra]

    def _env(self, device: str) -> dict[str, str]:
        return {**os.environ, "CUDA_VISIBLE_DEVICES": device}

    def _target(self, library: str, device: str, iterations: int) -> dict[str, Any]:
        extra = ["--seconds", str(self.seconds)]
        if iterations:
            extra += ["--iterations", str(iterations)]
        done = subprocess.run(  # noqa: S603 - our own script, no shell
            self._command(library, "target", *extra),
            env=self._env(device),
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"the probe kernel exited {done.returncode}: {done.stderr.strip()[-500:]}"
            )
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    def _neighbour(self, library: str, device: str) -> subprocess.Popen[str]:
        neighbour = subprocess.Popen(  # noqa: S603 - our own script, no shell
            self._command(library, "neighbour", "--seconds", str(self.timeout)),
            env=self._env(device),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert neighbour.stdout is not None
        line = neighbour.stdout.readline().strip()  # "ready" once warm; "" when it died
        if line != "ready":
            neighbour.kill()
            _, error = neighbour.communicate(timeout=10)
            raise RuntimeError(f"the saturating neighbour did not start: {error.strip()[-500:]}")
        return neighbour

    def run(self, backend: Backend, request: ProbeRequest) -> ProbeOutcome:
        index, failed = _check(backend, request)
        if failed is not None:
            return failed
        library = self.available_library()
        if library is None:
            return ProbeOutcome(
                STATE_SKIPPED,
                f"neither CuPy nor PyTorch can be imported by {self.python}; install one "
                "(e.g. pip install cupy-cuda12x) on the node to run isolation probes",
            )
        try:
            target, neighbour_device = self._devices(backend, index, request)
            alone = self._target(library, target, 0)
            neighbour = self._neighbour(library, neighbour_device)
            try:
                together = self._target(library, target, int(alone["iterations"]))
            finally:
                neighbour.kill()
                neighbour.communicate(timeout=30)
        except (BackendError, RuntimeError, OSError, ValueError, KeyError) as error:
            return ProbeOutcome(STATE_FAILED, f"probe failed: {error}", library=library)
        except subprocess.TimeoutExpired:
            return ProbeOutcome(
                STATE_FAILED, f"the probe kernel ran past {self.timeout:g} s", library=library
            )
        where = (
            f"MIG devices {target} (probed) and {neighbour_device} (neighbour)"
            if request.mig
            else f"two processes on {target}"
        )
        return ProbeOutcome(
            STATE_DONE,
            f"{alone['iterations']} products of {library} on {where}",
            round(float(alone["seconds"]), 4),
            round(float(together["seconds"]), 4),
            simulated=False,
            library=library,
        )
