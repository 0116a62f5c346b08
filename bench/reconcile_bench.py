"""Reconcile benchmark: the compiler and the applier against the local API stand-in, 1,000
tenants x 2 namespaces on one cluster (two GPU flavors and a CPU flavor, cohorts, Kueue on).

The stand-in runs in a child process with validation on (its default), so its CPU time does
not share the GIL with the client. First the first sync one write at a time (concurrency 1) on
a stand-in of its own: the baseline; then the stand-in alone (GETs from as many threads as the
pass uses: its request ceiling); then, on a fresh stand-in, four passes with ``--concurrency``
writes at once (KUBE_APPLY_CONCURRENCY's default), each counted with the stand-in's own stats:

(a) first sync: one write per object, no per-object GET, one LIST per kind;
(b) no-op: no write, one LIST per kind plus its pagination pages (500 items a page);
(c) one tenant changed (a GPU guarantee +1, generation +1), applied by a tenant pass; then
    another tenant changed the same way, applied by a full pass: the writes are exactly the
    objects whose content changed (the generation annotation aside).

(l) then the first sync again on two more fresh stand-ins that delay every write's answer by
    ``--write-latency-ms`` (default 5; a fault rule with no status: an ``asyncio.sleep``, no
    CPU), one write at a time and ``--concurrency`` at a time. The delay stands for what a
    real cluster adds to a write beyond the API server's CPU: etcd's commit and admission
    webhooks. Without it both sides are pure CPU on the same cores, and 8 writes at once
    cannot be 4x faster on 2 cores.

The figures: the sequential first sync's wall time over the parallel one's with the write
latency (target >= 4) and without it (no target: it measures the machine's free cores), and
the no-op pass's wall time as a ratio of the (parallel) first sync's (target <= 0.10). Exit
status 0 only when every exact count holds and the no-op target does (the speed-ups are
figures of the run: they depend on the cores the machine has free). See README.md."""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import math
import os
import pstats
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import emit, figure  # noqa: E402 - bench/figures.py, the line bench/run.py reads

from devcluster.runner import ProcessHandle, start_in_subprocess  # noqa: E402
from quotas.kube import compiler  # noqa: E402
from quotas.kube.applier import (  # noqa: E402
    LIST_PAGE,
    ApplyError,
    ApplyResult,
    KubernetesBackend,
    Scope,
    apply_objects,
)
from quotas.kube.resources import KINDS, Kind, key_of  # noqa: E402
from quotas.kube.spec import (  # noqa: E402
    ANNOTATION_GENERATION,
    CapSpec,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    PersonSpec,
    QuotaSpec,
    TenantSpec,
)
from tests.cluster_access import hold_cluster_access  # noqa: E402 - the binder's role

TARGET = 0.10  # no-op pass wall time / first sync wall time, at most
# Per-person caps (R14): the no-op pass's time per object with every tenant's people capped,
# as a ratio of the same run's without caps, at most.
CAPS_TARGET = 1.3
SPEEDUP_TARGET = 4.0  # sequential / parallel first sync with the write latency, at least
CLUSTER = "bench"
GPU, CPU, MEM = "nvidia.com/gpu", "cpu", "memory"
GI, TI = 1024**3, 1024**4
WRITE_VERBS = ("create", "update", "patch", "apply", "delete")
Key = tuple[str, str, str, str]
Objects = list[dict[str, Any]]


# --- the data -----------------------------------------------------------------------------------


def cluster_spec() -> ClusterSpec:
    """Two GPU flavors and a CPU flavor, capacities that hold every tenant's limits."""
    d = Decimal
    return ClusterSpec(
        name=CLUSTER,
        flavors=(
            FlavorSpec(
                "a100-80gb",
                "gpu",
                {GPU: d(8192), CPU: d(65536), MEM: d(512 * TI)},
                gpu_model="NVIDIA A100-SXM4-80GB",
                node_labels={"accelerator": "a100"},
            ),
            FlavorSpec(
                "h100-80gb",
                "gpu",
                {GPU: d(4096), CPU: d(65536), MEM: d(512 * TI)},
                gpu_model="NVIDIA H100 80GB HBM3",
                node_labels={"accelerator": "h100"},
            ),
            FlavorSpec(
                "cpu-epyc",
                "cpu",
                {CPU: d(131072), MEM: d(1024 * TI)},
                node_labels={"node-pool": "cpu"},
            ),
        ),
        has_kueue=True,
    )


def tenant_specs(count: int, namespaces: int) -> list[TenantSpec]:
    """``count`` tenants. Every 10th is a parent (its children share a cohort named after it);
    the next 5 are its children; the other 4 join the root cohort. Every tenant has A100 and
    CPU quotas, every other one H100 too; every 4th splits its quota by priority (two more
    ResourceQuotas per namespace); each has an editor and every 3rd a viewer."""
    d = Decimal
    purposes = ("training", "inference")
    tenants = []
    for i in range(count):
        slug = f"team-{i:04d}"
        parent = f"team-{i - i % 10:04d}" if 1 <= i % 10 <= 5 else None
        a100 = 2 + i % 5
        quotas = [
            QuotaSpec("a100-80gb", GPU, d(a100), d(a100 + 2)),
            QuotaSpec("a100-80gb", CPU, d(8 * a100), d(8 * a100 + 16)),
            QuotaSpec("a100-80gb", MEM, d(64 * GI * a100), d(64 * GI * (a100 + 2))),
            QuotaSpec("cpu-epyc", CPU, d(32), d(64)),
            QuotaSpec("cpu-epyc", MEM, d(128 * GI), d(256 * GI)),
        ]
        if i % 2 == 0:
            quotas += [
                QuotaSpec("h100-80gb", GPU, d(2), d(4)),
                QuotaSpec("h100-80gb", CPU, d(16), d(32)),
                QuotaSpec("h100-80gb", MEM, d(128 * GI), d(256 * GI)),
            ]
        tenants.append(
            TenantSpec(
                slug=slug,
                generation=1,
                namespaces=tuple(
                    NamespaceSpec(f"{slug}-ns{n}", purposes[n] if n < 2 else "general")
                    for n in range(namespaces)
                ),
                quotas=tuple(quotas),
                display_name=f"Team {i:04d}",
                parent=parent,
                max_running_jobs=20,
                max_queued_jobs=100,
                max_pods=200,
                storage_bytes=d(TI),
                max_pvcs=20,
                split_by_priority=i % 4 == 0,
                editors=(f"{slug}-lead",),
                viewers=(f"{slug}-viewer",) if i % 3 == 0 else (),
            )
        )
    return tenants


def with_people(tenants: list[TenantSpec], per_tenant: int) -> list[TenantSpec]:
    """Every tenant with ``per_tenant`` capped people (1 or 2 A100s each, every 5th also
    capped on CPU): 10 a tenant over 1,000 tenants is the issue's 10,000 people."""
    d = Decimal
    return [
        dataclasses.replace(
            tenant,
            people=tuple(
                PersonSpec(
                    f"{tenant.slug}-user{j}",
                    (CapSpec("a100-80gb", GPU, d(1 + j % 2)),)
                    + ((CapSpec("a100-80gb", CPU, d(8)),) if j % 5 == 0 else ()),
                )
                for j in range(per_tenant)
            ),
        )
        for tenant in tenants
    ]


def caps_report(
    *, people: int, without: tuple[int, float, Pass], with_caps: tuple[int, float, Pass]
) -> dict[str, Any]:
    """The per-person caps figures: the portal's CPU per object of a no-op reconcile (compile
    plus the no-op pass) with caps against without (the figure with a target), and the no-op
    pass's wall time per object both ways."""
    (n0, compile0, pass0), (n1, compile1, pass1) = without, with_caps
    cpu0 = 1e6 * (compile0 + pass0.client_cpu_s) / n0
    cpu1 = 1e6 * (compile1 + pass1.client_cpu_s) / n1
    return {
        "people": people,
        "objects": n0,
        "objects_with_caps": n1,
        "cpu_us_per_object": round(cpu0, 2),
        "cpu_with_caps_us_per_object": round(cpu1, 2),
        "ratio": round(cpu1 / cpu0, 3),
        "noop_pass_cpu_us_per_object": round(1e6 * pass0.client_cpu_s / n0, 2),
        "noop_pass_cpu_with_caps_us_per_object": round(1e6 * pass1.client_cpu_s / n1, 2),
        "pass_cpu_ratio": round((pass1.client_cpu_s / n1) / (pass0.client_cpu_s / n0), 3),
        "noop_wall_us_per_object": round(1e6 * pass0.wall_s / n0, 2),
        "noop_wall_with_caps_us_per_object": round(1e6 * pass1.wall_s / n1, 2),
        "wall_ratio": round((pass1.wall_s / n1) / (pass0.wall_s / n0), 3),
    }


def bump(tenant: TenantSpec) -> TenantSpec:
    """The tenant's A100 guarantee +1 (its limit too, so limit >= guarantee), generation +1."""
    quotas = tuple(
        dataclasses.replace(q, guaranteed=q.guaranteed + 1, limit=q.limit + 1)
        if (q.flavor, q.resource) == ("a100-80gb", GPU)
        else q
        for q in tenant.quotas
    )
    return dataclasses.replace(tenant, quotas=quotas, generation=tenant.generation + 1)


def tenant_desired(spec: ClusterSpec, tenant: TenantSpec) -> Objects:
    """What a tenant pass applies (as ``quotas.sync.desired_objects(tenant=...)``): the
    cluster-wide objects the tenant needs and its own."""
    return [*compiler.compile_cluster_wide(spec, [tenant]), *compiler.compile_tenant(spec, tenant)]


def content(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without the generation annotation (a change of it alone restamps the
    object: ``restamped_keys``)."""
    annotations = dict(obj["metadata"].get("annotations") or {})
    annotations.pop(ANNOTATION_GENERATION, None)
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def changed_keys(before: Objects, after: Objects) -> set[Key]:
    old = {key_of(o): content(o) for o in before}
    return {key_of(o) for o in after if old.get(key_of(o)) != content(o)}


def restamped_keys(before: Objects, after: Objects) -> set[Key]:
    """Objects as they were but for the generation annotation: written again to say the
    tenant's new generation (``quotas.kube.diff.GENERATION_ONLY``)."""
    old = {key_of(o): o for o in before}
    return {
        key_of(o)
        for o in after
        if key_of(o) in old and old[key_of(o)] != o and content(old[key_of(o)]) == content(o)
    }


# --- expected LIST requests ---------------------------------------------------------------------


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """The two forms the applier writes: ``a=b`` and ``!a``."""
    for part in filter(None, selector.split(",")):
        if part.startswith("!"):
            if part[1:] in labels:
                return False
        else:
            name, _, value = part.partition("=")
            if labels.get(name) != value:
                return False
    return True


# A full pass also reads the cluster's StorageClasses and VolumeAttributesClasses (one LIST
# each where the cluster serves storage.k8s.io/v1 of both, as the stand-in does).
STORAGE_CLASS_LISTS = 2


def expected_lists(live: Objects, desired: Objects, scope: Scope) -> int:
    """One LIST request per kind and selector, plus one per further page of LIST_PAGE items
    (``live`` is what the stand-in holds before the pass), plus the storage classes' reads on
    a full pass."""
    by_kind: dict[tuple[str, str], Objects] = {}
    for obj in live:
        by_kind.setdefault((obj["apiVersion"], obj["kind"]), []).append(obj)
    total = 0
    for kind in KINDS:
        wanted = [o for o in desired if (o["apiVersion"], o["kind"]) == _type(kind)]
        for selector in scope.selectors(wanted):
            matching = sum(
                selector_matches(selector, o["metadata"].get("labels") or {})
                for o in by_kind.get(_type(kind), [])
            )
            total += max(1, math.ceil(matching / LIST_PAGE))
    if scope.tenant is None:
        total += STORAGE_CLASS_LISTS
    return total


def _type(kind: Kind) -> tuple[str, str]:
    return (kind.api_version, kind.kind)


# --- a pass ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Pass:
    name: str
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    verbs: dict[str, int]
    result: ApplyResult
    checks: list[tuple[str, bool, str]] = dataclasses.field(default_factory=list)
    expected: list[str] = dataclasses.field(default_factory=list)  # objects it should change

    @property
    def writes(self) -> int:
        return sum(self.verbs.get(v, 0) for v in WRITE_VERBS)

    def check(self, what: str, got: Any, expected: Any) -> None:
        if isinstance(expected, list) and isinstance(got, list) and expected and got == expected:
            detail = f"{len(got)} as expected"
        elif isinstance(expected, list) and isinstance(got, list) and expected:
            extra = [describe(k) for k in got if k not in expected]
            missing = [describe(k) for k in expected if k not in got]
            detail = (
                f"{len(got)}, expected {len(expected)}; extra {extra[:5]}, missing {missing[:5]}"
            )
        else:
            detail = f"{got} (expected {expected})"
        self.checks.append((what, got == expected, detail))

    def row(self) -> dict[str, Any]:
        r = self.result
        return {
            "pass": self.name,
            "wall_s": round(self.wall_s, 3),
            "client_cpu_s": round(self.client_cpu_s, 3),
            "server_cpu_s": round(self.server_cpu_s, 3),
            "requests": dict(sorted(self.verbs.items())),
            "writes": self.writes,
            "created": len(r.created),
            "changed": len(r.changed),
            "pruned": len(r.pruned),
            "unchanged": r.unchanged,
            "failed": len(r.failed),
            "checks": {what: ok for what, ok, _ in self.checks},
            **({"expected_changes": self.expected} if self.expected else {}),
        }


def server_cpu(standin: ProcessHandle) -> float:
    """User + system CPU seconds of the stand-in's process (Linux /proc)."""
    try:
        fields = Path(f"/proc/{standin.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_pass(
    name: str,
    standin: ProcessHandle,
    backend: KubernetesBackend,
    desired: Objects,
    scope: Scope,
    profile: cProfile.Profile | None,
) -> Pass:
    standin.reset_stats()
    cpu0, server0, wall0 = time.process_time(), server_cpu(standin), time.perf_counter()
    if profile is not None:
        profile.enable()
    result = apply_objects(backend, desired, scope)
    if profile is not None:
        profile.disable()
    wall = time.perf_counter() - wall0
    cpu, server = time.process_time() - cpu0, server_cpu(standin) - server0
    stats = standin.stats()
    done = Pass(name, wall, cpu, server, dict(stats["verbs"]), result)
    done.check("no failed objects", [f"{k[1]} {k[3]}: {m}" for k, m in result.failed][:3], [])
    done.check("no per-object GETs", done.verbs.get("get", 0), 0)
    return done


def standin_alone(standin: ProcessHandle, threads: int, seconds: float = 3.0) -> dict[str, Any]:
    """The stand-in's own ceiling: ``GET /version`` (authenticated, no object work) from
    ``threads`` threads, each with its own keep-alive connection, for ``seconds``: requests a
    second and the stand-in's CPU per request (the client's work per request is next to none)."""
    import urllib3

    token = ""
    for line in standin.kubeconfig_path.read_text().splitlines():
        if line.strip().startswith("token:"):
            token = line.split(":", 1)[1].strip().strip("'\"")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    counts = [0] * threads
    deadline = time.perf_counter() + seconds

    def hammer(i: int) -> None:
        with urllib3.PoolManager(maxsize=1) as http:
            while time.perf_counter() < deadline:
                http.request("GET", standin.url + "/version", headers=headers)
                counts[i] += 1

    server0, wall0 = server_cpu(standin), time.perf_counter()
    workers = [threading.Thread(target=hammer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall, server = time.perf_counter() - wall0, server_cpu(standin) - server0
    total = sum(counts)
    return {
        "threads": threads,
        "requests": total,
        "requests_per_s": round(total / wall, 1),
        "stand_in_cpu_per_request_ms": round(1e3 * server / max(total, 1), 3),
        "stand_in_cpu_share": round(server / wall, 2),
    }


def bound_by(p: Pass, cpus: int) -> str:
    """Which side limited a pass: the stand-in (one process, one core at most) busy nearly all
    the wall time; else the client (its threads share one GIL); else the machine's cores, all
    busy with both (or with other work: load)."""
    server_share, client_share = p.server_cpu_s / p.wall_s, p.client_cpu_s / p.wall_s
    if server_share >= 0.85:
        return f"the stand-in (its CPU {server_share:.0%} of the wall time, one core at most)"
    if client_share >= 0.85:
        return f"the client (its CPU {client_share:.0%} of the wall time, one GIL)"
    if server_share + client_share >= 0.85 * cpus:
        return (
            f"the machine: {cpus} cores, stand-in {server_share:.0%} + client "
            f"{client_share:.0%} of the wall time"
        )
    return (
        f"neither side's CPU (stand-in {server_share:.0%}, client {client_share:.0%} of the wall "
        "time): the rest is waiting, or other load on the machine"
    )


def show(p: Pass) -> None:
    r = p.result
    verbs = " ".join(f"{v}={n}" for v, n in sorted(p.verbs.items()))
    print(
        f"\n[{p.name}] wall {p.wall_s:.2f} s (client CPU {p.client_cpu_s:.2f} s, "
        f"stand-in CPU {p.server_cpu_s:.2f} s)"
    )
    print(f"  requests: {sum(p.verbs.values())} ({verbs})")
    print(
        f"  objects: created {len(r.created)}, changed {len(r.changed)}, restamped {len(r.restamped)}, "
        f"pruned {len(r.pruned)}, unchanged {r.unchanged}, failed {len(r.failed)}"
    )
    for what, ok, detail in p.checks:
        print(f"  {'PASS' if ok else 'FAIL'} {what}: {detail}")
    if p.expected:
        print(f"  expected changes: {', '.join(p.expected)}")


def describe(key: Key) -> str:
    return f"{key[1]} {key[2] + '/' if key[2] else ''}{key[3]}"


def keys(changes: Sequence[Any]) -> list[Key]:
    return sorted(c.key for c in changes)


# --- the run --------------------------------------------------------------------------------------


def latency_first_sync(
    tmp: Path,
    extra: list[str],
    before: Objects,
    scope: Scope,
    *,
    latency_ms: float,
    concurrency: int,
) -> Pass:
    """The first sync on a fresh stand-in whose every write waits ``latency_ms`` before it is
    served (a fault rule that only delays: an ``asyncio.sleep``, no CPU, so writes in flight
    overlap as they would on etcd)."""
    standin = start_in_subprocess(
        kubeconfig_path=tmp / f"kubeconfig-latency-{concurrency}",
        state_dir=tmp / f"state-latency-{concurrency}",
        extra_args=extra,
    )
    hold_cluster_access(standin)
    backend = KubernetesBackend.from_kubeconfig(
        str(standin.kubeconfig_path), concurrency=concurrency
    )
    try:
        standin.fail_next(None, None, delay_s=latency_ms / 1000, verbs=list(WRITE_VERBS))
        done = run_pass(
            f"l{concurrency}: first sync, {latency_ms:g} ms a write, {concurrency} at a time",
            standin,
            backend,
            before,
            scope,
            None,
        )
        done.check("created = objects", len(done.result.created), len(before))
        done.check("writes = objects", done.writes, len(before))
        done.check("every write delayed", standin.stats()["faults_injected"], done.writes)
    finally:
        backend.close()
        standin.stop()
    show(done)
    return done


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    spec = cluster_spec()
    tenants = tenant_specs(args.tenants, args.namespaces)
    t0 = time.perf_counter()
    before = compiler.compile_cluster(spec, tenants)
    compile_s = time.perf_counter() - t0
    per_kind = Counter(o["kind"] for o in before)
    print(
        f"{len(before)} objects for {len(tenants)} tenants x {args.namespaces} namespaces, "
        f"compiled in {compile_s:.2f} s: "
        + ", ".join(f"{k} {n}" for k, n in sorted(per_kind.items()))
    )

    extra = ["--ephemeral", "--log-level", "ERROR"]  # no banner; errors still show
    if args.no_validation:
        extra.append("--no-validation")
    full = Scope(CLUSTER)
    loadavg = os.getloadavg()

    # (a0) the baseline: the first sync one write at a time, on a stand-in of its own
    sequential_standin = start_in_subprocess(
        kubeconfig_path=tmp / "kubeconfig-1", state_dir=tmp / "state-1", extra_args=extra
    )
    hold_cluster_access(sequential_standin)
    sequential_backend = KubernetesBackend.from_kubeconfig(
        str(sequential_standin.kubeconfig_path), concurrency=1
    )
    try:
        sequential = run_pass(
            "a0: first sync, one write at a time",
            sequential_standin,
            sequential_backend,
            before,
            full,
            None,
        )
        sequential.check("created = objects", len(sequential.result.created), len(before))
        show(sequential)
        alone = standin_alone(sequential_standin, args.concurrency)
        print(
            f"\n[stand-in alone] GET /version from {alone['threads']} threads: "
            f"{alone['requests_per_s']:.0f} requests/s, its CPU "
            f"{alone['stand_in_cpu_per_request_ms']:.2f} ms a request "
            f"({alone['stand_in_cpu_share']:.0%} of a core); an apply cost it "
            f"{1e3 * sequential.server_cpu_s / len(before):.2f} ms of CPU in the pass above"
        )
    finally:
        sequential_backend.close()
        sequential_standin.stop()

    standin = start_in_subprocess(
        kubeconfig_path=tmp / "kubeconfig", state_dir=tmp / "state", extra_args=extra
    )
    hold_cluster_access(standin)
    print(
        f"stand-in: pid {standin.process.pid}, {standin.url}, "
        f"validation {'off' if args.no_validation else 'on'}, "
        f"client concurrency {args.concurrency}"
    )
    profile = cProfile.Profile() if args.profile else None
    backend = KubernetesBackend.from_kubeconfig(
        str(standin.kubeconfig_path), concurrency=args.concurrency
    )
    passes: list[Pass] = [sequential]
    caps_figures: dict[str, Any] | None = None
    try:
        # (a) first sync
        first = run_pass("a: first sync", standin, backend, before, full, profile)
        first.check("created = objects", len(first.result.created), len(before))
        first.check("writes = objects", first.writes, len(before))
        first.check("all server-side applies", first.verbs.get("apply", 0), len(before))
        first.check("LIST requests", first.verbs.get("list", 0), expected_lists([], before, full))
        passes.append(first)
        show(first)

        # (b) no-op
        noop = run_pass("b: no-op", standin, backend, before, full, None)
        noop.check("writes", noop.writes, 0)
        noop.check("unchanged = objects", noop.result.unchanged, len(before))
        noop.check("LIST requests", noop.verbs.get("list", 0), expected_lists(before, before, full))
        passes.append(noop)
        show(noop)

        # (c1) one tenant changed, a tenant pass
        a_index = 1 if len(tenants) > 1 else 0  # a child of team-0000: in a parent's cohort
        tenants[a_index] = changed_a = bump(tenants[a_index])
        after_a = compiler.compile_cluster(spec, tenants)
        expected_a = changed_keys(before, after_a)
        scope_a = Scope(CLUSTER, tenant=changed_a.slug)
        own_a = tenant_desired(spec, changed_a)
        tenant_pass = run_pass(
            f"c1: {changed_a.slug} changed, tenant pass", standin, backend, own_a, scope_a, None
        )
        tenant_pass.check("its objects as in the full compile", changed_keys(after_a, own_a), set())
        tenant_pass.check(
            "changed = expected objects", keys(tenant_pass.result.changed), sorted(expected_a)
        )
        restamp_a = restamped_keys(before, after_a)
        tenant_pass.check(
            "restamped = the tenant's other objects",
            keys(tenant_pass.result.restamped),
            sorted(restamp_a),
        )
        tenant_pass.check(
            "writes = expected objects", tenant_pass.writes, len(expected_a) + len(restamp_a)
        )
        tenant_pass.check(
            "created, pruned",
            (len(tenant_pass.result.created), len(tenant_pass.result.pruned)),
            (0, 0),
        )
        tenant_pass.check(
            "LIST requests",
            tenant_pass.verbs.get("list", 0),
            expected_lists(before, own_a, scope_a),
        )
        tenant_pass.expected = [describe(k) for k in sorted(expected_a)]
        passes.append(tenant_pass)
        show(tenant_pass)

        # (c2) another tenant changed the same way, a full pass
        b_index = 4 if len(tenants) > 4 else a_index  # also a child; split by priority
        tenants[b_index] = changed_b = bump(tenants[b_index])
        after_b = compiler.compile_cluster(spec, tenants)
        expected_b = changed_keys(after_a, after_b)
        full_pass = run_pass(
            f"c2: {changed_b.slug} changed, full pass", standin, backend, after_b, full, None
        )
        full_pass.check(
            "changed = expected objects", keys(full_pass.result.changed), sorted(expected_b)
        )
        restamp_b = restamped_keys(after_a, after_b)
        full_pass.check(
            "writes = expected objects", full_pass.writes, len(expected_b) + len(restamp_b)
        )
        full_pass.check(
            "created, pruned", (len(full_pass.result.created), len(full_pass.result.pruned)), (0, 0)
        )
        full_pass.check(
            "unchanged = the others",
            full_pass.result.unchanged,
            len(after_b) - len(expected_b) - len(restamp_b),
        )
        full_pass.check(
            "LIST requests", full_pass.verbs.get("list", 0), expected_lists(after_a, after_b, full)
        )
        full_pass.expected = [describe(k) for k in sorted(expected_b)]
        passes.append(full_pass)
        show(full_pass)

        # (d) per-person caps (R14): every tenant's people capped, pushed, then a no-op pass
        # with them, per object against (b)'s.
        if args.people > 0:
            capped = with_people(tenants, args.people)
            c0 = time.process_time()  # the same tenants without caps, compiled again: warm
            compiler.compile_cluster(spec, tenants)
            plain_compile_cpu_s = time.process_time() - c0
            t0, c0 = time.perf_counter(), time.process_time()
            after_caps = compiler.compile_cluster(spec, capped)
            caps_compile_s, caps_compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
            print(
                f"\n{len(after_caps)} objects with {args.people} capped people a tenant "
                f"({args.people * len(tenants)} people), compiled in {caps_compile_s:.2f} s"
            )
            caps_push = run_pass(
                "d1: per-person caps, full pass", standin, backend, after_caps, full, None
            )
            caps_push.check(
                "created = the people's objects",
                len(caps_push.result.created),
                len(after_caps) - len(after_b),
            )
            passes.append(caps_push)
            show(caps_push)
            caps_noop = run_pass(
                "d2: no-op with per-person caps", standin, backend, after_caps, full, None
            )
            caps_noop.check("writes", caps_noop.writes, 0)
            caps_noop.check("unchanged = objects", caps_noop.result.unchanged, len(after_caps))
            caps_noop.check(
                "LIST requests",
                caps_noop.verbs.get("list", 0),
                expected_lists(after_caps, after_caps, full),
            )
            passes.append(caps_noop)
            show(caps_noop)
            # The portal's side of a no-op reconcile (compile, then the no-op pass: its LISTs
            # read, diffed, nothing written), its CPU per object; and the wall time of the pass.
            caps_figures = caps_report(
                people=args.people * len(tenants),
                without=(len(before), plain_compile_cpu_s, noop),
                with_caps=(len(after_caps), caps_compile_cpu_s, caps_noop),
            )
    finally:
        backend.close()
        standin.stop()

    latency: list[Pass] = []
    if args.write_latency_ms > 0:
        for concurrency in (1, args.concurrency):
            latency.append(
                latency_first_sync(
                    tmp,
                    extra,
                    before,
                    full,
                    latency_ms=args.write_latency_ms,
                    concurrency=concurrency,
                )
            )
        passes.extend(latency)

    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(40)
        print("\nclient profile of the first sync (cumulative):\n" + out.getvalue())

    ratio = noop.wall_s / first.wall_s
    speedup = sequential.wall_s / first.wall_s
    latency_speedup = latency[0].wall_s / latency[1].wall_s if latency else None
    cpus = os.cpu_count() or 1
    return {
        "config": {
            "tenants": args.tenants,
            "namespaces": args.namespaces,
            "validation": not args.no_validation,
            "cpus": cpus,
            "concurrency": args.concurrency,
            "loadavg_before": [round(x, 2) for x in loadavg],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        },
        "standin_alone": alone,
        "standin_cpu_per_apply_ms": round(1e3 * sequential.server_cpu_s / len(before), 3),
        "speedup_first_sync": round(speedup, 2),
        "write_latency_ms": args.write_latency_ms,
        "speedup_first_sync_with_latency": (
            round(latency_speedup, 2) if latency_speedup is not None else None
        ),
        "speedup_target": SPEEDUP_TARGET,
        "bound_sequential": bound_by(sequential, cpus),
        "bound_parallel": bound_by(first, cpus),
        **(
            {
                "bound_latency_sequential": bound_by(latency[0], cpus),
                "bound_latency_parallel": bound_by(latency[1], cpus),
            }
            if latency
            else {}
        ),
        "objects": len(before),
        "objects_by_kind": dict(sorted(per_kind.items())),
        "compile_s": round(compile_s, 3),
        "passes": [p.row() for p in passes],
        "ratio_noop_to_first": round(ratio, 4),
        "target": TARGET,
        "ratio_ok": ratio <= TARGET,
        "person_caps": caps_figures,
        "caps_target": CAPS_TARGET,
        "caps_ok": caps_figures is None or caps_figures["ratio"] <= CAPS_TARGET,
        "failed_checks": [
            f"{p.name}: {what}: {detail}" for p in passes for what, ok, detail in p.checks if not ok
        ],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=1000, help="default 1000")
    parser.add_argument("--namespaces", type=int, default=2, help="per tenant (default 2)")
    parser.add_argument(
        "--no-validation",
        action="store_true",
        help="run the stand-in without quotas.kube.validate (for comparison)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the client during the first sync and print the top",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="writes at once in the parallel passes (default 8, KUBE_APPLY_CONCURRENCY's)",
    )
    parser.add_argument(
        "--write-latency-ms",
        type=float,
        default=5.0,
        help="the first sync again, one at a time and --concurrency at a time, on stand-ins that "
        "delay each write's answer this long without using CPU (etcd's commit, admission "
        "webhooks); the >= 4x target applies to this speed-up; 0 skips it (default 5)",
    )
    parser.add_argument(
        "--people",
        type=int,
        default=10,
        help="capped people a tenant for the per-person caps passes (default 10: 10,000 over "
        "1,000 tenants); 0 skips them",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.people < 0:
        parser.error("--people must not be negative")
    if args.tenants < 1 or args.namespaces < 1 or args.concurrency < 1:
        parser.error("--tenants, --namespaces and --concurrency must be 1 or more")
    if args.write_latency_ms < 0:
        parser.error("--write-latency-ms must not be negative")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the stand-in stops

    with tempfile.TemporaryDirectory(prefix="reconcile-bench-") as tmp:
        report = measure(args, Path(tmp))
    sequential, first, noop = report["passes"][0], report["passes"][1], report["passes"][2]
    latency = report["speedup_first_sync_with_latency"]
    print(
        f"\nfirst sync: one at a time {sequential['wall_s']:.2f} s, {args.concurrency} at a time "
        f"{first['wall_s']:.2f} s: x{report['speedup_first_sync']:.2f} (no write latency: both "
        f"sides pure CPU, no target); load average before / after "
        f"{report['config']['loadavg_before'][0]} / {report['config']['loadavg_after'][0]} "
        f"on {report['config']['cpus']} cores"
    )
    print(f"  one at a time, bound by {report['bound_sequential']}")
    print(f"  {args.concurrency} at a time, bound by {report['bound_parallel']}")
    print(f"  the stand-in's CPU an apply: {report['standin_cpu_per_apply_ms']:.3f} ms")
    if latency is not None:
        slow, fast = report["passes"][-2], report["passes"][-1]
        print(
            f"first sync with {args.write_latency_ms:g} ms a write: one at a time "
            f"{slow['wall_s']:.2f} s, {args.concurrency} at a time {fast['wall_s']:.2f} s: "
            f"x{latency:.2f} (target >= {SPEEDUP_TARGET}: "
            f"{'PASS' if latency >= SPEEDUP_TARGET else 'FAIL'})"
        )
        print(f"  one at a time, bound by {report['bound_latency_sequential']}")
        print(f"  {args.concurrency} at a time, bound by {report['bound_latency_parallel']}")
    print(
        f"\nsummary: {report['objects']} objects; first sync {first['wall_s']:.2f} s "
        f"({1e3 * first['wall_s'] / report['objects']:.2f} ms/object), "
        f"no-op {noop['wall_s']:.2f} s ({1e6 * noop['wall_s'] / report['objects']:.0f} µs/object)"
    )
    verdict = "PASS" if report["ratio_ok"] else "FAIL"
    print(
        f"  {verdict} ratio no-op / first sync = {report['ratio_noop_to_first']:.3f} "
        f"(target <= {TARGET})"
    )
    caps = report["person_caps"]
    caps_figures_out = []
    if caps is not None:
        print(
            f"  {'PASS' if report['caps_ok'] else 'FAIL'} no-op reconcile (compile + no-op "
            f"pass), portal CPU per object with {caps['people']} capped people: "
            f"{caps['cpu_with_caps_us_per_object']:.0f} µs ({caps['objects_with_caps']} objects) "
            f"against {caps['cpu_us_per_object']:.0f} µs without caps ({caps['objects']} "
            f"objects): x{caps['ratio']:.2f} (target <= {CAPS_TARGET}); the no-op pass alone: "
            f"portal CPU per object x{caps['pass_cpu_ratio']:.2f}, wall per object "
            f"x{caps['wall_ratio']:.2f}"
        )
        caps_figures_out += [
            figure(
                f"no-op reconcile, portal CPU per object, {caps['people']} capped people vs "
                "without caps",
                caps["cpu_with_caps_us_per_object"],
                "µs",
                baseline=caps["cpu_us_per_object"],
                ratio=caps["ratio"],
                target=CAPS_TARGET,
                better="lower",
            ),
            figure(
                f"no-op pass alone, portal CPU per object, {caps['people']} capped people vs "
                "without caps",
                caps["noop_pass_cpu_with_caps_us_per_object"],
                "µs",
                baseline=caps["noop_pass_cpu_us_per_object"],
                ratio=caps["pass_cpu_ratio"],
                better="lower",
            ),
            figure(
                f"no-op pass wall per object, {caps['people']} capped people vs without caps",
                caps["noop_wall_with_caps_us_per_object"],
                "µs",
                baseline=caps["noop_wall_us_per_object"],
                ratio=caps["wall_ratio"],
                better="lower",
            ),
        ]
    for p in report["passes"]:
        for what, ok in p["checks"].items():
            print(f"  {'PASS' if ok else 'FAIL'} {p['pass']}: {what}")
    print("BENCH_JSON " + json.dumps(report, sort_keys=True))
    sequential_s = report["passes"][0]["wall_s"]
    first_s, noop_s = report["passes"][1]["wall_s"], report["passes"][2]["wall_s"]
    latency_figures = []
    if latency is not None:
        slow_s, fast_s = report["passes"][-2]["wall_s"], report["passes"][-1]["wall_s"]
        latency_figures.append(
            figure(
                f"first sync, {args.write_latency_ms:g} ms a write, {args.concurrency} writes "
                "at a time (speed-up over one at a time)",
                fast_s,
                "s",
                baseline=slow_s,
                ratio=latency,
                target=SPEEDUP_TARGET,
                better="higher",
            )
        )
    emit("reconcile", [
        *latency_figures,
        figure(f"first sync, no write latency, {args.concurrency} writes at a time (speed-up "
               "over one at a time)", first_s, "s", baseline=sequential_s,
               ratio=report["speedup_first_sync"], better="higher"),
        figure("stand-in alone, GET requests a second", report["standin_alone"]["requests_per_s"],
               "requests/s"),
        figure(f"no-op pass vs first sync, {report['objects']} objects", noop_s, "s",
               baseline=first_s, ratio=report["ratio_noop_to_first"], target=TARGET,
               better="lower"),
        figure("first sync per object", round(1e3 * first_s / report["objects"], 3), "ms"),
        *caps_figures_out,
    ])  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    for failure in report["failed_checks"]:
        print(f"FAIL {failure}")
    ok = report["ratio_ok"] and report["caps_ok"] and not report["failed_checks"]
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except ApplyError as exc:  # a pass failed for good or the stand-in stopped answering
        sys.exit(f"error: {exc.message}")
    except RuntimeError as exc:
        sys.exit(f"error: {exc}")
