"""Sending a Celery task by name, so that a service never imports its app's ``tasks`` module
(tasks import services; the reverse would be a cycle).

The task runs as if called through its own ``apply_async`` (eager mode in the demo and the
tests included) once this process has the apps' tasks modules imported; a name no app
registers goes to the broker for a worker that may know it. Like the rest of ``core/`` this imports no app: the Celery app is
``celery.current_app`` (the project's app, which ``portal/__init__.py`` makes the default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery import current_app


def enqueue(name: str, args: Sequence[Any] = (), *, queue: str | None = None) -> None:
    """Send task ``name`` with ``args``; broker errors are raised to the caller, which decides
    whether losing the message matters (an outbox row does not: the sweep sends it again)."""
    task = current_app.tasks.get(name)
    if task is None:
        # A web process imports the apps' tasks modules only when asked: Celery's loader
        # imports every one it autodiscovers (once; later calls find them imported).
        current_app.loader.import_default_modules()
        task = current_app.tasks.get(name)
    if task is not None:
        task.apply_async(args=list(args), queue=queue)
    else:
        current_app.send_task(name, args=list(args), queue=queue)
