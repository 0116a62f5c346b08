"""Issue 36: a collection that reads a tenant at its limit holds it right after it commits,
without the roll-up and the beat's evaluation; the same hysteresis keeps a tenant swinging
around its limit from being held and allowed at every reading; and only the tenants a
collection read, from the portal's own readings, are judged."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery import current_app

from alerts import services
from alerts.choices import ActionState, AlertState, RuleKind
from alerts.models import Alert
from devcluster.kueue_sim import LOAD_ANNOTATION, Endpoint, simulate_once
from quotas.models import QuotaHold, QuotaSet, SyncOutbox
from quotas.sync import cluster_reconcile, outbox_deliver
from tenants.models import AuditEvent
from tests.alerts.conftest import NOW
from tests.standin import kubectl, kubectl_json
from usage import collector
from usage import services as usage_services
from usage.choices import Metric, Source
from usage.models import Rollup


@pytest.fixture
def eager() -> Iterator[None]:
    """Tasks enqueued by name run in this process, as the demo's eager worker does."""
    before = current_app.conf.task_always_eager
    current_app.conf.task_always_eager = True
    yield
    current_app.conf.task_always_eager = before


def _blocks(tenant) -> list[Alert]:  # type: ignore[no-untyped-def]
    return list(
        Alert.objects.filter(
            rule__kind=RuleKind.QUOTA_BLOCK, tenant=tenant, state__in=["firing", "acknowledged"]
        )
    )


def _reading(world, tenant, used: float, at, *, source: int = Source.CLUSTER_API) -> None:  # type: ignore[no-untyped-def]
    """One collection's reading of the tenant's A100 use, and the judgement it enqueues."""
    row = (at, Metric.QUOTA_USED, used, world.a100.pk, tenant.pk, world.a100_gpu.pk,
           None, None, None, None)  # fmt: skip
    usage_services.samples_write(rows=[row], source=source)


@pytest.mark.django_db
def test_a_collection_at_the_limit_holds_the_tenant_in_the_cluster_without_the_beat(  # type: ignore[no-untyped-def]
    world, standin, eager, django_capture_on_commit_callbacks
):
    assert cluster_reconcile(cluster=world.a100).ok
    endpoint = Endpoint.from_kubeconfig(standin.kubeconfig_path)
    kubectl(standin, "annotate", "clusterqueue", "team-a", f"{LOAD_ANNOTATION}=1.0", "--overwrite")
    simulate_once(endpoint, NOW, ["team-a"])

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        outcome = collector.cluster_collect(cluster=world.a100, now=NOW)
    assert outcome.reachable, outcome.message

    assert callbacks  # the judgement was enqueued after the collection committed
    assert not Rollup.objects.exists()  # no roll-up ran, and no evaluation on the beat
    (block,) = _blocks(world.team_a)
    assert block.action_state == ActionState.BLOCKED
    assert "10 of 10 GPUs (100% of its limit" in block.message
    assert AuditEvent.objects.filter(action="tenant.new_work_held", tenant=world.team_a).exists()
    assert _blocks(world.team_b) == [] and _blocks(world.team_c) == []
    generation = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).generation
    row = SyncOutbox.objects.get(tenant=world.team_a, cluster=world.a100, generation=generation)
    outbox_deliver(outbox_id=row.pk)
    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "Hold"
    assert kubectl_json(standin, "get", "clusterqueue", "team-b")["spec"]["stopPolicy"] == "None"

    # The beat's evaluation agrees (the same reading): nothing new, nothing lifted.
    summary = services.evaluate(now=NOW + timedelta(seconds=30))
    assert summary.fired == 0 and summary.blocked == 0 and summary.unblocked == 0

    # The load falls: the collection after the minimum firing time lifts it, again no beat.
    kubectl(standin, "annotate", "clusterqueue", "team-a", f"{LOAD_ANNOTATION}=0.5", "--overwrite")
    later = NOW + services.QUOTA_MIN_FIRING
    simulate_once(endpoint, later, ["team-a"])
    with django_capture_on_commit_callbacks(execute=True):
        collector.cluster_collect(cluster=world.a100, now=later)
    assert _blocks(world.team_a) == []
    assert not QuotaHold.objects.filter(tenant=world.team_a).exists()
    assert (
        AuditEvent.objects.filter(action="tenant.new_work_allowed", tenant=world.team_a).count()
        == 1
    )


def test_use_swinging_around_the_limit_is_not_held_and_allowed_at_every_reading(world):  # type: ignore[no-untyped-def]
    """Readings alternate 10 and 9 GPUs of 10 every minute for 20 minutes, with both the
    collection's judgement and the beat's evaluation after each: the hold changes at most
    once per ``QUOTA_MIN_FIRING``, not 20 times."""
    for minute in range(20):
        at = NOW + timedelta(minutes=minute)
        _reading(world, world.team_a, 10 if minute % 2 == 0 else 9, at)
        services.evaluate_quotas_collected(
            cluster_id=world.a100.pk, tenant_ids=[world.team_a.pk], now=at
        )
        services.evaluate(now=at + timedelta(seconds=30))
    held = AuditEvent.objects.filter(action="tenant.new_work_held", tenant=world.team_a).count()
    allowed = AuditEvent.objects.filter(action="tenant.new_work_allowed", tenant=world.team_a)
    assert 1 <= held <= 4  # without the hysteresis: 10
    assert allowed.count() <= held
    alerts = Alert.objects.filter(rule__kind=RuleKind.QUOTA_BLOCK, tenant=world.team_a)
    for alert in alerts.exclude(state=AlertState.FIRING):
        assert alert.resolved_at - alert.fired_at >= services.QUOTA_MIN_FIRING


def test_a_short_spike_keeps_the_hold_for_the_minimum_time_then_lifts_it(world):  # type: ignore[no-untyped-def]
    _reading(world, world.team_a, 10, NOW)
    assert (
        services.evaluate_quotas_collected(
            cluster_id=world.a100.pk, tenant_ids=[world.team_a.pk], now=NOW
        ).blocked
        == 1
    )
    _reading(world, world.team_a, 4, NOW + timedelta(minutes=1))
    soon = services.evaluate_quotas_collected(
        cluster_id=world.a100.pk, tenant_ids=[world.team_a.pk], now=NOW + timedelta(minutes=1)
    )
    assert soon.unblocked == 0 and len(_blocks(world.team_a)) == 1
    at = NOW + services.QUOTA_MIN_FIRING
    _reading(world, world.team_a, 4, at)
    assert (
        services.evaluate_quotas_collected(
            cluster_id=world.a100.pk, tenant_ids=[world.team_a.pk], now=at
        ).unblocked
        == 1
    )
    assert _blocks(world.team_a) == []


def test_figures_a_tenant_or_an_agent_sends_in_hold_no_one(world):  # type: ignore[no-untyped-def]
    # team-b's lead sends team-a (and team-b) "at the limit" through the API, an agent too:
    # neither is the portal's reading of Kueue, so neither decides a hold.
    _reading(world, world.team_a, 10, NOW, source=Source.API)
    _reading(world, world.team_b, 6, NOW, source=Source.NODE_AGENT)
    summary = services.evaluate_quotas_collected(
        cluster_id=world.a100.pk, tenant_ids=[world.team_a.pk, world.team_b.pk], now=NOW
    )
    assert summary.fired == summary.blocked == 0
    assert not QuotaHold.objects.exists()


def test_a_collection_judges_only_the_tenants_it_read(world):  # type: ignore[no-untyped-def]
    _reading(world, world.team_b, 6, NOW)  # team-b at its limit of 6
    services.evaluate_quotas_collected(
        cluster_id=world.a100.pk, tenant_ids=[world.team_b.pk], now=NOW
    )
    (held,) = _blocks(world.team_b)
    # Later a collection reads team-a over its limit, and team-b's reading falls: judging
    # team-a neither lifts team-b's hold nor holds anyone else.
    later = NOW + timedelta(minutes=10)
    _reading(world, world.team_a, 10, later)
    _reading(world, world.team_b, 1, later)
    summary = services.evaluate_quotas_collected(
        cluster_id=world.a100.pk, tenant_ids=[world.team_a.pk], now=later
    )
    assert summary.blocked == 1 and summary.unblocked == 0
    assert _blocks(world.team_b) == [held]
    assert [a.tenant for a in _blocks(world.team_a)] == [world.team_a]
    # The rows of another cluster name no tenant of this one.
    rows = [(later, Metric.QUOTA_USED, 10.0, world.a100.pk + 999, world.team_c.pk,
             world.a100_gpu.pk, None, None, None, None)]  # fmt: skip
    assert usage_services.quota_readings_judge(cluster_id=world.a100.pk, rows=rows) == []
