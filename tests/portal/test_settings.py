"""Configuration from the environment, checked in fresh processes (settings load once).

``manage()`` runs manage.py as an operator does: no DJANGO_SETTINGS_MODULE, so the production
settings (its default), unless ``env`` names another module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "x" * 20 + "a-long-random-production-secret-key-0123456789",
    "ALLOWED_HOSTS": "portal.example.com",
    "DATABASE_URL": "postgres://portal:secret@db.example.com:5432/portal",
    "REDIS_URL": "redis://cache.example.com:6379/0",
}


def manage(*args: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DEBUG",
            "SECRET_KEY",
            "DATABASE_URL",
            "REDIS_URL",
            "ALLOWED_HOSTS",
            "PYTEST_CURRENT_TEST",
            "DJANGO_SETTINGS_MODULE",
        }
    }
    clean.update(env)
    clean["DATA_DIR"] = str(tmp_path)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_for_a_production_configuration(tmp_path):
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION, tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_with_the_default_secret_key(tmp_path):
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    result = manage("check", env=env, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "SECRET_KEY is the built-in default" in result.stderr
    assert "portal.settings.demo" in result.stderr  # what to use for a local demo instead


def test_secret_key_can_come_from_a_file(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("file-secret-" + "y" * 50 + "\n")
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    env["SECRET_KEY_FILE"] = str(secret)
    result = manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from django.conf import settings; print(settings.SECRET_KEY)",
        env=env,
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "file-secret-" + "y" * 50


@pytest.mark.parametrize(("name", "value"), [("DEBUG", "maybe"), ("EMAIL_PORT", "twenty-five")])
def test_a_bad_value_fails_loudly_naming_the_variable(tmp_path, name, value):
    result = manage("check", env={**PRODUCTION, name: value}, tmp_path=tmp_path)
    assert result.returncode != 0
    assert f"{name}={value!r}" in result.stderr


def test_embedded_defaults_need_no_server(tmp_path):
    """With no DATABASE_URL and no REDIS_URL: SQLite and a filesystem broker under DATA_DIR
    (make run's settings)."""
    code = (
        "from django.conf import settings; from portal.celery import app; "
        "print(settings.DATABASES['default']['ENGINE']); print(settings.CELERY_BROKER_URL); "
        "print(settings.CACHES['default']['BACKEND']); "
        "print(app.connection_for_write().transport_cls)"
    )
    demo = {"DJANGO_SETTINGS_MODULE": "portal.settings.demo"}
    result = manage("shell", "-v", "0", "-c", code, env=demo, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    engine, broker, cache, transport = result.stdout.split()
    assert engine == "django.db.backends.sqlite3"
    assert broker == "filesystem://localhost/"
    assert (
        transport == "portal.brokers:Transport"
    )  # messages written whole (tests/portal/test_brokers.py)
    assert cache.endswith("FileBasedCache")
    assert (tmp_path / "broker" / "queue").is_dir()


def test_production_stores_passwords_as_argon2id_and_reads_pbkdf2(tmp_path):
    """New and changed passwords: Argon2id (identity/passwords.py); PBKDF2's hashes (the
    previous default) are still read, and rewritten at their next sign-in
    (tests/identity/test_passwords.py)."""
    code = (
        "from django.contrib.auth.hashers import get_hasher, make_password; "
        "from django.conf import settings; print(*settings.PASSWORD_HASHERS); "
        "print(make_password('a-password').rsplit('$', 2)[0]); print(get_hasher('pbkdf2_sha256').iterations)"
    )
    result = manage("shell", "-v", "0", "-c", code, env=PRODUCTION, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    hashers, encoded, iterations = result.stdout.splitlines()
    assert hashers.split()[:2] == [
        "identity.passwords.Argon2idPasswordHasher",
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    ]
    assert "MD5" not in hashers
    assert encoded == "argon2$argon2id$v=19$m=19456,t=2,p=1"
    assert int(iterations) >= 600_000


def test_production_uses_postgres_and_redis_from_the_environment(tmp_path):
    code = (
        "from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['ENGINE'], d['HOST'], d['NAME']); print(settings.CELERY_BROKER_URL); "
        "print(settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, settings.SECURE_SSL_REDIRECT)"
    )
    result = manage("shell", "-v", "0", "-c", code, env=PRODUCTION, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "django.db.backends.postgresql db.example.com portal"
    assert lines[1] == "redis://cache.example.com:6379/0"
    assert lines[2] == "True True True"
