"""Words for people: counts with their noun in the right number, durations in the unit a person
says ("10 minutes", not "0.166667 hours").

Pages and messages use these rather than "approval(s)" or a float of hours.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

# Largest first: a duration is said in the largest unit that divides it exactly.
_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def counted(count: int | float | Decimal, one: str, many: str | None = None) -> str:
    """``count`` and its noun in the right number: "1 approval", "2 approvals", "0 drafts",
    "1.5 GPUs". ``many`` defaults to ``one`` + "s"."""
    if isinstance(count, Decimal):
        whole = count == count.to_integral_value()
        number = str(int(count)) if whole else format(count.normalize(), "f")
    else:
        number = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{number} {one if count == 1 else (many or one + 's')}"


def duration_words(delta: timedelta) -> str:
    """A duration as people say it, in the largest unit that divides it exactly: "3 days",
    "1 day", "36 hours", "10 minutes", "90 seconds" (rounded to the second); "0 seconds"."""
    seconds = round(delta.total_seconds())
    if seconds == 0:
        return "0 seconds"
    name, size = next((name, size) for name, size in _UNITS if seconds % size == 0)
    return counted(seconds // size, name)


def notice_words(delta: timedelta) -> str:
    """A period of notice: "1 day's notice", "10 minutes' notice"."""
    words = duration_words(delta)
    return f"{words}' notice" if words.endswith("s") else f"{words}'s notice"
