"""Filters of the advice partials."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def minutes(seconds: float | None) -> str:
    """Seconds as minutes with one decimal; "—" for none."""
    return "—" if seconds is None else f"{seconds / 60:.1f}"


@register.filter
def percent(fraction: float | None) -> str:
    """0..1 as a whole percentage; "—" for none."""
    return "—" if fraction is None else f"{fraction * 100:.0f}%"


@register.filter
def calibration_value(value: float | None, unit: str) -> str:
    """A calibration figure as a person reads it: waits in minutes, GPU-hours; "—" for none."""
    if value is None:
        return "—"
    if unit == "s":  # waits are in seconds; people read them in minutes
        return f"{value / 60:.1f} min"
    return f"{value:.1f} {unit}"
