"""Single sign-on through a real OpenID provider (oidc-provider-mock on a local port): the
authorization code flow with PKCE, the ID token's checks (signature, expiry, nonce), the
groups that make roles at each sign-in, and a provider that is down."""

from __future__ import annotations

import logging
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.test import Client
from rest_framework.test import APIClient

from identity.choices import GroupRole
from identity.services import group_mapping_create
from tenants.models import Membership, Tenant
from tenants.services import api_token_create
from tests.factories import PASSWORD
from tests.identity.filing import file_request_with_token
from tests.identity.servers import (
    PROVIDER_NAME,
    free_port,
    oidc_provider,
    provider_user_set,
    sso_sign_in,
    use_oidc,
)

pytestmark = pytest.mark.django_db


def _map_team_a(world) -> None:  # type: ignore[no-untyped-def]
    group_mapping_create(
        group="gpu-team-a-leads", role=GroupRole.LEAD, tenant=world.team_a, actor=world.admin
    )
    group_mapping_create(
        group="gpu-team-a", role=GroupRole.MEMBER, tenant=world.team_a, actor=world.admin
    )
    group_mapping_create(
        group="gpu-platform-admins", role=GroupRole.PLATFORM_ADMIN, tenant=None, actor=world.admin
    )


def test_the_login_page_offers_the_provider_and_the_local_form(world, issuer):
    page = Client().get("/login/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"Sign in with {PROVIDER_NAME}" in text
    assert 'name="password"' in text


def test_sign_in_redirect_uses_pkce_nonce_and_state(world, issuer):
    start = Client().get("/oidc/authenticate/")
    assert start.status_code == 302
    target = urlsplit(start["Location"])
    assert f"{target.scheme}://{target.netloc}" == issuer
    query = parse_qs(target.query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) >= 43
    assert query["nonce"][0] and query["state"][0]
    assert query["redirect_uri"] == ["http://testserver/oidc/callback/"]


def test_a_lead_by_group_signs_in_and_loses_the_role_when_she_leaves_the_group(world, issuer):
    _map_team_a(world)
    provider_user_set(
        issuer, "dana-sub", preferred_username="dana", email="dana@example.org",
        groups=["gpu-team-a-leads", "staff-everyone"],
    )  # fmt: skip
    client = Client()
    answer = sso_sign_in(client, "dana-sub")
    assert answer.status_code == 302 and answer["Location"] == "/", answer.content
    membership = Membership.objects.get(user__username="dana", tenant=world.team_a)
    assert (membership.role, membership.source) == ("lead", "group:gpu-team-a-leads")
    assert client.get("/").status_code == 200  # signed in
    token = api_token_create(user=membership.user, name="ci")[1]
    assert file_request_with_token(token) == 201

    # She leaves the leads' group at the provider and stays in the team's group.
    provider_user_set(issuer, "dana-sub", preferred_username="dana", groups=["gpu-team-a"])
    again = sso_sign_in(Client(), "dana-sub")
    assert again.status_code == 302
    membership.refresh_from_db()
    assert (membership.role, membership.source) == ("member", "group:gpu-team-a")
    assert file_request_with_token(token) == 403  # her token: a lead's action no more

    # And out of every group: no membership left.
    provider_user_set(issuer, "dana-sub", preferred_username="dana", groups=[])
    sso_sign_in(Client(), "dana-sub")
    assert not Membership.objects.filter(user__username="dana").exists()
    assert file_request_with_token(token) in (403, 404)
    actions = list(
        world.team_a.audit_events.filter(actor_username="dana").values_list("action", "after")
    )
    assert ("membership.added_by_group", {"user": "dana", "role": "lead",
            "group": "gpu-team-a-leads", "provider": "oidc"}) in actions  # fmt: skip
    assert any(a == "membership.removed_by_group" for a, _ in actions)


def test_memberships_granted_by_hand_stay_whatever_the_groups(world, issuer):
    _map_team_a(world)
    provider_user_set(issuer, "carol-sub", preferred_username="carol", groups=["gpu-team-a-leads"])
    sso_sign_in(Client(), "carol-sub")
    # carol was a member of team-a by hand: the group does not take that over.
    carol = Membership.objects.get(user=world.carol, tenant=world.team_a)
    assert (carol.role, carol.source) == ("member", "manual")
    provider_user_set(issuer, "carol-sub", preferred_username="carol", groups=[])
    sso_sign_in(Client(), "carol-sub")
    assert Membership.objects.filter(user=world.carol, tenant=world.team_a).exists()


def test_platform_admin_from_a_group_comes_and_goes(world, issuer):
    _map_team_a(world)
    provider_user_set(issuer, "pat", preferred_username="pat", groups=["gpu-platform-admins"])
    sso_sign_in(Client(), "pat")
    from tenants.models import User

    pat = User.objects.get(username="pat")
    assert pat.is_platform_admin and pat.platform_admin_source == "group:gpu-platform-admins"
    provider_user_set(issuer, "pat", preferred_username="pat", groups=[])
    sso_sign_in(Client(), "pat")
    pat.refresh_from_db()
    assert not pat.is_platform_admin
    # An admin by hand stays one.
    provider_user_set(issuer, "admin-sub", preferred_username="admin", groups=[])
    sso_sign_in(Client(), "admin-sub")
    world.admin.refresh_from_db()
    assert world.admin.is_platform_admin


def test_a_group_mapped_to_a_deleted_tenant_is_ignored_with_a_log_line(world, issuer, caplog):
    gone = Tenant.objects.create(slug="team-gone", display_name="Gone")
    group_mapping_create(group="gpu-gone", role=GroupRole.LEAD, tenant=gone, actor=world.admin)
    gone.delete()
    provider_user_set(
        issuer, "erin", preferred_username="erin", groups=["gpu-gone", "nobody-maps-this"]
    )
    caplog.set_level(logging.INFO, logger="identity")
    answer = sso_sign_in(Client(), "erin")
    assert answer.status_code == 302  # signed in, without a role
    assert not Membership.objects.filter(user__username="erin").exists()
    assert "'gpu-gone' is mapped to tenant 'team-gone', which no longer exists" in caplog.text
    assert "'nobody-maps-this' maps to no tenant role" in caplog.text
    caplog.clear()
    sso_sign_in(Client(), "erin")
    assert "nobody-maps-this" not in caplog.text  # logged once


def test_next_stays_within_the_portal(world, issuer):
    provider_user_set(issuer, "fay", preferred_username="fay")
    inside = sso_sign_in(Client(), "fay", next_url="/requests/")
    assert inside["Location"] == "/requests/"
    for outside in ("https://evil.example/", "//evil.example/x", "http:/\\evil.example"):
        answer = sso_sign_in(Client(), "fay", next_url=outside)
        assert answer.status_code == 302
        assert answer["Location"] == "/", outside


def test_a_wrong_nonce_is_refused(world, issuer):
    provider_user_set(issuer, "gil", preferred_username="gil", groups=[])
    client = Client()
    start = client.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    session = client.session
    session["oidc_states"][state]["nonce"] = "a-nonce-of-another-sign-in"
    session.save()
    approved = requests.post(
        start["Location"], data={"sub": "gil"}, allow_redirects=False, timeout=10
    )
    back = urlsplit(approved.headers["Location"])
    answer = client.get(f"{back.path}?{back.query}")
    assert answer.status_code == 400
    assert "does not carry this sign-in&#x27;s nonce" in answer.content.decode()
    assert "_auth_user_id" not in client.session
    assert not Membership.objects.filter(user__username="gil").exists()


def test_an_expired_id_token_is_refused(world, settings):
    with oidc_provider(access_token_max_age=timedelta(hours=-1)) as url:
        use_oidc(settings, url)
        provider_user_set(url, "hal", preferred_username="hal")
        client = Client()
        answer = sso_sign_in(client, "hal")
    assert answer.status_code == 400
    assert f"{PROVIDER_NAME}&#x27;s ID token has expired" in answer.content.decode()
    assert "_auth_user_id" not in client.session


class _Keys(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


def test_an_id_token_with_a_wrong_signature_is_refused(world, settings):
    """The portal is given a key set that names the provider's key id but holds another key
    (another provider's): the ID token's signature cannot match it."""
    with oidc_provider() as real, oidc_provider() as other:
        own = requests.get(f"{real}/jwks", timeout=5).json()["keys"][0]
        foreign = requests.get(f"{other}/jwks", timeout=5).json()["keys"][0]
        assert foreign["n"] != own["n"]
        foreign["kid"] = own.get("kid", foreign.get("kid"))
        import json

        _Keys.body = json.dumps({"keys": [foreign]}).encode()
        server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Keys)
        Thread(target=server.serve_forever, daemon=True).start()
        try:
            use_oidc(
                settings,
                real,
                OIDC_OP_JWKS_ENDPOINT=f"http://127.0.0.1:{server.server_port}/jwks",
            )
            provider_user_set(real, "ivy", preferred_username="ivy")
            client = Client()
            answer = sso_sign_in(client, "ivy")
        finally:
            server.shutdown()
    assert answer.status_code == 400
    assert "failed its signature check" in answer.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_provider_that_is_down_is_named_and_the_local_form_still_works(world, settings):
    use_oidc(settings, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    client = Client()
    answer = client.get("/oidc/authenticate/")
    assert answer.status_code == 502
    text = answer.content.decode()
    assert f"{PROVIDER_NAME} could not be reached" in text
    assert "You can still log in with your portal password below." in text
    assert 'name="password"' in text
    logged_in = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert logged_in.status_code == 302
    assert client.get("/").status_code == 200


def test_with_the_local_form_off_only_the_provider_signs_in(world, issuer, settings):
    settings.LOCAL_LOGIN_ENABLED = False
    page = Client().get("/login/").content.decode()
    assert f"Sign in with {PROVIDER_NAME}" in page
    assert 'name="password"' not in page
    refused = Client().post("/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 200  # the form again: no local password is checked
    api = APIClient().post(
        "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json"
    )
    assert api.status_code in (400, 401)
    provider_user_set(issuer, "alice-sub", preferred_username="alice")
    assert sso_sign_in(Client(), "alice-sub").status_code == 302


def test_logout_ends_the_session_and_the_providers(world, issuer):
    provider_user_set(issuer, "jo", preferred_username="jo")
    client = Client()
    sso_sign_in(client, "jo")
    assert "_auth_user_id" in client.session
    out = client.post("/logout/")
    assert out.status_code == 302
    target = urlsplit(out["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{issuer}/oauth2/end_session"
    query = parse_qs(target.query)
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert query["id_token_hint"][0]
    assert "_auth_user_id" not in client.session
    # A local account's logout stays in the portal.
    local = Client()
    local.post("/login/", {"username": "alice", "password": PASSWORD})
    assert local.post("/logout/")["Location"] == "/login/"


def test_a_sign_in_refused_at_the_provider_says_so(world, issuer):
    client = Client()
    start = client.get("/oidc/authenticate/")
    denied = requests.post(
        start["Location"], data={"action": "deny"}, allow_redirects=False, timeout=10
    )
    back = urlsplit(denied.headers["Location"])
    answer = client.get(f"{back.path}?{back.query}")
    assert answer.status_code == 400
    assert f"{PROVIDER_NAME} refused the sign-in (access_denied)." in answer.content.decode()
    assert "_auth_user_id" not in client.session


def test_sso_routes_answer_404_while_single_sign_on_is_not_configured(world):
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert Client().get("/oidc/callback/?code=x&state=y").status_code == 404
    assert "Sign in with" not in Client().get("/login/").content.decode()
