"""The applier against the local API stand-in over HTTP (the official client): first sync
writes every object once, a no-op pass writes nothing and LISTs each kind once, a change
writes only what changed, hand edits are repaired, what is no longer wanted is pruned, and
the server's refusals and faults come back as permanent or retryable errors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from devcluster.runner import Handle, start_in_thread
from quotas.kube import compiler
from quotas.kube.applier import (
    KubernetesBackend,
    ManifestsBackend,
    RetryableError,
    Scope,
    apply_objects,
)
from quotas.kube.resources import KINDS
from quotas.kube.spec import (
    ANNOTATION_GENERATION,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)
from tests.cluster_access import hold_cluster_access

GPU = "nvidia.com/gpu"
KUBECTL = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "kubectl"


def cluster(**changes: object) -> ClusterSpec:
    spec = ClusterSpec(
        name="demo-a100",
        flavors=(
            FlavorSpec(
                name="a100-80gb",
                kind="gpu",
                capacity={GPU: Decimal(16), "cpu": Decimal(256), "memory": Decimal(2 * 1024**4)},
                gpu_model="NVIDIA A100-SXM4-80GB",
                node_labels={"accelerator": "nvidia"},
            ),
        ),
    )
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


def tenant(slug: str, guaranteed: int = 4, limit: int = 6, generation: int = 1) -> TenantSpec:
    return TenantSpec(
        slug=slug,
        generation=generation,
        namespaces=(NamespaceSpec(slug), NamespaceSpec(f"{slug}-batch")),
        quotas=(QuotaSpec("a100-80gb", GPU, Decimal(guaranteed), Decimal(limit)),),
        editors=(f"{slug}-lead",),
        max_pods=50,
    )


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handle]:
    path = tmp_path_factory.mktemp("standin") / "kubeconfig"
    with start_in_thread(kubeconfig_path=path) as handle:
        yield handle


@pytest.fixture
def standin(running: Handle) -> Handle:
    running.reset()
    hold_cluster_access(running)
    return running


@pytest.fixture
def backend(standin: Handle) -> Iterator[KubernetesBackend]:
    b = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path))
    yield b
    b.close()


def writes(stats: dict) -> int:
    verbs = stats["verbs"]
    return sum(verbs.get(v, 0) for v in ("create", "update", "patch", "apply", "delete"))


def test_first_pass_writes_each_object_once_and_a_second_pass_writes_nothing(standin, backend):
    spec = cluster()
    desired = compiler.compile_cluster(spec, [tenant("team-a"), tenant("team-b", 2, 4)])
    standin.reset_stats()

    first = apply_objects(backend, desired, Scope(spec.name))

    assert not first.failed, first.failed
    assert len(first.created) == len(desired)
    stats = standin.stats()
    assert writes(stats) == len(desired)
    assert stats["verbs"].get("get", 0) == 0  # no per-object GETs
    assert stats["verbs"]["list"] == len(KINDS)

    standin.reset_stats()
    second = apply_objects(backend, desired, Scope(spec.name))
    stats = standin.stats()
    assert (second.writes, second.unchanged) == (0, len(desired))
    assert writes(stats) == 0
    assert stats["verbs"]["list"] == len(KINDS)


def test_a_changed_tenant_changes_only_its_changed_objects_and_restamps_the_rest(standin, backend):
    spec = cluster()
    before = compiler.compile_cluster(spec, [tenant("team-a")])
    apply_objects(backend, before, Scope(spec.name))
    changed = tenant("team-a", guaranteed=6, limit=8, generation=2)
    desired = compiler.compile_cluster(spec, [changed])
    standin.reset_stats()

    result = apply_objects(backend, desired, Scope(spec.name, tenant="team-a"))

    # Exactly the objects whose content changed (the generation annotation aside).
    def content(obj: dict) -> dict:
        meta = {**obj["metadata"], "annotations": {}}
        return {**obj, "metadata": meta}

    old = {compiler.object_key(o): content(o) for o in before}
    expected = sorted(
        compiler.object_key(o)[1:] for o in desired if old.get(compiler.object_key(o)) != content(o)
    )
    assert {"ClusterQueue", "ResourceQuota"} <= {k[0] for k in expected}
    assert sorted(c.key[1:] for c in result.changed) == expected
    # The tenant's other objects are as they were but for the generation: written again with
    # the new one only (so kubectl shows the generation the portal's pages say), not changes.
    restamped = sorted(
        compiler.object_key(o)[1:]
        for o in desired
        if ANNOTATION_GENERATION in o["metadata"].get("annotations", {})
        and old.get(compiler.object_key(o)) == content(o)
    )
    assert restamped and sorted(c.key[1:] for c in result.restamped) == restamped
    assert all(c.detail == {} for c in result.restamped)
    assert writes(standin.stats()) == len(expected) + len(restamped)
    cq = next(c for c in result.changed if c.key[1] == "ClusterQueue")
    assert any("nominalQuota" in path for path in cq.detail)


def test_a_hand_edit_is_repaired_and_its_diff_reported(standin, backend):
    spec = cluster()
    desired = compiler.compile_cluster(spec, [tenant("team-a")])
    apply_objects(backend, desired, Scope(spec.name))
    # Someone raises the quota with kubectl.
    subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(standin.kubeconfig_path), "patch", "resourcequota",
         "gpu-portal-quota", "-n", "team-a", "--type", "merge",
         "-p", json.dumps({"spec": {"hard": {"requests.nvidia.com/gpu": "64"}}})],
        check=True, capture_output=True,
    )  # fmt: skip

    result = apply_objects(backend, desired, Scope(spec.name))

    assert [c.describe() for c in result.changed] == ["ResourceQuota team-a/gpu-portal-quota"]
    detail = result.changed[0].detail
    assert detail == {".spec.hard.requests.nvidia.com/gpu": {"desired": "6", "live": "64"}}
    live = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(standin.kubeconfig_path), "get", "resourcequota",
         "gpu-portal-quota", "-n", "team-a", "-o", "json"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    assert json.loads(live.stdout)["spec"]["hard"]["requests.nvidia.com/gpu"] == "6"


def test_objects_no_longer_wanted_are_pruned_but_never_namespaces(standin, backend):
    spec = cluster()
    apply_objects(
        backend, compiler.compile_cluster(spec, [tenant("team-a"), tenant("team-b")]),
        Scope(spec.name),
    )  # fmt: skip

    result = apply_objects(
        backend, compiler.compile_cluster(spec, [tenant("team-a")]), Scope(spec.name)
    )

    pruned = {c.key[1] for c in result.pruned}
    assert {"ClusterQueue", "LocalQueue", "ResourceQuota"} <= pruned
    assert "Namespace" not in pruned  # users' work lives there
    assert all(c.key[3] != "team-a" for c in result.pruned if c.key[1] == "ClusterQueue")


def test_a_refused_object_fails_for_good_and_faults_are_retryable(standin, backend):
    spec = cluster()
    desired = compiler.compile_cluster(spec, [tenant("team-a")])
    bad = [dict(o) for o in desired]
    cq = next(o for o in bad if o["kind"] == "ClusterQueue")
    cq["spec"] = {**cq["spec"], "cohortName": None}  # borrowing without a cohort: 422

    result = apply_objects(backend, bad, Scope(spec.name))
    assert [k[1] for k, _ in result.failed] == ["ClusterQueue"]
    assert "borrowingLimit" in result.failed[0][1]

    standin.fail_next(1, 503)
    with pytest.raises(RetryableError):
        apply_objects(backend, desired, Scope(spec.name))
    # The next pass (the task's retry) converges.
    again = apply_objects(backend, desired, Scope(spec.name))
    assert not again.failed


def test_a_cluster_without_kueue_gets_no_kueue_objects_and_says_so(tmp_path):
    with start_in_thread(kubeconfig_path=tmp_path / "kc", crds_dir=None) as standin:
        hold_cluster_access(standin)
        b = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path))
        spec = cluster()
        result = apply_objects(
            b, compiler.compile_cluster(spec, [tenant("team-a")]), Scope(spec.name)
        )
        b.close()
    assert result.skipped and "kueue.x-k8s.io" in result.skipped[0]
    assert {k[1] for k, _ in result.failed} >= {"ClusterQueue", "LocalQueue"}
    assert any(c.key[1] == "ResourceQuota" for c in result.created)


def test_the_manifests_backend_writes_stable_files_and_a_no_op_pass_changes_nothing(tmp_path):
    spec = cluster()
    desired = compiler.compile_cluster(spec, [tenant("team-a"), tenant("team-b")])
    backend = ManifestsBackend(tmp_path)
    first = apply_objects(backend, desired, Scope(spec.name))
    assert len(first.created) == len(desired)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.yaml"))
    assert files == ["cluster.yaml", "tenants/team-a.yaml", "tenants/team-b.yaml"]
    before = {p: p.read_text() for p in tmp_path.rglob("*.yaml")}

    second = apply_objects(backend, desired, Scope(spec.name))
    assert second.writes == 0
    assert {p: p.read_text() for p in tmp_path.rglob("*.yaml")} == before


def test_answers_parse_as_json_does_even_where_orjson_refuses() -> None:
    from quotas.kube.applier import _loads

    text = '{"kind": "List", "items": [{"n": 1, "f": 2.5, "s": "ü"}], "nan": NaN}'
    parsed, expected = _loads(text.encode()), json.loads(text)
    assert parsed["items"] == expected["items"] and parsed["nan"] != parsed["nan"]
