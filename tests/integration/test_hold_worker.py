"""Issue 36 through a real Celery worker: a collection that reads a tenant at its limit
enqueues the quota judgement after it commits; the worker holds the tenant and pushes
``stopPolicy: Hold`` to the cluster, with no roll-up and no evaluation on the beat."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.utils import timezone

from alerts.models import AlertRule
from devcluster.kueue_sim import LOAD_ANNOTATION, Endpoint, simulate_once
from devcluster.runner import Handle, start_in_subprocess
from quotas.sync import cluster_reconcile
from tests.cluster_access import hold_cluster_access
from tests.standin import kubectl, kubectl_json, point_at
from usage import collector
from usage import services as usage_services
from usage.models import Rollup

pytestmark = [pytest.mark.integration]

HOLD_TIMEOUT_S = 30


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[Handle]:
    with start_in_subprocess(
        kubeconfig_path=tmp_path / "kubeconfig", state_dir=tmp_path / "standin"
    ) as handle:
        yield hold_cluster_access(handle)


def test_a_collection_at_the_limit_is_held_in_the_cluster_by_a_real_worker(  # type: ignore[no-untyped-def]
    start_worker, isolation, settings, standin, world, worker_log, monkeypatch
):
    if not AlertRule.objects.exists():  # a transactional test's flush removed the seeded rules
        importlib.import_module("alerts.migrations.0002_default_rules").seed(django_apps, None)
    settings.SYNC_QUEUE = isolation
    monkeypatch.setenv("SYNC_QUEUE", isolation)  # the worker's own push goes there too
    enqueue = usage_services.enqueue

    def on_test_queue(name: str, args: Any = (), *, queue: str | None = None) -> None:
        enqueue(name, args, queue=isolation)  # the worker listens on the test's queue only

    monkeypatch.setattr(usage_services, "enqueue", on_test_queue)
    point_at(world.a100, standin.kubeconfig_path)
    assert cluster_reconcile(cluster=world.a100).ok
    kubectl(standin, "annotate", "clusterqueue", "team-a", f"{LOAD_ANNOTATION}=1.0", "--overwrite")
    now = timezone.now()
    simulate_once(Endpoint.from_kubeconfig(standin.kubeconfig_path), now, ["team-a"])
    start_worker()

    assert collector.cluster_collect(cluster=world.a100, now=now).reachable

    deadline = time.monotonic() + HOLD_TIMEOUT_S
    policy = ""
    while time.monotonic() < deadline:
        policy = kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"]
        if policy == "Hold":
            break
        time.sleep(0.3)
    tail = worker_log.read_text(errors="replace")[-4000:] if worker_log.exists() else ""
    assert policy == "Hold", f"not held within {HOLD_TIMEOUT_S} s. Worker log:\n{tail}"
    assert "alerts.tasks.evaluate_quotas_collected" in tail
    assert not Rollup.objects.exists()  # no roll-up ran
    assert kubectl_json(standin, "get", "clusterqueue", "team-b")["spec"]["stopPolicy"] == "None"
