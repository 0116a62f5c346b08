"""The boundary between the agent and the GPUs: one protocol, two implementations.

``NvmlBackend`` (``gpu_node_agent.nvml``) talks to NVML through a pynvml-compatible module: the
real ``pynvml`` from nvidia-ml-py on a GPU node, or ``SimulatedNvml`` (``gpu_node_agent.testing.simnvml``)
in tests and in the ``fake`` backend. Everything above this protocol (apply, runner) sees only the
dataclasses below: profile names are catalogue names, placements count memory slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class BackendError(Exception):
    """An NVML call failed. ``code`` is one of the ``ERROR_*`` names below, ``message`` says what
    was attempted and what NVML answered, in words an operator can act on."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


ERROR_INSUFFICIENT_RESOURCES = "insufficient-resources"
ERROR_INVALID_ARGUMENT = "invalid-argument"
ERROR_IN_USE = "in-use"
ERROR_NOT_SUPPORTED = "not-supported"
ERROR_NO_PERMISSION = "no-permission"
ERROR_NOT_FOUND = "not-found"
ERROR_UNKNOWN_PROFILE = "unknown-profile"
ERROR_OTHER = "nvml-error"


@dataclass(frozen=True)
class Process:
    """A compute process on a GPU. ``gi_id`` / ``ci_id`` are None on a GPU without MIG."""

    pid: int
    used_memory_mib: int | None
    gi_id: int | None = None
    ci_id: int | None = None
    # Its SM use, percent of the GPU (NVML's process utilisation samples); None in MIG mode or
    # where NVML has no sample for it.
    sm_util_pct: int | None = None


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: int | None  # None in MIG mode: NVML does not report it there
    mig_capable: bool
    mig_mode_current: bool
    mig_mode_pending: bool


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile as NVML reports it on this GPU, named after the catalogue."""

    name: str  # the catalogue name ("3g.40gb"), or NVML's own when the catalogue lacks it
    nvml_name: str  # what NVML calls it on this driver ("3g.40gb", "7g.79gb", ...)
    nvml_profile_const: int  # NVML_GPU_INSTANCE_PROFILE_*
    profile_id: int  # GpuInstanceProfileInfo.id: what create / list / placements take
    compute_slices: int  # sliceCount
    max_count: int  # instanceCount
    memory_mib: int  # memorySizeMB
    in_catalogue: bool


@dataclass(frozen=True)
class Placement:
    """Memory slices ``[start, start + size)``."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class GpuInstance:
    gi_id: int
    profile: str  # catalogue name (MigProfile.name)
    profile_id: int
    start: int
    size: int
    ci_ids: tuple[int, ...] = ()
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    processes: tuple[Process, ...] = field(default=())

    @property
    def placement(self) -> Placement:
        return Placement(self.start, self.size)


class Backend(Protocol):
    """What the agent needs from a GPU node. GPUs are addressed by NVML index."""

    def driver_version(self) -> str: ...

    def list_gpus(self) -> list[Gpu]: ...

    def list_profiles(self, gpu_index: int) -> list[MigProfile]:
        """The GPU-instance profiles the driver offers (empty when MIG is off)."""
        ...

    def possible_placements(self, gpu_index: int, profile: str) -> list[Placement]:
        """Every placement the profile allows on an empty GPU. Like NVML, it ignores the
        instances that already exist: use ``free_placements`` for what can be created now."""
        ...

    def free_placements(self, gpu_index: int, profile: str) -> list[Placement]: ...

    def list_gpu_instances(self, gpu_index: int) -> list[GpuInstance]:
        """The GPU instances with their compute instances, memory and processes."""
        ...

    def create_gpu_instance(self, gpu_index: int, profile: str, start: int) -> GpuInstance: ...

    def create_compute_instance(self, gpu_index: int, gi_id: int) -> int:
        """One compute instance spanning the whole GPU instance; returns its id."""
        ...

    def destroy_compute_instance(self, gpu_index: int, gi_id: int, ci_id: int) -> None: ...

    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None: ...

    def list_processes(self, gpu_index: int) -> list[Process]:
        """Compute processes on the GPU; in MIG mode each names its GPU / compute instance."""
        ...

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> bool:
        """Ask for a MIG mode; True when it is already in effect, False when it is pending a
        GPU reset or a reboot."""
        ...
