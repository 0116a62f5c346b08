"""Sections an app above approvals adds to the request page, through a hook: approvals
imports none of them. The advice app adds its what-if replay (``advice/apps.py``).

A panel is a function ``(request, change) -> (template, context)``: the request page renders
the template with that context (plus ``change``) in the order the panels were registered.

The API's request detail has the same hook for its fields: a field is a function
``(user, change) -> value`` (JSON-ready), registered under a name the detail's serializer
declares (``QuotaRequestDetailOutput``, which documents its shape); unregistered, it is null.
The advice app fills ``watch`` (an applied change's indicators before and after).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from approvals.models import QuotaChangeRequest
from tenants.models import User

RequestPanel = Callable[[HttpRequest, QuotaChangeRequest], tuple[str, Mapping[str, Any]]]
RequestField = Callable[[User, QuotaChangeRequest], Any]

REQUEST_PANELS: list[RequestPanel] = []
REQUEST_FIELDS: dict[str, RequestField] = {}


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


def request_field_register(name: str, field: RequestField) -> None:
    """Fill the API request detail's ``name`` with ``field`` (the last registered wins)."""
    REQUEST_FIELDS[name] = field


def request_fields_compute(*, user: User, change: QuotaChangeRequest) -> dict[str, Any]:
    """Every registered field of the request detail for ``change`` (scoped to ``user``)."""
    return {name: field(user, change) for name, field in REQUEST_FIELDS.items()}
