"""A world whose /metrics makes every alerting rule and dashboard panel return data."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from alerts.choices import ActionState, RuleKind, Severity
from alerts.models import Alert, AlertRule
from gpu_agent.models import Node
from quotas.models import TenantSync
from tests.conftest import World
from usage import services
from usage.choices import Metric, Resolution, Source
from usage.models import PrometheusSource, RollupState


def seed_alerting_world(world: World) -> None:
    """What makes every rule and panel return data: team-a at 90% of its A100 limit and team-b
    at all of it (held), a push that failed three times, a node agent silent for an hour, a
    Prometheus source that fails, rollups an hour behind."""
    now = timezone.now()
    rows = [
        (now - timedelta(minutes=m), int(metric), value, world.a100.pk, tenant.pk,
         world.a100_gpu.pk, None, None, None, None)
        for m in (1, 2)
        for tenant, used in ((world.team_a, 9.0), (world.team_b, 6.0))
        for metric, value in (
            (Metric.QUOTA_USED, used), (Metric.QUOTA_BORROWED, 3.0), (Metric.GPUS_ALLOCATED, used),
            (Metric.GPU_UTILIZATION, 80.0), (Metric.WORKLOADS_PENDING, 2.0),
        )
    ]  # fmt: skip
    services.samples_write(rows=rows, source=Source.PROMETHEUS)
    services.rollups_run_all(now=now)
    RollupState.objects.filter(resolution=Resolution.FIVE_MINUTES).update(
        rolled_until=now - timedelta(hours=1)
    )
    rule, _ = AlertRule.objects.get_or_create(
        name="quota-block", defaults={"kind": RuleKind.QUOTA_BLOCK, "severity": Severity.CRITICAL}
    )
    Alert.objects.create(
        rule=rule, subject="quota:demo-a100:team-b", severity=Severity.CRITICAL,
        cluster=world.a100, tenant=world.team_b, message="Team B is at its limit.",
        fired_at=now, last_seen_at=now, action_state=ActionState.BLOCKED,
    )  # fmt: skip
    TenantSync.objects.update_or_create(
        cluster=world.a100, tenant=world.team_a,
        defaults={"desired_generation": 3, "applied_generation": 1, "attempts": 3},
    )  # fmt: skip
    Node.objects.create(
        name="gpu-node-9", cluster=world.a100, last_report_at=now - timedelta(hours=1)
    )
    PrometheusSource.objects.create(
        cluster=world.h100, url="http://127.0.0.1:1", last_error="connection refused.",
        last_attempt_at=now, last_unknown_series=0,
    )  # fmt: skip
