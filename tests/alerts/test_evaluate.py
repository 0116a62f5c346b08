"""The evaluation: rules against the usage store, deduplicated alerts with their history,
notifications in the inbox, holding new work at 100% (R11) and the idle workload's notice."""

from __future__ import annotations

from datetime import timedelta

from alerts import services
from alerts.choices import ActionState, AlertState, EventKind
from alerts.models import Alert, AlertRule
from quotas.kube import compiler
from quotas.loader import cluster_spec, tenant_specs
from quotas.models import Quota, QuotaSet, SyncOutbox
from tenants.models import AuditEvent, Notification
from tests.alerts.conftest import NOW, gpu_utilization, rollups, running_workload, use_now
from usage.choices import Metric, Resolution


def _alerts(rule: str) -> list[Alert]:
    return list(Alert.objects.filter(rule__name=rule).order_by("pk"))


def test_80_percent_warns_once_tells_the_lead_and_resolves_with_history(world):
    use_now(world, world.team_a, 8.5)  # of a limit of 10
    use_now(world, world.team_b, 3)  # of 6: 50%, nothing

    first = services.evaluate(now=NOW)
    again = services.evaluate(now=NOW + timedelta(minutes=1))

    assert first.fired == 1 and again.fired == 0 and again.still_firing == 1
    [alert] = _alerts("quota-warning")
    assert alert.state == AlertState.FIRING and alert.tenant == world.team_a
    assert alert.value == 85.0 and alert.threshold == 80.0
    assert "8.5 of 10 GPUs (85% of its limit" in alert.message
    assert not _alerts("quota-block")  # 85% < 100%
    inbox = Notification.objects.filter(user=world.alice)
    assert inbox.count() == 1 and f"/alerts/{alert.pk}/" == inbox.get().url
    assert not Notification.objects.filter(user=world.bob).exists()

    use_now(world, world.team_a, 5, now=NOW + timedelta(minutes=20))
    services.evaluate(now=NOW + timedelta(minutes=20))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.resolved_at == NOW + timedelta(minutes=20)
    assert [e.kind for e in alert.events.all()] == [EventKind.FIRED, EventKind.RESOLVED]

    # The next occurrence is a new alert; the resolved one stays as history.
    use_now(world, world.team_a, 9, now=NOW + timedelta(minutes=40))
    services.evaluate(now=NOW + timedelta(minutes=40))
    assert [a.state for a in _alerts("quota-warning")] == ["resolved", "firing"]


def _stop_policy(world, slug: str) -> str:  # type: ignore[no-untyped-def]
    spec = cluster_spec(world.a100)
    [tenant] = [t for t in tenant_specs(world.a100) if t.slug == slug]
    queue = next(o for o in compiler.compile_tenant(spec, tenant) if o["kind"] == "ClusterQueue")
    return str(queue["spec"]["stopPolicy"])


def test_100_percent_holds_new_work_through_the_outbox_and_lifts_it_below(world):
    generation = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).generation
    use_now(world, world.team_a, 10)

    summary = services.evaluate(now=NOW)

    assert summary.blocked == 1
    [alert] = _alerts("quota-block")
    assert alert.action_state == ActionState.BLOCKED
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    assert quota_set.generation == generation + 1
    assert SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.a100, generation=generation + 1
    ).exists()
    assert [t.blocked for t in tenant_specs(world.a100)] == [True, False, False]
    assert _stop_policy(world, "team-a") == "Hold"
    assert _stop_policy(world, "team-b") == "None"
    # The lead's inbox says it in words: the rule's title, no slug, no Kueue field.
    notice = Notification.objects.get(user=world.alice, url=f"/alerts/{alert.pk}/")
    assert notice.subject.startswith("[critical] Quota limit reached: ")
    assert "New work of the team on this cluster is held" in notice.body
    assert [c for c in ("quota-block", "stopPolicy") if c in notice.subject + notice.body] == []
    assert AuditEvent.objects.filter(action="tenant.new_work_held", tenant=world.team_a).exists()
    assert len(_alerts("quota-warning")) == 1  # 100% is also >= 80%

    services.evaluate(now=NOW + timedelta(minutes=1))  # still at 100%: nothing new
    assert QuotaSet.objects.get(pk=quota_set.pk).generation == generation + 1

    use_now(world, world.team_a, 9.5, now=NOW + timedelta(minutes=20))
    summary = services.evaluate(now=NOW + timedelta(minutes=20))

    assert summary.unblocked == 1
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED
    assert QuotaSet.objects.get(pk=quota_set.pk).generation == generation + 2
    assert _stop_policy(world, "team-a") == "None"
    assert [e.kind for e in alert.events.all()] == [
        EventKind.FIRED, EventKind.BLOCKED, EventKind.UNBLOCKED, EventKind.RESOLVED,
    ]  # fmt: skip
    assert AuditEvent.objects.filter(action="tenant.new_work_allowed").count() == 1


def test_no_recent_use_to_read_keeps_the_hold_until_use_is_seen_below(world):
    use_now(world, world.team_a, 10)
    services.evaluate(now=NOW)
    [block] = _alerts("quota-block")
    [warning] = _alerts("quota-warning")

    # The collector stalls: 40 minutes without a reading. Unknown is not "below 100%".
    summary = services.evaluate(now=NOW + timedelta(minutes=40))

    assert summary.unobserved == 2 and summary.resolved == summary.unblocked == 0
    block.refresh_from_db()
    warning.refresh_from_db()
    assert block.state == warning.state == AlertState.FIRING
    assert block.action_state == ActionState.BLOCKED
    assert _stop_policy(world, "team-a") == "Hold"

    use_now(world, world.team_a, 7, now=NOW + timedelta(minutes=45))  # readings again
    summary = services.evaluate(now=NOW + timedelta(minutes=45))

    assert summary.unblocked == 1 and summary.resolved == 2
    assert _stop_policy(world, "team-a") == "None"


def test_a_quota_line_removed_while_unobserved_resolves_its_alerts(world):
    use_now(world, world.team_a, 10)
    services.evaluate(now=NOW)
    Quota.objects.filter(
        quota_set__tenant=world.team_a, quota_set__cluster=world.a100, flavor=world.a100_gpu
    ).delete()

    summary = services.evaluate(now=NOW + timedelta(minutes=40))

    assert summary.unobserved == 0 and summary.resolved == 2
    assert not any(t.blocked for t in tenant_specs(world.a100))


def test_a_block_rule_that_only_alerts_holds_nothing(world):
    AlertRule.objects.filter(name="quota-block").update(act=False)
    use_now(world, world.team_a, 10)
    services.evaluate(now=NOW)
    [alert] = _alerts("quota-block")
    assert alert.action_state == ActionState.NONE
    assert not any(t.blocked for t in tenant_specs(world.a100))


def test_disabling_a_rule_resolves_its_alerts_and_lifts_the_hold(world):
    use_now(world, world.team_a, 10)
    services.evaluate(now=NOW)
    AlertRule.objects.filter(name="quota-block").update(enabled=False)
    services.evaluate(now=NOW + timedelta(minutes=1))
    [alert] = _alerts("quota-block")
    assert alert.state == AlertState.RESOLVED
    assert alert.events.get(kind=EventKind.RESOLVED).detail == {"why": "the rule is disabled"}
    assert not any(t.blocked for t in tenant_specs(world.a100))


def test_an_idle_workload_gets_a_notice_with_a_deadline_first(world):
    running_workload(world, name="idle-job", uid="uid-idle", admitted_ago=timedelta(days=4))
    running_workload(world, name="fresh-job", uid="uid-fresh", admitted_ago=timedelta(days=1))
    gpu_utilization(world, 0.0, start=NOW - timedelta(days=3, hours=1), end=NOW)

    summary = services.evaluate(now=NOW)

    assert summary.suspension_notices == 1 and summary.suspended == 0
    [alert] = _alerts("idle-workload")
    assert alert.workload_name == "idle-job"  # the one admitted a day ago is not judged yet
    assert alert.action_state == ActionState.NOTIFIED
    assert alert.action_due_at == NOW + timedelta(days=1)
    notice = Notification.objects.get(user=world.alice)
    assert "will be suspended at 2026-12-03 12:00 UTC" in notice.subject
    assert "taken off its GPUs, its quota released" in notice.body
    assert "spec.active" not in notice.body
    assert AuditEvent.objects.filter(action="workload.suspension_scheduled").count() == 1


def test_activity_within_the_grace_resolves_without_suspending(world):
    running_workload(world, name="idle-job", uid="uid-idle", admitted_ago=timedelta(days=4))
    gpu_utilization(world, 0.0, start=NOW - timedelta(days=3, hours=1), end=NOW)
    services.evaluate(now=NOW)
    later = NOW + timedelta(hours=6)
    gpu_utilization(world, 55.0, start=later - timedelta(minutes=30), end=later)

    summary = services.evaluate(now=later)

    [alert] = _alerts("idle-workload")
    assert alert.state == AlertState.RESOLVED and summary.suspended == 0
    assert alert.action_state == ActionState.NOTIFIED  # what it got to before it cleared


def test_no_samples_is_no_evidence_of_idleness(world):
    running_workload(world, name="unseen", uid="uid-unseen", admitted_ago=timedelta(days=5))
    # Utilisation seen only for the last day: not observed throughout the 3-day window.
    gpu_utilization(world, 0.0, start=NOW - timedelta(days=1), end=NOW)
    services.evaluate(now=NOW)
    assert not _alerts("idle-workload")


def test_a_busy_gpu_in_the_window_keeps_the_workload(world):
    running_workload(world, name="busy", uid="uid-busy", admitted_ago=timedelta(days=5))
    values = [0.0] * 864
    values[400] = 80.0  # one busy 5 minutes, a day and a half ago
    rollups(
        cluster=world.a100, tenant=world.team_a, flavor=world.a100_gpu,
        metric=Metric.GPU_UTILIZATION, value=values, start=NOW - timedelta(days=3), end=NOW,
    )  # fmt: skip
    services.evaluate(now=NOW)
    assert not _alerts("idle-workload")


def test_max_runtime_and_low_utilization(world):
    running_workload(world, name="marathon", uid="uid-long", admitted_ago=timedelta(days=8))
    # Busy enough not to be idle, yet under 30% over the week, with 4 GPUs held.
    week = NOW - timedelta(days=7, hours=1)
    for metric, value in ((Metric.GPU_UTILIZATION, 12.0), (Metric.GPUS_ALLOCATED, 4.0)):
        rollups(
            cluster=world.a100, tenant=world.team_a, flavor=world.a100_gpu, metric=metric,
            value=value, start=week, end=NOW, resolution=Resolution.HOUR,
        )  # fmt: skip
    gpu_utilization(world, 12.0, start=NOW - timedelta(days=3, hours=1), end=NOW)

    services.evaluate(now=NOW)

    [long_one] = _alerts("max-runtime")
    assert long_one.workload_name == "marathon" and "8 days" in long_one.message
    [low] = _alerts("low-utilization")
    assert low.tenant == world.team_a and low.value == 12.0
    assert "held 4.0 GPUs on average at 12% mean utilisation" in low.message
    assert not _alerts("idle-workload")  # 12% is activity


def test_rules_are_editable(world):
    AlertRule.objects.filter(name="quota-warning").update(threshold_pct=90)
    use_now(world, world.team_a, 8.5)
    services.evaluate(now=NOW)
    assert not _alerts("quota-warning")
    use_now(world, world.team_a, 9, now=NOW + timedelta(minutes=5))
    services.evaluate(now=NOW + timedelta(minutes=5))
    assert len(_alerts("quota-warning")) == 1
