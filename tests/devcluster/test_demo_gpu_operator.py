"""The demo's stand-ins hold what a GPU Operator install leaves (R25): its namespace, where the
portal pushes the device plugin's time-slicing ConfigMap, and demo-h100's T4 node with its
device plugin pod, which the portal labels and restarts. Installed once, kept on restart."""

from __future__ import annotations

from devcluster import Handle
from devcluster.demo import install_gpu_operator
from devcluster.kueue_sim import Endpoint
from tests.standin import kubectl_json


def test_the_operator_namespace_and_the_t4_node_are_there_once(standin_server: Handle) -> None:
    standin_server.reset()
    endpoint = Endpoint.from_kubeconfig(standin_server.kubeconfig_path)
    install_gpu_operator(endpoint, "demo-h100")
    install_gpu_operator(endpoint, "demo-h100")  # a restart: nothing twice, no error
    install_gpu_operator(endpoint, "demo-a100")  # no shared GPUs there: the namespace only
    node = kubectl_json(standin_server, "get", "node", "t4-node-1")
    assert node["metadata"]["labels"] == {"nvidia.com/gpu.product": "Tesla-T4"}
    pods = kubectl_json(
        standin_server,
        "get",
        "pods",
        "-n",
        "gpu-operator",
        "-l",
        "app=nvidia-device-plugin-daemonset",
    )
    assert [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods["items"]] == [
        ("nvidia-device-plugin-t4-node-1", "t4-node-1")
    ]
    assert [
        n["metadata"]["name"] for n in kubectl_json(standin_server, "get", "nodes")["items"]
    ] == ["t4-node-1"]
