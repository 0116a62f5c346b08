"""docker-compose.yml: the services users run, each with a health check, and valid for Compose."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"


def _compose_command() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_declares_the_stack_with_health_checks():
    spec = yaml.safe_load(COMPOSE.read_text())
    services = spec["services"]
    assert {"postgres", "redis", "web", "worker", "beat"} <= set(services)
    for name in ("postgres", "redis", "web", "worker"):
        assert "healthcheck" in services[name], f"{name} has no health check"
    # The web app is healthy when it can serve: the database, the cache and the broker answer.
    assert "http://127.0.0.1:8000/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    assert "gunicorn" in (ROOT / "Dockerfile").read_text()
    assert services["worker"]["command"][:3] == ["celery", "-A", "portal"]
    assert services["beat"]["command"][3] == "beat"
    env = services["web"]["environment"]
    assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"].startswith("redis://")
    assert env["DEBUG"] == "false"
    # The production settings (portal/settings/production.py), as the image's own default.
    assert env["DJANGO_SETTINGS_MODULE"] == "portal.settings.production"
    assert "DJANGO_SETTINGS_MODULE=portal.settings.production" in (ROOT / "Dockerfile").read_text()


def test_every_portal_process_starts_after_the_migration_completes():
    """The web app, the worker and beat wait for ``migrate`` to exit 0 (a task run on a schema
    not yet migrated fails); the migration itself waits only for a healthy database."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert services["migrate"]["command"][-2:] == ["migrate", "--noinput"]
    assert services["migrate"]["restart"] == "no"
    assert "migrate" not in services["migrate"]["depends_on"]
    for name in ("web", "worker", "beat"):
        depends_on = services[name]["depends_on"]
        assert depends_on["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends_on["postgres"] == {"condition": "service_healthy"}, name
        assert depends_on["redis"] == {"condition": "service_healthy"}, name


def test_docker_compose_config_accepts_the_file():
    command = _compose_command()
    if command is None:
        pytest.skip(
            "no Docker Compose on this machine (the compose plugin is a user tool, not a service)"
        )
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SECRET_KEY": "compose-config-check-" + "z" * 40},
    )
    assert result.returncode == 0, result.stderr
