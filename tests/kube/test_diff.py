"""quotas.kube.diff: a quantity the API server re-wrote in its canonical text is no drift, and a
real difference shows both sides as ``kubectl get`` would."""

from __future__ import annotations

from typing import Any

import pytest

from quotas.kube.applier import drift
from quotas.kube.diff import differences, is_quantity_path, needs_write

MANAGER = "gpu-portal"


def resource_quota(hard: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu", "namespace": "team-a", "labels": labels or {}},
        "spec": {"hard": hard},
    }


def cluster_queue(nominal: Any, borrowing: Any = "0", weight: Any = "1") -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {
            "fairSharing": {"weight": weight},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [
                                {
                                    "name": "nvidia.com/gpu",
                                    "nominalQuota": nominal,
                                    "borrowingLimit": borrowing,
                                }
                            ],
                        }
                    ],
                }
            ],
        },
    }


@pytest.mark.parametrize(
    ("desired", "live"),
    [
        ("1000", "1k"),
        ("1k", "1000"),
        (1000, "1k"),
        ("1024Mi", "1Gi"),
        ("5000000000", "5G"),
        ("0.5", "500m"),
        ("1.500", "1500m"),
        ("1e3", "1k"),  # same value in another format: Kubernetes compares values
    ],
)
def test_a_canonicalised_quantity_is_no_difference(desired: Any, live: Any) -> None:
    want, have = (
        resource_quota({"requests.nvidia.com/gpu": desired}),
        resource_quota({"requests.nvidia.com/gpu": live}),
    )
    assert differences(want, have) == {}
    assert needs_write(want, have, MANAGER) == []


def test_a_cluster_queue_quota_written_back_as_1k_is_no_difference() -> None:
    assert differences(cluster_queue("1000", "2000", "1"), cluster_queue("1k", "2k", "1000m")) == {}


def test_a_real_difference_shows_both_sides_in_canonical_text() -> None:
    found = differences(
        resource_quota({"requests.nvidia.com/gpu": "1000", "requests.memory": "1024Mi"}),
        resource_quota({"requests.nvidia.com/gpu": "2000", "requests.memory": "2048Mi"}),
    )
    assert found == {
        ".spec.hard.requests.nvidia.com/gpu": ("1k", "2k"),
        ".spec.hard.requests.memory": ("1Gi", "2Gi"),
    }


def test_drift_in_a_list_item_is_shown_as_kubectl_would() -> None:
    found = drift(cluster_queue("8"), cluster_queue("8000m"))
    assert found == {}
    found = drift(cluster_queue("1000"), cluster_queue("12k"))
    path = ".spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert found == {path: {"desired": "1k", "live": "12k"}}


def test_labels_are_text_not_quantities() -> None:
    found = differences(
        resource_quota({"pods": "10"}, labels={"size": "1000"}),
        resource_quota({"pods": "10"}, labels={"size": "1k"}),
    )
    assert found == {".metadata.labels.size": ("1000", "1k")}


def test_a_live_value_that_is_not_a_quantity_is_shown_as_it_is() -> None:
    found = differences(resource_quota({"pods": "1000"}), resource_quota({"pods": "lots"}))
    assert found == {".spec.hard.pods": ("1k", "lots")}


def test_a_boolean_is_never_a_quantity() -> None:
    found = differences(resource_quota({"pods": "1"}), resource_quota({"pods": True}))
    assert found == {".spec.hard.pods": ("1", True)}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("spec", "hard", "requests.cpu"), True),
        (("spec", "limits[0]", "max", "nvidia.com/gpu"), True),
        (("spec", "limits[0]", "defaultRequest", "memory"), True),
        (("spec", "resourceGroups[0]", "flavors[0]", "resources[1]", "lendingLimit"), True),
        (("spec", "fairSharing", "weight"), True),
        (("spec", "guarantee", "resource", "nvidia.com/gpu"), True),
        (("spec", "weight"), False),  # Volcano's queue weight is an integer
        (("metadata", "labels", "size"), False),
        (("metadata", "name"), False),
        ((), False),
    ],
)
def test_which_paths_hold_quantities(path: tuple[str, ...], expected: bool) -> None:
    assert is_quantity_path(path) is expected
