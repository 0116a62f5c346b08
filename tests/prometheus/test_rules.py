"""The deploy/prometheus rules and scrape example, and the deploy/grafana dashboards: promtool
accepts them, and every PromQL expression in them parses and returns data from a real
Prometheus scraping the portal's own /metrics (a live test server with a tenant near its
limit, a failing push, a stale node agent and a failing usage source)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import World, require_service
from tests.prometheus.seed import seed_alerting_world
from tests.prometheus.server import PROMTOOL, Handle, reload, write_config

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy/prometheus/rules.yml"
PROMETHEUS_RULE = ROOT / "deploy/prometheus/prometheusrule.yaml"
SCRAPE = ROOT / "deploy/prometheus/scrape-config.yml"
DASHBOARDS = sorted((ROOT / "deploy/grafana").glob("*.json"))
# Grafana's variables as a query would see them with "All" chosen.
VARIABLES = {"$cluster": ".+", "$tenant": ".+", "${datasource}": "prometheus"}


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


def substituted(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def test_promtool_accepts_the_alerting_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 7 rules found" in result.stdout
    names = {name for name, _ in rule_expressions()}
    # The three the platform team asked for: near the limit, a push failing, an agent stale.
    assert {"PortalTenantNearGpuLimit", "PortalQuotaPushFailing", "PortalNodeAgentStale"} <= names


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


def test_every_dashboard_panel_has_a_query_and_names_only_portal_series() -> None:
    expressions = dashboard_expressions()
    assert len(DASHBOARDS) == 2 and len(expressions) >= 15
    for where, expr in expressions:
        names = set(re.findall(r"\b([a-z_]+_[a-z_]+)\s*(?:\{|\)|$| )", expr))
        series = {n for n in names if n.startswith("portal_")}
        assert series, (where, expr)


@pytest.mark.django_db(transaction=True)
def test_every_rule_and_dashboard_query_parses_and_returns_data_from_the_portals_metrics(
    world: World, live_server: Any, prometheus_server: Handle, settings: Any, tmp_path: Path
) -> None:
    settings.METRICS_ALLOWED_CIDRS = ["127.0.0.0/8"]
    seed_alerting_world(world)
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
        empty = []
        for where, expr in [*rule_expressions(), *dashboard_expressions()]:
            body = prometheus_server.api("/api/v1/query", query=substituted(expr))
            assert body["status"] == "success", (where, expr, body)
            if not body["data"]["result"]:
                empty.append(where)
        assert not empty, f"no data for: {empty}"
        # The rules loaded into the running Prometheus evaluate without errors.
        groups = prometheus_server.api("/api/v1/rules")["data"]["groups"]
        healths = {r["name"]: r["health"] for g in groups for r in g["rules"]}
        assert len(healths) == 7
        assert set(healths.values()) <= {"ok", "unknown"}, healths
    finally:
        (config.parent / "portal.rules.yml").unlink()
        config.write_text(original)
        reload(prometheus_server)
