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

from devcluster.demo import install_cluster_access
from devcluster.kueue_sim import Endpoint

GPU_OPERATOR_NAMESPACE = "gpu-operator"


def hold_cluster_access(handle: Any) -> Any:
    """``handle`` (a stand-in's, anything with a ``kubeconfig_path``) with cluster-access
    server-side applied (the portal's namespace created first); returned, for fixtures."""
    endpoint = Endpoint.from_kubeconfig(Path(handle.kubeconfig_path))
    install_cluster_access(
        endpoint, leave_out=frozenset({GPU_OPERATOR_NAMESPACE}), manager="cluster-access"
    )
    return handle
