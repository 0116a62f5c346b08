"""Fixtures for the tenants tests."""

from __future__ import annotations

import uuid

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _private_cache(settings: object) -> None:
    """A cache of this test's own: the login throttle counts attempts in the cache, and the
    default one is a folder shared with the developer's server and with earlier runs."""
    settings.CACHES = {  # type: ignore[attr-defined]
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"test-{uuid.uuid4()}",
        }
    }
    cache.clear()
