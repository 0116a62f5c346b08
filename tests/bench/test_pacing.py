"""The load test's agents report as a running fleet does (bench/pacing.py): each at the interval
+/-20% after its last report started, the first at a random point of locust's start-up tick, so
that the reports arrive spread over the interval, not as one burst per locust batch."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.bench import load_bench

pacing = load_bench("pacing")


def test_the_next_report_is_the_interval_plus_or_minus_a_fifth_after_the_last_start():
    draws = [pacing.next_report_in(started=100.0, now=100.3, interval=10.0) for _ in range(4000)]
    assert min(draws) >= 8.0 - 0.3 - 1e-9 and max(draws) <= 12.0 - 0.3 + 1e-9
    # The period counts from the last report's start: a slow answer does not stretch it.
    assert sum(draws) / len(draws) == pytest.approx(10.0 - 0.3, abs=0.1)
    assert pacing.next_report_in(started=0.0, now=20.0, interval=10.0) == 0.0  # overdue: now
    assert pacing.next_report_in(started=0.0, now=0.0, interval=10.0, rng=lambda: 0.0) == 8.0
    assert pacing.next_report_in(
        started=0.0, now=0.0, interval=10.0, rng=lambda: 1.0
    ) == pytest.approx(12.0)


def test_locusts_tick_is_a_second_at_the_load_tests_rate():
    assert pacing.spawn_tick(1050, 10.0) == 1.0  # 105 users at once, every second
    assert pacing.spawn_tick(112, 10.0) == pytest.approx(11 / 11.2)
    assert pacing.spawn_tick(5, 10.0) == 1.0  # at least one user a tick


def busiest_10_ms(starts: list[float]) -> int:
    return max(Counter(int(t * 100) for t in starts).values())


def test_a_fleet_started_in_locust_batches_does_not_report_in_step():
    """1,000 agents started as locust starts them (105 a second), over 2 minutes: with constant
    pacing each batch reported at one instant; paced here, no 10 ms holds more than a few of
    the 100 reports a second."""
    rng = random.Random(19)  # noqa: S311 - a simulation, not a secret
    tick = pacing.spawn_tick(1050, 10.0)
    in_step, paced = [], []
    for agent in range(1000):
        batch_at = (agent // 105) * tick
        in_step += [batch_at + 10.0 * k for k in range(12)]
        t = batch_at + rng.uniform(0, tick)
        while t < 120:
            paced.append(t)
            t += pacing.next_report_in(started=t, now=t, interval=10.0, rng=rng.random)
    assert busiest_10_ms(in_step) >= 100  # a whole batch at once
    assert busiest_10_ms(paced) <= 8  # about one report every 10 ms
    assert len(paced) == pytest.approx(12_000, rel=0.02)  # still 100 reports a second
