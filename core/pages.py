"""Page errors: one mapping from a domain error to the page a person sees.

The API has one error contract (``core/api/errors.py``: JSON with field-level messages); the
pages have this one. A page view calls its service or selector and lets a domain error
propagate: ``PageErrorMiddleware`` renders it as the portal's 404 / 403 / 409 / 400 page, with
the service's own message. Views that answer a refused form in place (the message beside the
field, the form kept) catch the error themselves and show ``error_text(exc)``.

Like the rest of ``core/`` this imports no app.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.errors import ApplicationError

API_PREFIX = "/api/"

# The page template for each status a domain error carries; anything else is a 400 page.
_TEMPLATES = {404: "404.html", 403: "403.html", 409: "409.html"}


def error_text(exc: ApplicationError) -> str:
    """The service's message, then the field messages that add something to it."""
    details = [m for ms in exc.fields.values() for m in ms if m not in exc.message]
    return " ".join([exc.message, *details])


def error_page(request: HttpRequest, exc: ApplicationError) -> HttpResponse:
    """The portal's page for a domain error, with its status and the service's message."""
    status = exc.status_code if exc.status_code in _TEMPLATES else 400
    template = _TEMPLATES.get(status, "400.html")
    return render(request, template, {"error_message": error_text(exc)}, status=status)


class PageErrorMiddleware:
    """Turns a domain error a page view let through into its page. API views never get here:
    DRF's exception handler answers them first (and ``/api/`` is left alone in any case)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, ApplicationError) or request.path.startswith(API_PREFIX):
            return None
        return error_page(request, exception)
