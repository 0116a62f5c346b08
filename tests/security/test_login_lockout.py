"""Login throttling (django-axes): LOGIN_FAILURE_LIMIT wrong passwords for one username from
one address lock that pair out for the cool-off, on the login page, Django admin and the API's
token endpoint alike, with a clear message; other users and other addresses are not affected."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import PASSWORD

LIMIT = settings.AXES_FAILURE_LIMIT
COOL_OFF_S = int(settings.AXES_COOLOFF_TIME.total_seconds())


def login_page(client: Client, username: str, password: str, path: str = "/login/"):  # type: ignore[no-untyped-def]
    return client.post(path, {"username": username, "password": password})


def test_the_defaults_are_five_failures_and_fifteen_minutes():
    assert (LIMIT, COOL_OFF_S) == (5, 900)
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_the_login_page_locks_a_username_and_address_after_the_limit(world):
    client = Client(REMOTE_ADDR="192.0.2.10")
    for _ in range(LIMIT - 1):
        response = login_page(client, "alice", "wrong")
        assert response.status_code == 200
        assert b"did not match" in response.content
    locked = login_page(client, "alice", "wrong")
    assert locked.status_code == 429
    # Even the right password is refused while locked, with a message that says why.
    again = login_page(client, "alice", PASSWORD)
    assert again.status_code == 429
    text = again.content.decode()
    assert "Too many failed logins" in text
    assert "locked for 15 minutes" in text
    assert again["Retry-After"] == str(COOL_OFF_S)
    assert "_auth_user_id" not in client.session

    # Another user from the same address, and alice from another address, still log in.
    assert login_page(Client(REMOTE_ADDR="192.0.2.10"), "bob", PASSWORD).status_code == 302
    assert login_page(Client(REMOTE_ADDR="192.0.2.11"), "alice", PASSWORD).status_code == 302


def test_the_lock_ends_after_the_cool_off(world):
    client = Client(REMOTE_ADDR="192.0.2.20")
    for _ in range(LIMIT):
        login_page(client, "alice", "wrong")
    assert login_page(client, "alice", PASSWORD).status_code == 429
    AccessAttempt.objects.update(
        attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(seconds=COOL_OFF_S + 1)
    )
    assert login_page(client, "alice", PASSWORD).status_code == 302


def test_a_successful_login_clears_the_count(world):
    client = Client(REMOTE_ADDR="192.0.2.30")
    for _ in range(LIMIT - 1):
        login_page(client, "alice", "wrong")
    assert login_page(client, "alice", PASSWORD).status_code == 302
    client.logout()
    for _ in range(LIMIT - 1):
        assert login_page(client, "alice", "wrong").status_code == 200


def test_django_admin_login_is_locked_too(world):
    client = Client(REMOTE_ADDR="192.0.2.40")
    for _ in range(LIMIT):
        login_page(client, "admin", "wrong", path="/admin/login/")
    response = login_page(client, "admin", PASSWORD, path="/admin/login/")
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    # ...and the lock holds on every entry point: it is the same username and address.
    assert login_page(client, "admin", PASSWORD).status_code == 429


def test_the_api_token_endpoint_is_locked_with_a_json_error(world):
    client = APIClient(REMOTE_ADDR="192.0.2.50")
    for _ in range(LIMIT - 1):
        response = client.post(
            "/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json"
        )
        assert response.status_code == 400
    client.post("/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json")
    response = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 429
    assert response["Retry-After"] == str(COOL_OFF_S)
    body = response.json()
    assert body["code"] == "locked_out"
    assert body["fields"] == {}
    assert "Too many failed logins" in body["detail"]
    assert "token" not in body


@pytest.mark.parametrize("forwarded", ["198.51.100.1", "198.51.100.2, 192.0.2.60"])
def test_a_forged_x_forwarded_for_does_not_escape_the_lock(world, forwarded):
    """With no trusted proxy (TRUSTED_PROXY_COUNT=0) the address is the socket's."""
    client = Client(REMOTE_ADDR="192.0.2.60")
    for _ in range(LIMIT):
        login_page(client, "alice", "wrong")
    forged = Client(REMOTE_ADDR="192.0.2.60", HTTP_X_FORWARDED_FOR=forwarded)
    assert login_page(forged, "alice", PASSWORD).status_code == 429


def test_behind_a_trusted_proxy_the_client_address_comes_from_the_proxy(world, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    proxy = "10.0.0.1"
    attacker = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.7")
    for _ in range(LIMIT):
        login_page(attacker, "alice", "wrong")
    assert login_page(attacker, "alice", PASSWORD).status_code == 429
    # alice behind the same proxy, from her own address, is not locked out by the attacker
    colleague = Client(REMOTE_ADDR=proxy, HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert login_page(colleague, "alice", PASSWORD).status_code == 302
