"""The demo's simulated month: through the bulk path, rolled up, team-a past 80% lately."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import World
from usage import selectors
from usage.choices import Metric, Resolution
from usage.demo import demo_month_fill
from usage.models import Rollup, Workload

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_the_demo_month_is_rolled_up_and_team_a_nears_its_limit(world: World) -> None:
    written = demo_month_fill(now=NOW)
    assert written > 50_000
    assert demo_month_fill(now=NOW) == 0  # idempotent
    days = Rollup.objects.filter(resolution=Resolution.DAY, metric=Metric.QUOTA_USED)
    assert days.values("bucket").distinct().count() >= 30
    a100 = (world.a100.pk, world.team_a.pk, world.a100_gpu.pk)
    recent = selectors.usage_peaks(
        start=NOW - timedelta(days=3), end=NOW, tenant_ids=[world.team_a.pk]
    )
    assert recent[a100] >= 0.8 * 10  # team-a's A100 limit is 10
    early = selectors.usage_peaks(
        start=NOW - timedelta(days=30), end=NOW - timedelta(days=20), tenant_ids=[world.team_a.pk]
    )
    assert early[a100] < recent[a100]
    stats = selectors.workload_stats(start=NOW - timedelta(days=30), end=NOW)
    assert stats[world.team_a.pk].queue_wait_p95_s > stats[world.team_a.pk].queue_wait_p50_s > 0
    assert Workload.objects.filter(evictions__gt=0).exists()
    hours = selectors.gpu_hours(
        start=NOW - timedelta(days=30), end=NOW, tenant_ids=[world.team_a.pk]
    )
    assert any(h.flavor_id == world.a100_gpu.pk and h.gpu_hours > 24 for h in hours)
