"""The tenants part of /api/v1/: tenants, namespaces, members, API tokens and /me/.

Personas come from ``world`` (tests/conftest.py): admin, alice (lead of team-a), carol (member),
victor (viewer), bob (lead of team-b, the outsider).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tenants.choices import MembershipRole, NamespacePurpose
from tenants.models import ApiToken, AuditEvent, Membership, Namespace, Tenant
from tenants.services import api_token_create, membership_set
from tests.factories import PASSWORD, TenantFactory, UserFactory

TOKEN_URL = "/api/v1/auth/token/"


def slugs(response) -> list[str]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return [t["slug"] for t in response.json()["results"]]


# --- tenants: list, detail, filters, pagination --------------------------------------------


def test_admin_lists_every_tenant_in_slug_order(world, api_as):
    assert slugs(api_as(world.admin).get("/api/v1/tenants/")) == ["team-a", "team-b", "team-c"]


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_members_of_any_role_list_only_their_tenant(world, api_as, persona):
    assert slugs(api_as(getattr(world, persona)).get("/api/v1/tenants/")) == ["team-a"]


def test_a_user_without_memberships_lists_nothing(world, api_as):
    loner = UserFactory(username="loner")
    response = api_as(loner).get("/api/v1/tenants/")
    assert response.json()["count"] == 0
    assert slugs(response) == []


def test_tenant_detail_shows_namespaces_and_fields(world, api_as):
    response = api_as(world.carol).get("/api/v1/tenants/team-a/")
    assert response.status_code == 200
    body = response.json()
    assert body["slug"] == "team-a"
    assert body["display_name"] == "Team A"
    assert body["state"] == "active"
    assert body["parent"] is None
    assert body["namespaces"] == ["team-a-inference", "team-a-training"]


def test_tenant_detail_of_an_unknown_slug_is_404(world, api_as):
    assert api_as(world.admin).get("/api/v1/tenants/no-such-team/").status_code == 404


def test_filter_by_state_parent_and_cohort(world, api_as):
    org = TenantFactory(slug="org")
    Tenant.objects.filter(slug="team-b").update(parent=org, cohort="research")
    Tenant.objects.filter(slug="team-c").update(state="suspended")
    admin = api_as(world.admin)
    assert slugs(admin.get("/api/v1/tenants/?state=suspended")) == ["team-c"]
    assert slugs(admin.get("/api/v1/tenants/?state=active")) == ["org", "team-a", "team-b"]
    assert slugs(admin.get("/api/v1/tenants/?parent=org")) == ["team-b"]
    assert slugs(admin.get("/api/v1/tenants/?cohort=research")) == ["team-b"]
    assert admin.get("/api/v1/tenants/team-b/").json()["parent"] == "org"


def test_search_matches_slug_or_display_name_case_insensitively(world, api_as):
    Tenant.objects.filter(slug="team-c").update(display_name="Vision Research")
    admin = api_as(world.admin)
    assert slugs(admin.get("/api/v1/tenants/?search=TEAM-B")) == ["team-b"]
    assert slugs(admin.get("/api/v1/tenants/?search=vision")) == ["team-c"]
    assert slugs(admin.get("/api/v1/tenants/?search=nothing-like-this")) == []


def test_an_unknown_state_filter_is_a_400_naming_the_field(world, api_as):
    response = api_as(world.admin).get("/api/v1/tenants/?state=sleeping")
    assert response.status_code == 400
    assert "state" in response.json()["fields"]


def test_pagination_pages_and_links(world, api_as):
    Tenant.objects.bulk_create(Tenant(slug=f"bulk-{i:03d}", display_name=f"B{i}") for i in range(7))
    admin = api_as(world.admin)
    first = admin.get("/api/v1/tenants/?page_size=4").json()
    assert first["count"] == 10
    assert [t["slug"] for t in first["results"]] == ["bulk-000", "bulk-001", "bulk-002", "bulk-003"]
    assert first["previous"] is None
    assert "page=2" in first["next"]
    last = admin.get("/api/v1/tenants/?page_size=4&page=3").json()
    assert [t["slug"] for t in last["results"]] == ["team-b", "team-c"]
    assert last["next"] is None


def test_a_long_list_is_counted_apart_with_the_same_answer(world, api_as, monkeypatch):
    """Past WINDOW_COUNT_MAX rows a caller's next pages count apart (a scalar COUNT subquery)
    and build only their own rows (the window built every tenant): the same one query, the
    same pages and totals."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from core.api import pagination

    monkeypatch.setattr(pagination, "WINDOW_COUNT_MAX", 6)
    monkeypatch.setattr(pagination, "_LARGE_LISTS", {})
    Tenant.objects.bulk_create(Tenant(slug=f"bulk-{i:03d}", display_name=f"B{i}") for i in range(7))
    admin = api_as(world.admin)

    def page(query: str) -> tuple[dict, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            body = admin.get(f"/api/v1/tenants/?page_size=4{query}").json()
        return body, [q["sql"] for q in queries.captured_queries]

    (windowed, one), (counted, two) = page(""), page("")
    assert windowed == counted and counted["count"] == 10 and "page=2" in counted["next"]
    assert len(two) == len(one) and any("OVER ()" in q for q in one)
    assert not any("OVER ()" in q for q in two) and any("(SELECT COUNT(" in q for q in two)
    assert (
        page("&page=3")[0]["results"]
        == admin.get("/api/v1/tenants/?page_size=4&page=3").json()["results"]
    )
    assert admin.get("/api/v1/tenants/?page=9").status_code == 404
    # A lead's own short list keeps the one query; a list that shrank goes back to it.
    assert api_as(world.alice).get("/api/v1/tenants/").json()["count"] < 6
    Tenant.objects.filter(slug__startswith="bulk-").delete()
    page("")
    assert any("OVER ()" in q for q in page("")[1])


def test_default_page_is_50_and_page_size_is_capped_at_200(world, api_as):
    Tenant.objects.bulk_create(
        Tenant(slug=f"bulk-{i:03d}", display_name=f"B{i}") for i in range(210)
    )
    admin = api_as(world.admin)
    assert len(admin.get("/api/v1/tenants/").json()["results"]) == 50
    assert len(admin.get("/api/v1/tenants/?page_size=120").json()["results"]) == 120
    capped = admin.get("/api/v1/tenants/?page_size=1000").json()
    assert capped["count"] == 213
    assert len(capped["results"]) == 200


def test_a_page_past_the_end_is_a_json_404(world, api_as):
    response = api_as(world.admin).get("/api/v1/tenants/?page=99")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


NOT_WHOLE_NUMBERS = ["³", "٣", "\uff11", "1.5", "-1", " 1", "0", "9" * 5000]


@pytest.mark.parametrize("url", ["/api/v1/tenants/", "/api/v1/audit-events/"])
@pytest.mark.parametrize("param", ["page", "page_size"])
@pytest.mark.parametrize("value", NOT_WHOLE_NUMBERS)
def test_a_page_or_size_that_is_no_ascii_whole_number_is_400_naming_it(
    world, api_as, url, param, value
):
    """Superscript, Arabic-Indic or full-width digits pass str.isdigit() but are no number
    here; 5,000 digits pass it too and int() refuses them."""
    response = api_as(world.admin).get(url, {param: value})
    assert response.status_code == 400, response.content
    assert list(response.json()["fields"]) == [param]


# --- tenants: PATCH ------------------------------------------------------------------------


def test_admin_patches_a_tenant_and_the_change_is_audited(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tenants/team-a/",
        {"display_name": "Team A (vision)", "state": "suspended"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["display_name"] == "Team A (vision)"
    assert response.json()["state"] == "suspended"
    world.team_a.refresh_from_db()
    assert world.team_a.display_name == "Team A (vision)"
    event = AuditEvent.objects.filter(action="tenant.updated").get()
    assert event.actor == world.admin
    assert event.before["display_name"] == "Team A"
    assert event.after["display_name"] == "Team A (vision)"
    assert (event.before["state"], event.after["state"]) == ("active", "suspended")


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_members_cannot_patch_their_own_tenant(world, api_as, persona):
    response = api_as(getattr(world, persona)).patch(
        "/api/v1/tenants/team-a/", {"display_name": "Mine now"}, format="json"
    )
    assert response.status_code == 403
    world.team_a.refresh_from_db()
    assert world.team_a.display_name == "Team A"


def test_patch_with_a_bad_state_or_an_unknown_field_is_400(world, api_as):
    admin = api_as(world.admin)
    bad_state = admin.patch("/api/v1/tenants/team-a/", {"state": "sleeping"}, format="json")
    assert bad_state.status_code == 400
    assert "state" in bad_state.json()["fields"]
    unknown = admin.patch("/api/v1/tenants/team-a/", {"slug": "renamed"}, format="json")
    assert unknown.status_code == 400
    assert "slug" in unknown.json()["fields"]
    blank = admin.patch("/api/v1/tenants/team-a/", {"display_name": "   "}, format="json")
    assert blank.status_code == 400
    assert "display_name" in blank.json()["fields"]
    assert Tenant.objects.get(slug="team-a").state == "active"
    assert not Tenant.objects.filter(slug="renamed").exists()


# --- namespaces ----------------------------------------------------------------------------


def test_members_list_their_tenants_namespaces(world, api_as):
    response = api_as(world.victor).get("/api/v1/tenants/team-a/namespaces/")
    assert response.status_code == 200
    assert [(n["name"], n["purpose"]) for n in response.json()["results"]] == [
        ("team-a-inference", "inference"),
        ("team-a-training", "training"),
    ]


def test_admin_creates_a_namespace(world, api_as):
    response = api_as(world.admin).post(
        "/api/v1/tenants/team-a/namespaces/",
        {"name": "team-a-batch", "purpose": "training"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["name"] == "team-a-batch"
    namespace = Namespace.objects.get(name="team-a-batch")
    assert namespace.tenant == world.team_a
    assert namespace.purpose == NamespacePurpose.TRAINING
    event = AuditEvent.objects.get(action="namespace.created", object_id="team-a-batch")
    assert event.actor == world.admin
    assert event.tenant == world.team_a


def test_a_lead_cannot_create_a_namespace(world, api_as):
    response = api_as(world.alice).post(
        "/api/v1/tenants/team-a/namespaces/", {"name": "team-a-extra"}, format="json"
    )
    assert response.status_code == 403
    assert not Namespace.objects.filter(name="team-a-extra").exists()


BAD_NAMESPACE_NAMES = [
    ("team-b-training", "already taken"),
    ("Team_A_Batch", "DNS-1123"),
    ("-batch", "DNS-1123"),
    ("a" * 64, "63"),
    ("", "blank"),
]


def test_a_bad_namespace_name_is_a_400_naming_the_field(world, api_as, subtests):
    admin = api_as(world.admin)
    for name, reason in BAD_NAMESPACE_NAMES:
        with subtests.test(name):
            before = Namespace.objects.count()
            response = admin.post(
                "/api/v1/tenants/team-a/namespaces/", {"name": name}, format="json"
            )
            assert response.status_code == 400
            assert reason in " ".join(response.json()["fields"]["name"])
            assert Namespace.objects.count() == before


def test_a_bad_namespace_purpose_is_a_400(world, api_as):
    response = api_as(world.admin).post(
        "/api/v1/tenants/team-a/namespaces/",
        {"name": "team-a-x", "purpose": "mining"},
        format="json",
    )
    assert response.status_code == 400
    assert "purpose" in response.json()["fields"]


# --- members -------------------------------------------------------------------------------


def test_members_list_and_detail(world, api_as):
    response = api_as(world.carol).get("/api/v1/tenants/team-a/members/")
    assert response.status_code == 200
    assert [(m["username"], m["role"]) for m in response.json()["results"]] == [
        ("alice", "lead"),
        ("carol", "member"),
        ("victor", "viewer"),
    ]
    detail = api_as(world.carol).get("/api/v1/tenants/team-a/members/alice/")
    assert detail.status_code == 200
    assert detail.json()["email"] == "alice@example.com"
    assert detail.json()["role"] == "lead"


def test_a_user_who_is_not_a_member_is_404_in_member_detail(world, api_as):
    response = api_as(world.admin).get("/api/v1/tenants/team-a/members/bob/")
    assert response.status_code == 404


def test_admin_adds_a_member(world, api_as):
    dave = UserFactory(username="dave")
    response = api_as(world.admin).post(
        "/api/v1/tenants/team-a/members/", {"username": "dave", "role": "member"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["username"] == "dave"
    assert Membership.objects.get(tenant=world.team_a, user=dave).role == MembershipRole.MEMBER
    event = AuditEvent.objects.get(
        action="membership.added", tenant=world.team_a, after__user="dave"
    )
    assert event.actor == world.admin
    # and dave now sees team-a
    assert slugs(api_as(dave).get("/api/v1/tenants/")) == ["team-a"]


def test_admin_changes_a_role(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tenants/team-a/members/carol/", {"role": "lead"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["role"] == "lead"
    assert Membership.objects.get(tenant=world.team_a, user=world.carol).role == "lead"
    event = AuditEvent.objects.get(action="membership.role_changed")
    assert event.before == {"user": "carol", "role": "member"}
    assert event.after == {"user": "carol", "role": "lead"}


def test_admin_removes_a_member(world, api_as):
    response = api_as(world.admin).delete("/api/v1/tenants/team-a/members/carol/")
    assert response.status_code == 204
    assert not Membership.objects.filter(tenant=world.team_a, user=world.carol).exists()
    assert api_as(world.carol).get("/api/v1/tenants/team-a/").status_code == 404


def test_the_only_lead_cannot_be_removed(world, api_as):
    response = api_as(world.admin).delete("/api/v1/tenants/team-a/members/alice/")
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "conflict"
    assert "only lead" in body["detail"]
    assert "username" in body["fields"]
    assert Membership.objects.filter(tenant=world.team_a, user=world.alice, role="lead").exists()


def test_the_only_lead_cannot_be_demoted(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tenants/team-a/members/alice/", {"role": "member"}, format="json"
    )
    assert response.status_code == 409
    assert "only lead" in response.json()["detail"]
    assert Membership.objects.get(tenant=world.team_a, user=world.alice).role == "lead"


def test_a_lead_can_be_removed_once_there_is_another(world, api_as):
    admin = api_as(world.admin)
    admin.patch("/api/v1/tenants/team-a/members/carol/", {"role": "lead"}, format="json")
    assert admin.delete("/api/v1/tenants/team-a/members/alice/").status_code == 204


BAD_MEMBER_ADDS = [
    ({"username": "nobody", "role": "member"}, "username"),
    ({"username": "bob", "role": "owner"}, "role"),
    ({"username": "bob"}, "role"),
    ({"username": "bob", "role": "member", "admin": True}, "admin"),
]


def test_a_bad_member_add_is_a_400_naming_the_field(world, api_as, subtests):
    admin = api_as(world.admin)
    for body, field in BAD_MEMBER_ADDS:
        with subtests.test(str(body)):
            before = Membership.objects.count()
            response = admin.post("/api/v1/tenants/team-a/members/", body, format="json")
            assert response.status_code == 400
            assert response.json()["fields"][field]
            assert Membership.objects.count() == before


def test_an_inactive_user_cannot_be_added(world, api_as):
    UserFactory(username="gone", is_active=False)
    response = api_as(world.admin).post(
        "/api/v1/tenants/team-a/members/", {"username": "gone", "role": "member"}, format="json"
    )
    assert response.status_code == 400
    assert "gone" in response.json()["fields"]["username"][0]


@pytest.mark.parametrize("persona", ["carol", "victor"])
def test_members_cannot_change_membership(world, api_as, persona):
    """Members and viewers; what a lead may change is in tests/tenants/test_team_api.py."""
    client = api_as(getattr(world, persona))
    assert (
        client.post(
            "/api/v1/tenants/team-a/members/", {"username": "bob", "role": "member"}, format="json"
        ).status_code
        == 403
    )
    assert (
        client.patch(
            "/api/v1/tenants/team-a/members/carol/", {"role": "lead"}, format="json"
        ).status_code
        == 403
    )
    assert client.delete("/api/v1/tenants/team-a/members/victor/").status_code == 403
    roles = dict(
        Membership.objects.filter(tenant=world.team_a).values_list("user__username", "role")
    )
    assert roles == {"alice": "lead", "carol": "member", "victor": "viewer"}


# --- API tokens ----------------------------------------------------------------------------


def obtain_token(username: str, password: str = PASSWORD, **extra: str):  # type: ignore[no-untyped-def]
    return APIClient().post(
        TOKEN_URL, {"username": username, "password": password, **extra}, format="json"
    )


def token_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_a_token_is_issued_for_a_username_and_password_and_works(world):
    response = obtain_token("alice", name="ci pipeline")
    assert response.status_code == 201, response.content
    body = response.json()
    token = body["token"]
    assert len(token) >= 32
    assert body["prefix"] == token[:8]
    assert body["expires_at"]
    me = token_client(token).get("/api/v1/me/")
    assert me.status_code == 200
    assert me.json()["username"] == "alice"
    assert slugs(token_client(token).get("/api/v1/tenants/")) == ["team-a"]


def test_tokens_are_stored_hashed_and_the_secret_is_nowhere_in_the_database(world):
    token = obtain_token("alice").json()["token"]
    stored = ApiToken.objects.get(user=world.alice)
    assert stored.digest != token
    assert token not in stored.digest
    assert stored.prefix == token[:8]
    # Look through every column of every table: the secret must not be stored anywhere.
    needle = token[8:]
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608
            for row in cursor.fetchall():
                assert not any(needle in str(value) for value in row), table


def test_a_token_records_when_it_was_last_used(world):
    token = obtain_token("alice").json()["token"]
    assert ApiToken.objects.get(user=world.alice).last_used_at is None
    token_client(token).get("/api/v1/me/")
    assert ApiToken.objects.get(user=world.alice).last_used_at is not None


def test_users_list_only_their_own_tokens(world, api_as):
    api_token_create(user=world.alice, name="laptop")
    api_token_create(user=world.alice, name="ci")
    api_token_create(user=world.bob, name="bobs")
    response = api_as(world.alice).get("/api/v1/auth/tokens/")
    assert response.status_code == 200
    names = sorted(t["name"] for t in response.json()["results"])
    assert names == ["ci", "laptop"]
    assert all("digest" not in t and "token" not in t for t in response.json()["results"])


def test_a_revoked_token_is_refused(world):
    body = obtain_token("alice").json()
    client = token_client(body["token"])
    assert client.get("/api/v1/me/").status_code == 200
    response = client.delete(f"/api/v1/auth/tokens/{body['id']}/")
    assert response.status_code == 204
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401
    assert refused.json()["code"] == "authentication_failed"
    assert refused["WWW-Authenticate"] == "Token"
    # kept for the record, marked revoked, and audited
    token = ApiToken.objects.get(pk=body["id"])
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="api_token.revoked", actor=world.alice).count() == 1
    listed = token_client(obtain_token("alice").json()["token"]).get("/api/v1/auth/tokens/")
    revoked = [t for t in listed.json()["results"] if t["id"] == body["id"]]
    assert revoked[0]["revoked_at"] is not None


def test_nobody_revokes_another_users_token(world, api_as):
    token, secret = api_token_create(user=world.alice)
    for persona in (world.bob, world.admin):
        assert api_as(persona).delete(f"/api/v1/auth/tokens/{token.pk}/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None
    assert token_client(secret).get("/api/v1/me/").status_code == 200


def test_an_expired_token_is_refused(world):
    token, secret = api_token_create(user=world.alice)
    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = token_client(secret).get("/api/v1/me/")
    assert response.status_code == 401


def test_a_token_of_a_deactivated_user_is_refused(world):
    _, secret = api_token_create(user=world.alice)
    world.alice.is_active = False
    world.alice.save(update_fields=["is_active"])
    assert token_client(secret).get("/api/v1/me/").status_code == 401


def test_a_bad_authorization_header_is_401(world, subtests):
    for header in ("Token not-a-real-token", "Token", "Token a b", "token  "):
        with subtests.test(header):
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=header)
            response = client.get("/api/v1/me/")
            assert response.status_code == 401
            assert set(response.json()) == {"detail", "code", "fields"}


def test_a_wrong_password_is_a_400_with_a_field_message(world):
    response = obtain_token("alice", password="wrong")
    assert response.status_code == 400
    body = response.json()
    assert body["fields"]["password"] == ["wrong username or password"]
    assert "token" not in body
    unknown_user = obtain_token("nobody")
    assert unknown_user.status_code == 400
    assert unknown_user.json()["fields"] == body["fields"]  # no hint which one was wrong
    assert not ApiToken.objects.exists()


def test_token_request_without_fields_names_them(world):
    response = APIClient().post(TOKEN_URL, {}, format="json")
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"username", "password"}


def test_logins_are_throttled(world):
    for _ in range(20):
        obtain_token("alice", password="guess")
    response = obtain_token("alice")
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"


def test_anonymous_requests_are_401(world, subtests):
    for url in ("/api/v1/me/", "/api/v1/tenants/", "/api/v1/auth/tokens/", "/api/v1/clusters/"):
        with subtests.test(url):
            response = APIClient().get(url)
            assert response.status_code == 401
            assert response.json()["code"] == "not_authenticated"


def test_a_session_without_csrf_token_cannot_write(world):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(world.admin)
    assert client.get("/api/v1/tenants/").status_code == 200
    response = client.patch("/api/v1/tenants/team-a/", {"display_name": "x"}, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


# --- /me/ ----------------------------------------------------------------------------------


def test_me_shows_the_user_and_their_roles(world, api_as):
    membership_set(tenant=world.team_b, user=world.carol, role="viewer", actor=world.admin)
    response = api_as(world.carol).get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json() == {
        "username": "carol",
        "email": "carol@example.com",
        "is_platform_admin": False,
        "memberships": {"team-a": "member", "team-b": "viewer"},
    }
    assert api_as(world.admin).get("/api/v1/me/").json()["is_platform_admin"] is True
