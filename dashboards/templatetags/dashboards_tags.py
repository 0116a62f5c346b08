from __future__ import annotations

from decimal import Decimal

from django import template
from django.utils.safestring import SafeString

from dashboards import charts, svg

register = template.Library()


@register.filter
def figures_json(figures: dict[str, charts.Figure], element_id: str) -> SafeString:
    """The page's figures for ``static/portal/charts.js`` (``charts.figures_json``)."""
    return charts.figures_json(figures, element_id)


@register.filter
def chart_svg(figures: dict[str, charts.Figure], key: str) -> SafeString:
    """Figure ``key`` of the page drawn on the server (``dashboards.svg``); nothing without
    it."""
    figure = figures.get(key)
    return svg.figure_svg(figure, key) if figure else SafeString("")


@register.filter
def num(value: float | Decimal | None, digits: int = 1) -> str:
    """A number with at most ``digits`` decimals ("—" for none): 3, 2.5, 0.29."""
    if value is None:
        return "—"
    text = f"{float(value):,.{int(digits)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@register.filter
def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} %"


@register.filter
def ratio_pct(value: float | None) -> str:
    """0.125 -> "12.5 %"."""
    return "—" if value is None else f"{value * 100:.1f} %"


@register.filter
def duration(seconds: float | None) -> str:
    """Seconds as a person reads them: "45 s", "12 min", "3 h 20 min", "2 d 4 h"."""
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
