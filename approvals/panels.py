"""Sections an app above approvals adds to the request page, through a hook: approvals
imports none of them. The advice app adds its what-if replay (``advice/apps.py``).

A panel is a function ``(request, change) -> (template, context)``: the request page renders
the template with that context (plus ``change``) in the order the panels were registered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from approvals.models import QuotaChangeRequest

RequestPanel = Callable[[HttpRequest, QuotaChangeRequest], tuple[str, Mapping[str, Any]]]

REQUEST_PANELS: list[RequestPanel] = []


def request_panel_register(panel: RequestPanel) -> None:
    """Add a section to the request page (once; ``AppConfig.ready`` may run twice)."""
    if panel not in REQUEST_PANELS:
        REQUEST_PANELS.append(panel)


def request_panels_render(*, request: HttpRequest, change: QuotaChangeRequest) -> list[SafeString]:
    """Every registered section for ``change`` (already scoped to the caller), as HTML."""
    out = []
    for panel in REQUEST_PANELS:
        template, context = panel(request, change)
        html = render_to_string(template, {"change": change, **context}, request=request)
        out.append(mark_safe(html))  # noqa: S308 - rendered by the template engine, escaped there
    return out
