"""The 100% hold lives in quotas (``QuotaHold``): an alert's hold writes a row named after it,
its resolution removes it, and the upgrade's data migration gives every tenant an open alert
holds today its row, so an upgrade keeps existing holds."""

from __future__ import annotations

import importlib
from datetime import timedelta

from django.apps import apps as django_apps

from alerts import services
from alerts.choices import ActionState, AlertState
from alerts.models import Alert, AlertRule
from quotas.loader import tenant_specs
from quotas.models import QuotaHold
from tests.alerts.conftest import NOW, use_now


def test_an_alerts_hold_is_a_quota_hold_named_after_it(world):
    use_now(world, world.team_a, 10)
    services.evaluate(now=NOW)
    alert = Alert.objects.get(rule__name="quota-block")
    hold = QuotaHold.objects.get()
    assert (hold.tenant, hold.cluster, hold.source) == (
        world.team_a,
        world.a100,
        f"alert:{alert.pk}",
    )
    assert hold.detail["alert"] == alert.pk

    use_now(world, world.team_a, 5, now=NOW + timedelta(minutes=20))
    services.evaluate(now=NOW + timedelta(minutes=20))
    assert not QuotaHold.objects.exists()
    assert not any(t.blocked for t in tenant_specs(world.a100))


def test_the_upgrade_keeps_the_holds_of_open_alerts(world):
    rule = AlertRule.objects.get(name="quota-block")
    common = {"rule": rule, "severity": rule.severity, "cluster": world.a100, "fired_at": NOW,
              "last_seen_at": NOW, "message": "at its limit"}  # fmt: skip
    held = Alert.objects.create(
        subject="quota:a", tenant=world.team_a, action_state=ActionState.BLOCKED, **common
    )
    Alert.objects.create(  # resolved: its hold was lifted
        subject="quota:b", tenant=world.team_b, action_state=ActionState.BLOCKED,
        state=AlertState.RESOLVED, **common,
    )  # fmt: skip
    Alert.objects.create(  # open, but it took no action (a rule that only warns)
        subject="quota:c", tenant=world.team_c, action_state=ActionState.NONE, **common
    )
    migration = importlib.import_module("alerts.migrations.0005_holds_into_quotas")

    migration.holds_into_quotas(django_apps, None)
    migration.holds_into_quotas(django_apps, None)  # twice: still one row

    [hold] = QuotaHold.objects.all()
    assert (hold.tenant, hold.cluster, hold.source) == (
        world.team_a,
        world.a100,
        f"alert:{held.pk}",
    )
    assert [t.slug for t in tenant_specs(world.a100) if t.blocked] == ["team-a"]
    # Resolving the alert afterwards lifts the migrated hold (the same source name).
    services._resolve(held, NOW, services.EvaluationSummary(), "use dropped")
    assert not QuotaHold.objects.exists()
