"""API benchmark (issue 2, "Speed"): gunicorn, 2 workers, PostgreSQL, 500 tenants x 4 flavors.

Drives three GET endpoints with concurrent clients and compares each with the trivial
authenticated baseline ``/api/v1/me/``; then 4 concurrent approvers approve 400 pending quota
requests over HTTP and the result is checked (each approved exactly once). Exit status 0 when
every GET endpoint reaches the target, every approval succeeded once and the approvals reach
issue 36's figure (0.2 of ``me/``, at most 20 SQL queries each). See README.md."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import random
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from figures import emit, figure

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "api_bench.json"
TARGET = 0.7  # issue 36 (0.6 before)
TENANTS, LEAD_TENANTS, ITEMS_PER_TENANT = 500, 50, 9
GI, TI = 1024**3, 1024**4
# (name, path); the first is the baseline. "{slug}" becomes a random tenant's slug per request.
ENDPOINTS = [
    ("me (baseline)", "/api/v1/me/"),
    ("tenants page 50", "/api/v1/tenants/?page_size=50"),
    ("tenant quotas", "/api/v1/tenants/{slug}/quotas/"),
]
# The approvals case: requests counted, approved first to warm the workers up (not counted),
# one more approved in this process to count its SQL queries; concurrent approvers.
APPROVALS, APPROVAL_WARMUP, APPROVERS = 400, 20, 4
# Issue 36: an approval that one approver applies, against GET me/ in the same run, and the SQL
# queries it runs (counted in this process, with its token).
APPROVAL_ROW, APPROVAL_TARGET, APPROVAL_MAX_QUERIES = "approval (API, one approver)", 0.2, 20
APPROVE_PATH = "/api/v1/quota-requests/{pk}/approve/"
COLUMNS = "{endpoint:<16} {requests:>8} {errors:>6} {rps:>7} {p50_ms:>7} {p99_ms:>7} {ratio:>6} {target:>7} {result:>6}"


def seed() -> tuple[str, list[str], dict[str, dict[str, int]]]:
    """In this process, on the bench database: a cluster with 4 flavors, 500 tenants (2 namespaces,
    a quota set with items on all 4 flavors), a platform admin and a lead of 50 tenants."""
    import django

    sys.path.insert(0, str(ROOT))
    django.setup()
    from decimal import Decimal as D

    from quotas.choices import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, FlavorKind, mig_resource
    from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor, TierTemplate
    from quotas.services import QuotaItem, quota_items_check
    from tenants.choices import MembershipRole, NamespacePurpose
    from tenants.models import Namespace, Tenant, User
    from tenants.services import api_token_create, membership_set

    gpu, cpu, mem, mig = GPU_RESOURCE, CPU_RESOURCE, MEMORY_RESOURCE, mig_resource("1g.10gb")
    a100, h100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
    # Flavor fields, {resource: (capacity, guaranteed, limit)}. The capacities hold all 500
    # tenants' guarantees and limits, so the data would be valid even with the default policy.
    specs = [
        ({"name": "a100-80gb", "kind": FlavorKind.GPU, "gpu_model": a100, "gpu_weight": D(1)},
         {gpu: (2048, 4, 6), cpu: (8192, 8, 12), mem: (64 * TI, 64 * GI, 96 * GI)}),
        ({"name": "h100-80gb", "kind": FlavorKind.GPU, "gpu_model": h100, "gpu_weight": D(2)},
         {gpu: (1024, 2, 4), cpu: (16384, 16, 32), mem: (64 * TI, 128 * GI, 256 * GI)}),
        ({"name": "h100-mig-1g-10gb", "kind": FlavorKind.MIG, "gpu_model": h100,
          "mig_profile": "1g.10gb", "gpu_weight": D("0.143")}, {mig: (4096, 7, 14)}),
        ({"name": "cpu-epyc", "kind": FlavorKind.CPU, "gpu_weight": D(0)},
         {cpu: (32768, 32, 64), mem: (128 * TI, 128 * GI, 256 * GI)}),
    ]  # fmt: skip
    cluster = Cluster.objects.create(
        name="bench", elastic_cap_fraction=D(1), allow_guarantee_overcommit=True
    )
    items: list[QuotaItem] = []
    for fields, resources in specs:
        flavor = ResourceFlavor.objects.create(cluster=cluster, **fields)
        for res, (capacity, guaranteed, limit) in resources.items():
            FlavorResource.objects.create(flavor=flavor, resource=res, capacity=D(capacity))
            items.append(QuotaItem(flavor, res, D(guaranteed), D(limit)))

    tier = TierTemplate.objects.get(name="small")
    scheduling = ("max_running_jobs", "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs")
    slugs = [f"team-{i:04d}" for i in range(TENANTS)]
    tenants = Tenant.objects.bulk_create(Tenant(slug=s, display_name=s.title()) for s in slugs)
    Namespace.objects.bulk_create(
        Namespace(tenant=t, name=f"{t.slug}-{purpose}", purpose=purpose)
        for t in tenants
        for purpose in (NamespacePurpose.TRAINING, NamespacePurpose.INFERENCE)
    )
    quota_sets = QuotaSet.objects.bulk_create(
        QuotaSet(tenant=t, cluster=cluster, tier=tier, **{f: getattr(tier, f) for f in scheduling})
        for t in tenants
    )
    Quota.objects.bulk_create(Quota(quota_set=qs, **vars(i)) for qs in quota_sets for i in items)
    # The service's own rules accept a tenant's items beside all the other tenants' guarantees.
    quota_items_check(cluster=cluster, items=items, quota_set=quota_sets[0]).raise_if_invalid()

    admin = User.objects.create_user("bench-admin", is_platform_admin=True)
    lead = User.objects.create_user("bench-lead")
    for tenant in tenants[:LEAD_TENANTS]:
        membership_set(tenant=tenant, user=lead, role=MembershipRole.LEAD, actor=admin)
    tokens = {u.username: api_token_create(user=u, name="bench")[1] for u in (admin, lead)}
    from django.db import connection

    with connection.cursor() as cursor:  # fresh planner statistics, as autovacuum would give
        cursor.execute("ANALYZE")
    return tokens["bench-admin"], slugs, count_queries(tokens, slugs[0])


def count_queries(tokens: dict[str, str], slug: str) -> dict[str, dict[str, int]]:
    """SQL queries per request, per user and endpoint, checking the answers on the way."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    visible = {"bench-admin": TENANTS, "bench-lead": LEAD_TENANTS}
    counts: dict[str, dict[str, int]] = {}
    for user, token in tokens.items():
        client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
        client.get("/api/v1/me/")  # the token's first use is recorded: a write, not counted
        for name, path in ENDPOINTS:
            with CaptureQueriesContext(connection) as ctx:
                response = client.get(path.format(slug=slug))
            body = response.json()
            if (
                response.status_code != 200
                or ("page_size" in path and body["count"] != visible[user])
                or ("quotas" in path and len(body["results"][0]["items"]) != ITEMS_PER_TENANT)
            ):
                raise RuntimeError(f"{user} GET {path}: {response.status_code} {body}")
            counts.setdefault(user, {})[name] = len(ctx.captured_queries)
    connection.close()
    return counts


@dataclass
class Tally:  # one endpoint's requests over all its rounds
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def drive(port: int, token: str, path: str, slugs: list[str], clients: int, seconds: float,
          tally: Tally) -> None:  # fmt: skip
    """``clients`` threads, each with its own connection, send requests for ``seconds``."""
    deadline = time.perf_counter() + seconds

    def client() -> None:  # list.append is atomic in CPython: the threads share the tally
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.perf_counter() < deadline:
            url = path.format(slug=random.choice(slugs))
            start = time.perf_counter()
            try:
                conn.request("GET", url, headers={"Authorization": f"Token {token}"})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    tally.errors.append(f"GET {url}: HTTP {response.status}")
            except (OSError, http.client.HTTPException) as exc:
                tally.errors.append(f"GET {url}: {exc!r}")
                conn.close()
            tally.latencies.append(time.perf_counter() - start)
        conn.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: client(), range(clients)))  # re-raises a client's exception
    tally.seconds += time.perf_counter() - started


# --- approvals: concurrent approvers over HTTP, each request approved exactly once ------------


@dataclass
class ApprovalRun:
    tokens: list[str]  # one per approver, each a platform admin of its own
    warmup: list[int]  # request ids approved first, not counted
    measured: list[int]  # request ids approved and counted
    all_ids: list[int]  # every seeded request, checked at the end
    queries: int  # SQL queries of one approval, counted in this process


def seed_approvals(count: int, warmup: int, approvers: int) -> ApprovalRun:
    """In this process, after ``seed()``: ``approvers`` more platform admins with API tokens and
    ``count + warmup + 1`` pending requests, each filed through the services by a lead of its
    own (distinct) tenant: the A100 guarantee 4 -> 5 and limit 6 -> 7, an increase of 1 GPU
    unit, under the policy's 8 units and 25% of capacity, so one approval applies it. The last
    one is approved here with Django's test client, counting its SQL queries."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from approvals.choices import RequestStatus
    from approvals.services import quota_request_create, request_items_parse
    from quotas.choices import GPU_RESOURCE
    from quotas.models import Cluster
    from tenants.choices import MembershipRole
    from tenants.models import Tenant, User
    from tenants.services import api_token_create, membership_set

    total = count + warmup + 1
    # Past the bench lead's 50 tenants, so that the GET endpoints' answers stay as they were.
    tenants = list(Tenant.objects.order_by("slug")[LEAD_TENANTS : LEAD_TENANTS + total])
    if len(tenants) < total:
        raise RuntimeError(f"--approvals {count}: only {TENANTS - LEAD_TENANTS - warmup - 1} fit")
    admin = User.objects.get(username="bench-admin")
    cluster = Cluster.objects.get(name="bench")
    names = [f"bench-approver-{i}" for i in range(approvers)]
    users = [User.objects.create_user(name, is_platform_admin=True) for name in names]
    tokens = [api_token_create(user=user, name="bench")[1] for user in users]
    raw = [{"flavor": "a100-80gb", "resource": GPU_RESOURCE, "guaranteed": 5, "limit": 7}]
    ids = []
    for tenant in tenants:
        lead = User.objects.create_user(f"lead-of-{tenant.slug}")
        membership_set(tenant=tenant, user=lead, role=MembershipRole.LEAD, actor=admin)
        request = quota_request_create(
            tenant=tenant, cluster=cluster, requester=lead, reason="bench: one more A100",
            items=request_items_parse(cluster=cluster, raw_items=raw), submit=True,
        )  # fmt: skip
        request.refresh_from_db()  # submitting worked on its own copy
        if request.status != RequestStatus.PENDING or request.required_approvals != 1:
            raise RuntimeError(f"request #{request.pk}: {request.status}, "
                               f"{request.required_approvals} approvals needed, not 1")  # fmt: skip
        ids.append(request.pk)

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {tokens[0]}")
    client.get("/api/v1/me/")  # the token's first use is recorded: a write, not counted
    with CaptureQueriesContext(connection) as ctx:
        response = client.post(APPROVE_PATH.format(pk=ids[-1]), {}, content_type="application/json")
    if response.status_code != 200 or response.json()["status"] != RequestStatus.APPROVED:
        raise RuntimeError(f"POST {APPROVE_PATH.format(pk=ids[-1])}: {response.status_code} "
                           f"{response.content[:300]!r}")  # fmt: skip
    connection.close()
    return ApprovalRun(tokens, ids[:warmup], ids[warmup:-1], ids, len(ctx.captured_queries))


def drive_approvals(port: int, tokens: list[str], ids: list[int], tally: Tally) -> None:
    """One thread per token, each with its own connection, takes request ids from a shared
    queue and POSTs their approval until none is left: each request is posted once."""
    todo: queue.SimpleQueue[int] = queue.SimpleQueue()
    for pk in ids:
        todo.put(pk)

    def approver(token: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        while True:
            try:
                pk = todo.get_nowait()
            except queue.Empty:
                break
            url = APPROVE_PATH.format(pk=pk)
            start = time.perf_counter()
            try:
                conn.request("POST", url, body=b"{}", headers=headers)
                response = conn.getresponse()
                body = response.read()
                if response.status != 200:
                    tally.errors.append(f"POST {url}: HTTP {response.status} {body[:300]!r}")
            except (OSError, http.client.HTTPException) as exc:
                tally.errors.append(f"POST {url}: {exc!r}")
                conn.close()
            tally.latencies.append(time.perf_counter() - start)
        conn.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(len(tokens)) as pool:
        list(pool.map(approver, tokens))  # re-raises an approver's exception
    tally.seconds += time.perf_counter() - started


def check_approvals(ids: list[int]) -> dict[str, Any]:
    """Every request ended approved exactly once: approved at a generation, one decision (an
    approval), and one outbox row for its tenant and cluster, at that generation."""
    from django.db import connection
    from django.db.models import Count, Q

    from approvals.choices import DecisionKind, RequestStatus
    from approvals.models import QuotaChangeRequest
    from quotas.models import SyncOutbox

    rows = list(
        QuotaChangeRequest.objects.filter(pk__in=ids)
        .annotate(
            decided=Count("decisions"),
            approved=Count("decisions", filter=Q(decisions__decision=DecisionKind.APPROVE)),
        )
        .values_list(
            "tenant_id", "cluster_id", "status", "approved_generation", "decided", "approved"
        )
    )
    outbox: dict[tuple[int, int], list[int]] = {}
    for tenant_id, cluster_id, generation in SyncOutbox.objects.filter(
        tenant_id__in={row[0] for row in rows}
    ).values_list("tenant_id", "cluster_id", "generation"):
        outbox.setdefault((tenant_id, cluster_id), []).append(generation)
    connection.close()
    result = {
        "requests": len(ids),
        "approved": sum(r[2] == RequestStatus.APPROVED and r[3] is not None for r in rows),
        "decisions": sum(r[4] for r in rows),
        "one_approval_each": sum(r[4] == r[5] == 1 for r in rows),
        # Seeding each tenant's lead took a generation too (tenant changes are pushed like
        # approvals), so a tenant has that row and the approval's: the approved generation
        # must be the newest, with exactly one row.
        "outbox_rows": sum(len(generations) for generations in outbox.values()),
        "one_outbox_row_each": sum(
            outbox.get((r[0], r[1]), []).count(r[3]) == 1
            and max(outbox.get((r[0], r[1]), [0])) == r[3]
            for r in rows
        ),
    }
    result["ok"] = len(rows) == len(ids) and all(
        result[k] == len(ids)
        for k in ("approved", "decisions", "one_approval_each", "one_outbox_row_each")
    )
    return result


def summarize(endpoint: str, tally: Tally, baseline_rps: float | None,
              target: float | None = TARGET) -> dict[str, Any]:  # fmt: skip
    """A row of the table and of the JSON report; no ``baseline_rps`` for the baseline, no
    ``target`` for a case that is reported against the baseline without one."""
    lat = sorted(tally.latencies) or [0.0]
    p50, p99 = (lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 for p in (0.5, 0.99))
    rps = len(tally.latencies) / tally.seconds
    ratio = rps / baseline_rps if baseline_rps else 1.0
    has_target = baseline_rps is not None and target is not None
    passed = not tally.errors and (not has_target or ratio >= (target or 0))
    return {
        "endpoint": endpoint, "requests": len(tally.latencies), "errors": len(tally.errors),
        "rps": round(rps, 1), "p50_ms": round(p50, 1), "p99_ms": round(p99, 1),
        "ratio": round(ratio, 2), "target": f">= {target}" if has_target else "-",
        "result": "PASS" if passed else "FAIL",
        "first_error": tally.errors[0] if tally.errors else "",
    }  # fmt: skip


def database(server_url: str, name: str, *, create: bool) -> str:
    """Drop database ``name`` (and create it afresh); returns its URL."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            conn.execute(f'CREATE DATABASE "{name}"')
    return urlsplit(server_url)._replace(path=f"/{name}").geturl()


def bench_env(db_url: str, data_dir: str) -> dict[str, str]:
    """Production settings (DEBUG off, a random SECRET_KEY) over plain HTTP, without Redis."""
    unset = {"REDIS_URL", "DATABASE_URL_FILE", "SECRET_KEY_FILE", "REDIS_URL_FILE"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    (Path(data_dir) / "static").mkdir()  # STATIC_ROOT, or WhiteNoise warns
    env.update(DATABASE_URL=db_url, SECRET_KEY=secrets.token_urlsafe(50), DEBUG="false",
               ALLOWED_HOSTS="127.0.0.1", SECURE_SSL_REDIRECT="false", LOG_LEVEL="WARNING",
               DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="portal.settings.production",
               # The API's rate limits would refuse a benchmark's clients (one token, hundreds of
               # requests a second): measured without them.
               API_THROTTLE="false")  # fmt: skip
    return env


def start_gunicorn(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    cmd = [gunicorn, "portal.wsgi", "--workers", "2", "--bind", f"127.0.0.1:{port}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"gunicorn did not become healthy:\n{log.read_text()[-3000:]}")


def measure(args: argparse.Namespace, tmp: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Everything between creating the database and dropping it."""
    env = bench_env(database(args.database_url, args.db_name, create=True), tmp)
    migrate = [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity=0"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True)
    os.environ.update(env)  # for seed(), which sets up Django in this process
    started = time.perf_counter()
    token, slugs, queries = seed()
    print(f"seeded in {time.perf_counter() - started:.1f} s; SQL queries per request:")
    for user, counts in queries.items():
        print(f"  {user:12} " + ", ".join(f"{k}: {v}" for k, v in counts.items()))
    run = None
    if args.approvals:
        started = time.perf_counter()
        run = seed_approvals(args.approvals, APPROVAL_WARMUP, args.approvers)
        print(f"filed {len(run.all_ids)} pending requests (one approval each) through the "
              f"services in {time.perf_counter() - started:.1f} s; "
              f"SQL queries per approval: {run.queries}")  # fmt: skip

    server, port = start_gunicorn(env, Path(tmp) / "gunicorn.log")
    try:
        print(f"gunicorn (2 sync workers) on :{port}, {args.clients} client threads. Per endpoint: "
              f"{args.warmup:g} s warm-up, {args.seconds:g} s in {args.rounds} interleaved rounds.")  # fmt: skip
        tallies = {name: Tally() for name, _ in ENDPOINTS}
        cpu, started = time.process_time(), time.perf_counter()
        for round_ in range(-1, args.rounds):  # round -1 warms up and is not counted
            for name, path in ENDPOINTS:
                seconds = args.warmup if round_ < 0 else args.seconds / args.rounds
                tally = Tally() if round_ < 0 else tallies[name]
                drive(port, token, path, slugs, args.clients, seconds, tally)
        client_cpu = round((time.process_time() - cpu) / (time.perf_counter() - started), 2)
        approvals = Tally()
        if run is not None:
            print(f"approvals: {len(run.tokens)} approvers (platform admins, a token each), "
                  f"{len(run.warmup)} warm-up approvals, then {len(run.measured)} counted.")  # fmt: skip
            drive_approvals(port, run.tokens, run.warmup, Tally())
            drive_approvals(port, run.tokens, run.measured, approvals)
    finally:
        server.terminate()  # graceful: the workers finish their request and exit
        server.wait()
    print(f"client threads used {client_cpu} CPUs on average (machine: {os.cpu_count()})\n")
    base = tallies[ENDPOINTS[0][0]]
    base_rps = len(base.latencies) / base.seconds
    rows = [summarize(name, t, None if t is base else base_rps) for name, t in tallies.items()]
    extra: dict[str, Any] = {"sql_queries_per_request": queries, "client_cpu_cores": client_cpu}
    if run is not None:
        row, check = approval_summary(run, approvals, base_rps)
        rows.append(row)
        extra["approvals"] = {"sql_queries_per_approval": run.queries, "check": check}
    return rows, extra


def approval_query_figure(extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The SQL queries of one approval against issue 36's ceiling (none without approvals)."""
    if "approvals" not in extra:
        return []
    queries = extra["approvals"]["sql_queries_per_approval"]
    return [figure(f"{APPROVAL_ROW}: SQL queries per approval", queries, "queries",
                   target=APPROVAL_MAX_QUERIES, better="lower")]  # fmt: skip


def approval_summary(
    run: ApprovalRun, tally: Tally, base_rps: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The approvals' row: approvals/s against the baseline's req/s (no target), failing when
    a request was not approved exactly once."""
    check = check_approvals(run.all_ids)
    row = summarize(APPROVAL_ROW, tally, base_rps, target=APPROVAL_TARGET)
    print(f"approvals ({len(run.tokens)} concurrent approvers, each request needing one approval): "
          f"{len(tally.latencies) - len(tally.errors)} in {tally.seconds:.1f} s = "
          f"{row['rps']} approvals/s; baseline /me/ {base_rps:.1f} req/s; ratio {row['ratio']} "
          f"(target >= {APPROVAL_TARGET}); SQL queries per approval {run.queries} "
          f"(target <= {APPROVAL_MAX_QUERIES})")  # fmt: skip
    if run.queries > APPROVAL_MAX_QUERIES:
        row["result"] = "FAIL"
        row["first_error"] = row["first_error"] or (
            f"{run.queries} SQL queries per approval, more than {APPROVAL_MAX_QUERIES}"
        )
    print(f"approvals check ({'OK' if check['ok'] else 'FAILED'}): {check['approved']} of "
          f"{check['requests']} requests approved; {check['decisions']} decisions, "
          f"{check['one_approval_each']} with exactly one approval; {check['outbox_rows']} "
          f"outbox rows, {check['one_outbox_row_each']} tenants with exactly one at the approved "
          "generation, the newest\n")  # fmt: skip
    if not check["ok"]:
        row["result"] = "FAIL"
        row["first_error"] = row["first_error"] or f"not approved exactly once: {check}"
    return row, check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--database-url", default=os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres",
        help="PostgreSQL server to use, any database on it (default: $DATABASE_URL or local)")  # fmt: skip
    add("--db-name", default="portal_bench", help="dropped, created, dropped again")
    add("--seconds", type=float, default=10, help="per endpoint (default 10)")
    add("--rounds", type=int, default=5, help="interleaved slices of --seconds (default 5)")
    add("--warmup", type=float, default=2, help="per endpoint, not counted (default 2)")
    add("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    add("--approvals", type=int, default=APPROVALS,
        help=f"pending requests approved over HTTP, counted (default {APPROVALS}; 0 skips)")  # fmt: skip
    add("--approvers", type=int, default=APPROVERS,
        help=f"concurrent approvers, each a platform admin (default {APPROVERS})")  # fmt: skip
    args = parser.parse_args()
    if args.approvals < 0 or args.approvers < 1:
        parser.error("--approvals must be 0 or more and --approvers 1 or more")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally blocks run

    with tempfile.TemporaryDirectory(prefix="portal-bench-") as tmp:
        try:
            rows, extra = measure(args, tmp)
        finally:
            database(args.database_url, args.db_name, create=False)
    names = {"rps": "req/s", "p50_ms": "p50 ms", "p99_ms": "p99 ms"}
    for row in [{k: names.get(k, k) for k in rows[0]}, *rows]:  # a header, then the rows
        print(COLUMNS.format(**row))
    settings = {k: v for k, v in vars(args).items() if k != "database_url"}
    config = {**settings, "tenants": TENANTS, "flavors": 4, "cpus": os.cpu_count()}
    report = {"config": config, "results": rows, **extra}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")
    emit("api", row_figures(rows) + approval_query_figure(extra))
    failed = [r for r in rows if r["result"] != "PASS"]
    for r in failed:
        print(f"FAIL {r['endpoint']}: ratio {r['ratio']}, {r['errors']} errors. {r['first_error']}")
    return 1 if failed else 0


def row_figures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows after the baseline (the first) as figures: req/s against the baseline's."""
    base = rows[0]["rps"]
    return [
        figure(f"{r['endpoint']}: req/s vs {rows[0]['endpoint']}", r["rps"], "req/s",
               baseline=base, ratio=r["ratio"],
               target=float(r["target"][3:]) if r["target"].startswith(">= ") else None,
               passed=None if r["target"] == "-" and r["result"] == "PASS" else r["result"] == "PASS")
        for r in rows[1:]
    ]  # fmt: skip


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (RuntimeError, psycopg.Error, subprocess.CalledProcessError) as exc:
        sys.exit(f"error: {exc}")
