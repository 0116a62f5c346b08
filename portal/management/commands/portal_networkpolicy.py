"""Print the portal's own NetworkPolicy for this configuration (``portal.networkpolicy``).

What it reads: DATABASE_URL and REDIS_URL (the cache and the broker), the managed clusters'
API servers (each kubeconfig's current context, or the in-cluster API server), the clusters'
enabled Prometheus usage sources, LDAP_SERVER_URI, the OIDC provider's endpoints, the SMTP
relay (EMAIL_HOST, EMAIL_PORT), alert webhooks and WEBHOOK_ALLOWED_HOSTS. Run it where those
settings are (``kubectl exec deployment.apps/portal-worker -- python manage.py portal_networkpolicy``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from alerts.models import Webhook
from portal.networkpolicy import (
    EXAMPLE,
    EXAMPLE_NOTE,
    Destination,
    PortalNetwork,
    parse_host_cidrs,
    render_yaml,
    url_destination,
)
from quotas.choices import SyncBackend
from quotas.models import Cluster
from tenants.validators import DNS1123_LABEL_REGEX
from usage.models import PrometheusSource

IN_CLUSTER_API = "kubernetes.default"


def _kubeconfig_servers(path: str) -> list[str]:
    """The server of the kubeconfig's current context (the applier's), [] if unreadable."""
    try:
        config = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    contexts = {c.get("name"): c.get("context", {}) for c in config.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster", {}) for c in config.get("clusters") or []}
    current = contexts.get(config.get("current-context"), {})
    server = clusters.get(current.get("cluster"), {}).get("server")
    return [server] if isinstance(server, str) and server else []


def _words_list(value: str) -> list[str]:
    return [part for part in value.replace(",", " ").split() if part]


def configured_destinations(*, warn: Any = None) -> tuple[list[Destination], list[int]]:
    """Every destination the settings and the database name, and the ports of alert webhooks
    (443 always: admins add webhooks at any time)."""
    found: list[Destination] = []

    def add(what: str, url: str) -> None:
        destination = url_destination(what, url)
        if destination is not None:
            found.append(destination)

    database = settings.DATABASES["default"]
    if "postgresql" in database.get("ENGINE", "") and database.get("HOST", ""):
        host = str(database["HOST"])
        if not host.startswith("/"):
            found.append(
                Destination("PostgreSQL (DATABASE_URL)", host, int(database.get("PORT") or 5432))
            )
    if settings.REDIS_URL:
        add("Redis (REDIS_URL, the cache and the broker)", settings.REDIS_URL)
    broker = str(getattr(settings, "CELERY_BROKER_URL", ""))
    if broker and broker != settings.REDIS_URL and broker.split(":", 1)[0] != "filesystem":
        add("Celery broker (CELERY_BROKER_URL)", broker)

    for cluster in Cluster.objects.filter(backend=SyncBackend.KUBERNETES).order_by("name"):
        if cluster.in_cluster:
            for port in (443, 6443):
                found.append(
                    Destination(
                        f"API server of cluster {cluster.name} (in cluster: its endpoints' "
                        "addresses, kubectl get endpointslices -n default "
                        "-l kubernetes.io/service-name=kubernetes)",
                        IN_CLUSTER_API,
                        port,
                    )
                )
            continue
        servers = _kubeconfig_servers(cluster.kubeconfig_path) if cluster.kubeconfig_path else []
        if not servers and cluster.api_server:
            if warn and cluster.kubeconfig_path:
                warn(
                    f"Cluster {cluster.name}: {cluster.kubeconfig_path} cannot be read here; "
                    f"using its api_server ({cluster.api_server})."
                )
            servers = [cluster.api_server]
        if not servers and warn:
            warn(
                f"Cluster {cluster.name}: no kubeconfig readable here and no api_server: left out."
            )
        for server in servers:
            add(f"API server of cluster {cluster.name}", server)

    for source in PrometheusSource.objects.filter(enabled=True).select_related("cluster"):
        add(f"Prometheus usage source of cluster {source.cluster.name}", source.url)

    if settings.LDAP_ENABLED:
        for uri in _words_list(settings.LDAP_SERVER_URI):
            add("LDAP (LDAP_SERVER_URI)", uri)

    if settings.OIDC_ENABLED:
        add("OIDC provider (OIDC_ISSUER)", settings.OIDC_ISSUER)
        for name in ("AUTHORIZATION", "TOKEN", "USER", "JWKS", "LOGOUT"):
            endpoint = getattr(settings, f"OIDC_OP_{name}_ENDPOINT", "")
            if endpoint:
                add(f"OIDC provider (OIDC_OP_{name}_ENDPOINT)", endpoint)

    if settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
        found.append(
            Destination(
                "outgoing mail (EMAIL_HOST, EMAIL_PORT)", settings.EMAIL_HOST, settings.EMAIL_PORT
            )
        )

    webhook_ports = [443]
    for webhook in Webhook.objects.filter(enabled=True).order_by("pk"):
        destination = url_destination(f"alert webhook {webhook.name}", webhook.url)
        if destination is not None and destination.port not in webhook_ports:
            webhook_ports.append(destination.port)
    for entry in settings.WEBHOOK_ALLOWED_HOSTS:
        for port in webhook_ports:
            found.append(Destination("alert webhooks (WEBHOOK_ALLOWED_HOSTS)", entry, port))
    return found, webhook_ports


def _labels(values: list[str] | None, default: str, option: str) -> tuple[str, ...]:
    names = tuple(values or [default])
    for name in names:
        if not re.fullmatch(DNS1123_LABEL_REGEX, name):
            raise CommandError(f"{option} {name!r} is not a namespace name (a DNS-1123 label).")
    return names


class Command(BaseCommand):
    help = (
        "Print the portal's NetworkPolicy, allowing the destinations this configuration names "
        "and nothing else."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--ingress-namespace",
            action="append",
            help="namespace of the ingress controller (repeatable; default ingress-nginx)",
        )
        parser.add_argument(
            "--monitoring-namespace",
            action="append",
            help="namespace of the Prometheus that scrapes /metrics (repeatable; default monitoring)",
        )
        parser.add_argument(
            "--host-cidr",
            action="append",
            default=[],
            help="HOST=CIDR[,CIDR...]: the networks a host name is at (repeatable)",
        )
        parser.add_argument("--http-port", type=int, default=8000)
        parser.add_argument(
            "--example",
            action="store_true",
            help="print the documented default (deploy/kubernetes/base/networkpolicy.yaml)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["example"]:
            self.stdout.write(render_yaml(EXAMPLE, note=EXAMPLE_NOTE), ending="")
            return
        try:
            host_cidrs = parse_host_cidrs(options["host_cidr"])
            destinations, webhook_ports = configured_destinations(
                warn=lambda words: self.stderr.write(words)
            )
            network = PortalNetwork(
                destinations=tuple(destinations),
                http_port=options["http_port"],
                ingress_namespaces=_labels(
                    options["ingress_namespace"], "ingress-nginx", "--ingress-namespace"
                ),
                monitoring_namespaces=_labels(
                    options["monitoring_namespace"], "monitoring", "--monitoring-namespace"
                ),
                public_ports=tuple(webhook_ports),
                host_cidrs=host_cidrs,
            )
            text = render_yaml(network)
        except ValueError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(text, ending="")
