"""The NVML backend, run against the simulated NVML (the same pynvml calls as on a GPU node).

The read-only part also runs against the real pynvml on a GPU machine with
``GPU_AGENT_REAL_NVML=1`` (it never creates instances nor changes the MIG mode; the one test
that creates and destroys GPU instances needs ``GPU_AGENT_REAL_NVML_WRITE=1`` as well, and a GPU
already in MIG mode with no instances). Without those variables the real runs are skipped.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_node_agent import nvml as nvml_module
from gpu_node_agent.backend import (
    ERROR_IN_USE,
    ERROR_INSUFFICIENT_RESOURCES,
    ERROR_INVALID_ARGUMENT,
    ERROR_UNKNOWN_PROFILE,
    BackendError,
    Placement,
)
from gpu_node_agent.nvml import NvmlBackend
from gpu_node_agent.testing.simnvml import NVMLError, SimGpuSpec, SimulatedNvml
from gpu_spec.mig.catalogue import load_catalogue

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
REAL = os.environ.get("GPU_AGENT_REAL_NVML") == "1"
REAL_WRITE = REAL and os.environ.get("GPU_AGENT_REAL_NVML_WRITE") == "1"


@pytest.fixture(params=[A100, H100])
def model_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sim(model_name: str) -> SimulatedNvml:
    """GPU 0 in MIG mode, GPU 1 of the same model with MIG off."""
    return SimulatedNvml([model_name, (model_name, False)])


@pytest.fixture
def backend(sim: SimulatedNvml) -> NvmlBackend:
    return NvmlBackend(sim)


def _real_backend() -> NvmlBackend:
    if not REAL:
        pytest.skip("set GPU_AGENT_REAL_NVML=1 on a GPU machine to run against the real pynvml")
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        pytest.skip("pynvml (nvidia-ml-py) is not installed")
    return NvmlBackend(pynvml)


# The real driver only where one is asked for: not collected at all elsewhere (no skips).
@pytest.fixture(params=["simulated", "real"] if REAL else ["simulated"])
def any_backend(request: pytest.FixtureRequest) -> Iterator[NvmlBackend]:
    """The NVML backend over the simulator (A100 + H100, one of them with instances), or over
    the real pynvml (opt-in, read-only)."""
    if request.param == "real":
        real = _real_backend()
        yield real
        real.close()
        return
    simulated = SimulatedNvml([A100, H100])
    backend = NvmlBackend(simulated)
    created = backend.create_gpu_instance(0, "3g.40gb", 4)
    backend.create_compute_instance(0, created.gi_id)
    yield backend


# -- read-only: simulated and (opt-in) real ------------------------------------------------------


def test_inventory_reads_gpus_profiles_and_instances(any_backend: NvmlBackend) -> None:
    gpus = any_backend.list_gpus()
    assert gpus, "no GPU found"
    assert len({gpu.uuid for gpu in gpus}) == len(gpus)
    assert any_backend.driver_version()
    catalogue = load_catalogue()
    for gpu in gpus:
        assert gpu.uuid.startswith("GPU-")
        assert gpu.memory_total_mib > 0
        if gpu.mig_mode_current:
            assert gpu.utilization_pct is None  # NVML does not report it in MIG mode
        if not gpu.mig_mode_current:
            assert any_backend.list_profiles(gpu.index) == []
            continue
        profiles = any_backend.list_profiles(gpu.index)
        assert profiles
        model = catalogue.find_model(gpu.name)
        for profile in profiles:
            placements = any_backend.possible_placements(gpu.index, profile.name)
            assert placements
            if model is None or not profile.in_catalogue:
                continue
            # The catalogue's table agrees with what the driver says (on hardware this checks
            # the placements the notes call "inferred").
            known = model.profiles[profile.name]
            assert profile.profile_id == known.nvidia_smi_profile_id, profile
            assert profile.compute_slices == known.compute_slices, profile
            assert [p.start for p in placements] == list(known.placements), profile
            assert {p.size for p in placements} == {known.memory_slices}, profile
        for instance in any_backend.list_gpu_instances(gpu.index):
            assert instance.profile in {p.name for p in profiles}
            assert instance.size >= 1


# -- simulated -------------------------------------------------------------------------------------


def test_lists_gpus_with_mig_mode_and_memory(backend: NvmlBackend, model_name: str) -> None:
    mig, plain = backend.list_gpus()
    assert (mig.name, plain.name) == (model_name, model_name)
    assert mig.uuid != plain.uuid
    assert mig.memory_total_mib == 80 * 1024
    assert (mig.mig_capable, mig.mig_mode_current, mig.mig_mode_pending) == (True, True, True)
    assert mig.utilization_pct is None
    assert (plain.mig_mode_current, plain.mig_mode_pending) == (False, False)
    assert plain.utilization_pct == 0


def test_profiles_are_the_catalogues(backend: NvmlBackend, model_name: str) -> None:
    model = load_catalogue().model(model_name)
    profiles = {profile.name: profile for profile in backend.list_profiles(0)}
    assert set(profiles) == set(model.profiles)
    for name, profile in profiles.items():
        known = model.profiles[name]
        assert profile.profile_id == known.nvidia_smi_profile_id
        assert profile.nvml_profile_const == known.nvml_profile_const_value
        assert profile.max_count == known.max_count
        assert profile.in_catalogue
        starts = [p.start for p in backend.possible_placements(0, name)]
        assert starts == list(known.placements)


def test_profile_names_drifting_with_the_driver_map_to_the_catalogue(model_name: str) -> None:
    sim = SimulatedNvml([model_name], profile_names={"7g.80gb": "7g.79gb", "3g.40gb": "3g.39gb"})
    backend = NvmlBackend(sim)
    profiles = {profile.name: profile for profile in backend.list_profiles(0)}
    assert profiles["7g.80gb"].nvml_name == "7g.79gb"
    assert profiles["3g.40gb"].nvml_name == "3g.39gb"
    created = backend.create_gpu_instance(0, "3g.40gb", 0)
    assert created.profile == "3g.40gb"
    # The driver's own name is understood too.
    backend.create_gpu_instance(0, "3g.39gb", 4)
    assert [(i.profile, i.start) for i in backend.list_gpu_instances(0)] == [
        ("3g.40gb", 0),
        ("3g.40gb", 4),
    ]


def test_possible_placements_ignore_occupancy_free_placements_do_not(
    backend: NvmlBackend,
) -> None:
    backend.create_gpu_instance(0, "3g.40gb", 0)
    assert backend.possible_placements(0, "3g.40gb") == [Placement(0, 4), Placement(4, 4)]
    assert backend.free_placements(0, "3g.40gb") == [Placement(4, 4)]
    assert [p.start for p in backend.free_placements(0, "1g.10gb")] == [4, 5, 6]


def test_create_at_a_valid_placement_with_a_compute_instance(backend: NvmlBackend) -> None:
    created = backend.create_gpu_instance(0, "2g.20gb", 2)
    assert (created.profile, created.start, created.size) == ("2g.20gb", 2, 2)
    ci_id = backend.create_compute_instance(0, created.gi_id)
    (instance,) = backend.list_gpu_instances(0)
    assert instance.gi_id == created.gi_id
    assert instance.ci_ids == (ci_id,)
    assert instance.memory_total_mib and instance.memory_total_mib > 19000
    assert instance.memory_used_mib == 0
    assert instance.processes == ()


def test_create_at_an_invalid_placement_fails_as_nvml_does(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    with pytest.raises(BackendError) as raised:
        backend.create_gpu_instance(0, "3g.40gb", 2)
    assert raised.value.code == ERROR_INVALID_ARGUMENT
    assert "valid starts: 0, 4" in raised.value.message
    # The raw call, as pynvml would make it, answers NVML_ERROR_INVALID_ARGUMENT.
    device = sim.nvmlDeviceGetHandleByIndex(0)
    placement = sim.c_nvmlGpuInstancePlacement_t(2, 4)
    with pytest.raises(sim.NVMLError_InvalidArgument) as error:
        sim.nvmlDeviceCreateGpuInstanceWithPlacement(device, 9, ctypes.byref(placement))
    assert error.value.value == sim.NVML_ERROR_INVALID_ARGUMENT
    assert backend.list_gpu_instances(0) == []


def test_create_at_an_occupied_placement_fails_as_nvml_does(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    backend.create_gpu_instance(0, "4g.40gb", 0)
    for profile, start in (("3g.40gb", 0), ("1g.10gb", 3), ("7g.80gb", 0)):
        with pytest.raises(BackendError) as raised:
            backend.create_gpu_instance(0, profile, start)
        assert raised.value.code == ERROR_INSUFFICIENT_RESOURCES, (profile, start)
        assert "NVML_ERROR_INSUFFICIENT_RESOURCES" in raised.value.message
    device = sim.nvmlDeviceGetHandleByIndex(0)
    placement = sim.c_nvmlGpuInstancePlacement_t(0, 4)
    with pytest.raises(NVMLError) as error:
        sim.nvmlDeviceCreateGpuInstanceWithPlacement(device, 9, ctypes.byref(placement))
    assert isinstance(error.value, sim.NVMLError_InsufficientResources)
    assert error.value.value == 23
    assert [(i.profile, i.start) for i in backend.list_gpu_instances(0)] == [("4g.40gb", 0)]


def test_one_media_extension_instance_per_gpu(backend: NvmlBackend) -> None:
    backend.create_gpu_instance(0, "1g.10gb+me", 0)
    with pytest.raises(BackendError) as raised:
        backend.create_gpu_instance(0, "1g.10gb+me", 1)
    assert raised.value.code == ERROR_INSUFFICIENT_RESOURCES
    backend.create_gpu_instance(0, "2g.20gb", 2)
    backend.create_gpu_instance(0, "2g.20gb", 4)
    with pytest.raises(BackendError) as raised:
        backend.create_gpu_instance(0, "2g.20gb", 0)  # overlaps the +me instance
    assert raised.value.code == ERROR_INSUFFICIENT_RESOURCES


def test_a_profile_the_gpu_lacks_is_named_with_what_it_offers(backend: NvmlBackend) -> None:
    with pytest.raises(BackendError) as raised:
        backend.create_gpu_instance(0, "3g.20gb", 0)
    assert raised.value.code == ERROR_UNKNOWN_PROFILE
    assert "3g.40gb" in raised.value.message
    assert backend.list_profiles(1) == []  # MIG off: no profiles
    with pytest.raises(BackendError):
        backend.create_gpu_instance(1, "3g.40gb", 0)


def test_destroying_a_busy_instance_is_refused(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    created = backend.create_gpu_instance(0, "3g.40gb", 0)
    ci_id = backend.create_compute_instance(0, created.gi_id)
    pid = sim.start_process(0, gi_id=created.gi_id, used_memory_mib=700, pod_uid="pod-a")
    with pytest.raises(BackendError) as raised:
        backend.destroy_compute_instance(0, created.gi_id, ci_id)
    assert raised.value.code == ERROR_IN_USE
    with pytest.raises(BackendError) as raised:
        backend.destroy_gpu_instance(0, created.gi_id)
    assert raised.value.code == ERROR_IN_USE
    (instance,) = backend.list_gpu_instances(0)
    assert instance.memory_used_mib == 700
    assert [(p.pid, p.used_memory_mib, p.gi_id, p.ci_id) for p in instance.processes] == [
        (pid, 700, created.gi_id, ci_id)
    ]
    assert [p.pid for p in backend.list_processes(0)] == [pid]
    sim.stop_process(pid)
    backend.destroy_compute_instance(0, created.gi_id, ci_id)
    backend.destroy_gpu_instance(0, created.gi_id)
    assert backend.list_gpu_instances(0) == []


def test_processes_on_a_gpu_without_mig(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    pid = sim.start_process(1, used_memory_mib=2048)
    sim.set_utilization(1, 37)
    (process,) = backend.list_processes(1)
    assert (process.pid, process.used_memory_mib, process.gi_id) == (pid, 2048, None)
    plain = backend.list_gpus()[1]
    assert (plain.memory_used_mib, plain.utilization_pct) == (2048, 37)


def test_mig_mode_change_is_pending_until_a_reset(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    assert backend.set_mig_mode(1, True) is False
    plain = backend.list_gpus()[1]
    assert (plain.mig_mode_current, plain.mig_mode_pending) == (False, True)
    sim.reset_gpu(1)
    plain = backend.list_gpus()[1]
    assert (plain.mig_mode_current, plain.mig_mode_pending) == (True, True)
    assert backend.list_profiles(1)


def test_simulated_nvml_keeps_pynvmls_traps(sim: SimulatedNvml) -> None:
    sim.nvmlInit()
    device = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(sim.NVMLError_NotSupported):
        sim.nvmlDeviceGetUtilizationRates(device)  # MIG mode
    # The placement goes by reference: pynvml declares no argtypes, the C function takes a
    # pointer (notes-mig.md).
    with pytest.raises(TypeError, match="byref"):
        sim.nvmlDeviceCreateGpuInstanceWithPlacement(
            device, 9, sim.c_nvmlGpuInstancePlacement_t(0, 4)
        )
    # The profile constant is not the profile id: 3_SLICE (2) -> id 9.
    info = sim.nvmlDeviceGetGpuInstanceProfileInfo(device, sim.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.id, info.sliceCount, info.name) == (9, 3, b"MIG 3g.40gb")
    with pytest.raises(sim.NVMLError_NotSupported):
        sim.nvmlDeviceGetGpuInstanceProfileInfo(device, sim.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    # Raw ctypes array call: count first, then the array.
    count = ctypes.c_uint(0)
    sim.nvmlDeviceGetGpuInstancePossiblePlacements(device, 9, None, ctypes.byref(count))
    array = (sim.c_nvmlGpuInstancePlacement_t * count.value)()
    sim.nvmlDeviceGetGpuInstancePossiblePlacements(device, 9, array, ctypes.byref(count))
    assert [(p.start, p.size) for p in array] == [(0, 4), (4, 4)]
    assert sim.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 9) == 2
    # Error objects are pynvml's: one subclass per code.
    error = NVMLError(19)
    assert type(error).__name__ == "NVMLError_InUse" and error.value == 19
    assert isinstance(sim.NVMLError_InsufficientResources(), sim.NVMLError)
    # MIG device handles answer with their instance's ids.
    gpu_instance = sim.nvmlDeviceCreateGpuInstanceWithPlacement(
        device, 9, ctypes.byref(sim.c_nvmlGpuInstancePlacement_t(4, 4))
    )
    ci_info = sim.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gpu_instance, 2, sim.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    )
    sim.nvmlGpuInstanceCreateComputeInstance(gpu_instance, ci_info.id)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(device, 0)
    assert sim.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert sim.nvmlDeviceGetUUID(mig).startswith("MIG-")
    with pytest.raises(sim.NVMLError_NotFound):
        sim.nvmlDeviceGetMigDeviceHandleByIndex(device, 1)
    with pytest.raises(sim.NVMLError_InUse):
        sim.nvmlGpuInstanceDestroy(gpu_instance)  # it still has a compute instance


def test_nvml_must_be_initialised() -> None:
    backend = NvmlBackend(SimulatedNvml([A100]), initialise=False)
    with pytest.raises(BackendError, match="counting GPUs failed"):
        backend.list_gpus()


def test_a30_and_a_gpu_without_mig() -> None:
    sim = SimulatedNvml(["NVIDIA A30", SimGpuSpec("NVIDIA L4", memory_mib=23034)])
    backend = NvmlBackend(sim)
    a30, l4 = backend.list_gpus()
    assert (a30.name, a30.mig_mode_current, a30.memory_total_mib) == ("NVIDIA A30", True, 24576)
    assert {p.name for p in backend.list_profiles(0)} >= {"1g.6gb", "2g.12gb", "4g.24gb"}
    assert [p.start for p in backend.possible_placements(0, "2g.12gb")] == [0, 2]
    assert (l4.mig_capable, l4.mig_mode_current, l4.memory_total_mib) == (False, False, 23034)
    with pytest.raises(BackendError, match="NVML_ERROR_NOT_SUPPORTED"):
        backend.set_mig_mode(1, True)


def test_simulated_state_survives_a_round_trip(tmp_path: Any) -> None:
    path = tmp_path / "sim.json"
    sim = SimulatedNvml([A100, H100], state_path=path)
    backend = NvmlBackend(sim)
    created = backend.create_gpu_instance(1, "1g.20gb", 6)
    backend.create_compute_instance(1, created.gi_id)
    pid = sim.start_process(1, gi_id=created.gi_id, pod_uid="uid-1")
    again = SimulatedNvml.load(path)
    backend_again = NvmlBackend(again)
    assert [g.uuid for g in backend_again.list_gpus()] == [g.uuid for g in backend.list_gpus()]
    assert backend_again.list_gpu_instances(1) == backend.list_gpu_instances(1)
    assert again.pod_uid_for_pid(pid) == "uid-1"


def _real_create_and_destroy_on_an_empty_mig_gpu() -> None:
    backend = _real_backend()
    target = next(
        (
            gpu
            for gpu in backend.list_gpus()
            if gpu.mig_mode_current and not backend.list_gpu_instances(gpu.index)
        ),
        None,
    )
    if target is None:
        pytest.skip("no GPU in MIG mode without instances (the MIG mode is never changed here)")
    profile = min(backend.list_profiles(target.index), key=lambda p: p.compute_slices)
    start = backend.possible_placements(target.index, profile.name)[-1].start
    created = backend.create_gpu_instance(target.index, profile.name, start)
    try:
        ci_id = backend.create_compute_instance(target.index, created.gi_id)
        (instance,) = backend.list_gpu_instances(target.index)
        assert (instance.profile, instance.start, instance.ci_ids) == (
            profile.name,
            start,
            (ci_id,),
        )
        backend.destroy_compute_instance(target.index, created.gi_id, ci_id)
    finally:
        for instance in backend.list_gpu_instances(target.index):
            for ci in instance.ci_ids:
                backend.destroy_compute_instance(target.index, instance.gi_id, ci)
            backend.destroy_gpu_instance(target.index, instance.gi_id)
    assert backend.list_gpu_instances(target.index) == []


if REAL_WRITE:  # creates GPU instances: only on a GPU machine that asks for it
    test_real_create_and_destroy_on_an_empty_mig_gpu = _real_create_and_destroy_on_an_empty_mig_gpu


# -- the simulator against the real pynvml module (no GPU needed) -----------------------------------


def _names_the_backend_uses() -> set[str]:
    source = Path(nvml_module.__file__).read_text()
    called = set(re.findall(r"\bnvml\.((?:nvml|c_nvml|NVML)\w+)", source))
    quoted = set(re.findall(r'"(NVML_[A-Z0-9_]+)"', source))
    return called | quoted


def test_the_simulator_offers_every_name_the_backend_uses() -> None:
    names = _names_the_backend_uses()
    assert {"nvmlDeviceCreateGpuInstanceWithPlacement", "NVML_ERROR_IN_USE"} <= names
    sim = SimulatedNvml([A100])
    assert sorted(n for n in names if not hasattr(sim, n)) == []


def test_the_simulator_matches_the_real_pynvml_module() -> None:
    import pynvml  # a project dependency: its absence is a broken install, not a skip

    names = _names_the_backend_uses()
    assert sorted(n for n in names if not hasattr(pynvml, n)) == []
    sim = SimulatedNvml([A100])
    for name in dir(sim):
        if name.startswith("NVML_") and isinstance(getattr(sim, name), int):
            assert getattr(pynvml, name) == getattr(sim, name), name
    for structure in (
        "c_nvmlGpuInstancePlacement_t",
        "c_nvmlGpuInstanceProfileInfo_v2_t",
        "c_nvmlGpuInstanceInfo_t",
        "c_nvmlComputeInstanceProfileInfo_v2_t",
        "c_nvmlMemory_t",
        "c_nvmlUtilization_t",
    ):
        real = [field[0] for field in getattr(pynvml, structure)._fields_]
        simulated = [field[0] for field in getattr(sim, structure)._fields_]
        assert simulated == real, structure
    assert type(sim.NVMLError(23)).__name__ == type(pynvml.NVMLError(23)).__name__


def test_the_real_pynvml_without_a_driver_fails_clearly() -> None:
    import pynvml  # a project dependency: its absence is a broken install, not a skip

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(BackendError, match="initialising NVML failed: NVML error"):
        NvmlBackend(pynvml)
