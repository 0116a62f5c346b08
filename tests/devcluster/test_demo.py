"""``python -m devcluster.demo`` (what ``make run`` starts): a stand-in per cluster, one merged
kubeconfig with a context each, and ClusterQueue status written as Kueue would, read back with
the real kubectl; SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.standin import KUBECTL

QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {"name": "team-a"},
    "spec": {
        "cohortName": "demo",
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "a100-80gb",
                        "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": "6", "borrowingLimit": "4"}
                        ],
                    }
                ],
            }
        ],
    },
}


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_demo_clusters_get_kueue_status_and_stop_on_sigterm(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [sys.executable, "-m", "devcluster.demo", "--run-dir", str(run_dir),
         "--state-dir", str(tmp_path / "state"), "--kueue-every", "0.5", "one", "two"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        merged = run_dir / "kubeconfig"
        deadline = time.monotonic() + 60
        while not merged.exists() and time.monotonic() < deadline:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            time.sleep(0.2)
        contexts = [c["name"] for c in yaml.safe_load(merged.read_text())["contexts"]]
        assert contexts == ["one", "two"]

        _kubectl(merged, "--context", "two", "apply", "-f", "-", stdin=json.dumps(QUEUE))
        status: dict = {}
        while time.monotonic() < deadline and not status.get("flavorsUsage"):
            time.sleep(0.3)
            got = _kubectl(
                merged, "--context", "two", "get", "clusterqueue", "team-a", "-o", "json"
            )
            status = json.loads(got).get("status") or {}
        (gpu,) = status["flavorsUsage"][0]["resources"]
        # team-a is the demo's hot tenant: 88-93% of a limit of 10.
        assert gpu["name"] == "nvidia.com/gpu" and gpu["total"] in ("8", "9")
        assert int(gpu["borrowed"]) == int(gpu["total"]) - 6
        # The other cluster has no ClusterQueue: nothing written there, and no error either.
        assert _kubectl(merged, "--context", "one", "get", "clusterqueues", "-o", "name") == ""
        # Each has Kueue's manager configuration where a Kueue install keeps it.
        for context in ("one", "two"):
            config = json.loads(
                _kubectl(
                    merged,
                    "--context",
                    context,
                    "get",
                    "configmap",
                    "-n",
                    "kueue-system",
                    "kueue-manager-config",
                    "-o",
                    "json",
                )
            )
            text = config["data"]["controller_manager_config.yaml"]
            assert yaml.safe_load(text)["integrations"]["frameworks"][0] == "batch/job"
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 0, output
    assert "not written" not in output, output


PORTAL = "system:serviceaccount:gpu-quota-portal:gpu-quota-portal"


def test_the_demo_clusters_hold_the_portals_cluster_access_as_deployed(devcluster, kubectl):
    """The demo's stand-ins get deploy/kubernetes/cluster-access (what a platform team
    applies), so the portal's account answers ``kubectl auth can-i`` as on a real cluster:
    no RoleBindings in kube-system, no Secrets anywhere; its Node and namespace rights are
    there. Applying twice (a restarted demo) changes nothing."""
    from devcluster.demo import cluster_access_objects, install_cluster_access
    from devcluster.kueue_sim import Endpoint

    endpoint = Endpoint.from_kubeconfig(devcluster.kubeconfig_path)
    install_cluster_access(endpoint)
    install_cluster_access(endpoint)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in cluster_access_objects()}
    assert ("ClusterRole", "gpu-quota-portal") in kinds
    assert any(kind == "ValidatingAdmissionPolicy" for kind, _ in kinds)
    kubectl("api-resources")  # warm the discovery cache (kubectl impersonates it too)

    def can(*args: str) -> str:
        done = kubectl("--as", PORTAL, "auth", "can-i", *args, check=False)
        return done.stdout.strip()

    assert can("create", "rolebindings", "-n", "kube-system") == "no"
    assert can("get", "secrets", "-n", "kube-system") == "no"
    assert can("patch", "nodes") == "yes"
    assert can("create", "namespaces") == "yes"
    labels = kubectl("get", "clusterrole", "gpu-quota-portal", "-o", "json").stdout
    assert (
        json.loads(labels)["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpu-quota-portal"
    )
