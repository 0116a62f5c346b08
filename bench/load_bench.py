"""Load test (issue 7, item 5): the whole product under a crowd, on this machine.

gunicorn (3 workers) + PostgreSQL + Redis + a Celery worker pushing to a Kubernetes API stand-in
(``devcluster``, in a subprocess), driven for ``--seconds`` (120) by:

- ``--users`` (50) simulated people, each a thread with its own connection:
  - 40% leads browsing: signed in through the login page (session cookie, CSRF token read from
    the form), they open the home page, their tenant's page, the request list and the inbox;
  - 20% leads filing requests over the API: one pending request at a time for their own tenant
    (guarantee +1 A100, under the one-approver threshold), the next once it is decided;
  - 10% platform admins approving: they list pending requests and approve them (two admins may
    race for one request: the loser's 409 is the expected answer, counted apart);
  - 30% automation polling the API with tokens: the tenant's quotas, its sync state and the
    pending requests;
- ``--agents`` (1,000) simulated node agents (the agent's own report, see
  bench/agent_report_bench.py), each reporting every ``--interval`` (10) s, paced by a
  schedule and sent by a pool of threads.

A sampler reads the Celery queue's length every second. After the load stops, the worker gets
``--drain`` (60) s to finish, then the run is checked: every approved request is ``applied``, was
approved once, and its tenant's ClusterQueue in the stand-in holds the guarantee the portal has.

It prints per endpoint: requests, errors, p50 / p95 / p99 in ms; then approvals filed / approved /
applied / lost, the largest queue depth, and a ``BENCH_FIGURES`` line. Exit status 0 when there
were no errors, no approval was lost and the queue stayed under ``--max-queue``.

    .venv/bin/python bench/load_bench.py                       # the full run (about 3 minutes)
    .venv/bin/python bench/load_bench.py --users 20 --agents 200 --seconds 20   # CI's variant
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import agent_report_bench  # noqa: E402 - the simulated agents and their reports
import api_bench  # noqa: E402 - database, production settings
from figures import emit, figure  # noqa: E402

BENCH_RUNNER = {"args": ["--seconds", "60"]}
TENANTS = 20
PASSWORD = "load"  # noqa: S105 - the simulated leads' password, in a throwaway database
SCHEDULING = ("max_running_jobs", "max_queued_jobs", "max_pods", "storage_bytes", "max_pvcs")
A100_CAPACITY = 4096
CSRF = re.compile(rb'name="csrfmiddlewaretoken" value="([^"]+)"')


# --- what every simulated client records ---------------------------------------------------------


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    expected_conflicts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, name: str, seconds: float, error: str | None = None) -> None:
        with self.lock:
            self.latencies[name].append(seconds)
            if error:
                self.errors[name].append(error)


class Client:
    """One connection to gunicorn with a session cookie or a token."""

    def __init__(self, port: int, stats: Stats, *, token: str = "", bearer: bool = False) -> None:
        self.port, self.stats = port, stats
        self.headers = {"Host": "127.0.0.1"}
        if token:
            self.headers["Authorization"] = f"{'Bearer' if bearer else 'Token'} {token}"
        self.cookies: dict[str, str] = {}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(
        self, method: str, path: str, name: str, *, body: Any = None, form: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200,), expected: tuple[int, ...] = (),
    ) -> tuple[int, bytes]:  # fmt: skip
        headers = dict(self.headers)
        data: bytes | None = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        elif form is not None:
            data = urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            headers["Referer"] = f"http://127.0.0.1:{self.port}{path}"
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            self.stats.record(name, time.perf_counter() - started, f"{method} {path}: {exc!r}")
            return 0, b""
        for header in response.headers.get_all("Set-Cookie") or []:
            key, _, rest = header.partition("=")
            self.cookies[key.strip()] = rest.split(";", 1)[0]
        error = None
        if response.status in expected:
            with self.stats.lock:
                self.stats.expected_conflicts += 1
        elif response.status not in ok:
            error = f"{method} {path}: HTTP {response.status} {content[:200]!r}"
        self.stats.record(name, time.perf_counter() - started, error)
        return response.status, content


# --- the people --------------------------------------------------------------------------------


def browsing_lead(port: int, stats: Stats, user: str, slug: str, stop: threading.Event) -> None:
    client = Client(port, stats)
    _, page = client.request("GET", "/login/", "page: login")
    match = CSRF.search(page)
    if not match:
        stats.record("page: login", 0, "no CSRF token on the login page")
        return
    status, _ = client.request(
        "POST", "/login/", "page: login (POST)", ok=(302,),
        form={"username": user, "password": PASSWORD, "csrfmiddlewaretoken": match[1].decode()},
    )  # fmt: skip
    if status != 302:
        return
    pages = [("/", "page: home"), (f"/tenants/{slug}/", "page: tenant"),
             ("/requests/", "page: requests"), ("/inbox/", "page: inbox")]  # fmt: skip
    while not stop.is_set():
        path, name = random.choice(pages)
        client.request("GET", path, name)
        stop.wait(random.uniform(0.5, 1.5))  # a person reads the page


def filing_lead(
    port: int, stats: Stats, token: str, slug: str, stop: threading.Event, filed: list[int]
) -> None:
    client = Client(port, stats, token=token)
    guaranteed = 4
    while not stop.is_set():
        guaranteed += 1
        status, content = client.request(
            "POST", "/api/v1/quota-requests/", "api: file request", ok=(201,),
            body={"tenant": slug, "cluster": "load", "reason": "load test: one more A100",
                  "submit": True, "items": [{"flavor": "a100-80gb", "resource": "nvidia.com/gpu",
                                             "guaranteed": guaranteed, "limit": guaranteed + 4}]},
        )  # fmt: skip
        if status != 201:
            stop.wait(2)
            guaranteed -= 1
            continue
        pk = json.loads(content)["id"]
        with stats.lock:
            filed.append(pk)
        while not stop.is_set():  # the next one once this one is decided
            stop.wait(1.0)
            _, detail = client.request("GET", f"/api/v1/quota-requests/{pk}/", "api: request")
            if detail and json.loads(detail)["status"] not in ("pending", "draft"):
                break


def approving_admin(port: int, stats: Stats, token: str, stop: threading.Event) -> None:
    client = Client(port, stats, token=token)
    while not stop.is_set():
        _, content = client.request(
            "GET", "/api/v1/quota-requests/?status=pending&page_size=50", "api: pending list"
        )
        ids = [r["id"] for r in json.loads(content)["results"]] if content else []
        random.shuffle(ids)
        for pk in ids:
            client.request(
                "POST", f"/api/v1/quota-requests/{pk}/approve/", "api: approve", body={},
                expected=(409,),  # another admin approved it first
            )  # fmt: skip
        stop.wait(random.uniform(0.5, 1.5))


def automation(port: int, stats: Stats, token: str, slug: str, stop: threading.Event) -> None:
    client = Client(port, stats, token=token)
    calls = [(f"/api/v1/tenants/{slug}/quotas/", "api: tenant quotas"),
             (f"/api/v1/tenants/{slug}/sync/", "api: tenant sync"),
             ("/api/v1/quota-requests/?status=pending", "api: requests (automation)"),
             ("/api/v1/me/", "api: me")]  # fmt: skip
    while not stop.is_set():
        path, name = random.choice(calls)
        client.request("GET", path, name)
        stop.wait(random.uniform(0.2, 0.6))


def agents(
    port: int, stats: Stats, nodes: list[Any], interval: float, stop: threading.Event, senders: int
) -> None:
    """Every node reports every ``interval`` seconds, spread evenly over the interval."""
    gap = interval / len(nodes)
    started = time.perf_counter()

    # One long-lived task per node would need 1,000 threads: a pool walks the nodes in rounds.
    def round_robin(worker: int) -> None:
        mine = list(enumerate(nodes))[worker::senders]
        due = {i: started + i * gap for i, _ in mine}
        clients: dict[str, Client] = {}
        while not stop.is_set():
            i, node = min(mine, key=lambda item: due[item[0]])
            delay = due[i] - time.perf_counter()
            if delay > 0 and stop.wait(delay):
                return
            client = clients.get(node.name)
            if client is None:
                client = clients[node.name] = Client(port, stats, token=node.token, bearer=True)
            client.request("POST", "/api/v1/agent/report/", "agent: report", body=node.report)
            due[i] += interval
            if len(clients) > 8:  # keep a handful of connections per sender
                clients.pop(next(iter(clients))).conn.close()

    with ThreadPoolExecutor(senders) as pool:
        list(pool.map(round_robin, range(senders)))


# --- setting up --------------------------------------------------------------------------------


@dataclass
class World:
    leads: list[tuple[str, str, str]]  # (username, token, tenant slug)
    admins: list[str]  # tokens
    nodes: list[Any]


def seed(kubeconfig: Path, agent_count: int) -> World:
    """In this process: cluster ``load`` pushed to the stand-in, 20 tenants with quotas granted
    through the services, a lead each (password ``load``), 5 admins, ``agent_count`` nodes."""
    import django

    django.setup()
    from decimal import Decimal

    from approvals.services import quota_request_grant
    from gpu_agent.models import NodeToken
    from gpu_agent.services.nodes import agent_register, join_token_create
    from gpu_agent.services.reports import agent_report_ingest
    from quotas.choices import GPU_RESOURCE, FlavorKind, SyncBackend
    from quotas.models import Cluster, FlavorResource, ResourceFlavor, TierTemplate
    from quotas.services import QuotaItem
    from tenants.choices import MembershipRole
    from tenants.models import Tenant, User
    from tenants.services import api_token_create, membership_set, namespace_create

    cluster = Cluster.objects.create(
        name="load", backend=SyncBackend.KUBERNETES, kubeconfig_path=str(kubeconfig),
        elastic_cap_fraction=Decimal(1), allow_guarantee_overcommit=True,
    )  # fmt: skip
    a100 = ResourceFlavor.objects.create(
        cluster=cluster, name="a100-80gb", kind=FlavorKind.GPU,
        gpu_model="NVIDIA A100-SXM4-80GB", gpu_weight=Decimal(1),
        node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
    )  # fmt: skip
    FlavorResource.objects.create(flavor=a100, resource=GPU_RESOURCE, capacity=A100_CAPACITY)
    admins = [
        User.objects.create_user(f"load-admin-{i}", is_platform_admin=True, is_staff=True)
        for i in range(5)
    ]
    small = TierTemplate.objects.get(name="small")
    leads = []
    for i in range(TENANTS):
        slug = f"load-{i:02d}"
        tenant = Tenant.objects.create(slug=slug, display_name=f"Load {i}")
        namespace_create(tenant=tenant, name=slug, purpose="general", actor=admins[0])
        lead = User.objects.create_user(f"lead-{slug}", password=PASSWORD)
        membership_set(tenant=tenant, user=lead, role=MembershipRole.LEAD, actor=admins[0])
        quota_request_grant(
            tenant=tenant, cluster=cluster, actor=admins[0], reason="load test start",
            items=[QuotaItem(a100, GPU_RESOURCE, Decimal(4), Decimal(8))],
            scheduling={f: getattr(small, f) for f in SCHEDULING},
        )  # fmt: skip
        leads.append((lead.username, api_token_create(user=lead, name="load")[1], slug))
    nodes = agent_report_bench.build_nodes(agent_count, seed=7)
    for node in nodes:
        _, join = join_token_create(node_name=node.name, actor=admins[0])
        _, node.token = agent_register(join_secret=join, hostname=node.name, agent_version="1.0")
    from django.utils import timezone

    from gpu_agent.models import Node

    NodeToken.objects.update(last_used_at=timezone.now())
    by_name = {n.name: n for n in Node.objects.all()}
    for node in nodes:
        agent_report_ingest(node=by_name[node.name], report=node.report)
    admin_tokens = [api_token_create(user=a, name="load")[1] for a in admins]
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    connection.close()
    return World(leads, admin_tokens, nodes)


def start_gunicorn(
    env: dict[str, str], log: Path, workers: int
) -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    cmd = [gunicorn, "portal.wsgi", "--workers", str(workers), "--bind", f"127.0.0.1:{port}",
           "--timeout", "120"]  # fmt: skip
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


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    celery = str(Path(sys.executable).with_name("celery"))
    cmd = [celery, "-A", "portal", "worker", "--concurrency", "2", "--pool", "prefork",
           "--loglevel", os.environ.get("LOAD_WORKER_LOGLEVEL", "WARNING"), "--without-gossip", "--without-mingle"]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- checking ----------------------------------------------------------------------------------


def check(filed: list[int], drain_s: float) -> dict[str, Any]:
    """Waits for the worker to apply every approved request, then compares each tenant's
    ResourceQuota in the cluster with the portal's limit (the compiler writes the limit as
    ``requests.nvidia.com/gpu``)."""
    from approvals.models import ApprovalDecision, QuotaChangeRequest
    from quotas.models import Cluster, Quota
    from quotas.sync import in_cluster
    from tenants.models import Tenant

    deadline = time.monotonic() + drain_s
    while True:
        waiting = QuotaChangeRequest.objects.filter(
            pk__in=filed, status__in=("approved", "applying")
        ).count()
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    by_status: dict[str, int] = defaultdict(int)
    for status in QuotaChangeRequest.objects.filter(pk__in=filed).values_list("status", flat=True):
        by_status[status] += 1
    approved_ids = list(
        QuotaChangeRequest.objects.filter(pk__in=filed, decided_at__isnull=False)
        .exclude(status__in=("rejected", "cancelled", "expired"))
        .values_list("pk", flat=True)
    )
    twice = [
        pk
        for pk in approved_ids
        if ApprovalDecision.objects.filter(request_id=pk, decision="approve").count() != 1
    ]
    cluster = Cluster.objects.get(name="load")
    mismatched = []
    for tenant in Tenant.objects.filter(slug__startswith="load-"):
        wanted = Quota.objects.get(quota_set__tenant=tenant, quota_set__cluster=cluster).limit
        seen = in_cluster(tenant=tenant, cluster=cluster)
        queue = seen.cluster_queue or {}
        got = None
        for rq in seen.resource_quotas:
            got = rq["hard"].get("requests.nvidia.com/gpu")
        if got is None or float(got) != float(wanted):
            mismatched.append(f"{tenant.slug}: portal {wanted}, cluster {got} {queue.get('name')}")
    not_applied = [
        pk for pk in approved_ids if QuotaChangeRequest.objects.get(pk=pk).status != "applied"
    ]
    return {
        "filed": len(filed),
        "by_status": dict(by_status),
        "approved": len(approved_ids),
        "applied": by_status.get("applied", 0),
        "lost": len(not_applied) + len(mismatched),
        "not_applied": not_applied[:10],
        "approved_twice": twice[:10],
        "cluster_mismatches": mismatched[:10],
    }


def settle(broker: redis.Redis, queue: str, seconds: float) -> None:
    from quotas.models import SyncOutbox

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not broker.llen(queue) and not SyncOutbox.objects.filter(completed_at=None).exists():
            return
        time.sleep(0.5)
    raise RuntimeError(f"the seed's pushes did not finish in {seconds:.0f} s")


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run(args: argparse.Namespace, tmp: Path) -> int:
    db_url = api_bench.database(args.database_url, args.db_name, create=True)
    env = api_bench.bench_env(db_url, str(tmp))
    # A Redis database of its own, emptied: the default queue is the one every task goes to.
    queue = "celery"
    redis.Redis.from_url(args.redis_url).flushdb()
    # Production as it runs, rate limits included: a crowd of legitimate clients stays under them.
    env.update(
        REDIS_URL=args.redis_url,
        SYNC_QUEUE="",
        CELERY_TASK_ALWAYS_EAGER="false",
        API_THROTTLE="true",
    )
    os.environ.update(env)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity=0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    subprocess.run(  # production serves hashed static files: a page needs the manifest
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity=0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    from devcluster.runner import start_in_subprocess

    standin = start_in_subprocess(kubeconfig_path=tmp / "kubeconfig", state_dir=tmp / "cluster")
    gunicorn = worker = None
    try:
        started = time.perf_counter()
        world = seed(tmp / "kubeconfig", args.agents)
        print(
            f"seeded {TENANTS} tenants, {args.agents} nodes in {time.perf_counter() - started:.0f} s"
        )
        worker = start_worker(env, tmp / "worker.log")
        gunicorn, port = start_gunicorn(env, tmp / "gunicorn.log", args.workers)
        stats, stop_event, filed = Stats(), threading.Event(), []
        depth: list[int] = []
        broker = redis.Redis.from_url(args.redis_url)

        def sample() -> None:
            while not stop_event.is_set():
                depth.append(int(broker.llen(queue)))  # type: ignore[arg-type]
                stop_event.wait(1.0)

        people = roles(args.users)
        leads = itertools.cycle(world.leads)
        filers = iter(world.leads)
        threads = [threading.Thread(target=sample, daemon=True)]
        for role in people:
            if role == "browse":
                user, _, slug = next(leads)
                threads.append(
                    threading.Thread(
                        target=browsing_lead, args=(port, stats, user, slug, stop_event)
                    )
                )
            elif role == "file":
                _, token, slug = next(filers)
                threads.append(
                    threading.Thread(
                        target=filing_lead, args=(port, stats, token, slug, stop_event, filed)
                    )
                )
            elif role == "approve":
                token = world.admins[
                    len([t for t in threads if t.name.startswith("admin")]) % len(world.admins)
                ]
                threads.append(
                    threading.Thread(
                        target=approving_admin,
                        args=(port, stats, token, stop_event),
                        name=f"admin-{len(threads)}",
                    )
                )
            else:
                _, token, slug = next(leads)
                threads.append(
                    threading.Thread(target=automation, args=(port, stats, token, slug, stop_event))
                )
        threads.append(threading.Thread(
            target=agents, args=(port, stats, world.nodes, args.interval, stop_event, args.senders)
        ))  # fmt: skip
        settle(broker, queue, 120)  # the seed's first pushes, before the load starts
        print(f"driving {args.users} users and {args.agents} agents for {args.seconds:.0f} s ...")
        for thread in threads:
            thread.start()
        time.sleep(args.seconds)
        stop_event.set()
        for thread in threads:
            thread.join(120)
        load_s = args.seconds
        result = check(filed, args.drain)
        result["queue_after"] = int(broker.llen(queue))  # type: ignore[arg-type]
        if os.environ.get("LOAD_DEBUG"):
            print((tmp / "worker.log").read_text()[-4000:])
            print(sorted(k.decode() for k in broker.keys("*")))
    finally:
        for proc in (gunicorn, worker):
            if proc is not None:
                stop(proc)
        standin.stop()
        from django.db import connections

        connections.close_all()
        api_bench.database(args.database_url, args.db_name, create=False)

    return report(stats, result, depth, load_s, args)


def roles(users: int) -> list[str]:
    """40% browse, 20% file, 10% approve, 30% automation (at least one approver and filer)."""
    shares = [("browse", 0.4), ("file", 0.2), ("approve", 0.1), ("automation", 0.3)]
    out = [name for name, share in shares for _ in range(max(1, round(users * share)))]
    return out[:users] if len(out) >= users else out + ["automation"] * (users - len(out))


def report(
    stats: Stats, result: dict[str, Any], depth: list[int], seconds: float, args: argparse.Namespace
) -> int:
    print(
        f"\n{'endpoint':<28} {'requests':>8} {'errors':>6} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}"
    )
    total_errors = 0
    figures = []
    for name in sorted(stats.latencies):
        values = stats.latencies[name]
        errors = len(stats.errors[name])
        total_errors += errors
        print(f"{name:<28} {len(values):>8} {errors:>6} {len(values) / seconds:>7.1f} "
              f"{pct(values, 0.5):>7.0f} {pct(values, 0.95):>7.0f} {pct(values, 0.99):>7.0f}")  # fmt: skip
        figures.append(figure(f"p95 {name}", round(pct(values, 0.95)), "ms", better="lower"))
    requests = sum(len(v) for v in stats.latencies.values())
    print(f"{'all':<28} {requests:>8} {total_errors:>6} {requests / seconds:>7.1f}")
    for name, errors in stats.errors.items():
        for error in errors[:3]:
            print(f"  error ({name}): {error}")
    max_depth = max(depth, default=0)
    print(
        f"\nexpected conflicts (two admins approving one request: 409): {stats.expected_conflicts}"
    )
    print(f"approvals: filed {result['filed']}, approved {result['approved']}, applied "
          f"{result['applied']}, lost {result['lost']}  {json.dumps(result['by_status'])}")  # fmt: skip
    for key in ("not_applied", "approved_twice", "cluster_mismatches"):
        if result[key]:
            print(f"  {key}: {result[key]}")
    print(f"Celery queue depth: max {max_depth}, mean {statistics.mean(depth) if depth else 0:.1f}")
    passed = (
        total_errors == 0
        and result["lost"] == 0
        and not result["approved_twice"]
        and max_depth <= args.max_queue
    )
    emit("load", [
        figure("errors", total_errors, "responses", target=0, better="lower"),
        figure("approvals lost", result["lost"], "approvals", target=0, better="lower"),
        figure("approvals applied", result["applied"], "approvals"),
        figure("max Celery queue depth", max_depth, "tasks", target=args.max_queue, better="lower"),
        figure("throughput", round(requests / seconds, 1), "req/s"),
        # What the agents' schedule asked for against what the server answered meanwhile (the
        # load generator shares the machine's cores with the server).
        figure(
            "agent reports answered / due", round(len(stats.latencies["agent: report"]) / seconds, 1),
            "reports/s", baseline=round(args.agents / args.interval, 1),
        ),
        *figures,
    ])  # fmt: skip
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--interval", type=float, default=10.0, help="agent report interval (s)")
    parser.add_argument("--senders", type=int, default=16, help="threads sending agent reports")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--drain", type=float, default=60, help="seconds the worker gets after")
    parser.add_argument("--max-queue", type=int, default=100, help="largest queue depth allowed")
    parser.add_argument("--db-name", default="portal_load")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("LOAD_REDIS_URL", "redis://127.0.0.1:6379/14")
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="load-") as tmp:
        return run(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
