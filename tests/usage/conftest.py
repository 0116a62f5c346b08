from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.prometheus.server import prometheus_server  # noqa: F401 - the real Prometheus
from usage import services


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Per-process caches (flavors, pods) keyed by ids a rolled-back test may reuse, and a
    sample throttle of the test's own (its keys live in the shared cache, which outlives
    a test: another test's node with the same id must not find its window spent)."""
    services._FLAVOR_CACHE.clear()
    services._POD_CACHE.clear()
    services._AGENT_SAMPLES_CACHE.clear()
    monkeypatch.setattr(
        services,
        "agent_sample_throttle",
        services.SampleThrottle(prefix=f"test-agent-sampled-{uuid.uuid4().hex}"),
    )
    yield
    services._FLAVOR_CACHE.clear()
    services._POD_CACHE.clear()
    services._AGENT_SAMPLES_CACHE.clear()
