"""KUBE_APPLY_CONCURRENCY: how many writes a push sends to a cluster at once. The backend the
push opens takes that many (its connection pool as large), a reconcile of the demo world at
that setting converges with nothing failed and a second one writes nothing, and a value out of
range stops the portal from starting with the setting named."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from quotas import sync
from quotas.backends import cluster_backend
from quotas.kube.applier import KubernetesBackend

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_the_backend_takes_the_configured_number_of_writes_at_once(world, standin, settings):
    settings.KUBE_APPLY_CONCURRENCY = 5
    with cluster_backend(world.a100) as backend:
        assert isinstance(backend, KubernetesBackend)
        assert backend.concurrency == 5
        assert backend.api.configuration.connection_pool_maxsize >= 5


@pytest.mark.django_db
@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_reconcile_converges_at_any_concurrency_and_then_writes_nothing(
    world, standin, settings, concurrency
):
    settings.KUBE_APPLY_CONCURRENCY = concurrency
    first = sync.cluster_reconcile(cluster=world.a100)
    assert first.ok, first.message
    assert first.result is not None and first.result.created
    standin.reset_stats()

    again = sync.cluster_reconcile(cluster=world.a100)

    assert again.ok, again.message
    assert again.result is not None and again.result.writes == 0
    verbs = standin.stats()["verbs"]
    assert sum(verbs.get(v, 0) for v in ("create", "update", "patch", "apply", "delete")) == 0


@pytest.mark.parametrize("value", ["0", "65", "eight"])
def test_an_out_of_range_setting_stops_the_portal_naming_it(value):
    env = {
        **os.environ,
        "KUBE_APPLY_CONCURRENCY": value,
        "DJANGO_SETTINGS_MODULE": "portal.settings.demo",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "KUBE_APPLY_CONCURRENCY" in done.stderr
