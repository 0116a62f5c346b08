"""The probes' endpoints: /livez is the process alone (a database outage must not restart the
web pods), /readyz names what a request needs and does not have (the database, the cache, the
broker). Redis is a ``redis-server`` of this test alone, stopped while the portal runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from portal import health
from portal.celery import app as celery_app
from tests.redis_server import free_port

PASSWORD = "probe-s3cret-pw"  # must never reach the answer


@pytest.fixture
def portal_on(settings):
    """Point the cache and the Celery broker at a Redis URL for the rest of the test."""
    previous = celery_app.conf.broker_url

    def use(url: str) -> None:
        settings.CACHES = {
            "default": {"BACKEND": "core.cache.RedisCache", "LOCATION": url, "KEY_PREFIX": "t"}
        }
        celery_app.conf.broker_url = url

    yield use
    celery_app.conf.broker_url = previous


@pytest.fixture
def unreachable_database(django_db_blocker, tmp_path: Path) -> Iterator[None]:
    """The default database at an address nothing answers (PostgreSQL: a closed port on this
    machine; SQLite: a file in a folder that does not exist), for every thread."""
    connection = connections["default"]
    settings_dict = connection.settings_dict  # the same dict every thread's connection reads
    saved = dict(settings_dict)
    with django_db_blocker.unblock():
        connection.close()
        if connection.vendor == "sqlite":
            settings_dict["NAME"] = str(tmp_path / "missing" / "portal.sqlite3")
        else:
            settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
        try:
            yield
        finally:
            connection.close()
            settings_dict.clear()
            settings_dict.update(saved)


def test_livez_answers_with_the_database_unreachable(client, unreachable_database):
    answer = client.get("/livez")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok"}


def test_readyz_names_the_database_when_it_is_unreachable(client, unreachable_database):
    answer = client.get("/readyz")
    assert answer.status_code == 503
    body = answer.json()
    assert body["failed"] == ["database"]
    assert body["checks"]["database"]["ok"] is False
    assert body["checks"]["database"]["reason"]


@pytest.mark.django_db
def test_readyz_passes_on_the_test_services(client):
    answer = client.get("/readyz")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "cache", "broker"}
    assert all(check["ok"] for check in body["checks"].values())
    assert "failed" not in body


@pytest.mark.django_db
def test_readyz_names_redis_when_it_stops(client, private_redis, portal_on):
    portal_on(private_redis.url)
    up = client.get("/readyz")
    assert up.status_code == 200, up.content
    assert up.json()["checks"]["cache"]["reason"] == "Redis set and get answered"
    assert up.json()["checks"]["broker"]["reason"] == "Redis PING answered"

    private_redis.stop()
    began = time.monotonic()
    down = client.get("/readyz")
    assert time.monotonic() - began < 3
    assert down.status_code == 503
    body = down.json()
    assert body["status"] == "failing"
    assert body["failed"] == ["cache", "broker"]
    assert body["checks"]["database"]["ok"] is True
    for name in ("cache", "broker"):
        assert body["checks"][name]["ok"] is False
        assert "Connection" in body["checks"][name]["reason"], body["checks"][name]
    # Anyone may ask: where the servers are stays in the log.
    assert str(private_redis.port) not in down.content.decode()
    # /livez does not care.
    assert client.get("/livez").status_code == 200

    # A URL's password never reaches the answer.
    portal_on(f"redis://:{PASSWORD}@127.0.0.1:{private_redis.port}/0")
    secret = client.get("/readyz")
    assert secret.status_code == 503
    assert PASSWORD not in secret.content.decode()


def test_a_check_without_an_answer_fails_in_time(monkeypatch):
    """A server that never answers (a dropped packet) costs the probe the total limit, no more."""

    def hangs() -> health.Check:
        time.sleep(2)
        return health.Check("slow", True, "too late")

    monkeypatch.setattr(health, "READINESS_CHECKS", {"slow": hangs})
    began = time.monotonic()
    checks = health.readiness(timeout=0.2)
    assert time.monotonic() - began < 1
    assert checks == [health.Check("slow", False, "no answer within 0.2 s")]


ROOT = Path(__file__).resolve().parents[2]


def manage(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``manage.py`` in a process of its own, with these settings (no Redis)."""
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    environment.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.django_db
def test_wait_for_migrations_returns_at_once_on_a_migrated_database(capsys):
    call_command("wait_for_migrations", interval=0.1, connect_timeout=1)
    assert "Every migration is applied." in capsys.readouterr().out


def test_wait_for_migrations_fails_with_the_reason_on_an_unreachable_database(unreachable_database):  # fmt: skip
    began = time.monotonic()
    with pytest.raises(CommandError, match="The database cannot be reached: OperationalError"):
        call_command("wait_for_migrations", interval=0.1, connect_timeout=0.5)
    assert time.monotonic() - began < 5


def test_wait_for_migrations_exits_with_the_reason_on_a_bad_database_url(tmp_path: Path):
    env = {"DATABASE_URL": "postgres://portal:pw@db:not-a-port/portal", "DATA_DIR": str(tmp_path)}
    done = manage("wait_for_migrations", env=env, timeout=60)
    assert done.returncode != 0
    assert "not a valid url" in done.stderr


def test_wait_for_migrations_waits_while_migrations_are_pending(tmp_path: Path):
    """An empty database (SQLite under a fresh DATA_DIR): it waits, saying for what."""
    env = {"DATABASE_URL": "", "DATA_DIR": str(tmp_path)}
    with pytest.raises(subprocess.TimeoutExpired) as waited:
        manage("wait_for_migrations", "--interval", "0.2", env=env, timeout=8)
    out = waited.value.stdout
    out = out.decode() if isinstance(out, bytes) else (out or "")
    assert "migrations to be applied (first: " in out
