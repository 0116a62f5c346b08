"""What a platform team applies to every cluster the portal manages, for tests that push to
the local API stand-in (no Django here: tests/kube uses it too).

``deploy/kubernetes/cluster-access`` holds the portal's roles, the binder it impersonates for its
RoleBinding in each namespace it manages, and the admission policies on its accounts; the demo's
stand-ins hold it (``devcluster.demo.install_cluster_access``). A push writes that RoleBinding as
the binder even with the stand-in's admin token, so a stand-in a test pushes to must hold it.
What goes into the GPU Operator's namespace (its Role for the portal) is left out: that
namespace is the operator's install, which the tests that need it make themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcluster.demo import cluster_access_objects
from devcluster.kueue_sim import Endpoint

GPU_OPERATOR_NAMESPACE = "gpu-operator"


def _collection(obj: dict[str, Any]) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
    namespace = obj["metadata"].get("namespace")
    return f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"


def hold_cluster_access(handle: Any) -> Any:
    """``handle`` (a stand-in's, anything with a ``kubeconfig_path``) with cluster-access
    server-side applied (the portal's namespace created first); returned, for fixtures."""
    endpoint = Endpoint.from_kubeconfig(Path(handle.kubeconfig_path))
    objects = [
        o
        for o in cluster_access_objects()
        if o["metadata"].get("namespace") != GPU_OPERATOR_NAMESPACE
    ]
    for namespace in sorted({o["metadata"].get("namespace") for o in objects} - {None}):
        if not endpoint.exists(f"/api/v1/namespaces/{namespace}"):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            endpoint.call("POST", "/api/v1/namespaces", body, "application/json")
    for obj in objects:
        name = obj["metadata"]["name"]
        path = f"{_collection(obj)}/{name}?fieldManager=cluster-access&force=true"
        endpoint.call("PATCH", path, obj, "application/apply-patch+yaml")
    return handle
