"""Scale run (issue 19, item 5): 10,000 tenants on one cluster, on PostgreSQL in databases of
its own (``portal_bench_scale`` and ``portal_bench_scale_small``, dropped and created, migrated
once; dropped at the end) and the local Kubernetes API stand-in (``devcluster``).

The world, seeded in bulk by ``world_create`` / ``tenants_add`` (the same code at every size):
two clusters (``scale-all``: every tenant has a quota set there; ``scale-1k``: the first
1,000), each with an A100 flavor (GPU, CPU, memory) and a CPU flavor; per tenant two namespaces,
a quota set of 5 items per cluster, a lead and every 3rd a viewer; every 10th tenant a
department whose next 5 are its teams (Kueue cohorts); ``--requests`` pending quota requests
filed through the services.

(1) No-op reconcile (``quotas.sync.cluster_reconcile``, what Celery beat runs: compile from the
    database, validate, LIST, compare) at 1,000 and at 10,000 tenants. A real first sync of
    10,000 tenants takes too long, so the stand-in is pre-loaded with what a first sync leaves
    (``preload``: the compiled objects applied in-process by the stand-in's own server-side
    apply, in chunks of tenants, saved to its ``objects.json``); at 1,000 tenants a real first
    sync (over HTTP, validation on) is done too and every stored object is compared with the
    pre-loaded one (identical but for uid, times and resourceVersion, or the run fails).
    Figures: writes (0), LIST requests, portal CPU per object 10,000 vs 1,000 (target <= 1.3),
    and where that CPU goes (compile from the database, validation, LIST and compare).
(2) Query counts and times of the approvals queue page (admin) and the tenants API (a page of
    50) at 10,000 vs 100 tenants, in rounds alternating between the two databases: the counts
    must be equal; time ratio target <= 1.5; the tenant filter's options are counted.
(3) Usage store at ``--gpus`` (10,000) GPUs sampled every ``USAGE_AGENT_SAMPLE_EVERY_S`` (60 s):
    one minute of every GPU's readings written through the agents' path
    (``usage.services.agent_readings_record``, one call per node of 8 GPUs): rows per GPU, rows
    per day, bytes per raw row (``pg_total_relation_size`` of the day's partition), GiB per day,
    and ingest headroom (rows/s sustained over rows/s needed).

    .venv/bin/python bench/scale_bench.py [--tenants 10000] [--mid 1000] [--small 100]

See README.md, "Scale run"."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import benchdb  # noqa: E402 - bench/benchdb.py, after the path is set
import dashboard_bench  # noqa: E402 - its time_pages() and use()
import reconcile_bench  # noqa: E402 - its expected_lists() and server_cpu()
from figures import emit, figure  # noqa: E402 - the line bench/run.py reads

BENCH_RUNNER: dict[str, Any] = {"args": []}  # the defaults are the scale run
DB_NAME = "portal_bench_scale"  # the 10,000 tenants; "_small" the 100
GPU, CPU, MEM = "nvidia.com/gpu", "cpu", "memory"
GI = 1024**3
ALL, MID = "scale-all", "scale-1k"  # the clusters: every tenant, the first --mid
MID_TENANTS = 1000
CAPACITY_TENANTS = 20_000  # the flavors' capacities hold this many tenants' quotas
WALL_TARGET_S = 10  # the beat's no-op reconcile at 10,000 tenants, the next pass (issue 36)
CPU_TARGET = 1.3  # no-op reconcile, portal CPU per object at 10,000 tenants / at 1,000
PAGE_TARGET = 1.5  # page time at 10,000 tenants / at 100
WRITE_VERBS = reconcile_bench.WRITE_VERBS
QUEUE_URL, TENANTS_URL = "/console/approvals/", "/api/v1/tenants/?page_size=50"
# Not the same object in a real sync and a pre-load: set by the server when it stores it.
SERVER_SET = ("uid", "creationTimestamp", "resourceVersion")


# --- the world ----------------------------------------------------------------------------------


def _items() -> list[tuple[str, str, Decimal, Decimal]]:
    """(flavor, resource, guaranteed, limit) of every quota set: the A100 GPU 4 / 6."""
    d = Decimal
    return [
        ("a100-80gb", GPU, d(4), d(6)),
        ("a100-80gb", CPU, d(32), d(48)),
        ("a100-80gb", MEM, d(256 * GI), d(384 * GI)),
        ("cpu-epyc", CPU, d(32), d(64)),
        ("cpu-epyc", MEM, d(128 * GI), d(256 * GI)),
    ]


def world_create() -> None:
    """The two clusters with their flavors and capacities, and a platform admin."""
    from quotas.choices import FlavorKind
    from quotas.models import Cluster, FlavorResource, ResourceFlavor
    from tenants.models import User

    for name in (ALL, MID):
        cluster = Cluster.objects.create(
            name=name, elastic_cap_fraction=Decimal(1), allow_guarantee_overcommit=False
        )
        a100 = ResourceFlavor.objects.create(
            cluster=cluster, name="a100-80gb", kind=FlavorKind.GPU,
            gpu_model="NVIDIA A100-SXM4-80GB", gpu_weight=Decimal(1),
            node_labels={"accelerator": "a100"},
        )  # fmt: skip
        cpu = ResourceFlavor.objects.create(
            cluster=cluster, name="cpu-epyc", kind=FlavorKind.CPU, gpu_weight=Decimal(0),
            node_labels={"node-pool": "cpu"},
        )  # fmt: skip
        flavors = {"a100-80gb": a100, "cpu-epyc": cpu}
        FlavorResource.objects.bulk_create(
            FlavorResource(flavor=flavors[f], resource=r, capacity=limit * CAPACITY_TENANTS)
            for f, r, _, limit in _items()
        )
    User.objects.create_user("scale-admin", is_platform_admin=True)


def tenants_add(count: int, *, mid: int = MID_TENANTS) -> list[str]:
    """``count`` more tenants (numbered after those there are), in bulk: two namespaces, a
    quota set on ``scale-all`` and, for the first ``mid`` tenants, on ``scale-1k``; a lead
    each, a viewer for every 3rd; every 10th a department of the next 5. Their slugs."""
    from quotas.models import Cluster, Quota, QuotaSet, ResourceFlavor, TierTemplate
    from tenants.choices import MembershipRole, NamespacePurpose
    from tenants.models import Membership, Namespace, User

    by_number = benchdb.tenants_numbered(count)
    tenants = list(by_number.values())
    first = min(by_number, default=0)
    Namespace.objects.bulk_create(
        Namespace(tenant=t, name=f"{t.slug}-{purpose}", purpose=purpose)
        for t in tenants
        for purpose in (NamespacePurpose.TRAINING, NamespacePurpose.INFERENCE)
    )
    users = User.objects.bulk_create(
        [User(username=f"{t.slug}-{role}") for t in tenants for role in ("lead", "viewer")]
    )
    Membership.objects.bulk_create(
        Membership(tenant=t, user=u, role=MembershipRole.LEAD if k == 0 else MembershipRole.VIEWER)
        for i, t in enumerate(tenants)
        for k, u in enumerate(users[2 * i : 2 * i + 2])
        if k == 0 or (first + i) % 3 == 0
    )
    tier = TierTemplate.objects.get(name="small")
    scheduling = ("max_running_jobs", "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs")
    for cluster in Cluster.objects.filter(name__in=(ALL, MID)).order_by("name"):
        members = [t for i, t in by_number.items() if cluster.name == ALL or i < mid]
        quota_sets = QuotaSet.objects.bulk_create(
            QuotaSet(tenant=t, cluster=cluster, tier=tier, **{f: getattr(tier, f) for f in scheduling})
            for t in members
        )  # fmt: skip
        flavors = {f.name: f for f in ResourceFlavor.objects.filter(cluster=cluster)}
        Quota.objects.bulk_create(
            Quota(quota_set=qs, flavor=flavors[f], resource=r, guaranteed=g, limit=lim)
            for qs in quota_sets
            for f, r, g, lim in _items()
        )
    return [t.slug for t in tenants]


def requests_file(count: int) -> list[int]:
    """``count`` pending requests through the services, each by its tenant's lead (tenants
    outside departments): the A100 guarantee 4 -> 5, limit 6 -> 7, so one approval applies it."""
    from approvals.choices import RequestStatus
    from approvals.services import quota_request_create, request_items_parse
    from quotas.models import Cluster
    from tenants.models import Tenant, User

    cluster = Cluster.objects.get(name=ALL)
    raw = [{"flavor": "a100-80gb", "resource": GPU, "guaranteed": 5, "limit": 7}]
    plain = Tenant.objects.filter(parent__isnull=True, children__isnull=True).order_by("slug")
    ids = []
    for tenant in plain[:count]:
        request = quota_request_create(
            tenant=tenant, cluster=cluster, requester=User.objects.get(username=f"{tenant.slug}-lead"),
            reason="scale run", items=request_items_parse(cluster=cluster, raw_items=raw), submit=True,
        )  # fmt: skip
        request.refresh_from_db()
        if request.status != RequestStatus.PENDING:
            raise RuntimeError(f"request #{request.pk} of {tenant.slug}: {request.status}")
        ids.append(request.pk)
    return ids


def world(tenants: int, requests: int, *, mid: int = MID_TENANTS) -> None:
    from django.db import connection

    world_create()
    tenants_add(tenants, mid=mid)
    requests_file(requests)
    with connection.cursor() as cursor:  # fresh planner statistics, as autovacuum would give
        cursor.execute("ANALYZE")


# --- (1) the no-op reconcile --------------------------------------------------------------------


def _apply_in_process(cluster: Any, obj: dict[str, Any]) -> None:
    """One server-side apply by the stand-in's own code, as ``KubernetesBackend.apply`` sends
    it (force, the portal's field manager), without HTTP; the body JSON-encoded and decoded
    on the way, as over the wire."""
    from devcluster.objects import Target
    from quotas.kube.spec import FIELD_MANAGER

    body = json.loads(json.dumps(obj))
    group, _, version = body["apiVersion"].rpartition("/")
    resource_type = cluster.registry.by_kind(group, body["kind"])
    metadata = body["metadata"]
    namespace = metadata.get("namespace") if resource_type.namespaced else None
    target = Target(resource_type, version, namespace, metadata["name"])
    cluster.objects.apply(target, body, manager=FIELD_MANAGER, force=True, dry_run=False)


def preload(objects: Sequence[dict[str, Any]], state_dir: Path, *, chunk: int = 200) -> int:
    """Write the ``objects.json`` a stand-in holds after a first sync of ``objects``: the
    objects applied in-process (no validation: it only refuses) to stand-ins of ``chunk``
    tenants each (a store's per-write cost grows with its size), merged into one store with
    fresh resourceVersions. Objects without a tenant go in the first chunk. Returns the
    objects stored (the stand-in's own defaults included)."""
    from devcluster.objects import accept_everything
    from devcluster.runner import build_cluster
    from devcluster.store import Store
    from quotas.kube.applier import sort_for_apply
    from quotas.kube.spec import LABEL_TENANT

    by_tenant: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        tenant = (obj["metadata"].get("labels") or {}).get(LABEL_TENANT, "")
        by_tenant.setdefault(tenant, []).append(obj)
    tenants = sorted(by_tenant)  # "" (no tenant) first
    state_dir.mkdir(parents=True, exist_ok=True)
    merged = Store(state_dir / "objects.json")
    stored = 0
    for start in range(0, len(tenants), chunk):
        part = [obj for t in tenants[start : start + chunk] for obj in by_tenant[t]]
        cluster = build_cluster(validator=accept_everything)
        for obj in sort_for_apply(part):
            _apply_in_process(cluster, obj)
        for type_key in cluster.store.type_keys():
            for obj in cluster.store.list(type_key):
                metadata = obj["metadata"]
                if merged.get(type_key, metadata.get("namespace", ""), metadata["name"]):
                    continue  # the stand-in's own namespaces, in every chunk
                metadata["resourceVersion"] = merged.next_resource_version()
                merged.put(type_key, obj, created=True)
                stored += 1
    merged.save()
    return stored


def standin_start(tmp: Path, name: str, *, preloaded: bool) -> Any:
    """A stand-in in a child process (validation on); a pre-loaded one reads its state dir."""
    from devcluster.runner import start_in_subprocess
    from tests.cluster_access import hold_cluster_access

    extra = ["--log-level", "ERROR"] + ([] if preloaded else ["--ephemeral"])
    handle = start_in_subprocess(
        kubeconfig_path=tmp / f"{name}.kubeconfig", state_dir=tmp / name, extra_args=extra
    )
    # What every managed cluster holds for the portal: its push writes its RoleBinding of each
    # namespace as the binder (docs/rbac.md). A stand-in holding 200,000 objects on a busy
    # machine can take longer than a request's 10 s to answer (it saves its state after each
    # write): asked again, the writes are idempotent.
    for attempt in range(5):
        try:
            return hold_cluster_access(handle)
        except OSError:  # a timeout, or the connection dropped
            if attempt == 4:
                handle.stop()
                raise
            time.sleep(5)
    return handle


def standin_objects(handle: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every stored object (``GET /_devcluster/objects``), by (resource, namespace, name),
    without what the server sets itself when it stores one (uid, times, resourceVersion)."""
    with urllib.request.urlopen(handle.url + "/_devcluster/objects", timeout=300) as answer:  # noqa: S310 - our stand-in
        stored = json.loads(answer.read())
    out = {}
    for type_key, objects in stored.items():
        for obj in objects:
            metadata = {k: v for k, v in obj["metadata"].items() if k not in SERVER_SET}
            if "managedFields" in metadata:
                metadata["managedFields"] = [
                    {k: v for k, v in entry.items() if k != "time"}
                    for entry in metadata["managedFields"]
                ]
            key = (type_key, metadata.get("namespace", ""), metadata["name"])
            out[key] = {**obj, "metadata": metadata}
    return out


def compare_stores(real: Any, preloaded: Any) -> list[str]:
    """What differs between two stand-ins' objects (nothing, for an honest pre-load)."""
    a, b = standin_objects(real), standin_objects(preloaded)
    problems = [f"only after the real sync: {k}" for k in sorted(a.keys() - b.keys())[:5]]
    problems += [f"only pre-loaded: {k}" for k in sorted(b.keys() - a.keys())[:5]]
    differing = [k for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]
    problems += [f"differs: {k}: {a[k]} != {b[k]}" for k in differing[:3]]
    if len(differing) > 3:
        problems.append(f"... {len(differing)} objects differ")
    return problems


@contextlib.contextmanager
def phase_clock(module: Any, names: Sequence[str], spent: dict[str, float]) -> Iterator[None]:
    """Add the CPU time of each call of ``module.<name>`` to ``spent[name]`` while inside:
    the module's own functions, wrapped (the module looks them up at call time)."""
    originals = {name: getattr(module, name) for name in names}

    def timed(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.process_time()
            try:
                return originals[name](*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - began

        return call

    for name in names:
        setattr(module, name, timed(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(module, name, original)


def cluster_point(name: str, handle: Any) -> Any:
    """The cluster row ``name`` reached through ``handle``'s kubeconfig."""
    from quotas.choices import SyncBackend
    from quotas.models import Cluster

    cluster = Cluster.objects.get(name=name)
    cluster.backend = SyncBackend.KUBERNETES
    cluster.kubeconfig_path = str(handle.kubeconfig_path)
    cluster.save(update_fields=["backend", "kubeconfig_path"])
    return cluster


def reconcile_pass(cluster: Any, handle: Any, objects: int) -> dict[str, Any]:
    """One ``cluster_reconcile`` timed: wall, this process's CPU (the portal's side) and its
    phases, the stand-in's CPU, its requests by verb."""
    from quotas import sync

    handle.reset_stats()
    spent: dict[str, float] = {}
    server0 = reconcile_bench.server_cpu(handle)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    with phase_clock(sync, ("desired_objects", "validate_objects", "apply_objects"), spent):
        outcome = sync.cluster_reconcile(cluster=cluster)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    verbs = dict(handle.stats()["verbs"])
    result = outcome.result
    return {
        "objects": objects,
        "error": outcome.error,
        "wall_s": round(wall, 2),
        "portal_cpu_s": round(cpu, 2),
        "portal_cpu_per_object_us": round(1e6 * cpu / objects, 1),
        "phases_cpu_s": {k: round(v, 2) for k, v in spent.items()}
        | {"rest": round(cpu - sum(spent.values()), 2)},
        "standin_cpu_s": round(reconcile_bench.server_cpu(handle) - server0, 2),
        "requests": verbs,
        "writes": sum(verbs.get(v, 0) for v in WRITE_VERBS),
        "lists": verbs.get("list", 0),
        "created": len(result.created) if result else None,
        "unchanged": result.unchanged if result else None,
        "failed": [f"{k}: {m}" for k, m in result.failed][:3] if result else [],
    }


def reconcile_part(
    tmp: Path, *, mid: int, total: int, chunk: int, first_sync: bool = True
) -> dict[str, Any]:
    """(1): real first sync vs pre-load at ``mid`` tenants (unless not ``first_sync``), then
    the no-op pass at ``mid`` and at ``total`` tenants on pre-loaded stand-ins."""
    from quotas.kube.applier import Scope
    from quotas.models import Cluster
    from quotas.sync import cluster_reconcile, desired_objects

    out: dict[str, Any] = {"checks": []}
    real = standin_start(tmp, "real", preloaded=False) if first_sync else None
    try:
        if real is not None:
            cluster = cluster_point(MID, real)
            wall0 = time.perf_counter()
            first = cluster_reconcile(cluster=cluster)
            first_s = time.perf_counter() - wall0
            desired = desired_objects(cluster)
            created = len(first.result.created) if first.result else 0
            print(f"[reconcile] real first sync, {mid} tenants: {created} objects created in "
                  f"{first_s:.1f} s ({first.error or 'no error'})", flush=True)  # fmt: skip
            out["checks"].append(("real first sync creates every object", created == len(desired)
                                  and not first.error, f"{created} of {len(desired)}, {first.error}"))  # fmt: skip
        for size, name in ((mid, MID), (total, ALL)):
            desired = desired_objects(Cluster.objects.get(name=name))
            wall0 = time.perf_counter()
            stored = preload(desired, tmp / f"preload-{size}", chunk=chunk)
            preload_s = time.perf_counter() - wall0
            handle = standin_start(tmp, f"preload-{size}", preloaded=True)
            try:
                print(f"[reconcile] pre-loaded {len(desired)} objects of {size} tenants "
                      f"({stored} stored) in {preload_s:.1f} s", flush=True)  # fmt: skip
                if name == MID and real is not None:
                    problems = compare_stores(real, handle)
                    out["preload_differences"], out["preload_compared"] = len(problems), stored
                    out["checks"].append(("pre-load = real first sync, object for object",
                                          not problems, "; ".join(problems) or
                                          f"{stored} objects identical"))  # fmt: skip
                    real.stop()
                cluster = cluster_point(name, handle)
                run = reconcile_pass(cluster, handle, len(desired))
                # The beat's next pass, in the same process (a worker's steady state, every
                # RECONCILE period): what the pass remembered of the last is used.
                run["repeat"] = reconcile_pass(cluster, handle, len(desired))
                live = list(desired)  # after a first sync the stand-in holds what is desired
                expected = reconcile_bench.expected_lists(live, desired, Scope(name))
                run["lists_expected"] = expected
                run["preload_s"] = round(preload_s, 1)
                out[str(size)] = run
                print(f"[reconcile] no-op, {size} tenants: {json.dumps(run)}", flush=True)
                again = run["repeat"]
                out["checks"] += [
                    (f"no-op at {size}: no error", not run["error"] and not run["failed"],
                     f"{run['error']} {run['failed']}"),
                    (f"repeated no-op at {size}: no error, no writes, every object unchanged",
                     not again["error"] and not again["failed"] and again["writes"] == 0
                     and again["unchanged"] == len(desired) and again["lists"] == expected,
                     f"{again['error']} {again['failed']} {again['requests']} "
                     f"{again['unchanged']} of {len(desired)}"),
                    (f"no-op at {size}: no writes", run["writes"] == 0, str(run["requests"])),
                    (f"no-op at {size}: every object unchanged", run["unchanged"] == len(desired),
                     f"{run['unchanged']} of {len(desired)}"),
                    (f"no-op at {size}: LIST requests", run["lists"] == expected,
                     f"{run['lists']} (expected {expected})"),
                ]  # fmt: skip
            finally:
                handle.stop()
    finally:
        if real is not None:
            real.stop()
    return out


# --- (2) query counts -----------------------------------------------------------------------------


def tenant_options(html: str) -> int:
    """The options of the approvals queue's tenant filter."""
    found = re.search(r'<select name="tenant".*?</select>', html, re.S)
    return found.group(0).count("<option") if found else 0


def page_counts(client: Any) -> dict[str, int]:
    """Queries of the approvals queue and of a tenants API page, and the queue's tenant
    options (after a warm-up request each)."""
    _, _, queue = dashboard_bench.time_pages(client, [QUEUE_URL], 1)
    _, _, api = dashboard_bench.time_pages(client, [TENANTS_URL], 1)
    return {
        "queue_queries": queue,
        "tenants_queries": api,
        "queue_tenant_options": tenant_options(client.get(QUEUE_URL).content.decode()),
    }


def admin_client() -> Any:
    from django.test import Client

    from tenants.models import User

    client = Client()
    client.force_login(User.objects.get(username="scale-admin"))
    return client


def queries_part(names: dict[str, str], rounds: int) -> dict[str, Any]:
    """(2): in ``rounds`` rounds alternating between the databases, the queue page 5 times
    and the tenants API page 10 times; median wall times, the most queries one made."""
    clients, times, counts = {}, {}, {}
    for size, name in names.items():
        dashboard_bench.use(name)
        clients[size] = admin_client()
        counts[size] = page_counts(clients[size])
        times[size] = {"queue": [], "tenants": [], "queue_cpu": [], "tenants_cpu": []}
    for round_ in range(rounds):
        for size in names if round_ % 2 == 0 else list(reversed(names)):
            dashboard_bench.use(names[size])
            for key, url, count in (("queue", QUEUE_URL, 5), ("tenants", TENANTS_URL, 10)):
                wall, cpu, queries = dashboard_bench.time_pages(clients[size], [url], count)
                times[size][key] += wall
                times[size][f"{key}_cpu"] += cpu
                counts[size][f"{key}_queries"] = max(counts[size][f"{key}_queries"], queries)
    return {
        size: counts[size]
        | {f"{k}_ms": round(1e3 * statistics.median(v), 1) for k, v in times[size].items()}
        for size in names
    }


# --- (3) the usage store --------------------------------------------------------------------------


def usage_part(gpus: int, per_node: int, minutes: int) -> dict[str, Any]:
    """(3): ``minutes`` minutes of ``gpus`` GPUs' readings through the agents' path, one call
    per node (each minute its own nodes, so that the per-node sample throttle lets every call
    write, as a minute apart would); the day's partition measured."""
    from django.conf import settings
    from django.db import connection

    from gpu_agent.services.reports import DeviceReading, ReportReadings
    from quotas.models import Cluster, ResourceFlavor
    from tenants.models import Tenant
    from usage import services
    from usage.models import Pod

    cluster = Cluster.objects.get(name=ALL)
    model = ResourceFlavor.objects.get(cluster=cluster, name="a100-80gb").gpu_model
    tenant_ids = list(Tenant.objects.order_by("pk").values_list("pk", flat=True))
    nodes = math.ceil(gpus / per_node)
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    Pod.objects.bulk_create(  # every GPU busy with a pod of a tenant, as the collector saw it
        Pod(cluster_id=cluster.pk, uid=f"pod-{g}", namespace="ns", name=f"pod-{g}",
            tenant_id=tenant_ids[g % len(tenant_ids)], phase="Running", gpus=1, seen_at=day)
        for g in range(gpus)
    )  # fmt: skip
    services.partitions_ensure(days=[day.date()])
    calls = []
    for minute in range(minutes):
        for n in range(nodes):
            devices = tuple(
                DeviceReading(
                    gpu_uuid=f"GPU-{n:05d}-{g}-0000-0000-000000000000",
                    model=model,
                    gi_id=None,
                    mig_profile=None,
                    utilization_pct=(n + g * 13) % 101,
                    memory_used_mib=1024 * g,
                    processes=1,
                    pod_uids=(f"pod-{n * per_node + g}",),
                )
                for g in range(min(per_node, gpus - n * per_node))
            )
            at = day + timedelta(hours=12, minutes=minute)
            calls.append(ReportReadings(minute * nodes + n + 1, cluster.pk, at, devices))
    written, began = 0, time.perf_counter()
    for readings in calls:
        written += services.agent_readings_record(readings=readings)
    seconds = time.perf_counter() - began
    partition = services.partition_name(day.date())
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {partition}")  # as autovacuum would; counts the pages
        cursor.execute(f"SELECT pg_total_relation_size('{partition}'), count(*) FROM {partition}")  # noqa: S608 - our partition's name
        size, rows = cursor.fetchone()
    every_s = settings.USAGE_AGENT_SAMPLE_EVERY_S
    rows_per_gpu = rows / (gpus * minutes)
    rows_per_day = round(gpus * rows_per_gpu * 86400 / every_s)
    needed = gpus * rows_per_gpu / every_s
    return {
        "gpus": gpus,
        "nodes": nodes,
        "minutes": minutes,
        "sample_every_s": every_s,
        "rows_written": written,
        "rows_stored": rows,
        "rows_per_gpu_per_sample": round(rows_per_gpu, 3),
        "rows_per_day": rows_per_day,
        "bytes_per_row": round(size / rows, 1),
        "gib_per_day": round(rows_per_day * size / rows / GI, 2),
        "raw_retention_days": settings.USAGE_RETENTION_DAYS["raw"],
        "ingest_rows_per_s": round(written / seconds),
        "ingest_s": round(seconds, 2),
        "needed_rows_per_s": round(needed, 1),
        "headroom": round(written / seconds / needed, 1),
    }


# --- the run --------------------------------------------------------------------------------------


def clone(database_url: str, source: str, name: str) -> None:
    """``name`` as a copy of the migrated ``source`` (one migration for both databases)."""
    import psycopg

    with psycopg.connect(benchdb._admin_url(database_url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {source}")


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    names = {"small": f"{args.db_name}_small", "big": args.db_name}
    benchdb.setup(args.database_url, args.db_name, str(tmp))
    benchdb.manage("collectstatic")  # the manifest the pages' {% static %} reads
    clone(args.database_url, args.db_name, names["small"])
    benchdb.django_setup()
    report: dict[str, Any] = {"config": vars(args) | {"cpus": os.cpu_count()}}
    for size, tenants in (("small", args.small), ("big", args.tenants)):
        dashboard_bench.use(names[size])
        began = time.perf_counter()
        world(tenants, args.requests, mid=args.mid)
        print(f"seeded {tenants} tenants in {names[size]} in {time.perf_counter() - began:.1f} s",
              flush=True)  # fmt: skip
    if "queries" in args.parts:
        report["queries"] = queries_part(names, args.rounds)
        print(f"[queries] {json.dumps(report['queries'])}", flush=True)
    dashboard_bench.use(names["big"])
    if "reconcile" in args.parts:
        report["reconcile"] = reconcile_part(
            tmp, mid=args.mid, total=args.tenants, chunk=args.chunk,
            first_sync=not args.no_first_sync,
        )  # fmt: skip
    if "usage" in args.parts:
        report["usage"] = usage_part(args.gpus, args.gpus_per_node, args.usage_minutes)
        print(f"[usage] {json.dumps(report['usage'])}", flush=True)
    return report


def figures_of(report: dict[str, Any], args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    """The table's figures, and the failed checks."""
    out: list[dict[str, Any]] = []
    failures: list[str] = []
    big, small, mid = str(args.tenants), str(args.small), str(args.mid)
    if "reconcile" in report:
        r = report["reconcile"]
        failures += [f"{what}: {detail}" for what, ok, detail in r["checks"] if not ok]
        at, base = r[big], r[mid]
        if "preload_differences" in r:
            out.append(
                figure(
                    f"pre-load vs real first sync at {mid} tenants "
                    f"({r['preload_compared']} objects): differences",
                    r["preload_differences"],
                    "",
                    target=0,
                    better="lower",
                )
            )
        out += [
            figure(f"no-op reconcile at {big} tenants: writes", at["writes"], "requests",
                   target=0, better="lower"),
            figure(f"no-op reconcile: objects at {big} vs {mid} tenants", at["objects"],
                   "objects", baseline=base["objects"], better="lower"),
            figure(f"no-op reconcile: LIST requests at {big} vs {mid} tenants", at["lists"],
                   "requests", baseline=base["lists"], better="lower"),
            figure(f"no-op reconcile: portal CPU per object at {big} vs {mid} tenants",
                   at["portal_cpu_per_object_us"], "µs", baseline=base["portal_cpu_per_object_us"],
                   target=CPU_TARGET, better="lower"),
            figure(f"no-op reconcile: portal CPU at {big} vs {mid} tenants", at["portal_cpu_s"],
                   "s", baseline=base["portal_cpu_s"], better="lower"),
            figure(f"no-op reconcile: wall at {big} vs {mid} tenants", at["wall_s"], "s",
                   baseline=base["wall_s"], better="lower"),
            figure(f"no-op reconcile: stand-in CPU at {big} vs {mid} tenants",
                   at["standin_cpu_s"], "s", baseline=base["standin_cpu_s"], better="lower"),
        ]  # fmt: skip
        for phase, cpu in at["phases_cpu_s"].items():
            out.append(figure(f"no-op reconcile: portal CPU in {phase} at {big} vs {mid} tenants",
                              cpu, "s", baseline=base["phases_cpu_s"][phase], better="lower"))  # fmt: skip
        again, base_again = at["repeat"], base["repeat"]
        out += [
            figure(f"no-op reconcile at {int(big):,} tenants, wall", again["wall_s"], "s",
                   target=WALL_TARGET_S, better="lower"),
            figure(f"no-op reconcile, next pass: portal CPU per object at {big} vs {mid} tenants",
                   again["portal_cpu_per_object_us"], "µs",
                   baseline=base_again["portal_cpu_per_object_us"], target=CPU_TARGET,
                   better="lower"),
            figure(f"no-op reconcile, next pass: portal CPU at {big} vs {mid} tenants",
                   again["portal_cpu_s"], "s", baseline=base_again["portal_cpu_s"], better="lower"),
            figure(f"no-op reconcile, next pass: wall at {big} vs {mid} tenants",
                   again["wall_s"], "s", baseline=base_again["wall_s"], better="lower"),
            figure(f"no-op reconcile, next pass: stand-in CPU at {big} vs {mid} tenants",
                   again["standin_cpu_s"], "s", baseline=base_again["standin_cpu_s"],
                   better="lower"),
        ]  # fmt: skip
        for phase, cpu in again["phases_cpu_s"].items():
            out.append(figure(f"no-op reconcile, next pass: portal CPU in {phase} at {big} vs "
                              f"{mid} tenants", cpu, "s",
                              baseline=base_again["phases_cpu_s"][phase], better="lower"))  # fmt: skip
    if "queries" in report:
        q = report["queries"]
        for key, what in (("queue", "approvals queue page (admin)"),
                          ("tenants", "tenants API, a page of 50")):  # fmt: skip
            out.append(figure(f"{what}: queries at {big} vs {small} tenants",
                              q["big"][f"{key}_queries"], "queries",
                              baseline=q["small"][f"{key}_queries"], target=1, better="lower"))  # fmt: skip
            if q["big"][f"{key}_queries"] != q["small"][f"{key}_queries"]:
                failures.append(f"the {what}'s query count grew with the tenants")
            out.append(figure(f"{what}: ms at {big} vs {small} tenants", q["big"][f"{key}_ms"],
                              "ms", baseline=q["small"][f"{key}_ms"], target=PAGE_TARGET,
                              better="lower"))  # fmt: skip
            out.append(figure(f"{what}: CPU ms at {big} vs {small} tenants",
                              q["big"][f"{key}_cpu_ms"], "ms", baseline=q["small"][f"{key}_cpu_ms"],
                              better="lower"))  # fmt: skip
        out.append(figure(f"approvals queue: tenant filter options at {big} vs {small} tenants",
                          q["big"]["queue_tenant_options"], "options",
                          baseline=q["small"]["queue_tenant_options"], target=1, better="lower"))  # fmt: skip
    if "usage" in report:
        u = report["usage"]
        per = f"{u['gpus']} GPUs, a sample every {u['sample_every_s']} s"
        out += [
            figure("usage store: raw rows per GPU and sample (agents' path)",
                   u["rows_per_gpu_per_sample"], "rows", better="lower"),
            figure(f"usage store, {per}: raw rows per day", u["rows_per_day"], "rows",
                   better="lower"),
            figure("usage store: bytes per raw row (PostgreSQL, with indexes)",
                   u["bytes_per_row"], "bytes", better="lower"),
            figure(f"usage store, {per}: GiB per day", u["gib_per_day"], "GiB",
                   better="lower"),
            figure(f"usage ingest (agents' path) rows/s vs needed for {per}",
                   u["ingest_rows_per_s"], "rows/s", baseline=u["needed_rows_per_s"],
                   target=2, better="higher"),
        ]  # fmt: skip
    return out, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
    )
    parser.add_argument("--tenants", type=int, default=10_000, help="the big size (10000)")
    parser.add_argument("--mid", type=int, default=MID_TENANTS, help="reconcile baseline (1000)")
    parser.add_argument("--small", type=int, default=100, help="query-count baseline (100)")
    parser.add_argument("--requests", type=int, default=20, help="pending requests (20)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating page rounds (4)")
    parser.add_argument("--chunk", type=int, default=200, help="tenants per pre-load chunk")
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--usage-minutes", type=int, default=3)
    parser.add_argument(
        "--parts",
        default="reconcile,queries,usage",
        help="which parts (reconcile alone: 'reconcile')",
    )
    parser.add_argument(
        "--no-first-sync",
        action="store_true",
        help="skip the real first sync at --mid tenants and its comparison with the pre-load",
    )
    parser.add_argument(
        "--db-name", default=DB_NAME, help=f"the databases' name ({DB_NAME}, and _small)"
    )
    parser.add_argument("--json", type=Path, help="also write the report to this file")
    args = parser.parse_args(argv)
    if not 0 < args.small < args.tenants or not 0 < args.mid <= args.tenants:
        parser.error("--small and --mid must be between 1 and --tenants")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # databases and stand-ins cleaned up
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmp:
        try:
            report = measure(args, Path(tmp))
        finally:
            benchdb.teardown(args.database_url, args.db_name)
            benchdb.teardown(args.database_url, f"{args.db_name}_small")
    figures, failures = figures_of(report, args)
    print("BENCH_JSON " + json.dumps(report, sort_keys=True, default=str))
    emit("scale", figures)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    for f in figures:
        verdict = {True: "PASS", False: "FAIL"}.get(f["passed"], "    ")
        print(f"{verdict} {f['figure']}: {f['value']} {f['unit']}"
              + (f" (baseline {f['baseline']}, ratio {f['ratio']})" if f["baseline"] else ""))  # fmt: skip
    for failure in failures:
        print(f"FAIL {failure}")
    return 0 if not failures and all(f["passed"] is not False for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
