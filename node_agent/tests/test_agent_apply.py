"""Applying desired layouts through the NVML backend over the simulated NVML: only the
instances that differ change, a busy one is never destroyed, MIG mode changes wait for a reset,
and a second run changes nothing."""

from __future__ import annotations

import pytest

from gpu_node_agent.apply import (
    ACTION_CREATE_CI,
    ACTION_CREATE_GI,
    ACTION_DESTROY_CI,
    ACTION_DESTROY_GI,
    ACTION_SET_MIG_MODE,
    OUTCOME_CHANGE,
    OUTCOME_FAILED,
    OUTCOME_NOTHING,
    OUTCOME_REBOOT_REQUIRED,
    STATE_FAILED,
    STATE_REBOOT_REQUIRED,
    STATE_SUCCESS,
    DesiredGpu,
    DesiredInstance,
    DesiredLayoutError,
    apply_gpu,
    format_plan,
    plan_gpu,
)
from gpu_node_agent.backend import ERROR_INSUFFICIENT_RESOURCES, BackendError
from gpu_node_agent.nvml import NvmlBackend
from gpu_node_agent.testing.simnvml import SimulatedNvml

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture(params=[A100, H100])
def sim(request: pytest.FixtureRequest) -> SimulatedNvml:
    """GPU 0 with MIG on, GPU 1 with MIG off."""
    return SimulatedNvml([request.param, (request.param, False)])


@pytest.fixture
def backend(sim: SimulatedNvml) -> NvmlBackend:
    return NvmlBackend(sim)


def desired(
    sim: SimulatedNvml, gpu: int, generation: int, *pairs: tuple[str, int], mig: bool = True
) -> DesiredGpu:
    instances = tuple(DesiredInstance(profile, start) for profile, start in pairs)
    return DesiredGpu(sim.gpu_uuids()[gpu], generation, mig, instances)


def layout(backend: NvmlBackend, gpu: int = 0) -> list[tuple[str, int]]:
    return [(i.profile, i.start) for i in backend.list_gpu_instances(gpu)]


def make(backend: NvmlBackend, profile: str, start: int) -> int:
    created = backend.create_gpu_instance(0, profile, start)
    backend.create_compute_instance(0, created.gi_id)
    return created.gi_id


def test_an_empty_gpu_gets_the_layout(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    wanted = desired(sim, 0, 1, ("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))
    result = apply_gpu(backend, wanted)
    assert (result.state, result.message) == (
        STATE_SUCCESS,
        "created 3, destroyed 0, kept 0 GPU instances",
    )
    assert result.attempted_changes
    assert layout(backend) == [("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)]
    assert all(len(i.ci_ids) == 1 for i in backend.list_gpu_instances(0))


def test_only_the_instances_that_differ_change(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    kept_id = make(backend, "3g.40gb", 0)
    replaced_id = make(backend, "3g.40gb", 4)
    pid = sim.start_process(0, gi_id=kept_id, used_memory_mib=900)
    result = apply_gpu(backend, desired(sim, 0, 2, ("3g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6)))
    assert result.state == STATE_SUCCESS, result.message
    assert result.message == "created 2, destroyed 1, kept 1 GPU instance"
    instances = {i.start: i for i in backend.list_gpu_instances(0)}
    assert sorted(instances) == [0, 4, 6]
    # The kept instance is the same GPU instance, still running its process.
    assert instances[0].gi_id == kept_id
    assert [p.pid for p in instances[0].processes] == [pid]
    assert instances[4].profile == "2g.20gb"  # where the other 3g.40gb was
    assert replaced_id not in {instances[0].gi_id, instances[6].gi_id}


def test_a_busy_instance_is_never_destroyed(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    make(backend, "3g.40gb", 0)
    busy_id = make(backend, "3g.40gb", 4)
    pid = sim.start_process(0, gi_id=busy_id, pod_uid="6b1c0a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21")
    before = backend.list_gpu_instances(0)
    wanted = desired(sim, 0, 3, ("7g.80gb", 0))
    plan = plan_gpu(backend, wanted, pod_uid_for_pid=sim.pod_uid_for_pid)
    assert plan.outcome == OUTCOME_FAILED and plan.steps == []
    result = apply_gpu(backend, wanted, pod_uid_for_pid=sim.pod_uid_for_pid)
    assert result.state == STATE_FAILED
    assert result.message.startswith(f"busy: pid {pid} (pod 6b1c0a4e-1f2d-4c3b-9a8e-7d6c5b4a3f21)")
    assert f"on GPU instance {busy_id} (3g.40gb at slice 4)" in result.message
    assert not result.attempted_changes
    # Nothing changed on that GPU, not even the idle instance the layout would also replace.
    assert backend.list_gpu_instances(0) == before


def test_a_second_run_changes_nothing(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    wanted = desired(sim, 0, 1, ("4g.40gb", 0), ("1g.10gb+me", 4), ("1g.20gb", 6))
    assert apply_gpu(backend, wanted).state == STATE_SUCCESS
    ids = [i.gi_id for i in backend.list_gpu_instances(0)]
    plan = plan_gpu(backend, wanted)
    assert (plan.outcome, plan.steps) == (OUTCOME_NOTHING, [])
    again = apply_gpu(backend, wanted)
    assert (again.state, again.message, again.attempted_changes) == (
        STATE_SUCCESS,
        "already applied (3 GPU instances)",
        False,
    )
    assert [i.gi_id for i in backend.list_gpu_instances(0)] == ids


def test_enabling_mig_needs_a_reset(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    wanted = desired(sim, 1, 1, ("7g.80gb", 0))
    plan = plan_gpu(backend, wanted)
    assert [s.action for s in plan.steps] == [ACTION_SET_MIG_MODE]
    result = apply_gpu(backend, wanted)
    assert result.state == STATE_REBOOT_REQUIRED
    assert "MIG mode on is pending" in result.message
    gpu = backend.list_gpus()[1]
    assert (gpu.mig_mode_current, gpu.mig_mode_pending) == (False, True)
    # Until the reset, a re-run does nothing and says the same.
    assert plan_gpu(backend, wanted).outcome == OUTCOME_REBOOT_REQUIRED
    assert apply_gpu(backend, wanted).state == STATE_REBOOT_REQUIRED
    sim.reset_gpu(1)
    after = apply_gpu(backend, wanted)
    assert after.state == STATE_SUCCESS, after.message
    assert layout(backend, 1) == [("7g.80gb", 0)]


def test_disabling_mig_destroys_idle_instances_then_needs_a_reset(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    gi_id = make(backend, "3g.40gb", 0)
    pid = sim.start_process(0, gi_id=gi_id)
    off = desired(sim, 0, 5, mig=False)
    refused = apply_gpu(backend, off)
    assert refused.state == STATE_FAILED
    assert refused.message.startswith(f"busy: pid {pid}")
    assert "MIG mode can only change on an idle GPU" in refused.message
    sim.stop_process(pid)
    plan = plan_gpu(backend, off)
    assert [s.action for s in plan.steps] == [
        ACTION_DESTROY_CI,
        ACTION_DESTROY_GI,
        ACTION_SET_MIG_MODE,
    ]
    result = apply_gpu(backend, off)
    assert result.state == STATE_REBOOT_REQUIRED
    assert backend.list_gpu_instances(0) == []
    sim.reset_gpu(0)
    assert apply_gpu(backend, off).state == STATE_SUCCESS


def test_a_layout_that_breaks_the_rules_changes_nothing(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    make(backend, "1g.10gb", 0)
    before = backend.list_gpu_instances(0)
    for pairs, expected in (
        ((("3g.40gb", 0), ("4g.40gb", 0)), "overlaps"),
        ((("3g.40gb", 2),), "can start only at slice 0 or 4"),
        ((("3g.20gb", 0),), "does not offer MIG profile 3g.20gb"),
        ((("1g.10gb+me", 0), ("1g.10gb+me", 1)), "+me"),
    ):
        result = apply_gpu(backend, desired(sim, 0, 7, *pairs))
        assert result.state == STATE_FAILED, pairs
        assert expected in result.message, (pairs, result.message)
        assert backend.list_gpu_instances(0) == before


def test_an_unknown_gpu_or_instances_without_mig(backend: NvmlBackend, sim: SimulatedNvml) -> None:
    stranger = DesiredGpu("GPU-00000000-0000-0000-0000-000000000000", 1, True, ())
    result = apply_gpu(backend, stranger)
    assert (result.state, result.message) == (
        STATE_FAILED,
        "no GPU with UUID GPU-00000000-0000-0000-0000-000000000000 on this node",
    )
    odd = desired(sim, 1, 1, ("1g.10gb", 0), mig=False)
    assert apply_gpu(backend, odd).state == STATE_FAILED
    assert apply_gpu(backend, desired(sim, 1, 1, mig=False)).state == STATE_SUCCESS


def test_a_kept_instance_without_a_compute_instance_gets_one(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    bare = backend.create_gpu_instance(0, "2g.20gb", 0)
    plan = plan_gpu(backend, desired(sim, 0, 1, ("2g.20gb", 0)))
    assert [(s.action, s.gi_id) for s in plan.steps] == [(ACTION_CREATE_CI, bare.gi_id)]
    assert apply_gpu(backend, desired(sim, 0, 1, ("2g.20gb", 0))).state == STATE_SUCCESS
    (instance,) = backend.list_gpu_instances(0)
    assert (instance.gi_id, len(instance.ci_ids)) == (bare.gi_id, 1)


def test_the_plan_prints_in_protocol_order_without_changing_anything(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    make(backend, "3g.40gb", 0)
    old = make(backend, "3g.40gb", 4)
    before = backend.list_gpu_instances(0)
    plan = plan_gpu(backend, desired(sim, 0, 9, ("3g.40gb", 0), ("1g.10gb", 4), ("2g.20gb", 4)))
    assert plan.outcome == OUTCOME_FAILED  # 1g at 4 and 2g at 4 overlap
    plan = plan_gpu(backend, desired(sim, 0, 9, ("3g.40gb", 0), ("1g.10gb", 6), ("2g.20gb", 4)))
    assert plan.outcome == OUTCOME_CHANGE
    assert [s.action for s in plan.steps] == [
        ACTION_DESTROY_CI,
        ACTION_DESTROY_GI,
        ACTION_CREATE_GI,
        ACTION_CREATE_GI,
        ACTION_CREATE_CI,
        ACTION_CREATE_CI,
    ]
    text = format_plan(plan)
    assert "keep GPU instance" in text and "(3g.40gb at slice 0)" in text
    assert f"1. destroy compute instance 0 of GPU instance {old} (3g.40gb at slice 4)" in text
    assert f"2. destroy GPU instance {old} (3g.40gb at slice 4)" in text
    assert "3. create GPU instance 2g.20gb at slice 4" in text
    assert "4. create GPU instance 1g.10gb at slice 6" in text
    assert backend.list_gpu_instances(0) == before


def test_a_failing_step_is_reported_with_what_was_done(sim: SimulatedNvml) -> None:
    class RefusingComputeInstances(NvmlBackend):
        def create_compute_instance(self, gpu_index: int, gi_id: int) -> int:
            raise BackendError(ERROR_INSUFFICIENT_RESOURCES, "no compute instance today")

    backend = RefusingComputeInstances(sim)
    result = apply_gpu(backend, desired(sim, 0, 4, ("7g.80gb", 0)))
    assert result.state == STATE_FAILED and result.attempted_changes
    assert result.message == (
        "create a full compute instance in the new 7g.80gb at slice 0: no compute instance "
        "today (done before it: create GPU instance 7g.80gb at slice 0)"
    )


def test_desired_layouts_parse_from_the_protocols_json() -> None:
    parsed = DesiredGpu.from_json(
        {
            "uuid": "GPU-1",
            "generation": 4,
            "mig_enabled": True,
            "instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb", "start": 4}],
        }
    )
    assert parsed.instances == (DesiredInstance("3g.40gb", 0), DesiredInstance("1g.10gb", 4))
    assert DesiredGpu.from_json(parsed.to_json()) == parsed
    for bad in ({"uuid": "GPU-1"}, {"uuid": "GPU-1", "generation": "4"}, []):
        with pytest.raises(DesiredLayoutError):
            DesiredGpu.from_json(bad)


def test_instances_without_a_start_are_placed_by_the_catalogue_rules(
    backend: NvmlBackend, sim: SimulatedNvml
) -> None:
    wanted = DesiredGpu(
        sim.gpu_uuids()[0], 1, True, (DesiredInstance("3g.40gb"), DesiredInstance("4g.40gb"))
    )
    assert apply_gpu(backend, wanted).state == STATE_SUCCESS
    assert sorted(layout(backend)) == [("3g.40gb", 4), ("4g.40gb", 0)]
