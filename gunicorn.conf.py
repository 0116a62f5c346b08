"""gunicorn's settings file, read from the working directory by every gunicorn that serves the
portal (the image, Compose, Kubernetes, make run): what the command line does not say.

Prometheus' multiprocess mode: gunicorn's workers are separate processes, each counting its own
requests (django-prometheus), and a scrape reaches one of them. With ``PROMETHEUS_MULTIPROC_DIR``
set before a worker imports prometheus_client, every worker writes its values to files there
and ``/metrics`` adds up all the workers' files (``portal.observability.http_families``). This
file gives each gunicorn an empty directory of its own under the temporary directory (``/tmp``,
an emptyDir in Kubernetes) unless the environment names one, which it then empties at start
(values of a previous gunicorn would be counted again); a worker that exits is marked dead, so
its counts stay in the sums but its live gauges leave them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_OWN_DIR_ENV = "PORTAL_GUNICORN_OWN_METRICS_DIR"  # set when the directory is this gunicorn's

if not os.environ.get(MULTIPROC_ENV):
    os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="portal-prometheus-")
    os.environ[_OWN_DIR_ENV] = "1"


def on_starting(server: Any) -> None:
    """Before the first worker: an operator's directory holds no earlier gunicorn's values."""
    if not os.environ.get(_OWN_DIR_ENV):
        for stale in Path(os.environ[MULTIPROC_ENV]).glob("*.db"):
            stale.unlink(missing_ok=True)


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    if os.environ.get(_OWN_DIR_ENV):
        shutil.rmtree(os.environ[MULTIPROC_ENV], ignore_errors=True)
