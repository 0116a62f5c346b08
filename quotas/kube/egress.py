"""A tenant's egress exceptions: the destinations its pods may reach beyond its own namespaces
and DNS, asked for in a quota request and approved by a platform admin (``approvals``), then
compiled into every namespace's NetworkPolicy as extra egress rules.

Pure: a rule as data in, an ``EgressSpec`` (canonical) or the problem, naming the attribute,
out. One destination a rule: a namespace (pods there, by the name label Kubernetes sets) or a
network (an ipBlock), with one port and protocol.

What is refused, whoever asks: a network wider than a /8 (IPv4) or a /32 (IPv6), so "the
internet" is never an exception (a platform admin who wants it writes an egress proxy or a
policy of their own), and a network that holds the cloud metadata address 169.254.169.254 (or
fd00:ec2::254). A namespace of another tenant must name that tenant (``tenant``), so that
the admin deciding sees it; that tenant's own policy still refuses the traffic unless it lets
it in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from quotas.kube import names
from quotas.kube.spec import EgressSpec

PROTOCOLS = ("TCP", "UDP", "SCTP")
ATTRIBUTES = ("namespace", "cidr", "port", "protocol", "tenant")
MAX_RULES = 50
MIN_PREFIX = {4: 8, 6: 32}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
METADATA_ADDRESSES = (
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("fd00:ec2::254"),
)


class EgressError(ValueError):
    """What is wrong with one rule, and the attribute it is about ("" for the rule)."""

    def __init__(self, attribute: str, message: str) -> None:
        super().__init__(message)
        self.attribute = attribute
        self.message = message


def read_egress_rule(value: Any) -> EgressSpec:
    """``value`` (a mapping with namespace or cidr, port, protocol, tenant) as a canonical
    ``EgressSpec``; EgressError naming the attribute that is wrong."""
    if not isinstance(value, Mapping):
        raise EgressError("", "an object with namespace or cidr, port and protocol")
    unknown = sorted(str(key) for key in value if key not in ATTRIBUTES)
    if unknown:
        raise EgressError(unknown[0], f"not a field of an egress rule ({', '.join(ATTRIBUTES)})")
    port = value.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise EgressError("port", "a port number from 1 to 65535")
    protocol = value.get("protocol", "TCP")
    if not isinstance(protocol, str) or protocol.upper() not in PROTOCOLS:
        raise EgressError("protocol", "TCP, UDP or SCTP")
    namespace = value.get("namespace") or ""
    cidr = value.get("cidr") or ""
    tenant = value.get("tenant") or ""
    if not isinstance(namespace, str) or not isinstance(cidr, str) or not isinstance(tenant, str):
        raise EgressError("", "namespace, cidr and tenant are text")
    if bool(namespace) == bool(cidr):
        raise EgressError("", "name one destination: a namespace or a cidr")
    if namespace:
        try:
            names.dns1123_label(namespace, what="namespace")
        except ValueError as error:
            raise EgressError("namespace", str(error)) from None
        if tenant:
            try:
                names.dns1123_label(tenant, what="tenant")
            except ValueError as error:
                raise EgressError("tenant", str(error)) from None
        return EgressSpec(port=port, protocol=protocol.upper(), namespace=namespace, tenant=tenant)
    if tenant:
        raise EgressError("tenant", "names the owner of a namespace; a cidr has none")
    try:
        network = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        raise EgressError("cidr", f"{cidr!r} is not an address or network (10.1.0.0/16)") from None
    if network.prefixlen < MIN_PREFIX[network.version]:
        raise EgressError(
            "cidr",
            f"{network} is wider than a /{MIN_PREFIX[network.version]}: name the networks the "
            "workload needs (the internet is not an exception; ask for an egress proxy)",
        )
    if any(address in network for address in METADATA_ADDRESSES):
        raise EgressError(
            "cidr", f"{network} holds the cloud metadata address: never reachable from tenants"
        )
    return EgressSpec(port=port, protocol=protocol.upper(), cidr=str(network))


def egress_rule(spec: EgressSpec) -> dict[str, Any]:
    """The NetworkPolicy egress rule of one exception, checked again (the compiler trusts no
    input): a namespace by the name label Kubernetes sets, a network as an ipBlock."""
    checked = read_egress_rule(spec.as_json())
    if checked.namespace:
        peer: dict[str, Any] = {
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: checked.namespace}}
        }
    else:
        peer = {"ipBlock": {"cidr": checked.cidr}}
    return {"to": [peer], "ports": [{"protocol": checked.protocol, "port": checked.port}]}
