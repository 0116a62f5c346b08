"""The one check every fault test ends with, and what the fault tests share: approvals spread
over several tenants, a watch on the stand-in that records every write it accepted, and the row
each test adds to the session's table.

After a fault, three things must hold:

* every approved change is in the cluster: read back through the stand-in's API, each tenant's
  ClusterQueue carries the portal's current quota set generation and its nominal quotas and
  borrowing limits, and its ResourceQuotas the generation and the limits;
* no request is stuck: every approved request reaches ``applied`` before a deadline, none is
  left ``approved``, ``applying`` or ``failed``, and no outbox row is left open;
* no side effect happened twice: one decision and one ``quota_request.approved`` and one
  ``quota_request.applied`` audit row per request, generations strictly increasing per tenant,
  one outbox row per generation, and no write the stand-in accepted took a tenant's objects
  back to an older generation.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from approvals.choices import DecisionKind, RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeRequest
from approvals.services import quota_request_approve, quota_request_create, request_items_parse
from devcluster.runner import ProcessHandle
from quotas.choices import CPU_RESOURCE
from quotas.kube.names import RESOURCE_QUOTA_NO_PRODUCTION
from quotas.kube.resources import KUEUE
from quotas.kube.spec import ANNOTATION_GENERATION, LABEL_TENANT
from quotas.models import Cluster, QuotaSet, SyncOutbox, TenantSync
from quotas.quantity import parse_quantity
from tenants.models import AuditEvent, Tenant, User

CONVERGE_DEADLINE_S = 60.0
POLL_S = 0.1
SUMMARY = Path(__file__).resolve().parents[2] / ".data" / "faults" / "summary.json"
RESULTS: list[dict[str, Any]] = []  # one row per fault test, printed at the end of the session

CLUSTER_QUEUES = f"/apis/{KUEUE}/clusterqueues"
RESOURCE_QUOTAS = "/api/v1/resourcequotas"


# --- approvals --------------------------------------------------------------------------------


def approve_cpu_changes(
    *, cluster: Cluster, tenants: Sequence[Tenant], rounds: int, requester: dict[str, User],
    approver: User, step: int = 1,
) -> list[QuotaChangeRequest]:  # fmt: skip
    """``rounds`` approvals per tenant (round-robin), each raising the tenant's CPU guarantee
    and limit on the cluster's GPU flavor by ``step`` cores: every one is a new generation
    that must reach the cluster. ``requester`` maps a tenant's slug to its lead."""
    made = []
    for _ in range(rounds):
        for tenant in tenants:
            made.append(
                approve_one(
                    cluster=cluster,
                    tenant=tenant,
                    requester=requester[tenant.slug],
                    approver=approver,
                    step=step,
                )
            )
    return made


def approve_one(
    *, cluster: Cluster, tenant: Tenant, requester: User, approver: User, step: int = 1
) -> QuotaChangeRequest:
    quota = (
        QuotaSet.objects.get(tenant=tenant, cluster=cluster)
        .quotas.select_related("flavor")
        .get(resource=CPU_RESOURCE)
    )
    raw = {
        "flavor": quota.flavor.name,
        "resource": CPU_RESOURCE,
        "guaranteed": int(quota.guaranteed) + step,
        "limit": int(quota.limit) + step,
    }
    request = quota_request_create(
        tenant=tenant,
        cluster=cluster,
        requester=requester,
        reason="fault injection: more CPU for data loading",
        items=request_items_parse(cluster=cluster, raw_items=[raw]),
        submit=True,
    )
    return quota_request_approve(request=request, approver=approver)


# --- the stand-in's record of writes ------------------------------------------------------------


class Watch:
    """Every ADDED / MODIFIED event of the portal's ClusterQueues and ResourceQuotas on the
    stand-in (a watch stream per kind, in threads), so a write that went backwards is seen even
    when a later one covered it."""

    def __init__(self, standin: ProcessHandle) -> None:
        self.url = standin.url
        self.events: list[tuple[str, str, str, int]] = []  # (kind, object, tenant, generation)
        self._lock = threading.Lock()
        self._ready = threading.Barrier(3)
        self._threads = [
            threading.Thread(target=self._run, args=(path,), daemon=True, name=f"watch {path}")
            for path in (CLUSTER_QUEUES, RESOURCE_QUOTAS)
        ]

    def start(self) -> Watch:
        for thread in self._threads:
            thread.start()
        self._ready.wait(timeout=10)
        return self

    def _run(self, path: str) -> None:
        query = f"?watch=1&timeoutSeconds=900&labelSelector={LABEL_TENANT}"
        with urllib.request.urlopen(self.url + path + query, timeout=900) as stream:  # noqa: S310 - the stand-in on 127.0.0.1
            self._ready.wait(timeout=10)
            for line in stream:
                event = json.loads(line)
                if event["type"] not in ("ADDED", "MODIFIED"):
                    continue
                meta = event["object"]["metadata"]
                generation = int((meta.get("annotations") or {}).get(ANNOTATION_GENERATION, 0))
                name = f"{meta.get('namespace', '')}/{meta['name']}"
                with self._lock:
                    self.events.append(
                        (event["object"]["kind"], name, meta["labels"][LABEL_TENANT], generation)
                    )

    def writes(self) -> list[tuple[str, str, str, int]]:
        with self._lock:
            return list(self.events)

    def backwards(self) -> list[str]:
        """Writes that took an object to an older generation than it had."""
        last: dict[tuple[str, str], int] = {}
        found = []
        for kind, name, _tenant, generation in self.writes():
            before = last.get((kind, name), 0)
            if generation < before:
                found.append(f"{kind} {name}: generation {before} -> {generation}")
            last[(kind, name)] = max(before, generation)
        return found


def read(standin: ProcessHandle, path: str) -> list[dict[str, Any]]:
    query = f"?labelSelector={LABEL_TENANT}"
    with urllib.request.urlopen(standin.url + path + query, timeout=10) as response:  # noqa: S310 - the stand-in on 127.0.0.1
        items: list[dict[str, Any]] = json.loads(response.read())["items"]
    return items


# --- the check ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    converge_s: float
    approvals: int
    lost: int
    problems: list[str] = field(default_factory=list)


def wait_applied(
    requests: Iterable[QuotaChangeRequest],
    *,
    deadline_s: float = CONVERGE_DEADLINE_S,
    while_waiting: Callable[[], None] | None = None,
) -> dict[int, str]:
    """Poll until every request is applied (or the deadline); the statuses at the end."""
    ids = [r.pk for r in requests]
    deadline = time.monotonic() + deadline_s
    while True:
        statuses = dict(QuotaChangeRequest.objects.filter(pk__in=ids).values_list("pk", "status"))
        if all(s == RequestStatus.APPLIED for s in statuses.values()):
            return statuses
        if time.monotonic() > deadline:
            return statuses
        if while_waiting is not None:
            while_waiting()
        time.sleep(POLL_S)


def _amount(value: Any) -> Decimal:
    return parse_quantity(str(value))


def cluster_problems(standin: ProcessHandle, cluster: Cluster) -> list[str]:
    """What the stand-in holds that differs from the portal's quota sets in force."""
    problems = []
    queues = {q["metadata"]["name"]: q for q in read(standin, CLUSTER_QUEUES)}
    quotas_by_tenant: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rq in read(standin, RESOURCE_QUOTAS):
        quotas_by_tenant[rq["metadata"]["labels"][LABEL_TENANT]].append(rq)
    for quota_set in QuotaSet.objects.filter(cluster=cluster).select_related("tenant"):
        slug, generation = quota_set.tenant.slug, quota_set.generation
        items = list(quota_set.quotas.select_related("flavor"))
        queue = queues.get(slug)
        if queue is None:
            problems.append(f"{slug}: no ClusterQueue in the cluster")
            continue
        have = int(queue["metadata"].get("annotations", {}).get(ANNOTATION_GENERATION, 0))
        if have != generation:
            problems.append(f"{slug}: ClusterQueue at generation {have}, portal at {generation}")
        live = {
            (flavor["name"], resource["name"]): resource
            for group in queue["spec"]["resourceGroups"]
            for flavor in group["flavors"]
            for resource in flavor["resources"]
        }
        for item in items:
            entry = live.get((item.flavor.name, item.resource))
            if entry is None:
                problems.append(f"{slug}: ClusterQueue lacks {item.flavor.name}/{item.resource}")
                continue
            nominal = _amount(entry["nominalQuota"])
            borrowing = _amount(entry.get("borrowingLimit", "0"))
            if (nominal, borrowing) != (item.guaranteed, item.limit - item.guaranteed):
                problems.append(
                    f"{slug}: ClusterQueue {item.flavor.name}/{item.resource} nominal {nominal} "
                    f"borrowing {borrowing}, portal {item.guaranteed}/{item.limit}"
                )
        limits: Counter[str] = Counter()
        for item in items:
            limits[f"requests.{item.resource}"] += item.limit  # type: ignore[assignment]
        hard: Counter[str] = Counter()
        rqs = quotas_by_tenant.get(slug, [])
        if not rqs:
            problems.append(f"{slug}: no ResourceQuota in the cluster")
        for rq in rqs:
            where = f"{rq['metadata']['namespace']}/{rq['metadata']['name']}"
            if rq["metadata"]["name"] == RESOURCE_QUOTA_NO_PRODUCTION:
                # The same at every generation (0 pods at the production priority), so a push
                # leaves it as it is: what counts is that it holds, and only without the grant.
                if quota_set.tenant.production_priority_allowed:
                    problems.append(f"{slug}: {where} though the tenant may use production")
                elif (rq.get("spec") or {}).get("hard", {}).get("pods") != "0":
                    problems.append(f"{slug}: {where} allows production pods")
                continue
            got = int(rq["metadata"].get("annotations", {}).get(ANNOTATION_GENERATION, 0))
            if got != generation:
                problems.append(
                    f"{slug}: ResourceQuota {where} at generation {got}, portal at {generation}"
                )
            spec = rq.get("spec") or {}
            if spec.get("scopeSelector") or spec.get("scopes"):
                continue  # a priority-scoped quota holds part of the limit, not all of it
            for key, limit in limits.items():
                amount = _amount((spec.get("hard") or {}).get(key, "0"))
                if cluster.has_kueue and amount != limit:
                    # With Kueue every namespace's quota holds the whole limit (the
                    # ClusterQueue caps the tenant); without it the namespaces share it.
                    problems.append(f"{slug}: ResourceQuota {where} {key} {amount}, limit {limit}")
                hard[key] += amount  # type: ignore[assignment]
        if rqs and not cluster.has_kueue:
            problems += [
                f"{slug}: ResourceQuotas {key} {hard[key]} in all, limit {limit}"
                for key, limit in limits.items()
                if hard[key] != limit
            ]
    return problems


def portal_problems(requests: Sequence[QuotaChangeRequest], cluster: Cluster) -> list[str]:
    problems = []
    ids = [r.pk for r in requests]
    decisions = Counter(
        ApprovalDecision.objects.filter(
            request_id__in=ids, decision=DecisionKind.APPROVE
        ).values_list("request_id", flat=True)
    )
    audits = Counter(
        AuditEvent.objects.filter(
            action__in=["quota_request.approved", "quota_request.applied"],
            object_id__in=[f"#{pk}" for pk in ids],
        ).values_list("action", "object_id")
    )
    for pk in ids:
        if decisions[pk] != 1:
            problems.append(f"request #{pk}: {decisions[pk]} approval decisions")
        for action in ("quota_request.approved", "quota_request.applied"):
            if audits[(action, f"#{pk}")] != 1:
                problems.append(f"request #{pk}: {audits[(action, f'#{pk}')]} {action} audit rows")
    by_tenant: dict[int, list[int]] = defaultdict(list)
    for request in QuotaChangeRequest.objects.filter(pk__in=ids).order_by("decided_at", "pk"):
        by_tenant[request.tenant_id].append(request.approved_generation or 0)
    for tenant_id, generations in by_tenant.items():
        if any(b <= a for a, b in pairwise(generations)):
            problems.append(
                f"tenant {tenant_id}: generations not strictly increasing {generations}"
            )
    rows = Counter(
        SyncOutbox.objects.filter(cluster=cluster).values_list("tenant_id", "generation")
    )
    problems += [
        f"outbox: {n} rows for tenant/generation {key}" for key, n in rows.items() if n > 1
    ]
    still_open = list(
        SyncOutbox.objects.filter(cluster=cluster, completed_at__isnull=True).values_list(
            "pk", "generation", "last_error"
        )
    )
    problems += [f"outbox row {row} still open" for row in still_open]
    for sync in TenantSync.objects.filter(cluster=cluster).select_related("tenant"):
        current = QuotaSet.objects.get(tenant=sync.tenant, cluster=cluster).generation
        if sync.applied_generation != current:
            problems.append(
                f"{sync.tenant.slug}: TenantSync applied {sync.applied_generation}, "
                f"quota set at {current}"
            )
    return problems


def check_invariants(
    *,
    fault: str,
    injected: int,
    requests: Sequence[QuotaChangeRequest],
    standin: ProcessHandle,
    cluster: Cluster,
    watch: Watch,
    started: float,
    deadline_s: float = CONVERGE_DEADLINE_S,
    while_waiting: Callable[[], None] | None = None,
) -> Outcome:
    """Wait for convergence, then check the three invariants; record the table row and fail
    the test naming every problem. ``started`` (``time.monotonic()``) is when the fault began."""
    statuses = wait_applied(requests, deadline_s=deadline_s, while_waiting=while_waiting)
    converge_s = time.monotonic() - started
    lost = [pk for pk, s in statuses.items() if s != RequestStatus.APPLIED]
    problems = [f"request #{pk} is {statuses[pk]}, not applied" for pk in lost]
    problems += cluster_problems(standin, cluster)
    problems += portal_problems(requests, cluster)
    problems += [f"write went backwards: {w}" for w in watch.backwards()]
    outcome = Outcome(round(converge_s, 1), len(requests), len(lost), problems)
    record(fault, injected=injected, outcome=outcome)
    if problems:
        pytest.fail(f"{fault}: {len(problems)} problem(s):\n" + "\n".join(problems))
    return outcome


def record(fault: str, *, injected: int, outcome: Outcome) -> None:
    RESULTS.append(
        {
            "fault": fault,
            "faults_injected": injected,
            "approvals_made": outcome.approvals,
            "approvals_lost": outcome.lost,
            "converge_s": outcome.converge_s,
            "problems": outcome.problems,
        }
    )


def write_summary(terminalreporter: Any) -> None:
    """The session's table of faults, printed and written to ``SUMMARY`` (nothing when no fault
    test ran)."""
    if not RESULTS:
        return
    header = ("fault", "faults injected", "approvals made", "approvals lost", "converge (s)")
    rows = [
        (
            r["fault"],
            str(r["faults_injected"]),
            str(r["approvals_made"]),
            str(r["approvals_lost"]),
            f"{r['converge_s']:.1f}",
        )
        for r in RESULTS
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    terminalreporter.section("fault injection")
    terminalreporter.write_line(line)
    terminalreporter.write_line("-+-".join("-" * w for w in widths))
    for row in rows:
        terminalreporter.write_line(
            " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        )
    total_lost = sum(r["approvals_lost"] for r in RESULTS)
    total_made = sum(r["approvals_made"] for r in RESULTS)
    terminalreporter.write_line(f"approvals lost over all faults: {total_lost} of {total_made}")
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps({"faults": RESULTS}, indent=1) + "\n", encoding="utf-8")
    terminalreporter.write_line(f"written to {SUMMARY}")
