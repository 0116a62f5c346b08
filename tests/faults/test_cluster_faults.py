"""Faults on the way from an approval to the cluster, with real PostgreSQL, Redis, Celery worker
processes and the stand-in API server in its own process: a worker killed mid-push, database
connections dropped during a push, an API server failing 30% of requests, the same outbox row
delivered twice. Each test approves changes for three tenants and ends with
``check_invariants``: every approved change in the cluster, no request stuck, no side effect
twice."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from quotas.kube.applier import RetryableError
from quotas.models import SyncOutbox
from quotas.services import (
    OUTBOX_RESEND_AFTER,
    enqueue_outbox,
    outbox_sweep,
)
from quotas.sync import cluster_reconcile, outbox_deliver, tenant_push_lock
from tests.faults.invariants import (
    approve_cpu_changes,
    approve_one,
    check_invariants,
    wait_applied,
)

pytestmark = [pytest.mark.integration]


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout_s} s")
        time.sleep(0.05)


def status(request: QuotaChangeRequest) -> str:
    return QuotaChangeRequest.objects.get(pk=request.pk).status


def tenants(world: Any) -> list[Any]:
    return [world.team_a, world.team_b, world.team_c]


def sweep_as_the_beat(*, after: timedelta) -> Callable[[], None]:
    """The beat's outbox sweep (every minute in production), run at most once a second with
    the clock moved ``after`` ahead, so the grace periods have passed."""
    last = [0.0]

    def sweep() -> None:
        if time.monotonic() - last[0] >= 1:
            last[0] = time.monotonic()
            outbox_sweep(now=timezone.now() + after)

    return sweep


def test_a_worker_killed_mid_push(synced, leads, start_worker, standin, watch):
    world = synced
    worker = start_worker()
    made = approve_cpu_changes(
        cluster=world.a100, tenants=tenants(world), rounds=2, requester=leads, approver=world.admin
    )
    assert all(s == RequestStatus.APPLIED for s in wait_applied(made).values())

    # The stand-in hangs on the next apply, long enough to kill the worker inside the push of
    # team-a's newest generation: no later approval of team-a will cover it.
    standin.fail_next(1, None, delay_s=5, verbs=["apply"])
    last = approve_one(
        cluster=world.a100, tenant=world.team_a, requester=leads["team-a"], approver=world.admin
    )
    wait_for(lambda: status(last) == RequestStatus.APPLYING, "applying")
    time.sleep(0.5)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    killed_at = time.monotonic()
    row = SyncOutbox.objects.get(
        tenant=world.team_a, cluster=world.a100, generation=status_row_generation(last)
    )
    assert row.completed_at is None and row.dispatched_at is not None
    # Approvals go on while no worker runs; a new worker comes up.
    made += [last] + [
        approve_one(cluster=world.a100, tenant=t, requester=leads[t.slug], approver=world.admin)
        for t in (world.team_b, world.team_c)
    ]
    start_worker()
    check_invariants(
        fault="worker SIGKILLed mid-push",
        injected=1,
        requests=made,
        standin=standin,
        cluster=world.a100,
        watch=watch,
        started=killed_at,
        # The killed task's message is unacknowledged in Redis until its visibility timeout
        # (an hour): the sweep hands the row, taken long ago and never completed, out again.
        while_waiting=sweep_as_the_beat(after=OUTBOX_RESEND_AFTER + timedelta(seconds=1)),
    )


def status_row_generation(request: QuotaChangeRequest) -> int:
    generation = QuotaChangeRequest.objects.get(pk=request.pk).approved_generation
    assert generation is not None
    return generation


def other_backends() -> int:
    """The other connections to this test database: the worker's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def terminate_other_backends() -> int:
    """``pg_terminate_backend`` on every other connection to this test database: the worker's
    (the stand-in and the watch have none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_database_connections_dropped_during_a_push(
    on_postgres, synced, leads, start_worker, standin, watch
):
    world = synced
    start_worker()
    # Every write is slow: the worker's connection is terminated while it waits on the API
    # server, and it finds out when it records the outcome.
    standin.fail_next(None, None, delay_s=0.4, verbs=["apply"])
    made = approve_cpu_changes(
        cluster=world.a100, tenants=tenants(world), rounds=2, requester=leads, approver=world.admin
    )
    # The window opens once the worker, just started, is connected: on a busy machine it can
    # take longer than the window to start, and there was then no connection to terminate.
    wait_for(lambda: other_backends() > 0, "the worker's database connection", timeout_s=120)
    terminated = 0
    until = time.monotonic() + 6
    while time.monotonic() < until:
        applying = QuotaChangeRequest.objects.filter(
            pk__in=[r.pk for r in made], status=RequestStatus.APPLYING
        ).exists()
        if applying:
            terminated += terminate_other_backends()
            time.sleep(0.3)
        else:
            time.sleep(0.05)
    standin.clear_faults()
    assert terminated > 0, "no push was caught in the middle"
    check_invariants(
        fault="PostgreSQL backends terminated mid-push",
        injected=terminated,
        requests=made,
        standin=standin,
        cluster=world.a100,
        watch=watch,
        started=time.monotonic(),
    )


def _random_failures(standin: Any, probability: float, seed: int) -> None:
    """``probability`` of the API requests fail, a third each with 500, 409 and a timeout
    (504 after a short wait), at random (rules match in order: 1/3, then 1/2 of the rest, then
    all of the rest of the failing share)."""
    share = probability / 3
    standin.fail_next(None, 500, probability=share, seed=seed)
    standin.fail_next(None, 409, probability=share / (1 - share), seed=seed + 1)
    standin.fail_next(None, 504, delay_s=0.3, probability=share / (1 - 2 * share), seed=seed + 2)


def _flaky_api_server(
    world: Any, leads: Any, start_worker: Any, standin: Any, watch: Any, *, period_s: float
) -> None:
    start_worker()
    standin.reset_stats()
    _random_failures(standin, 0.3, seed=7)
    began = time.monotonic()
    made: list[QuotaChangeRequest] = []
    # Approvals keep coming during the whole period, one every ~period/9.
    for index in range(9):
        tenant = tenants(world)[index % 3]
        made.append(
            approve_one(
                cluster=world.a100,
                tenant=tenant,
                requester=leads[tenant.slug],
                approver=world.admin,
            )
        )
        time.sleep(max(0.0, began + (index + 1) * period_s / 9 - time.monotonic()))
    injected = standin.stats()["faults_injected"]
    standin.clear_faults()
    total = standin.stats()["total"]
    assert injected > 0.15 * total, f"{injected} faults in {total} requests"
    check_invariants(
        fault=f"API server 30% 500/409/timeouts for {period_s:.0f} s",
        injected=injected,
        requests=made,
        standin=standin,
        cluster=world.a100,
        watch=watch,
        started=time.monotonic(),
        # After the period, a push waits out its backoff (up to 2^n s, jittered) and succeeds.
        deadline_s=3 * period_s + 30,
    )


def test_the_api_server_failing_30_percent_of_requests(synced, leads, start_worker, standin, watch):
    _flaky_api_server(synced, leads, start_worker, standin, watch, period_s=20)


@pytest.mark.long
def test_the_api_server_failing_30_percent_of_requests_for_a_minute(
    synced, leads, start_worker, standin, watch
):
    _flaky_api_server(synced, leads, start_worker, standin, watch, period_s=60)


def _queue_empty(redis_url: str, queue: str) -> bool:
    return redis.Redis.from_url(redis_url).llen(queue) == 0


def test_the_same_outbox_row_delivered_twice(
    synced, leads, start_worker, standin, watch, isolation, redis_url
):
    world = synced
    start_worker()
    start_worker()
    standin.reset_stats()
    # A slow first LIST (Namespaces) of each pass: two workers taking the same row at once
    # are both inside the push.
    standin.fail_next(None, None, delay_s=0.5, verbs=["list"], path_contains="/api/v1/namespaces?")
    made = []
    for tenant in tenants(world) * 2:
        request = approve_one(
            cluster=world.a100, tenant=tenant, requester=leads[tenant.slug], approver=world.admin
        )
        row = SyncOutbox.objects.get(
            tenant=tenant, cluster=world.a100, generation=status_row_generation(request)
        )
        enqueue_outbox(row.pk)  # the second delivery, at once: the two workers take both
        made.append(request)
        wait_applied([request], deadline_s=20)
    standin.clear_faults()
    concurrent = standin.stats()
    # And again in sequence, each row once more after it was completed.
    for request in made:
        enqueue_outbox(
            SyncOutbox.objects.get(
                tenant=request.tenant, cluster=world.a100, generation=status_row_generation(request)
            ).pk
        )
    wait_for(lambda: _queue_empty(redis_url, isolation), "the queue drained")
    time.sleep(1)
    writes = Counter((kind, name, generation) for kind, name, _tenant, generation in watch.writes())
    twice = {key: n for key, n in writes.items() if n > 1}
    assert not twice, f"objects written more than once at one generation: {twice}"
    queue_applies = concurrent["verb_kinds"].get("apply ClusterQueue", 0)
    assert queue_applies == len(made), (
        f"{queue_applies} ClusterQueue applies for {len(made)} changes"
    )
    assert standin.stats()["verb_kinds"].get("apply ClusterQueue", 0) == queue_applies
    check_invariants(
        fault="outbox row delivered twice (concurrent + sequential)",
        injected=2 * len(made),
        requests=made,
        standin=standin,
        cluster=world.a100,
        watch=watch,
        started=time.monotonic(),
    )


@contextlib.contextmanager
def another_worker_pushing(tenant: Any, cluster: Any) -> Iterator[None]:
    """Another worker holds ``tenant``'s push lock on ``cluster`` (its own connection, in a
    thread) for the duration of the block."""
    held, release = threading.Event(), threading.Event()

    def other_worker() -> None:
        try:
            with tenant_push_lock(tenant=tenant, cluster=cluster) as got:
                assert got
                held.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert held.wait(10)
        yield
    finally:
        release.set()
        thread.join(10)


def test_a_second_push_of_a_tenant_waits_for_the_one_under_way(on_postgres, synced, leads, standin):
    """What keeps a duplicate delivery from writing twice (or an older generation after a
    newer one): while another worker pushes team-a to demo-a100, a delivery of team-a's row
    pushes nothing and asks to be retried; afterwards it goes through."""
    world = synced
    request = approve_one(
        cluster=world.a100, tenant=world.team_a, requester=leads["team-a"], approver=world.admin
    )
    row = SyncOutbox.objects.get(
        tenant=world.team_a, cluster=world.a100, generation=status_row_generation(request)
    )
    with another_worker_pushing(world.team_a, world.a100):
        standin.reset_stats()
        with pytest.raises(RetryableError, match="already under way"):
            outbox_deliver(outbox_id=row.pk)
        assert standin.stats()["total"] == 0
        assert status(request) == RequestStatus.APPROVED
        # Another tenant is not held up.
        other = approve_one(
            cluster=world.a100, tenant=world.team_b, requester=leads["team-b"], approver=world.admin
        )
        outbox_deliver(
            outbox_id=SyncOutbox.objects.get(
                tenant=world.team_b, cluster=world.a100, generation=status_row_generation(other)
            ).pk
        )
        assert status(other) == RequestStatus.APPLIED
    outcome = outbox_deliver(outbox_id=row.pk)
    assert outcome is not None and outcome.ok
    assert status(request) == RequestStatus.APPLIED


def test_a_full_reconcile_waits_for_a_tenant_push_under_way(on_postgres, synced, leads, standin):
    """The 5-minute reconcile writes every tenant's objects: while a worker pushes team-a, it
    reads nothing and writes nothing (it could write team-a's older generation over the push),
    and says to come back; afterwards it runs."""
    world = synced
    with another_worker_pushing(world.team_a, world.a100):
        standin.reset_stats()
        outcome = cluster_reconcile(cluster=world.a100)
        assert outcome.retryable and "under way" in (outcome.error or "")
        assert standin.stats()["total"] == 0
    outcome = cluster_reconcile(cluster=world.a100)
    assert outcome.ok, outcome.error
