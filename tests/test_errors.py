"""Every API error is JSON of one shape, {"detail", "code", "fields"}, with the right status;
bad input never causes a 500."""

from __future__ import annotations

import re

import pytest
from rest_framework.test import APIClient

from tenants.models import AuditEvent, Tenant


def assert_error(response, status: int, code: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"detail", "code", "fields"}, body
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert body["code"] == code
    assert isinstance(body["fields"], dict)
    for name, messages in body["fields"].items():
        assert isinstance(name, str)
        assert messages
        assert all(isinstance(m, str) and m for m in messages)
    return body


def test_400_names_each_field_and_summarises_them(world, api_as):
    response = api_as(world.admin).post(
        "/api/v1/tenants/", {"slug": "Bad_Slug", "tier": "small"}, format="json"
    )
    body = assert_error(response, 400, "invalid")
    assert set(body["fields"]) == {"slug", "display_name", "cluster"}
    assert "DNS-1123" in body["fields"]["slug"][0]
    assert body["fields"]["display_name"] == ["This field is required."]
    assert body["detail"].startswith("slug: ")
    assert "cluster: This field is required." in body["detail"]


def test_400_from_a_business_rule_has_the_same_shape(world, api_as):
    body = assert_error(
        api_as(world.admin).post(
            "/api/v1/tenants/",
            {"slug": "team-a", "display_name": "A", "tier": "small", "cluster": "demo-h100"},
            format="json",
        ),
        400,
        "invalid",
    )
    assert body["fields"] == {"slug": ["A tenant with slug 'team-a' already exists."]}


def test_400_for_an_unknown_query_filter_value(world, api_as):
    body = assert_error(api_as(world.admin).get("/api/v1/flavors/?kind=fpga"), 400, "invalid")
    assert list(body["fields"]) == ["kind"]


def test_401_without_credentials(world):
    body = assert_error(APIClient().get("/api/v1/tenants/"), 401, "not_authenticated")
    assert body["fields"] == {}


def test_401_with_a_bad_token(world):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token nope")
    assert_error(client.get("/api/v1/tenants/"), 401, "authentication_failed")


def test_403_for_a_member_who_may_not_do_this(world, api_as):
    body = assert_error(
        api_as(world.alice).patch("/api/v1/tenants/team-a/", {"state": "suspended"}, format="json"),
        403,
        "permission_denied",
    )
    assert body["detail"] == "Only platform admins may change this."


NOT_FOUND = [
    "/api/v1/tenants/no-such-team/",
    "/api/v1/tenants/no-such-team/quotas/",
    "/api/v1/tenants/team-a/members/nobody/",
    "/api/v1/clusters/nowhere/",
    "/api/v1/tier-templates/huge/",
    "/api/v1/flavors/424242/",
    "/api/v1/tenants/?page=9",
]


def test_404_for_what_does_not_exist(world, api_as, subtests):
    client = api_as(world.admin)
    for url in NOT_FOUND:
        with subtests.test(url):
            assert_error(client.get(url), 404, "not_found")


def test_404_for_a_token_that_is_not_yours(world, api_as):
    assert_error(api_as(world.admin).delete("/api/v1/auth/tokens/424242/"), 404, "not_found")


NOT_ALLOWED = [
    ("put", "/api/v1/tenants/team-a/"),
    ("delete", "/api/v1/tenants/team-a/"),
    ("post", "/api/v1/tenants/team-a/quotas/"),
    ("post", "/api/v1/clusters/"),
    ("delete", "/api/v1/me/"),
    ("get", "/api/v1/auth/token/"),
]


def test_405_for_a_method_the_route_does_not_have(world, api_as, subtests):
    client = api_as(world.admin)
    for method, url in NOT_ALLOWED:
        with subtests.test(f"{method} {url}"):
            body = assert_error(getattr(client, method)(url), 405, "method_not_allowed")
            assert method.upper() in body["detail"]


def test_409_for_a_conflicting_state(world, api_as):
    body = assert_error(
        api_as(world.admin).delete("/api/v1/tenants/team-a/members/alice/"), 409, "conflict"
    )
    assert body["fields"] == {"username": ["the tenant's only lead cannot be removed or demoted"]}


def test_415_for_a_body_that_is_not_json(world, api_as):
    response = api_as(world.admin).generic(
        "POST", "/api/v1/tenants/", "slug: team-d", content_type="text/yaml"
    )
    assert_error(response, 415, "unsupported_media_type")


MALFORMED = [
    pytest.param(b"{", id="truncated"),
    pytest.param(b"{'slug': 'team-d'}", id="single-quotes"),
    pytest.param(b'{"slug": "team-d",}', id="trailing-comma"),
    pytest.param(b"not json at all", id="text"),
    pytest.param(b'{"slug": NaN}', id="nan"),
    pytest.param(b"\xff\xfe{}", id="not-utf8"),
    pytest.param(b'{"slug": ' + b"1" * 5000 + b"}", id="huge-integer"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-too-deeply"),
    pytest.param(b'{"a":' * 50_000 + b"1" + b"}" * 50_000, id="objects-nested-too-deeply"),
]

WRITES = [
    ("post", "/api/v1/tenants/"),
    ("patch", "/api/v1/tenants/team-a/"),
    ("post", "/api/v1/tenants/team-a/namespaces/"),
    ("post", "/api/v1/tenants/team-a/members/"),
    ("patch", "/api/v1/tenants/team-a/members/carol/"),
    ("post", "/api/v1/auth/token/"),
]


def test_a_malformed_json_body_is_a_400_never_a_500(world, api_as, subtests):
    client = api_as(world.admin)
    client.raise_request_exception = True  # a server error fails the test loudly
    before = (Tenant.objects.count(), AuditEvent.objects.count())
    for case in MALFORMED:
        (body,) = case.values
        for method, url in WRITES:
            with subtests.test(f"{case.id}: {method} {url}"):
                response = client.generic(
                    method.upper(), url, body, content_type="application/json"
                )
                if url == "/api/v1/auth/token/" and len(body) > 16 * 1024:
                    # open to anyone: refused by its size before anything parses it
                    assert_error(response, 413, "payload_too_large")
                    continue
                error = assert_error(response, 400, "parse_error")
                assert error["detail"].startswith("JSON parse error")
    assert (Tenant.objects.count(), AuditEvent.objects.count()) == before


def test_a_body_over_the_upload_limit_is_a_json_413_naming_it(world, api_as, subtests, settings):
    """Django refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) with its own HTML 400;
    an API path answers in the API's shape instead, and nothing is written."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = b'{"slug": "team-d", "display_name": "' + b"x" * limit + b'"}'
    client = api_as(world.admin)
    client.raise_request_exception = True
    before = (Tenant.objects.count(), AuditEvent.objects.count())
    for method, url in [*WRITES[:5], ("post", "/api/v1/mig/validate/")]:
        with subtests.test(f"{method} {url}"):
            response = client.generic(method.upper(), url, body, content_type="application/json")
            error = assert_error(response, 413, "payload_too_large")
            assert re.search(
                r"larger than \d+ bytes \(\d+ KiB\), this endpoint's limit", error["detail"]
            )
            if "mig" not in url:  # that endpoint has a smaller limit of its own
                assert f"larger than {limit} bytes" in error["detail"]
    form = client.generic(
        "POST", "/api/v1/tenants/", b"slug=" + b"x" * limit,
        content_type="application/x-www-form-urlencoded",
    )  # fmt: skip
    assert form.status_code in (413, 415), form.content
    assert form["Content-Type"].startswith("application/json")
    assert (Tenant.objects.count(), AuditEvent.objects.count()) == before


WRONG_SHAPE = [
    pytest.param(b"[]", id="list"),
    pytest.param(b'"team-d"', id="string"),
    pytest.param(b"null", id="null"),
    pytest.param(b"12", id="number"),
    pytest.param(b'{"slug": {"nested": true}}', id="object-for-a-string"),
    pytest.param(b'{"slug": "te\\u0000am"}', id="nul-character"),
]


def test_well_formed_json_of_the_wrong_shape_is_a_400(world, api_as, subtests):
    client = api_as(world.admin)
    client.raise_request_exception = True
    for case in WRONG_SHAPE:
        (body,) = case.values
        for method, url in WRITES[:4]:
            with subtests.test(f"{case.id}: {method} {url}"):
                response = client.generic(
                    method.upper(), url, body, content_type="application/json"
                )
                assert_error(response, 400, "invalid")


NUL_URLS = [
    "/api/v1/tenants/%00/",
    "/api/v1/tenants/%00/quotas/",
    "/api/v1/tenants/team-a%00/members/",
    "/api/v1/tenants/team-a/members/%00/",
    "/api/v1/clusters/%00/",
    "/api/v1/tier-templates/demo%00/",
    "/api/v1/tenants/?search=%00",
    "/api/v1/tenants/?parent=%00",
    "/api/v1/flavors/?cluster=%00",
    "/tenants/%00/",
]


def test_a_nul_character_in_the_url_is_not_a_server_error(world, api_as, subtests):
    """PostgreSQL cannot store or compare NUL characters; they must not reach it."""
    client = api_as(world.admin)
    client.force_login(world.admin)  # the portal page uses the session
    client.raise_request_exception = True
    for url in NUL_URLS:
        with subtests.test(url):
            response = client.get(url)
            assert response.status_code in (400, 404), response.content


@pytest.mark.parametrize("path", ["/api/v1/no-such-thing/", "/api/v1/clusters/UPPER/", "/api/v2/"])
def test_unknown_api_urls_answer_json_404(world, api_as, path):
    response = api_as(world.alice).get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found.", "code": "not_found", "fields": {}}


def test_unknown_portal_urls_answer_the_portal_404_page(world, client):
    client.force_login(world.alice)
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"Not found" in response.content and b"<html" in response.content
