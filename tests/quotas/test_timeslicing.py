"""R25, the arithmetic of time-sliced shares: percent of one GPU to shares and back, in the
words pages and error messages use."""

from __future__ import annotations

from decimal import Decimal

import pytest

from quotas.timeslicing import (
    NotWholeShares,
    gpus_text,
    percent_text,
    shares_from_percent,
    shares_text,
)


@pytest.mark.parametrize(
    ("raw", "replicas", "shares"),
    [("30%", 10, 3), ("40 %", 10, 4), ("0%", 4, 0), ("250%", 4, 10), ("33.33%", 3, 1),
     ("66.67%", 3, 2), ("100%", 7, 7), ("14.29%", 7, 1)],
)  # fmt: skip
def test_percent_becomes_whole_shares(raw: str, replicas: int, shares: int) -> None:
    assert shares_from_percent(raw, replicas=replicas, flavor="t4") == Decimal(shares)


@pytest.mark.parametrize(
    ("raw", "replicas", "nearest"),
    [("35%", 10, "30% (3 shares) or 40% (4 shares)"), ("33%", 3, "0% (0 shares) or 33.33% (1 share)"),
     ("12.5%", 10, "10% (1 share) or 20% (2 shares)")],
)  # fmt: skip
def test_percent_off_the_shares_names_the_nearest(raw: str, replicas: int, nearest: str) -> None:
    with pytest.raises(NotWholeShares, match=r"nearest valid values are (.*)") as refused:
        shares_from_percent(raw, replicas=replicas, flavor="t4")
    assert str(refused.value).endswith(nearest)


@pytest.mark.parametrize("raw", ["%", "abc%", "-10%", "NaN%", "Infinity%"])
def test_what_is_not_a_percentage_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="is not a percentage of a GPU"):
        shares_from_percent(raw, replicas=10, flavor="t4")


def test_words() -> None:
    assert shares_text(3, 10) == "3 shares (30% of a GPU)"
    assert shares_text(1, 4) == "1 share (25% of a GPU)"
    assert shares_text(25, 10) == "25 shares (250% of a GPU)"
    assert percent_text(2, 3) == "66.67%"
    assert gpus_text(10, 10) == "1 GPU"
    assert gpus_text(40, 10) == "4 GPUs"
    assert gpus_text(5, 10) == "0.5 GPUs"
