"""Fixtures of the operations tests: scratch PostgreSQL databases next to the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.conftest import require_service

BASE_DIR = Path(settings.BASE_DIR)


@pytest.fixture
def scratch_db() -> Iterator[Callable[..., str]]:
    """Makes empty databases on the test's PostgreSQL server; drops them afterwards.
    Returns a function from a label to the new database's URL."""
    require_service(
        "PostgreSQL", connection.vendor == "postgresql", "DATABASE_URL is not PostgreSQL"
    )
    params = connection.get_connection_params()
    admin = {k: params[k] for k in ("host", "port", "user", "password") if params.get(k)}
    made: list[str] = []
    prefix = str(connection.settings_dict["NAME"]).removeprefix("test_")

    def make(label: str, *, create: bool = True) -> str:
        """``create=False``: only the name (the test creates it, as an operator would); it is
        dropped afterwards all the same."""
        # Named after the suite's own database (test_h6 -> h6_ops_...), so that suites sharing a
        # server each make and drop databases of their own name only.
        name = f"{prefix}_ops_{label}_{uuid.uuid4().hex[:8]}"
        if create:
            with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        made.append(name)
        user = admin.get("user", "postgres")
        password = f":{admin['password']}" if admin.get("password") else ""
        host = admin.get("host", "127.0.0.1")
        port = admin.get("port", 5432)
        return f"postgres://{user}{password}@{host}:{port}/{name}"

    yield make
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
        for name in made:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_python(database_url: str, *args: str, timeout: int = 300) -> str:
    """Runs ``python args`` in the project against ``database_url``; its stdout."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "portal.settings.demo",  # what make run's commands use
        "DEMO_KUBECONFIG_DIR": "",
        "DEMO_AGENT_DIR": "",
    }
    done = subprocess.run(
        [sys.executable, *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout
