"""The time grid the usage store keeps samples and rollups on: buckets counted from the epoch,
each resolution's name and how long it is kept. Pure definitions, read by the services that
write the store and the selectors that read it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings

from usage.choices import RAW

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RESOLUTION_NAMES = {RAW: "raw", 300: "5m", 3600: "1h", 86400: "1d"}


def retention(resolution: int) -> timedelta:
    """How long ``resolution`` (RAW or a Resolution) is kept (settings.USAGE_RETENTION_DAYS)."""
    return timedelta(days=settings.USAGE_RETENTION_DAYS[RESOLUTION_NAMES[resolution]])


def bucket_start(when: datetime, resolution: int) -> datetime:
    seconds = int((when - EPOCH).total_seconds()) // resolution * resolution
    return EPOCH + timedelta(seconds=seconds)
