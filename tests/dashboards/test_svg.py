"""The tenant usage page's charts, drawn on the server as SVG (``dashboards.svg``)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from dashboards import svg

NAUGHTY = '</svg><script>alert("x")</script> & "quotes"'


def _figure(title: str = "GPU utilisation", **layout: Any) -> dict[str, Any]:
    times = ["2026-12-01T00:00:00Z", "2026-12-01T01:00:00Z", "2026-12-01T02:00:00Z"]
    return {
        "data": [
            {"type": "scatter", "mode": "lines", "name": "within", "x": times, "y": [1, 2, 3],
             "stackgroup": "use", "line": {"color": "#2f6fbf", "width": 0.5}},
            {"type": "scatter", "mode": "lines", "name": "borrowed", "x": times, "y": [1, 1, 1],
             "stackgroup": "use", "line": {"color": "#e8891d", "width": 0.5}},
            {"type": "scatter", "mode": "lines", "name": "limit", "x": times, "y": [4, None, 4],
             "line": {"dash": "dot", "color": "#c0392b", "width": 2}},
        ],
        "layout": {"title": {"text": title}, "yaxis": {"title": {"text": "GPUs"}}, **layout},
    }  # fmt: skip


def test_a_chart_is_an_image_named_by_its_title_with_its_series() -> None:
    drawn = str(svg.figure_svg(_figure(), "units"))
    assert drawn.startswith('<svg class="chart-svg"') and drawn.endswith("</svg>")
    assert 'role="img" aria-labelledby="chart-units-title"' in drawn
    assert '<title id="chart-units-title">GPU utilisation</title>' in drawn
    assert "<desc>within, borrowed, limit</desc>" in drawn
    for name in ("within", "borrowed", "limit", "GPUs"):
        assert f">{name}</text>" in drawn


def test_stacked_series_sit_on_the_ones_before_and_a_gap_breaks_the_line() -> None:
    drawn = str(svg.figure_svg(_figure(), "units"))
    lines = re.findall(r'<path d="([^"]*)" fill="none"', drawn)
    assert len(lines) == 3
    within, borrowed, limit = (
        [tuple(map(int, p.split(","))) for p in re.split("[ML]", d) if p] for d in lines
    )
    # The y axis reaches 4 (the stack's top and the limit): a GPU is 60 units of the drawing.
    assert [y for _, y in borrowed] == [y - 60 for _, y in within]  # borrowed on top of within
    assert lines[2].count("M") == 2  # the limit's missing middle point: two runs
    assert len(limit) == 2


def test_hostile_names_are_text_not_markup() -> None:
    figure = _figure(title=NAUGHTY)
    figure["data"][0]["name"] = NAUGHTY
    drawn = str(svg.figure_svg(figure, "units"))
    assert "<script" not in drawn
    assert drawn.count("</svg>") == 1
    assert "&lt;/svg&gt;&lt;script&gt;" in drawn


def test_a_level_stretch_is_two_points_whatever_its_length() -> None:
    times = [f"2026-12-01T{h:02d}:00:00Z" for h in range(24)]
    figure = {"data": [{"name": "limit", "x": times, "y": [10] * 24, "line": {}}],
              "layout": {"title": {"text": "flat"}}}  # fmt: skip
    path = re.search(r'<path d="([^"]*)" fill="none"', str(svg.figure_svg(figure, "f")))
    assert path and path[1].count("L") == 1


@pytest.mark.django_db
def test_the_tenant_usage_page_sends_its_charts_drawn_without_plotly(usage_data: Any) -> None:
    client = Client()
    client.force_login(usage_data.world.alice)
    page = client.get("/tenants/team-a/usage/?range=7d").content.decode()
    assert "plotly" not in page  # no chart library to load and run
    assert "dashboard-charts" not in page  # no figures to draw in the browser
    charts = re.findall(r'<div class="chart" id="chart-([\w-]+)"[^>]*data-drawn="true"><svg', page)
    assert {"units", "utilization", "flavor-0", "flavor-1"} <= set(charts)
