"""Dates and times read from a client: bounded before any arithmetic sees them.

Python's ``datetime`` ends at 9999-12-31: a month after December 9999, a day's step past the
end of that year or a day before 0001-01-01 raises (``ValueError``, ``OverflowError``) and the
request would answer 500. Nothing the portal keeps or plans is that far away, so input from
1970 to 2999 is taken and anything else refused with these words.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

EARLIEST_YEAR = 1970
LATEST_YEAR = 2999
OUT_OF_RANGE = f"a date from {EARLIEST_YEAR} to {LATEST_YEAR} is required."


def in_range(value: date | datetime) -> bool:
    """Whether ``value`` (naive values read as UTC) lies in the years the portal takes."""
    if not EARLIEST_YEAR <= value.year <= LATEST_YEAR:
        return False  # before converting: 0001-01-01T00:00+01:00 in UTC is out of datetime's range
    if isinstance(value, datetime) and value.tzinfo is not None:
        return EARLIEST_YEAR <= value.astimezone(UTC).year <= LATEST_YEAR
    return True
