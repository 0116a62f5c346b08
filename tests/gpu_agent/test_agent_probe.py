"""The agent's isolation probe and device-plugin restart: the simulated prober's numbers, the
real prober's skip without CuPy/PyTorch, the probe round in the agent's loop (against the
in-memory portal of test_agent_runner), and the device plugin's pod deleted through the
Kubernetes API of the local stand-in."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_agent.agent.device_plugin import (
    RESTART_FAILED,
    RESTART_NEEDED,
    RESTARTED,
    DevicePluginRestarter,
)
from gpu_agent.agent.probe import KERNEL, CudaProber, ProbeRequest, SimulatedProber
from tests.gpu_agent.test_agent_runner import A100, NODE, FakePortal, fake_node, make_agent
from tests.standin import KUBECTL

H100 = "NVIDIA H100 80GB HBM3"


class ProbingPortal(FakePortal):
    """FakePortal plus the probe endpoints of PROTOCOL.md."""

    def __init__(self) -> None:
        self.probes: dict[int, dict[str, Any]] = {}
        self.probe_results: list[tuple[int, dict[str, Any]]] = []
        super().__init__()

    def handle(self, request: Any, method: str) -> None:
        route = request.path.removeprefix("/api/v1/agent/")
        if method == "GET" and route == "probes/":
            return self._answer(request, {"node": NODE, "probes": list(self.probes.values())})
        found = re.fullmatch(r"probes/(\d+)/result/", route)
        if method == "POST" and found:
            body = json.loads(request.rfile.read(int(request.headers["Content-Length"])))
            probe_id = int(found.group(1))
            self.requests.append((method, request.path))
            self.probe_results.append((probe_id, body))
            if body["state"] != "running":
                self.probes.pop(probe_id, None)
            return self._answer(request, {"id": probe_id, "accepted": True})
        return super().handle(request, method)

    def report_answer(self) -> dict[str, Any]:
        return super().report_answer() | {"probes": len(self.probes)}

    def _answer(self, request: Any, payload: Any) -> None:
        if request.command == "GET":
            self.requests.append(("GET", request.path))
        data = json.dumps(payload).encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


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


def _plugin_pod(name: str, node: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "p", "image": "plugin"}]},
    }


def _create(handle: Any, manifest: dict[str, Any]) -> None:
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(handle.kubeconfig_path), "create", "-f", "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
def plugin_pods(standin_server):
    """The stand-in with the device plugin on gpu-node-1 and gpu-node-2, another pod on -1."""
    standin_server.reset()
    _create(
        standin_server,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
    )
    for name, node, app in (
        ("plugin-a", NODE, "nvidia-device-plugin-daemonset"),
        ("plugin-b", "gpu-node-2", "nvidia-device-plugin-daemonset"),
        ("exporter-a", NODE, "nvidia-dcgm-exporter"),
    ):
        _create(standin_server, _plugin_pod(name, node, app))
    return standin_server


def _pods(handle: Any) -> list[str]:
    from tests.standin import kubectl_json

    listed = kubectl_json(handle, "get", "pods", "-n", "gpu-operator")
    return sorted(p["metadata"]["name"] for p in listed["items"])


def _restarter(handle: Any, node: str = NODE) -> DevicePluginRestarter:
    return DevicePluginRestarter(
        node=node,
        api_server=handle.url,
        token=handle.token,
        ca_file=str(handle.ca_file) if handle.ca_file else None,
    )


def test_the_restart_deletes_only_this_nodes_device_plugin_pod(plugin_pods) -> None:
    outcome = _restarter(plugin_pods).restart()
    assert outcome.state == RESTARTED, outcome.message
    assert outcome.message.startswith("deleted plugin-a in gpu-operator")
    assert _pods(plugin_pods) == ["exporter-a", "plugin-b"]
    none_left = _restarter(plugin_pods).restart()
    assert none_left.state == RESTART_FAILED
    assert "no pod matching app=nvidia-device-plugin-daemonset" in none_left.message
    bad_token = DevicePluginRestarter(node=NODE, api_server=plugin_pods.url, token="wrong")
    refused = bad_token.restart()
    assert refused.state == RESTART_FAILED and "HTTP 401" in refused.message


def test_after_a_change_the_result_says_restart_needed_or_restarted(
    portal: ProbingPortal, tmp_path: Path, plugin_pods
) -> None:
    node = fake_node(tmp_path)
    first, second = node.nvml.gpu_uuids()
    portal.add_layout(first, 1, ("3g.40gb", 0))
    agent, _ = make_agent(portal.url, tmp_path, node)
    assert agent.run(once=True) == 0
    success = portal.results[-1]
    assert (success["state"], success["device_plugin"]) == ("success", RESTART_NEEDED)
    assert "--restart-device-plugin" in success["device_plugin_message"]

    portal.add_layout(first, 2, ("3g.40gb", 0), ("3g.40gb", 4))
    portal.add_layout(second, 1, ("7g.80gb", 0))
    agent, _ = make_agent(portal.url, tmp_path, node, device_plugin=_restarter(plugin_pods))
    assert agent.run(once=True) == 0
    posted = [r for r in portal.results if r["state"] == "success"][1:]
    assert [(r["uuid"], r["device_plugin"]) for r in posted] == [
        (first, RESTARTED),
        (second, RESTARTED),
    ]
    assert _pods(plugin_pods) == ["exporter-a", "plugin-b"]  # one restart for both GPUs
    assert portal.paths().count("POST report/") == 4
