"""Line and stacked-area charts drawn on the server as SVG, from the same figures
(``dashboards.charts``) plotly.js draws on the other pages.

The tenant usage page (issue 36: it took 1-2 s to draw in a browser, the tenant page 0.1 s)
sends its charts drawn: no 1.5 MB chart library to run and no drawing in the browser, the page
is ready when its HTML is. The figures are the ones ``charts.tenant_figures`` builds (their
titles, trace names, colours, dash styles, stacking, the y axis from zero or the given range),
read here as plotly.js would read them: scatter traces with ``mode="lines"``, those with a
``stackgroup`` stacked and filled in order, the others lines; ``None`` a gap.

Each chart is an ``<svg role="img">`` named by its title, with a ``<desc>`` naming its series;
the numbers themselves are in the page's CSV download.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, PLOT_HEIGHT = 720, 240
LEFT, RIGHT, TOP = 60, 16, 34
AXIS_BELOW = 26  # the time labels under the plot
LEGEND_ROW = 20
DASHES = {"dash": "6 4", "dot": "2 3"}
FILL_OPACITY = 0.5
TEXT = "#24292f"
GRID = "#d8dee4"
TIME_STEPS = [timedelta(hours=h) for h in (1, 2, 3, 6, 12)] + [
    timedelta(days=d) for d in (1, 2, 5, 7, 14, 30, 91, 182, 365)
]
MAX_TIME_TICKS = 8


def _when(text: str, cache: dict[str, float]) -> float:
    if (seconds := cache.get(text)) is None:
        seconds = cache[text] = datetime.fromisoformat(text).timestamp()
    return seconds


def _nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round values from 0 to at least ``top``: 0, 2, 4, 6 ... (steps of 1, 2 or 5 x 10^k)."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _time_ticks(first: float, last: float) -> tuple[list[float], str]:
    span = max(last - first, 1.0)
    step = next(
        (s for s in TIME_STEPS if span / s.total_seconds() <= MAX_TIME_TICKS), TIME_STEPS[-1]
    )
    seconds = step.total_seconds()
    fmt = "%H:%M" if step < timedelta(days=1) else "%b %-d"
    if step < timedelta(days=1):
        start = math.ceil(first / seconds) * seconds
    else:  # at midnight UTC, every ``step`` days
        day = datetime.fromtimestamp(first, UTC).replace(hour=0, minute=0, second=0)
        start = (day + timedelta(days=1 if day.timestamp() < first else 0)).timestamp()
    ticks = []
    t = start
    while t <= last:
        ticks.append(t)
        t += seconds
    return ticks, fmt


def _num(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _tick_label(value: float) -> str:
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return text or "0"


def _path(xs: list[float], ys: list[float | None]) -> str:
    """``Mx,yLx,y...`` through the points, in whole units of the drawing (a unit is at most
    1.4 px on the page); ``None`` ends a run (a gap). A point on a level stretch between two
    at its height is left out: the line is the same without it (a flat limit is 2 points)."""
    runs: list[str] = []
    pts = [(round(x), None if y is None else round(y)) for x, y in zip(xs, ys, strict=True)]
    count = len(pts)
    run: list[str] = []
    for i, (x, y) in enumerate(pts):
        if y is None:
            if run:
                runs.append("M" + "L".join(run))
                run = []
            continue
        if run and 0 < i < count - 1 and pts[i - 1][1] == y and pts[i + 1][1] == y:
            continue  # the middle of a level stretch
        run.append(f"{x},{y}")
    if run:
        runs.append("M" + "L".join(run))
    return "".join(runs)


def figure_svg(figure: dict[str, Any], key: str) -> SafeString:
    """The figure drawn: an ``<svg>`` whose accessible name is the figure's title."""
    layout, traces = figure["layout"], figure["data"]
    title = layout.get("title", {}).get("text", "")
    y_axis = layout.get("yaxis", {})
    cache: dict[str, float] = {}
    parsed: dict[int, list[float]] = {}  # a figure's traces share their column of times
    for t in traces:
        if id(column := t.get("x", [])) not in parsed:
            parsed[id(column)] = [_when(x, cache) for x in column]
    times = [parsed[id(t.get("x", []))] for t in traces]
    values: list[list[float | None]] = [list(t.get("y", [])) for t in traces]
    stacked = [bool(t.get("stackgroup")) for t in traces]
    # Stacks: each stacked trace on the ones before it in its group, at the same position.
    bases: list[list[float] | None] = []
    groups: dict[str, list[float]] = {}
    for i, trace in enumerate(traces):
        if not stacked[i]:
            bases.append(None)
            continue
        below = groups.get(trace["stackgroup"]) or [0.0] * len(values[i])
        bases.append(below)
        groups[trace["stackgroup"]] = [
            b + (v or 0.0) for b, v in zip(below, values[i], strict=True)
        ]
    highest = 0.0
    for i in range(len(traces)):
        for j, v in enumerate(values[i]):
            if v is not None:
                top = v + (bases[i][j] if bases[i] is not None else 0.0)  # type: ignore[index]
                highest = max(highest, top)
    fixed = y_axis.get("range")
    y_ticks = _nice_ticks(highest) if not fixed else _nice_ticks(fixed[1])
    y_max = float(fixed[1]) if fixed else y_ticks[-1]
    all_times = [t for ts in times for t in ts]
    first, last = (min(all_times), max(all_times)) if all_times else (0.0, 1.0)
    span = max(last - first, 1.0)
    plot_w = WIDTH - LEFT - RIGHT
    legend_rows = math.ceil(len(traces) / 2)
    height = TOP + PLOT_HEIGHT + AXIS_BELOW + legend_rows * LEGEND_ROW + 6

    def sx(t: float) -> float:
        return LEFT + (t - first) / span * plot_w

    def sy(v: float) -> float:
        return TOP + PLOT_HEIGHT - min(max(v / y_max, 0.0), 1.0) * PLOT_HEIGHT

    title_id = f"chart-{key}-title"
    names = ", ".join(str(t.get("name", "")) for t in traces)
    out = [
        f'<svg class="chart-svg" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-labelledby="{title_id}" xmlns="http://www.w3.org/2000/svg" '
        f'font-family="sans-serif" font-size="14" fill="{TEXT}">',
        f'<title id="{title_id}">{escape(title)}</title>',
        f"<desc>{escape(names)}</desc>",
        f'<text x="{WIDTH / 2:g}" y="20" text-anchor="middle" font-size="17">'
        f"{escape(title)}</text>",
    ]
    for v in y_ticks:
        y = sy(v)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{_num(y)}" y2="{_num(y)}" '
                   f'stroke="{GRID}"/>'
                   f'<text x="{LEFT - 6}" y="{_num(y + 4)}" text-anchor="end">'
                   f"{_tick_label(v)}</text>")  # fmt: skip
    if y_label := y_axis.get("title", {}).get("text", ""):
        mid = TOP + PLOT_HEIGHT / 2
        out.append(f'<text transform="translate(16 {mid:g}) rotate(-90)" text-anchor="middle">'
                   f"{escape(y_label)}</text>")  # fmt: skip
    x_ticks, fmt = _time_ticks(first, last)
    base_y = TOP + PLOT_HEIGHT
    for t in x_ticks:
        x = sx(t)
        label = datetime.fromtimestamp(t, UTC).strftime(fmt)
        out.append(f'<line x1="{_num(x)}" x2="{_num(x)}" y1="{TOP}" y2="{base_y}" '
                   f'stroke="{GRID}"/><text x="{_num(x)}" y="{base_y + 16}" '
                   f'text-anchor="middle">{label}</text>')  # fmt: skip
    scale_x = plot_w / span
    scale_y = PLOT_HEIGHT / y_max
    bottom = TOP + PLOT_HEIGHT

    def ys_of(column: Sequence[float | None]) -> list[float | None]:
        return [None if v is None else bottom - min(max(v, 0.0), y_max) * scale_y for v in column]

    xs_of: dict[int, list[float]] = {}
    for i, trace in enumerate(traces):
        line = trace.get("line", {})
        color = escape(line.get("color", TEXT))
        width = line.get("width", 2)
        dash = DASHES.get(line.get("dash", ""), "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        if (xs := xs_of.get(id(times[i]))) is None:
            xs = xs_of[id(times[i])] = [LEFT + (t - first) * scale_x for t in times[i]]
        base = bases[i]
        if base is not None:
            tops: list[float | None] = [
                b + (v or 0.0) for b, v in zip(base, values[i], strict=True)
            ]
            upper = ys_of(tops)
            d = _path(xs, upper)  # the top edge: the area's and the line's
            if xs:
                lower = _path(xs[::-1], ys_of(base[::-1]))
                out.append(f'<path d="{d}L{lower[1:]}Z" fill="{color}" '
                           f'fill-opacity="{FILL_OPACITY}" stroke="none"/>')  # fmt: skip
        else:
            d = _path(xs, ys_of(values[i]))
        out.append(f'<path d="{d}" fill="none" stroke="{color}" '
                   f'stroke-width="{width:g}"{dash_attr}/>')  # fmt: skip
    legend_top = base_y + AXIS_BELOW + 8
    for i, trace in enumerate(traces):
        line = trace.get("line", {})
        color = escape(line.get("color", TEXT))
        dash = DASHES.get(line.get("dash", ""), "")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        x = LEFT + (i % 2) * (plot_w / 2)
        y = legend_top + (i // 2) * LEGEND_ROW
        out.append(f'<line x1="{x:g}" x2="{x + 24:g}" y1="{y:g}" y2="{y:g}" stroke="{color}" '
                   f'stroke-width="{4 if stacked[i] else 2}"{dash_attr}/>'
                   f'<text x="{x + 30:g}" y="{y + 4:g}">'
                   f'{escape(trace.get("name", ""))}</text>')  # fmt: skip
    out.append("</svg>")
    return mark_safe("".join(out))  # noqa: S308 - every text from the data is escaped above
