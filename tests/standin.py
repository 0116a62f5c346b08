"""Helpers for tests that push to the local Kubernetes API stand-in (``devcluster/``): kubectl
against it, the A100 GPU quota of team-a's ClusterQueue, and an approved request's outbox row.
The fixtures (``standin_server``, ``standin``) are in ``tests/conftest.py``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve
from devcluster.runner import Handle
from quotas.choices import SyncBackend
from quotas.models import Cluster, SyncOutbox
from tests.approvals.conftest import file, item

KUBECTL = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "kubectl"


def kubectl(handle: Handle, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real kubectl with the stand-in's kubeconfig."""
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(handle.kubeconfig_path), *args],
        check=check,
        capture_output=True,
        text=True,
    )


def kubectl_json(handle: Handle, *args: str) -> Any:
    return json.loads(kubectl(handle, *args, "-o", "json").stdout)


def a100_gpu_quota(cluster_queue: dict[str, Any]) -> dict[str, Any]:
    """The ``nvidia.com/gpu`` entry of the ``a100-80gb`` flavor in a ClusterQueue."""
    for group in cluster_queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                if flavor["name"] == "a100-80gb" and resource["name"] == "nvidia.com/gpu":
                    return dict(resource)
    raise AssertionError("no a100 GPU quota in the ClusterQueue")


def team_a_gpu_nominal(handle: Handle) -> str | None:
    """team-a's guaranteed A100s in the cluster; None while its ClusterQueue is not there."""
    done = kubectl(handle, "get", "clusterqueue", "team-a", "-o", "json", check=False)
    if done.returncode:
        return None
    return str(a100_gpu_quota(json.loads(done.stdout))["nominalQuota"])


def point_at(cluster: Cluster, kubeconfig: Path, **fields: Any) -> None:
    """Push ``cluster``'s quotas to the API server of ``kubeconfig``."""
    Cluster.objects.filter(pk=cluster.pk).update(
        backend=SyncBackend.KUBERNETES, kubeconfig_path=str(kubeconfig), **fields
    )
    cluster.refresh_from_db()


def approved(world: Any, **changes: Any) -> tuple[QuotaChangeRequest, SyncOutbox]:
    """team-a's request on demo-a100 (8/10 unless ``changes``), approved, and the outbox row
    its approval wrote."""
    request = file(world, items=[item(**changes)] if changes else None)
    quota_request_approve(request=request, approver=world.admin)
    request.refresh_from_db()
    row = SyncOutbox.objects.get(
        tenant=world.team_a, cluster=world.a100, generation=request.approved_generation
    )
    return request, row


def refuse_cluster_queues(obj: dict[str, Any]) -> list[str]:
    """A stand-in validator that refuses every ClusterQueue (a server's 422)."""
    return ["spec.resourceGroups: refused by policy"] if obj["kind"] == "ClusterQueue" else []
