"""``NvmlBackend``: the ``Backend`` protocol over a pynvml-compatible module.

The module is the real ``pynvml`` (from the nvidia-ml-py package, imported lazily by
``load_pynvml``) on a GPU node, or a ``SimulatedNvml`` in tests and in the ``fake`` backend: the
same calls run in both, so the code below is what the simulator tests.

The calls and their traps follow /work/shared/reference/notes-mig.md section 4:
- ``nvmlDeviceGetGpuInstanceProfileInfo`` takes a ``NVML_GPU_INSTANCE_PROFILE_*`` constant and
  returns ``info.id``, the device-specific profile id that every create / list / placement call
  takes. Profiles are enumerated at run time (constants 0..COUNT-1, skipping NOT_SUPPORTED and
  INVALID_ARGUMENT) and mapped to catalogue names by their constant, so a driver that names a
  profile "7g.79gb" still maps to the catalogue's "7g.80gb".
- ``nvmlDeviceGetGpuInstancePossiblePlacements`` and ``nvmlDeviceGetGpuInstances`` are raw ctypes
  calls (an array and ``byref(c_uint)``); possible placements ignore occupancy.
- ``nvmlDeviceCreateGpuInstanceWithPlacement`` gets ``ctypes.byref(placement)``: pynvml declares
  no argtypes and the C function takes a pointer. The placement size comes from the possible
  placements (memory slices), never from ``sliceCount`` (compute slices).
- Per-instance memory and processes come from MIG device handles; utilisation is not reported
  by NVML in MIG mode.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from gpu_node_agent.backend import (
    ERROR_IN_USE,
    ERROR_INSUFFICIENT_RESOURCES,
    ERROR_INVALID_ARGUMENT,
    ERROR_NO_PERMISSION,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    ERROR_OTHER,
    ERROR_UNKNOWN_PROFILE,
    BackendError,
    Gpu,
    GpuInstance,
    MigProfile,
    Placement,
    Process,
)
from gpu_spec.mig.catalogue import Catalogue, GpuModel, Profile, load_catalogue

logger = logging.getLogger("gpu_node_agent.nvml")

T = TypeVar("T")

MIB = 1024 * 1024
PYNVML_REQUIREMENT = "nvidia-ml-py==13.615.71"

# NVML return codes (nvml.h); the module's own constants are used when it has them.
_ERROR_CODES = {
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": 23,
}

# What each error means for the MIG calls, for an operator reading the result in the portal.
_EXPLANATIONS = {
    "NVML_ERROR_INSUFFICIENT_RESOURCES": (
        ERROR_INSUFFICIENT_RESOURCES,
        "the placement overlaps an existing GPU instance, or the GPU has no capacity left for "
        "this profile",
    ),
    "NVML_ERROR_INVALID_ARGUMENT": (
        ERROR_INVALID_ARGUMENT,
        "the profile or the placement is not valid on this GPU",
    ),
    "NVML_ERROR_IN_USE": (
        ERROR_IN_USE,
        "processes or compute instances are still running on it",
    ),
    "NVML_ERROR_NOT_SUPPORTED": (
        ERROR_NOT_SUPPORTED,
        "MIG mode is not enabled on this GPU, or the GPU or driver does not support it",
    ),
    "NVML_ERROR_NO_PERMISSION": (
        ERROR_NO_PERMISSION,
        "the agent needs root or the mig/config capability "
        "(/proc/driver/nvidia/capabilities/mig/config)",
    ),
    "NVML_ERROR_NOT_FOUND": (ERROR_NOT_FOUND, "it does not exist (any more)"),
}

# A full compute instance per GPU instance: NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE by N.
_CI_PROFILE_BY_SLICES = {
    1: "NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE",
    2: "NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE",
    3: "NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE",
    4: "NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE",
    6: "NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE",
    7: "NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE",
    8: "NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE",
}

# nvmlDeviceGetGpuInstances needs a buffer "large enough for the instances supported by the
# profile"; instanceCount is wrong on some drivers (A30, mig-parted discovery.go), so never
# allocate fewer than there are memory slices.
_MIN_INSTANCE_BUFFER = 8


def load_pynvml() -> Any:
    """The real pynvml module, imported only when the nvml backend is chosen."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as error:
        raise BackendError(
            ERROR_NOT_SUPPORTED,
            f"the nvml backend needs the pynvml module: pip install '{PYNVML_REQUIREMENT}'",
        ) from error


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _strip_mig_prefix(name: str) -> str:
    """NVML names GPU-instance profiles "MIG 3g.40gb"; the catalogue says "3g.40gb"."""
    name = name.strip()
    return name[4:] if name.upper().startswith("MIG ") else name


def _profile_const(value: object, nvml: Any) -> int | None:
    """A catalogue profile's NVML constant, whether stored as its value or its name."""
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.isascii() and value.isdigit() and len(value) < 10:
            return int(value)
        resolved = getattr(nvml, value, None)
        return resolved if isinstance(resolved, int) else None
    return None


class _ProfileTable:
    """The profiles one GPU offers in its current MIG mode (immutable for that mode's life)."""

    def __init__(self, profiles: list[MigProfile], placements: dict[int, list[Placement]]):
        self.profiles = profiles
        self.placements = placements  # by profile_id
        self.by_name = {profile.name: profile for profile in profiles}
        self.by_nvml_name = {profile.nvml_name: profile for profile in profiles}
        self.by_id = {profile.profile_id: profile for profile in profiles}

    def find(self, name: str) -> MigProfile | None:
        return self.by_name.get(name) or self.by_nvml_name.get(_strip_mig_prefix(name))


class NvmlBackend:
    """The ``Backend`` protocol over pynvml (or ``SimulatedNvml``)."""

    def __init__(
        self, nvml: Any, *, catalogue: Catalogue | None = None, initialise: bool = True
    ) -> None:
        self._nvml = nvml
        self._catalogue = catalogue if catalogue is not None else load_catalogue()
        self._tables: dict[tuple[str, bool], _ProfileTable] = {}
        if initialise:
            self._call("initialising NVML", nvml.nvmlInit)

    @property
    def nvml(self) -> Any:
        return self._nvml

    def close(self) -> None:
        self._call("shutting NVML down", self._nvml.nvmlShutdown)

    # -- errors ---------------------------------------------------------------------------------

    def _code(self, name: str) -> int:
        value = getattr(self._nvml, name, None)
        return value if isinstance(value, int) else _ERROR_CODES[name]

    def _is_error(self, error: BaseException, *names: str) -> bool:
        return getattr(error, "value", None) in {self._code(name) for name in names}

    def _translate(self, what: str, error: BaseException) -> BackendError:
        value = getattr(error, "value", None)
        for name, (code, explanation) in _EXPLANATIONS.items():
            if value == self._code(name):
                return BackendError(code, f"{what} failed: {name} ({explanation})")
        return BackendError(ERROR_OTHER, f"{what} failed: NVML error {value} ({error})")

    def _call(self, what: str, function: Callable[..., T], *args: Any) -> T:
        try:
            return function(*args)
        except self._nvml.NVMLError as error:
            raise self._translate(what, error) from error

    # -- GPUs -----------------------------------------------------------------------------------

    def driver_version(self) -> str:
        return _text(
            self._call("reading the driver version", self._nvml.nvmlSystemGetDriverVersion)
        )

    def _handle(self, index: int) -> Any:
        return self._call(f"opening GPU {index}", self._nvml.nvmlDeviceGetHandleByIndex, index)

    def _mig_mode(self, handle: Any, index: int) -> tuple[bool, bool, bool]:
        """(capable, current, pending); NOT_SUPPORTED means the GPU cannot do MIG."""
        try:
            current, pending = self._nvml.nvmlDeviceGetMigMode(handle)
        except self._nvml.NVMLError as error:
            if self._is_error(error, "NVML_ERROR_NOT_SUPPORTED"):
                return False, False, False
            raise self._translate(f"reading the MIG mode of GPU {index}", error) from error
        enable = self._code_or("NVML_DEVICE_MIG_ENABLE", 1)
        return True, int(current) == enable, int(pending) == enable

    def _code_or(self, name: str, default: int) -> int:
        value = getattr(self._nvml, name, default)
        return value if isinstance(value, int) else default

    def list_gpus(self) -> list[Gpu]:
        count = self._call("counting GPUs", self._nvml.nvmlDeviceGetCount)
        return [self._gpu(index) for index in range(count)]

    def _gpu(self, index: int) -> Gpu:
        nvml = self._nvml
        handle = self._handle(index)
        name = _text(self._call(f"reading the name of GPU {index}", nvml.nvmlDeviceGetName, handle))
        uuid = _text(self._call(f"reading the UUID of GPU {index}", nvml.nvmlDeviceGetUUID, handle))
        memory = self._call(
            f"reading the memory of GPU {index}", nvml.nvmlDeviceGetMemoryInfo, handle
        )
        capable, current, pending = self._mig_mode(handle, index)
        utilization: int | None = None
        if not current:
            # NVML does not report utilisation on a MIG-enabled GPU (nvml.h), so it is not asked.
            try:
                utilization = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except nvml.NVMLError as error:
                logger.debug("GPU %s: no utilisation (%s)", index, error)
        return Gpu(
            index=index,
            uuid=uuid,
            name=name,
            memory_total_mib=int(memory.total) // MIB,
            memory_used_mib=int(memory.used) // MIB,
            utilization_pct=utilization,
            mig_capable=capable,
            mig_mode_current=current,
            mig_mode_pending=pending,
        )

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> bool:
        nvml = self._nvml
        handle = self._handle(gpu_index)
        if enabled:
            mode = self._code_or("NVML_DEVICE_MIG_ENABLE", 1)
        else:
            mode = self._code_or("NVML_DEVICE_MIG_DISABLE", 0)
        # nvmlDeviceSetMigMode returns the activation status instead of raising it: IN_USE or
        # RESET_REQUIRED mean the new mode is pending until the GPU is reset (notes-mig.md).
        status = self._call(
            f"setting MIG mode {'on' if enabled else 'off'} on GPU {gpu_index}",
            nvml.nvmlDeviceSetMigMode,
            handle,
            mode,
        )
        self._tables.clear()
        _, current, pending = self._mig_mode(handle, gpu_index)
        logger.info(
            "GPU %s: MIG mode %s requested (activation status %s, current %s, pending %s)",
            gpu_index,
            "on" if enabled else "off",
            status,
            current,
            pending,
        )
        return current == enabled

    # -- profiles and placements ----------------------------------------------------------------

    def _model(self, name: str) -> GpuModel | None:
        return self._catalogue.find_model(name)

    def _table(self, index: int) -> _ProfileTable:
        handle = self._handle(index)
        uuid = _text(
            self._call(f"reading the UUID of GPU {index}", self._nvml.nvmlDeviceGetUUID, handle)
        )
        _, current, _ = self._mig_mode(handle, index)
        key = (uuid, current)
        if key not in self._tables:
            self._tables[key] = self._read_table(index, handle, current)
        return self._tables[key]

    def _read_table(self, index: int, handle: Any, mig_current: bool) -> _ProfileTable:
        if not mig_current:
            return _ProfileTable([], {})
        nvml = self._nvml
        gpu_name = _text(nvml.nvmlDeviceGetName(handle))
        model = self._model(gpu_name)
        by_const: dict[int, Profile] = {}
        if model is not None:
            for known in model.profiles.values():
                const = _profile_const(known.nvml_profile_const_value, nvml)
                if const is None:
                    const = _profile_const(known.nvml_profile_const, nvml)
                if const is not None:
                    by_const[const] = known
        count = self._code_or("NVML_GPU_INSTANCE_PROFILE_COUNT", 0x12)
        profiles: list[MigProfile] = []
        placements: dict[int, list[Placement]] = {}
        for const in range(count):
            info = self._profile_info(handle, index, const)
            if info is None or int(info.instanceCount) == 0:
                continue
            nvml_name = _strip_mig_prefix(_text(getattr(info, "name", b"")))
            catalogue_profile: Profile | None = by_const.get(const)
            if catalogue_profile is None and model is not None and nvml_name:
                catalogue_profile = model.profiles.get(nvml_name)
            if catalogue_profile is not None:
                name = catalogue_profile.name
                if nvml_name and nvml_name != name:
                    logger.info(
                        "GPU %s (%s): the driver names profile %s %r; mapped to the catalogue's %r",
                        index,
                        gpu_name,
                        const,
                        nvml_name,
                        name,
                    )
            else:
                name = (
                    nvml_name or f"{int(info.sliceCount)}g.{round(int(info.memorySizeMB) / 1024)}gb"
                )
                logger.warning(
                    "GPU %s (%s): profile %r (constant %s) is not in the catalogue",
                    index,
                    gpu_name,
                    name,
                    const,
                )
            profile = MigProfile(
                name=name,
                nvml_name=nvml_name or name,
                nvml_profile_const=const,
                profile_id=int(info.id),
                compute_slices=int(info.sliceCount),
                max_count=int(info.instanceCount),
                memory_mib=int(info.memorySizeMB),
                in_catalogue=catalogue_profile is not None,
            )
            profiles.append(profile)
            placements[profile.profile_id] = self._read_placements(handle, index, profile)
        return _ProfileTable(profiles, placements)

    def _profile_info(self, handle: Any, index: int, const: int) -> Any | None:
        nvml = self._nvml
        try:
            return nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, const)
        except nvml.NVMLError as error:
            if self._is_error(error, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
                return None
            if not self._is_error(error, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise self._translate(
                    f"reading GPU-instance profile {const} of GPU {index}", error
                ) from error
        # A driver without the versioned call: version 1 has no name (mapped by constant).
        try:
            return nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, const, 1)
        except nvml.NVMLError as error:
            if self._is_error(error, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
                return None
            raise self._translate(
                f"reading GPU-instance profile {const} of GPU {index}", error
            ) from error

    def _read_placements(self, handle: Any, index: int, profile: MigProfile) -> list[Placement]:
        nvml = self._nvml
        what = f"reading the placements of {profile.name} on GPU {index}"
        count = ctypes.c_uint(0)
        # First the count (placements NULL), then an array that large.
        self._call(
            what,
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            handle,
            profile.profile_id,
            None,
            ctypes.byref(count),
        )
        if count.value == 0:
            return []
        array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call(
            what,
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            handle,
            profile.profile_id,
            array,
            ctypes.byref(count),
        )
        return [Placement(int(array[k].start), int(array[k].size)) for k in range(count.value)]

    def list_profiles(self, gpu_index: int) -> list[MigProfile]:
        return list(self._table(gpu_index).profiles)

    def _profile(self, gpu_index: int, name: str) -> tuple[_ProfileTable, MigProfile]:
        table = self._table(gpu_index)
        profile = table.find(name)
        if profile is None:
            offered = ", ".join(p.name for p in table.profiles) or "none: MIG mode is off"
            raise BackendError(
                ERROR_UNKNOWN_PROFILE,
                f"GPU {gpu_index} does not offer MIG profile {name!r} (offered: {offered})",
            )
        return table, profile

    def possible_placements(self, gpu_index: int, profile: str) -> list[Placement]:
        table, found = self._profile(gpu_index, profile)
        return list(table.placements.get(found.profile_id, []))

    def free_placements(self, gpu_index: int, profile: str) -> list[Placement]:
        occupied = [instance.placement for instance in self.list_gpu_instances(gpu_index)]
        return [
            placement
            for placement in self.possible_placements(gpu_index, profile)
            if not any(placement.overlaps(used) for used in occupied)
        ]

    # -- instances ------------------------------------------------------------------------------

    def _mig_devices(self, handle: Any, index: int) -> dict[int, list[tuple[int, Any]]]:
        """MIG device handles (one per compute instance) by GPU-instance id."""
        nvml = self._nvml
        found: dict[int, list[tuple[int, Any]]] = {}
        maximum = self._call(
            f"counting the MIG devices of GPU {index}", nvml.nvmlDeviceGetMaxMigDeviceCount, handle
        )
        for position in range(int(maximum)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position)
            except nvml.NVMLError as error:
                if self._is_error(error, "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT"):
                    continue
                raise self._translate(
                    f"opening MIG device {position} of GPU {index}", error
                ) from error
            gi_id = int(self._call("reading a MIG device", nvml.nvmlDeviceGetGpuInstanceId, mig))
            ci_id = int(
                self._call("reading a MIG device", nvml.nvmlDeviceGetComputeInstanceId, mig)
            )
            found.setdefault(gi_id, []).append((ci_id, mig))
        return found

    def mig_device_uuids(self, gpu_index: int) -> dict[int, str]:
        """The MIG device UUID (``MIG-...``, what ``CUDA_VISIBLE_DEVICES`` takes) of each GPU
        instance's first compute instance, by GPU-instance id."""
        handle = self._handle(gpu_index)
        found = {}
        for gi_id, devices in self._mig_devices(handle, gpu_index).items():
            _, mig = min(devices, key=lambda device: device[0])
            found[gi_id] = _text(
                self._call("reading a MIG device UUID", self._nvml.nvmlDeviceGetUUID, mig)
            )
        return found

    def _processes_of(self, handle: Any, gi_id: int | None, ci_id: int | None) -> list[Process]:
        nvml = self._nvml
        raw = self._call(
            "listing compute processes", nvml.nvmlDeviceGetComputeRunningProcesses, handle
        )
        sm = self._sm_util(handle) if gi_id is None and raw else {}
        processes = []
        for entry in raw:
            used = getattr(entry, "usedGpuMemory", None)
            processes.append(
                Process(
                    pid=int(entry.pid),
                    used_memory_mib=None if used is None else int(used) // MIB,
                    gi_id=gi_id,
                    ci_id=ci_id,
                    sm_util_pct=sm.get(int(entry.pid)),
                )
            )
        return processes

    def _sm_util(self, handle: Any) -> dict[int, int]:
        """pid -> its SM use (percent of the GPU) from NVML's process utilisation samples
        (``nvmlDeviceGetProcessUtilization``: each process's latest sample); {} where NVML
        has none (no sample yet: NOT_FOUND; MIG mode or an old GPU: NOT_SUPPORTED)."""
        function = getattr(self._nvml, "nvmlDeviceGetProcessUtilization", None)
        if function is None:
            return {}
        try:
            samples = self._call("reading process utilisation", function, handle, 0)
        except BackendError:
            return {}
        latest: dict[int, tuple[int, int]] = {}
        for sample in samples or []:
            pid, stamp = int(sample.pid), int(getattr(sample, "timeStamp", 0))
            if pid not in latest or stamp >= latest[pid][0]:
                latest[pid] = (stamp, max(0, min(100, int(sample.smUtil))))
        return {pid: util for pid, (_, util) in latest.items()}

    def list_gpu_instances(self, gpu_index: int) -> list[GpuInstance]:
        nvml = self._nvml
        handle = self._handle(gpu_index)
        _, current, _ = self._mig_mode(handle, gpu_index)
        if not current:
            return []
        table = self._table(gpu_index)
        devices = self._mig_devices(handle, gpu_index)
        instances: list[GpuInstance] = []
        for profile in table.profiles:
            size = max(profile.max_count, _MIN_INSTANCE_BUFFER)
            array = (nvml.c_nvmlGpuInstance_t * size)()
            count = ctypes.c_uint(size)
            self._call(
                f"listing {profile.name} GPU instances on GPU {gpu_index}",
                nvml.nvmlDeviceGetGpuInstances,
                handle,
                profile.profile_id,
                array,
                ctypes.byref(count),
            )
            for k in range(count.value):
                gpu_instance = array[k]
                info = self._call(
                    f"reading a GPU instance of GPU {gpu_index}",
                    nvml.nvmlGpuInstanceGetInfo,
                    gpu_instance,
                )
                gi_id = int(info.id)
                memory_total = memory_used = None
                processes: list[Process] = []
                mig_handles = sorted(devices.get(gi_id, []), key=lambda pair: pair[0])
                if mig_handles:
                    # Compute instances share their GPU instance's memory: any handle reports it.
                    memory = self._call(
                        f"reading the memory of GPU instance {gi_id}",
                        nvml.nvmlDeviceGetMemoryInfo,
                        mig_handles[0][1],
                    )
                    memory_total, memory_used = int(memory.total) // MIB, int(memory.used) // MIB
                    for ci_id, mig in mig_handles:
                        processes.extend(self._processes_of(mig, gi_id, ci_id))
                instances.append(
                    GpuInstance(
                        gi_id=gi_id,
                        profile=profile.name,
                        profile_id=profile.profile_id,
                        start=int(info.placement.start),
                        size=int(info.placement.size),
                        ci_ids=tuple(self._compute_instance_ids(gpu_instance, gi_id)),
                        memory_total_mib=memory_total,
                        memory_used_mib=memory_used,
                        processes=tuple(processes),
                    )
                )
        instances.sort(key=lambda instance: (instance.start, instance.gi_id))
        return instances

    def _ci_profile_info(self, gpu_instance: Any, const: int) -> Any | None:
        nvml = self._nvml
        engine = self._code_or("NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0)
        for version in (2, 1):
            try:
                return nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gpu_instance, const, engine, version
                )
            except nvml.NVMLError as error:
                if self._is_error(error, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
                    return None
                if not self._is_error(error, "NVML_ERROR_FUNCTION_NOT_FOUND") or version == 1:
                    raise self._translate("reading a compute-instance profile", error) from error
        return None

    def _compute_instance_ids(self, gpu_instance: Any, gi_id: int) -> list[int]:
        nvml = self._nvml
        ids: set[int] = set()
        for const in range(self._code_or("NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 9)):
            info = self._ci_profile_info(gpu_instance, const)
            if info is None:
                continue
            size = max(int(info.instanceCount), _MIN_INSTANCE_BUFFER)
            array = (nvml.c_nvmlComputeInstance_t * size)()
            count = ctypes.c_uint(size)
            self._call(
                f"listing the compute instances of GPU instance {gi_id}",
                nvml.nvmlGpuInstanceGetComputeInstances,
                gpu_instance,
                int(info.id),
                array,
                ctypes.byref(count),
            )
            for k in range(count.value):
                ci_info = self._call(
                    "reading a compute instance", nvml.nvmlComputeInstanceGetInfo, array[k]
                )
                ids.add(int(ci_info.id))
        return sorted(ids)

    def _gpu_instance(self, handle: Any, gpu_index: int, gi_id: int) -> Any:
        return self._call(
            f"opening GPU instance {gi_id} on GPU {gpu_index}",
            self._nvml.nvmlDeviceGetGpuInstanceById,
            handle,
            gi_id,
        )

    def create_gpu_instance(self, gpu_index: int, profile: str, start: int) -> GpuInstance:
        nvml = self._nvml
        table, found = self._profile(gpu_index, profile)
        possible = table.placements.get(found.profile_id, [])
        match = next((p for p in possible if p.start == start), None)
        if match is None:
            starts = ", ".join(str(p.start) for p in possible) or "none"
            raise BackendError(
                ERROR_INVALID_ARGUMENT,
                f"creating {found.name} at memory slice {start} on GPU {gpu_index} failed: "
                f"not a placement of that profile (valid starts: {starts})",
            )
        handle = self._handle(gpu_index)
        placement = nvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = match.start, match.size
        gpu_instance = self._call(
            f"creating {found.name} at memory slice {start} on GPU {gpu_index}",
            nvml.nvmlDeviceCreateGpuInstanceWithPlacement,
            handle,
            found.profile_id,
            ctypes.byref(placement),
        )
        info = self._call("reading the new GPU instance", nvml.nvmlGpuInstanceGetInfo, gpu_instance)
        return GpuInstance(
            gi_id=int(info.id),
            profile=found.name,
            profile_id=found.profile_id,
            start=int(info.placement.start),
            size=int(info.placement.size),
        )

    def create_compute_instance(self, gpu_index: int, gi_id: int) -> int:
        nvml = self._nvml
        handle = self._handle(gpu_index)
        gpu_instance = self._gpu_instance(handle, gpu_index, gi_id)
        info = self._call("reading a GPU instance", nvml.nvmlGpuInstanceGetInfo, gpu_instance)
        profile = self._table(gpu_index).by_id.get(int(info.profileId))
        if profile is None:
            raise BackendError(
                ERROR_UNKNOWN_PROFILE,
                f"GPU instance {gi_id} on GPU {gpu_index} has an unknown profile id {info.profileId}",
            )
        const_name = _CI_PROFILE_BY_SLICES.get(profile.compute_slices)
        const = getattr(nvml, const_name, None) if const_name else None
        ci_info = None if const is None else self._ci_profile_info(gpu_instance, const)
        if ci_info is None:
            raise BackendError(
                ERROR_NOT_SUPPORTED,
                f"GPU instance {gi_id} ({profile.name}) on GPU {gpu_index} offers no "
                f"{profile.compute_slices}-slice compute instance",
            )
        compute_instance = self._call(
            f"creating a compute instance in GPU instance {gi_id} ({profile.name}) on GPU "
            f"{gpu_index}",
            nvml.nvmlGpuInstanceCreateComputeInstance,
            gpu_instance,
            int(ci_info.id),
        )
        created = self._call(
            "reading the new compute instance", nvml.nvmlComputeInstanceGetInfo, compute_instance
        )
        return int(created.id)

    def destroy_compute_instance(self, gpu_index: int, gi_id: int, ci_id: int) -> None:
        nvml = self._nvml
        gpu_instance = self._gpu_instance(self._handle(gpu_index), gpu_index, gi_id)
        what = f"destroying compute instance {ci_id} of GPU instance {gi_id} on GPU {gpu_index}"
        compute_instance = self._call(
            what, nvml.nvmlGpuInstanceGetComputeInstanceById, gpu_instance, ci_id
        )
        self._call(what, nvml.nvmlComputeInstanceDestroy, compute_instance)

    def destroy_gpu_instance(self, gpu_index: int, gi_id: int) -> None:
        nvml = self._nvml
        gpu_instance = self._gpu_instance(self._handle(gpu_index), gpu_index, gi_id)
        self._call(
            f"destroying GPU instance {gi_id} on GPU {gpu_index}",
            nvml.nvmlGpuInstanceDestroy,
            gpu_instance,
        )

    def list_processes(self, gpu_index: int) -> list[Process]:
        handle = self._handle(gpu_index)
        _, current, _ = self._mig_mode(handle, gpu_index)
        if not current:
            return self._processes_of(handle, None, None)
        processes: list[Process] = []
        for gi_id, handles in sorted(self._mig_devices(handle, gpu_index).items()):
            for ci_id, mig in sorted(handles, key=lambda pair: pair[0]):
                processes.extend(self._processes_of(mig, gi_id, ci_id))
        return processes
