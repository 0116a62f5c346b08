"""The words helpers pages use: counts in the right number, durations in a person's unit."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from core.words import counted, duration_words, notice_words


@pytest.mark.parametrize(
    ("delta", "said"),
    [
        (timedelta(minutes=10), "10 minutes"),
        (timedelta(minutes=1), "1 minute"),
        (timedelta(hours=1), "1 hour"),
        (timedelta(hours=36), "36 hours"),
        (timedelta(days=1), "1 day"),
        (timedelta(days=3), "3 days"),
        (timedelta(seconds=90), "90 seconds"),
        (timedelta(0), "0 seconds"),
    ],
)
def test_a_duration_is_said_in_the_largest_unit_that_divides_it(delta, said):
    assert duration_words(delta) == said


def test_notice_takes_the_right_possessive():
    assert notice_words(timedelta(days=1)) == "1 day's notice"
    assert notice_words(timedelta(minutes=10)) == "10 minutes' notice"


def test_a_count_takes_its_noun_in_the_right_number():
    assert counted(1, "approval") == "1 approval"
    assert counted(2, "approval") == "2 approvals"
    assert counted(0, "draft") == "0 drafts"
    assert counted(Decimal("1.000"), "GPU unit") == "1 GPU unit"
    assert counted(Decimal("2.50"), "GPU unit") == "2.5 GPU units"
    assert counted(3, "share", "shares") == "3 shares"
