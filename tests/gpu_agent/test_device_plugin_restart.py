"""The agent's device-plugin restart against the Kubernetes API of the local stand-in
(devcluster): only this node's device plugin pod is deleted, and after a MIG change the
result says restart needed, or restarted (the agent of gpu_node_agent.testing.portal)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_node_agent.device_plugin import (
    RESTART_FAILED,
    RESTART_NEEDED,
    RESTARTED,
    DevicePluginRestarter,
)
from gpu_node_agent.testing.portal import NODE, ProbingPortal, fake_node, make_agent
from tests.standin import KUBECTL


@pytest.fixture
def portal() -> Iterator[ProbingPortal]:
    server = ProbingPortal()
    yield server
    server.close()


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
