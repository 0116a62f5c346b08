"""The charts are built with Plotly's Python API (issue 35 item 21): a misspelt property or a
value plotly.js does not take fails here instead of drawing nothing in the browser, and the
figures reach the page as HTML-safe JSON."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime

import plotly.graph_objects as go
import pytest

from dashboards import charts
from dashboards.selectors import Showback, ShowbackRow

NAUGHTY = "</script><script>alert(1)</script>"


def showback(*tenants: str) -> Showback:
    rows = [
        ShowbackRow(tenant=t, cluster="demo-a100", flavor="a100-80gb", gpu_hours=12.5,
                    unit_hours=12.5, price=None, currency="EUR")
        for t in tenants
    ]  # fmt: skip
    start = datetime(2026, 11, 1, tzinfo=UTC)
    return Showback(month=date(2026, 11, 1), start=start, end=start, rows=rows)


def test_a_misspelt_layout_property_fails() -> None:
    with pytest.raises(ValueError, match="hovermod"):
        charts._layout("GPU-hours", y="GPU-hours", hovermod="closest")


def test_a_colour_plotly_js_does_not_take_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charts, "PALETTE", ["blu", *charts.PALETTE[1:]])  # no such colour
    with pytest.raises(ValueError, match="blu"):
        charts.showback_figures(showback("team-a"))


def test_the_figures_are_plain_json_with_the_properties_as_written() -> None:
    figure = charts.showback_figures(showback("team-a", "team-b"))["gpu-hours"]
    assert figure["data"] == [
        {"type": "bar", "name": "demo-a100 · a100-80gb", "x": ["team-a", "team-b"],
         "y": [12.5, 12.5], "marker": {"color": charts.PALETTE[0]}}
    ]  # fmt: skip
    assert figure["layout"]["barmode"] == "stack"
    assert figure["layout"]["title"]["text"] == "GPU-hours in November 2026"


def test_a_name_cannot_end_the_script_element_of_the_figures() -> None:
    html = str(charts.figures_json(charts.showback_figures(showback(NAUGHTY)), "dashboard-charts"))
    match = re.fullmatch(r'<script id="dashboard-charts" type="application/json">(.*)</script>',
                         html, re.S)  # fmt: skip
    assert match
    assert "<" not in match[1] and ">" not in match[1]
    assert json.loads(match[1])["gpu-hours"]["data"][0]["x"] == [NAUGHTY]


@pytest.mark.parametrize(
    "misspelt", [{"stackgroups": "use"}, {"lines": {"width": 2}}, {"ys": [1.0, 2.0]}]
)
def test_a_misspelt_trace_property_or_column_fails(misspelt: dict[str, object]) -> None:
    (name,) = misspelt
    with pytest.raises(ValueError, match=name):
        charts._trace(go.Scatter, mode="lines", x=["a", "b"], y=[1.0, 2.0], **misspelt)


def test_a_trace_keeps_every_value_of_its_columns() -> None:
    z = [[1.0, None], [50.5, 100.0]]
    trace = charts._trace(go.Heatmap, x=["GPU 0", "GPU 1"], y=["n1", "n2"], z=z, zmin=0)
    assert trace == {"type": "heatmap", "x": ["GPU 0", "GPU 1"], "y": ["n1", "n2"], "z": z,
                     "zmin": 0}  # fmt: skip
