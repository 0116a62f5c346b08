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
