"""devcluster: a local Kubernetes API server stand-in, for development and tests only.

Never for production. It keeps objects in memory (optionally in a JSON file), authenticates
(tokens, impersonation) and authorizes (RBAC) requests, runs no scheduler and few controllers
(quota status, ClusterRole aggregation, garbage collection), and speaks enough of the
Kubernetes API conventions (discovery, CRUD, merge patch, server-side apply, status
subresources, Status errors) for kubectl, the official Python client and the portal's applier. It imports nothing from Django. See ``devcluster/README.md``.

    python -m devcluster --port 0 --state-dir .data/devcluster --kubeconfig .data/kubeconfig

    handle = start_in_thread(kubeconfig_path=tmp_path / "kubeconfig")
    ...
    handle.stop()
"""

from devcluster.objects import accept_everything
from devcluster.runner import Handle, ProcessHandle, start_in_subprocess, start_in_thread
from devcluster.server import DevCluster

__all__ = [
    "DevCluster",
    "Handle",
    "ProcessHandle",
    "accept_everything",
    "start_in_subprocess",
    "start_in_thread",
]
