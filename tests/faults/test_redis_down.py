"""Redis (the broker) stopped while approvals are made, started again later: the approvals
succeed (the outbox row commits with them) and reach the cluster once Redis is back, through
the sweep. The test runs its own ``redis-server`` on a free port, never the machine's shared
one; the worker and this process's Celery app both use it as their broker."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.utils import timezone

from approvals.choices import RequestStatus
from portal.celery import app as celery_app
from quotas.models import SyncOutbox
from quotas.services import OUTBOX_FIRST_SEND_GRACE, outbox_sweep
from tests.conftest import require_service
from tests.faults.invariants import approve_cpu_changes, check_invariants, wait_applied

pytestmark = [pytest.mark.integration]

APPROVAL_MAX_S = 5.0  # an approval with the broker down must not hang on it


class PrivateRedis:
    """A ``redis-server`` of this test alone (no persistence), stopped and started on its
    port."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        require_service("redis-server", binary is not None, "the redis-server command is missing")
        assert binary is not None
        self.binary, self.directory = binary, directory
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


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
