"""The agent's isolation probe: the simulated prober's numbers, the real prober's skip without
CuPy/PyTorch, and the probe round in the agent's loop (against the in-memory portal of
gpu_node_agent.testing.portal). The device-plugin restart, which needs a Kubernetes API, is
tested against the local stand-in in tests/gpu_agent/test_device_plugin_restart.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_node_agent.probe import KERNEL, CudaProber, ProbeRequest, SimulatedProber
from gpu_node_agent.testing.portal import A100, NODE, ProbingPortal, fake_node, make_agent

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def portal():
    server = ProbingPortal()
    yield server
    server.close()


def _mig_node(tmp_path: Path) -> tuple[Any, str, int, int]:
    node = fake_node(tmp_path, f"{A100}:1,{H100}:1:nomig")
    ids = []
    for profile, start in (("3g.40gb", 0), ("3g.40gb", 4)):
        created = node.backend.create_gpu_instance(0, profile, start)
        node.backend.create_compute_instance(0, created.gi_id)
        ids.append(created.gi_id)
    return node, node.nvml.gpu_uuids()[0], ids[0], ids[1]


# -- the simulated prober --------------------------------------------------------------------------


def test_simulated_mig_instances_are_isolated_and_time_slicing_is_not(tmp_path: Path) -> None:
    node, uuid, target, neighbour = _mig_node(tmp_path)
    plain_uuid = node.nvml.gpu_uuids()[1]
    prober = SimulatedProber(seed=NODE)
    mig = [
        prober.run(node.backend, ProbeRequest(i, uuid, True, target, neighbour)) for i in range(20)
    ]
    shared = [
        prober.run(node.backend, ProbeRequest(i, plain_uuid, False, None, None)) for i in range(20)
    ]
    for outcome in mig + shared:
        assert outcome.state == "done" and outcome.simulated and outcome.library == "simulated"
        assert "simulated" in outcome.message
    mig_slowdowns = [o.slowdown_pct for o in mig]
    shared_slowdowns = [o.slowdown_pct for o in shared]
    assert all(s is not None and 0 <= s <= 3.01 for s in mig_slowdowns)
    assert all(s is not None and 39.99 <= s <= 100.01 for s in shared_slowdowns)
    assert len(set(mig_slowdowns)) > 10  # noise, not a constant
    again = SimulatedProber(seed=NODE).run(
        node.backend, ProbeRequest(3, uuid, True, target, neighbour)
    )
    assert again == mig[3]  # seeded: the same probe gives the same numbers


def test_a_probe_of_instances_that_are_gone_fails_saying_which(tmp_path: Path) -> None:
    node, uuid, target, _ = _mig_node(tmp_path)
    outcome = SimulatedProber().run(node.backend, ProbeRequest(1, uuid, True, target, 99))
    assert outcome.state == "failed"
    assert outcome.message == f"GPU instance 99 is no longer on GPU {uuid}; ask for a new probe"
    wrong_mode = SimulatedProber().run(node.backend, ProbeRequest(2, uuid, False, None, None))
    assert wrong_mode.state == "failed" and "MIG mode on now" in wrong_mode.message


# -- the real prober without a GPU library -----------------------------------------------------------


def test_without_cupy_or_pytorch_the_probe_is_skipped_saying_so(tmp_path: Path) -> None:
    node, uuid, target, neighbour = _mig_node(tmp_path)
    outcome = CudaProber(library="").run(
        node.backend, ProbeRequest(1, uuid, True, target, neighbour)
    )
    assert outcome.state == "skipped"
    assert outcome.message.startswith("neither CuPy nor PyTorch can be imported by ")
    assert outcome.t_alone_s is None and not outcome.simulated


def test_the_real_prober_names_mig_devices_for_cuda_visible_devices(tmp_path: Path) -> None:
    node, _, target, neighbour = _mig_node(tmp_path)
    uuids = node.backend.mig_device_uuids(0)
    assert set(uuids) == {target, neighbour}
    assert all(u.startswith("MIG-") for u in uuids.values())
    assert len(set(uuids.values())) == 2


@pytest.mark.skipif(
    any(importlib.util.find_spec(n) for n in ("cupy", "torch")), reason="a GPU library is here"
)
def test_the_kernel_exits_3_when_no_library_imports() -> None:
    done = subprocess.run(
        [sys.executable, str(KERNEL), "--role", "target"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3
    assert "neither CuPy nor PyTorch" in done.stderr


# -- in the agent's loop ---------------------------------------------------------------------------


def test_the_agent_runs_the_probes_its_report_announces(
    portal: ProbingPortal, tmp_path: Path
) -> None:
    node, uuid, target, neighbour = _mig_node(tmp_path)
    portal.probes[7] = {
        "id": 7,
        "uuid": uuid,
        "mig": True,
        "target_gi_id": target,
        "neighbour_gi_id": neighbour,
        "state": "requested",
    }
    agent, _ = make_agent(portal.url, tmp_path, node, prober=SimulatedProber(seed=NODE))
    assert agent.run(once=True) == 0
    assert portal.paths() == [
        "POST report/",
        "GET probes/",
        "POST probes/7/result/",
        "POST probes/7/result/",
    ]
    (_, running), (_, done) = portal.probe_results
    assert running["state"] == "running"
    assert done["state"] == "done" and done["simulated"] is True
    assert 0 <= (done["t_together_s"] / done["t_alone_s"] - 1) * 100 <= 3.01
    assert agent.run(once=True) == 0  # nothing announced: no probe call
    assert portal.paths()[-1] == "POST report/"


# -- the device plugin -------------------------------------------------------------------------------
