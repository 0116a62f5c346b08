"""The test suite's settings (pyproject.toml: [tool.pytest.ini_options] DJANGO_SETTINGS_MODULE).

Plain HTTP, the built-in SECRET_KEY, fast password hashing, no API rate limits (tests of the
limits turn them on), static files by their plain names (nothing collected), and tasks the code
under test enqueues kept away from a developer's worker. Processes a test starts (a Celery
worker) name this module too.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ImproperlyConfigured

from core.env import env_str

_REDIS_DATABASES = 16  # Redis's default number of databases: 0 to 15


def _isolate_xdist_worker() -> None:
    """Under pytest-xdist (``make test``: ``-n``), worker ``gwN`` gets Redis database REDIS_URL's
    + N and its own data directory (``DATA_DIR``/xdist-gwN), written into the environment before
    the shared settings read it, so the processes a test starts (Celery workers, ``manage.py``)
    inherit them: one worker's Celery tasks, cache keys, broker and cache files never reach
    another's. pytest-django gives each its own test database (``test_<name>_gwN``). Done once:
    a process a worker starts sees ``TEST_ISOLATED_WORKER`` and keeps what it inherited."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker or os.environ.get("TEST_ISOLATED_WORKER") == worker:
        return
    index = int(worker.removeprefix("gw"))
    redis_url = env_str("REDIS_URL", "")
    if redis_url:
        parts = urlsplit(redis_url)
        base = int(parts.path.strip("/") or 0)
        if base + index >= _REDIS_DATABASES:
            raise ImproperlyConfigured(
                f"REDIS_URL={redis_url!r}: test worker {worker} would need Redis database "
                f"{base + index}; use a lower database number or fewer workers (-n)"
            )
        os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{base + index}"))
        os.environ.pop("REDIS_URL_FILE", None)
    data_dir = Path(env_str("DATA_DIR", str(Path(__file__).resolve().parents[2] / ".data")))
    os.environ["DATA_DIR"] = str(data_dir / f"xdist-{worker}")
    os.environ["TEST_ISOLATED_WORKER"] = worker


_isolate_xdist_worker()

from core.env import env_bool  # noqa: E402 - after the worker's environment is set
from portal.settings.base import *  # noqa: E402, F403
from portal.settings.base import REDIS_URL, STATIC_ROOT  # noqa: E402

SECURE_HSTS_SECONDS = 0
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False

# MD5: thousands of users are created; tests/identity/test_passwords.py puts production's back.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Shared counters would make unrelated tests flaky (tests/security/test_api_throttling.py).
API_THROTTLE_ENABLED = env_bool("API_THROTTLE", False)

# Tasks the code under test enqueues go to a queue no worker of the developer's reads; tests
# that run a real worker name their own queue. Without Redis, an in-memory broker.
CELERY_TASK_DEFAULT_QUEUE = "portal-tests"
if not REDIS_URL:
    CELERY_BROKER_URL = "memory://"

# Every static file by its plain name, from the apps' folders: the suite runs no collectstatic.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
