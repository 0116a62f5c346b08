"""The test suite's settings (pyproject.toml: [tool.pytest.ini_options] DJANGO_SETTINGS_MODULE).

Plain HTTP, the built-in SECRET_KEY, fast password hashing, no API rate limits (tests of the
limits turn them on), static files by their plain names (nothing collected), and tasks the code
under test enqueues kept away from a developer's worker. Processes a test starts (a Celery
worker) name this module too.
"""

from __future__ import annotations

from core.env import env_bool
from portal.settings.base import *  # noqa: F403
from portal.settings.base import DATABASES, REDIS_URL, STATIC_ROOT

SECURE_HSTS_SECONDS = 0
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False

# The test databases are thrown away: a commit (a transactional test's, a Celery worker's) need
# not wait for PostgreSQL to write its WAL to the disk. What a commit makes visible, and when,
# is the same; only a crash of the server could lose it. (CI's 2-core machine waited seconds
# on the disk per commit-heavy test.)
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = f"{_options.get('options', '')} -c synchronous_commit=off".strip()

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
