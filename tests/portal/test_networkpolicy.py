"""The portal's own NetworkPolicy: rendered from its configuration, it allows each destination
that configuration names (port and peer) and nothing else; the base file is the documented
example's render."""

from __future__ import annotations

import io
import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from alerts.models import Webhook
from portal.networkpolicy import EXAMPLE, EXAMPLE_NOTE, PRIVATE_NETWORKS, render_yaml
from quotas.models import Cluster
from usage.models import PrometheusSource

BASE = Path(__file__).resolve().parents[2] / "deploy/kubernetes/base/networkpolicy.yaml"
ANY = "any address"
PUBLIC = "public addresses"
NS = "kubernetes.io/metadata.name"


def _peer(peer: dict[str, Any]) -> str:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        if block["cidr"] == "0.0.0.0/0":
            assert sorted(block["except"]) == sorted(PRIVATE_NETWORKS)
            return PUBLIC
        assert "except" not in block
        return block["cidr"]
    if "namespaceSelector" in peer:
        namespace = peer["namespaceSelector"]["matchLabels"][NS]
        pods = peer.get("podSelector", {}).get("matchLabels", {})
        return f"ns {namespace}" + "".join(f" {k}={v}" for k, v in pods.items())
    assert peer == {"podSelector": {}}
    return "own namespace"


def allowed(policy: dict[str, Any]) -> set[tuple[str, str, int]]:
    """Every (peer, protocol, port) the egress rules allow."""
    found = set()
    for rule in policy["spec"]["egress"]:
        peers = [_peer(p) for p in rule.get("to", [])] or [ANY]
        for peer in peers:
            for port in rule["ports"]:
                found.add((peer, port["protocol"], port["port"]))
    return found


def _database() -> set[tuple[str, str, int]]:
    """The test database's rule: PostgreSQL at an address (CI); none on SQLite."""
    database = settings.DATABASES["default"]
    if "postgresql" not in database["ENGINE"] or str(database.get("HOST", "")).startswith("/"):
        return set()
    host, port = str(database.get("HOST") or ""), int(database.get("PORT") or 5432)
    try:
        peer = str(ipaddress.ip_network(host))
    except ValueError:  # CI's service name: a one-label name, or a name (any address)
        peer = "own namespace" if "." not in host else ANY
    return {(peer, "TCP", port)} if host else set()


def _render(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("portal_networkpolicy", *args, stdout=out, stderr=io.StringIO())
    return yaml.safe_load(out.getvalue())


def test_the_base_file_is_the_documented_example():
    """Regenerate it with ``manage.py portal_networkpolicy --example``."""
    assert BASE.read_text(encoding="utf-8") == render_yaml(EXAMPLE, note=EXAMPLE_NOTE)


@pytest.mark.django_db
def test_a_configuration_gets_exactly_its_destinations(tmp_path: Path):
    kubeconfig = tmp_path / "east.yaml"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {"name": "east", "cluster": {"server": "https://192.0.2.10:6443"}},
                    {"name": "other", "cluster": {"server": "https://198.51.100.1"}},
                ],
                "contexts": [
                    {"name": "east", "context": {"cluster": "east"}},
                    {"name": "other", "context": {"cluster": "other"}},
                ],
                "current-context": "east",
            }
        )
    )
    east = Cluster.objects.create(name="east", kubeconfig_path=str(kubeconfig))
    home = Cluster.objects.create(name="home", in_cluster=True)
    Cluster.objects.create(name="git", backend="gitops", api_server="https://203.0.113.9")
    PrometheusSource.objects.create(cluster=east, url="http://prom.metrics.svc:9090")
    PrometheusSource.objects.create(cluster=home, url="http://10.66.0.1:9091", enabled=False)
    Webhook.objects.create(name="chat", url="https://hooks.example.org:8443/x")
    Webhook.objects.create(name="off", url="https://hooks.example.org:9443/x", enabled=False)
    with override_settings(
        REDIS_URL="redis://redis.cache.svc:6380/0",
        CELERY_BROKER_URL="redis://redis.cache.svc:6380/0",
        LDAP_ENABLED=True,
        LDAP_SERVER_URI="ldaps://ldap.corp.example ldap://10.9.9.9",
        OIDC_ENABLED=True,
        OIDC_ISSUER="https://sso.example.org/realms/portal",
        OIDC_OP_TOKEN_ENDPOINT="https://10.8.0.4:8443/token",
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="10.5.5.5",
        EMAIL_PORT=465,
        WEBHOOK_ALLOWED_HOSTS=["10.20.0.0/16"],
    ):
        policy = _render(
            "--host-cidr",
            "ldap.corp.example=10.7.0.0/24",
            "--ingress-namespace",
            "traefik",
            "--monitoring-namespace",
            "prometheus",
        )
    expected = {
        ("ns kube-system k8s-app=kube-dns", "UDP", 53),
        ("ns kube-system k8s-app=kube-dns", "TCP", 53),
        ("ns cache", "TCP", 6380),  # Redis: an in-cluster Service
        ("192.0.2.10/32", "TCP", 6443),  # east's kubeconfig, its current context only
        (ANY, "TCP", 443),  # home's in-cluster API server: a name, so any address
        (ANY, "TCP", 6443),
        ("ns metrics", "TCP", 9090),  # the enabled Prometheus source only
        ("10.7.0.0/24", "TCP", 636),  # ldaps, mapped by --host-cidr
        ("10.9.9.9/32", "TCP", 389),
        (ANY, "TCP", 443),  # the OIDC issuer: a public host name
        ("10.8.0.4/32", "TCP", 8443),  # its token endpoint on a private address
        ("10.5.5.5/32", "TCP", 465),  # SMTP
        ("10.20.0.0/16", "TCP", 443),  # WEBHOOK_ALLOWED_HOSTS, on the webhooks' ports
        ("10.20.0.0/16", "TCP", 8443),
        (PUBLIC, "TCP", 443),  # public webhooks
        (PUBLIC, "TCP", 8443),
    }
    assert allowed(policy) == expected | _database()
    [ingress] = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8000}]
    assert [p["namespaceSelector"]["matchLabels"][NS] for p in ingress["from"]] == [
        "traefik",
        "prometheus",
    ]


@pytest.mark.django_db
def test_nothing_configured_allows_dns_and_public_https_only():
    with override_settings(
        REDIS_URL="",
        CELERY_BROKER_URL="filesystem://localhost/",
        LDAP_ENABLED=False,
        OIDC_ENABLED=False,
        EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend",
        WEBHOOK_ALLOWED_HOSTS=[],
    ):
        policy = _render()
    assert allowed(policy) == _database() | {
        ("ns kube-system k8s-app=kube-dns", "UDP", 53),
        ("ns kube-system k8s-app=kube-dns", "TCP", 53),
        (PUBLIC, "TCP", 443),
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--ingress-namespace", "Ingress_NGINX"], "--ingress-namespace"),
        (["--monitoring-namespace", "-x"], "--monitoring-namespace"),
        (["--host-cidr", "ldap.example.org=not-a-network"], "not-a-network"),
        (["--host-cidr", "ldap.example.org"], "host=CIDR"),
    ],
)
def test_bad_options_are_refused_with_the_reason(args: list[str], words: str):
    with pytest.raises(CommandError, match=words):
        _render(*args)
