"""Isolation probes (R30) on the node: a compute-bound kernel on the target alone, then the same
beside a saturating neighbour; the portal computes ``(t_together / t_alone - 1) * 100``.

Two probers behind one interface:

- ``CudaProber`` (``--backend nvml``): runs ``probe_kernel.py`` in child processes, each with
  ``CUDA_VISIBLE_DEVICES`` set to one MIG device's UUID (``MIG-...``, read from NVML) or, on a
  GPU without MIG, both to the GPU's UUID (two processes time-slicing one GPU). It uses CuPy
  or PyTorch, whichever the agent's Python can import, and reports ``skipped`` saying so when
  neither can.
- ``SimulatedProber`` (``--backend fake``): no GPU work. MIG instances are isolated, so the
  slowdown is small (0-3 %); two processes on one GPU share its SMs, so it is large (40-100 %);
  on a GPU shared as vGPUs through HAMi (the probe carries the two tenants' ``vgpu`` limits)
  HAMi-core holds the saturating neighbour to its compute share, so the probed process keeps
  its own share where the two fit in the GPU (``vgpu_slowdown``).
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
# Where HAMi's device plugin puts HAMi-core on the node (mounted into vGPU containers).
HAMI_CORE = "/usr/local/vgpu/libvgpu.so"


class ProbeRequestError(ValueError):
    """A probe in the portal's answer that does not parse."""


@dataclass(frozen=True)
class VgpuLimits:
    """HAMi's limits on a GPU shared as vGPUs, per side of the probe: compute in percent of
    the GPU (HAMi-core's SM limit, ``nvidia.com/gpucores``) and GPU memory in MiB
    (``nvidia.com/gpumem``); None where the share sets none."""

    target_cores_pct: int | None = None
    target_memory_mib: int | None = None
    neighbour_cores_pct: int | None = None
    neighbour_memory_mib: int | None = None

    @classmethod
    def from_json(cls, data: Any) -> VgpuLimits | None:
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ProbeRequestError(f"vgpu must be an object: {data!r}")
        values: dict[str, int | None] = {}
        for name, top in (
            ("target_cores_pct", 100),
            ("neighbour_cores_pct", 100),
            ("target_memory_mib", 2**31 - 1),
            ("neighbour_memory_mib", 2**31 - 1),
        ):
            value = data.get(name)
            ok = value is None or (
                isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= top
            )
            if not ok:
                raise ProbeRequestError(f"vgpu.{name} must be a whole number from 1 to {top}")
            values[name] = value
        return cls(**values)


@dataclass(frozen=True)
class ProbeRequest:
    id: int
    uuid: str
    mig: bool
    target_gi_id: int | None
    neighbour_gi_id: int | None
    vgpu: VgpuLimits | None = None

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
        vgpu = None if mig else VgpuLimits.from_json(data.get("vgpu"))
        return cls(probe_id, uuid, mig, target if mig else None, neighbour if mig else None, vgpu)


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


# What is left of the slowdown when HAMi-core holds the neighbour to its compute share:
# the two still share the memory bandwidth, caches and HAMi-core's time-based SM limiter,
# which lets a kernel run over its share for a moment before throttling it (a few percent).
VGPU_RESIDUAL_PCT = (0.5, 4.0)


def vgpu_slowdown(limits: VgpuLimits, rng: random.Random) -> tuple[float, str]:
    """The simulated slowdown (percent) of the probed process beside a saturating neighbour,
    both held by HAMi to their shares, and what was simulated. The probed one runs at its own
    compute share alone (HAMi caps it there too); beside the neighbour it keeps that share
    while the two shares fit in the GPU (the residual contention only), and gets what the
    neighbour's share leaves where they do not: slowdown = target / (100 - neighbour) - 1."""
    target = limits.target_cores_pct or 100
    neighbour = limits.neighbour_cores_pct or 100
    left = max(100 - neighbour, 1)
    squeezed = max(target / left - 1, 0.0) * 100
    slowdown = squeezed + rng.uniform(*VGPU_RESIDUAL_PCT)
    memory = (
        f", GPU memory {limits.neighbour_memory_mib} MiB"
        if limits.neighbour_memory_mib is not None
        else ""
    )
    what = (
        f"two processes on the GPU under HAMi's limits: the saturating neighbour held to "
        f"{neighbour}% of its compute{memory}, the probed one to {target}%"
    )
    return slowdown, what


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
        if request.vgpu is not None:
            slowdown, what = vgpu_slowdown(request.vgpu, rng)
        else:
            slowdown = rng.uniform(0.0, 3.0) if request.mig else rng.uniform(40.0, 100.0)
            what = (
                f"GPU instances {request.target_gi_id} (probed) and {request.neighbour_gi_id} "
                "(saturating neighbour)"
                if request.mig
                else "two processes time-slicing the whole GPU"
            )
        together = round(alone * (1 + slowdown / 100), 4)
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
        hami_core: Path | str = HAMI_CORE,
    ) -> None:
        self.hami_core = Path(hami_core)
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

    def _env(self, device: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "CUDA_VISIBLE_DEVICES": device, **(extra or {})}

    def hami_env(self, cores_pct: int | None, memory_mib: int | None) -> dict[str, str]:
        """HAMi-core's limits for one process (its ``libvgpu.so`` preloaded, as HAMi's device
        plugin does in a vGPU container): ``CUDA_DEVICE_SM_LIMIT`` (percent) and
        ``CUDA_DEVICE_MEMORY_LIMIT`` (``<MiB>m``); {} where the node has no HAMi-core."""
        if not self.hami_core.is_file():
            return {}
        env = {"LD_PRELOAD": str(self.hami_core)}
        if cores_pct is not None:
            env["CUDA_DEVICE_SM_LIMIT"] = str(cores_pct)
        if memory_mib is not None:
            env["CUDA_DEVICE_MEMORY_LIMIT"] = f"{memory_mib}m"
        return env

    def _target(
        self, library: str, device: str, iterations: int, extra_env: dict[str, str] | None = None
    ) -> dict[str, Any]:
        extra = ["--seconds", str(self.seconds)]
        if iterations:
            extra += ["--iterations", str(iterations)]
        done = subprocess.run(  # noqa: S603 - our own script, no shell
            self._command(library, "target", *extra),
            env=self._env(device, extra_env),
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

    def _neighbour(
        self, library: str, device: str, extra_env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        neighbour = subprocess.Popen(  # noqa: S603 - our own script, no shell
            self._command(library, "neighbour", "--seconds", str(self.timeout)),
            env=self._env(device, extra_env),
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
        limits = request.vgpu
        target_env = neighbour_env = {}
        if limits is not None:
            target_env = self.hami_env(limits.target_cores_pct, limits.target_memory_mib)
            neighbour_env = self.hami_env(limits.neighbour_cores_pct, limits.neighbour_memory_mib)
        try:
            target, neighbour_device = self._devices(backend, index, request)
            alone = self._target(library, target, 0, target_env)
            neighbour = self._neighbour(library, neighbour_device, neighbour_env)
            try:
                together = self._target(library, target, int(alone["iterations"]), target_env)
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
        if limits is not None:
            where += (
                f" under HAMi-core's limits (neighbour {limits.neighbour_cores_pct or 100}%, "
                f"probed {limits.target_cores_pct or 100}% of the GPU)"
                if target_env
                else f" without HAMi's limits ({self.hami_core} is not on this node)"
            )
        return ProbeOutcome(
            STATE_DONE,
            f"{alone['iterations']} products of {library} on {where}",
            round(float(alone["seconds"]), 4),
            round(float(together["seconds"]), 4),
            simulated=False,
            library=library,
        )
