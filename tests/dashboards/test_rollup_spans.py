"""A long period's totals read the daily rollups for the whole days inside it and hourly ones
at its edges: the same counts, sums and peaks as the raw samples, from far fewer rows."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from dashboards import selectors
from tests.conftest import World
from usage import services as usage_services
from usage.choices import Metric, Resolution
from usage.models import Rollup

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 18, 30, tzinfo=UTC)


def test_whole_days_come_from_daily_rollups_and_the_totals_equal_the_raw_samples(
    world: World,
) -> None:
    rng = random.Random(7)  # noqa: S311 - test data
    start = datetime(2026, 11, 27, 0, 0, tzinfo=UTC)
    raw = []
    t = start
    while t < NOW:
        raw.append((t, round(rng.uniform(0, 10), 2)))
        t += timedelta(minutes=10)
    usage_services.samples_write(
        rows=[
            (when, int(Metric.QUOTA_USED), value, world.a100.pk, world.team_a.pk,
             world.a100_gpu.pk, None, None, None, None)
            for when, value in raw
        ]
    )  # fmt: skip
    usage_services.rollups_run_all(now=NOW)
    # 07:00 on the 28th to 15:00 on the 2nd: hours at both edges, three whole days between.
    period = selectors.period_resolve(
        start=datetime(2026, 11, 28, 7, tzinfo=UTC),
        end=datetime(2026, 12, 2, 15, tzinfo=UTC),
        now=NOW,
    )
    assert period.plan.resolution == Resolution.HOUR

    aggregates = selectors._period_aggregates(
        period, [Metric.QUOTA_USED], tenant_id=world.team_a.pk
    )

    inside = [v for when, v in raw if period.start <= when < period.end]
    key = (world.a100.pk, world.team_a.pk, world.a100_gpu.pk, int(Metric.QUOTA_USED))
    samples, total, peak = aggregates[key]
    assert samples == len(inside) == (3 * 24 + 17 + 15) * 6
    assert total == pytest.approx(sum(inside))
    assert peak == max(inside)
    spans = Rollup.objects.filter(selectors._rollup_spans(period), tenant_id=world.team_a.pk)
    assert sorted(spans.values_list("resolution", flat=True).distinct()) == [
        Resolution.HOUR,
        Resolution.DAY,
    ]
    assert spans.count() == 3 + 17 + 15  # instead of 104 hours


def test_a_period_without_a_whole_day_inside_reads_hours_only(world: World) -> None:
    period = selectors.period_resolve(
        start=datetime(2026, 11, 30, 3, tzinfo=UTC), end=datetime(2026, 12, 1, 23, tzinfo=UTC),
        now=NOW,
    )  # fmt: skip
    assert period.plan.resolution == Resolution.HOUR
    query = str(Rollup.objects.filter(selectors._rollup_spans(period)).query)
    assert f"{Resolution.DAY}" not in query.split("WHERE")[1]
