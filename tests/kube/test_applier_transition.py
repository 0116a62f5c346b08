"""The applier refuses an update that breaks a CRD transition rule before writing anything:
a permanent failure naming the object and the rule, the rest of the pass going on. Unit test
of the logic above the boundary, so an in-memory backend stands in for the cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from quotas.kube.applier import ApplyError, Scope, apply_objects, refuse_breaking_update
from quotas.kube.resources import KINDS, Kind, key_of
from quotas.kube.spec import LABEL_CLUSTER, LABEL_MANAGED_BY, MANAGED_BY

CLUSTER = "demo-a100"
LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: CLUSTER}


class MemoryBackend:
    """Live objects in a dict; every write is recorded."""

    def __init__(self, live: list[dict[str, Any]]) -> None:
        self.objects = {key_of(obj): copy.deepcopy(obj) for obj in live}
        self.writes: list[dict[str, Any]] = []

    def list_owned(self, kind: Kind, selector: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(obj)
            for key, obj in self.objects.items()
            if key[:2] == (kind.api_version, kind.kind)
        ]

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, headers: Any = None
    ) -> dict[str, Any]:
        self.writes.append(obj)
        if not dry_run:
            self.objects[key_of(obj)] = copy.deepcopy(obj)
        return obj

    def delete(self, kind: Kind, *, namespace: str | None, name: str) -> None:
        raise AssertionError("nothing is pruned in these tests")

    def merge_patch(
        self, kind: Kind, *, namespace: str | None, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        raise AssertionError("not used")

    def close(self) -> None:
        pass


def flavor(name: str, product: str, *, topology: str | None = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeLabels": {"nvidia.com/gpu.product": product}}
    if topology:
        spec["topologyName"] = topology
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": spec,
    }


def local_queue(cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "team-a", "labels": dict(LABELS)},
        "spec": {"clusterQueue": cluster_queue},
    }


def run(backend: MemoryBackend, desired: list[dict[str, Any]]) -> Any:
    return apply_objects(backend, desired, Scope(cluster=CLUSTER, prune=False), kinds=KINDS)


def test_an_update_breaking_a_transition_rule_is_refused_and_nothing_is_written() -> None:
    live = [flavor("gpu-a100", "A100"), flavor("gpu-h100", "H100"), local_queue("team-a")]
    backend = MemoryBackend(live)
    desired = [
        flavor("gpu-a100", "A100-80GB"),  # nodeLabels are immutable under a topology
        flavor("gpu-h100", "H100"),  # a new annotation only: allowed
        local_queue("team-b"),  # clusterQueue is immutable
    ]
    desired[1]["metadata"]["annotations"] = {"note": "allowed change"}
    before = copy.deepcopy(backend.objects)

    result = run(backend, desired)

    failed = dict(result.failed)
    assert set(failed) == {key_of(desired[0]), key_of(desired[2])}
    assert failed[key_of(desired[0])] == (
        "update refused before writing, the API server would reject it: ResourceFlavor "
        'gpu-a100: spec: Invalid value: "object": nodeLabels are immutable when topologyName is '
        "set"
    )
    assert failed[key_of(desired[2])].endswith(
        'LocalQueue team-a/default: spec.clusterQueue: Invalid value: "team-b": field is immutable'
    )
    # The refused objects were not written; the allowed change went through.
    assert [key_of(obj) for obj in backend.writes] == [key_of(desired[1])]
    for key in failed:
        assert backend.objects[key] == before[key]
    assert [change.key for change in result.changed] == [key_of(desired[1])]


def test_an_update_keeping_the_rules_and_a_create_are_written() -> None:
    backend = MemoryBackend([flavor("gpu-a100", "A100", topology=None)])
    desired = [flavor("gpu-a100", "A100-80GB", topology=None), local_queue("team-b")]
    result = run(backend, desired)
    assert result.failed == []
    assert len(backend.writes) == 2


def test_refuse_breaking_update_is_permanent_and_names_the_object() -> None:
    live = flavor("gpu-a100", "A100")
    live["status"] = {"note": "written by Kueue"}
    live["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]  # another manager's
    desired = flavor("gpu-a100", "A100")
    refuse_breaking_update(desired, live)  # what another manager set stays under an apply
    desired["spec"]["topologyName"] = "racks"
    with pytest.raises(ApplyError) as caught:
        refuse_breaking_update(desired, live, key=key_of(desired))
    assert caught.value.status == 422
    assert caught.value.key == key_of(desired)
    assert "ResourceFlavor gpu-a100: spec: Invalid value" in caught.value.message
    assert "topologyName is immutable when topologyName is set" in caught.value.message
