"""Fixtures for the security tests: a cache namespace of the test's own (same backend)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.conf import settings as django_settings


@pytest.fixture(autouse=True)
def _own_cache_keys(settings: Any) -> None:
    """Throttle and lockout counters live in the real cache (Redis with REDIS_URL): give this
    test a key prefix of its own so that earlier runs and other tests never share a counter."""
    caches = {name: dict(conf) for name, conf in django_settings.CACHES.items()}
    caches["default"]["KEY_PREFIX"] = f"test-{uuid.uuid4().hex}"
    settings.CACHES = caches


# The browser harness of tests/e2e/ (Debian's chromium via Playwright) for the CSP test here;
# its hooks stop chromium as soon as the next test does not use it.
from tests.e2e.conftest import (  # noqa: E402, F401
    browse,
    browser,
    live_world,
    pytest_runtest_teardown,
    pytest_sessionfinish,
)
