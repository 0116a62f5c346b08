"""What the probes ask: is this process up (liveness), can it serve (readiness).

Liveness is the process alone: a database or Redis outage must not restart every web pod.
Readiness checks what every request needs: the database (``SELECT 1``), the Django cache (a set
and get round trip when it is Redis; a local cache passes) and the Celery broker (a ``PING``
when it is Redis; the demo's filesystem broker and the suite's in-memory one are local and
pass). The checks run at once, each in its own thread, and the answer waits for them at most
``READINESS_TIMEOUT_S``: a check still waiting then fails as "no answer". Reasons are short and
carry no secrets (a URL's password is masked).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from portal.celery import app

READINESS_TIMEOUT_S = 2.0
# One network call's own limit: under the total, so a refused or slow server is named as such.
CALL_TIMEOUT_S = 1.5
LOCAL_BROKERS = {"filesystem", "memory"}
REDIS_SCHEMES = {"redis", "rediss", "unix"}
_CREDENTIALS = re.compile(r"(?<=://)[^/@\s]*@")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Check:
    """One readiness check: its name, whether it passed and why (a few words for people)."""

    name: str
    ok: bool
    reason: str


def _masked(text: str) -> str:
    """The first line of an error, with any ``user:password@`` of a URL masked, 200 at most."""
    line = (text.strip().splitlines() or [""])[0]
    return _CREDENTIALS.sub("***@", line)[:200]


def error_words(error: BaseException) -> str:
    """An error in a line: its kind and its first line, no password."""
    detail = _masked(str(error))
    kind = type(error).__name__
    return f"{kind}: {detail}" if detail else kind


def _failure(name: str, error: BaseException) -> Check:
    """The answer is anonymous (the kubelet asks without credentials), so it names only the kind
    of error; the error's own words (host names, addresses) go to the log."""
    logger.warning("readiness: %s failed: %s", name, error_words(error))
    return Check(name, False, f"{type(error).__name__} (the portal's log has the details)")


def check_database() -> Check:
    """``SELECT 1`` on the default database, on this thread's own connection, closed after."""
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:  # any failure is the answer
        return _failure("database", error)
    finally:
        connection.close()
    return Check("database", True, "SELECT 1 answered")


def check_cache() -> Check:
    """A set and get round trip on the configured cache when it is Redis; a local one passes."""
    cache = caches["default"]
    if not isinstance(cache, RedisCache):
        return Check("cache", True, f"local ({type(cache).__name__}), not checked")
    key = f"readyz:{uuid.uuid4().hex}"
    try:
        cache.set(key, "ok", timeout=10)
        value = cache.get(key)
        cache.delete(key)
    except Exception as error:  # any failure is the answer
        return _failure("cache", error)
    if value != "ok":
        return Check("cache", False, "Redis did not give back what was just written")
    return Check("cache", True, "Redis set and get answered")


def check_broker() -> Check:
    """``PING`` to the Celery broker when it is Redis; a local transport passes; another
    transport (AMQP) is asked for a connection, once."""
    url = str(app.conf.broker_url or "")  # as configured now
    scheme = urlsplit(url).scheme.split("+")[0]
    if scheme in LOCAL_BROKERS:
        return Check("broker", True, f"local ({scheme}), not checked")
    try:
        if scheme in REDIS_SCHEMES:
            client = redis.Redis.from_url(
                url, socket_connect_timeout=CALL_TIMEOUT_S, socket_timeout=CALL_TIMEOUT_S
            )
            try:
                client.ping()
            finally:
                client.close()
            return Check("broker", True, "Redis PING answered")
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, timeout=CALL_TIMEOUT_S)
        return Check("broker", True, f"{scheme} connection made")
    except Exception as error:  # any failure is the answer
        return _failure("broker", error)


READINESS_CHECKS: dict[str, Callable[[], Check]] = {
    "database": check_database,
    "cache": check_cache,
    "broker": check_broker,
}


def readiness(timeout: float = READINESS_TIMEOUT_S) -> list[Check]:
    """Every readiness check, run at once; one without an answer within ``timeout`` fails."""
    pool = ThreadPoolExecutor(max_workers=len(READINESS_CHECKS), thread_name_prefix="readyz")
    try:
        futures = {name: pool.submit(check) for name, check in READINESS_CHECKS.items()}
        wait_for(futures.values(), timeout=timeout)
        results = []
        for name, future in futures.items():
            if not future.done():
                results.append(Check(name, False, f"no answer within {timeout:g} s"))
            elif (error := future.exception()) is not None:
                results.append(_failure(name, error))
            else:
                results.append(future.result())
        return results
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # a hung check ends on its own


def pending_migrations(alias: str = "default") -> list[str]:
    """The migrations of this release the database has not applied (``migrate --check``'s
    question), as ``app.name``; raises the database's error when it cannot be asked."""
    connection = connections[alias]
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    finally:
        connection.close()
    return [f"{migration.app_label}.{migration.name}" for migration, _backwards in plan]
