from __future__ import annotations

from collections.abc import Iterator

import pytest

from usage import services


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Per-process caches (flavors, pods) keyed by ids a rolled-back test may reuse."""
    services._FLAVOR_CACHE.clear()
    services._POD_CACHE.clear()
    services._LAST_SAMPLED.clear()
    yield
    services._FLAVOR_CACHE.clear()
    services._POD_CACHE.clear()
