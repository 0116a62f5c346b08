"""The load test's crowd on locust (issue 19, item 4): 50 people and 1,000 node agents.

Run by ``bench/load_bench.py``, which seeds the database, starts gunicorn, a Celery worker and
the stand-in cluster, writes the world this file reads (``LOAD_WORLD``: tokens, tenants, the
agents' reports) and checks afterwards that no approval was lost. On its own, against a portal
seeded by load_bench::

    LOAD_WORLD=world.json LOAD_OUT=out.json .venv/bin/locust -f bench/locustfile.py --headless \\
        -u 1050 -r 105 -t 120s --host http://127.0.0.1:8000 --csv load

The people (``LOAD_USERS``, 50; each class's share is ``fixed_count``):

- 40% leads browsing: signed in through the login page (session cookie, CSRF token read from
  the form), they open the home page, their tenant's page, the request list and the inbox;
- 20% leads filing requests over the API: one pending request at a time for their own tenant
  (guarantee +1 A100, under the one-approver threshold), the next once it is decided;
- 10% platform admins approving: they list pending requests and approve them (two admins may
  race for one request: the loser's 409 is the expected answer, counted apart, not an error);
- 30% automation polling the API with tokens: the tenant's quotas, its sync state, the pending
  requests and ``me/``.

The agents (``LOAD_AGENTS``, 1,000): each reports every ``LOAD_INTERVAL`` (10) s +/-20% with its
node token, protocol 2 (gpu_spec/src/gpu_spec/PROTOCOL.md): agents already running when the load starts, so
they go on from the base the seed left (session, seq 1) with change reports (a quiet node:
nothing changed), and send a full report only when an answer asks for one. Like a running
fleet, they do not report in step (``pacing.py``).

At the end (``test_stop``) it writes ``LOAD_OUT``: the ids of the requests filed (201) and
approved (200) as the users saw them, the number of expected 409s, and every response's time
(when, which endpoint, how long), from which load_bench takes percentiles after the start.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import gevent
from locust import between, constant, events, task
from locust.contrib.fasthttp import FastHttpUser
from pacing import next_report_in, spawn_tick

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
WORLD: dict[str, Any] = (
    json.loads(Path(os.environ["LOAD_WORLD"]).read_text()) if os.environ.get("LOAD_WORLD") else {}
)
PEOPLE = int(os.environ.get("LOAD_USERS", "50"))
AGENTS = int(os.environ.get("LOAD_AGENTS", str(len(WORLD.get("nodes", [])))))
INTERVAL = float(os.environ.get("LOAD_INTERVAL", "10"))
AGENT_HOST = os.environ.get("LOAD_AGENT_HOST", "")

# What the users saw, written at the end for load_bench's check.
FILED: list[int] = []
APPROVED: list[int] = []
CONFLICTS = [0]


def shares(users: int) -> dict[str, int]:
    """40% browse, 20% file, 10% approve, 30% automation; at least one filer and one approver
    (they make the approvals the check follows), the rest automation."""
    counts = {"browse": round(users * 0.4), "file": max(1, round(users * 0.2)),
              "approve": max(1, round(users * 0.1))}  # fmt: skip
    counts["automation"] = max(0, users - sum(counts.values()))
    return counts


SHARES = shares(PEOPLE)
# Each simulated person takes the next identity of their kind (gevent: no two at once).
_leads = itertools.count()
_filers = itertools.count()
_admins = itertools.count()
_nodes = itertools.count()


def _lead(counter: itertools.count[int]) -> dict[str, str]:
    leads = WORLD["leads"]
    return leads[next(counter) % len(leads)]  # type: ignore[no-any-return]


class BrowsingLead(FastHttpUser):
    fixed_count = SHARES["browse"]
    wait_time = between(0.5, 1.5)  # a person reads the page

    def on_start(self) -> None:
        lead = _lead(_leads)
        self.pages = [("/", "page: home"), (f"/tenants/{lead['slug']}/", "page: tenant"),
                      ("/requests/", "page: requests"), ("/inbox/", "page: inbox")]  # fmt: skip
        page = self.client.get("/login/", name="page: login")
        match = CSRF.search(page.text or "")
        if not match:
            raise RuntimeError("no CSRF token on the login page")
        form = {"username": lead["username"], "password": WORLD["password"],
                "csrfmiddlewaretoken": match[1]}  # fmt: skip
        with self.client.post(
            "/login/", name="page: login (POST)", data=urlencode(form), allow_redirects=False,
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Referer": f"{self.host}/login/"},
            catch_response=True,
        ) as answer:  # fmt: skip
            if answer.status_code == 302:
                answer.success()
            else:
                answer.failure(f"sign-in answered {answer.status_code}, not a redirect")

    @task
    def browse(self) -> None:
        path, name = random.choice(self.pages)
        # Signed in, a page answers 200; a redirect (to the login page) is an error here.
        with self.client.get(path, name=name, allow_redirects=False, catch_response=True) as answer:
            if answer.status_code != 200:
                answer.failure(f"{path} answered {answer.status_code}, not the page")


class FilingLead(FastHttpUser):
    fixed_count = SHARES["file"]
    wait_time = constant(1)

    def on_start(self) -> None:
        lead = _lead(_filers)
        self.slug = lead["slug"]
        self.client.auth_header = f"Token {lead['token']}"
        self.guaranteed = 4
        self.pending: int | None = None

    @task
    def file_or_wait(self) -> None:
        if self.pending is not None:  # the next one once this one is decided
            answer = self.client.get(f"/api/v1/quota-requests/{self.pending}/", name="api: request")
            if answer.status_code == 200 and answer.json()["status"] not in ("pending", "draft"):
                self.pending = None
            return
        body = {"tenant": self.slug, "cluster": WORLD["cluster"],
                "reason": "load test: one more A100", "submit": True,
                "items": [{"flavor": "a100-80gb", "resource": "nvidia.com/gpu",
                           "guaranteed": self.guaranteed + 1, "limit": self.guaranteed + 5}]}  # fmt: skip
        answer = self.client.post("/api/v1/quota-requests/", name="api: file request", json=body)
        if answer.status_code == 201:
            self.guaranteed += 1
            self.pending = answer.json()["id"]
            FILED.append(self.pending)


class ApprovingAdmin(FastHttpUser):
    fixed_count = SHARES["approve"]
    wait_time = between(0.5, 1.5)

    def on_start(self) -> None:
        admins = WORLD["admins"]
        self.client.auth_header = f"Token {admins[next(_admins) % len(admins)]}"

    @task
    def approve_pending(self) -> None:
        answer = self.client.get(
            "/api/v1/quota-requests/?status=pending&page_size=50", name="api: pending list"
        )
        if answer.status_code != 200:
            return
        ids = [r["id"] for r in answer.json()["results"]]
        random.shuffle(ids)
        for pk in ids:
            with self.client.post(
                f"/api/v1/quota-requests/{pk}/approve/", name="api: approve", json={},
                catch_response=True,
            ) as approved:  # fmt: skip
                if approved.status_code == 200:
                    APPROVED.append(pk)
                elif approved.status_code == 409:  # another admin approved it first
                    CONFLICTS[0] += 1
                    approved.success()


class Automation(FastHttpUser):
    fixed_count = SHARES["automation"]
    wait_time = between(0.2, 0.6)

    def on_start(self) -> None:
        lead = _lead(_leads)
        self.client.auth_header = f"Token {lead['token']}"
        slug = lead["slug"]
        self.calls = [(f"/api/v1/tenants/{slug}/quotas/", "api: tenant quotas"),
                      (f"/api/v1/tenants/{slug}/sync/", "api: tenant sync"),
                      ("/api/v1/quota-requests/?status=pending", "api: requests (automation)"),
                      ("/api/v1/me/", "api: me")]  # fmt: skip

    @task
    def poll(self) -> None:
        path, name = random.choice(self.calls)
        self.client.get(path, name=name)


class Agent(FastHttpUser):
    """A node agent speaking protocol 2, paced at its report interval +/-20%."""

    fixed_count = AGENTS

    def wait_time(self) -> float:
        return next_report_in(started=self.report_started, now=time.monotonic(), interval=INTERVAL)

    def on_start(self) -> None:
        # locust starts a tick's worth of users at once; a running fleet's first reports here
        # fall anywhere in that tick, not on one instant (pacing.py).
        gevent.sleep(random.uniform(0, spawn_tick(PEOPLE + AGENTS, INTERVAL)))
        self.report_started = time.monotonic()
        node = WORLD["nodes"][next(_nodes) % len(WORLD["nodes"])]
        if AGENT_HOST:  # the agents' own server (locust's --host is the people's)
            self.client.base_url = AGENT_HOST
        self.client.auth_header = f"Bearer {node['token']}"
        self.full_report: dict[str, Any] = node["report"]
        self.digest: str = node["digest"]  # the node's state never changes: a quiet node
        # The agent was running before the load: it goes on from the base the portal holds
        # (a full report only once the portal asks for one).
        self.session: str = node.get("session") or secrets.token_hex(8)
        self.seq: int = node.get("seq", 0)
        self.acknowledged: int | None = self.seq or None

    def body(self) -> dict[str, Any]:
        self.seq += 1
        sent_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        common = {"protocol": 2, "session": self.session, "seq": self.seq,
                  "digest": self.digest, "sent_at": sent_at}  # fmt: skip
        if self.acknowledged is None:  # the portal asked for a full report
            return {**self.full_report, **common, "full": True}
        report = self.full_report
        return {"node": report["node"], "agent_version": report["agent_version"],
                "driver_version": report["driver_version"], **common, "full": False,
                "base": self.acknowledged, "base_digest": self.digest, "gpus": []}  # fmt: skip

    @task
    def report(self) -> None:
        self.report_started = time.monotonic()
        answer = self.client.post("/api/v1/agent/report/", name="agent: report", json=self.body())
        if answer.status_code == 200:
            reply = answer.json()
            self.acknowledged = None if reply.get("full_report") else reply.get("ack")


# Every response's time, for percentiles over a part of the run (locust's CSV has the whole
# run's): [seconds since the first request, "GET page: home", milliseconds].
TIMES: list[tuple[float, str, float]] = []
CLOCK = time.monotonic


@events.request.add_listener
def _timed(request_type: str, name: str, response_time: float, **_: Any) -> None:
    if not TIMES:
        _timed.start = CLOCK()  # type: ignore[attr-defined]
    TIMES.append((CLOCK() - _timed.start, f"{request_type} {name}", response_time))  # type: ignore[attr-defined]


@events.test_stop.add_listener
def _write_outcome(**_: Any) -> None:
    out = os.environ.get("LOAD_OUT")
    if out:
        Path(out).write_text(json.dumps({
            "filed": FILED, "approved": APPROVED, "conflicts": CONFLICTS[0],
            "times": [(round(t, 3), name, round(ms, 1)) for t, name, ms in TIMES],
        }))  # fmt: skip
