"""Kueue's admission wait histogram (``kueue_admission_wait_time_seconds``, per
``cluster_queue``) read through a real Prometheus into the tenant's usage: how many workloads
were admitted and how long they waited, the mean on the tenant's usage page where the portal
has no workloads of its own; and the counter arithmetic (base point, new series, restarts)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from quotas.choices import SyncBackend
from tests.conftest import World
from tests.prometheus.server import Handle, new_cluster_label
from usage import collector, services
from usage.choices import Metric, PrometheusFigure, Source
from usage.models import PrometheusSource, Sample
from usage.prometheus import Series, SeriesOwners, kueue_rows
from usage.selectors import workload_stats


def _totals(tenant_id: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for metric, value in Sample.objects.filter(
        tenant_id=tenant_id,
        metric__in=[Metric.ADMISSIONS, Metric.ADMISSION_WAIT],
        source=Source.PROMETHEUS,
    ).values_list("metric", "value"):
        out[metric] = out.get(metric, 0.0) + value
    return out


def test_kueue_admission_waits_become_the_tenants_mean_queue_wait(
    world: World, prometheus_server: Handle, client: Client
) -> None:
    if time.time() % 300 > 280:  # the read ends a step ahead: keep it in this 5-minute bucket
        time.sleep(21)
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    exporters.pending.labels(label, world.team_a.slug, "active").set(0)
    waits = exporters.admission_wait.labels(label, world.team_a.slug)
    waits.observe(30)
    waits.observe(90)
    exporters.admission_wait.labels(label, "nobody-owns-this").observe(5)
    prometheus_server.wait_for(f'kueue_admission_wait_time_seconds_count{{cluster="{label}"}} == 2')
    world.a100.backend = SyncBackend.NONE
    world.a100.save(update_fields=["backend"])
    services.prometheus_source_set(
        cluster=world.a100,
        actor=world.admin,
        settings_={
            "url": prometheus_server.url, "label_matchers": f'cluster="{label}"', "step_s": 15,
            "query_timeout_s": 5, "figures": [PrometheusFigure.KUEUE],
            "node_agent_samples": False,
        },
    )  # fmt: skip
    now = timezone.now() + timedelta(seconds=15)

    outcome = collector.cluster_collect(cluster=world.a100, now=now)

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    assert _totals(world.team_a.pk) == {Metric.ADMISSIONS: 2.0, Metric.ADMISSION_WAIT: 120.0}
    assert "ClusterQueue nobody-owns-this" in outcome.prometheus.unknown_namespaces

    services.rollups_run_all(now=now)
    stats = workload_stats(
        start=now - timedelta(hours=1), end=now + timedelta(minutes=5),
        tenant_ids=[world.team_a.pk],
    )  # fmt: skip
    assert stats[world.team_a.pk].queue_wait_mean_s == pytest.approx(60.0)
    assert stats[world.team_a.pk].queue_wait_p50_s is None  # no Workload objects polled
    client.force_login(world.alice)
    page = client.get(f"/tenants/{world.team_a.slug}/usage/?range=24h").content.decode()
    assert (
        '<span class="kpi-value">1 min</span><span class="kpi-label">mean queue wait '
        "(Kueue, through Prometheus)</span>"
    ) in page


T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _owners() -> SeriesOwners:
    return SeriesOwners(
        ns_tenant={}, cq_tenant={"team-a": 7}, flavor_by_model={}, flavor_by_resource={},
        flavor_by_name={},
    )  # fmt: skip


def _counter(*values: float, start: int = 0) -> Series:
    return Series(
        labels={"cluster_queue": "team-a"},
        values=[(_at(start + i), v) for i, v in enumerate(values)],
    )


def test_the_counters_base_point_a_new_series_and_a_restart():
    rows = kueue_rows(
        usage=[], reservation=[], pending=[], admitted=[], mapping=_owners(), cluster_id=1,
        # 10 before the range (the base), +2, +0, then Kueue restarts and has counted 1.
        admissions=[_counter(10, 12, 12, 1)],
        admission_wait=[_counter(500, 560, 560, 4)],
        since=_at(0),
    )  # fmt: skip
    got = [(when, Metric(metric).name, value) for when, metric, value, *_ in rows]
    assert got == [
        (_at(1), "ADMISSIONS", 2.0),
        (_at(1), "ADMISSION_WAIT", 60.0),
        (_at(3), "ADMISSIONS", 1.0),
        (_at(3), "ADMISSION_WAIT", 4.0),
    ]
    # A ClusterQueue whose first admission since Kueue started falls in the range: from zero.
    fresh = kueue_rows(
        usage=[], reservation=[], pending=[], admitted=[], mapping=_owners(), cluster_id=1,
        admissions=[_counter(3, start=2)], admission_wait=[_counter(0.0, start=2)],
        since=_at(0),
    )  # fmt: skip
    assert [(Metric(m).name, v) for _, m, v, *_ in fresh] == [
        ("ADMISSIONS", 3.0),
        ("ADMISSION_WAIT", 0.0),  # admitted at once
    ]
    # Counts without their sums (a partial answer) store nothing.
    assert not kueue_rows(
        usage=[], reservation=[], pending=[], admitted=[], mapping=_owners(), cluster_id=1,
        admissions=[_counter(3, start=2)], admission_wait=[], since=_at(0),
    )  # fmt: skip


def test_kueue_without_its_clusterqueue_resource_metrics_warns_the_admin(
    world: World, prometheus_server: Handle
) -> None:
    """``kueue_cluster_queue_resource_usage`` exists only where Kueue's configuration has
    ``metrics.enableClusterQueueResources``: its pending workloads alone come through, and the
    source's status says what is missing and why, instead of saying nothing."""
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    exporters.pending.labels(label, world.team_a.slug, "active").set(3)
    exporters.admitted.labels(label, world.team_a.slug).set(1)
    prometheus_server.wait_for(f'kueue_pending_workloads{{cluster="{label}"}}')
    world.a100.backend = SyncBackend.NONE
    world.a100.save(update_fields=["backend"])
    services.prometheus_source_set(
        cluster=world.a100,
        actor=world.admin,
        settings_={
            "url": prometheus_server.url, "label_matchers": f'cluster="{label}"', "step_s": 15,
            "query_timeout_s": 5, "figures": [PrometheusFigure.KUEUE],
            "node_agent_samples": False,
        },
    )  # fmt: skip

    outcome = collector.cluster_collect(
        cluster=world.a100, now=timezone.now() + timedelta(seconds=15)
    )

    assert outcome.prometheus is not None and outcome.prometheus.ok, outcome
    status = PrometheusSource.objects.get(cluster=world.a100)
    warned = [w for w in status.last_warnings if "kueue_cluster_queue_resource_usage" in w]
    assert len(warned) == 1, status.last_warnings
    assert "metrics.enableClusterQueueResources" in warned[0]
    # Once Kueue exports it, the warning goes.
    exporters.cq_usage.labels(
        label, "", world.team_a.slug, world.a100_gpu.name, "nvidia.com/gpu"
    ).set(2)
    prometheus_server.wait_for(f'kueue_cluster_queue_resource_usage{{cluster="{label}"}}')
    collector.cluster_collect(cluster=world.a100, now=timezone.now() + timedelta(seconds=30))
    status.refresh_from_db()
    assert not any("enableClusterQueueResources" in w for w in status.last_warnings)
