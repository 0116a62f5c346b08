"""The deploy/prometheus rules and scrape example, and the deploy/grafana dashboards: promtool
accepts them, its unit tests (rules_test.yml) say when each service alert fires, and every
PromQL expression in them parses and finds its series in a real Prometheus scraping the
portal's own /metrics (a live test server with a tenant near its limit, a failing push, a
stale node agent and a failing usage source): the rules that world breaks return data, and so
does every dashboard panel."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from portal.observability import broker_client, record_task
from tests.conftest import World, require_service
from tests.prometheus.seed import seed_alerting_world
from tests.prometheus.server import PROMTOOL, Handle, reload, write_config

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/rules.yml"
PROMETHEUS_RULE = ROOT / "deploy/prometheus/prometheusrule.yaml"
SCRAPE = ROOT / "deploy/prometheus/scrape-config.yml"
RULE_TESTS = Path(__file__).with_name("rules_test.yml")
DASHBOARDS = sorted((ROOT / "deploy/grafana").glob("*.json"))
# Grafana's variables as a query would see them with "All" chosen.
VARIABLES = {"$cluster": ".+", "$tenant": ".+", "${datasource}": "prometheus"}
# The rules seed_alerting_world breaks (their expressions return data from its /metrics); the
# service rules (down, 5xx, queue, failing tasks) are for a healthy portal quiet, and proven by
# promtool's unit tests instead; their series must be there all the same.
SEEDED_RULES = {
    "PortalTenantNearGpuLimit", "PortalTenantAtGpuLimit", "PortalQuotaPushFailing",
    "PortalQuotaPushBehind", "PortalNodeAgentStale", "PortalPrometheusSourceFailing",
    "PortalUsageRollupLagging",
}  # fmt: skip
SERVICE_RULES = {
    "PortalDown", "PortalInstanceDown", "PortalHttpErrors", "PortalCeleryQueueBacklog",
    "PortalCeleryQueueGrowing", "PortalCeleryTasksFailing",
}  # fmt: skip
# Words in PromQL that look like series names.
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "or", "and"}


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    require_service("promtool", Path(PROMTOOL).exists(), "install the Debian package prometheus")
    return subprocess.run(
        [PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def rule_expressions() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


def dashboard_expressions() -> list[tuple[str, str]]:
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel["targets"]:
                out.append((f"{path.stem}: {panel['title']}", target["expr"]))
    return out


def series_names(expr: str) -> set[str]:
    """The series an expression selects: names followed by a selector, a range or a bracket."""
    found = set(re.findall(r"\b([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:\{|\[|\)|$| )", expr))
    functions = set(re.findall(r"\b([a-z_]+)\s*\(", expr))
    return {
        n for n in found - functions - PROMQL_WORDS
        if n == "up" or n.startswith(("portal_", "django_http_"))
    }  # fmt: skip


def substituted(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def test_promtool_accepts_the_alerting_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 13 rules found" in result.stdout
    names = {name for name, _ in rule_expressions()}
    # The three the platform team asked for: near the limit, a push failing, an agent stale;
    # and the service's: down, server errors, the Celery queue, failing tasks.
    assert names == SEEDED_RULES | SERVICE_RULES


def test_promtools_unit_tests_of_the_rules_pass() -> None:
    """Made-up series (tests/prometheus/rules_test.yml): the portal down or one pod down, 5xx
    over 5% of answers, a queue over 100 or growing, a task failing, pushes failing; and what
    must not fire (1% errors, a steady queue, a single failure among many runs)."""
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert SERVICE_RULES | {"PortalQuotaPushFailing"} <= tested


def test_the_prometheusrule_holds_the_same_rules_as_the_rules_file() -> None:
    wrapped = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert wrapped["kind"] == "PrometheusRule"
    assert wrapped["spec"] == yaml.safe_load(RULES.read_text())


def test_promtool_accepts_the_scrape_config_example(tmp_path: Path) -> None:
    # promtool checks that the token file exists: point it at one of the test's.
    token = tmp_path / "token"
    token.write_text("secret\n")
    config = SCRAPE.read_text().replace("/etc/prometheus/secrets/portal-metrics-token", str(token))
    (tmp_path / "prometheus.yml").write_text(config)
    (tmp_path / "rules.yml").write_text(RULES.read_text())
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_servicemonitor_scrapes_metrics_with_the_token() -> None:
    monitor = yaml.safe_load((ROOT / "deploy/prometheus/servicemonitor.yaml").read_text())
    assert monitor["kind"] == "ServiceMonitor"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["authorization"]["credentials"] == {"name": "portal-metrics", "key": "token"}
    # Both kinds of pods that serve requests: the web's and the node agents' API.
    selector = monitor["spec"]["selector"]
    assert selector["matchExpressions"] == [
        {"key": "app.kubernetes.io/component", "operator": "In", "values": ["web", "agent-api"]}
    ]
    # The rules select job="gpu-quota-portal", as the plain scrape config names the job.
    assert {"targetLabel": "job", "replacement": "gpu-quota-portal"} in endpoint["relabelings"]
    scrape = yaml.safe_load(SCRAPE.read_text())
    assert [job["job_name"] for job in scrape["scrape_configs"]] == ["gpu-quota-portal"]


def test_every_dashboard_panel_has_a_query_and_names_only_portal_series() -> None:
    expressions = dashboard_expressions()
    assert [p.name for p in DASHBOARDS] == [
        "portal-admins.json", "portal-operations.json", "portal-tenants.json"
    ]  # fmt: skip
    assert len(expressions) >= 25
    for where, expr in expressions:
        # The portal's own series, django-prometheus' HTTP ones, or Prometheus' "up".
        assert series_names(expr), (where, expr)
    operations = {where for where, _ in expressions if where.startswith("portal-operations")}
    assert len(operations) == 10


@pytest.mark.django_db(transaction=True)
def test_every_rule_and_dashboard_query_parses_and_returns_data_from_the_portals_metrics(
    world: World, live_server: Any, prometheus_server: Handle, settings: Any, tmp_path: Path
) -> None:
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8"]
    seed_alerting_world(world)
    # One task run as a worker records it (its task_postrun signal), for the Celery series,
    # which /metrics reads from the broker.
    require_service("Redis", broker_client() is not None, "the Celery broker is not REDIS_URL")
    record_task("portal.tasks.worker_heartbeat", "SUCCESS", 0.2)
    host = live_server.url.removeprefix("http://")
    config = prometheus_server.config_path
    original = config.read_text()
    scrape = json.loads(original)
    targets = {
        job["job_name"]: job["static_configs"][0]["targets"] for job in scrape["scrape_configs"]
    }
    (config.parent / "portal.rules.yml").write_text(RULES.read_text())
    write_config(config, targets | {"gpu-quota-portal": [host]})
    reload(prometheus_server)
    try:
        prometheus_server.wait_for('up{job="gpu-quota-portal"} == 1')
        prometheus_server.wait_for("portal_agent_last_report_timestamp_seconds")
        # Two scrapes at least, for the rates of the HTTP and Celery counters.
        prometheus_server.wait_for(
            "rate(django_http_responses_total_by_status_view_method_total[5m])"
        )
        prometheus_server.wait_for("rate(portal_celery_tasks_total[5m])")
        # On a busy machine one scrape of the portal may time out, and its series go stale
        # until the next: ask again for what was empty, for up to 30 s.
        pending = [*rule_expressions(), *dashboard_expressions()]
        deadline = time.monotonic() + 30
        while True:
            empty = []
            for where, expr in pending:
                body = prometheus_server.api("/api/v1/query", query=substituted(expr))
                assert body["status"] == "success", (where, expr, body)
                if not body["data"]["result"] and where not in SERVICE_RULES:
                    empty.append((where, expr))
            if not empty or time.monotonic() > deadline:
                break
            pending = empty
            time.sleep(2)
        assert not empty, f"no data for: {[where for where, _ in empty]}"
        # Every series a rule or panel names is served (a typo in a name finds nothing).
        named = {n for _, expr in [*rule_expressions(), *dashboard_expressions()]
                 for n in series_names(expr)}  # fmt: skip
        # (asked again for up to 30 s too: a scrape that timed out since leaves them stale)
        deadline = time.monotonic() + 30
        while True:
            missing = [
                name for name in sorted(named)
                if not prometheus_server.api("/api/v1/query", query=f"count({name})")["data"]["result"]
            ]  # fmt: skip
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert not missing, f"series not served: {missing}"
        # The rules loaded into the running Prometheus evaluate without errors.
        groups = prometheus_server.api("/api/v1/rules")["data"]["groups"]
        healths = {r["name"]: r["health"] for g in groups for r in g["rules"]}
        assert len(healths) == 13
        assert set(healths.values()) <= {"ok", "unknown"}, healths
    finally:
        (config.parent / "portal.rules.yml").unlink()
        config.write_text(original)
        reload(prometheus_server)
