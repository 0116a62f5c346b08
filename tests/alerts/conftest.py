"""Usage data for the alert tests, written as rollup rows in bulk (what the rules read), and
the default rules (a data migration; a transactional test's flush removes them)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest
from django.apps import apps as django_apps

from alerts.models import AlertRule
from quotas.models import Cluster, ResourceFlavor
from tenants.models import Tenant
from usage.choices import Metric, Resolution
from usage.models import Rollup, Workload

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def default_rules(db: None) -> None:
    if not AlertRule.objects.exists():
        seeding = importlib.import_module("alerts.migrations.0002_default_rules")
        seeding.seed(django_apps, None)


def bucket(when: datetime, resolution: int) -> datetime:
    seconds = int(when.timestamp()) // resolution * resolution
    return datetime.fromtimestamp(seconds, tz=UTC)


def rollups(
    *,
    cluster: Cluster,
    tenant: Tenant,
    flavor: ResourceFlavor | None,
    metric: int,
    value: float | Iterable[float],
    start: datetime,
    end: datetime,
    resolution: int = Resolution.FIVE_MINUTES,
) -> int:
    """One rollup row per bucket from ``start`` to ``end`` (``value``: constant, or one per
    bucket), replacing what the series had there."""
    first = bucket(start, resolution)
    times = []
    t = first
    while t < end:
        times.append(t)
        t += timedelta(seconds=resolution)
    values = [value] * len(times) if isinstance(value, int | float) else list(value)
    key = {
        "resolution": resolution,
        "metric": metric,
        "cluster_id": cluster.pk,
        "tenant_id": tenant.pk,
        "flavor_id": flavor.pk if flavor else 0,
    }
    Rollup.objects.filter(**key, bucket__gte=first, bucket__lt=end).delete()
    Rollup.objects.bulk_create(
        Rollup(**key, bucket=when, samples=1, sum=v, min=v, max=v)
        for when, v in zip(times, values, strict=True)
    )
    return len(times)


def use_now(world, tenant: Tenant, used: float, *, now: datetime = NOW) -> None:  # type: ignore[no-untyped-def]
    """The tenant's A100 use (Kueue's flavorsUsage) in the last 15 minutes."""
    rollups(
        cluster=world.a100, tenant=tenant, flavor=world.a100_gpu, metric=Metric.QUOTA_USED,
        value=used, start=now - timedelta(minutes=14), end=now,
    )  # fmt: skip


def running_workload(  # type: ignore[no-untyped-def]
    world, *, name: str, uid: str, admitted_ago: timedelta, now: datetime = NOW, gpus: float = 2
) -> Workload:
    return Workload.objects.create(
        cluster=world.a100,
        tenant=world.team_a,
        namespace="team-a-training",
        name=name,
        uid=uid,
        queue_name="default",
        gpus=gpus,
        flavors=["a100-80gb"],
        state="admitted",
        created_at=now - admitted_ago - timedelta(minutes=5),
        admitted_at=now - admitted_ago,
        updated_at=now,
    )


def gpu_utilization(world, value: float, *, start: datetime, end: datetime) -> None:  # type: ignore[no-untyped-def]
    rollups(
        cluster=world.a100, tenant=world.team_a, flavor=world.a100_gpu,
        metric=Metric.GPU_UTILIZATION, value=value, start=start, end=end,
    )  # fmt: skip
