"""The per-workload activity store: readings fold into each workload's hourly peak, whichever
order they come in, and retention drops old hours."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from usage import services
from usage.choices import Resolution
from usage.models import WorkloadActivity

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 2, 10, 5, tzinfo=UTC)


def _peaks(cluster_id: int = 1) -> dict[tuple[str, datetime], tuple[float, int]]:
    return {
        (a.workload_uid, a.bucket): (a.peak_utilization, a.samples)
        for a in WorkloadActivity.objects.filter(cluster_id=cluster_id)
    }


def test_the_hour_keeps_the_highest_reading_not_the_last():
    services.workload_activity_record(cluster_id=1, at=T0, peaks={"wl-a": 40.0, "wl-b": 0.0})
    services.workload_activity_record(
        cluster_id=1, at=T0 + timedelta(minutes=20), peaks={"wl-a": 5.0, "wl-b": 2.0}
    )
    services.workload_activity_record(cluster_id=1, at=T0 + timedelta(hours=1), peaks={"wl-a": 1.0})
    hour = T0.replace(minute=0)
    assert _peaks() == {
        ("wl-a", hour): (40.0, 2),
        ("wl-b", hour): (2.0, 2),
        ("wl-a", hour + timedelta(hours=1)): (1.0, 1),
    }
    assert services.workload_activity_record(cluster_id=1, at=T0, peaks={}) == 0


def test_retention_drops_hours_past_the_hourly_rollups_keep():
    services.workload_activity_record(cluster_id=1, at=T0, peaks={"wl-a": 40.0})
    late = T0 + services.retention(Resolution.HOUR) + timedelta(hours=2)
    services.workload_activity_record(cluster_id=1, at=late, peaks={"wl-a": 3.0})
    dropped = services.retention_enforce(now=late)
    assert dropped["workload_activity"] == 1
    assert list(_peaks()) == [("wl-a", late.replace(minute=0))]
