"""The clusters' Prometheus sources through the API and Django admin: platform admins only,
every setting checked (400 naming the field, nothing changed), audited."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tenants.models import AuditEvent
from tests.conftest import World
from usage.models import PrometheusSource
from usage.prometheus import prometheus_collect

URL = "/api/v1/usage/prometheus-sources/"


def test_an_admin_sets_reads_and_removes_a_clusters_prometheus(world: World, api_as: Any) -> None:
    admin = api_as(world.admin)
    body = {
        "url": "https://thanos.monitoring:10902",
        "bearer_token_file": "/run/secrets/prometheus/token",
        "ca_bundle": "/etc/ssl/monitoring-ca.pem",
        "label_matchers": 'cluster="gpu-a", region=~"eu-.*"',
        "query_timeout_s": 20,
        "figures": ["kueue", "gpu_usage", "volumes"],
        "node_agent_samples": False,
    }
    response = admin.put(f"{URL}demo-a100/", body, format="json")
    assert response.status_code == 200, response.content
    saved = response.json()
    assert saved["cluster"] == "demo-a100"
    assert saved["figures"] == ["gpu_usage", "kueue", "volumes"]
    assert saved["step_s"] == 60 and saved["last_error"] == ""
    assert AuditEvent.objects.filter(
        action="usage.prometheus_source_set", object_id="demo-a100"
    ).exists()
    listed = admin.get(URL).json()
    assert [s["cluster"] for s in listed] == ["demo-a100"]
    assert admin.get(f"{URL}demo-a100/").json()["url"] == "https://thanos.monitoring:10902"
    # PUT replaces: settings left out go back to their defaults.
    again = admin.put(f"{URL}demo-a100/", {"url": "http://prometheus:9090"}, format="json").json()
    assert again["figures"] == ["gpu_requests", "gpu_usage"] and again["label_matchers"] == ""
    assert admin.delete(f"{URL}demo-a100/").status_code == 204
    assert not PrometheusSource.objects.exists()
    assert admin.delete(f"{URL}demo-a100/").status_code == 404
    assert admin.get(f"{URL}demo-a100/").status_code == 404
    assert admin.put(f"{URL}no-such/", {"url": "http://p:9090"}, format="json").status_code == 404


def test_leads_may_not_read_or_change_a_source(world: World, api_as: Any) -> None:
    PrometheusSource.objects.create(cluster=world.a100, url="http://prometheus:9090")
    alice = api_as(world.alice)
    assert alice.get(URL).status_code == 403
    assert alice.get(f"{URL}demo-a100/").status_code == 403
    assert (
        alice.put(f"{URL}demo-a100/", {"url": "http://evil:9090"}, format="json").status_code == 403
    )
    assert alice.delete(f"{URL}demo-a100/").status_code == 403
    assert PrometheusSource.objects.get().url == "http://prometheus:9090"


def test_bad_settings_are_refused_naming_the_field_and_change_nothing(
    world: World, api_as: Any
) -> None:
    admin = api_as(world.admin)
    admin.put(f"{URL}demo-a100/", {"url": "http://prometheus:9090"}, format="json")
    cases = [
        (
            {"url": "http://p:9090", "label_matchers": "cluster=gpu-a"},
            "label_matchers",
            "label matcher",
        ),
        ({"url": "http://p:9090", "label_matchers": 'a="1",'}, "label_matchers", "comma"),
        ({"url": "http://p:9090", "figures": ["gpu_usage", "cpu"]}, "figures[1]", "cpu"),
        ({"url": "http://p:9090", "query_timeout_s": 0}, "query_timeout_s", "1"),
        ({"url": "http://p:9090", "step_s": 5}, "step_s", "15"),
        ({"url": "ftp://p:9090"}, "url", "http:// or https://"),
        ({"url": "http://p:9090", "bearer_token_file": "token"}, "bearer_token_file", "absolute"),
        ({"url": "http://p:9090", "basic_auth_password_file": "/p"}, "basic_auth_user", "user"),
        ({"url": "http://p:9090", "password": "x"}, "password", "Unknown field"),
    ]
    for body, field, words in cases:
        response = admin.put(f"{URL}demo-a100/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        messages = " ".join(response.json()["fields"].get(field, []))
        assert words in messages, (body, response.json())
    source = PrometheusSource.objects.get()
    assert (source.url, source.label_matchers, source.step_s) == ("http://prometheus:9090", "", 60)


def test_django_admin_saves_a_source_through_the_same_checks(world: World, client: Client) -> None:
    client.force_login(world.admin)
    form = {
        "cluster": world.a100.pk, "url": "http://prometheus:9090", "enabled": "on",
        "label_matchers": "cluster=gpu-a", "query_timeout_s": 10, "step_s": 60,
        "figures": ["gpu_usage"],
    }  # fmt: skip
    refused = client.post("/admin/usage/prometheussource/add/", form)
    assert refused.status_code == 200 and "is not a label matcher" in refused.content.decode()
    assert not PrometheusSource.objects.exists()
    saved = client.post(
        "/admin/usage/prometheussource/add/", form | {"label_matchers": 'cluster="a"'}
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    source = PrometheusSource.objects.get()
    assert source.figures == ["gpu_usage"] and source.label_matchers == 'cluster="a"'
    assert AuditEvent.objects.filter(action="usage.prometheus_source_set").exists()


def test_the_admin_form_says_kueues_usage_needs_its_clusterqueue_resource_metrics(
    world: World, client: Client
) -> None:
    client.force_login(world.admin)
    page = client.get("/admin/usage/prometheussource/add/").content.decode()
    assert "kueue_cluster_queue_resource_usage" in page
    assert "metrics.enableClusterQueueResources" in page


# --- credentials files: only from PROMETHEUS_SECRETS_DIR ------------------------------------

OUTSIDE = [
    "/etc/passwd",
    "/run/secrets/portal/secret-key",  # the portal's own secrets, mounted beside
    "/run/secrets/prometheus/../portal/secret-key",
    "/run/secrets/prometheus",  # the directory itself
    "/run/secrets/prometheus-token",  # a sibling whose name merely starts the same
]


def test_an_admin_may_not_point_a_credentials_file_outside_the_secrets_dir(
    world: World, api_as: Any
) -> None:
    admin = api_as(world.admin)
    for field, extra in (
        ("bearer_token_file", {}),
        ("basic_auth_password_file", {"basic_auth_user": "reader"}),
    ):
        for path in OUTSIDE:
            body = {"url": "http://prometheus:9090", field: path, **extra}
            response = admin.put(f"{URL}demo-a100/", body, format="json")
            assert response.status_code == 400, (path, response.content)
            said = " ".join(response.json()["fields"].get(field, []))
            assert "PROMETHEUS_SECRETS_DIR" in said and "/run/secrets/prometheus" in said, said
    assert not PrometheusSource.objects.exists()
    inside = {"url": "http://prometheus:9090", "bearer_token_file": "/run/secrets/prometheus/t"}
    assert admin.put(f"{URL}demo-a100/", inside, format="json").status_code == 200


def test_django_admin_refuses_a_token_file_outside_the_secrets_dir(
    world: World, client: Client
) -> None:
    client.force_login(world.admin)
    form = {
        "cluster": world.a100.pk, "url": "http://prometheus:9090", "enabled": "on",
        "bearer_token_file": "/etc/passwd", "query_timeout_s": 10, "step_s": 60,
        "figures": ["gpu_usage"],
    }  # fmt: skip
    refused = client.post("/admin/usage/prometheussource/add/", form)
    assert refused.status_code == 200 and "PROMETHEUS_SECRETS_DIR" in refused.content.decode()
    assert not PrometheusSource.objects.exists()


def _stored_source(world: World, **fields: Any) -> PrometheusSource:
    """As a source saved before the rule (or written around it) would be."""
    return PrometheusSource.objects.create(cluster=world.a100, url="http://127.0.0.1:9", **fields)


def test_a_stored_token_file_outside_the_dir_is_not_read(
    world: World, settings: Any, tmp_path: Any
) -> None:
    secrets_dir = tmp_path / "prometheus"
    secrets_dir.mkdir()
    settings.PROMETHEUS_SECRETS_DIR = str(secrets_dir)
    private = tmp_path / "private"
    private.write_text("hunter2-private-contents\n")
    (secrets_dir / "link").symlink_to(private)  # inside by name, outside in fact
    for path in (private, secrets_dir / "link"):
        source = _stored_source(world, bearer_token_file=str(path))
        prometheus_collect(cluster=world.a100)
        source.refresh_from_db()
        assert "PROMETHEUS_SECRETS_DIR" in source.last_error, source.last_error
        assert "hunter2" not in source.last_error
        source.delete()


def test_a_token_file_that_holds_no_token_is_never_echoed(
    world: World, settings: Any, tmp_path: Any
) -> None:
    settings.PROMETHEUS_SECRETS_DIR = str(tmp_path)
    odd = tmp_path / "token"
    odd.write_text("root:x:0:0:root:/root:/bin/bash\nhunter2:x:1000:1000::/home:/bin/sh\n")
    source = _stored_source(world, bearer_token_file=str(odd))
    prometheus_collect(cluster=world.a100)
    source.refresh_from_db()
    assert source.last_error and "hunter2" not in source.last_error, source.last_error
    assert "root:x" not in source.last_error
    assert str(odd) in source.last_error
