"""A database of a benchmark's own for the in-process benchmarks (``usage``, ``dashboard``):
dropped and created on the PostgreSQL server the benchmark was given, migrated with
production settings (the usage store keeping a month of raw samples), Django set up in this
process; dropped again at the end."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _admin_url(url: str) -> str:
    return url.rsplit("/", 1)[0] + "/postgres"


def manage(*args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args, "--noinput", "--verbosity=0"], cwd=ROOT, check=True
    )


def setup(database_url: str, name: str, tmp: str) -> None:
    import psycopg

    with psycopg.connect(_admin_url(database_url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    os.environ.update(
        {
            "DATABASE_URL": _admin_url(database_url).rsplit("/", 1)[0] + f"/{name}",
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "testserver,127.0.0.1",
            "SECURE_SSL_REDIRECT": "false",
            "DATA_DIR": tmp,
            "REDIS_URL": "",
            "USAGE_RETENTION_RAW_DAYS": "60",  # the benchmarks write a month of raw samples
            "DJANGO_SETTINGS_MODULE": "portal.settings.production",
        }
    )
    manage("migrate")


def django_setup() -> None:
    import django

    django.setup()


def teardown(database_url: str, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(_admin_url(database_url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
