"""A full pass remembers what it compiled, validated and compared (quotas.kube.memo), so that
the next pass where nothing changed does little work (issue 36). What it remembers must never
hide a change: a changed quota, a changed CRD or Kubernetes schema version, and an object edited
in the cluster are still found and repaired by the pass after a remembered one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from quotas import sync
from quotas.kube import applier, cel, compiler, validate
from quotas.kube.memo import (
    ApplyMemo,
    CompileMemo,
    Digests,
    ValidationMemo,
    object_digest,
)
from quotas.models import QuotaSet
from tests.standin import kubectl, kubectl_json

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_memos():
    sync.reconcile_memos_clear()
    yield
    sync.reconcile_memos_clear()


@pytest.fixture
def counted(monkeypatch):
    """How many objects each pass compiles per tenant, validates, and compares field by field."""
    calls = {"compile": 0, "validate": 0, "compare": 0}
    real_compile, real_validate = compiler.compile_tenant, validate.validate_object
    real_needs_write = applier.needs_write

    def compile_tenant(*args, **kwargs):
        calls["compile"] += 1
        return real_compile(*args, **kwargs)

    def validate_object(*args, **kwargs):
        calls["validate"] += 1
        return real_validate(*args, **kwargs)

    def needs_write(*args, **kwargs):
        calls["compare"] += 1
        return real_needs_write(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile_tenant", compile_tenant)
    monkeypatch.setattr(validate, "validate_object", validate_object)
    monkeypatch.setattr(applier, "needs_write", needs_write)

    def taken() -> dict[str, int]:
        out = dict(calls)
        calls.update(compile=0, validate=0, compare=0)
        return out

    return taken


def reconcile(world):
    outcome = sync.cluster_reconcile(cluster=world.a100)
    assert outcome.ok, outcome.error
    assert outcome.result is not None and not outcome.result.failed
    return outcome.result


def test_a_pass_where_nothing_changed_does_not_do_the_work_again(world, standin, counted):
    first = reconcile(world)  # the first sync: everything compiled, validated, created
    assert first.created
    assert counted()["validate"] > 0
    second = reconcile(world)  # compares every object once, remembers each as unchanged
    assert second.writes == 0
    objects = second.unchanged
    assert counted() == {"compile": 0, "validate": 0, "compare": objects}

    third = reconcile(world)
    assert third.writes == 0 and third.unchanged == objects
    assert counted() == {"compile": 0, "validate": 0, "compare": 0}


def test_a_changed_quota_is_compiled_validated_and_applied_after_a_remembered_pass(
    world, standin, counted
):
    reconcile(world)
    reconcile(world)
    counted()
    # Changed in the database without a push (as a lost outbox row would leave it).
    QuotaSet.objects.filter(tenant=world.team_a, cluster=world.a100).update(max_pods=7)

    result = reconcile(world)

    calls = counted()
    assert calls["compile"] == 1  # team-a alone; the others come from the memo
    assert 0 < calls["validate"] < result.unchanged
    changed = [c.describe() for c in result.changed]
    assert changed and all("team-a" in what for what in changed)
    quotas = kubectl_json(standin, "get", "resourcequota", "-A")["items"]
    hard = [q["spec"]["hard"] for q in quotas if q["metadata"]["namespace"].startswith("team-a")]
    assert any(h.get("pods") == "7" for h in hard), hard
    assert reconcile(world).writes == 0  # and it stays put


def test_a_hand_edit_after_a_remembered_pass_is_repaired(world, standin, counted):
    reconcile(world)
    reconcile(world)
    kubectl(
        standin, "patch", "clusterqueue", "team-a", "--type", "json", "-p",
        json.dumps([{"op": "replace", "path": "/spec/stopPolicy", "value": "HoldAndDrain"}]),
    )  # fmt: skip
    counted()

    result = reconcile(world)

    assert [c.describe() for c in result.changed] == ["ClusterQueue team-a"]
    assert counted()["compare"] == 1  # only the edited object's version is new
    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "None"


def test_a_new_kubernetes_schema_version_validates_everything_again(world, standin, counted):
    reconcile(world)
    objects = reconcile(world).unchanged
    counted()
    world.a100.kubernetes_version = "1.30"
    world.a100.save(update_fields=["kubernetes_version"])
    world.a100.refresh_from_db()

    reconcile(world)

    assert counted()["validate"] >= objects


@pytest.fixture
def crd_copy(tmp_path: Path, monkeypatch):
    """The CRDs in a folder of this test's, the validator's caches of them emptied before and
    after (``validate.CRD_DIR`` read again)."""
    folder = tmp_path / "crds"
    shutil.copytree(validate.CRD_DIR, folder)

    def forget() -> None:
        for cached in (
            validate._crd_index,
            validate._load_crd_file,
            validate.crd_versions,
            validate._crd_validator,
        ):
            cached.cache_clear()
        for name in dir(cel):
            cached = getattr(cel, name)
            if hasattr(cached, "cache_clear"):
                cached.cache_clear()

    monkeypatch.setattr(validate, "CRD_DIR", folder)
    forget()
    yield folder
    monkeypatch.undo()
    forget()


def test_a_changed_crd_is_checked_against_after_a_remembered_pass(world, standin, crd_copy):
    reconcile(world)
    reconcile(world)
    # Kueue's ClusterQueue CRD now refuses the stopPolicy every compiled ClusterQueue has.
    path = next(
        p for p in crd_copy.glob("*.yaml") if "kind: ClusterQueue" in p.read_text(encoding="utf-8")
    )
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"]["stopPolicy"]["enum"] = ["Hold", "HoldAndDrain"]
    path.write_text(yaml.safe_dump(crd), encoding="utf-8")
    validate._crd_index.cache_clear()
    validate._load_crd_file.cache_clear()
    validate._crd_validator.cache_clear()

    outcome = sync.cluster_reconcile(cluster=world.a100)

    assert outcome.error and "invalid objects" in outcome.error
    assert "ClusterQueue team-a" in outcome.error and "stopPolicy" in outcome.error


def test_a_new_rules_version_validates_everything_again(world, standin, counted, monkeypatch):
    reconcile(world)
    objects = reconcile(world).unchanged
    counted()
    monkeypatch.setattr(validate, "RULES_VERSION", validate.RULES_VERSION + "-next")
    reconcile(world)
    assert counted()["validate"] >= objects


# --- the memos alone ---------------------------------------------------------------------------


def test_an_invalid_object_is_refused_every_time_and_never_remembered():
    memo = ValidationMemo()
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Not_A_Name"}}
    for _ in range(2):
        assert validate.validate_objects([bad], memo=memo)
    assert len(memo) == 0
    good = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ok"}}
    assert validate.validate_objects([good], memo=memo) == []
    assert len(memo) == 1
    # A repeated object is still reported, remembered or not.
    assert any("duplicate" in m for m in validate.validate_objects([good, good], memo=memo))


def test_the_validation_memo_is_bounded():
    memo = ValidationMemo(size=3)
    for n in range(10):
        memo.remember("ctx", bytes([n]))
    assert len(memo) == 3
    assert memo.passed("ctx", bytes([9])) and not memo.passed("ctx", bytes([0]))
    assert not memo.passed("other", bytes([9]))  # another schema or CRD set: not passed


def test_the_apply_memo_needs_the_same_uid_version_and_desired_object():
    memo = ApplyMemo()
    key = ("v1", "Namespace", "", "a")
    live = {"metadata": {"name": "a", "uid": "u1", "resourceVersion": "5"}}
    desired = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
    memo.begin()
    memo.remember(key, live, object_digest(desired))
    memo.end()
    memo.begin()
    assert memo.unchanged(key, live, object_digest(desired))
    edited = {"metadata": {**live["metadata"], "resourceVersion": "6"}}
    recreated = {"metadata": {**live["metadata"], "uid": "u2"}}
    wanted_now = {**desired, "metadata": {"name": "a", "labels": {"x": "y"}}}
    assert not memo.unchanged(key, edited, object_digest(desired))
    assert not memo.unchanged(key, recreated, object_digest(desired))
    assert not memo.unchanged(key, live, object_digest(wanted_now))
    unversioned = {"metadata": {"name": "a"}}  # a folder of YAML: always compared
    memo.remember(key, unversioned, object_digest(desired))
    memo.end()
    memo.begin()
    assert memo.unchanged(key, live, object_digest(desired))  # kept from the pass that saw it
    memo.end()
    memo.begin()  # a pass without the object (no longer desired)
    memo.end()
    memo.begin()
    assert not memo.unchanged(key, live, object_digest(desired))  # not seen last pass: gone


def test_the_compile_memo_hands_out_fresh_objects_and_follows_the_spec(world):
    from quotas.loader import cluster_spec, tenant_specs

    spec = cluster_spec(world.a100)
    tenant = tenant_specs(world.a100)[0]
    memo = CompileMemo()
    digests = Digests()
    memo.begin(spec)
    first = memo.tenant_objects(compiler.compile_tenant, spec, tenant, digests)
    memo.end()
    assert first == compiler.compile_tenant(spec, tenant)
    assert digests(first[0]) == object_digest(first[0])
    first[0]["metadata"]["name"] = "changed-by-a-caller"
    memo.begin(spec)
    again = memo.tenant_objects(compiler.compile_tenant, spec, tenant, Digests())
    memo.end()
    assert (memo.hits, memo.misses) == (1, 0)
    assert again == compiler.compile_tenant(spec, tenant)  # the caller's change is not kept
    # Another tenant spec (one field) is compiled, not taken from the memo.
    other = type(tenant)(**{**tenant.__dict__, "max_pods": 3})
    memo.begin(spec)
    assert memo.tenant_objects(compiler.compile_tenant, spec, other, Digests()) == (
        compiler.compile_tenant(spec, other)
    )
    assert (memo.hits, memo.misses) == (0, 1)
