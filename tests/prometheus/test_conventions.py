"""Every family the portal's /metrics exposes follows Prometheus' naming conventions: promtool's
own linter finds nothing, names carry their unit in base units, ``_total`` only on counters,
and labels come from a small fixed set with values from the portal's bounded lists.
django-prometheus' HTTP families keep the library's names (what its community dashboards
read); their labels are bounded too."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import World
from tests.prometheus.seed import seed_alerting_world
from tests.prometheus.test_rules import promtool

# Label names a family may use: each names something the portal keeps a bounded list of.
ALLOWED_LABELS = {
    "cluster", "tenant", "flavor", "node", "state", "resolution", "rule", "severity",
    "task", "queue",  # Celery's registered task names; the queues the portal sends to
}  # fmt: skip
# django-prometheus' labels: URL names, HTTP methods and statuses, response charsets and
# template names, exception classes; all from the code, never from what a client sends.
HTTP_LABELS = {"view", "method", "status", "transport", "charset", "templatename", "type"}
HTTP_METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "OPTIONS", "CONNECT", "PATCH"}
MAX_LABELS = 5
# Units Prometheus wants in base form: these never appear as a name's last word.
NOT_BASE_UNITS = {
    "percent", "milliseconds", "ms", "minutes", "hours", "days", "mib", "gib", "mb", "gb", "kb",
    "kib", "bits",
}  # fmt: skip
# A label value that is an id, a time or a UUID makes a series per object: unbounded.
UNBOUNDED_VALUE = re.compile(
    r"^\d+$|^\d{4}-\d{2}-\d{2}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


@pytest.fixture
def exposition(world: World, client: Client, settings: Any) -> str:
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8"]
    seed_alerting_world(world)
    client.get("/login/")
    client.get("/no-such-page/", {"id": "12345"})  # what a client sends never becomes a label
    client.generic("BREW", "/login/")
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    return response.content.decode()


def test_promtool_finds_no_convention_problem_in_the_portals_metrics(exposition: str) -> None:
    result = promtool("check", "metrics", stdin=exposition)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_every_family_is_named_with_its_unit_and_has_bounded_labels(exposition: str) -> None:
    families = list(text_string_to_metric_families(exposition))
    names = {f.name for f in families}
    # The series the rules and dashboards are built on are all there.
    assert {
        "portal_quota_limit_gpus", "portal_usage_gpus_used", "portal_usage_gpu_utilization_ratio",
        "portal_sync_failed_attempts", "portal_agent_last_report_timestamp_seconds",
        "portal_prometheus_source_up", "portal_usage_rollup_lag_seconds",
        "portal_celery_queue_length", "django_http_responses_total_by_status_view_method",
        "django_http_requests_latency_seconds_by_view_method",
    } <= names  # fmt: skip
    for family in families:
        name = family.name
        if name.startswith("django_http_"):
            check_http_family(family)
            continue
        assert re.fullmatch(r"portal_[a-z][a-z0-9]*(_[a-z0-9]+)+", name), name
        assert family.documentation.strip(), f"{name} has no help text"
        words = name.split("_")
        assert words[-1] not in NOT_BASE_UNITS, f"{name}: use base units (seconds, bytes, ratio)"
        if family.type == "counter":
            assert all(
                s.name.endswith("_total") for s in family.samples if "_created" not in s.name
            ), name
        else:
            assert not name.endswith(("_total", "_count", "_sum", "_bucket")), name
        if "seconds" in words or "timestamp" in words:
            assert name.endswith("_seconds"), name
        if "utilization" in words or "ratio" in words:
            assert name.endswith("_ratio"), name
            assert all(0.0 <= s.value <= 1.0 for s in family.samples), name
        for sample in family.samples:
            histogram_bound = {"le"} if family.type == "histogram" else set()
            assert set(sample.labels) <= ALLOWED_LABELS | histogram_bound, (name, sample.labels)
            assert len(sample.labels) <= MAX_LABELS, (name, sorted(sample.labels))
            for label, value in sample.labels.items():
                if label == "le" and family.type == "histogram":
                    continue
                assert len(value) <= 63 and not UNBOUNDED_VALUE.search(value), (name, label, value)


def check_http_family(family: Any) -> None:
    assert family.documentation.strip(), f"{family.name} has no help text"
    for sample in family.samples:
        labels = dict(sample.labels)
        labels.pop("le", None)
        assert set(labels) <= HTTP_LABELS, (family.name, sorted(labels))
        assert labels.get("method", "GET") in HTTP_METHODS | {"<invalid method>"}, labels
        assert re.fullmatch(r"[1-5]\d\d", labels.get("status", "200")), labels
        view = labels.get("view", "login")
        assert view == "<unnamed view>" or re.fullmatch(r"[a-z][\w:.-]*", view), labels
        assert not UNBOUNDED_VALUE.search(view), labels


def test_utilisation_is_exposed_as_a_ratio_of_what_the_samples_say(exposition: str) -> None:
    families = {f.name: f for f in text_string_to_metric_families(exposition)}
    values = {
        s.labels["tenant"]: s.value for s in families["portal_usage_gpu_utilization_ratio"].samples
    }
    assert values == {"team-a": pytest.approx(0.8), "team-b": pytest.approx(0.8)}  # 80 % seeded
