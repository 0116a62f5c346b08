"""A real Celery worker pushes an approved change to the local API stand-in, and a worker
killed (SIGKILL) in the middle of a push loses nothing: the sweep hands the row out again and
the cluster converges."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve
from devcluster.runner import Handle, start_in_subprocess
from quotas.models import SyncOutbox
from quotas.services import outbox_sweep
from tests.approvals.conftest import file
from tests.cluster_access import hold_cluster_access
from tests.standin import point_at, team_a_gpu_nominal

pytestmark = [pytest.mark.integration]

# A poll's limit, not a wait: a worker started on a loaded 2-core machine (CI, its parts side by
# side) took more than 30 s to come up and apply.
CONVERGE_TIMEOUT_S = 90


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Handle]:
    with start_in_subprocess(
        kubeconfig_path=tmp_path / "kubeconfig", state_dir=tmp_path / "standin"
    ) as handle:
        yield hold_cluster_access(handle)


@pytest.fixture
def synced_world(start_worker, isolation, settings, standin, world) -> Any:
    settings.SYNC_QUEUE = isolation
    point_at(world.a100, standin.kubeconfig_path)
    return world


def wait_for(predicate: Callable[[], bool], what: str, log: Path) -> None:
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    pytest.fail(f"{what} not within {CONVERGE_TIMEOUT_S} s. Worker log:\n{tail}")


def status(request: QuotaChangeRequest) -> str:
    return QuotaChangeRequest.objects.get(pk=request.pk).status


def test_an_approval_reaches_the_cluster_through_a_real_worker(
    synced_world,
    start_worker,
    standin,
    worker_log,
):
    start_worker()
    request = file(synced_world)
    quota_request_approve(request=request, approver=synced_world.admin)

    wait_for(lambda: status(request) == RequestStatus.APPLIED, "applied", worker_log)
    assert team_a_gpu_nominal(standin) == "8"


def test_a_worker_killed_mid_push_loses_nothing(
    synced_world,
    start_worker,
    standin,
    worker_log,
):
    # The stand-in hangs on the first apply long enough to kill the worker inside the push.
    standin.fail_next(1, None, delay_s=20, verbs=["apply"])
    worker = start_worker()
    request = file(synced_world)
    quota_request_approve(request=request, approver=synced_world.admin)
    wait_for(lambda: status(request) == RequestStatus.APPLYING, "applying", worker_log)
    time.sleep(0.5)  # inside the slow apply now
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=10)
    row = SyncOutbox.objects.get(tenant=synced_world.team_a, cluster=synced_world.a100,
                                 generation=QuotaChangeRequest.objects.get(pk=request.pk).approved_generation)  # fmt: skip
    assert row.completed_at is None  # nothing claimed it done

    # A new worker; the beat's sweep re-sends rows a worker took long ago and never finished.
    start_worker()
    sent = outbox_sweep(now=timezone.now() + timedelta(hours=1))
    assert row.pk in sent

    wait_for(lambda: status(request) == RequestStatus.APPLIED, "applied after the kill", worker_log)
    assert team_a_gpu_nominal(standin) == "8"
    row.refresh_from_db()
    assert row.completed_at is not None
