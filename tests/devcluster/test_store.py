"""The stand-in's store: objects indexed by type, namespace and name. Lists keep the (namespace,
name) order through adds, changes and removals; a namespace's list holds only its objects;
label selectors and the quota admission see the same objects as before the index."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from devcluster import Handle
from devcluster.errors import ApiError
from devcluster.objects import Objects, Target, accept_everything
from devcluster.resources import Registry
from devcluster.store import Store

QUOTAS = "resourcequotas"


def quota(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"hard": {"count/configmaps": "2"}},
    }


def names(objects: list[dict[str, Any]]) -> list[str]:
    return [f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in objects]


def filled() -> Store:
    store = Store()
    for namespace, name in [("b", "q2"), ("a", "q9"), ("b", "q1"), ("a", "q10"), ("c", "q1")]:
        store.put(QUOTAS, quota(namespace, name), created=True)
    store.put("namespaces", {"metadata": {"name": "b"}}, created=True)
    return store


def test_a_namespace_lists_only_its_objects_in_name_order():
    store = filled()
    assert names(store.list(QUOTAS, "a")) == ["a/q10", "a/q9"]
    assert names(store.list(QUOTAS, "b")) == ["b/q1", "b/q2"]
    assert store.list(QUOTAS, "missing") == []
    assert store.list("configmaps", "a") == []
    assert (store.count(QUOTAS, "b"), store.count(QUOTAS), store.count("configmaps")) == (2, 5, 0)


def test_the_cluster_wide_list_is_in_namespace_then_name_order_after_adds_and_changes():
    store = filled()
    assert names(store.list(QUOTAS)) == ["a/q10", "a/q9", "b/q1", "b/q2", "c/q1"]
    store.put(QUOTAS, quota("a", "q0"), created=True)
    changed = quota("b", "q1", team="x")
    store.put(QUOTAS, changed, created=False)
    listed = store.list(QUOTAS)
    assert names(listed) == ["a/q0", "a/q10", "a/q9", "b/q1", "b/q2", "c/q1"]
    assert listed[3] is changed  # a change is seen at once, without a new sort
    assert store.get(QUOTAS, "b", "q1") is changed
    assert names(store.list("namespaces")) == ["/b"]


def test_a_delete_leaves_both_lists_and_a_second_delete_finds_nothing():
    store = filled()
    events: list[tuple[str, str, str]] = []
    store.listeners.append(
        lambda key, event, obj: events.append((key, event, obj["metadata"]["name"]))
    )
    removed = store.delete(QUOTAS, "b", "q1")
    assert removed is not None and removed["metadata"]["resourceVersion"] == "1"
    assert events == [(QUOTAS, "DELETED", "q1")]
    assert names(store.list(QUOTAS, "b")) == ["b/q2"]
    assert names(store.list(QUOTAS)) == ["a/q10", "a/q9", "b/q2", "c/q1"]
    assert store.get(QUOTAS, "b", "q1") is None
    assert store.delete(QUOTAS, "b", "q1") is None
    store.delete(QUOTAS, "c", "q1")  # the namespace's last object
    assert store.list(QUOTAS, "c") == [] and store.count(QUOTAS) == 3
    store.put(QUOTAS, quota("c", "q1"), created=True)
    assert names(store.list(QUOTAS, "c")) == ["c/q1"]
    store.wipe()
    assert store.list(QUOTAS) == [] and store.get(QUOTAS, "a", "q9") is None


def test_the_state_file_round_trips_through_the_index(tmp_path: Path):
    store = filled()
    store.state_file = tmp_path / "objects.json"
    store.save()
    saved = json.loads(store.state_file.read_text())
    assert [o["metadata"]["name"] for o in saved["objects"][QUOTAS]] == [
        "q10", "q9", "q1", "q2", "q1"
    ]  # fmt: skip
    again = Store(store.state_file)
    again.load({QUOTAS, "namespaces"})
    assert names(again.list(QUOTAS, "b")) == ["b/q1", "b/q2"]
    assert names(again.list(QUOTAS)) == names(store.list(QUOTAS))


def objects() -> Objects:
    registry = Registry.with_crds([])
    store = Store()
    handled = Objects(registry, store, accept_everything, [])
    handled.seed()
    return handled


def target(handled: Objects, namespace: str | None, plural: str = QUOTAS) -> Target:
    resource_type = handled.registry.lookup("", "v1", plural)
    assert resource_type is not None
    return Target(resource_type, "v1", namespace, None)


def test_label_selectors_and_pagination_over_one_namespace_and_all():
    handled = objects()
    for namespace in ("team-a", "team-b"):
        handled.store.put(
            "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            created=True,
        )  # fmt: skip
        for index, tier in enumerate(["gold", "silver", "gold"]):
            body = quota(namespace, f"q{index}", tier=tier)
            handled.create(target(handled, namespace), body, manager="test", dry_run=False)

    def selected(namespace: str | None, selector: str | None, **options: Any) -> list[str]:
        items, _ = handled.select(target(handled, namespace), label_selector=selector, **options)
        return names(items)

    assert selected("team-a", "tier=gold") == ["team-a/q0", "team-a/q2"]
    assert selected(None, "tier=gold") == ["team-a/q0", "team-a/q2", "team-b/q0", "team-b/q2"]
    assert selected("team-b", "tier!=gold") == ["team-b/q1"]
    assert selected(None, "!tier") == []
    first, meta = handled.select(target(handled, None), label_selector="tier", limit=4)
    assert names(first) == ["team-a/q0", "team-a/q1", "team-a/q2", "team-b/q0"]
    rest, _ = handled.select(
        target(handled, None), label_selector="tier", continue_token=meta["continue"]
    )
    assert names(rest) == ["team-b/q1", "team-b/q2"]


def test_quota_admission_counts_the_namespace_of_the_write_only():
    handled = objects()
    for namespace in ("team-a", "team-b"):
        handled.store.put(
            "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            created=True,
        )  # fmt: skip
        handled.create(
            target(handled, namespace), quota(namespace, "limit"), manager="t", dry_run=False
        )

    def config_map(namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
        handled.create(target(handled, namespace, "configmaps"), body, manager="t", dry_run=False)

    config_map("team-a", "one")
    config_map("team-a", "two")
    config_map("team-b", "one")  # team-a's two do not count against team-b's quota
    status = handled.store.get(QUOTAS, "team-b", "limit")
    assert status is not None and status["status"]["used"] == {"count/configmaps": "1"}
    with pytest.raises(ApiError) as refusal:
        config_map("team-a", "three")
    assert "exceeded quota: limit" in refusal.value.status()["message"]
    config_map("team-b", "two")


# LIST and write answers from the kept JSON ------------------------------------------------------


def call(handle: Handle, method: str, path: str, body: Any = None, **headers: str) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - the stand-in's own http URL
        handle.url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {handle.token}", "Content-Type": "application/json", **headers},
    )  # fmt: skip
    with urllib.request.urlopen(request) as response:  # noqa: S310 - as above
        raw: bytes = response.read()
    return raw


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


KUEUE = "/apis/kueue.x-k8s.io"


def flavor(name: str, version: str = "v1beta2", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeLabels": {"pool": name}},
    }


def test_list_pages_are_the_bytes_a_whole_body_encoding_gives_at_either_version(
    devcluster: Handle,
):
    for index in range(5):
        call(devcluster, "POST", f"{KUEUE}/v1beta2/resourceflavors", flavor(f"f{index}", tier="a"))
    for version in ("v1beta2", "v1beta1"):
        path = f"{KUEUE}/{version}/resourceflavors?labelSelector=tier%3Da&limit=2"
        seen = []
        while True:
            raw = call(devcluster, "GET", path)
            page = json.loads(raw)
            assert raw == compact(page)  # compact JSON, the envelope's keys first
            assert list(page) == ["apiVersion", "kind", "metadata", "items"]
            assert {item["apiVersion"] for item in page["items"]} == {f"kueue.x-k8s.io/{version}"}
            seen += [item["metadata"]["name"] for item in page["items"]]
            token = page["metadata"].get("continue")
            if not token:
                break
            path = (
                f"{KUEUE}/{version}/resourceflavors?labelSelector=tier%3Da&limit=2&continue={token}"
            )
        assert seen == [f"f{index}" for index in range(5)]


def test_a_list_after_a_write_shows_the_write(devcluster: Handle):
    path = f"{KUEUE}/v1beta2/resourceflavors"
    created = json.loads(call(devcluster, "POST", path, flavor("gpu", tier="a")))
    assert [i["metadata"]["name"] for i in json.loads(call(devcluster, "GET", path))["items"]] == [
        "gpu"
    ]
    changed = {**created, "spec": {"nodeLabels": {"pool": "other"}}}
    answer = call(devcluster, "PUT", f"{path}/gpu", changed)
    assert json.loads(answer)["spec"]["nodeLabels"] == {"pool": "other"}
    (item,) = json.loads(call(devcluster, "GET", f"{path}?labelSelector=tier%3Da"))["items"]
    assert item["spec"]["nodeLabels"] == {"pool": "other"}
    assert compact(item) == call(devcluster, "GET", f"{path}/gpu")  # GET: the same kept bytes
    call(devcluster, "POST", path, flavor("cpu", tier="a"))
    listed = json.loads(call(devcluster, "GET", f"{path}?labelSelector=tier%3Da"))["items"]
    assert [i["metadata"]["name"] for i in listed] == ["cpu", "gpu"]
    call(devcluster, "DELETE", f"{path}/cpu")
    listed = json.loads(call(devcluster, "GET", f"{path}?labelSelector=tier%3Da"))["items"]
    assert [i["metadata"]["name"] for i in listed] == ["gpu"]
    # A dry run answers the would-be object, not the stored one.
    dry = call(devcluster, "PUT", f"{path}/gpu?dryRun=All", {**item, "spec": {"nodeLabels": {}}})
    assert json.loads(dry)["spec"]["nodeLabels"] == {}
    assert json.loads(call(devcluster, "GET", f"{path}/gpu"))["spec"]["nodeLabels"] == {
        "pool": "other"
    }
