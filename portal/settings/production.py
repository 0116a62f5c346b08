"""Production: a SECRET_KEY of its own, HTTPS only, rate limits on (the default settings).

manage.py, portal.wsgi and portal.celery load this module unless DJANGO_SETTINGS_MODULE names
another; the image, docker-compose.yml and deploy/kubernetes name it. No environment variable
turns its guards off: a local demo uses ``portal.settings.demo`` (make run) instead.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_int, env_str
from portal.logs import logging_config
from portal.settings.base import *  # noqa: F403
from portal.settings.base import DEFAULT_SECRET_KEY, LOG_LEVEL, SECRET_KEY

if SECRET_KEY == DEFAULT_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY is the built-in default: set SECRET_KEY (or SECRET_KEY_FILE) to a long "
        "random value. For a local demo, use the demo settings instead (make run, or "
        "DJANGO_SETTINGS_MODULE=portal.settings.demo)."
    )

# HTTPS only. Behind a TLS-terminating proxy set TRUSTED_PROXY_COUNT (base.py); for a
# plain-HTTP trial of the image, SECURE_SSL_REDIRECT and the *_COOKIE_SECURE variables may be
# set to false, each by its own name.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)

# Logs as JSON lines (portal.logs), one object a line with the request id, for the cluster's log
# collector; LOG_FORMAT=text gives readable lines instead.
LOG_FORMAT = env_str("LOG_FORMAT", "json")
LOGGING = logging_config(LOG_FORMAT, LOG_LEVEL)
