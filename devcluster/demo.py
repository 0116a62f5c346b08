"""The demo's clusters: one stand-in per named cluster, beside the portal (``make run``).

Development infrastructure, never for production. Each cluster gets its own API server
process (a tenant's ClusterQueue is named after the tenant, so two clusters cannot share one),
its kubeconfig at ``RUN_DIR/<name>.kubeconfig`` (what the portal's Cluster rows point at) and
a context in ``RUN_DIR/kubeconfig``, so that a user sees an approval land with::

    kubectl --kubeconfig .run/kubeconfig get clusterqueues,resourcequotas -A
    kubectl --kubeconfig .run/kubeconfig --context demo-h100 get queues

Objects are kept under the state directory, so a restart keeps what was applied. Every
``--kueue-every`` seconds the ClusterQueues get the status Kueue would write
(``devcluster.kueue_sim``: team-a near its limit, the others a daily rhythm), so the portal's
collector, dashboards and alerts have live use to read.

    python -m devcluster.demo --run-dir .run --state-dir .data/devcluster demo-a100 demo-h100
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from devcluster.kueue_sim import Endpoint, simulate_once
from devcluster.runner import ProcessHandle, start_in_subprocess

logger = logging.getLogger("devcluster.demo")


def merged_kubeconfig(files: dict[str, Path]) -> dict[str, Any]:
    """One kubeconfig with a context per cluster (named after it); the first is current."""
    clusters, users, contexts = [], [], []
    for name, path in files.items():
        config = yaml.safe_load(path.read_text())
        clusters.append({"name": name, "cluster": config["clusters"][0]["cluster"]})
        users.append({"name": name, "user": config["users"][0]["user"]})
        contexts.append({"name": name, "context": {"cluster": name, "user": name}})
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "users": users,
        "contexts": contexts,
        "current-context": next(iter(files)),
        "preferences": {},
    }


# What a Kueue install leaves on a cluster that the portal reads: the manager's configuration
# (the demo's Kueue manages Jobs, plain pods, Deployments and StatefulSets that carry a queue
# name; see README "No way around a tenant's limit"), and counts a vGPU pod's GPU memory and
# compute times its vGPUs (Kueue's "Using HAMi": docs/administer/vgpu-hami.md).
KUEUE_CONFIG = """apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: false
integrations:
  frameworks: ["batch/job", "pod", "deployment", "statefulset"]
resources:
  transformations:
  - input: nvidia.com/gpumem
    strategy: Replace
    multiplyBy: nvidia.com/gpu
    outputs:
      nvidia.com/total-gpumem: "1"
  - input: nvidia.com/gpucores
    strategy: Replace
    multiplyBy: nvidia.com/gpu
    outputs:
      nvidia.com/total-gpucores: "1"
"""


# demo-h100's Kueue shares unused GPUs fairly, by weight and by recent use (the portal's demo
# asks for "usage" there); demo-a100's does not, so its page says Kueue there lacks it.
KUEUE_FAIR_SHARING = """fairSharing:
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
admissionFairSharing:
  usageHalfLifeTime: 168h
  usageSamplingInterval: 5m
"""
FAIR_SHARING_CLUSTERS = ("demo-h100",)


def install_kueue_config(endpoint: Endpoint, cluster: str = "") -> None:
    """Namespace ``kueue-system`` and ConfigMap ``kueue-manager-config`` where missing (a
    restart keeps what the state directory holds, an edit included); with fair sharing on the
    clusters of ``FAIR_SHARING_CLUSTERS``."""
    text = KUEUE_CONFIG + (KUEUE_FAIR_SHARING if cluster in FAIR_SHARING_CLUSTERS else "")
    if not endpoint.exists("/api/v1/namespaces/kueue-system"):
        endpoint.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
            "application/json",
        )
    path = "/api/v1/namespaces/kueue-system/configmaps"
    if not endpoint.exists(f"{path}/kueue-manager-config"):
        endpoint.call(
            "POST",
            path,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
                "data": {"controller_manager_config.yaml": text},
            },
            "application/json",
        )


# What the GPU Operator's install leaves that the portal writes into or reads: its namespace
# (the device plugin's time-slicing ConfigMap goes there), and per cluster the GPU nodes of a
# time-sliced flavor, with the device plugin's pod (``manage.py demo``: demo-h100's T4, shared
# 10 ways). The portal labels such a node with its sharing config; it never creates a Node.
OPERATOR_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_LABELS = {"app": "nvidia-device-plugin-daemonset"}
SHARED_GPU_NODES: dict[str, list[tuple[str, dict[str, str]]]] = {
    "demo-h100": [("t4-node-1", {"nvidia.com/gpu.product": "Tesla-T4"})],
}


def install_gpu_operator(endpoint: Endpoint, cluster: str) -> None:
    """Namespace ``gpu-operator``, and ``cluster``'s time-sliced GPU nodes with their device
    plugin pods, where missing."""
    if not endpoint.exists(f"/api/v1/namespaces/{OPERATOR_NAMESPACE}"):
        endpoint.call(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
            "application/json",
        )
    for node, labels in SHARED_GPU_NODES.get(cluster, []):
        if not endpoint.exists(f"/api/v1/nodes/{node}"):
            endpoint.call(
                "POST",
                "/api/v1/nodes",
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}},
                "application/json",
            )
        pod = f"nvidia-device-plugin-{node}"
        pods = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods"
        if not endpoint.exists(f"{pods}/{pod}"):
            endpoint.call(
                "POST",
                pods,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": pod,
                        "namespace": OPERATOR_NAMESPACE,
                        "labels": DEVICE_PLUGIN_LABELS,
                    },
                    "spec": {
                        "nodeName": node,
                        "containers": [
                            {
                                "name": "nvidia-device-plugin",
                                "image": "nvcr.io/nvidia/k8s-device-plugin",
                            }
                        ],
                    },
                },
                "application/json",
            )


# What HAMi's Helm chart leaves that the portal reads (``helm install hami hami-charts/hami -n
# kube-system``): its scheduler Deployment, labelled with the chart's appVersion. The portal's
# push reads the version from it; a vGPU flavor is usable only with HAMi 2.7 or later
# (``quotas.vgpu.hami_problem``), so every demo cluster runs a current one.
HAMI_VERSION = "v2.8.0"


def hami_deployment(version: str = HAMI_VERSION) -> dict[str, Any]:
    """kube-system/hami-scheduler as HAMi's chart names and labels it (no pods: the stand-in
    runs no controllers)."""
    selector = {"app.kubernetes.io/component": "hami-scheduler", "app.kubernetes.io/name": "hami"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "hami-scheduler",
            "namespace": "kube-system",
            "labels": {
                **selector,
                "app.kubernetes.io/instance": "hami",
                "app.kubernetes.io/version": version,
            },
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "schedulerName": "default-scheduler",
                    "containers": [
                        {"name": "kube-scheduler", "image": "registry.k8s.io/kube-scheduler"},
                        {
                            "name": "vgpu-scheduler-extender",
                            "image": f"docker.io/projecthami/hami:{version}",
                        },
                    ],
                },
            },
        },
    }


def install_hami(endpoint: Endpoint, version: str = HAMI_VERSION) -> None:
    """HAMi's scheduler Deployment (``hami_deployment``) where missing: a restart keeps what
    the state directory holds, an edit included (an admin trying an older HAMi)."""
    path = "/apis/apps/v1/namespaces/kube-system/deployments"
    if not endpoint.exists(f"{path}/hami-scheduler"):
        endpoint.call("POST", path, hami_deployment(version), "application/json")


# The storage classes every demo cluster offers (R3): fast NVMe volumes provisioned with
# IOPS and throughput (AWS EBS gp3's parameters, as docs/storage.md lists them), and the
# default class. The portal's demo seed describes each as a storage flavor; a tenant whose
# quota does not name one is refused its claims by the namespace quota.
STORAGE_CLASSES: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "fast-nvme"},
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "iops": "16000", "throughput": "1000"},
        "volumeBindingMode": "WaitForFirstConsumer",
    },
    {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "standard",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3"},
        "volumeBindingMode": "WaitForFirstConsumer",
    },
)


def install_storage_classes(endpoint: Endpoint) -> None:
    """``STORAGE_CLASSES`` where missing."""
    for storage_class in STORAGE_CLASSES:
        name = storage_class["metadata"]["name"]
        if not endpoint.exists(f"/apis/storage.k8s.io/v1/storageclasses/{name}"):
            endpoint.call(
                "POST", "/apis/storage.k8s.io/v1/storageclasses", storage_class, "application/json"
            )


# What a platform team applies to a managed cluster for the portal (docs/rbac.md): its roles,
# the bindings and the admission policies that confine its account, from
# deploy/kubernetes/cluster-access as kustomize builds it (the listed files with the
# kustomization's labels). The demo's portal pushes with the stand-in's admin token, so these
# do not limit it; they make the portal's account answer as it would on a real cluster:
#   kubectl --kubeconfig .run/kubeconfig --as system:serviceaccount:gpu-quota-portal:gpu-quota-portal \
#     auth can-i create rolebindings -n kube-system        (no)
CLUSTER_ACCESS_DIR = (
    Path(__file__).resolve().parents[1] / "deploy" / "kubernetes" / "cluster-access"
)


def cluster_access_objects(directory: Path = CLUSTER_ACCESS_DIR) -> list[dict[str, Any]]:
    """The objects of ``directory``'s kustomization: its ``resources`` files, every document
    with the kustomization's ``labels`` pairs added (what ``kubectl kustomize`` prints)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    labels: dict[str, str] = {}
    for entry in kustomization.get("labels") or []:
        labels.update(entry.get("pairs") or {})
    objects = []
    for name in kustomization.get("resources") or []:
        for document in yaml.safe_load_all((directory / name).read_text()):
            if not document:
                continue
            metadata = document.setdefault("metadata", {})
            metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
            objects.append(document)
    return objects


def _collection(obj: dict[str, Any]) -> str:
    """The collection path of ``obj``'s kind (the kinds cluster-access holds)."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
    namespace = obj["metadata"].get("namespace")
    return f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"


def install_cluster_access(
    endpoint: Endpoint, *, leave_out: frozenset[str] = frozenset(), manager: str = "devcluster-demo"
) -> None:
    """The portal's roles, bindings and confining policies (``cluster_access_objects``, but
    those in the namespaces ``leave_out`` names), server-side applied (an edit in the
    repository reaches a restarted demo), with the namespaces they name created where
    missing."""
    objects = [
        o for o in cluster_access_objects() if o["metadata"].get("namespace") not in leave_out
    ]
    for namespace in sorted({o["metadata"].get("namespace") for o in objects} - {None}):
        if not endpoint.exists(f"/api/v1/namespaces/{namespace}"):
            endpoint.call(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                "application/json",
            )
    for obj in objects:
        path = f"{_collection(obj)}/{obj['metadata']['name']}?fieldManager={manager}&force=true"
        endpoint.call("PATCH", path, obj, "application/apply-patch+yaml")


# The teams whose people's jobs the demo submits on every cluster (kueue_sim.TEAM_JOBS).
DEMO_TEAMS = ("team-a",)


def _simulate(
    endpoints: dict[str, Endpoint], hot: list[str], idle: str | None, started: datetime
) -> None:
    """One round of what Kueue would write (``devcluster.kueue_sim``); ``idle``'s notebook on
    the first cluster only. A failure is logged and the next round tries again."""
    now = datetime.now(UTC)
    for index, (name, endpoint) in enumerate(endpoints.items()):
        try:
            simulate_once(
                endpoint, now, hot, idle if index == 0 else None, started, teams=DEMO_TEAMS
            )
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("%s: ClusterQueue status not written: %s", name, exc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.demo", description=__doc__)
    parser.add_argument("--run-dir", type=Path, default=Path(".run"))
    parser.add_argument("--state-dir", type=Path, default=Path(".data/devcluster"))
    parser.add_argument(
        "--kueue-every",
        type=float,
        default=20.0,
        help="seconds between ClusterQueue status updates (devcluster.kueue_sim); 0: none",
    )
    parser.add_argument(
        "--hot",
        action="append",
        default=None,
        help="a ClusterQueue kept near its limit (repeatable; default team-a)",
    )
    parser.add_argument(
        "--idle",
        default="team-b",
        help="a tenant given an idle notebook Workload on the first cluster ('' for none)",
    )
    parser.add_argument("clusters", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    args.run_dir.mkdir(parents=True, exist_ok=True)
    handles: list[ProcessHandle] = []
    files: dict[str, Path] = {}
    try:
        for name in args.clusters:
            files[name] = args.run_dir / f"{name}.kubeconfig"
            handles.append(
                start_in_subprocess(kubeconfig_path=files[name], state_dir=args.state_dir / name)
            )
            logger.warning(
                "%s: local API stand-in at %s (not for production)", name, handles[-1].url
            )
        merged = args.run_dir / "kubeconfig"
        merged.write_text(yaml.safe_dump(merged_kubeconfig(files), sort_keys=False))
        merged.chmod(0o600)
        print(
            f"devcluster demo ready: kubectl --kubeconfig {merged} get clusterqueues -A", flush=True
        )
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        endpoints = {name: Endpoint.from_kubeconfig(path) for name, path in files.items()}
        for name, endpoint in endpoints.items():
            install_kueue_config(endpoint, name)
            install_gpu_operator(endpoint, name)
            install_hami(endpoint)
            install_storage_classes(endpoint)
            install_cluster_access(endpoint)
        hot = args.hot if args.hot is not None else ["team-a"]
        started = datetime.now(UTC)
        next_status = 0.0
        while not stop.wait(1):
            for handle, name in zip(handles, args.clusters, strict=True):
                if handle.process.poll() is not None:
                    logger.error("%s stand-in exited with %s", name, handle.process.returncode)
                    return 1
            if args.kueue_every > 0 and time.monotonic() >= next_status:
                next_status = time.monotonic() + args.kueue_every
                _simulate(endpoints, hot, args.idle or None, started)
        return 0
    finally:
        for handle in handles:
            handle.stop()


if __name__ == "__main__":
    raise SystemExit(main())
