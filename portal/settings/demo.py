"""The local demo (make run, make manage): DEBUG, the built-in SECRET_KEY, plain HTTP.

Served by gunicorn on 127.0.0.1 with a Celery worker and beat beside it, on SQLite and a
filesystem broker under DATA_DIR unless DATABASE_URL / REDIS_URL say otherwise. Never deploy
it: production is ``portal.settings.production``.
"""

from __future__ import annotations

from core.env import env_bool, env_list
from portal.settings.base import *  # noqa: F403
from portal.settings.base import REST_FRAMEWORK, STATIC_ROOT

DEBUG = env_bool("DEBUG", True)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])

# Plain HTTP on the developer's machine: no redirect, no HSTS, cookies without Secure.
SECURE_HSTS_SECONDS = 0
SECURE_SSL_REDIRECT = False
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False

# make run collects the static files first (hashed, compressed, as in production); a file added
# since is served from its app's folder by its plain name.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns when it is missing
WHITENOISE_USE_FINDERS = True

if DEBUG:
    REST_FRAMEWORK = {
        **REST_FRAMEWORK,
        "DEFAULT_RENDERER_CLASSES": [
            "rest_framework.renderers.JSONRenderer",
            "rest_framework.renderers.BrowsableAPIRenderer",
        ],
    }
