"""Writes in parallel against the local API stand-in over HTTP: a pass with several writes at
once still writes every object after what it refers to (its Namespace, its parent Cohort, its
ClusterQueue), records each object's refusal as before, stops at a retryable fault, and a
no-op pass still writes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from devcluster.runner import Handle, start_in_thread
from quotas.kube import compiler
from quotas.kube.applier import KubernetesBackend, RetryableError, Scope, apply_objects
from quotas.kube.resources import key_of
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from tests.cluster_access import hold_cluster_access

GPU = "nvidia.com/gpu"


def cluster() -> ClusterSpec:
    return ClusterSpec(
        name="demo-a100",
        flavors=(
            FlavorSpec(
                name="a100-80gb",
                kind="gpu",
                capacity={GPU: Decimal(64), "cpu": Decimal(512), "memory": Decimal(4 * 1024**4)},
                gpu_model="NVIDIA A100-SXM4-80GB",
                node_labels={"accelerator": "nvidia"},
            ),
        ),
    )


def tenants() -> list[TenantSpec]:
    """Six teams: team-0 a parent whose children team-1 and team-2 share its cohort (a Cohort
    whose parent is another Cohort), the rest in the root cohort."""
    out = []
    for i in range(6):
        slug = f"team-{i}"
        out.append(
            TenantSpec(
                slug=slug,
                generation=1,
                namespaces=(NamespaceSpec(slug), NamespaceSpec(f"{slug}-batch")),
                quotas=(QuotaSpec("a100-80gb", GPU, Decimal(2), Decimal(4)),),
                editors=(f"{slug}-lead",),
                parent="team-0" if i in (1, 2) else None,
                max_pods=50,
            )
        )
    return out


class RecordingBackend(KubernetesBackend):
    """The Kubernetes backend, noting when each write started and ended (and how many were
    in flight at once): what the stand-in saw, in time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.spans: dict[tuple[str, str, str, str], tuple[float, float]] = {}
        self.in_flight = 0
        self.most_in_flight = 0

    def apply(
        self, obj: dict[str, Any], *, dry_run: bool = False, headers: Any = None
    ) -> dict[str, Any]:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        start = time.monotonic()
        try:
            return super().apply(obj, dry_run=dry_run)
        finally:
            with self.lock:
                self.in_flight -= 1
                self.spans[key_of(obj)] = (start, time.monotonic())


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handle]:
    path = tmp_path_factory.mktemp("standin") / "kubeconfig"
    with start_in_thread(kubeconfig_path=path) as handle:
        yield handle


@pytest.fixture
def standin(running: Handle) -> Iterator[Handle]:
    running.reset()
    hold_cluster_access(running)
    yield running
    running.clear_faults()


def backend_for(standin: Handle, concurrency: int) -> RecordingBackend:
    plain = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path), concurrency=concurrency)
    return RecordingBackend(plain.api, concurrency=concurrency)


def test_parallel_writes_never_start_before_what_they_refer_to(standin):
    spec = cluster()
    desired = compiler.compile_cluster(spec, tenants())
    # Every apply takes a while, so that writes overlap and an order broken anywhere shows.
    standin.fail_next(None, None, delay_s=0.01, verbs=["apply"])
    backend = backend_for(standin, concurrency=8)
    try:
        result = apply_objects(backend, desired, Scope(spec.name))
    finally:
        backend.close()

    assert not result.failed, result.failed  # the stand-in refuses objects in missing namespaces
    assert len(result.created) == len(desired)
    assert backend.most_in_flight > 1  # it did write in parallel
    spans = backend.spans

    def ended(key: tuple[str, str, str, str]) -> float:
        return spans[key][1]

    by_name = {(k[1], k[3]): k for k in spans}
    for key, (start, _) in spans.items():
        namespace = key[2]
        if namespace:  # after its Namespace was written
            assert ended(by_name[("Namespace", namespace)]) <= start, key
    cohorts = [o for o in desired if o["kind"] == "Cohort"]
    children = [o for o in cohorts if o["spec"].get("parentName")]
    assert children, "the data must have a Cohort with a parent"
    for child in children:
        parent = by_name[("Cohort", child["spec"]["parentName"])]
        assert ended(parent) <= spans[key_of(child)][0]
    queues = [o for o in desired if o["kind"] == "ClusterQueue"]
    for queue in queues:  # after its cohort and the flavors it names
        assert ended(by_name[("Cohort", queue["spec"]["cohortName"])]) <= spans[key_of(queue)][0]
        assert ended(by_name[("ResourceFlavor", "a100-80gb")]) <= spans[key_of(queue)][0]
    last_cluster_queue = max(ended(key_of(q)) for q in queues)
    for local in (o for o in desired if o["kind"] == "LocalQueue"):
        assert last_cluster_queue <= spans[key_of(local)][0]

    standin.clear_faults()
    standin.reset_stats()
    again = backend_for(standin, concurrency=8)
    try:
        noop = apply_objects(again, desired, Scope(spec.name))
    finally:
        again.close()
    assert (noop.writes, noop.unchanged, noop.failed) == (0, len(desired), [])
    verbs = standin.stats()["verbs"]
    assert sum(verbs.get(v, 0) for v in ("create", "update", "patch", "apply", "delete")) == 0


def test_a_refused_object_fails_alone_and_is_recorded_in_order(standin):
    spec = cluster()
    desired = compiler.compile_cluster(spec, tenants())
    bad_names = {"team-1", "team-4"}
    objects = []
    for obj in desired:
        if obj["kind"] == "ClusterQueue" and obj["metadata"]["name"] in bad_names:
            obj = {**obj, "spec": {**obj["spec"], "cohortName": None}}  # borrowing, no cohort
        objects.append(obj)
    outcomes = []
    for concurrency in (1, 8):  # the same objects, one at a time and in parallel
        standin.reset()
        hold_cluster_access(standin)
        backend = KubernetesBackend.from_kubeconfig(
            str(standin.kubeconfig_path), concurrency=concurrency
        )
        try:
            outcomes.append(apply_objects(backend, objects, Scope(spec.name)))
        finally:
            backend.close()
    sequential, result = outcomes

    assert [(k[1], k[3]) for k, _ in result.failed] == [
        ("ClusterQueue", "team-1"),
        ("ClusterQueue", "team-4"),
    ]
    assert all("borrowingLimit" in message for _, message in result.failed)
    assert len(result.created) == len(objects) - 2  # every other object written
    # Recorded as a sequential pass records them: the same failures and messages, the same
    # objects created in the same order.
    assert result.failed == sequential.failed
    assert [c.key for c in result.created] == [c.key for c in sequential.created]


def test_a_retryable_fault_stops_the_pass_and_the_next_pass_converges(standin):
    spec = cluster()
    desired = compiler.compile_cluster(spec, tenants())
    backend = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path), concurrency=8)
    try:
        standin.fail_next(1, 503, verbs=["apply"], path_contains="/resourcequotas/")
        with pytest.raises(RetryableError):
            apply_objects(backend, desired, Scope(spec.name))
        standin.reset_stats()
        again = apply_objects(backend, desired, Scope(spec.name))
    finally:
        backend.close()
    assert not again.failed
    assert again.writes + again.unchanged == len(desired)
    # Nothing after the failed wave was written by the first pass: the LocalQueues (a later
    # wave) are all created by the second one.
    assert {c.key[1] for c in again.created} >= {"LocalQueue", "ClusterQueue"}


def test_the_client_pool_holds_a_connection_per_concurrent_write(standin):
    backend = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path), concurrency=24)
    try:
        assert backend.concurrency == 24
        assert backend.api.configuration.connection_pool_maxsize >= 24
        assert backend.api.rest_client.pool_manager.connection_pool_kw["maxsize"] >= 24
    finally:
        backend.close()
    with pytest.raises(ValueError, match="concurrency"):
        KubernetesBackend(object(), concurrency=0)


def test_pruning_in_parallel_removes_what_a_sequential_pass_removes(standin):
    spec = cluster()
    everyone, fewer = tenants(), tenants()[3:]  # team-0 (a parent) and its children leave
    pruned = []
    for concurrency in (1, 8):
        standin.reset()
        hold_cluster_access(standin)
        backend = KubernetesBackend.from_kubeconfig(
            str(standin.kubeconfig_path), concurrency=concurrency
        )
        try:
            apply_objects(backend, compiler.compile_cluster(spec, everyone), Scope(spec.name))
            result = apply_objects(backend, compiler.compile_cluster(spec, fewer), Scope(spec.name))
            again = apply_objects(backend, compiler.compile_cluster(spec, fewer), Scope(spec.name))
        finally:
            backend.close()
        assert not result.failed, result.failed
        assert again.writes == 0  # nothing left behind
        pruned.append([c.key for c in result.pruned])
    sequential, parallel = pruned
    assert parallel == sequential
    kinds = {key[1] for key in parallel}
    assert {"ClusterQueue", "LocalQueue", "Cohort"} <= kinds and "Namespace" not in kinds
