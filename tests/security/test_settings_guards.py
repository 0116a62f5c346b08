"""Production's guards hold whatever runs it: a test runner, DEBUG or a TESTING variable change
nothing. Each environment is a settings module of its own (portal/settings/: production, demo,
test over base); none asks which program loaded it. Checked in fresh processes (settings load
once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.portal.test_settings import PRODUCTION

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ROOT / "portal" / "settings"
# What a runner-sniffing switch would see: pytest imported, its variable set, TESTING=true.
RUNNER = {"TESTING": "true", "PYTEST_CURRENT_TEST": "tests/x.py::test_x (call)"}

SHOW = """
import json
import django
django.setup()
from django.conf import settings as s
print(json.dumps({
    "module": s.SETTINGS_MODULE,
    "hsts": [s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD],
    "ssl_redirect": s.SECURE_SSL_REDIRECT,
    "secure_cookies": [s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE],
    "throttles": s.API_THROTTLE_ENABLED,
    "hasher": s.PASSWORD_HASHERS[0],
    "static": s.STORAGES["staticfiles"]["BACKEND"],
    "finders": s.WHITENOISE_USE_FINDERS,
}))
"""
IN_A_RUNNER = "import pytest  # imported first, as inside a test run\n" + SHOW


def python(code: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in the project, with only the given settings variables set."""
    keep = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE", "DEBUG"}}
    keep = {k: v for k, v in keep.items() if not k.startswith(("SECRET_KEY", "SECURE_", "API_"))}
    keep = {k: v for k, v in keep.items() if not k.endswith("_COOKIE_SECURE")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**keep, **env, "DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_refuses_the_default_secret_key_inside_a_test_runner_too(tmp_path):
    env = {k: v for k, v in PRODUCTION.items() if k != "SECRET_KEY"}
    for extra in ({}, RUNNER, {**RUNNER, "DEBUG": "true"}):
        done = python(
            IN_A_RUNNER,
            {**env, **extra, "DJANGO_SETTINGS_MODULE": "portal.settings.production"},
            tmp_path,
        )
        assert done.returncode != 0, extra
        assert "SECRET_KEY is the built-in default" in done.stderr, extra


def test_production_is_https_only_and_rate_limited_inside_a_test_runner_too(tmp_path):
    for extra in ({}, RUNNER, {**RUNNER, "DEBUG": "true"}):
        done = python(
            IN_A_RUNNER,
            {**PRODUCTION, **extra, "DJANGO_SETTINGS_MODULE": "portal.settings.production"},
            tmp_path,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen["module"] == "portal.settings.production"
        assert seen["hsts"] == [31536000, True, True], extra
        assert seen["ssl_redirect"] is True, extra
        assert seen["secure_cookies"] == [True, True], extra
        assert seen["throttles"] is True, extra
        assert seen["hasher"] == "identity.passwords.Argon2idPasswordHasher", extra
        assert seen["static"] == "dashboards.staticfiles.HashedStaticFilesStorage", extra
        assert seen["finders"] is False, extra


def test_the_test_settings_are_chosen_by_name_not_by_sniffing(tmp_path):
    """What the suite loosens is in portal/settings/test.py, loaded because pyproject.toml names
    it; the same module outside pytest loosens the same things."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["pytest"]["ini_options"]["DJANGO_SETTINGS_MODULE"] == (
        "portal.settings.test"
    )
    done = python(SHOW, {"DJANGO_SETTINGS_MODULE": "portal.settings.test"}, tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["hasher"] == "django.contrib.auth.hashers.MD5PasswordHasher"
    assert seen["throttles"] is False
    assert seen["ssl_redirect"] is False
    assert seen["static"] == "django.contrib.staticfiles.storage.StaticFilesStorage"


def test_manage_wsgi_and_celery_default_to_production(tmp_path):
    show = "from django.conf import settings; print(settings.SETTINGS_MODULE)"
    programs = {
        "manage.py": ["manage.py", "shell", "-v", "0", "-c", show],
        "portal.wsgi": ["-c", f"import portal.wsgi; {show}"],
        "portal.celery": ["-c", f"import django, portal.celery; django.setup(); {show}"],
    }
    for name, args in programs.items():
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"DJANGO_SETTINGS_MODULE", "DEBUG", "SECRET_KEY", "SECRET_KEY_FILE"}
        }
        done = subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env={**env, **PRODUCTION, "DATA_DIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{name}: {done.stderr}"
        assert done.stdout.strip().splitlines()[-1] == "portal.settings.production", name


def test_no_settings_module_asks_which_program_runs_it():
    """``grep -rn TESTING portal/settings*`` finds nothing: no switch, no sniffing of sys.modules
    or of pytest's variables; one module per environment."""
    assert not (ROOT / "portal" / "settings.py").exists()
    modules = sorted(path.name for path in SETTINGS.glob("*.py"))
    assert modules == ["__init__.py", "base.py", "demo.py", "production.py", "test.py"]
    for path in SETTINGS.glob("*.py"):
        text = path.read_text()
        for word in ("TESTING", "sys.modules", "PYTEST", 'pytest" in'):
            assert word not in text, f"{path.relative_to(ROOT)} says {word}"
