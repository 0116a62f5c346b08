"""A Kueue Workload of one pod asking for 2 GPUs, as the alerts' cluster tests submit it."""

from __future__ import annotations

from typing import Any


def kueue_workload(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "main", "image": "trainer:1",
                 "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}}}],
        },
    }  # fmt: skip
