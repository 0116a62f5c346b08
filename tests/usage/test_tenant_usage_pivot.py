"""A tenant's series on the dashboards' steps (one rollup bucket a step) are pivoted in SQL:
one row per flavor and step. They must be the series the general path (rollups merged in
Python, per metric) draws: the same points, values, peaks and sources, gaps included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from usage import services
from usage.choices import Metric, Source
from usage.selectors import _tenant_usage_merged, series_plan, tenant_usage
from usage.services import bucket_start

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(world):  # type: ignore[no-untyped-def]
    """Six hours of team-a samples on two flavors, every 10 minutes; the utilisation missing
    in hour 2 (a gap in one metric only), no sample at all in hour 4 (a gap in every
    metric), some from another source; team-b's samples alongside (never shown to team-a)."""
    now = bucket_start(timezone.now(), 3600)
    start = now - timedelta(hours=6)
    agent, cluster_api = [], []
    for minute in range(0, 6 * 60, 10):
        when = start + timedelta(minutes=minute)
        hour = minute // 60
        if hour == 4:
            continue
        for tenant, flavor, base in ((world.team_a, world.a100_gpu, 8),
                                     (world.team_a, world.h100_gpu, 2),
                                     (world.team_b, world.a100_gpu, 3)):  # fmt: skip
            ids = (flavor.cluster_id, tenant.pk, flavor.pk, None, None, None, None)
            used = base + (minute % 30) / 10  # a mean and a peak that differ
            cluster_api += [(when, int(Metric.QUOTA_USED), used, *ids),
                            (when, int(Metric.QUOTA_LIMIT), base + 4.0, *ids)]  # fmt: skip
            if hour != 2:
                agent.append((when, int(Metric.GPU_UTILIZATION), 10.0 * hour + base, *ids))
    services.samples_write(rows=cluster_api, source=Source.CLUSTER_API)
    services.samples_write(rows=agent, source=Source.NODE_AGENT)
    services.rollups_run_all(now=now + timedelta(minutes=10))
    return start, now


def _flat(series):  # type: ignore[no-untyped-def]
    return [
        (s.cluster, s.flavor, s.gpu_weight, s.sources, [(p.time, p.values) for p in s.points])
        for s in series
    ]


@pytest.mark.parametrize("step", [timedelta(hours=1), timedelta(minutes=5)])
def test_pivoted_series_are_the_merged_ones(world, history, step):  # type: ignore[no-untyped-def]
    start, now = history
    plan = series_plan(start=start, end=now, step=step)
    flavors = [world.a100_gpu, world.h100_gpu]
    by_id = {f.pk: f for f in flavors}
    pivoted = tenant_usage(tenant=world.team_a, flavors=flavors, plan=plan)
    merged = _tenant_usage_merged(tenant=world.team_a, by_id=by_id, plan=plan)
    assert _flat(pivoted) == _flat(merged)
    a100 = next(s for s in pivoted if s.flavor == world.a100_gpu.name)
    if step == timedelta(hours=1):
        # Hours 0-3 and 5 drawn, hour 4 left out; hour 2 without utilisation.
        assert [p.time for p in a100.points] == [
            start + timedelta(hours=h) for h in (0, 1, 2, 3, 5)
        ]
        first = a100.points[0].values
        assert first["used"] == pytest.approx(9.0)  # 8 + mean of 0, 1, 2 (twice)
        assert first["used_max"] == pytest.approx(10.0) and first["limit"] == 12.0
        assert first["gpu_utilization"] == 8.0
        assert "gpu_utilization" not in a100.points[2].values
        assert a100.sources["used"] == Source.CLUSTER_API.label
        assert a100.sources["gpu_utilization"] == Source.NODE_AGENT.label
