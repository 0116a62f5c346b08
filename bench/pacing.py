"""When a simulated node agent reports (``locustfile.py``): as the agent's runner paces itself,
not in step with the rest of the fleet.

locust's dispatcher starts users in batches: ``floor(rate)`` of them at once every
``floor(rate) / rate`` seconds (locust/dispatch.py). With ``constant_pacing`` each agent of a
batch then reported at the same instant every interval, for the whole run: 100 reports within a
few milliseconds each second instead of one every 10 ms, and every request that arrived with
them waited behind them. A node agent waits its interval +/-20% between cycles
(``node_agent/src/gpu_node_agent/runner.py``, ``AgentRunner.delay``) precisely so that a fleet does not call
in step, and a fleet already running when the load starts reports at every phase of its
interval. So each simulated agent sends its first report at a random point of its batch's
tick and paces the next ones at the interval +/-20%.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

SPREAD = 0.2  # the agent's own jitter: the interval +/-20%


def next_report_in(
    *, started: float, now: float, interval: float, rng: Callable[[], float] = random.random
) -> float:
    """Seconds from ``now`` until the next report of an agent whose last report started at
    ``started`` (monotonic seconds): the interval +/-20% after that start, so that a slow answer
    does not stretch the period (the mean stays the interval); 0 when that moment is past."""
    period = interval * (1 - SPREAD + 2 * SPREAD * rng())
    return max(0.0, started + period - now)


def spawn_tick(users: int, interval: float) -> float:
    """Seconds between locust's batches of users when they all start within one ``interval``
    (``load_bench`` sets the spawn rate to ``users / interval``)."""
    rate = max(1.0, users / interval)
    return max(1, math.floor(rate)) / rate
