"""The portal's own NetworkPolicy, rendered from what its configuration names.

Pure: a ``PortalNetwork`` in, a NetworkPolicy (a dict, or YAML with comments) out; nothing here
reads settings or the database (``manage.py portal_networkpolicy`` gathers them, see
``portal/management/commands/portal_networkpolicy.py``).

A NetworkPolicy names peers by address (ipBlock) or by namespace and pod labels, never by host
name, and the policy does not resolve names (addresses change). So each destination becomes:

* an address or a network (``10.0.0.5``, ``10.0.0.0/24``): an ipBlock of it;
* a host name the operator maps to networks (``--host-cidr``): an ipBlock of each;
* an in-cluster Service written ``name.namespace.svc`` (or ``...svc.cluster.local``): pods of
  that namespace; a one-label name (``postgres``): pods of the portal's own namespace;
* any other host name: **any address** on its port, said so in the output's comments.

Ports are matched after a Service's address is translated to its pods', so an in-cluster
Service whose targetPort differs from its port needs the targetPort here.
"""

from __future__ import annotations

import ipaddress
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
PORTAL_POD_LABELS = {"app.kubernetes.io/name": "gpu-quota-portal"}
PROTOCOLS = ("TCP", "UDP", "SCTP")
# Addresses a public webhook may not have (the portal refuses them unless WEBHOOK_ALLOWED_HOSTS
# names them): private, link-local (cloud metadata) and carrier-grade NAT networks.
PRIVATE_NETWORKS = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
)
DEFAULT_PORTS = {
    "http": 80,
    "https": 443,
    "postgres": 5432,
    "postgresql": 5432,
    "redis": 6379,
    "rediss": 6379,
    "amqp": 5672,
    "amqps": 5671,
    "ldap": 389,
    "ldaps": 636,
}


@dataclass(frozen=True)
class Destination:
    """One thing the portal connects to: ``what`` in words (with the setting that names it),
    ``host`` a host name, an address or a network."""

    what: str
    host: str
    port: int
    protocol: str = "TCP"

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"{self.what}: port {self.port} is not from 1 to 65535")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"{self.what}: protocol {self.protocol!r} is not TCP, UDP or SCTP")


@dataclass(frozen=True)
class PortalNetwork:
    """What the policy allows: in, the HTTP port from the ingress controller's and monitoring's
    namespaces; out, DNS, each destination, and HTTPS (``public_ports``) to public addresses
    for alert webhooks."""

    destinations: tuple[Destination, ...] = ()
    http_port: int = 8000
    ingress_namespaces: tuple[str, ...] = ("ingress-nginx",)
    monitoring_namespaces: tuple[str, ...] = ("monitoring",)
    public_ports: tuple[int, ...] = (443,)
    host_cidrs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    dns_namespace: str = "kube-system"
    dns_pod_labels: Mapping[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})


def url_destination(what: str, url: str) -> Destination | None:
    """The host and port of ``url`` (the scheme's port where it names none); None when it has
    no host (a Unix socket, a file path)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as error:
        raise ValueError(f"{what}: {url!r} is not a URL ({error})") from None
    host = parts.hostname or ""
    if not host:
        return None
    if port is None:
        port = DEFAULT_PORTS.get(parts.scheme.lower())
    if port is None:
        raise ValueError(f"{what}: {url!r} names no port and {parts.scheme!r} has no default")
    return Destination(what=what, host=host, port=port)


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        return None


def _in_cluster_namespace(host: str) -> str | None:
    """The namespace of ``name.namespace.svc[.cluster.local]``; "" for a one-label name (the
    portal's own namespace); None for any other host name."""
    labels = host.lower().rstrip(".").split(".")
    if len(labels) == 1:
        return ""
    if (
        len(labels) >= 3
        and labels[2] == "svc"
        and (len(labels) == 3 or labels[3:] == ["cluster", "local"])
    ):
        return labels[1]
    return None


@dataclass(frozen=True)
class _Peers:
    to: tuple[dict[str, Any], ...]  # empty: any address
    how: str  # the words in the comment


def _peers(destination: Destination, network: PortalNetwork) -> _Peers:
    host = destination.host
    block = _network(host)
    if block is not None:
        return _Peers(({"ipBlock": {"cidr": str(block)}},), f"the address {block}")
    mapped = network.host_cidrs.get(host.lower())
    if mapped:
        cidrs = [str(ipaddress.ip_network(cidr, strict=False)) for cidr in mapped]
        return _Peers(
            tuple({"ipBlock": {"cidr": cidr}} for cidr in cidrs),
            f"{host} as mapped ({', '.join(cidrs)})",
        )
    namespace = _in_cluster_namespace(host)
    if namespace == "":
        return _Peers(({"podSelector": {}},), f"pods of the portal's namespace (Service {host})")
    if namespace is not None:
        return _Peers(
            ({"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}},),
            f"pods of namespace {namespace} (Service {host})",
        )
    return _Peers((), f"ANY address: a host name (--host-cidr {host}=CIDR narrows it)")


def _namespaces(names: Iterable[str]) -> list[dict[str, Any]]:
    return [
        {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}
        for name in dict.fromkeys(names)
    ]


def _rules(network: PortalNetwork) -> list[tuple[dict[str, Any], str]]:
    """(egress rule, comment) in order: DNS, each destination (one rule per peer set, the
    destinations to the same peers sharing it), public HTTPS."""
    rules: list[tuple[dict[str, Any], str]] = [
        (
            {
                "to": [
                    {
                        "namespaceSelector": {
                            "matchLabels": {NAMESPACE_NAME_LABEL: network.dns_namespace}
                        },
                        "podSelector": {"matchLabels": dict(network.dns_pod_labels)},
                    }
                ],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
            f"DNS: the cluster's resolver ({network.dns_namespace})",
        )
    ]
    # One rule per host (its ports together), in the order the destinations come.
    grouped: dict[str, tuple[_Peers, list[Destination]]] = {}
    for destination in network.destinations:
        key = destination.host.lower()
        if key not in grouped:
            grouped[key] = (_peers(destination, network), [])
        grouped[key][1].append(destination)
    for host, (peers, destinations) in grouped.items():
        ports: list[dict[str, Any]] = []
        for destination in destinations:
            port = {"protocol": destination.protocol, "port": destination.port}
            if port not in ports:
                ports.append(port)
        rule: dict[str, Any] = {"to": [dict(peer) for peer in peers.to]} if peers.to else {}
        rule["ports"] = ports
        whats = ", ".join(dict.fromkeys(d.what for d in destinations))
        port_words = ", ".join(f"{p['protocol']} {p['port']}" for p in ports)
        rules.append((rule, f"{whats}: {host} ({port_words}) -> {peers.how}"))
    if network.public_ports:
        rules.append(
            (
                {
                    "to": [
                        {
                            "ipBlock": {
                                "cidr": "0.0.0.0/0",
                                "except": list(PRIVATE_NETWORKS),
                            }
                        }
                    ],
                    "ports": [
                        {"protocol": "TCP", "port": port}
                        for port in dict.fromkeys(network.public_ports)
                    ],
                },
                "alert webhooks (and any public OIDC provider): public IPv4 addresses only, "
                "never private networks (the portal refuses private ones unless "
                "WEBHOOK_ALLOWED_HOSTS names them; those are listed above)",
            )
        )
    return rules


def render(network: PortalNetwork) -> dict[str, Any]:
    """The NetworkPolicy ``portal`` for every portal pod (web, agent-api, worker, beat, the
    migration Job)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "portal"},
        "spec": {
            "podSelector": {"matchLabels": dict(PORTAL_POD_LABELS)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": _namespaces(
                        (*network.ingress_namespaces, *network.monitoring_namespaces)
                    ),
                    "ports": [{"protocol": "TCP", "port": network.http_port}],
                }
            ],
            "egress": [rule for rule, _ in _rules(network)],
        },
    }


HEADER = """\
# The portal's own traffic, nothing else, for every portal pod (web, agent-api, worker, beat,
# the migration Job). Rendered from the configuration by
#   python manage.py portal_networkpolicy
# (docs/operate/network-policies.md); render it again when a setting, a cluster, a Prometheus
# source or a webhook changes. A host name cannot be an ipBlock: it becomes a rule for ANY
# address on its port unless --host-cidr maps it to networks or it is an in-cluster Service
# (name.namespace.svc).
"""
EXAMPLE_NOTE = """\
# This file is the documented example (python manage.py portal_networkpolicy --example): render
# your own. The overlays add the managed clusters' API servers.
"""


def render_yaml(network: PortalNetwork, *, note: str = "") -> str:
    """The policy as YAML, with a comment saying what each egress rule is for and how its
    destinations were turned into peers."""
    policy = render(network)
    sources = ", ".join(
        dict.fromkeys((*network.ingress_namespaces, *network.monitoring_namespaces))
    )
    lines = [
        (HEADER + note).rstrip("\n"),
        f"# In: TCP {network.http_port} from the namespaces {sources}.",
        "# Out, rule by rule:",
    ]
    for number, (_rule, words) in enumerate(_rules(network), start=1):
        lines.extend(
            textwrap.wrap(
                words,
                width=100,
                initial_indent=f"#   {number}. ",
                subsequent_indent="#      ",
                break_on_hyphens=False,
            )
        )
    return "\n".join(lines) + "\n" + yaml.safe_dump(policy, sort_keys=False, width=100)


def parse_host_cidrs(entries: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """``host=cidr[,cidr...]`` entries as a mapping; ValueError naming a bad one."""
    mapping: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        host, sep, cidrs = entry.partition("=")
        if not sep or not host.strip() or not cidrs.strip():
            raise ValueError(f"{entry!r} is not host=CIDR[,CIDR...]")
        parsed = []
        for cidr in cidrs.split(","):
            network = _network(cidr.strip())
            if network is None:
                raise ValueError(f"{entry!r}: {cidr.strip()!r} is not an address or network")
            parsed.append(str(network))
        mapping[host.strip().lower()] = (*mapping.get(host.strip().lower(), ()), *parsed)
    return mapping


# What deploy/kubernetes/base/networkpolicy.yaml is: the example Secret's PostgreSQL and Redis,
# an SMTP relay on 587, a Prometheus in the monitoring namespace, public webhooks. A test checks
# the file is this render (``--example`` prints it).
EXAMPLE = PortalNetwork(
    destinations=(
        Destination("PostgreSQL (DATABASE_URL)", "postgres.example.org", 5432),
        Destination("Redis (REDIS_URL, the cache and the broker)", "redis.example.org", 6379),
        Destination("outgoing mail (EMAIL_HOST, EMAIL_PORT)", "smtp.example.org", 587),
        Destination("Prometheus usage source of a cluster", "prometheus.monitoring.svc", 9090),
    ),
)
