"""What every environment shares, all from the environment (12-factor): never used alone.

``production`` (the default of manage.py, wsgi and celery), ``demo`` (make run) and ``test``
(pytest) start from here and each adds what only it does; nothing here asks which one runs.
With no DATABASE_URL and no REDIS_URL the portal runs on SQLite and a Celery broker that needs
no server (kombu's filesystem transport under ``.data/``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django_guid.integrations import CeleryIntegration

from core.env import env_bool, env_int, env_list, env_str
from portal.logs import logging_config

BASE_DIR = Path(__file__).resolve().parents[2]
DATA_DIR = Path(env_str("DATA_DIR", str(BASE_DIR / ".data")))

# The demo's and the tests' key; production refuses to start with it (production.py).
DEFAULT_SECRET_KEY = "insecure-default-key-for-the-local-demo-only-never-deploy-this"  # noqa: S105
SECRET_KEY = env_str("SECRET_KEY", DEFAULT_SECRET_KEY)
DEBUG = env_bool("DEBUG", False)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",  # login lockouts (django-axes)
    "django_guid",  # the request id (X-Request-ID) in logs and Celery tasks (portal.logs)
    "tenants",
    "identity",
    "quotas",
    "approvals",
    "gpu_agent",
    "usage",
    "advice",
    "alerts",
    "dashboards",
    "portal",
]

MIDDLEWARE = [
    # HTTP metrics for /metrics (django-prometheus): this one first, its pair last but axes.
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django_guid.middleware.guid_middleware",  # the request id, before anything logs
    "portal.middleware.RequestLogMiddleware",  # one log line per request, with its id
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.ContentSecurityPolicyMiddleware",
    "portal.middleware.ApiBodyLimitMiddleware",  # JSON 413 under /api/ before anything reads
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "portal.middleware.LoginLimitsMiddleware",  # before CSRF reads the login form
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.middleware.AuditSourceMiddleware",
    "core.pages.PageErrorMiddleware",  # a domain error a page let through -> its page
    # Outside the pages' error middleware and axes' lockout, so it counts the status sent.
    "portal.middleware.PrometheusAfterMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into the lockout page
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
AUTH_USER_MODEL = "tenants.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "portal:home"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.context_processors.inbox",  # the header's unread count, lazily
                "tenants.context_processors.address_tenant",  # error pages: a way back, lazily
            ],
        },
    },
]

# --- Database: DATABASE_URL, or SQLite under DATA_DIR --------------------------------------
DATABASE_URL = env_str("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
else:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(DATA_DIR / "portal.sqlite3"),
            # The demo's gunicorn, worker and beat write at once: writers queue up (IMMEDIATE
            # takes the write lock at BEGIN, so a reader never deadlocks upgrading), readers
            # do not wait for writers (WAL).
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache and Celery broker; without it, files under DATA_DIR ----------------------
REDIS_URL = env_str("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "core.cache.RedisCache",  # one Redis client per pool, not one per call
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "portal"),
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": 3600}
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "cache"),
        }
    }
    # kombu's filesystem transport, writing each message whole before it is visible.
    CELERY_BROKER_URL = "filesystem://localhost/"
    CELERY_BROKER_TRANSPORT = "portal.brokers:Transport"
    _broker_dir = DATA_DIR / "broker"
    for _folder in (_broker_dir / "queue", _broker_dir / "processed", _broker_dir / "control"):
        _folder.mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # else kombu writes ./control
        "store_processed": False,
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# GPU node agents: a node is stale after this long without a report; a desired MIG layout
# not applied by its deadline fails with the reason; join tokens expire.
AGENT_STALE_AFTER_S = env_int("AGENT_STALE_AFTER_S", 60)
AGENT_LAYOUT_DEADLINE_S = env_int("AGENT_LAYOUT_DEADLINE_S", 600)
# A quiet node's report (protocol 2, nothing changed) writes the node's last-report time at most
# this often (the fleet page's "last report" lags by up to this); at most half of
# AGENT_STALE_AFTER_S, so a reporting node is never marked stale.
AGENT_LAST_REPORT_WRITE_S = env_int("AGENT_LAST_REPORT_WRITE_S", 20)
if not 0 <= AGENT_LAST_REPORT_WRITE_S <= AGENT_STALE_AFTER_S // 2:
    raise ImproperlyConfigured(
        f"AGENT_LAST_REPORT_WRITE_S={AGENT_LAST_REPORT_WRITE_S} must be from 0 to half of "
        f"AGENT_STALE_AFTER_S ({AGENT_STALE_AFTER_S // 2})"
    )
# MIG through the GPU Operator: a node label follows its config into the ConfigMap this long
# later (the kubelet refreshes a mounted ConfigMap only after its sync period, ~1 min).
MIG_OPERATOR_SETTLE_S = env_int("MIG_OPERATOR_SETTLE_S", 90)
AGENT_JOIN_TOKEN_TTL_S = env_int("AGENT_JOIN_TOKEN_TTL_S", 3600)
# How long after a join token was used the same agent (the same agent key) may register with it
# again and get the same node back: its first answer may have been lost to a client timeout.
AGENT_REGISTER_RETRY_S = env_int("AGENT_REGISTER_RETRY_S", 600)
# An agent in a cluster joins with its projected ServiceAccount token (no join token): the
# audience the token must carry and the one account ("namespace/name") allowed to join.
AGENT_SERVICE_ACCOUNT_AUDIENCE = env_str("AGENT_SERVICE_ACCOUNT_AUDIENCE", "gpu-quota-portal")
AGENT_SERVICE_ACCOUNT = env_str("AGENT_SERVICE_ACCOUNT", "gpu-agent/gpu-agent")
# The queue cluster pushes go to (empty: the default queue). Tests with a real worker set it.
SYNC_QUEUE = env_str("SYNC_QUEUE", "")
# How many writes a push or reconcile sends to a cluster's API server at once (its HTTP
# connection pool is as large). 1 is one at a time; dependency order holds at any value.
KUBE_APPLY_CONCURRENCY = env_int("KUBE_APPLY_CONCURRENCY", 8)
if not 1 <= KUBE_APPLY_CONCURRENCY <= 64:
    raise ImproperlyConfigured(
        f"KUBE_APPLY_CONCURRENCY={KUBE_APPLY_CONCURRENCY} must be between 1 and 64"
    )
# Usage store: how long each resolution is kept, in days (raw samples, 5-minute, hourly and
# daily rollups); raw partitions created this many days ahead.
USAGE_RETENTION_DAYS = {
    "raw": env_int("USAGE_RETENTION_RAW_DAYS", 3),
    "5m": env_int("USAGE_RETENTION_5M_DAYS", 30),
    "1h": env_int("USAGE_RETENTION_1H_DAYS", 400),
    "1d": env_int("USAGE_RETENTION_1D_DAYS", 5 * 366),
}
USAGE_PARTITIONS_AHEAD_DAYS = env_int("USAGE_PARTITIONS_AHEAD_DAYS", 3)
USAGE_AGENT_SAMPLES = env_bool("USAGE_AGENT_SAMPLES", True)  # agents' reports -> samples
# At most one sample set per node this often, counted in the shared cache across every web
# process; agents report every 10 s.
USAGE_AGENT_SAMPLE_EVERY_S = env_int("USAGE_AGENT_SAMPLE_EVERY_S", 60)
# /metrics (Prometheus): a bearer token, and/or client networks allowed without one.
METRICS_TOKEN = env_str("METRICS_TOKEN", "")
METRICS_ALLOWED_CIDRS = env_list("METRICS_ALLOWED_CIDRS", [])
# The only directory a Prometheus source's credentials files (bearer token, basic-auth password)
# may be read from on the worker: what is read there is sent to the source's URL, so it holds
# those files and nothing else (not the portal's own secrets).
PROMETHEUS_SECRETS_DIR = env_str("PROMETHEUS_SECRETS_DIR", "/run/secrets/prometheus")
if not PROMETHEUS_SECRETS_DIR.startswith("/") or PROMETHEUS_SECRETS_DIR.rstrip("/") == "":
    raise ImproperlyConfigured(
        f"PROMETHEUS_SECRETS_DIR={PROMETHEUS_SECRETS_DIR!r} is not an absolute directory "
        "other than /"
    )
# Alert webhooks: each POST's timeout, the backoff between attempts (doubling up to the
# maximum) and how many attempts before a delivery is given up.
ALERT_WEBHOOK_TIMEOUT_S = env_int("ALERT_WEBHOOK_TIMEOUT_S", 5)
ALERT_WEBHOOK_BACKOFF_S = env_int("ALERT_WEBHOOK_BACKOFF_S", 30)
ALERT_WEBHOOK_BACKOFF_MAX_S = env_int("ALERT_WEBHOOK_BACKOFF_MAX_S", 3600)
ALERT_WEBHOOK_MAX_ATTEMPTS = env_int("ALERT_WEBHOOK_MAX_ATTEMPTS", 8)
# The what-if's calibration: how far (in percent) the replay of the recorded period may be
# from what was recorded before the page warns that its "after" is a direction, not a forecast.
WHAT_IF_TOLERANCE_PCT = env_int("WHAT_IF_TOLERANCE_PCT", 25)
if not 1 <= WHAT_IF_TOLERANCE_PCT <= 1000:
    raise ImproperlyConfigured(
        f"WHAT_IF_TOLERANCE_PCT={WHAT_IF_TOLERANCE_PCT} is not a percentage from 1 to 1000"
    )
# Webhooks go to public addresses only: loopback, link-local (cloud metadata), private and
# other internal addresses are refused, when saved and when sent, unless named here (comma-
# separated host names, addresses or networks: "hooks.internal,10.20.0.0/16").
WEBHOOK_ALLOWED_HOSTS = env_list("WEBHOOK_ALLOWED_HOSTS", [])
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes the worker's database connections before and after every task
# unless this is set; then it closes them every this many tasks, and portal/celery.py closes
# them as Django does after a request (past CONN_MAX_AGE, or unusable after an error): not a
# new PostgreSQL connection and backend for every task.
CELERY_DB_REUSE_MAX = 500
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

# --- Auth ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
API_TOKEN_TTL_DAYS = env_int("API_TOKEN_TTL_DAYS", 90)
# Local passwords: Argon2id (identity/passwords.py says why); hashes stored by the others are
# still read and rewritten as Argon2id at their owner's next sign-in.
PASSWORD_HASHERS = [
    "identity.passwords.Argon2idPasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]
# --- Sign-in through the company's identity provider (identity app) --------------------------
# Local accounts (the login form): an admin may turn the form off once everyone signs in
# through OIDC; Django admin's own form and POST /api/v1/auth/token/ follow the same switch
# for password checks against local accounts (LDAP passwords still work where configured).
LOCAL_LOGIN_ENABLED = env_bool("LOCAL_LOGIN_ENABLED", True)

# OpenID Connect (mozilla-django-oidc, authorization code flow with PKCE). Endpoints come from
# the issuer's discovery document (<issuer>/.well-known/openid-configuration), fetched on first
# use and cached; an OIDC_OP_*_ENDPOINT variable overrides the one it names.
OIDC_ISSUER = env_str("OIDC_ISSUER").rstrip("/")
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "single sign-on")
OIDC_RP_CLIENT_ID = env_str("OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("OIDC_CLIENT_SECRET")  # or OIDC_CLIENT_SECRET_FILE
OIDC_RP_SCOPES = " ".join(env_list("OIDC_SCOPES", ["openid", "email", "profile"]))
OIDC_RP_SIGN_ALGO = env_str("OIDC_SIGN_ALGO", "RS256")
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_EMAIL_CLAIM = env_str("OIDC_EMAIL_CLAIM", "email")
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_TIMEOUT = env_int("OIDC_TIMEOUT_SECONDS", 10)
OIDC_VERIFY_SSL = env_bool("OIDC_VERIFY_SSL", True)
OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT")
OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT")
OIDC_OP_LOGOUT_ENDPOINT = env_str("OIDC_OP_LOGOUT_ENDPOINT")
OIDC_STORE_ID_TOKEN = True  # the id_token_hint of RP-initiated logout
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = 15 * 60
OIDC_ENABLED = bool(OIDC_ISSUER and OIDC_RP_CLIENT_ID)
if OIDC_ISSUER and not OIDC_RP_CLIENT_ID:
    raise ImproperlyConfigured("OIDC_ISSUER is set but OIDC_CLIENT_ID is not: set both.")

# LDAP (django-auth-ldap): the login form checks the password against the directory first.
LDAP_SERVER_URI = env_str("LDAP_SERVER_URI")
LDAP_ENABLED = bool(LDAP_SERVER_URI)
AUTH_LDAP_SERVER_URI = LDAP_SERVER_URI
AUTH_LDAP_BIND_DN = env_str("LDAP_BIND_DN")
AUTH_LDAP_BIND_PASSWORD = env_str("LDAP_BIND_PASSWORD")  # or LDAP_BIND_PASSWORD_FILE
AUTH_LDAP_START_TLS = env_bool("LDAP_START_TLS", False)
LDAP_USER_BASE = env_str("LDAP_USER_BASE")
LDAP_USER_FILTER = env_str("LDAP_USER_FILTER", "(uid=%(user)s)")
LDAP_GROUP_BASE = env_str("LDAP_GROUP_BASE")
LDAP_GROUP_FILTER = env_str("LDAP_GROUP_FILTER", "(objectClass=groupOfNames)")
LDAP_CA_CERT_FILE = env_str("LDAP_CA_CERT_FILE")
AUTH_LDAP_USER_ATTR_MAP = {
    "first_name": env_str("LDAP_ATTR_FIRST_NAME", "givenName"),
    "last_name": env_str("LDAP_ATTR_LAST_NAME", "sn"),
    "email": env_str("LDAP_ATTR_EMAIL", "mail"),
}
AUTH_LDAP_ALWAYS_UPDATE_USER = True
AUTH_LDAP_CACHE_TIMEOUT = 0  # groups are read at each sign-in: they make roles
if LDAP_ENABLED:
    if not LDAP_USER_BASE or not LDAP_GROUP_BASE:
        raise ImproperlyConfigured(
            "LDAP_SERVER_URI is set: set LDAP_USER_BASE and LDAP_GROUP_BASE too."
        )
    try:
        import ldap
        from django_auth_ldap.config import GroupOfNamesType, LDAPSearch
    except ImportError as exc:
        raise ImproperlyConfigured(
            "LDAP_SERVER_URI is set but LDAP sign-in is not installed: install Debian's "
            "libldap2-dev and libsasl2-dev, then pip install -r requirements-ldap.lock "
            "(make does it when the headers are there; the image has it)."
        ) from exc

    AUTH_LDAP_USER_SEARCH = LDAPSearch(LDAP_USER_BASE, ldap.SCOPE_SUBTREE, LDAP_USER_FILTER)
    AUTH_LDAP_GROUP_SEARCH = LDAPSearch(LDAP_GROUP_BASE, ldap.SCOPE_SUBTREE, LDAP_GROUP_FILTER)
    AUTH_LDAP_GROUP_TYPE = GroupOfNamesType(name_attr="cn")
    AUTH_LDAP_FIND_GROUP_PERMS = False
    AUTH_LDAP_CONNECTION_OPTIONS = {ldap.OPT_NETWORK_TIMEOUT: env_int("LDAP_TIMEOUT_SECONDS", 10)}
    if LDAP_CA_CERT_FILE:
        AUTH_LDAP_GLOBAL_OPTIONS = {ldap.OPT_X_TLS_CACERTFILE: LDAP_CA_CERT_FILE}

# Login lockouts (django-axes, failures kept in the database): LOGIN_FAILURE_LIMIT wrong
# passwords for one username from one address lock that pair out for LOGIN_COOLOFF_MINUTES,
# on the login page, Django admin and POST /api/v1/auth/token/ alike, for local and directory
# passwords (they all authenticate through these backends); a successful login clears the
# count. Order matters: axes first (its lockout applies to every form), then the directory,
# then local accounts (only while the local form is on), then OIDC (which only answers its
# callback).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    *(["identity.directory.PortalLDAPBackend"] if LDAP_ENABLED else []),
    "identity.backends.LocalBackend",
    *(["identity.backends.PortalOIDCBackend"] if OIDC_ENABLED else []),
]
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # successful logins are not logged by axes
AXES_LOCKOUT_CALLABLE = "portal.middleware.lockout_response"  # JSON under /api/, else a page
AXES_HTTP_RESPONSE_CODE = 429
AXES_CLIENT_IP_CALLABLE = "portal.middleware.client_ip"
# Endpoints open to anonymous callers (the token endpoint, agent registration, the login
# page) read a body of at most this many bytes; a larger one is refused with 413.
ANONYMOUS_BODY_MAX_BYTES = env_int("ANONYMOUS_BODY_MAX_BYTES", 16 * 1024)
# Password checks per client address a minute, on the login page and the token endpoint alike
# (counted in the cache); past it, 429 with Retry-After, whatever the username.
LOGIN_THROTTLE_RATE = env_str("LOGIN_THROTTLE_RATE", "20/min")
# Whom a lead (or an admin) may add to a team: "existing" (only accounts the portal already
# knows: people who signed in once, or whom an admin or the directory created) or "any" (an
# unknown username becomes a local account with no password, usable once its owner signs in
# through the company's sign-in or an admin sets a password).
TEAM_ADD_USERS = env_str("TEAM_ADD_USERS", "existing")
if TEAM_ADD_USERS not in ("existing", "any"):
    raise ImproperlyConfigured(f"TEAM_ADD_USERS={TEAM_ADD_USERS!r}: give 'existing' or 'any'.")
# Behind reverse proxies: how many, so the client address is read from X-Forwarded-For (the
# proxies' own entries, counted from the right); 0 (direct) uses the socket's address.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0)

# --- Internationalisation: UTC everywhere --------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files, served by the app itself (WhiteNoise) -----------------------------------
# collectstatic writes hashed names with gzip and brotli copies; WhiteNoise serves those with
# "Cache-Control: max-age=315360000, public, immutable" and the encoding the browser accepts.
# The demo (make run, which runs collectstatic first) the same for what was collected, the rest
# from the apps' folders by plain name; the test suite everything by plain name (test.py).
STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(DATA_DIR / "static")))
STATICFILES_DIRS = [BASE_DIR / "portal" / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "dashboards.staticfiles.HashedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = False  # only what collectstatic wrote (demo and tests: finders too)
# Source maps (the API docs' 20 MB of them) are for a developer's tools: not worth compressing.
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (
    *("jpg", "jpeg", "png", "gif", "webp", "zip", "gz", "tgz", "bz2", "tbz", "xz", "br"),
    *("swf", "flv", "woff", "woff2", "3gp", "3gpp", "asf", "avi", "m4v", "mov", "mp4"),
    *("mpeg", "mpg", "webm", "wmv"),
    "map",
)

# --- Email ---------------------------------------------------------------------------------
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if env_str("EMAIL_HOST")
    else "django.core.mail.backends.console.EmailBackend",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-portal@localhost")
PORTAL_URL = env_str("PORTAL_URL", "http://127.0.0.1:8000")  # links in emails
# The namespace the portal runs in (deploy/kubernetes): never a tenant's (tenants.namespaces).
PORTAL_NAMESPACE = env_str("PORTAL_NAMESPACE", "gpu-quota-portal")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- Security -------------------------------------------------------------------------------
# HTTPS only (redirect, HSTS, Secure cookies) is production's (production.py); the demo and the
# test suite talk plain HTTP. What follows holds everywhere.
# Behind TRUSTED_PROXY_COUNT reverse proxies a request is HTTPS when the proxy says so: it must
# set (and never pass on from the client) X-Forwarded-Proto. With no proxy (0, the default) the
# header is a client's claim and is ignored: gunicorn serves TLS itself.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if TRUSTED_PROXY_COUNT > 0 else None
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^livez$", r"^readyz$"]  # the probes speak plain HTTP
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True  # page scripts read the token from the form, never the cookie
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (portal.middleware): scripts only from the portal itself, never
# inline; styles may be inline (Swagger UI and chart libraries set style attributes).
CONTENT_SECURITY_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "frame-ancestors": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
}
CONTENT_SECURITY_POLICY_REPORT_ONLY = env_bool("CSP_REPORT_ONLY", False)

# --- REST API --------------------------------------------------------------------------------
# Rate limits per caller (core.api.throttling), counted in the cache. A GPU node's agent
# calls once per 10 s (its report; about a dozen calls in a cycle that changes layouts): 120/min
# per node token is ample, and nodes never share a bucket, so 1,000 agents fit. The test suite
# runs without them (test.py); API_THROTTLE=false turns them off (a benchmark's clients).
API_THROTTLE_ENABLED = env_bool("API_THROTTLE", True)
API_THROTTLE_RATES = {
    "anon": env_str("API_THROTTLE_ANON", "60/min"),  # by address: join tokens, docs, schema
    "user": env_str("API_THROTTLE_USER", "600/min"),  # a signed-in browser session
    "token": env_str("API_THROTTLE_TOKEN", "600/min"),  # one automation token
    "agent": env_str("API_THROTTLE_AGENT", "120/min"),  # one node token
}
API_THROTTLE_AUTH_SCOPES = {"tenants.ApiToken": "token", "gpu_agent.NodeToken": "agent"}
_RATES = {f"API_THROTTLE_{scope.upper()}": rate for scope, rate in API_THROTTLE_RATES.items()}
for _name, _rate in {**_RATES, "LOGIN_THROTTLE_RATE": LOGIN_THROTTLE_RATE}.items():
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", _rate):
        raise ImproperlyConfigured(f"{_name}={_rate!r} is not a rate (e.g. 600/min, 10/s, 5000/h)")
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.PagePagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["core.api.throttling.ApiRateThrottle"],
    # 0: the socket's address. (None would make DRF key anonymous callers on the whole
    # X-Forwarded-For header, which a direct client writes as it likes.)
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
    "DEFAULT_PARSER_CLASSES": [
        "core.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],  # demo: + browsable
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU quota portal API",
    "DESCRIPTION": "Tenants, quotas, clusters and flavors of shared GPU clusters.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema.add_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "TenantStateEnum": "tenants.choices.TenantState",
        "SyncStateEnum": "quotas.choices.SyncState",
        "ProbeStateEnum": "gpu_agent.models.ProbeState",
        "AlertStateEnum": "alerts.choices.AlertState",
        "EnforcementEnum": "quotas.choices.Enforcement",
        "FairSharingEnum": "quotas.choices.FairSharing",
        "GroupRoleEnum": "identity.choices.GroupRole",
        "MembershipRoleEnum": "tenants.choices.MembershipRole",
    },
}

# --- Logs and the request id (portal.logs) ---------------------------------------------------
# One line per record to standard error: LOG_FORMAT "json" (production's default) or "text"
# (the demo's and the tests'), each with the request id; production.py builds its own LOGGING.
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
LOG_FORMAT = env_str("LOG_FORMAT", "text")
LOGGING = logging_config(LOG_FORMAT, LOG_LEVEL)
# django-guid: the caller's X-Request-ID when it is a UUID (an ingress controller's), else a new
# one; every response carries it, and the Celery tasks a request sends log it too.
DJANGO_GUID = {
    "GUID_HEADER_NAME": "X-Request-ID",
    "VALIDATE_GUID": True,
    # portal.celery makes the worker and beat log through LOGGING.
    "INTEGRATIONS": [CeleryIntegration()],
}
