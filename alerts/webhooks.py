"""Where a webhook may point, and the one POST that sends a notification there.

A webhook's URL is http(s), without credentials (``user:pw@``), to a public address: loopback,
link-local (cloud metadata at 169.254.169.254 included), private, shared, unspecified,
multicast and reserved addresses are refused, unless ``settings.WEBHOOK_ALLOWED_HOSTS`` names
the host (a name, an address or a network: ``hooks.internal``, ``10.0.0.0/8``). An IPv6
address that carries an IPv4 one (NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, IPv4-mapped and
-compatible, Teredo) is judged by the IPv4 address too, so ``[64:ff9b::7f00:1]`` is loopback;
the local-use NAT64 prefix ``64:ff9b:1::/48`` is never public. The check runs
when an admin saves the URL (the model field's validator) and again when sending: the name is
resolved then, every address it resolves to is checked, and the connection goes to the address
checked (a name that resolves elsewhere since, DNS rebinding, gets nothing).

Sending never follows a redirect (a 3xx is a failed delivery) and tells no socket details
back: the error stored is "the endpoint did not answer" or "the endpoint answered 500", so a
webhook cannot be used to learn which internal ports are open.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
NOT_ANSWERED = "the endpoint did not answer"


class WebhookRefused(Exception):
    """The URL may not be contacted; the message says why (for the admin and the delivery)."""


class WebhookUnanswered(Exception):
    """No HTTP answer: a timeout, a refused connection, a TLS or DNS failure (not told apart)."""


@dataclass(frozen=True)
class _AllowList:
    names: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    def admits(self, host: str, address: IpAddress | None = None) -> bool:
        if host.lower().rstrip(".") in self.names:
            return True
        if address is None:
            return False
        embedded = embedded_ipv4(address)
        return any(
            candidate in network
            for candidate in (address, embedded)
            if candidate is not None
            for network in self.networks
        )


def _allow_list() -> _AllowList:
    names: set[str] = set()
    networks = []
    for entry in getattr(settings, "WEBHOOK_ALLOWED_HOSTS", []):
        entry = entry.strip().lower()
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        except ValueError:
            names.add(entry.rstrip("."))
    return _AllowList(frozenset(names), tuple(networks))


NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: a network's own
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated, still routed by some stacks


def embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries, which is where a packet to it ends up: NAT64
    (well-known prefix), 6to4, IPv4-mapped, IPv4-compatible, Teredo (the client's). None for
    an IPv4 address or an IPv6 one that carries none."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in NAT64_WELL_KNOWN or address in IPV4_COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _global(address: IpAddress) -> bool:
    return address.is_global and not address.is_multicast


def is_public(address: IpAddress) -> bool:
    """A global unicast address: not loopback, link-local, private, shared, unspecified,
    reserved or multicast. An IPv4-mapped IPv6 address is judged as the IPv4 one; one that
    carries an IPv4 address otherwise (NAT64, 6to4, IPv4-compatible, Teredo) must be public
    itself and carry a public one; the local-use NAT64 prefix is never public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return _global(address.ipv4_mapped)
    if address in NAT64_LOCAL_USE:
        return False
    embedded = embedded_ipv4(address)
    return _global(address) and (embedded is None or _global(embedded))


def _parts(url: str) -> tuple[SplitResult, str]:
    """The URL's parts and its host; WebhookRefused for a URL no webhook may have."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises ValueError for a port that is not one
    except ValueError as exc:
        raise WebhookRefused(f"not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise WebhookRefused("the URL must start with http:// or https://")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookRefused(
            "the URL may not hold a user name or password (user:pw@); put a secret in the path "
            "or ask the receiver for a token"
        )
    host = parts.hostname or ""
    if not host:
        raise WebhookRefused("the URL has no host")
    return parts, host


def _refusal(host: str, address: IpAddress) -> str:
    return (
        f"{host} is not a public address ({address}): loopback, link-local, private and "
        "metadata addresses are refused unless WEBHOOK_ALLOWED_HOSTS names them"
    )


def _literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _resolve(host: str, port: int) -> list[IpAddress]:
    """Every address ``host`` resolves to; WebhookUnanswered when it resolves to none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise WebhookUnanswered(NOT_ANSWERED) from None
    addresses = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise WebhookUnanswered(NOT_ANSWERED)
    return addresses


def _checked(host: str, addresses: Iterable[IpAddress], allow: _AllowList) -> None:
    for address in addresses:
        if not is_public(address) and not allow.admits(host, address):
            raise WebhookRefused(_refusal(host, address))


def validate_webhook_url(url: str) -> None:
    """The model field's validator (Django admin shows the message beside the field). A name
    is resolved now if it can be; one that does not resolve yet is checked when sending."""
    try:
        parts, host = _parts(url)
        allow = _allow_list()
        literal = _literal(host)
        if literal is not None:
            _checked(host, [literal], allow)
            return
        if allow.admits(host):
            return
        try:
            addresses = _resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
        except WebhookUnanswered:
            return
        _checked(host, addresses, allow)
    except WebhookRefused as exc:
        raise ValidationError(str(exc), code="webhook_url") from None


def _connect(addresses: Iterable[IpAddress], port: int, timeout: float | None) -> socket.socket:
    """A connection to the first of the checked addresses that answers."""
    for address in addresses:
        try:
            return socket.create_connection((str(address), port), timeout)
        except OSError:
            continue
    raise WebhookUnanswered(NOT_ANSWERED)


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to the addresses checked, whatever the name resolves to by then."""

    def __init__(self, host: str, port: int, addresses: list[IpAddress], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._addresses = addresses

    def connect(self) -> None:
        self.sock = _connect(self._addresses, self.port, self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """TLS to the addresses checked, the certificate verified against the URL's host name."""

    def __init__(self, host: str, port: int, addresses: list[IpAddress], timeout: float) -> None:
        self._tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self._tls)
        self._addresses = addresses

    def connect(self) -> None:
        raw = _connect(self._addresses, self.port, self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


def post_json(url: str, body: dict[str, Any], timeout: float) -> int:
    """POST ``body`` to ``url`` once; the HTTP status (a 3xx is returned, never followed).
    WebhookRefused: the URL or an address it resolves to is refused (nothing was sent).
    WebhookUnanswered: no HTTP answer, for whatever reason."""
    parts, host = _parts(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    allow = _allow_list()
    literal = _literal(host)
    addresses = [literal] if literal is not None else _resolve(host, port)
    if literal is not None or not allow.admits(host):
        _checked(host, addresses, allow)
    kind = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    connection = kind(host, port, addresses, timeout)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    headers = {"Content-Type": "application/json", "User-Agent": "gpu-quota-portal"}
    try:
        connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        response.read(64 * 1024)  # a little of the body, so the connection closes cleanly
        return int(response.status)
    except (OSError, http.client.HTTPException, ValueError, WebhookUnanswered):
        raise WebhookUnanswered(NOT_ANSWERED) from None
    finally:
        connection.close()


def status_error(status: int) -> str:
    """The error stored for an answer that is not a 2xx."""
    if 300 <= status < 400:
        return f"the endpoint answered {status} (a redirect, not followed)"
    return f"the endpoint answered {status}"
