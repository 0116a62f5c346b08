"""What an anonymous caller can make the portal do: an error lists at most a few unknown
fields, the endpoints open to anyone refuse large bodies before parsing them, and the login
page answers a password check to at most its rate of attempts per address."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import PASSWORD

TOKEN_URL = "/api/v1/auth/token/"
REGISTER_URL = "/api/v1/agent/register/"
UNKNOWN_FIELDS_LISTED = 20  # README: an error names the first 20 unknown fields


def test_an_error_lists_the_first_unknown_fields_and_counts_the_rest(world):
    admin = APIClient()
    admin.force_login(world.admin)
    body = {f"junk{i:05d}": 1 for i in range(500)}
    response = admin.patch("/api/v1/tenants/team-a/", body, format="json")
    assert response.status_code == 400
    fields = response.json()["fields"]
    listed = [name for name in fields if name.startswith("junk")]
    assert listed == [f"junk{i:05d}" for i in range(UNKNOWN_FIELDS_LISTED)]
    assert fields["non_field_errors"] == [
        f"{500 - UNKNOWN_FIELDS_LISTED} more unknown fields not listed."
    ]
    assert len(response.content) < 4096


def test_a_few_unknown_fields_are_all_named(world):
    response = APIClient().post(
        TOKEN_URL, {"username": "alice", "password": PASSWORD, "pasword": "x"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["fields"] == {
        "pasword": ["Unknown field: this endpoint does not accept it."]
    }


def test_anonymous_endpoints_refuse_a_body_over_the_limit(world, subtests):
    assert settings.ANONYMOUS_BODY_MAX_BYTES == 16 * 1024  # the default
    big = json.dumps({f"k{i}": 1 for i in range(20_000)})
    assert len(big) > 16 * 1024
    for url in (TOKEN_URL, REGISTER_URL):
        with subtests.test(url):
            response = APIClient().post(url, big, content_type="application/json")
            assert response.status_code == 413, response.content
            body = response.json()
            assert body["code"] == "payload_too_large"
            assert "16384 bytes" in body["detail"]
    with subtests.test("/login/"):
        response = Client().post("/login/", big, content_type="application/x-www-form-urlencoded")
        assert response.status_code == 413
        assert "16384 bytes" in response.content.decode()


def test_a_body_under_the_limit_still_logs_in(world):
    response = APIClient().post(
        TOKEN_URL, {"username": "alice", "password": PASSWORD, "name": "x" * 100}, format="json"
    )
    assert response.status_code == 201


def login(client: Client, username: str, password: str = "guess") -> Any:  # noqa: S107  # a wrong password on purpose
    return client.post("/login/", {"username": username, "password": password})


def test_the_login_page_limits_attempts_per_address(world):
    sprayer = Client(REMOTE_ADDR="198.51.100.7")
    answers = [login(sprayer, f"user{i}").status_code for i in range(25)]
    assert answers[:20] == [200] * 20  # the form again: wrong username or password
    assert answers[20:] == [429] * 5
    refused = login(sprayer, "alice", PASSWORD)
    assert refused.status_code == 429
    assert "_auth_user_id" not in sprayer.session  # not even the right password is checked
    text = refused.content.decode()
    assert "Too many login attempts from your address" in text
    assert 0 < int(refused["Retry-After"]) <= 60
    # Another address is not affected; reading the page is not an attempt.
    assert Client(REMOTE_ADDR="198.51.100.8").get("/login/").status_code == 200
    assert sprayer.get("/login/").status_code == 200
    assert login(Client(REMOTE_ADDR="198.51.100.8"), "alice", PASSWORD).status_code == 302


def test_a_forged_x_forwarded_for_does_not_buy_more_attempts(world, subtests):
    """No trusted proxy (TRUSTED_PROXY_COUNT=0): the socket's address is the bucket, on the
    API's token endpoint and the login pages alike (they share it)."""
    for i in range(20):
        forged = APIClient(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
        response = forged.post(TOKEN_URL, {"username": f"u{i}", "password": "x"}, format="json")
        assert response.status_code == 400
    for path in ("/login/", "/admin/login/"):
        with subtests.test(path):
            forged = Client(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR="203.0.113.99")
            assert login(forged, "alice", PASSWORD).status_code == 429
    again = APIClient(REMOTE_ADDR="198.51.100.9", HTTP_X_FORWARDED_FOR="203.0.113.100")
    response = again.post(TOKEN_URL, {"username": "alice", "password": PASSWORD}, format="json")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"


def test_behind_a_trusted_proxy_each_client_has_its_own_bucket(world, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for i in range(21):
        login(Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.7"), f"u{i}")
    colleague = Client(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert login(colleague, "alice", PASSWORD).status_code == 302
