"""Tokens: API tokens hashed and expiring by default; node and join tokens each good for their
own endpoints only; and no secret (password, token, session) ever reaches the logs."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.models import ApiToken
from tests.factories import PASSWORD


def test_new_api_tokens_expire_after_the_configured_lifetime(world):
    client = APIClient()
    response = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 201
    token = ApiToken.objects.get(pk=response.json()["id"])
    lifetime = token.expires_at - timezone.now()
    assert timedelta(days=settings.API_TOKEN_TTL_DAYS) - lifetime < timedelta(minutes=1)
    assert response.json()["token"] not in (token.digest, token.prefix)


def _register_node(world) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    admin = APIClient()
    admin.force_login(world.admin)
    join = admin.post("/api/v1/nodes/join-tokens/", {"node": "gpu-node-9"}, format="json")
    assert join.status_code == 201, join.content
    join_secret = join.json()["join_token"]
    registered = APIClient().post(
        "/api/v1/agent/register/",
        {"join_token": join_secret, "hostname": "gpu-node-9.lab", "agent_version": "1.0"},
        format="json",
    )
    assert registered.status_code == 201, registered.content
    return join_secret, registered.json()["node_token"]


def test_each_kind_of_token_opens_only_its_own_endpoints(world):
    join_secret, node_secret = _register_node(world)
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": "admin", "password": PASSWORD}, format="json"
    )
    user_secret = response.json()["token"]

    def client(header: str) -> APIClient:
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=header)
        return c

    # A node's token: the agent endpoints, nothing a user may call, even sent as a user token.
    assert client(f"Bearer {node_secret}").get("/api/v1/agent/desired/").status_code == 200
    for header in (f"Bearer {node_secret}", f"Token {node_secret}"):
        assert client(header).get("/api/v1/me/").status_code == 401
        assert client(header).get("/api/v1/nodes/").status_code == 401
    # A platform admin's user token: not the agents' endpoints.
    assert client(f"Token {user_secret}").get("/api/v1/nodes/").status_code == 200
    for header in (f"Token {user_secret}", f"Bearer {user_secret}"):
        assert client(header).get("/api/v1/agent/desired/").status_code in (401, 403)
    # A join token (used) is neither.
    for header in (f"Bearer {join_secret}", f"Token {join_secret}"):
        assert client(header).get("/api/v1/agent/desired/").status_code in (401, 403)
        assert client(header).get("/api/v1/me/").status_code == 401


def test_no_secret_reaches_the_logs(world, caplog):
    caplog.set_level(logging.DEBUG)
    secrets: list[str] = [PASSWORD, "wrong-guess-Zq81x"]

    page = Client()
    assert page.post("/login/", {"username": "alice", "password": secrets[1]}).status_code == 200
    assert page.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302
    secrets.append(page.cookies["sessionid"].value)
    page.get("/")

    api = APIClient()
    obtained = api.post(
        "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json"
    )
    secrets.append(obtained.json()["token"])
    api.credentials(HTTP_AUTHORIZATION=f"Token {secrets[-1]}")
    assert api.get("/api/v1/me/").status_code == 200
    api.post("/api/v1/auth/token/", {"username": "alice", "password": secrets[1]}, format="json")

    join_secret, node_secret = _register_node(world)
    secrets += [join_secret, node_secret]
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {node_secret}")
    assert agent.get("/api/v1/agent/desired/").status_code == 200
    # Refused credentials are logged as refusals, without the credential.
    bogus = APIClient()
    bogus.credentials(HTTP_AUTHORIZATION="Bearer not-a-real-token-Vx93")
    assert bogus.get("/api/v1/agent/desired/").status_code == 401
    secrets.append("not-a-real-token-Vx93")
    reused = APIClient().post(
        "/api/v1/agent/register/",
        {"join_token": join_secret, "hostname": "x.lab", "agent_version": "1.0"},
        format="json",
    )
    assert reused.status_code == 401

    logged = caplog.text + "\n".join(str(r.args) for r in caplog.records)
    assert "Unauthorized: /api/v1/agent/desired/" in logged  # the capture did see the requests
    for secret in secrets:
        assert secret not in logged, f"a secret ({secret[:4]}...) is in the logs"


def test_no_secret_from_single_sign_on_or_the_directory_reaches_the_logs(
    world, settings, caplog, tmp_path
):
    """The sign-in paths of the identity app: the OpenID provider's code, ID token and the
    client secret, and a directory password (right and wrong), are never logged."""
    from urllib.parse import parse_qs, urlsplit

    import requests

    from tests.identity.servers import (
        CLIENT_SECRET,
        LDAP_ADMIN_PASSWORD,
        oidc_provider,
        provider_user_set,
        slapd,
        use_ldap,
        use_oidc,
    )

    caplog.set_level(logging.DEBUG)
    secrets: list[str] = [CLIENT_SECRET, LDAP_ADMIN_PASSWORD, "ldap-pass-Hj52", "ldap-wrong-Ty09"]
    with oidc_provider() as issuer:
        use_oidc(settings, issuer)
        provider_user_set(issuer, "kim", preferred_username="kim", groups=["x"])
        client = Client()
        start = client.get("/oidc/authenticate/")
        approved = requests.post(
            start["Location"], data={"sub": "kim"}, allow_redirects=False, timeout=10
        )
        back = urlsplit(approved.headers["Location"])
        secrets.append(parse_qs(back.query)["code"][0])
        assert client.get(f"{back.path}?{back.query}").status_code == 302
        secrets += [client.session["oidc_id_token"], client.cookies["sessionid"].value]
        client.post("/logout/")
    with slapd(tmp_path / "ldap") as directory:
        use_ldap(settings, directory)
        directory.user_add("lou", secrets[2])
        assert (
            Client().post("/login/", {"username": "lou", "password": secrets[3]}).status_code == 200
        )
        assert (
            Client().post("/login/", {"username": "lou", "password": secrets[2]}).status_code == 302
        )

    # The provider runs in this process for the test; its own logs (werkzeug's request log,
    # Authlib's grant debugging) are the provider's, not the portal's, which uses neither.
    provider_loggers = ("werkzeug", "oidc_provider_mock", "authlib")
    portal = [r for r in caplog.records if not r.name.startswith(provider_loggers)]
    logged = "\n".join(f"{r.getMessage()} {r.args}" for r in portal)
    assert "/oidc/callback/" in logged  # the capture did see the sign-ins
    for secret in secrets:
        leaks = sorted({r.name for r in portal if secret in f"{r.getMessage()} {r.args}"})
        assert secret not in logged, f"a secret ({secret[:4]}...) is in the logs of {leaks}"
