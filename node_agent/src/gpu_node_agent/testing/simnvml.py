"""A simulated NVML: the subset of pynvml the agent calls, over an in-memory node.

``SimulatedNvml`` looks like the ``pynvml`` module from nvidia-ml-py 13.x to its caller: the same
function names and signatures, ``NVML_*`` constants with nvml.h's values, ctypes structures and
handles (``c_nvmlGpuInstancePlacement_t``, ``c_nvmlGpuInstance_t`` ...), raw-ctypes array calls
(``nvmlDeviceGetGpuInstances(dev, id, array, byref(count))``), and ``NVMLError`` with one
subclass per code (``NVMLError_InUse`` ...) built the way pynvml builds them. The GPUs and their
MIG profiles come from the catalogue (``gpu_spec.mig.catalogue``).

What it models, as nvml.h documents it:
- MIG mode current/pending: ``nvmlDeviceSetMigMode`` only sets the pending mode and returns the
  activation status ``NVML_ERROR_RESET_REQUIRED``; ``reset_gpu`` / ``reboot`` apply it.
- GPU-instance profiles enumerated by ``NVML_GPU_INSTANCE_PROFILE_*`` constant (NOT_SUPPORTED for
  a constant the model lacks, or while MIG is off); ``info.id`` is the device-specific id, and
  ``info.name`` is "MIG <name>" (overridable per profile to simulate driver name drift).
- Possible placements list every placement of the profile, ignoring occupancy (the real call's
  trap); ``nvmlDeviceGetGpuInstanceRemainingCapacity`` accounts for occupancy.
- Creating at a placement that is not one of the profile's: INVALID_ARGUMENT. At a placement
  that overlaps an existing instance, beyond the profile's instance count, a second "+me"
  instance, or past the compute slices: INSUFFICIENT_RESOURCES. The placement must be passed by
  reference (``ctypes.byref``), as the C function takes a pointer; passing it by value raises
  ``TypeError`` here (on hardware it would be garbage).
- Compute instances: per-GI compute-instance profiles (1, 2, 3, 4 or 7 slices, up to the GI's
  size), created and destroyed; destroying one with a process: IN_USE. Destroying a GPU instance
  with compute instances or processes: IN_USE.
- Processes (``start_process`` / ``stop_process``) on a GPU or a compute instance; listed by the
  parent handle (with their instance ids in MIG mode) and by MIG device handles; memory info per
  GPU and per MIG device; utilisation NOT_SUPPORTED in MIG mode.
- GPU instances and compute instances do not survive ``reset_gpu`` / ``reboot``, like hardware.

What it does not model: GPU-instance ids as the driver assigns them (the whole-GPU profile gets
0, others the lowest free id from 1), compute-instance placements, media-engine counts beyond
"one +me instance", the "+me.all" / "-me" / "+gfx" exclusion rules, per-MIG utilisation (GPM),
privileges (NO_PERMISSION), nvmlShutdown reference counting beyond a counter, vGPU, events.

The state is JSON-serialisable (``to_dict`` / ``from_dict``) and, with ``state_path``, saved after
every change, so the ``fake`` backend keeps its layout across agent restarts.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import string
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from gpu_spec.mig.catalogue import Catalogue, GpuModel, Profile, load_catalogue
from gpu_spec.simulated import SimGpuSpec

MIB = 1024 * 1024

# -- constants (values from nvml.h / pynvml.py) ---------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX = 0xA
NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX = 0xB
NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX = 0xC
NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME = 0xD
NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME = 0xE
NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 0xF
NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME = 0x10
NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX = 0x11
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12

NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL = 0x8
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1

NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_VALUE_NOT_AVAILABLE_uint = ctypes.c_uint(-1)

# Compute slices of each CI profile constant the simulator offers (no 6/8-slice, REV1 or NVL).
_CI_SLICES = {
    NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE: 1,
    NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE: 2,
    NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE: 3,
    NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE: 4,
    NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE: 7,
}

# -- errors, as pynvml builds them ----------------------------------------------------------------

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_IN_USE: "In use by another client",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient resources",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """pynvml's error: ``NVMLError(code)`` returns an instance of the code's subclass."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int, *args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int, *args: Any) -> None:
        super().__init__(value, *args)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")


def _error_class_name(constant: str) -> str:
    # NVML_ERROR_IN_USE -> NVMLError_InUse, as pynvml's _extractNVMLErrorsAsClasses names it.
    words = string.capwords(constant.removeprefix("NVML_ERROR_"), "_")
    return "NVMLError_" + words.replace("_", "")


def _make_error_classes() -> dict[str, type[NVMLError]]:
    classes: dict[str, type[NVMLError]] = {}
    for constant, value in sorted(globals().items()):
        if not constant.startswith("NVML_ERROR_") or not isinstance(value, int):
            continue

        def bound_new(cls: type[NVMLError], *args: Any, _value: int = value) -> NVMLError:
            error = Exception.__new__(cls)
            error.value = _value
            return error

        def bound_init(self: NVMLError, *args: Any, _value: int = value) -> None:
            Exception.__init__(self, _value)
            self.value = _value

        name = _error_class_name(constant)
        error_class = type(name, (NVMLError,), {"__new__": bound_new, "__init__": bound_init})
        error_class.__module__ = __name__
        NVMLError._valClassMapping[value] = error_class
        classes[name] = error_class
    return classes


ERROR_CLASSES = _make_error_classes()
globals().update(ERROR_CLASSES)


def _fail(code: int) -> NVMLError:
    return NVMLError(code)


# -- ctypes structures (the fields pynvml declares; handles carry the simulator's ids) ----------


class struct_c_nvmlDevice_t(ctypes.Structure):
    _fields_ = [
        ("sim_gpu", ctypes.c_uint),
        ("sim_is_mig", ctypes.c_uint),
        ("sim_gi", ctypes.c_uint),
        ("sim_ci", ctypes.c_uint),
    ]


c_nvmlDevice_t = ctypes.POINTER(struct_c_nvmlDevice_t)


class struct_c_nvmlGpuInstance_t(ctypes.Structure):
    _fields_ = [("sim_gpu", ctypes.c_uint), ("sim_gi", ctypes.c_uint)]


c_nvmlGpuInstance_t = ctypes.POINTER(struct_c_nvmlGpuInstance_t)


class struct_c_nvmlComputeInstance_t(ctypes.Structure):
    _fields_ = [("sim_gpu", ctypes.c_uint), ("sim_gi", ctypes.c_uint), ("sim_ci", ctypes.c_uint)]


c_nvmlComputeInstance_t = ctypes.POINTER(struct_c_nvmlComputeInstance_t)


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class c_nvmlGpuInstanceProfileInfo_t(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint),
        ("isP2pSupported", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
    ]


class c_nvmlGpuInstanceProfileInfo_v2_t(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("isP2pSupported", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("copyEngineCount", ctypes.c_uint),
        ("decoderCount", ctypes.c_uint),
        ("encoderCount", ctypes.c_uint),
        ("jpegCount", ctypes.c_uint),
        ("ofaCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
        ("name", ctypes.c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]


class c_nvmlGpuInstanceInfo_t(ctypes.Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", c_nvmlGpuInstancePlacement_t),
    ]


class c_nvmlComputeInstancePlacement_t(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


class c_nvmlComputeInstanceProfileInfo_v2_t(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("id", ctypes.c_uint),
        ("sliceCount", ctypes.c_uint),
        ("instanceCount", ctypes.c_uint),
        ("multiprocessorCount", ctypes.c_uint),
        ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint),
        ("sharedEncoderCount", ctypes.c_uint),
        ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint),
        ("name", ctypes.c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]


class c_nvmlComputeInstanceInfo_t(ctypes.Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("gpuInstance", c_nvmlGpuInstance_t),
        ("id", ctypes.c_uint),
        ("profileId", ctypes.c_uint),
        ("placement", c_nvmlComputeInstancePlacement_t),
    ]


class c_nvmlMemory_t(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class c_nvmlUtilization_t(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class nvmlFriendlyObject:
    """What pynvml returns for processes: a plain object with the structure's fields."""

    def __init__(self, fields: dict[str, Any]) -> None:
        for key, value in fields.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return str(self.__dict__)


# -- the simulated node ---------------------------------------------------------------------------


@dataclass
class _SimComputeInstance:
    ci_id: int
    slices: int
    profile_id: int


@dataclass
class _SimGpuInstance:
    gi_id: int
    profile: str  # catalogue name
    start: int
    size: int
    cis: dict[int, _SimComputeInstance] = field(default_factory=dict)


@dataclass
class _SimProcess:
    pid: int
    gpu: int
    gi_id: int | None
    ci_id: int | None
    used_memory_mib: int
    pod_uid: str | None = None


@dataclass
class _SimGpu:
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    mig_capable: bool
    mig_current: bool
    mig_pending: bool
    utilization_pct: int = 0
    gis: dict[int, _SimGpuInstance] = field(default_factory=dict)


def _gpu_uuid(seed: str, index: int, name: str) -> str:
    digest = hashlib.sha256(f"{seed}/{index}/{name}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _mig_uuid(gpu_uuid: str, gi_id: int, ci_id: int) -> str:
    digest = hashlib.sha256(f"{gpu_uuid}/{gi_id}/{ci_id}".encode()).hexdigest()
    return f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _whole_gpu_memory_mib(model: GpuModel) -> int:
    full = model.full_profile()
    if full is not None:
        return full.memory_gb_nominal * 1024
    return max(p.memory_gb_nominal for p in model.profiles.values()) * 1024


def _profile_memory_mib(model: GpuModel, profile: Profile, total_mib: int) -> int:
    if profile.memory_mib is not None:
        return profile.memory_mib
    return total_mib * profile.memory_slices // model.memory_slices


def _target(reference: Any) -> Any:
    """The object behind ``ctypes.byref(x)`` or ``ctypes.pointer(x)`` (or ``x`` itself)."""
    if isinstance(reference, ctypes._Pointer):
        return reference.contents
    inner = getattr(reference, "_obj", None)  # ctypes.byref() returns a CArgObject
    return inner if inner is not None else reference


class SimulatedNvml:
    """A pynvml-compatible module over simulated GPUs (see the module docstring)."""

    def __init__(
        self,
        gpus: Sequence[str | tuple[str, bool] | SimGpuSpec] = (),
        *,
        catalogue: Catalogue | None = None,
        driver_version: str = "580.65.06",
        seed: str = "simulated",
        profile_names: dict[str, str] | None = None,
        state_path: Path | str | None = None,
    ) -> None:
        self._catalogue = catalogue if catalogue is not None else load_catalogue()
        self._lock = threading.RLock()
        self._init_count = 0
        self._keep: dict[tuple[Any, ...], ctypes.Structure] = {}
        self.driver_version = driver_version
        # NVML's name for a catalogue profile, to simulate drift ("7g.80gb" -> "7g.79gb").
        self.profile_names = dict(profile_names or {})
        self.state_path = Path(state_path) if state_path is not None else None
        # A simulated load, asked at each reading of a whole GPU (its index and framebuffer
        # MiB -> utilisation % and MiB in use, or None for its own figures): the demo's plan
        # (``gpu_node_agent.testing.fake``). Not saved: it is a function of the time.
        self.load_source: Callable[[int, int], tuple[int, int] | None] | None = None
        self._gpus: list[_SimGpu] = []
        self._processes: dict[int, _SimProcess] = {}
        self._next_pid = 40000
        for index, raw in enumerate(gpus):
            spec = self._spec(raw)
            model = self._catalogue.find_model(spec.name)
            if spec.memory_mib is not None:
                memory = spec.memory_mib
            elif model is not None:
                memory = _whole_gpu_memory_mib(model)
            else:
                raise ValueError(
                    f"{spec.name!r} is not in the MIG catalogue: give its memory_mib "
                    "(it is simulated as a GPU without MIG)"
                )
            capable = model is not None
            enabled = capable and spec.mig
            self._gpus.append(
                _SimGpu(
                    index=index,
                    uuid=_gpu_uuid(seed, index, spec.name),
                    name=spec.name,
                    memory_total_mib=memory,
                    mig_capable=capable,
                    mig_current=enabled,
                    mig_pending=enabled,
                )
            )

    @staticmethod
    def _spec(raw: str | tuple[str, bool] | SimGpuSpec) -> SimGpuSpec:
        if isinstance(raw, SimGpuSpec):
            return raw
        if isinstance(raw, str):
            return SimGpuSpec(raw)
        name, mig = raw
        return SimGpuSpec(name, mig=mig)

    # -- persistence -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": 1,
                "driver_version": self.driver_version,
                "profile_names": self.profile_names,
                "next_pid": self._next_pid,
                "gpus": [
                    {
                        "uuid": gpu.uuid,
                        "name": gpu.name,
                        "memory_total_mib": gpu.memory_total_mib,
                        "mig_capable": gpu.mig_capable,
                        "mig_current": gpu.mig_current,
                        "mig_pending": gpu.mig_pending,
                        "utilization_pct": gpu.utilization_pct,
                        "gpu_instances": [
                            {
                                "gi_id": gi.gi_id,
                                "profile": gi.profile,
                                "start": gi.start,
                                "size": gi.size,
                                "compute_instances": [
                                    {
                                        "ci_id": ci.ci_id,
                                        "slices": ci.slices,
                                        "profile_id": ci.profile_id,
                                    }
                                    for ci in gi.cis.values()
                                ],
                            }
                            for gi in gpu.gis.values()
                        ],
                    }
                    for gpu in self._gpus
                ],
                "processes": [
                    {
                        "pid": p.pid,
                        "gpu": p.gpu,
                        "gi_id": p.gi_id,
                        "ci_id": p.ci_id,
                        "used_memory_mib": p.used_memory_mib,
                        "pod_uid": p.pod_uid,
                    }
                    for p in self._processes.values()
                ],
            }

    @classmethod
    def from_dict(
        cls,
        data: dict[str, Any],
        *,
        catalogue: Catalogue | None = None,
        state_path: Path | str | None = None,
    ) -> SimulatedNvml:
        sim = cls(
            (),
            catalogue=catalogue,
            driver_version=str(data.get("driver_version", "580.65.06")),
            profile_names=dict(data.get("profile_names") or {}),
            state_path=state_path,
        )
        sim._next_pid = int(data.get("next_pid", 40000))
        for index, raw in enumerate(data["gpus"]):
            gpu = _SimGpu(
                index=index,
                uuid=str(raw["uuid"]),
                name=str(raw["name"]),
                memory_total_mib=int(raw["memory_total_mib"]),
                mig_capable=bool(raw["mig_capable"]),
                mig_current=bool(raw["mig_current"]),
                mig_pending=bool(raw["mig_pending"]),
                utilization_pct=int(raw.get("utilization_pct", 0)),
            )
            for gi in raw.get("gpu_instances", []):
                instance = _SimGpuInstance(
                    gi_id=int(gi["gi_id"]),
                    profile=str(gi["profile"]),
                    start=int(gi["start"]),
                    size=int(gi["size"]),
                )
                for ci in gi.get("compute_instances", []):
                    instance.cis[int(ci["ci_id"])] = _SimComputeInstance(
                        ci_id=int(ci["ci_id"]),
                        slices=int(ci["slices"]),
                        profile_id=int(ci["profile_id"]),
                    )
                gpu.gis[instance.gi_id] = instance
            sim._gpus.append(gpu)
        for raw in data.get("processes", []):
            process = _SimProcess(
                pid=int(raw["pid"]),
                gpu=int(raw["gpu"]),
                gi_id=None if raw.get("gi_id") is None else int(raw["gi_id"]),
                ci_id=None if raw.get("ci_id") is None else int(raw["ci_id"]),
                used_memory_mib=int(raw["used_memory_mib"]),
                pod_uid=raw.get("pod_uid"),
            )
            sim._processes[process.pid] = process
        return sim

    @classmethod
    def load(cls, path: Path | str, *, catalogue: Catalogue | None = None) -> SimulatedNvml:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls.from_dict(data, catalogue=catalogue, state_path=path)

    def save(self) -> None:
        """Write the state to ``state_path`` (done after every change when it is set)."""
        with self._lock:
            self._save()

    def _save(self) -> None:
        if self.state_path is None:
            return
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.state_path.with_name(self.state_path.name + ".tmp")
        temporary.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, self.state_path)

    # -- test controls (not NVML) ------------------------------------------------------------------

    def start_process(
        self,
        gpu_index: int,
        *,
        gi_id: int | None = None,
        ci_id: int | None = None,
        used_memory_mib: int = 1024,
        pod_uid: str | None = None,
        pid: int | None = None,
    ) -> int:
        """Run a compute process on a GPU (no MIG) or a compute instance (MIG: ``gi_id``, and
        ``ci_id`` or the GI's first compute instance). Returns its pid."""
        with self._lock:
            gpu = self._gpus[gpu_index]
            if gpu.mig_current:
                if gi_id is None or gi_id not in gpu.gis:
                    raise ValueError(f"GPU {gpu_index} is in MIG mode: name an existing gi_id")
                instance = gpu.gis[gi_id]
                if ci_id is None:
                    if not instance.cis:
                        raise ValueError(f"GPU instance {gi_id} has no compute instance to run on")
                    ci_id = min(instance.cis)
                elif ci_id not in instance.cis:
                    raise ValueError(f"GPU instance {gi_id} has no compute instance {ci_id}")
            elif gi_id is not None or ci_id is not None:
                raise ValueError(f"GPU {gpu_index} is not in MIG mode: no instances to run on")
            if pid is None:
                pid = self._next_pid
                self._next_pid += 1
            self._processes[pid] = _SimProcess(
                pid, gpu_index, gi_id, ci_id, used_memory_mib, pod_uid=pod_uid
            )
            self._save()
            return pid

    def stop_process(self, pid: int) -> None:
        with self._lock:
            self._processes.pop(pid, None)
            self._save()

    def pod_uid_for_pid(self, pid: int) -> str | None:
        with self._lock:
            process = self._processes.get(pid)
            return process.pod_uid if process is not None else None

    def set_utilization(self, gpu_index: int, percent: int) -> None:
        with self._lock:
            self._gpus[gpu_index].utilization_pct = percent
            self._save()

    def reset_gpu(self, gpu_index: int) -> None:
        """A GPU reset: the pending MIG mode takes effect; instances and processes are gone."""
        with self._lock:
            gpu = self._gpus[gpu_index]
            gpu.mig_current = gpu.mig_pending
            gpu.gis.clear()
            for pid in [p.pid for p in self._processes.values() if p.gpu == gpu_index]:
                del self._processes[pid]
            self._save()

    def reboot(self) -> None:
        with self._lock:
            for gpu in self._gpus:
                self.reset_gpu(gpu.index)

    def gpu_uuids(self) -> list[str]:
        return [gpu.uuid for gpu in self._gpus]

    # -- internals ---------------------------------------------------------------------------------

    def _require_init(self) -> None:
        if self._init_count <= 0:
            raise _fail(NVML_ERROR_UNINITIALIZED)

    def _keep_alive(self, key: tuple[Any, ...], structure: ctypes.Structure) -> ctypes.Structure:
        # Handles point at structures this object owns, so they stay valid while it lives.
        existing = self._keep.get(key)
        if existing is not None:
            return existing
        self._keep[key] = structure
        return structure

    def _device_handle(self, index: int) -> Any:
        struct = self._keep_alive(("gpu", index), struct_c_nvmlDevice_t(index, 0, 0, 0))
        return ctypes.pointer(struct)

    def _mig_handle(self, index: int, gi_id: int, ci_id: int) -> Any:
        key = ("mig", index, gi_id, ci_id)
        struct = self._keep_alive(key, struct_c_nvmlDevice_t(index, 1, gi_id, ci_id))
        return ctypes.pointer(struct)

    def _gi_handle(self, index: int, gi_id: int) -> Any:
        struct = self._keep_alive(("gi", index, gi_id), struct_c_nvmlGpuInstance_t(index, gi_id))
        return ctypes.pointer(struct)

    def _ci_handle(self, index: int, gi_id: int, ci_id: int) -> Any:
        key = ("ci", index, gi_id, ci_id)
        struct = self._keep_alive(key, struct_c_nvmlComputeInstance_t(index, gi_id, ci_id))
        return ctypes.pointer(struct)

    def _device(self, handle: Any) -> tuple[_SimGpu, Any]:
        self._require_init()
        if not isinstance(handle, ctypes._Pointer) or not handle:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        contents = handle.contents
        if not isinstance(contents, struct_c_nvmlDevice_t) or contents.sim_gpu >= len(self._gpus):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return self._gpus[contents.sim_gpu], contents

    def _parent(self, handle: Any) -> _SimGpu:
        gpu, contents = self._device(handle)
        if contents.sim_is_mig:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    def _mig_device(self, handle: Any) -> tuple[_SimGpu, _SimGpuInstance, int]:
        gpu, contents = self._device(handle)
        if not contents.sim_is_mig:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        instance = gpu.gis.get(contents.sim_gi)
        if instance is None or contents.sim_ci not in instance.cis:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)  # a stale handle
        return gpu, instance, contents.sim_ci

    def _model(self, gpu: _SimGpu) -> GpuModel:
        model = self._catalogue.find_model(gpu.name)
        if model is None:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return model

    def _require_mig(self, gpu: _SimGpu) -> GpuModel:
        if not gpu.mig_capable or not gpu.mig_current:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return self._model(gpu)

    def _profile_by_id(self, gpu: _SimGpu, profile_id: int) -> Profile:
        model = self._require_mig(gpu)
        for profile in model.profiles.values():
            if profile.nvidia_smi_profile_id == profile_id:
                return profile
        raise _fail(NVML_ERROR_INVALID_ARGUMENT)

    def _gi(self, reference: Any) -> tuple[_SimGpu, _SimGpuInstance]:
        self._require_init()
        if not isinstance(reference, ctypes._Pointer) or not reference:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        contents = reference.contents
        if not isinstance(contents, struct_c_nvmlGpuInstance_t):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        if contents.sim_gpu >= len(self._gpus):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpus[contents.sim_gpu]
        self._require_mig(gpu)
        instance = gpu.gis.get(contents.sim_gi)
        if instance is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)  # destroyed: the handle is no longer valid
        return gpu, instance

    def _ci(self, reference: Any) -> tuple[_SimGpu, _SimGpuInstance, _SimComputeInstance]:
        self._require_init()
        if not isinstance(reference, ctypes._Pointer) or not reference:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        contents = reference.contents
        if not isinstance(contents, struct_c_nvmlComputeInstance_t):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        if contents.sim_gpu >= len(self._gpus):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpus[contents.sim_gpu]
        self._require_mig(gpu)
        instance = gpu.gis.get(contents.sim_gi)
        if instance is None or contents.sim_ci not in instance.cis:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return gpu, instance, instance.cis[contents.sim_ci]

    def _creation_error(
        self, gpu: _SimGpu, model: GpuModel, profile: Profile, start: int, size: int
    ) -> int | None:
        """Why NVML would refuse this GPU instance (a return code), or None."""
        if start not in profile.placements or size != profile.memory_slices:
            return NVML_ERROR_INVALID_ARGUMENT
        wanted = range(start, start + size)
        existing = list(gpu.gis.values())
        for instance in existing:
            if instance.start < wanted.stop and wanted.start < instance.start + instance.size:
                return NVML_ERROR_INSUFFICIENT_RESOURCES
        if sum(1 for i in existing if i.profile == profile.name) >= profile.max_count:
            return NVML_ERROR_INSUFFICIENT_RESOURCES
        profiles = model.profiles
        if profile.media_extensions and any(
            profiles[i.profile].media_extensions for i in existing if i.profile in profiles
        ):
            return NVML_ERROR_INSUFFICIENT_RESOURCES
        used = sum(profiles[i.profile].compute_slices for i in existing if i.profile in profiles)
        if used + profile.compute_slices > model.compute_slices:
            return NVML_ERROR_INSUFFICIENT_RESOURCES
        return None

    def _new_gi(self, gpu: _SimGpu, model: GpuModel, profile: Profile, start: int) -> Any:
        if profile.memory_slices == model.memory_slices and 0 not in gpu.gis:
            gi_id = 0
        else:
            gi_id = next(i for i in range(1, 64) if i not in gpu.gis)
        gpu.gis[gi_id] = _SimGpuInstance(gi_id, profile.name, start, profile.memory_slices)
        self._save()
        return self._gi_handle(gpu.index, gi_id)

    def _processes_on(
        self, gpu: _SimGpu, gi_id: int | None = None, ci_id: int | None = None
    ) -> list[_SimProcess]:
        found = [p for p in self._processes.values() if p.gpu == gpu.index]
        if gi_id is not None:
            found = [p for p in found if p.gi_id == gi_id]
        if ci_id is not None:
            found = [p for p in found if p.ci_id == ci_id]
        return sorted(found, key=lambda p: p.pid)

    # -- NVML: library and system ----------------------------------------------------------------

    def nvmlInit(self) -> None:
        with self._lock:
            self._init_count += 1

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.nvmlInit()

    def nvmlShutdown(self) -> None:
        with self._lock:
            self._require_init()
            self._init_count -= 1

    def nvmlErrorString(self, result: int) -> str:
        return _ERROR_STRINGS.get(result, f"NVML Error with code {result}")

    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return self.driver_version

    # -- NVML: devices -----------------------------------------------------------------------------

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        with self._lock:
            self._require_init()
            if not 0 <= index < len(self._gpus):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            return self._device_handle(index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        with self._lock:
            gpu, contents = self._device(handle)
            if contents.sim_is_mig:
                instance = self._mig_device(handle)[1]
                return f"{gpu.name} MIG {self._nvml_profile_name(instance.profile)}"
            return gpu.name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        with self._lock:
            gpu, contents = self._device(handle)
            if contents.sim_is_mig:
                _, instance, ci_id = self._mig_device(handle)
                return _mig_uuid(gpu.uuid, instance.gi_id, ci_id)
            return gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        with self._lock:
            gpu, contents = self._device(handle)
            if contents.sim_is_mig:
                _, instance, _ = self._mig_device(handle)
                model = self._model(gpu)
                profile = model.profiles[instance.profile]
                total = _profile_memory_mib(model, profile, gpu.memory_total_mib)
                used = sum(p.used_memory_mib for p in self._processes_on(gpu, instance.gi_id))
            else:
                total = gpu.memory_total_mib
                used = sum(p.used_memory_mib for p in self._processes_on(gpu))
                if not gpu.mig_current and (load := self._load(gpu)) is not None:
                    used = max(used, load[1])
            used = min(used, total)
            return c_nvmlMemory_t(total * MIB, (total - used) * MIB, used * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        with self._lock:
            gpu, contents = self._device(handle)
            if contents.sim_is_mig or gpu.mig_current:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)  # nvml.h: not supported in MIG mode
            load = self._load(gpu)
            return c_nvmlUtilization_t(gpu.utilization_pct if load is None else load[0], 0)

    def _load(self, gpu: _SimGpu) -> tuple[int, int] | None:
        if self.load_source is None:
            return None
        return self.load_source(gpu.index, gpu.memory_total_mib)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        with self._lock:
            gpu, contents = self._device(handle)
            if contents.sim_is_mig:
                _, instance, ci_id = self._mig_device(handle)
                processes = self._processes_on(gpu, instance.gi_id, ci_id)
            else:
                processes = self._processes_on(gpu)
            not_available = NVML_VALUE_NOT_AVAILABLE_uint.value
            return [
                nvmlFriendlyObject(
                    {
                        "pid": p.pid,
                        "usedGpuMemory": p.used_memory_mib * MIB,
                        "gpuInstanceId": not_available if p.gi_id is None else p.gi_id,
                        "computeInstanceId": not_available if p.ci_id is None else p.ci_id,
                    }
                )
                for p in processes
            ]

    nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses

    def nvmlDeviceGetProcessUtilization(self, handle: Any, last_seen_time_stamp: int) -> list[Any]:
        """Each process's latest sample (pid, timeStamp, smUtil, memUtil, encUtil, decUtil),
        as NVML gives them for a GPU outside MIG: the GPU's utilisation shared among its
        processes by the memory each holds (a simulation). NOT_SUPPORTED in MIG mode,
        NOT_FOUND with no process to sample."""
        with self._lock:
            gpu, contents = self._device(handle)
            if contents.sim_is_mig or gpu.mig_current:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            processes = self._processes_on(gpu)
            if not processes:
                raise _fail(NVML_ERROR_NOT_FOUND)
            load = self._load(gpu)
            util = gpu.utilization_pct if load is None else load[0]
            held = sum(max(p.used_memory_mib, 1) for p in processes)
            stamp = max(int(last_seen_time_stamp), 1) + 1
            return [
                nvmlFriendlyObject(
                    {
                        "pid": p.pid,
                        "timeStamp": stamp,
                        "smUtil": round(util * max(p.used_memory_mib, 1) / held),
                        "memUtil": 0,
                        "encUtil": 0,
                        "decUtil": 0,
                    }
                )
                for p in processes
            ]

    # -- NVML: MIG mode ------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        with self._lock:
            gpu = self._parent(device)
            if not gpu.mig_capable:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            return [int(gpu.mig_current), int(gpu.mig_pending)]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        """Sets the pending mode; returns the activation status, which pynvml does not raise."""
        with self._lock:
            gpu = self._parent(device)
            if not gpu.mig_capable:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            if mode not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            enabled = mode == NVML_DEVICE_MIG_ENABLE
            if not enabled and gpu.gis:
                raise _fail(NVML_ERROR_IN_USE)  # instances must be destroyed first
            gpu.mig_pending = enabled
            self._save()
            if gpu.mig_current == enabled:
                return NVML_SUCCESS
            if self._processes_on(gpu):
                return NVML_ERROR_IN_USE
            return NVML_ERROR_RESET_REQUIRED

    # -- NVML: GPU-instance profiles and placements ------------------------------------------------

    def _nvml_profile_name(self, catalogue_name: str) -> str:
        return self.profile_names.get(catalogue_name, catalogue_name)

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        with self._lock:
            gpu = self._parent(device)
            model = self._require_mig(gpu)
            if not 0 <= profile < NVML_GPU_INSTANCE_PROFILE_COUNT:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            found = next(
                (p for p in model.profiles.values() if p.nvml_profile_const_value == profile), None
            )
            if found is None:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            memory = _profile_memory_mib(model, found, gpu.memory_total_mib)
            fields = {
                "id": found.nvidia_smi_profile_id,
                "isP2pSupported": 0,
                "sliceCount": found.compute_slices,
                "instanceCount": found.max_count,
                "multiprocessorCount": found.sm_count or 0,
                "copyEngineCount": found.compute_slices,
                "decoderCount": 1 if found.media_extensions else 0,
                "encoderCount": 0,
                "jpegCount": 1 if found.media_extensions else 0,
                "ofaCount": 1 if found.media_extensions else 0,
                "memorySizeMB": memory,
            }
            if version == 1:
                return c_nvmlGpuInstanceProfileInfo_t(**fields)
            if version != 2:
                raise _fail(NVML_ERROR_FUNCTION_NOT_FOUND)
            name = f"MIG {self._nvml_profile_name(found.name)}".encode()
            return c_nvmlGpuInstanceProfileInfo_v2_t(version=0x02000098, name=name, **fields)

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self,
        device: Any,
        profileId: int,
        placementsRef: Any,
        countRef: Any,
    ) -> int:
        """Every placement of the profile, whatever already exists (as the real call)."""
        with self._lock:
            gpu = self._parent(device)
            profile = self._profile_by_id(gpu, profileId)
            count = _target(countRef)
            if count is None or not hasattr(count, "value"):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            placements = [(start, profile.memory_slices) for start in profile.placements]
            if placementsRef is None:
                count.value = len(placements)
                return NVML_SUCCESS
            array = _target(placementsRef)
            if count.value < len(placements) or len(array) < len(placements):
                count.value = len(placements)
                raise _fail(NVML_ERROR_INSUFFICIENT_SIZE)
            for position, (start, size) in enumerate(placements):
                array[position].start = start
                array[position].size = size
            count.value = len(placements)
            return NVML_SUCCESS

    nvmlDeviceGetGpuInstancePossiblePlacements_v2 = nvmlDeviceGetGpuInstancePossiblePlacements

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profileId: int) -> int:
        """How many more instances of the profile fit, given what exists."""
        with self._lock:
            gpu = self._parent(device)
            profile = self._profile_by_id(gpu, profileId)
            model = self._model(gpu)
            probe = _SimGpu(**{**gpu.__dict__, "gis": dict(gpu.gis)})
            added = 0
            for start in profile.placements:
                if self._creation_error(probe, model, profile, start, profile.memory_slices):
                    continue
                probe.gis[-1 - added] = _SimGpuInstance(
                    -1 - added, profile.name, start, profile.memory_slices
                )
                added += 1
            return added

    # -- NVML: GPU instances ---------------------------------------------------------------------------

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self,
        device: Any,
        profileId: int,
        placement: Any,
    ) -> Any:
        with self._lock:
            if isinstance(placement, ctypes.Structure):
                raise TypeError(
                    "nvmlDeviceCreateGpuInstanceWithPlacement takes a pointer to the placement: "
                    "pass ctypes.byref(placement) (pynvml declares no argtypes)"
                )
            wanted = _target(placement)
            if wanted is None or not hasattr(wanted, "start"):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            gpu = self._parent(device)
            profile = self._profile_by_id(gpu, profileId)
            model = self._model(gpu)
            error = self._creation_error(gpu, model, profile, int(wanted.start), int(wanted.size))
            if error is not None:
                raise _fail(error)
            return self._new_gi(gpu, model, profile, int(wanted.start))

    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        """The driver picks the placement: the first one that fits."""
        with self._lock:
            gpu = self._parent(device)
            profile = self._profile_by_id(gpu, profileId)
            model = self._model(gpu)
            for start in profile.placements:
                if self._creation_error(gpu, model, profile, start, profile.memory_slices) is None:
                    return self._new_gi(gpu, model, profile, start)
            raise _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlDeviceGetGpuInstances(
        self,
        device: Any,
        profileId: int,
        gpuInstancesRef: Any,
        countRef: Any,
    ) -> int:
        with self._lock:
            gpu = self._parent(device)
            profile = self._profile_by_id(gpu, profileId)
            count = _target(countRef)
            if gpuInstancesRef is None or count is None or not hasattr(count, "value"):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            array = _target(gpuInstancesRef)
            found = sorted(
                (i for i in gpu.gis.values() if i.profile == profile.name), key=lambda i: i.gi_id
            )
            if len(array) < len(found):
                raise _fail(NVML_ERROR_INSUFFICIENT_SIZE)
            for position, instance in enumerate(found):
                array[position] = self._gi_handle(gpu.index, instance.gi_id)
            count.value = len(found)
            return NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        with self._lock:
            gpu = self._parent(device)
            self._require_mig(gpu)
            if gpuInstanceId not in gpu.gis:
                raise _fail(NVML_ERROR_NOT_FOUND)
            return self._gi_handle(gpu.index, gpuInstanceId)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        with self._lock:
            gpu, instance = self._gi(gpuInstance)
            profile = self._model(gpu).profiles[instance.profile]
            return c_nvmlGpuInstanceInfo_t(
                self._device_handle(gpu.index),
                instance.gi_id,
                profile.nvidia_smi_profile_id,
                c_nvmlGpuInstancePlacement_t(instance.start, instance.size),
            )

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        with self._lock:
            gpu, instance = self._gi(gpuInstance)
            if instance.cis or self._processes_on(gpu, instance.gi_id):
                raise _fail(NVML_ERROR_IN_USE)
            del gpu.gis[instance.gi_id]
            self._save()
            return NVML_SUCCESS

    # -- NVML: compute instances -----------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self,
        device: Any,
        profile: int,
        engProfile: int,
        version: int = 2,
    ) -> Any:
        """The first parameter is a GPU-instance handle, despite pynvml's name for it."""
        with self._lock:
            gpu, instance = self._gi(device)
            if engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            if not 0 <= profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            gi_slices = self._model(gpu).profiles[instance.profile].compute_slices
            slices = _CI_SLICES.get(profile)
            if slices is None or slices > gi_slices:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            if version not in (1, 2):
                raise _fail(NVML_ERROR_FUNCTION_NOT_FOUND)
            gi_name = self._nvml_profile_name(instance.profile)
            name = gi_name if slices == gi_slices else f"{slices}c.{gi_name}"
            return c_nvmlComputeInstanceProfileInfo_v2_t(
                version=0x02000088,
                id=profile,
                sliceCount=slices,
                instanceCount=gi_slices // slices,
                multiprocessorCount=0,
                name=f"MIG {name}".encode(),
            )

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        with self._lock:
            gpu, instance = self._gi(gpuInstance)
            slices = _CI_SLICES.get(profileId)
            gi_slices = self._model(gpu).profiles[instance.profile].compute_slices
            if slices is None or slices > gi_slices:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            if sum(ci.slices for ci in instance.cis.values()) + slices > gi_slices:
                raise _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
            ci_id = next(i for i in range(64) if i not in instance.cis)
            instance.cis[ci_id] = _SimComputeInstance(ci_id, slices, profileId)
            self._save()
            return self._ci_handle(gpu.index, instance.gi_id, ci_id)

    def nvmlGpuInstanceGetComputeInstances(
        self,
        gpuInstance: Any,
        profileId: int,
        computeInstancesRef: Any,
        countRef: Any,
    ) -> int:
        with self._lock:
            gpu, instance = self._gi(gpuInstance)
            count = _target(countRef)
            if computeInstancesRef is None or count is None or not hasattr(count, "value"):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            array = _target(computeInstancesRef)
            found = [ci for ci in sorted(instance.cis.values(), key=lambda c: c.ci_id)]
            found = [ci for ci in found if ci.profile_id == profileId]
            if len(array) < len(found):
                raise _fail(NVML_ERROR_INSUFFICIENT_SIZE)
            for position, ci in enumerate(found):
                array[position] = self._ci_handle(gpu.index, instance.gi_id, ci.ci_id)
            count.value = len(found)
            return NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(
        self,
        gpuInstance: Any,
        computeInstanceId: int,
    ) -> Any:
        with self._lock:
            gpu, instance = self._gi(gpuInstance)
            if computeInstanceId not in instance.cis:
                raise _fail(NVML_ERROR_NOT_FOUND)
            return self._ci_handle(gpu.index, instance.gi_id, computeInstanceId)

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        with self._lock:
            gpu, instance, ci = self._ci(computeInstance)
            return c_nvmlComputeInstanceInfo_t(
                self._device_handle(gpu.index),
                self._gi_handle(gpu.index, instance.gi_id),
                ci.ci_id,
                ci.profile_id,
                c_nvmlComputeInstancePlacement_t(0, ci.slices),
            )

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        with self._lock:
            gpu, instance, ci = self._ci(computeInstance)
            if self._processes_on(gpu, instance.gi_id, ci.ci_id):
                raise _fail(NVML_ERROR_IN_USE)
            del instance.cis[ci.ci_id]
            self._save()
            return NVML_SUCCESS

    # -- NVML: MIG device handles ----------------------------------------------------------------------

    def _mig_devices_of(self, gpu: _SimGpu) -> list[tuple[int, int]]:
        return sorted(
            (instance.gi_id, ci_id) for instance in gpu.gis.values() for ci_id in instance.cis
        )

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        with self._lock:
            gpu = self._parent(device)
            if not gpu.mig_capable:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            return self._model(gpu).compute_slices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        with self._lock:
            gpu = self._parent(device)
            self._require_mig(gpu)
            devices = self._mig_devices_of(gpu)
            if not 0 <= index < len(devices):
                raise _fail(NVML_ERROR_NOT_FOUND)
            gi_id, ci_id = devices[index]
            return self._mig_handle(gpu.index, gi_id, ci_id)

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> Any:
        with self._lock:
            _, contents = self._device(device)
            return ctypes.c_uint(1 if contents.sim_is_mig else 0)  # a c_uint, as pynvml returns

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        with self._lock:
            _, instance, _ = self._mig_device(device)
            return instance.gi_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        with self._lock:
            _, _, ci_id = self._mig_device(device)
            return ci_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        with self._lock:
            gpu, _, _ = self._mig_device(migDevice)
            return self._device_handle(gpu.index)


# The module-level names pynvml callers reach for (constants, structures, error classes) are
# also attributes of every SimulatedNvml, so ``nvml.NVML_ERROR_IN_USE`` works on either.
def _export_module_names() -> None:
    exported: Iterable[tuple[str, Any]] = list(globals().items())
    for name, value in exported:
        if (
            name.startswith(("NVML_", "NVMLError", "c_nvml", "struct_c_nvml"))
            or name == "nvmlFriendlyObject"
        ):
            setattr(SimulatedNvml, name, value)


_export_module_names()
