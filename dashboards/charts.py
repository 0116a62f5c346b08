"""Plotly figures built from the selectors' results with Plotly's Python API.

Every trace and layout is a ``plotly.graph_objects`` object (``go.Scatter``, ``go.Bar``,
``go.Heatmap``, ``go.Layout``), which checks each property against the schema of the plotly.js
release it ships with (4.1.1, the bundle the pages load): a misspelt attribute or a value
plotly.js does not take raises ``ValueError``, in the tests and on every request, instead of
being dropped in silence by the browser. Only the trace types of the cartesian bundle: a test
checks them against it.

Per request, not once: the titles, names and colours change with the data. What is not
checked value by value is the long data columns (``_trace``): plotly's check walks them in
Python, 30 ms of CPU more on a 30-day tenant page (about 40 ms before); checking the rest costs
about 3 ms there and 8 ms on the admin page of 200 tenants (52 traces, about 0.15 ms each).

The functions return each figure as plotly.js reads it ({"data": [...], "layout": {...}}: the
objects' ``to_plotly_json``); ``figures_json`` serialises them with plotly's orjson engine into
the page's ``<script type="application/json">``, and ``static/portal/charts.js`` draws them: no
inline script, nothing computed in the browser but the drawing.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from dashboards.selectors import (
    TOP_TENANTS,
    WEEKDAYS,
    AdminDashboard,
    ClusterView,
    Showback,
    TenantDashboard,
    WorkloadProfile,
)

Figure = dict[str, Any]  # a figure as plotly.js reads it: {"data": [...], "layout": {...}}
Trace = dict[str, Any]  # a go.Scatter, go.Bar or go.Heatmap (the cartesian bundle has them)
COLUMNS = ("x", "y", "z", "text")  # a trace's data: up to thousands of values each
COLORS = {
    "used": "#2f6fbf",
    "borrowed": "#e8891d",
    "guaranteed": "#2a9d55",
    "limit": "#c0392b",
    "peak": "#5b5b5b",
    "capacity": "#444444",
}
PALETTE = ["#2f6fbf", "#e8891d", "#2a9d55", "#c0392b", "#8e44ad", "#16a085", "#d35400",
           "#7f8c8d", "#f1c40f", "#2c3e50", "#e84393", "#00b894", "#b2bec3"]  # fmt: skip
# The chart toolbar (plotly's mode bar, 26 px high at the top right) gets the top strip
# of every chart to itself: the title sits below it (issue 35 item 10: it covered the titles
# at phone width and on a desktop), and the plot below the title.
TOOLBAR_PX = 36
MARGIN_TOP_PX = TOOLBAR_PX + 28


def _t(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _trace(
    kind: type[go.Scatter | go.Bar | go.Heatmap], *, checked: bool = True, **properties: Any
) -> Trace:
    """A trace of ``kind`` as plotly.js reads it, every property checked by plotly: its name
    and value, and of the data columns (x, y, z, text) their names, that they are lists, and
    their first value. The rest of a column goes as it is: numbers, strings and None, which
    plotly's check (about 1.5 us a value, in Python) would pass unchanged. ``checked=False``
    for a figure drawn on the server (``dashboards.svg``, which reads these properties only):
    the same dictionary without plotly's check (about 12 ms of CPU on a 30-day tenant page)."""
    if not checked:
        return {"type": kind.__name__.lower(), **properties}
    columns = {k: properties[k] for k in COLUMNS if k in properties}
    trace: Trace = kind(**{**properties, **{k: v[:1] for k, v in columns.items()}}).to_plotly_json()
    return {**trace, **columns}


def _figure(data: list[Trace], layout: go.Layout | dict[str, Any]) -> Figure:
    """The figure as plotly.js reads it: its checked traces and layout (no plotly template:
    plotly.js's own look, as before); a layout left unchecked as it is."""
    return {"data": data, "layout": layout if isinstance(layout, dict) else layout.to_plotly_json()}


def figures_json(figures: dict[str, Figure], element_id: str) -> SafeString:
    """``figures`` in a ``<script type="application/json">`` element, as ``json_script`` would
    write it, serialised by plotly's orjson engine (``<``, ``>``, ``/`` escaped: the JSON
    cannot end the element)."""
    # Plotly's JSON escapes "<", ">" and "/": nothing in it can end the element.
    text = mark_safe(pio.json.to_json_plotly(figures, engine="orjson"))  # noqa: S308
    return format_html('<script id="{}" type="application/json">{}</script>', element_id, text)


def _layout(
    title: str, *, y: str = "", checked: bool = True, **extra: Any
) -> go.Layout | dict[str, Any]:
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 15}, "y": 1, "yref": "container",
                  "yanchor": "top", "pad": {"t": TOOLBAR_PX}},
        "margin": {"l": 60, "r": 20, "t": MARGIN_TOP_PX, "b": 40},
        "height": 340,
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "x unified",
        "yaxis": {"title": {"text": y}, "rangemode": "tozero"},
    }  # fmt: skip
    layout.update(extra)  # an axis given here replaces the default one whole
    return go.Layout(layout) if checked else layout


def _quota_traces(
    times: list[str], rows: list[dict[str, Any]], unit: str, *, checked: bool = True
) -> list[Trace]:
    def col(name: str) -> list[float | None]:
        return [r.get(name) for r in rows]

    used, borrowed = col("used"), col("borrowed")
    within = [
        None if u is None else max(u - (b or 0), 0) for u, b in zip(used, borrowed, strict=True)
    ]
    lines = functools.partial(_trace, go.Scatter, checked=checked, mode="lines", x=times)
    traces: list[Trace] = [
        lines(name=f"used within guarantee ({unit})", y=within, stackgroup="use",
              line={"width": 0.5, "color": COLORS["used"]}),
        lines(name=f"borrowed ({unit})", y=[b or 0 for b in borrowed], stackgroup="use",
              line={"width": 0.5, "color": COLORS["borrowed"]}),
        lines(name="guaranteed", y=col("guaranteed"),
              line={"dash": "dash", "color": COLORS["guaranteed"], "width": 2}),
        lines(name="limit", y=col("limit"),
              line={"dash": "dot", "color": COLORS["limit"], "width": 2}),
    ]  # fmt: skip
    if any(r.get("used_max") is not None for r in rows):
        traces.append(
            lines(name="peak", y=col("used_max"),
                  line={"color": COLORS["peak"], "width": 1, "dash": "dot"})
        )  # fmt: skip
    return traces


def tenant_figures(dashboard: TenantDashboard, *, checked: bool = True) -> dict[str, Figure]:
    """The tenant usage page's figures; ``checked=False`` for the page, which draws them as
    SVG on the server (``dashboards.svg``): the same figures without plotly's check (the
    tests build them checked too)."""
    figures: dict[str, Figure] = {}
    times_of = [[_t(p.time) for p in series.points] for series in dashboard.series]
    for i, series in enumerate(dashboard.series):
        times = times_of[i]
        rows = [p.values for p in series.points]
        figures[f"flavor-{i}"] = _figure(
            _quota_traces(times, rows, "GPUs", checked=checked),
            _layout(f"{series.cluster} · {series.flavor}", y="GPUs", checked=checked),
        )
    if dashboard.units:
        times = [_t(r["time"]) for r in dashboard.units]
        figures["units"] = _figure(
            _quota_traces(times, dashboard.units, "units", checked=checked),
            _layout(
                "All clusters and flavors, normalised GPU units", y="GPU units", checked=checked
            ),
        )
        figures["utilization"] = _figure(
            [
                _trace(
                    go.Scatter,
                    checked=checked,
                    mode="lines",
                    name=f"{s.cluster} · {s.flavor}",
                    x=times_of[i],
                    y=[p.values.get("gpu_utilization") for p in s.points],
                    line={"color": PALETTE[i % len(PALETTE)]},
                )
                for i, s in enumerate(dashboard.series)
            ],
            _layout(
                "GPU utilisation",
                y="%",
                yaxis={"range": [0, 100], "title": {"text": "%"}},
                checked=checked,
            ),
        )
    return figures


def _top(values: dict[str, float], count: int = TOP_TENANTS) -> list[str]:
    return [t for t, _ in sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[:count]]


def _capacity_marks(name: str, x: list[str], y: list[Any]) -> Trace:
    """Capacity drawn as a wide dash over each stacked bar."""
    return _trace(
 go.Scatter,
        mode="markers", name=name, x=x, y=y,
        marker={"symbol": "line-ew-open", "size": 40, "color": COLORS["capacity"],
                "line": {"width": 3}},
    )  # fmt: skip


def _cluster_share_figure(view: ClusterView) -> Figure:
    flavors = list(view.flavors)
    names = [f.flavor.name for f in flavors]
    totals: dict[str, float] = defaultdict(float)
    for shares in view.shares.values():
        for tenant, used in shares.items():
            totals[tenant] += used
    top = _top(totals)
    data: list[Trace] = [
        _trace(go.Bar, name=tenant, x=names,
               y=[view.shares.get(f.flavor.pk, {}).get(tenant, 0) for f in flavors],
               marker={"color": PALETTE[i % len(PALETTE)]})
        for i, tenant in enumerate(top)
    ]  # fmt: skip
    if len(totals) > len(top):
        data.append(
            _trace(go.Bar, name=f"{len(totals) - len(top)} others", x=names,
                   y=[sum(v for t, v in view.shares.get(f.flavor.pk, {}).items() if t not in top)
                      for f in flavors], marker={"color": "#b2bec3"})
        )  # fmt: skip
    data.append(_capacity_marks("capacity", names, [f.capacity for f in flavors]))
    return _figure(
        data,
        _layout(
            f"{view.cluster.name}: mean use per tenant",
            y="GPUs",
            barmode="stack",
            hovermode="closest",
        ),
    )


def _cluster_capacity_figure(view: ClusterView) -> Figure:
    names = [f.flavor.name for f in view.flavors]
    bars = (("capacity", "capacity"), ("guaranteed", "guaranteed"), ("limit", "limit"),
            ("mean used", "used_mean"))  # fmt: skip
    colors = [COLORS["capacity"], COLORS["guaranteed"], COLORS["limit"], COLORS["used"]]
    return _figure(
        [
            _trace(
                go.Bar,
                name=label,
                x=names,
                y=[getattr(f, attr) for f in view.flavors],
                marker={"color": color},
            )
            for (label, attr), color in zip(bars, colors, strict=True)
        ],
        _layout(
            f"{view.cluster.name}: guarantees allocated vs capacity",
            y="GPUs",
            barmode="group",
            hovermode="closest",
        ),
    )


def _heatmap_figure(view: ClusterView) -> Figure:
    nodes = sorted({g.node for g in view.gpus})
    width = max((g.index for g in view.gpus), default=-1) + 1
    z: list[list[float | None]] = [[None] * width for _ in nodes]
    text: list[list[str]] = [[""] * width for _ in nodes]
    row = {n: i for i, n in enumerate(nodes)}
    for g in view.gpus:
        z[row[g.node]][g.index] = None if g.utilization is None else round(g.utilization, 1)
        if g.from_prometheus:  # what DCGM shows: no MIG layout
            mig = ", MIG mode" if g.mig else ""
            text[row[g.node]][g.index] = f"{g.model}{mig}, from Prometheus"
            continue
        mig = f", MIG {g.instances} instances, {g.free_slices} free slices" if g.mig else ""
        text[row[g.node]][g.index] = f"{g.model}{mig}"
    return _figure(
        [
            _trace(
                go.Heatmap,
                x=[f"GPU {i}" for i in range(width)],
                y=nodes,
                z=z,
                text=text,
                zmin=0,
                zmax=100,
                colorscale="Viridis",
                colorbar={"title": {"text": "%"}},
                hovertemplate="%{y} %{x}: %{z}%<br>%{text}<extra></extra>",
            )
        ],
        _layout(
            f"{view.cluster.name}: GPU utilisation now (last 5 minutes)",
            hovermode="closest",
            height=max(240, MARGIN_TOP_PX + 40 + 28 * len(nodes)),
            yaxis={"automargin": True},
        ),
    )


def admin_figures(dashboard: AdminDashboard) -> dict[str, Figure]:
    figures: dict[str, Figure] = {}
    for i, view in enumerate(dashboard.clusters):
        if view.flavors:
            figures[f"share-{i}"] = _cluster_share_figure(view)
            figures[f"capacity-{i}"] = _cluster_capacity_figure(view)
        if view.gpus:
            figures[f"heatmap-{i}"] = _heatmap_figure(view)
    clusters = [c.cluster.name for c in dashboard.clusters]
    totals = {t: sum(v.values()) for t, v in dashboard.tenant_units.items()}
    top = _top(totals)
    data: list[Trace] = [
        _trace(go.Bar, name=tenant, x=clusters,
               y=[dashboard.tenant_units[tenant].get(c, 0) for c in clusters],
               marker={"color": PALETTE[i % len(PALETTE)]})
        for i, tenant in enumerate(top)
    ]  # fmt: skip
    if len(totals) > len(top):
        data.append(
            _trace(go.Bar, name=f"{len(totals) - len(top)} others", x=clusters,
                   y=[sum(v.get(c, 0) for t, v in dashboard.tenant_units.items() if t not in top)
                      for c in clusters], marker={"color": "#b2bec3"})
        )  # fmt: skip
    data.append(
        _capacity_marks(
            "capacity (units)", clusters, [c.capacity_units for c in dashboard.clusters]
        )
    )
    figures["across"] = _figure(
        data,
        _layout(
            "Mean use per tenant, all clusters",
            y="GPU units",
            barmode="stack",
            hovermode="closest",
        ),
    )
    return figures


def profile_figures(profile: WorkloadProfile) -> dict[str, Figure]:
    hours = [f"{h:02d}" for h in range(24)]
    return {
        "hour-of-week": _figure(
            [
                _trace(
                    go.Heatmap,
                    x=hours,
                    y=list(WEEKDAYS),
                    z=profile.by_hour_of_week,
                    colorscale="Blues",
                    colorbar={"title": {"text": "jobs"}},
                    hovertemplate="%{y} %{x}:00 UTC: %{z} submitted<extra></extra>",
                )
            ],
            _layout(
                "Submissions by hour of week (UTC)",
                hovermode="closest",
                height=320,
                yaxis={"autorange": "reversed"},
                xaxis={"title": {"text": "hour"}},
            ),
        ),
        "gpus-per-job": _figure(
            [
                _trace(
                    go.Bar,
                    x=[f"{g:g}" for g, _ in profile.gpus_per_job],
                    y=[n for _, n in profile.gpus_per_job],
                    marker={"color": COLORS["used"]},
                    name="jobs",
                )
            ],
            _layout(
                "GPUs per job",
                y="jobs",
                hovermode="closest",
                xaxis={"type": "category", "title": {"text": "GPUs (or MIG instances)"}},
            ),
        ),
        "durations": _figure(
            [
                _trace(
                    go.Bar,
                    x=[label for label, _ in profile.duration_buckets],
                    y=[n for _, n in profile.duration_buckets],
                    name="jobs",
                    marker={"color": COLORS["guaranteed"]},
                )
            ],
            _layout(
                "Run time of finished jobs",
                y="jobs",
                hovermode="closest",
                xaxis={"type": "category"},
            ),
        ),
    }


def showback_figures(report: Showback) -> dict[str, Figure]:
    tenants = sorted({r.tenant for r in report.rows})
    flavors = sorted({(r.cluster, r.flavor) for r in report.rows})
    hours = {(r.tenant, r.cluster, r.flavor): r.gpu_hours for r in report.rows}
    return {
        "gpu-hours": _figure(
            [
                _trace(
                    go.Bar,
                    name=f"{c} · {f}",
                    x=tenants,
                    y=[round(hours.get((t, c, f), 0), 2) for t in tenants],
                    marker={"color": PALETTE[i % len(PALETTE)]},
                )
                for i, (c, f) in enumerate(flavors)
            ],
            _layout(
                f"GPU-hours in {report.month:%B %Y}",
                y="GPU-hours",
                barmode="stack",
                hovermode="closest",
            ),
        )
    }
