"""Every way the usage pages say how far back they reach reads as English: the period line
under the range picker (its step and what it is read from, for each step the pages use), the
refusal of a start older than what is kept (for each step), the showback's refusal of a month
older than the hourly totals, and lengths of time kept (singular and plural, hours, years).
Once the page said "a step of 1 d reads 1 d rollups are kept for 1830 days"; no "1 d", "5m",
"rollups" or "1 days" may come back.

Retention (settings.USAGE_RETENTION_DAYS): raw 3 days, 5-minute totals 30, hourly 400, daily
1830.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest

from core.errors import ValidationFailed
from dashboards.selectors import period_resolve, showback
from tests.dashboards.test_pages import client_for, range_error
from usage.selectors import kept_words

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
JARGON = re.compile(r"\b\d+ ?[dhm]\b|\brollups?\b|\b1 (days|hours|minutes|years)\b")


@pytest.mark.parametrize(
    ("kept", "says"),
    [
        (timedelta(days=1), "1 day"),
        (timedelta(hours=36), "36 hours"),
        (timedelta(days=30), "30 days"),
        (timedelta(days=400), "400 days (about 1 year)"),
        (timedelta(days=1830), "1830 days (about 5 years)"),
    ],
)
def test_how_long_something_is_kept_reads_as_a_person_says_it(kept, says):
    assert kept_words(kept) == says


@pytest.mark.parametrize(
    ("name", "start", "step", "source"),
    [
        ("24h", None, "5 minutes", "usage totals per 5 minutes"),
        ("7d", None, "1 hour", "hourly usage totals"),
        ("30d", None, "1 hour", "hourly usage totals"),
        (None, NOW - timedelta(days=90), "1 day", "daily usage totals"),
    ],
)
def test_the_period_says_its_step_and_what_it_reads_in_words(name, start, step, source):
    period = period_resolve(name=name, start=start, end=NOW if start else None, now=NOW)
    assert (period.step_words, period.source_words) == (step, source)


@pytest.mark.parametrize(
    ("query", "line"),
    [
        ("?range=24h", "in steps of 5 minutes, read from the usage totals per 5 minutes"),
        ("?range=7d", "in steps of 1 hour, read from the hourly usage totals"),
        (
            "?start=2026-01-01T00:00&end=2026-06-01T00:00",
            "in steps of 1 day, read from the daily usage totals",
        ),
    ],
)
def test_the_period_line_under_the_range_picker_reads_as_english(world, query, line):
    for url in ("/tenants/team-a/usage/", "/usage/"):
        response = client_for(world.admin).get(url + query)
        assert response.status_code == 200, url
        shown = re.search(r'<p class="meta period">([^<]*)</p>', response.content.decode())
        assert shown, url
        assert shown[1].endswith(line), shown[1]
        assert not JARGON.search(shown[1]), shown[1]


@pytest.mark.parametrize(
    ("span", "days_back", "says"),
    [
        (
            timedelta(hours=12),  # drawn in steps of 5 minutes
            40,
            "Usage totals per 5 minutes are kept for 30 days, so a range in steps of 5 minutes "
            "can start on 2026-11-04 at 12:00 UTC at the earliest. Use a step of 1 hour (or a "
            "multiple of it) to reach further back.",
        ),
        (
            timedelta(days=7),  # in steps of 1 hour
            500,
            "Hourly usage totals are kept for 400 days (about 1 year), so a range in steps of "
            "1 hour can start on 2025-10-30 at 12:00 UTC at the earliest. Use a step of 1 day "
            "(or a multiple of it) to reach further back.",
        ),
        (
            timedelta(days=90),  # in steps of 1 day
            2000,
            "Daily usage totals are kept for 1830 days (about 5 years), so a range in steps of "
            "1 day can start on 2021-11-30 at 12:00 UTC at the earliest.",
        ),
    ],
)
def test_a_start_too_old_for_each_step_says_why_in_english(span, days_back, says):
    start = NOW - timedelta(days=days_back)
    with pytest.raises(ValidationFailed) as refused:
        period_resolve(start=start, end=start + span, now=NOW)
    (message,) = refused.value.fields["start"]
    assert message == says
    assert not JARGON.search(message), message


def test_the_page_shows_the_same_sentence_next_to_the_range(world):
    response = client_for(world.admin).get("/usage/?start=2001-01-01T00:00&end=2001-01-01T12:00")
    assert response.status_code == 400
    message = range_error(response)
    assert re.fullmatch(
        r"Usage totals per 5 minutes are kept for 30 days, so a range in steps of 5 "
        r"minutes can start on \d{4}-\d\d-\d\d at \d\d:\d\d UTC at the earliest\.",
        message,
    ), message


@pytest.mark.parametrize(
    ("now", "oldest_month"),
    [
        (NOW, "November 2025"),  # 400 days back is 2025-10-30 12:00: October lacks hours
        (datetime(2026, 12, 6, tzinfo=UTC), "November 2025"),  # exactly 2025-11-01 00:00
        (datetime(2027, 1, 10, tzinfo=UTC), "January 2026"),  # 2025-12-06: into the next year
    ],
)
def test_a_showback_month_too_old_names_the_oldest_month_it_has(world, now, oldest_month):
    with pytest.raises(ValidationFailed) as refused:
        showback(month=date(2001, 1, 1), now=now)
    (message,) = refused.value.fields["month"]
    assert message == (
        "hourly usage totals are kept for 400 days (about 1 year), so the oldest month with "
        f"every hour is {oldest_month}."
    )
    assert not JARGON.search(message), message
