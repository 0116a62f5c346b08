"""Leads manage their own team through /api/v1/tenants/{slug}/members/ (issue 17).

Each persona against each method: a lead adds, changes and removes members and viewers; an
admin any role; members and viewers get 403 saying their role; another tenant's lead 404.
Bad input is a 400 naming the field, a duplicate a 409, and nothing changes either way.
"""

from __future__ import annotations

import pytest

from tenants.models import AuditEvent, Membership, Notification
from tenants.services import api_token_create
from tests.factories import UserFactory

MEMBERS = "/api/v1/tenants/team-a/members/"
BEFORE = {"alice": "lead", "carol": "member", "victor": "viewer"}


def roles(world) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(
        Membership.objects.filter(tenant=world.team_a).values_list("user__username", "role")
    )


@pytest.fixture
def dave(world):  # type: ignore[no-untyped-def]
    return UserFactory(username="dave")


def test_a_lead_adds_a_viewer_and_the_answer_says_who_added_them(world, api_as, dave):
    response = api_as(world.alice).post(
        MEMBERS, {"username": "dave", "role": "viewer"}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["username"], body["role"], body["added_by"]) == ("dave", "viewer", "alice")
    assert body["created_at"].endswith("Z")
    assert roles(world) == {**BEFORE, "dave": "viewer"}
    listed = api_as(world.carol).get(MEMBERS).json()["results"]
    assert {m["username"]: m["added_by"] for m in listed}["dave"] == "alice"
    assert Notification.objects.filter(user=dave, subject__contains="team-a").count() == 1
    event = AuditEvent.objects.get(action="membership.added", object_id="dave@team-a")
    assert (event.actor, event.source) == (world.alice, "api")


def test_a_lead_changes_a_members_role_and_removes_a_viewer(world, api_as):
    lead = api_as(world.alice)
    response = lead.patch(f"{MEMBERS}carol/", {"role": "viewer"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["role"] == "viewer"
    assert lead.delete(f"{MEMBERS}victor/").status_code == 204
    assert roles(world) == {"alice": "lead", "carol": "viewer"}


def test_a_lead_cannot_grant_change_or_remove_a_lead(world, api_as, dave):
    lead = api_as(world.alice)
    grant = lead.post(MEMBERS, {"username": "dave", "role": "lead"}, format="json")
    assert grant.status_code == 403
    assert "Only a platform admin makes someone a lead of team-a" in grant.json()["detail"]
    promote = lead.patch(f"{MEMBERS}carol/", {"role": "lead"}, format="json")
    assert promote.status_code == 403
    leave = lead.delete(f"{MEMBERS}alice/")
    assert leave.status_code == 403
    assert "alice is a lead of team-a" in leave.json()["detail"]
    assert roles(world) == BEFORE


@pytest.mark.parametrize("persona,role", [("carol", "member"), ("victor", "viewer")])
def test_members_and_viewers_get_403_saying_their_role(world, api_as, dave, persona, role):
    client = api_as(getattr(world, persona))
    expected = f"Only a lead of team-a or a platform admin manages its members; you are a {role}."
    for response in (
        client.post(MEMBERS, {"username": "dave", "role": "viewer"}, format="json"),
        client.patch(f"{MEMBERS}victor/", {"role": "member"}, format="json"),
        client.delete(f"{MEMBERS}carol/"),
    ):
        assert response.status_code == 403, response.content
        assert response.json()["detail"] == expected
    assert client.get(MEMBERS).status_code == 200  # they still read the team
    assert roles(world) == BEFORE


def test_another_tenants_lead_gets_404_for_every_method(world, api_as, dave):
    client = api_as(world.bob)
    for response in (
        client.get(MEMBERS),
        client.post(MEMBERS, {"username": "dave", "role": "viewer"}, format="json"),
        client.patch(f"{MEMBERS}carol/", {"role": "viewer"}, format="json"),
        client.delete(f"{MEMBERS}carol/"),
    ):
        assert response.status_code == 404, response.content
        assert "team-a" not in response.json()["detail"]
    assert roles(world) == BEFORE


def test_anonymous_callers_get_401(world, api):
    response = api.post(MEMBERS, {"username": "carol", "role": "viewer"}, format="json")
    assert response.status_code == 401
    assert api.delete(f"{MEMBERS}carol/").status_code == 401
    assert roles(world) == BEFORE


def test_an_admin_adds_a_lead_and_the_last_lead_stays_409(world, api_as, dave):
    admin = api_as(world.admin)
    assert (
        admin.post(MEMBERS, {"username": "dave", "role": "lead"}, format="json").status_code == 201
    )
    assert admin.delete(f"{MEMBERS}alice/").status_code == 204
    last = admin.delete(f"{MEMBERS}dave/")
    assert last.status_code == 409
    assert last.json()["code"] == "conflict"
    assert "dave is the only lead of team-a" in last.json()["detail"]
    assert roles(world) == {"carol": "member", "victor": "viewer", "dave": "lead"}


BAD = [
    ({"username": "nobody", "role": "member"}, 400, "username", "No user 'nobody' is known"),
    ({"username": "dave", "role": "owner"}, 400, "role", "not a valid choice"),
    ({"username": "dave"}, 400, "role", "required"),
    ({"role": "member"}, 400, "username", "required"),
    ({"username": "dave", "role": "member", "admin": True}, 400, "admin", ""),
    ({"username": "carol", "role": "viewer"}, 409, "username", "already a member of team-a"),
]


@pytest.mark.parametrize("body,status,field,words", BAD, ids=[str(b) for b, *_ in BAD])
def test_bad_input_from_a_lead_names_the_field_and_changes_nothing(
    world, api_as, dave, body, status, field, words
):
    events = AuditEvent.objects.count()
    response = api_as(world.alice).post(MEMBERS, body, format="json")
    assert response.status_code == status, response.content
    assert words in " ".join(response.json()["fields"][field])
    assert roles(world) == BEFORE
    assert AuditEvent.objects.count() == events


def test_a_bad_role_in_a_patch_is_400_and_an_unknown_member_404(world, api_as):
    lead = api_as(world.alice)
    bad = lead.patch(f"{MEMBERS}carol/", {"role": "owner"}, format="json")
    assert bad.status_code == 400
    assert "role" in bad.json()["fields"]
    assert lead.patch(f"{MEMBERS}bob/", {"role": "viewer"}, format="json").status_code == 404
    assert lead.delete(f"{MEMBERS}nobody/").status_code == 404
    assert roles(world) == BEFORE


def test_a_removed_member_loses_access_at_once_token_included(world, api, api_as):
    _, secret = api_token_create(user=world.carol)
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/tenants/team-a/").status_code == 200
    assert api_as(world.alice).delete(f"{MEMBERS}carol/").status_code == 204
    assert api.get("/api/v1/tenants/team-a/").status_code == 404
    assert api.get("/api/v1/tenants/team-a/quotas/").status_code == 404
    assert api.get("/api/v1/me/").json()["memberships"] == {}


def test_a_viewer_made_member_and_back_by_a_lead_is_told_each_time(world, api_as):
    lead = api_as(world.alice)
    lead.patch(f"{MEMBERS}victor/", {"role": "member"}, format="json")
    lead.patch(f"{MEMBERS}victor/", {"role": "viewer"}, format="json")
    lead.patch(f"{MEMBERS}victor/", {"role": "viewer"}, format="json")  # no change: no notice
    subjects = list(
        Notification.objects.filter(user=world.victor)
        .order_by("pk")
        .values_list("subject", flat=True)
    )
    assert subjects == ["You are now a member of team-a", "You are now a viewer of team-a"]
