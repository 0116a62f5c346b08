"""The pure parts: label selectors, patches and field ownership."""

from __future__ import annotations

from typing import Any

import pytest

from devcluster import managed, patches
from devcluster.errors import ApiError
from devcluster.selectors import labels_match, parse_field_selector, parse_label_selector


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("team=a", True),
        ("team==a,tier", True),
        ("team!=a", False),
        ("team in (a,b)", True),
        ("team notin (b, c)", True),
        ("!tier", False),
        ("!missing", True),
        ("missing", False),
        ("gpus>3", True),
        ("gpus<3", False),
        ("app.kubernetes.io/name=portal", True),
    ],
)
def test_label_selectors(selector: str, matches: bool) -> None:
    obj = {
        "metadata": {
            "labels": {"team": "a", "tier": "gold", "gpus": "4", "app.kubernetes.io/name": "portal"}
        }
    }
    assert labels_match(parse_label_selector(selector), obj) is matches


@pytest.mark.parametrize("selector", ["team in a", "=a", "team=(a"])
def test_bad_label_selectors_are_400(selector: str) -> None:
    with pytest.raises(ApiError) as error:
        parse_label_selector(selector)
    assert error.value.code == 400


def test_field_selectors() -> None:
    obj = {"metadata": {"name": "x", "namespace": "team-a"}}
    assert parse_field_selector("metadata.name=x,metadata.namespace==team-a", "ConfigMap")(obj)
    assert not parse_field_selector("metadata.name!=x", "ConfigMap")(obj)
    with pytest.raises(ApiError, match="field label not supported"):
        parse_field_selector("spec.cohortName=x", "ClusterQueue")


def test_merge_and_strategic_patches() -> None:
    target = {"spec": {"hard": {"cpu": "1", "pods": "2"}, "list": [1, 2]}}
    assert patches.merge_patch(target, {"spec": {"hard": {"cpu": None}, "list": [3]}}) == {
        "spec": {"hard": {"pods": "2"}, "list": [3]}
    }
    strategic = {
        "$setElementOrder/list": [3],
        "spec": {"hard": {"$patch": "replace", "gpu": "1"}, "list": [3], "$retainKeys": ["x"]},
    }
    assert patches.strategic_merge_patch(target, strategic) == {
        "spec": {"hard": {"gpu": "1"}, "list": [3]}
    }


def test_json_patch() -> None:
    target = {"spec": {"a": 1, "items": ["x"]}}
    operations = [
        {"op": "test", "path": "/spec/a", "value": 1},
        {"op": "replace", "path": "/spec/a", "value": 2},
        {"op": "add", "path": "/spec/items/-", "value": "y"},
        {"op": "copy", "from": "/spec/a", "path": "/spec/b"},
        {"op": "remove", "path": "/spec/items/0"},
    ]
    assert patches.json_patch(target, operations) == {"spec": {"a": 2, "b": 2, "items": ["y"]}}
    with pytest.raises(ApiError):
        patches.json_patch(target, [{"op": "test", "path": "/spec/a", "value": 9}])


def _apply(
    current: dict[str, Any], applied: dict[str, Any], manager: str, force: bool = False
) -> dict[str, Any]:
    return managed.apply_fields(
        current, applied, manager=manager, force=force, api_version="v1", subresource="", now="t"
    )


def test_apply_owns_removes_and_shares_fields() -> None:
    first = _apply({}, {"spec": {"a": 1, "b": {"c": 2}, "list": [1]}}, "portal")
    assert managed.read_entries(first)[0].paths == {
        ("spec", "a"),
        ("spec", "b", "c"),
        ("spec", "list"),
    }
    # Another manager applying the same value shares it; a different value conflicts.
    shared = _apply(first, {"spec": {"a": 1}}, "other")
    assert {e.manager for e in managed.read_entries(shared)} == {"portal", "other"}
    with pytest.raises(ApiError) as conflict:
        _apply(shared, {"spec": {"list": [2]}}, "other")
    assert conflict.value.code == 409
    assert conflict.value.details == {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "portal" using v1',
                "field": ".spec.list",
            }
        ]
    }
    # Omitted fields go unless someone else still owns them; empty maps above go too.
    after = _apply(shared, {"spec": {"list": [1]}}, "portal")
    assert after["spec"] == {"a": 1, "list": [1]}


def test_update_takes_changed_fields_from_appliers() -> None:
    applied = _apply({}, {"spec": {"a": 1, "b": 2}}, "portal")
    edited = {**applied, "spec": {"a": 5, "b": 2}}
    managed.record_update(
        applied, edited, manager="kubectl-edit", api_version="v1", subresource="", now="t"
    )
    owners = {e.manager: e.paths for e in managed.read_entries(edited)}
    assert owners == {"portal": {("spec", "b")}, "kubectl-edit": {("spec", "a")}}
    assert managed.from_fields_v1(managed.to_fields_v1(owners["portal"])) == owners["portal"]
