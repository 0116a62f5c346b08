"""Fixtures of the fault-injection suite: the stand-in API server in a subprocess with a watch
on it, demo-a100 pushing to it, real Celery workers on the test's own queue (the integration
fixtures), and the session's table of faults (printed at the end and written to
``.data/faults/summary.json``, by ``tests/conftest.py``: under pytest-xdist the workers' rows
are gathered in the controlling process, which alone prints and writes them).

The long variants (``@pytest.mark.long``) are deselected unless the ``-m`` expression asks for
``long`` (not ``not long``) or ``FAULTS_LONG=1`` is set.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.runner import ProcessHandle, start_in_subprocess
from tests.cluster_access import hold_cluster_access
from tests.conftest import World
from tests.faults.invariants import Watch
from tests.integration.conftest import (  # noqa: F401 - fixtures used by the fault tests
    isolation,
    redis_url,
    worker_log,
)
from tests.integration.conftest import start_worker as _integration_start_worker  # noqa: F401
from tests.standin import point_at


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    asked = re.search(r"(?<!not )\blong\b", config.option.markexpr or "") is not None
    wanted = asked or os.environ.get("FAULTS_LONG") == "1"
    if wanted:
        return
    long = [item for item in items if item.get_closest_marker("long")]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker("long")]


@pytest.fixture
def start_worker(
    on_postgres: None,
    _integration_start_worker: Callable[[], subprocess.Popen[bytes]],  # noqa: F811 - the fixture
) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """The integration suite's ``start_worker``; at teardown every worker gets SIGTERM at
    once (a test may run several), then SIGKILL after 3 s. PostgreSQL only: on SQLite the
    test database lives in this process's memory, so a worker would push from an empty one
    (a test with a broker of its own, like the Redis-down test, needs no REDIS_URL to get here)."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        started.append(_integration_start_worker())
        return started[-1]

    yield start
    running = [w for w in started if w.poll() is None]
    for worker in running:
        worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 3
    for worker in running:
        try:
            worker.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[ProcessHandle]:
    """The Kubernetes API stand-in, in its own process (``--ephemeral``: nothing on disk)."""
    with start_in_subprocess(
        kubeconfig_path=tmp_path / "kubeconfig",
        state_dir=tmp_path / "standin",
        extra_args=["--ephemeral"],
    ) as handle:
        yield hold_cluster_access(handle)


@pytest.fixture
def watch(standin: ProcessHandle) -> Watch:
    return Watch(standin).start()


@pytest.fixture
def synced(start_worker, isolation, settings, standin, watch, world: World) -> World:  # type: ignore[no-untyped-def]  # noqa: F811 - the imported fixtures
    """demo-a100 pushing to the stand-in, the pushes on the test's queue, its objects in place
    (one push per tenant, in the test process) before any fault."""
    from quotas.sync import tenant_push

    settings.SYNC_QUEUE = isolation
    point_at(world.a100, standin.kubeconfig_path)
    for tenant in (world.team_a, world.team_b, world.team_c):
        assert tenant_push(tenant=tenant, cluster=world.a100).ok
    return world


@pytest.fixture
def leads(world: World) -> dict[str, Any]:
    """Who files each tenant's requests: its lead, and for team-c (no lead) a second platform
    admin (nobody approves their own request; ``world.admin`` approves)."""
    from tests.factories import UserFactory

    second_admin = UserFactory(username="admin2", is_platform_admin=True, is_staff=True)
    return {"team-a": world.alice, "team-b": world.bob, "team-c": second_admin}
