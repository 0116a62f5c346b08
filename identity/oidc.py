"""The OpenID provider's endpoints: from ``<OIDC_ISSUER>/.well-known/openid-configuration``
(OpenID Connect Discovery 1.0), fetched on first use and kept for the life of the process; an
``OIDC_OP_*_ENDPOINT`` setting overrides the endpoint it names. mozilla-django-oidc reads
endpoints from settings only, so the backend and the views ask here instead.

A failed fetch is not cached: the next sign-in tries again (a provider that was down at start
is used as soon as it is back)."""

from __future__ import annotations

import threading
from typing import Any

import requests
from django.conf import settings


class IdentityError(Exception):
    """A sign-in through the identity provider failed; ``message`` says what, for people (no
    token, code or secret in it)."""

    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProviderUnreachable(IdentityError):
    status_code = 502


# setting -> discovery document key
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_OP_LOGOUT_ENDPOINT": "end_session_endpoint",
}

_lock = threading.Lock()
_metadata: dict[str, dict[str, Any]] = {}  # issuer -> discovery document


def provider_name() -> str:
    return str(settings.OIDC_PROVIDER_NAME)


def discovery_url(issuer: str) -> str:
    return f"{issuer.rstrip('/')}/.well-known/openid-configuration"


def metadata() -> dict[str, Any]:
    """The issuer's discovery document (cached). Raises ``ProviderUnreachable``."""
    issuer = settings.OIDC_ISSUER
    with _lock:
        cached = _metadata.get(issuer)
    if cached is not None:
        return cached
    url = discovery_url(issuer)
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        document = response.json()
    except requests.RequestException as exc:
        raise ProviderUnreachable(
            f"{provider_name()} could not be reached: its discovery document at {url} did not "
            f"answer ({type(exc).__name__})."
        ) from exc
    except ValueError as exc:
        raise ProviderUnreachable(
            f"{provider_name()}'s discovery document at {url} is not JSON."
        ) from exc
    if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer:
        raise ProviderUnreachable(
            f"{provider_name()}'s discovery document at {url} names another issuer than "
            f"OIDC_ISSUER ({issuer})."
        )
    with _lock:
        _metadata[issuer] = document
    return document


def endpoint(setting: str, *, required: bool = True) -> str:
    """The endpoint ``setting`` names (``OIDC_OP_TOKEN_ENDPOINT``...): the setting where set,
    else the discovery document's; ``""`` for an optional one the provider lacks."""
    configured = str(getattr(settings, setting, "") or "")
    if configured:
        return configured
    value = str(metadata().get(ENDPOINTS[setting]) or "")
    if required and not value:
        raise ProviderUnreachable(
            f"{provider_name()}'s discovery document has no {ENDPOINTS[setting]}: set {setting}."
        )
    return value


def forget() -> None:
    """Drop the cached discovery documents (tests; a provider that moved its endpoints)."""
    with _lock:
        _metadata.clear()
