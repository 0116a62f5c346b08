"""Redis (the broker) stopped while approvals are made, started again later: the approvals
succeed (the outbox row commits with them) and reach the cluster once Redis is back, through
the sweep. The test runs its own ``redis-server`` on a free port, never the machine's shared
one; the worker and this process's Celery app both use it as their broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.choices import RequestStatus
from portal.celery import app as celery_app
from quotas.models import SyncOutbox
from quotas.services import OUTBOX_FIRST_SEND_GRACE, outbox_sweep
from tests.faults.invariants import approve_cpu_changes, check_invariants, wait_applied
from tests.redis_server import PrivateRedis

pytestmark = [pytest.mark.integration]

APPROVAL_MAX_S = 5.0  # an approval with the broker down must not hang on it


@pytest.fixture
def redis_url(private_redis: PrivateRedis) -> Iterator[str]:
    """The broker of this test (the worker's, through the integration fixtures, and this
    process's Celery app, whose connection pools are dropped so that it reconnects)."""
    previous = celery_app.conf.broker_url

    def use(url: str) -> None:
        celery_app.conf.broker_url = url
        celery_app._after_fork()  # drops the pools built for the previous broker

    use(private_redis.url)
    yield private_redis.url
    use(previous)


def test_redis_stopped_while_approvals_are_made(synced, leads, start_worker, standin, watch, private_redis):  # fmt: skip
    world = synced
    tenants = [world.team_a, world.team_b, world.team_c]
    start_worker()
    before = approve_cpu_changes(
        cluster=world.a100, tenants=tenants, rounds=1, requester=leads, approver=world.admin
    )
    assert all(s == RequestStatus.APPLIED for s in wait_applied(before).values())

    private_redis.stop()
    began = time.monotonic()
    during = approve_cpu_changes(
        cluster=world.a100, tenants=tenants, rounds=2, requester=leads, approver=world.admin
    )
    took = time.monotonic() - began
    assert took < APPROVAL_MAX_S * len(during), f"{len(during)} approvals took {took:.1f} s"
    # Approved, with their outbox rows committed and not handed to anyone.
    assert {r.status for r in during} == {RequestStatus.APPROVED}
    rows = SyncOutbox.objects.filter(
        cluster=world.a100, generation__in=[r.approved_generation for r in during]
    )
    assert rows.count() == len(during)
    assert not rows.filter(dispatched_at__isnull=False).exists()

    time.sleep(1)
    private_redis.start()
    back = time.monotonic()
    last_sweep = [0.0]

    def beat() -> None:
        # The beat's sweep (every minute in production), with the first-send grace passed.
        if time.monotonic() - last_sweep[0] >= 1:
            last_sweep[0] = time.monotonic()
            outbox_sweep(now=timezone.now() + OUTBOX_FIRST_SEND_GRACE + timedelta(seconds=1))

    check_invariants(
        fault="Redis stopped during approvals",
        injected=1,
        requests=before + during,
        standin=standin,
        cluster=world.a100,
        watch=watch,
        started=back,
        while_waiting=beat,
    )
