"""The portal's logging: one line per record, as JSON (production) or readable text (the demo,
the tests), each with the id of the request or Celery task it belongs to.

The request id comes from django-guid's middleware: the caller's ``X-Request-ID`` when it is a
UUID (an ingress controller's, a client's), else a new one; the response carries it back in
``X-Request-ID``. django-guid's Celery integration (``portal.celery``) puts it in the headers of
every task a request sends, and the worker sets it again while that task runs, so the task's
log lines carry the id of the request that sent it. A task beat sends gets an id of its own.

``LOGGING`` (the settings) is built here from two settings, ``LOG_FORMAT`` (``json`` or
``text``) and ``LOG_LEVEL``. Nothing here reads Django's settings when imported: the settings
modules import it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from celery import current_task
from django_guid.context import guid
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter as LibraryJsonFormatter

LOG_FORMATS = ("json", "text")
# A JSON line's fields, in this order, then whatever the record adds (task_name, task_id,
# status, duration_seconds, exc_info, ...).
JSON_FIELDS = ("asctime", "levelname", "name", "message", "request_id")
JSON_RENAMED = {"asctime": "time", "levelname": "level", "name": "logger"}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


class RequestContext(logging.Filter):
    """Adds ``request_id`` to every record (``missing`` outside a request or task), and, inside
    a Celery task, ``task_name`` and ``task_id``."""

    def __init__(self, missing: str | None = None) -> None:
        super().__init__()
        self.missing = missing

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = guid.get() or self.missing
        task = current_task
        if task:
            record.task_name = task.name
            record.task_id = task.request.id
        return True


class JsonFormatter(LibraryJsonFormatter):
    """python-json-logger's formatter with the time in ISO 8601, UTC, to the millisecond."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def logging_config(log_format: str, level: str) -> dict[str, Any]:
    """Django's ``LOGGING`` for ``log_format`` (``json`` or ``text``), records from ``level`` up,
    to standard error."""
    if log_format not in LOG_FORMATS:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"LOG_FORMAT={log_format!r}: give 'json' or 'text'.")
    formatters: dict[str, dict[str, Any]] = {
        "json": {
            "()": "portal.logs.JsonFormatter",
            "fmt": list(JSON_FIELDS),
            "rename_fields": JSON_RENAMED,
            # Django's request records carry the request object, whose text has the query
            # string (a token, a password reset key): the message says what is needed.
            "reserved_attrs": [*RESERVED_ATTRS, "request"],
        },
        "text": {"format": TEXT_FORMAT},
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "context": {
                "()": "portal.logs.RequestContext",
                "missing": None if log_format == "json" else "-",
            }
        },
        "formatters": {log_format: formatters[log_format]},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": log_format,
                "filters": ["context"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # django-guid says at INFO where each id came from, for every request and task.
            "django_guid": {"level": "WARNING"},
        },
    }
