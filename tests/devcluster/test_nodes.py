"""core/v1 Nodes in the stand-in: cluster-scoped list/get/patch of labels, through the Python
client and the real kubectl (``get nodes -L``), which the GPU Operator MIG path relies on."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from devcluster import Handle
from tests.devcluster.conftest import Kubectl


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"nodeInfo": {"kubeletVersion": "v1.33.1"}},
    }


def test_nodes_are_cluster_scoped_and_their_labels_patch(
    devcluster: Handle, dynamic: DynamicClient
) -> None:
    nodes = dynamic.resources.get(api_version="v1", kind="Node")
    assert nodes.namespaced is False
    nodes.create(body=node("gpu-1", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}))
    nodes.create(body=node("gpu-2"))

    nodes.patch(
        name="gpu-1",
        body={"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}},
        content_type="application/merge-patch+json",
    )

    got = nodes.get(name="gpu-1").to_dict()
    assert got["metadata"]["labels"] == {
        "kubernetes.io/hostname": "gpu-1",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/mig.config": "all-balanced",
    }
    selected = nodes.get(label_selector="nvidia.com/mig.config=all-balanced").to_dict()
    assert [n["metadata"]["name"] for n in selected["items"]] == ["gpu-1"]
    # A merge patch never creates a Node.
    with pytest.raises(NotFoundError):
        nodes.patch(
            name="gpu-9",
            body={"metadata": {"labels": {"a": "b"}}},
            content_type="application/merge-patch+json",
        )
    assert [n["metadata"]["name"] for n in nodes.get().to_dict()["items"]] == ["gpu-1", "gpu-2"]


def test_kubectl_shows_the_mig_labels_as_columns(
    devcluster: Handle, dynamic: DynamicClient, kubectl: Kubectl
) -> None:
    nodes = dynamic.resources.get(api_version="v1", kind="Node")
    nodes.create(
        body=node(
            "gpu-1",
            **{
                "nvidia.com/mig.config": "portal-0123456789",
                "nvidia.com/mig.config.state": "success",
            },
        )
    )
    nodes.create(body=node("gpu-2"))
    kubectl("label", "node", "gpu-2", "nvidia.com/mig.config.state=pending")

    out = kubectl(
        "get", "nodes", "-L", "nvidia.com/mig.config,nvidia.com/mig.config.state"
    ).stdout.splitlines()

    assert out[0].split() == ["NAME", "VERSION", "AGE", "MIG.CONFIG", "MIG.CONFIG.STATE"]
    assert out[1].split()[0] == "gpu-1"
    assert out[1].split()[-2:] == ["portal-0123456789", "success"]
    assert out[2].split()[0] == "gpu-2"
    assert out[2].split()[-1] == "pending"
