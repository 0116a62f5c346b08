"""Agent report benchmark, part (b) of bench/mig_bench.py: 1,000 node agents reporting their GPU
inventory and metrics every 10 s, through gunicorn (2 sync workers) on PostgreSQL.

1. A database of its own (``portal_agent_bench``, dropped and created, migrated), production
   settings, as bench/api_bench.py does (its helpers are reused).
2. ``--agents`` simulated nodes (1,000), built with the agent's own code: the ``fake`` backend
   (``SimulatedNvml`` under ``NvmlBackend``), 8 GPUs each, 4 + 4 of two models drawn from
   A100-80GB, H100, H200 and A30 (sometimes the same one twice), about 60% in MIG mode with a
   layout a cluster typically has (the layouts of part (a)) and about 40% of the instances
   running 1-2 processes with a pod UID; the GPUs outside MIG have a utilization and 0-2
   processes. The report body is ``Agent.inventory()``
   of ``gpu_node_agent.runner``, the one the real agent posts, encoded once per node.
3. Each node registers through the services (``join_token_create``, then ``agent_register``
   with the one-time secret) and gets its own node token; its first report is ingested in this
   process (``agent_report_ingest``), so the HTTP phase is the steady state: the GPUs exist and
   each report updates them and replaces the node's MIG instances. The tokens' ``last_used_at``
   is set to now, as it is for agents that report every 10 s (the coarse 5-minute write then
   happens once in 30 reports). A platform admin gets an API token for ``GET /api/v1/me/``.
4. In this process: the SQL queries of one report (Django's test client, CaptureQueriesContext)
   and the time of its parts, per report, over ``--inprocess`` reports (JSON parsing, the
   report's validation as the endpoint runs it, ``report_validated``: the agent's JSON Schema
   and the named checks, the token lookup, ``report_ingest``, the whole request).
5. gunicorn: ``--clients`` threads (8) drive ``GET /api/v1/me/`` (the baseline) and three kinds
   of ``POST /api/v1/agent/report/`` in alternating rounds, as bench/api_bench.py does: 2 s
   warm-up each, then ``--seconds`` each in ``--rounds`` rounds. The nodes are split in three
   groups, one per kind, so that a protocol 1 report never resets a protocol 2 node's base:
   protocol 1, every report whole (today's agents; no target, reported against the baseline);
   protocol 2 with nothing changed (target >= 0.8: the report of a quiet node, no GPU in it);
   protocol 2 with one GPU changed (target >= 0.5: GPU 0 sent whole, its applied generation
   flipped between two values, so the portal upserts it and replaces its instances, what any
   change to one GPU costs). Protocol 2 nodes got a full protocol 2 report when seeded; each
   change report names the base the portal acknowledged last (the client keeps each node's
   acknowledged report, as the agent does) and an answer without ``ack`` is an error. Every
   report is the next node's of its group (a shared counter cycles through them), with that
   node's token. The CPU that gunicorn and the bench database's PostgreSQL backends use in
   each round (from /proc) gives the server CPU per request of each endpoint.
6. The data landed: every node posted over HTTP has the reported agent version (its seeded
   report said an older one), every GPU of those nodes was seen after the HTTP phase began,
   and the MIG instances (and busy ones) observed since then are exactly those their reports
   hold; the fleet's totals are the expected ones.

It prints req/s, p50/p99 and the ratio report / baseline (targets above), the server CPU per
request of each endpoint, what 1,000 agents every 10 s need (100 reports/s) against the
measured capacity, and a ``BENCH_JSON {...}`` line.

    .venv/bin/python bench/agent_report_bench.py [--agents 1000] [--seconds 10] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import io
import itertools
import json
import os
import pstats
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import api_bench  # noqa: E402 - the harness: database, settings, gunicorn, tallies
from figures import emit  # noqa: E402 - the line bench/run.py reads
from mig_bench import MODELS, typical_layouts  # noqa: E402

from gpu_node_agent import AGENT_VERSION  # noqa: E402
from gpu_node_agent.delta import PROTOCOL, gpu_state, state_digest  # noqa: E402
from gpu_node_agent.nvml import NvmlBackend  # noqa: E402
from gpu_node_agent.runner import Agent, AgentState, PortalClient  # noqa: E402
from gpu_node_agent.testing.simnvml import SimGpuSpec, SimulatedNvml  # noqa: E402
from gpu_spec.mig.catalogue import load_catalogue  # noqa: E402

TARGET = 0.5  # a protocol 2 report with one GPU changed, vs GET me/
TARGET_NO_CHANGE = 0.8  # a protocol 2 report with nothing changed, vs GET me/
ERRORS = (RuntimeError, psycopg.Error, subprocess.CalledProcessError)  # a run that did not finish
AGENTS, GPUS_PER_NODE, INTERVAL_S = 1000, 8, 10.0
MIG_FRACTION, BUSY_FRACTION = 0.6, 0.4
SEEDED_VERSION = "0.9"  # the agent version of the seeded reports; HTTP reports say AGENT_VERSION
ME_PATH, REPORT_PATH = "/api/v1/me/", "/api/v1/agent/report/"
ENDPOINTS = (
    "me (baseline)",
    "agent report, protocol 1 (whole)",
    "agent report, protocol 2, no change",
    "agent report, protocol 2, one GPU changed",
)
TARGETS = (None, None, TARGET_NO_CHANGE, TARGET)
GROUPS = 3  # nodes split among the three kinds of report


# --- the simulated nodes ---------------------------------------------------------------------


@dataclass
class SimNode:
    name: str
    report: dict[str, Any]  # Agent.inventory(), as posted over HTTP
    body: bytes = b""
    token: str = ""
    # Protocol 2: the session, the acknowledged report's seq, which of the two states of GPU 0
    # (its applied generation as reported, or one more) the portal holds, and their digests.
    session: str = ""
    seq: int = 0
    flipped: bool = False
    digests: tuple[str, str] = ("", "")
    gpu0: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    def prepare_changes(self) -> None:
        """The two states of GPU 0 and the node's digest in each."""
        first = self.report["gpus"][0]
        other = {**first, "applied_generation": first.get("applied_generation", 0) + 1}
        self.gpu0 = (first, other)
        self.session = f"{abs(hash(self.name)):016x}"[:16]
        states = {g["uuid"]: gpu_state(g) for g in self.report["gpus"]}
        flipped = {**states, first["uuid"]: gpu_state(other)}
        self.digests = (state_digest(states), state_digest(flipped))

    def full_v2(self) -> dict[str, Any]:
        """The full protocol 2 report that makes the node's first base (seq 1)."""
        self.seq, self.flipped = 1, False
        return {**self.report, "protocol": PROTOCOL, "session": self.session, "seq": 1,
                "full": True, "digest": self.digests[0]}  # fmt: skip

    def change_v2(self, *, change: bool) -> tuple[dict[str, Any], bool]:
        """The next change report on the acknowledged base: nothing changed, or GPU 0 flipped.
        Returns the body and the state it describes."""
        flipped = not self.flipped if change else self.flipped
        body = {
            "node": self.name, "sent_at": self.report["sent_at"],
            "agent_version": AGENT_VERSION, "driver_version": self.report["driver_version"],
            "protocol": PROTOCOL, "session": self.session, "seq": self.seq + 1, "full": False,
            "base": self.seq, "base_digest": self.digests[self.flipped],
            "digest": self.digests[flipped], "gpus": [self.gpu0[flipped]] if change else [],
        }  # fmt: skip
        return body, flipped


def node_name(i: int) -> str:
    return f"agent-node-{i:04d}"


def _pod(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128)))


def build_nodes(count: int, seed: int) -> list[SimNode]:
    """``count`` fake nodes and their reports, built by the agent's own code (see the module
    docstring). Deterministic for a seed."""
    catalogue = load_catalogue()
    typical = {name: typical_layouts(catalogue.model(name))[1:] for name in MODELS}  # not empty
    client = PortalClient("http://127.0.0.1:9")  # never called: only inventory() is used
    nodes = []
    for n in range(count):
        rng = random.Random(seed * 1_000_003 + n)
        name = node_name(n)
        models = [rng.choice(MODELS), rng.choice(MODELS)]
        half = GPUS_PER_NODE // 2
        specs = [
            SimGpuSpec(models[i >= half], mig=rng.random() < MIG_FRACTION)
            for i in range(GPUS_PER_NODE)
        ]
        sim = SimulatedNvml(specs, catalogue=catalogue, seed=name)
        backend = NvmlBackend(sim, catalogue=catalogue)

        for index, spec in enumerate(specs):
            if spec.mig:
                for placement in rng.choice(typical[spec.name]):
                    gi = backend.create_gpu_instance(index, placement.profile, placement.start)
                    backend.create_compute_instance(index, gi.gi_id)
                    if rng.random() < BUSY_FRACTION:
                        for _ in range(rng.randint(1, 2)):
                            sim.start_process(
                                index, gi_id=gi.gi_id, used_memory_mib=rng.randint(200, 4000),
                                pod_uid=_pod(rng),
                            )  # fmt: skip
            else:
                sim.set_utilization(index, rng.randint(0, 100))
                for _ in range(rng.randint(0, 2)):
                    sim.start_process(
                        index, used_memory_mib=rng.randint(1000, 40000), pod_uid=_pod(rng)
                    )
        agent = Agent(
            backend=backend, client=client, state=AgentState(None), node=name,
            catalogue=catalogue, pod_lookup=sim.pod_uid_for_pid,
        )  # fmt: skip
        report = agent.inventory()
        nodes.append(SimNode(name, report, json.dumps(report).encode()))
    return nodes


def report_shape(nodes: list[SimNode]) -> dict[str, Any]:
    gpus = [g for n in nodes for g in n.report["gpus"]]
    instances = [i for g in gpus for i in g["instances"]]
    return {
        "gpus": len(gpus),
        "mig_gpus": sum(g["mig_mode_current"] for g in gpus),
        "instances": len(instances),
        "busy_instances": sum(bool(i["processes"]) for i in instances),
        "processes": sum(len(i["processes"]) for i in instances)
        + sum(len(g["processes"]) for g in gpus),
        "models": sorted({g["name"] for g in gpus}),
        "body_bytes_avg": round(statistics.mean(len(n.body) for n in nodes)),
    }


# --- seeding and in-process measurements -----------------------------------------------------


def seed(nodes: list[SimNode]) -> tuple[str, dict[str, float]]:
    """In this process, on the bench database: a platform admin with an API token; every node
    registered through the services with its own token, and its first report ingested."""
    import django

    django.setup()
    from django.db import connection
    from django.utils import timezone

    from gpu_agent.models import Node, NodeToken
    from gpu_agent.services.nodes import agent_register, join_token_create
    from gpu_agent.services.reports import agent_report_ingest
    from tenants.models import User
    from tenants.services import api_token_create

    timings = {}
    started = time.perf_counter()
    admin = User.objects.create_user("bench-admin", is_platform_admin=True)
    me_token = api_token_create(user=admin, name="bench")[1]
    for node in nodes:
        _, join_secret = join_token_create(node_name=node.name, actor=admin)
        _, node.token = agent_register(
            join_secret=join_secret, hostname=node.name, agent_version=SEEDED_VERSION
        )
    NodeToken.objects.update(last_used_at=timezone.now())
    timings["register_s"] = time.perf_counter() - started
    started = time.perf_counter()
    by_name = {n.name: n for n in Node.objects.all()}
    groups = split(nodes)
    for node in groups[0]:
        agent_report_ingest(
            node=by_name[node.name], report={**node.report, "agent_version": SEEDED_VERSION}
        )
    for node in [*groups[1], *groups[2]]:
        node.prepare_changes()
        body = json.loads(json.dumps(node.full_v2()))  # as the endpoint receives it
        agent_report_ingest(
            node=by_name[node.name], report={**body, "agent_version": SEEDED_VERSION}
        )
    timings["first_ingest_s"] = time.perf_counter() - started
    with connection.cursor() as cursor:  # fresh planner statistics, as autovacuum would give
        cursor.execute("ANALYZE")
    return me_token, timings


def split(nodes: list[SimNode]) -> list[list[SimNode]]:
    """The nodes of each kind of report: protocol 1, protocol 2 no change, protocol 2 changed."""
    return [nodes[i::GROUPS] for i in range(GROUPS)]


def _post(client: Any, node: SimNode) -> Any:
    return client.post(
        REPORT_PATH, node.body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {node.token}",
    )  # fmt: skip


def inprocess(nodes: list[SimNode], count: int, profile: bool) -> dict[str, Any]:
    """The SQL queries of one report, then the time of a report's parts, per report, over
    ``count`` nodes: JSON parsing, the token lookup, the validation, the ingest service,
    and the whole request with Django's test client (no HTTP, no gunicorn)."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from gpu_agent.models import Node
    from gpu_agent.services.nodes import node_token_authenticate
    from gpu_agent.services.reports import report_ingest, report_validated

    client = Client(HTTP_HOST="127.0.0.1")
    with CaptureQueriesContext(connection) as ctx:
        response = _post(client, nodes[0])
    if response.status_code != 200 or response.json().get("desired_generation") != 0:
        raise RuntimeError(f"POST {REPORT_PATH}: {response.status_code} {response.content[:300]!r}")
    queries = [q["sql"] for q in ctx.captured_queries]

    sample = [nodes[i % len(nodes)] for i in range(1, count + 1)]
    phases: dict[str, float] = dict.fromkeys(("parse", "validate", "authenticate", "ingest"), 0.0)
    for node in sample:
        t0 = time.perf_counter()
        data = json.loads(node.body)
        t1 = time.perf_counter()
        token = node_token_authenticate(secret=node.token)
        t2 = time.perf_counter()
        assert token is not None
        report = report_validated(node=token.node, data=data)
        t3 = time.perf_counter()
        report_ingest(node=token.node, report=report)
        t4 = time.perf_counter()
        for name, seconds in zip(phases, (t1 - t0, t3 - t2, t2 - t1, t4 - t3), strict=True):
            phases[name] += seconds
    started = time.perf_counter()
    for node in sample:
        _post(client, node)
    whole = time.perf_counter() - started
    result: dict[str, Any] = {
        "sql_queries_per_report": len(queries),
        "sql": queries,
        "reports": count,
        "ms_per_report": {k: round(1000 * v / count, 2) for k, v in phases.items()},
    }
    result["ms_per_report"]["whole_request"] = round(1000 * whole / count, 2)
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for node in sample:
            _post(client, node)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)
        result["profile"] = out.getvalue()
    # The HTTP phase's check tells its reports by the agent version: back to the seeded one.
    Node.objects.update(agent_version=SEEDED_VERSION)
    connection.close()
    return result


# --- load ------------------------------------------------------------------------------------


@dataclass
class Load:
    """What one endpoint's clients send: the next request, and which keys were answered 200."""

    next_request: Any  # () -> (method, url, body, headers, key)
    answered: set[Any] = field(default_factory=set)
    on_answer: Any = None  # (key, answer bytes) -> an error or None, for a 200


def drive(port: int, clients: int, seconds: float, load: Load, tally: api_bench.Tally) -> None:
    """``clients`` threads, each with its own connection, send requests for ``seconds``."""
    deadline = time.perf_counter() + seconds

    def client() -> None:  # list.append and set.add are atomic in CPython
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while time.perf_counter() < deadline:
            method, url, body, headers, key = load.next_request()
            start = time.perf_counter()
            try:
                conn.request(method, url, body=body, headers=headers)
                response = conn.getresponse()
                answer = response.read()
                if response.status == 200:
                    load.answered.add(key)
                    problem = load.on_answer(key, answer) if load.on_answer else None
                    if problem:
                        tally.errors.append(f"{method} {url}: {problem}")
                else:
                    tally.errors.append(f"{method} {url}: HTTP {response.status} {answer[:300]!r}")
            except (OSError, http.client.HTTPException) as exc:
                tally.errors.append(f"{method} {url}: {exc!r}")
                conn.close()
            tally.latencies.append(time.perf_counter() - start)
        conn.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: client(), range(clients)))  # re-raises a client's exception
    tally.seconds += time.perf_counter() - started


def loads(nodes: list[SimNode], me_token: str) -> dict[str, Load]:
    me_headers = {"Authorization": f"Token {me_token}"}
    whole, quiet, changing = split(nodes)
    index = {n.name: i for i, n in enumerate(nodes)}

    def headers(node: SimNode) -> dict[str, str]:
        return {"Authorization": f"Bearer {node.token}", "Content-Type": "application/json"}

    def whole_load() -> Load:
        turn = itertools.count()  # next() is atomic: the threads share it

        def report() -> tuple[str, str, bytes, dict[str, str], int]:
            node = whole[next(turn) % len(whole)]
            return "POST", REPORT_PATH, node.body, headers(node), index[node.name]

        return Load(report)

    def changes_load(group: list[SimNode], *, change: bool) -> Load:
        turn = itertools.count()
        in_flight: dict[int, tuple[int, bool]] = {}  # node -> (seq sent, state sent)

        def report() -> tuple[str, str, bytes, dict[str, str], int]:
            while True:  # a node whose last report is still unanswered waits its turn
                node = group[next(turn) % len(group)]
                i = index[node.name]
                if in_flight.setdefault(i, (-1, False))[0] == -1:
                    break
            body, flipped = node.change_v2(change=change)
            in_flight[i] = (body["seq"], flipped)
            return "POST", REPORT_PATH, json.dumps(body).encode(), headers(node), i

        def answered(i: int, raw: bytes) -> str | None:
            seq, flipped = in_flight.pop(i)
            answer = json.loads(raw)
            if answer.get("ack") != seq:
                return f"not acknowledged: {answer}"
            nodes[i].seq, nodes[i].flipped = seq, flipped
            return None

        return Load(report, on_answer=answered)

    return {
        ENDPOINTS[0]: Load(lambda: ("GET", ME_PATH, None, me_headers, None)),
        ENDPOINTS[1]: whole_load(),
        ENDPOINTS[2]: changes_load(quiet, change=False),
        ENDPOINTS[3]: changes_load(changing, change=True),
    }


class CpuMeter:
    """CPU seconds used by gunicorn (master and workers) and by the PostgreSQL backends
    connected to the bench database, read from /proc (Linux; None elsewhere). A backend that
    exits between two samples loses its CPU since the first; the bench samples every round."""

    def __init__(self, server_pid: int, server_url: str, db_name: str) -> None:
        self.server_pid, self.db_name = server_pid, db_name
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.conn = psycopg.connect(server_url, autocommit=True)  # not on the bench database

    @staticmethod
    def _cpu(pid: int, tick: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    def _children(self) -> list[int]:
        try:
            text = Path(f"/proc/{self.server_pid}/task/{self.server_pid}/children").read_text()
        except OSError:
            return []
        return [int(pid) for pid in text.split()]

    def sample(self) -> dict[str, dict[int, float]] | None:
        if not Path(f"/proc/{self.server_pid}/stat").exists():
            return None
        backends = [
            pid
            for (pid,) in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = "
                "'client backend'",
                (self.db_name,),
            )
        ]
        groups = {"gunicorn": [self.server_pid, *self._children()], "postgres": backends}
        return {
            group: {pid: cpu for pid in pids if (cpu := self._cpu(pid, self.tick)) is not None}
            for group, pids in groups.items()
        }

    @staticmethod
    def add(total: dict[str, float], before: Any, after: Any) -> None:
        """Add the CPU used between two samples to ``total`` (a process new since the first
        sample counts whole)."""
        if before is None or after is None:
            return
        for group, pids in after.items():
            used = sum(cpu - before[group].get(pid, 0.0) for pid, cpu in pids.items())
            total[group] = total.get(group, 0.0) + used

    def close(self) -> None:
        self.conn.close()


# --- checks ----------------------------------------------------------------------------------


def check_landed(nodes: list[SimNode], posted: set[int], since: Any) -> dict[str, Any]:
    """The reports posted over HTTP are in the database: the nodes' agent version, their GPUs
    seen and their MIG instances observed since the HTTP phase began, exactly as reported."""
    from django.db import connection

    from gpu_agent.models import Gpu, MigInstance, Node

    shape = report_shape(nodes)
    sent = [nodes[i] for i in posted]
    names = [n.name for n in sent]
    whole = [n.name for n in split(nodes)[0]]
    v2 = [n for group in split(nodes)[1:] for n in group]
    held = {
        name: (seq, digest)
        for name, seq, digest in Node.objects.filter(name__in=[n.name for n in v2]).values_list(
            "name", "report_seq", "report_digest"
        )
    }
    generations = dict(
        Gpu.objects.filter(node__name__in=[n.name for n in v2], index=0).values_list(
            "node__name", "applied_generation"
        )
    )
    sent_instances = [i for n in sent for g in n.report["gpus"] for i in g["instances"]]
    result = {
        "nodes": Node.objects.count(),
        "gpus": Gpu.objects.count(),
        "expected_gpus": shape["gpus"],
        "instances": MigInstance.objects.count(),
        "expected_instances": shape["instances"],
        "busy_instances": MigInstance.objects.filter(busy=True).count(),
        "expected_busy_instances": shape["busy_instances"],
        "nodes_posted": len(sent),
        "nodes_with_new_version": Node.objects.filter(
            agent_version=AGENT_VERSION, name__in=whole
        ).count(),
        "nodes_reported_since": Node.objects.filter(
            last_report_at__gte=since, name__in=whole
        ).count(),
        "protocol_2_nodes": len(v2),
        # Each protocol 2 node holds the state of the report the client saw acknowledged last
        # (its digest; the seq stored may be an earlier one of the session, as a quiet report
        # is acknowledged without a write), and GPU 0 in the state that report described.
        "protocol_2_bases_as_acknowledged": sum(
            held.get(n.name, (n.seq + 1, ""))[0] <= n.seq
            and held[n.name][1] == n.digests[n.flipped]
            for n in v2
        ),
        "protocol_2_gpu0_as_reported": sum(
            generations.get(n.name) == n.gpu0[n.flipped].get("applied_generation", 0) for n in v2
        ),
        "gpus_seen_since": Gpu.objects.filter(
            last_seen_at__gte=since, node__name__in=whole
        ).count(),
        "expected_gpus_seen": sum(len(n.report["gpus"]) for n in sent),
        "instances_observed_since": MigInstance.objects.filter(
            observed_at__gte=since, gpu__node__name__in=whole
        ).count(),
        "expected_instances_observed": len(sent_instances),
        "busy_observed_since": MigInstance.objects.filter(observed_at__gte=since, busy=True)
        .filter(gpu__node__name__in=names)
        .count(),
        "expected_busy_observed": sum(bool(i["processes"]) for i in sent_instances),
    }
    connection.close()
    result["ok"] = (
        result["nodes"] == len(nodes)
        and result["gpus"] == result["expected_gpus"]
        and result["instances"] == result["expected_instances"]
        and result["busy_instances"] == result["expected_busy_instances"]
        and len(sent) > 0
        and result["nodes_with_new_version"] == result["nodes_reported_since"] == len(sent)
        and result["gpus_seen_since"] == result["expected_gpus_seen"]
        and result["instances_observed_since"] == result["expected_instances_observed"]
        and result["busy_observed_since"] == result["expected_busy_observed"]
        and result["protocol_2_bases_as_acknowledged"] == len(v2)
        and result["protocol_2_gpu0_as_reported"] == len(v2)
    )
    return result


# --- the run ---------------------------------------------------------------------------------


def add_arguments(parser: Any) -> None:
    """The options of part (b), on an ``ArgumentParser`` or an argument group of mig_bench.py."""
    add = parser.add_argument
    default_url = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    add("--database-url", default=default_url,
        help="PostgreSQL server, any database on it (default: $DATABASE_URL or local)")  # fmt: skip
    add("--db-name", default="portal_agent_bench", help="dropped, created, dropped again")
    add("--agents", type=int, default=AGENTS, help=f"simulated nodes (default {AGENTS})")
    add("--seconds", type=float, default=10, help="per endpoint (default 10)")
    add("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    add("--warmup", type=float, default=2, help="per endpoint, not counted (default 2)")
    add("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    add("--inprocess", type=int, default=100,
        help="reports timed in this process, by part (default 100)")  # fmt: skip
    add("--profile", action="store_true", help="also cProfile --inprocess reports and print it")
    add("--agent-seed", type=int, default=1, help="of the simulated nodes (default 1)")


def http_phase(
    args: argparse.Namespace, env: dict[str, str], tmp: str, load: dict[str, Load]
) -> tuple[dict[str, api_bench.Tally], dict[str, dict[str, float]], float]:
    """gunicorn, and the endpoints driven in alternating rounds after a warm-up round: each
    endpoint's tally, the server CPU seconds it used (by process group), the client's CPUs."""
    seconds, rounds, warmup = args.seconds, args.rounds, args.warmup
    server, port = api_bench.start_gunicorn(env, Path(tmp) / "gunicorn.log")
    meter = None
    try:
        print(f"gunicorn (2 sync workers) on :{port}, {args.clients} client threads. Per endpoint: "
              f"{warmup:g} s warm-up, {seconds:g} s in {rounds} interleaved rounds.")  # fmt: skip
        meter = CpuMeter(server.pid, args.database_url, args.db_name)
        tallies = {name: api_bench.Tally() for name in ENDPOINTS}
        server_cpu: dict[str, dict[str, float]] = {name: {} for name in ENDPOINTS}
        cpu, started = time.process_time(), time.perf_counter()
        for round_ in range(-1, rounds):  # round -1 warms up and is not counted
            for name in ENDPOINTS:
                tally = api_bench.Tally() if round_ < 0 else tallies[name]
                before = meter.sample()
                drive(port, args.clients, warmup if round_ < 0 else seconds / rounds,
                      load[name], tally)  # fmt: skip
                if round_ >= 0:
                    meter.add(server_cpu[name], before, meter.sample())
        client_cpu = round((time.process_time() - cpu) / (time.perf_counter() - started), 2)
    finally:
        if meter is not None:
            meter.close()
        server.terminate()  # graceful: the workers finish their request and exit
        server.wait()
    return tallies, server_cpu, client_cpu


def measure(args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    """Everything between creating the database and dropping it."""
    seconds, rounds, warmup = args.seconds, args.rounds, args.warmup
    started = time.perf_counter()
    nodes = build_nodes(args.agents, args.agent_seed)
    shape = report_shape(nodes)
    print(f"built {len(nodes)} fake nodes in {time.perf_counter() - started:.1f} s: "
          f"{shape['gpus']} GPUs ({shape['mig_gpus']} in MIG mode; {', '.join(shape['models'])}), "
          f"{shape['instances']} MIG instances ({shape['busy_instances']} busy), "
          f"{shape['processes']} processes; a report is {shape['body_bytes_avg']} bytes on "
          "average")  # fmt: skip

    env = api_bench.bench_env(api_bench.database(args.database_url, args.db_name, create=True), tmp)
    migrate = [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity=0"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True)
    os.environ.update(env)  # for seed(), which sets up Django in this process
    me_token, timings = seed(nodes)
    print(f"registered {len(nodes)} nodes through the services (join token, register) in "
          f"{timings['register_s']:.1f} s; first reports ingested in this process in "
          f"{timings['first_ingest_s']:.1f} s")  # fmt: skip
    local = inprocess(split(nodes)[0], args.inprocess, args.profile)  # protocol 1 nodes
    parts = local["ms_per_report"]
    print(f"SQL queries per report: {local['sql_queries_per_report']}")
    for sql in local["sql"]:
        print(f"    {sql[:150]}")
    print(f"in this process, ms per report over {local['reports']} reports: "
          + ", ".join(f"{k} {v}" for k, v in parts.items()))  # fmt: skip
    if args.profile:
        print(local.pop("profile"))

    from django.utils import timezone

    since = timezone.now()
    load = loads(nodes, me_token)
    tallies, server_cpu, client_cpu = http_phase(args, env, tmp, load)
    print(f"client threads used {client_cpu} CPUs on average (machine: {os.cpu_count()})")
    cpu_ms = {
        name: {
            group: round(1000 * used / max(1, len(tallies[name].latencies)), 2)
            for group, used in server_cpu[name].items()
        }
        for name in ENDPOINTS
    }
    for name, groups in cpu_ms.items():
        if groups:
            print(f"server CPU per request, {name}: " + ", ".join(
                f"{group} {ms} ms" for group, ms in groups.items()
            ) + f" (total {sum(groups.values()):.2f} ms)")  # fmt: skip
    totals = [sum(cpu_ms[name].values()) for name in ENDPOINTS]
    cpu_ratio = round(totals[0] / totals[1], 2) if all(totals) else None
    if cpu_ratio is not None:
        print(f"server CPU per request, baseline / report: {totals[0] / totals[1]:.2f} (with the "
              "CPUs saturated, the throughput ratio follows it)")  # fmt: skip

    check = check_landed(nodes, load[ENDPOINTS[1]].answered, since)
    print(f"data check ({'OK' if check['ok'] else 'FAILED'}): {check['nodes_posted']} nodes "
          f"posted over HTTP, {check['nodes_with_new_version']} with the posted agent version, "
          f"{check['gpus_seen_since']}/{check['expected_gpus_seen']} of their GPUs seen and "
          f"{check['instances_observed_since']}/{check['expected_instances_observed']} MIG "
          f"instances ({check['busy_observed_since']}/{check['expected_busy_observed']} busy) "
          f"observed since; fleet: {check['gpus']}/{check['expected_gpus']} GPUs, "
          f"{check['instances']}/{check['expected_instances']} instances; protocol 2: "
          f"{check['protocol_2_bases_as_acknowledged']}/{check['protocol_2_nodes']} nodes hold "
          f"the report last acknowledged, {check['protocol_2_gpu0_as_reported']} with GPU 0 as "
          "that report said")  # fmt: skip

    base = tallies[ENDPOINTS[0]]
    base_rps = len(base.latencies) / base.seconds
    rows = [
        api_bench.summarize(name, t, None if t is base else base_rps, target=target)
        for (name, t), target in zip(tallies.items(), TARGETS, strict=True)
    ]
    if not check["ok"]:
        for row in rows[1:]:
            row["result"] = "FAIL"
            row["first_error"] = row["first_error"] or f"data check failed: {check}"
    need = args.agents / INTERVAL_S
    capacity = {
        "agents": args.agents,
        "interval_s": INTERVAL_S,
        "needed_reports_per_s": need,
        "measured_reports_per_s": rows[1]["rps"],
        "headroom": round(rows[1]["rps"] / need, 2),
        "agents_at_10s_supported": int(rows[1]["rps"] * INTERVAL_S),
        "protocol_2_quiet_reports_per_s": rows[2]["rps"],
        "protocol_2_agents_at_10s_supported": int(rows[2]["rps"] * INTERVAL_S),
    }
    local.pop("sql")
    return {
        "results": rows,
        "capacity": capacity,
        "report_shape": shape,
        "seed_timings_s": {k: round(v, 1) for k, v in timings.items()},
        "inprocess": local,
        "check": check,
        "client_cpu_cores": client_cpu,
        "server_cpu_ms_per_request": cpu_ms,
        "server_cpu_ratio_baseline_to_report": cpu_ratio,
        "config": {
            "agents": args.agents, "gpus_per_node": GPUS_PER_NODE, "clients": args.clients,
            "seconds": seconds, "rounds": rounds, "warmup": warmup, "gunicorn_workers": 2,
            "cpus": os.cpu_count(), "target": TARGET,
        },
    }  # fmt: skip


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """Part (b) from start to finish; the figures and the failures (empty: PASS)."""
    if args.agents < 1 or args.clients < 1 or args.inprocess < 1:
        raise ValueError("--agents, --clients and --inprocess must be 1 or more")
    with tempfile.TemporaryDirectory(prefix="portal-agent-bench-") as tmp:
        try:
            report = measure(args, tmp)
        finally:
            api_bench.database(args.database_url, args.db_name, create=False)
    rows = report["results"]
    print()
    names = {"rps": "req/s", "p50_ms": "p50 ms", "p99_ms": "p99 ms"}
    for row in [{k: names.get(k, k) for k in rows[0]}, *rows]:  # a header, then the rows
        print(api_bench.COLUMNS.format(**row))
    cap = report["capacity"]
    print(f"\n{cap['agents']} agents every {cap['interval_s']:g} s need "
          f"{cap['needed_reports_per_s']:g} reports/s; measured {cap['measured_reports_per_s']} "
          f"reports/s (2 workers, client and PostgreSQL on the same {os.cpu_count()} CPUs): "
          f"x{cap['headroom']} headroom, about {cap['agents_at_10s_supported']} agents at "
          "10 s")  # fmt: skip
    failures = [
        f"{r['endpoint']}: ratio {r['ratio']}, {r['errors']} errors. {r['first_error']}"
        for r in rows
        if r["result"] != "PASS"
    ]
    return report, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally blocks run
    try:
        report, failures = run(args)
    except ValueError as exc:
        parser.error(str(exc))
    print("BENCH_JSON " + json.dumps({"benchmark": "agent_report", **report}, sort_keys=True))
    emit("agent_report", api_bench.row_figures(report["results"]))
    for failure in failures:
        print(f"FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except ERRORS as exc:
        sys.exit(f"error: {exc}")
