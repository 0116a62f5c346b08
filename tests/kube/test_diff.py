"""quotas.kube.diff: a quantity the API server re-wrote in its canonical text is no drift, and a
real difference shows both sides as ``kubectl get`` would."""

from __future__ import annotations

import random
from typing import Any

import pytest

from quotas.kube.applier import drift
from quotas.kube.diff import (
    _desired_paths,
    differences,
    is_quantity_path,
    needs_write,
    owned_field_paths,
    stale_owned_fields,
)

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


def _stale_by_definition(desired: dict[str, Any], live: dict[str, Any], manager: str) -> list[str]:
    """Every owned path against every wanted one: the definition the fast version keeps."""
    wanted = _desired_paths({k: v for k, v in desired.items() if k not in ("apiVersion", "kind")})
    return sorted(
        "." + ".".join(path)
        for path in owned_field_paths(live, manager)
        if path[:1] != ("status",)
        and not any(path[: len(w)] == w or w[: len(path)] == path for w in wanted)
    )


def _random_fields(rng: random.Random, depth: int) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in rng.sample(["a", "b", "c", "spec", "status", "labels"], rng.randint(0, 3)):
        fields[f"f:{name}"] = _random_fields(rng, depth - 1) if depth and rng.random() < 0.6 else {}
    if rng.random() < 0.1:
        fields['k:{"name":"x"}'] = {}  # a list item's key: the path stops here
    if rng.random() < 0.1:
        fields["."] = {}  # the field itself, beside its children
    return fields


def _random_value(rng: random.Random, depth: int) -> Any:
    if not depth or rng.random() < 0.3:
        return rng.choice([1, "x", [1, 2], {}])
    return _random_object(rng, depth)


def _random_object(rng: random.Random, depth: int) -> dict[str, Any]:
    return {
        name: _random_value(rng, depth - 1)
        for name in rng.sample(["a", "b", "c", "spec", "status", "labels"], rng.randint(1, 3))
    }


def test_stale_owned_fields_match_their_definition_on_random_objects() -> None:
    rng = random.Random(7)  # noqa: S311 - reproducible test data, not cryptography
    stale_seen = 0
    for _ in range(2000):
        desired = {"apiVersion": "v1", "kind": "ConfigMap", **_random_object(rng, 4)}
        entries = [
            {"manager": manager, "operation": "Apply", "fieldsV1": _random_fields(rng, 4)}
            for manager in ("portal", "portal", "other")
        ]
        live = {"metadata": {"managedFields": entries}}
        expected = _stale_by_definition(desired, live, "portal")
        assert stale_owned_fields(desired, live, "portal") == expected
        stale_seen += bool(expected)
    assert stale_seen > 400  # the cases are not all trivially clean
