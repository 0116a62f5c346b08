"""quotas.kube.describe: a dry run's changed fields in words a person reads, by object kind."""

from __future__ import annotations

import copy
from typing import Any

from quotas.kube.describe import describe_changes
from quotas.kube.diff import differences

GI = 1024**3


def cluster_queue(gpu_nominal: Any = 6, gpu_borrowing: Any = 4, memory: Any = "512Gi") -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {
            "cohort": "gpu",
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu", "memory"],
                    "flavors": [
                        {
                            "name": "a100-80gb",
                            "resources": [
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": gpu_nominal,
                                    "borrowingLimit": gpu_borrowing,
                                },
                                {"name": "memory", "nominalQuota": memory},
                            ],
                        }
                    ],
                }
            ],
        },
    }


def resource_quota(gpus: Any = "10", memory: Any = "64Gi") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-portal-quota", "namespace": "team-a-training"},
        "spec": {"hard": {"requests.nvidia.com/gpu": gpus, "requests.memory": memory}},
    }


def limit_range(container_gpus: Any = "8") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "gpu-portal-limits", "namespace": "team-a-training"},
        "spec": {
            "limits": [
                {"type": "Container", "max": {"nvidia.com/gpu": container_gpus, "cpu": "32"}},
                {"type": "Pod", "max": {"nvidia.com/gpu": container_gpus}},
            ]
        },
    }


def described(old: dict, new: dict) -> dict[str, str]:
    paths = set(differences(new, old)) | set(differences(old, new))
    return describe_changes(old, new, sorted(paths))


def test_a_cluster_queue_line_reads_flavor_resource_and_guaranteed() -> None:
    words = described(cluster_queue(gpu_nominal=6), cluster_queue(gpu_nominal=7, gpu_borrowing=3))

    path = ".spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert words[path] == "nvidia.com/gpu on a100-80gb: guaranteed 6 → 7"  # limit stays 10
    borrowing = ".spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit"
    assert words[borrowing] == words[path]


def test_a_cluster_queue_limit_is_guaranteed_plus_borrowing() -> None:
    words = described(cluster_queue(), cluster_queue(gpu_nominal=7, gpu_borrowing=5))

    assert set(words.values()) == {"nvidia.com/gpu on a100-80gb: guaranteed 6 → 7, limit 10 → 12"}


def test_a_cluster_queue_memory_reads_in_binary_units_and_no_borrowing_limit_is_no_limit() -> None:
    old = cluster_queue(memory="512Gi")
    new = cluster_queue(memory=str(1024 * GI))
    del new["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"]

    assert sorted(set(described(old, new).values())) == [
        "memory on a100-80gb: guaranteed 512 GiB → 1 TiB",
        "nvidia.com/gpu on a100-80gb: limit 10 → no limit",
    ]


def test_a_flavor_added_to_a_cluster_queue_reads_as_its_lines() -> None:
    old = cluster_queue()
    new = copy.deepcopy(old)
    new["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "h100-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 2}]}
    )

    assert list(described(old, new).values()) == [
        "nvidia.com/gpu on h100-80gb: new, guaranteed 2, no limit"
    ]


def test_another_cluster_queue_field_reads_as_changed() -> None:
    new = cluster_queue()
    new["spec"]["cohort"] = "other"

    assert described(cluster_queue(), new) == {
        ".spec.cohort": "ClusterQueue team-a: cohort changed"
    }


def test_a_resource_quota_reads_per_namespace_with_the_resources_name() -> None:
    words = described(resource_quota(), resource_quota(gpus="11", memory="128Gi"))

    assert words == {
        ".spec.hard.requests.nvidia.com/gpu": "team-a-training: GPUs 10 → 11",
        ".spec.hard.requests.memory": "team-a-training: memory requests 64 GiB → 128 GiB",
    }


def test_a_resource_quota_key_added_or_removed_says_so() -> None:
    old, new = resource_quota(), resource_quota()
    del old["spec"]["hard"]["requests.memory"]
    new["spec"]["hard"]["pods"] = "20"

    assert described(old, new) == {
        ".spec.hard.requests.memory": "team-a-training: memory requests not set → 64 GiB",
        ".spec.hard.pods": "team-a-training: pods not set → 20",
    }


def test_the_job_caps_read_as_what_they_count() -> None:
    old, new = cluster_queue(), cluster_queue()
    slots = {
        "coveredResources": ["pods"],
        "flavors": [
            {
                "name": "portal-job-slots",
                "resources": [{"name": "pods", "nominalQuota": "5", "borrowingLimit": "0"}],
            }
        ],
    }
    new["spec"]["resourceGroups"].append(copy.deepcopy(slots))
    assert set(described(old, new).values()) == {"running jobs (pods admitted at once): at most 5"}
    more = copy.deepcopy(new)
    more["spec"]["resourceGroups"][1]["flavors"][0]["resources"][0]["nominalQuota"] = "8"
    assert set(described(new, more).values()) == {
        "running jobs (pods admitted at once): at most 5 → 8"
    }
    assert set(described(new, old).values()) == {"running jobs (pods admitted at once): no cap"}

    quota_old, quota_new = resource_quota(), resource_quota()
    quota_old["spec"]["hard"]["count/workloads.kueue.x-k8s.io"] = "25"
    quota_new["spec"]["hard"]["count/workloads.kueue.x-k8s.io"] = "30"
    assert described(quota_old, quota_new) == {
        ".spec.hard.count/workloads.kueue.x-k8s.io": "team-a-training: jobs running and queued "
        "(every kind Kueue manages) 25 → 30"
    }


def test_a_limit_range_reads_per_container_or_pod() -> None:
    words = described(limit_range("8"), limit_range("10"))

    assert words == {
        ".spec.limits[0].max.nvidia.com/gpu": "team-a-training: at most GPUs per container 8 → 10",
        ".spec.limits[1].max.nvidia.com/gpu": "team-a-training: at most GPUs per pod 8 → 10",
    }


def test_any_other_kind_names_the_field_that_changed() -> None:
    old = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": {"a": "1"}}}
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["a"] = "2"

    assert described(old, new) == {".metadata.labels.a": "Namespace x: labels.a changed"}


def test_time_sliced_gpus_read_as_shares() -> None:
    from quotas.kube.describe import GpuShares

    shares = GpuShares({"a100-80gb": 10}, everywhere=10)

    def with_shares(old: dict, new: dict) -> dict[str, str]:
        paths = set(differences(new, old)) | set(differences(old, new))
        return describe_changes(old, new, sorted(paths), shares)

    cq = with_shares(cluster_queue(gpu_nominal=4, gpu_borrowing=0), cluster_queue(3, 0))
    assert cq[".spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"] == (
        "nvidia.com/gpu on a100-80gb: guaranteed 4 shares (40% of a GPU) → 3 shares (30% of a "
        "GPU), limit 4 shares (40% of a GPU) → 3 shares (30% of a GPU)"
    )
    quota = with_shares(resource_quota(gpus="4"), resource_quota(gpus="3"))
    assert quota[".spec.hard.requests.nvidia.com/gpu"] == (
        "team-a-training: GPU shares 4 shares (40% of a GPU) → 3 shares (30% of a GPU)"
    )
    pod = with_shares(limit_range("4"), limit_range("3"))
    assert pod[".spec.limits[1].max.nvidia.com/gpu"] == (
        "team-a-training: at most GPU shares per pod 4 shares (40% of a GPU) → 3 shares (30% of "
        "a GPU)"
    )
