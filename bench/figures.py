"""The one machine-readable line every benchmark prints for ``bench/run.py``.

    BENCH_FIGURES {"benchmark": "api", "figures": [{"figure": ..., "value": ..., ...}]}

Each figure: ``figure`` (what), ``value`` and ``unit``; optionally ``baseline`` (what it is
compared with, same unit) and ``ratio`` (value / baseline); ``target`` (a number the checked
quantity, the ratio when there is one else the value, must reach) with ``better`` ("higher" or
"lower"); and ``passed`` (true / false, or null without a target). A benchmark's own checks
that are not figures (exact counts, data checks) still decide its exit status.
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "BENCH_FIGURES "


def figure(
    name: str,
    value: float,
    unit: str,
    *,
    baseline: float | None = None,
    ratio: float | None = None,
    target: float | None = None,
    better: str = "higher",
    passed: bool | None = None,
) -> dict[str, Any]:
    if ratio is None and baseline:
        ratio = round(value / baseline, 3)
    checked = ratio if ratio is not None else value
    if passed is None and target is not None:
        passed = checked >= target if better == "higher" else checked <= target
    return {
        "figure": name,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "ratio": ratio,
        "target": target,
        "better": better,
        "passed": passed,
    }


def emit(benchmark: str, figures: list[dict[str, Any]]) -> None:
    print(PREFIX + json.dumps({"benchmark": benchmark, "figures": figures}, sort_keys=True))
