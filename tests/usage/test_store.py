"""The usage store: bulk ingest (COPY on PostgreSQL), refusals, rollups, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from core.errors import ValidationFailed
from usage import services
from usage.choices import Metric, Resolution
from usage.models import PendingBucket, Rollup, RollupState, Sample

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
NOW = T0 + timedelta(hours=3)


def row(when: datetime, value: float, *, metric: int = Metric.QUOTA_USED, tenant: int = 1,
        flavor: int = 7, cluster: int = 3) -> tuple:  # fmt: skip
    return (when, metric, value, cluster, tenant, flavor, None, None, None, None)


def rollups(resolution: int, **filters: object) -> dict[datetime, tuple[int, float, float, float]]:
    rows = Rollup.objects.filter(resolution=resolution, **filters).order_by("bucket")
    return {r.bucket: (r.samples, r.sum / r.samples, r.min, r.max) for r in rows}


def roll(now: datetime = NOW) -> dict[str, int]:
    return services.rollups_run_all(now=now)


@pytest.mark.django_db(transaction=True)
def test_copy_path_writes_every_row_into_a_day_partition(on_postgres: None) -> None:
    rows = [row(T0 + timedelta(minutes=i), float(i)) for i in range(0, 24 * 60, 10)]
    rows.append(row(T0 + timedelta(days=1, hours=20), 5.0))  # tomorrow: a partition on demand
    assert services.samples_write(rows=rows) == len(rows)
    assert Sample.objects.count() == len(rows)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'usage_sample'::regclass ORDER BY 1"
        )
        names = [r[0] for r in cursor.fetchall()]
        cursor.execute("SELECT count(*) FROM ONLY usage_sample")
        assert cursor.fetchone()[0] == 0  # the parent holds nothing itself
    # (Partitions other tests committed, for other days, may be there too.)
    assert {"usage_sample_p20261130", "usage_sample_p20261201", "usage_sample_p20261202"} <= set(
        names
    )
    # Every 5-minute bucket the rows touch is pending for the rollup.
    assert PendingBucket.objects.filter(resolution=Resolution.FIVE_MINUTES).count() == len(rows)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (lambda r: (r[0].replace(tzinfo=None), *r[1:]), "samples[2].time"),
        (lambda r: (r[0], 999, *r[2:]), "samples[2].metric"),
        (lambda r: (r[0], r[1], float("nan"), *r[3:]), "samples[2].value"),
        (lambda r: (r[0], r[1], -1.0, *r[3:]), "samples[2].value"),
        (lambda r: (*r[:4], "team-a", *r[5:]), "samples[2].tenant_id"),
        (lambda r: (*r[:7], "x" * 101, *r[8:]), "samples[2].gpu_uuid"),
    ],
)
def test_a_malformed_batch_is_refused_whole(db: None, bad, field: str) -> None:  # type: ignore[no-untyped-def]
    rows = [row(T0 + timedelta(minutes=i), 1.0) for i in range(5)]
    rows[2] = bad(rows[2])
    with pytest.raises(ValidationFailed) as refused:
        services.samples_write(rows=rows)
    assert field in refused.value.fields
    assert Sample.objects.count() == 0
    assert PendingBucket.objects.count() == 0


@pytest.mark.django_db
def test_rollups_aggregate_each_resolution_and_are_idempotent(db: None) -> None:
    # Two 5-minute buckets: 10:00 (1, 2, 3) and 10:05 (10); another tenant apart.
    services.samples_write(
        rows=[
            row(T0, 1.0),
            row(T0 + timedelta(minutes=1), 2.0),
            row(T0 + timedelta(minutes=4), 3.0),
            row(T0 + timedelta(minutes=5), 10.0),
            row(T0, 50.0, tenant=2),
        ]
    )
    assert roll() == {"5m": 2, "1h": 1, "1d": 1}
    assert rollups(Resolution.FIVE_MINUTES, tenant_id=1) == {
        T0: (3, 2.0, 1.0, 3.0),
        T0 + timedelta(minutes=5): (1, 10.0, 10.0, 10.0),
    }
    assert rollups(Resolution.HOUR, tenant_id=1) == {T0: (4, 4.0, 1.0, 10.0)}
    day = T0.replace(hour=0)
    assert rollups(Resolution.DAY, tenant_id=1) == {day: (4, 4.0, 1.0, 10.0)}
    assert rollups(Resolution.DAY, tenant_id=2) == {day: (1, 50.0, 50.0, 50.0)}
    before = list(Rollup.objects.order_by("pk").values())
    # Nothing new: nothing rolled, nothing changed.
    assert roll() == {"5m": 0, "1h": 0, "1d": 0}
    assert list(Rollup.objects.order_by("pk").values()) == before
    # The same buckets marked again (a retried batch's marks): recomputed to the same numbers.
    services._mark_pending(Resolution.FIVE_MINUTES, [T0, T0 + timedelta(minutes=5)])
    assert roll() == {"5m": 2, "1h": 1, "1d": 1}
    assert rollups(Resolution.HOUR, tenant_id=1) == {T0: (4, 4.0, 1.0, 10.0)}
    state = RollupState.objects.get(resolution=Resolution.FIVE_MINUTES)
    assert state.rolled_until == T0 + timedelta(minutes=10)


@pytest.mark.django_db
def test_a_late_sample_rolls_its_window_again(db: None) -> None:
    services.samples_write(rows=[row(T0 + timedelta(minutes=m), 4.0) for m in range(0, 60, 5)])
    roll()
    assert rollups(Resolution.HOUR, tenant_id=1) == {T0: (12, 4.0, 4.0, 4.0)}
    # Later: more samples for the next hour, and one late sample for 10:07.
    services.samples_write(rows=[row(T0 + timedelta(hours=1), 8.0)])
    roll()
    services.samples_write(rows=[row(T0 + timedelta(minutes=7), 16.0)])
    rolled = roll()
    assert rolled["5m"] == 1  # only the late sample's window
    assert rollups(Resolution.FIVE_MINUTES, tenant_id=1)[T0 + timedelta(minutes=5)] == (
        2, 10.0, 4.0, 16.0,
    )  # fmt: skip
    assert rollups(Resolution.HOUR, tenant_id=1)[T0] == (13, 64.0 / 13, 4.0, 16.0)
    assert rollups(Resolution.DAY, tenant_id=1)[T0.replace(hour=0)] == (14, 72.0 / 14, 4.0, 16.0)


@pytest.mark.django_db
def test_retention_drops_each_resolution_past_its_age(db: None, settings) -> None:  # type: ignore[no-untyped-def]
    settings.USAGE_RETENTION_DAYS = {"raw": 3, "5m": 30, "1h": 400, "1d": 1830}
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    old, recent = now - timedelta(days=40), now - timedelta(hours=1)
    services.samples_write(
        rows=[row(old, 1.0), row(now - timedelta(days=5), 2.0), row(recent, 3.0)]
    )
    roll(now)
    assert Rollup.objects.filter(resolution=Resolution.FIVE_MINUTES).count() == 3
    out = services.retention_enforce(now=now)
    # Raw: only the last 3 days stay (whole days on PostgreSQL: the partitions are dropped).
    assert sorted(Sample.objects.values_list("value", flat=True)) == [3.0]
    # 5-minute rollups older than 30 days go; hourly and daily stay.
    assert sorted(
        Rollup.objects.filter(resolution=Resolution.FIVE_MINUTES).values_list("sum", flat=True)
    ) == [2.0, 3.0]
    assert Rollup.objects.filter(resolution=Resolution.HOUR).count() == 3
    assert Rollup.objects.filter(resolution=Resolution.DAY).count() == 3
    assert out["5m"] == 1
    if connection.vendor == "postgresql":
        assert out["raw_partitions"] == 2
        # Partitions ahead exist for today and the next days.
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass('usage_sample_p20261206') IS NOT NULL")
            assert cursor.fetchone()[0]
    # A sample for a dropped day is still accepted (its partition comes back on demand).
    services.samples_write(rows=[row(now - timedelta(days=5), 2.0)])
    assert Sample.objects.count() == 2


def _blocks_read_for_the_last_minutes(since: datetime) -> int:
    """Heap and index blocks a BRIN scan of the raw samples since ``since`` touches."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the dashboards' read: the BRIN index
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT count(*) FROM usage_sample "
            "WHERE time >= %s",
            [since],
        )
        plan = cursor.fetchone()[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


@pytest.mark.django_db(transaction=True)
def test_the_rollup_run_summarises_the_day_so_a_recent_read_skips_it(on_postgres: None) -> None:
    day = T0.replace(hour=0)
    services.partitions_drop_before(day=(day + timedelta(days=1)).date())  # none left over
    rows = [row(day + timedelta(seconds=s), 1.0, tenant=s % 50 + 1) for s in range(0, 72000, 2)]
    services.samples_write(rows=rows)
    last = day + timedelta(seconds=72000 - 300)  # the last 5 minutes written
    before = _blocks_read_for_the_last_minutes(last)
    assert services.partitions_summarize(now=day + timedelta(hours=20)) > 0
    after = _blocks_read_for_the_last_minutes(last)
    assert after < before * 0.4, (before, after)
    # The beat's rollup run does it: a second pass finds nothing new to summarise.
    roll(day + timedelta(hours=20, minutes=5))
    assert services.partitions_summarize(now=day + timedelta(hours=20)) == 0
