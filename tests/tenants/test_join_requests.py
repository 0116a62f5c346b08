"""Joining a team (issue 33 item 6): a signed-in person asks to join a tenant by its slug, its
leads (or a platform admin) approve it, making them a member, or refuse it; the asker is told,
and may withdraw while it waits. Leads also add several people at once, each line answered.

Each persona against each route, in the API and on the pages: dave (in no team) asks; alice
(lead of team-a) decides; carol (member) and victor (viewer) get 403 saying their role; bob
(lead of team-b) gets 404; nobody decides their own ask. Refusals change nothing.
"""

from __future__ import annotations

import re

import pytest

from tenants.models import AuditEvent, JoinRequest, Membership, Notification
from tenants.services import TEAM_BULK_MAX, tenant_archive
from tests.factories import UserFactory
from tests.pages import logged_in, main, text

ASKS = "/api/v1/tenants/team-a/join-requests/"
MEMBERS = "/api/v1/tenants/team-a/members/"
BULK = "/api/v1/tenants/team-a/members/bulk/"
BEFORE = {"alice": "lead", "carol": "member", "victor": "viewer"}


def roles(world, tenant=None) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(
        Membership.objects.filter(tenant=tenant or world.team_a).values_list(
            "user__username", "role"
        )
    )


@pytest.fixture
def dave(world):  # type: ignore[no-untyped-def]
    return UserFactory(username="dave", first_name="Dave", last_name="Jones")


def ask(api_as, user, slug="team-a", message="") -> dict:  # type: ignore[no-untyped-def]
    response = api_as(user).post(
        f"/api/v1/tenants/{slug}/join-requests/", {"message": message}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()


# --- asking -------------------------------------------------------------------------------


def test_someone_outside_asks_to_join_and_the_leads_are_told(world, api_as, dave):
    body = ask(api_as, dave, message="I run the vision training jobs.")
    assert (body["tenant"], body["username"], body["state"]) == ("team-a", "dave", "open")
    assert body["message"] == "I run the vision training jobs."
    assert body["decided_by"] is None
    told = Notification.objects.get(user=world.alice)
    assert told.subject == "dave asks to join team-a"
    assert "Dave Jones (dave)" in told.body and "vision training" in told.body
    assert told.url == "/tenants/team-a/team/"
    assert not Notification.objects.filter(user__in=[world.carol, world.bob, dave]).exists()
    event = AuditEvent.objects.get(action="join_request.created")
    assert (event.actor, event.tenant, event.source) == (dave, world.team_a, "api")
    assert roles(world) == BEFORE  # asking gives no access
    assert api_as(dave).get("/api/v1/tenants/team-a/").status_code == 404


def test_a_team_without_a_lead_has_its_asks_told_to_the_platform_admins(world, api_as, dave):
    ask(api_as, dave, slug="team-c")
    assert Notification.objects.get(user=world.admin).subject == "dave asks to join team-c"


def test_a_second_ask_while_one_waits_is_a_409_and_after_a_withdrawal_a_new_one_goes(
    world, api_as, dave
):
    first = ask(api_as, dave)
    again = api_as(dave).post(ASKS, {}, format="json")
    assert again.status_code == 409
    assert "You already asked to join team-a" in again.json()["detail"]
    assert JoinRequest.objects.count() == 1
    withdrawn = api_as(dave).post(f"{ASKS}{first['id']}/withdraw/")
    assert withdrawn.status_code == 200
    assert withdrawn.json()["state"] == "withdrawn"
    assert AuditEvent.objects.filter(action="join_request.withdrawn", actor=dave).count() == 1
    assert ask(api_as, dave)["state"] == "open"


@pytest.mark.parametrize("persona,role", [("alice", "lead"), ("carol", "member")])
def test_someone_already_in_the_team_asking_is_a_409(world, api_as, persona, role):
    response = api_as(getattr(world, persona)).post(ASKS, {}, format="json")
    assert response.status_code == 409
    assert response.json()["detail"] == f"You are already a {role} of team-a."
    assert not JoinRequest.objects.exists()


def test_unknown_and_archived_teams_answer_404_as_any_team_one_cannot_see(world, api_as, dave):
    assert api_as(dave).post("/api/v1/tenants/team-zz/join-requests/", {}).status_code == 404
    tenant_archive(tenant=world.team_c, actor=world.admin)
    archived = api_as(dave).post("/api/v1/tenants/team-c/join-requests/", {}, format="json")
    assert archived.status_code == 404
    assert "team-c" not in archived.json()["detail"]
    assert not JoinRequest.objects.exists()


def test_bad_input_is_a_400_naming_the_field_and_anonymous_callers_are_refused(world, api_as, dave):
    long = api_as(dave).post(ASKS, {"message": "x" * 1001}, format="json")
    assert long.status_code == 400
    assert "message" in long.json()["fields"]
    unknown = api_as(dave).post(ASKS, {"role": "lead"}, format="json")
    assert unknown.status_code == 400
    assert "role" in unknown.json()["fields"]
    assert api_as(None).post(ASKS, {}, format="json").status_code in (401, 403)
    assert not JoinRequest.objects.exists()


def test_each_sees_only_the_asks_they_may(world, api_as, dave):
    erin = UserFactory(username="erin")
    ask(api_as, dave)
    ask(api_as, erin)
    lead = [a["username"] for a in api_as(world.alice).get(ASKS).json()["results"]]
    assert sorted(lead) == ["dave", "erin"]
    assert [a["username"] for a in api_as(dave).get(ASKS).json()["results"]] == ["dave"]
    assert api_as(world.bob).get(ASKS).json()["results"] == []
    assert api_as(world.carol).get(ASKS).json()["results"] == []
    erins = JoinRequest.objects.get(user=erin).pk
    assert api_as(dave).get(f"{ASKS}{erins}/").status_code == 404
    assert api_as(world.alice).get(f"{ASKS}{erins}/").json()["username"] == "erin"


# --- deciding -----------------------------------------------------------------------------


def test_a_lead_approves_and_the_person_becomes_a_member_told_and_audited(world, api_as, dave):
    pk = ask(api_as, dave)["id"]
    response = api_as(world.alice).post(
        f"{ASKS}{pk}/approve/", {"reason": "welcome"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["decided_by"], body["reason"]) == ("approved", "alice", "welcome")
    assert roles(world) == {**BEFORE, "dave": "member"}  # a member, never a lead
    told = Notification.objects.get(user=dave)
    assert told.subject == "You are now a member of team-a"
    assert "welcome" in told.body
    added = AuditEvent.objects.get(action="membership.added", object_id="dave@team-a")
    assert (added.actor, added.after["role"], added.after["join_request"]) == (
        world.alice,
        "member",
        pk,
    )
    assert AuditEvent.objects.filter(action="join_request.approved", actor=world.alice).exists()
    listed = {m["username"]: m["added_by"] for m in api_as(dave).get(MEMBERS).json()["results"]}
    assert listed["dave"] == "alice"  # and dave now sees the team
    again = api_as(world.alice).post(f"{ASKS}{pk}/refuse/", {}, format="json")
    assert again.status_code == 409
    assert "it was approved" in again.json()["detail"]


def test_a_lead_refuses_with_a_reason_and_the_person_is_told(world, api_as, dave):
    pk = ask(api_as, dave)["id"]
    response = api_as(world.alice).post(
        f"{ASKS}{pk}/refuse/", {"reason": "ask your manager first"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["state"] == "refused"
    assert roles(world) == BEFORE
    told = Notification.objects.get(user=dave)
    assert told.subject == "Your ask to join team-a was refused"
    assert "ask your manager first" in told.body
    assert api_as(dave).post(f"{ASKS}{pk}/withdraw/").status_code == 409


def test_a_platform_admin_decides_too(world, api_as, dave):
    pk = ask(api_as, dave)["id"]
    assert api_as(world.admin).post(f"{ASKS}{pk}/approve/").status_code == 200
    assert roles(world)["dave"] == "member"


def test_nobody_approves_their_own_ask(world, api_as, dave):
    pk = ask(api_as, dave)["id"]
    response = api_as(dave).post(f"{ASKS}{pk}/approve/")
    assert response.status_code == 403
    assert "Nobody decides their own ask" in response.json()["detail"]
    assert api_as(dave).post(f"{ASKS}{pk}/refuse/").status_code == 403
    assert JoinRequest.objects.get(pk=pk).state == "open"
    assert roles(world) == BEFORE


def test_a_member_whose_ask_still_waits_cannot_approve_it(world, api_as, dave):
    """dave asked, then got in another way (an identity group's sync): approving his own
    waiting ask as a member is refused like any member's decision."""
    from tenants.services import membership_set

    pk = ask(api_as, dave)["id"]
    membership_set(tenant=world.team_a, user=dave, role="viewer", actor=None)
    response = api_as(dave).post(f"{ASKS}{pk}/approve/")
    assert response.status_code == 403
    assert roles(world)["dave"] == "viewer"
    assert JoinRequest.objects.get(pk=pk).state == "open"
    stale = api_as(world.alice).post(f"{ASKS}{pk}/approve/")
    assert stale.status_code == 409
    assert "dave is already a viewer of team-a" in stale.json()["detail"]
    assert api_as(world.alice).post(f"{ASKS}{pk}/refuse/").status_code == 200


@pytest.mark.parametrize("persona,role", [("carol", "member"), ("victor", "viewer")])
def test_members_and_viewers_cannot_decide(world, api_as, dave, persona, role):
    pk = ask(api_as, dave)["id"]
    for verb in ("approve", "refuse"):
        response = api_as(getattr(world, persona)).post(f"{ASKS}{pk}/{verb}/")
        assert response.status_code == 403
        assert response.json()["detail"].endswith(f"you are a {role}.")
    assert JoinRequest.objects.get(pk=pk).state == "open"
    assert roles(world) == BEFORE


def test_another_teams_lead_gets_404_for_the_ask_and_for_her_own_team_route(world, api_as, dave):
    pk = ask(api_as, dave)["id"]
    bob = api_as(world.bob)
    assert bob.post(f"{ASKS}{pk}/approve/").status_code == 404
    assert bob.post(f"{ASKS}{pk}/refuse/").status_code == 404
    assert bob.get(f"{ASKS}{pk}/").status_code == 404
    # team-a's ask through team-b's route, where bob is the lead: no such ask there
    assert bob.post(f"/api/v1/tenants/team-b/join-requests/{pk}/approve/").status_code == 404
    assert bob.post(f"{ASKS}{pk}/withdraw/").status_code == 404
    assert api_as(world.alice).post(f"{ASKS}{pk}/withdraw/").status_code == 404
    assert JoinRequest.objects.get(pk=pk).state == "open"
    assert roles(world) == BEFORE
    assert roles(world, world.team_b) == {"bob": "lead"}


def test_adding_someone_who_asked_closes_their_ask(world, api_as, dave):
    pk = ask(api_as, dave)["id"]
    added = api_as(world.alice).post(MEMBERS, {"username": "dave", "role": "viewer"}, format="json")
    assert added.status_code == 201
    closed = JoinRequest.objects.get(pk=pk)
    assert (closed.state, closed.decided_by) == ("approved", world.alice)
    assert roles(world)["dave"] == "viewer"


def test_an_archived_teams_waiting_asks_cannot_be_decided(world, api_as, dave):
    pk = ask(api_as, dave, slug="team-c")["id"]
    tenant_archive(tenant=world.team_c, actor=world.admin)
    response = api_as(world.admin).post(f"/api/v1/tenants/team-c/join-requests/{pk}/approve/")
    assert response.status_code == 409
    assert "archived" in response.json()["detail"]
    assert roles(world, world.team_c) == {}
    withdrawn = api_as(dave).post(f"/api/v1/tenants/team-c/join-requests/{pk}/withdraw/")
    assert withdrawn.status_code == 200


# --- several at once ----------------------------------------------------------------------


def test_a_lead_adds_several_people_each_answered(world, api_as, dave):
    UserFactory(username="erin")  # erin@example.com
    UserFactory(username="sam1", email="shared@example.com")
    UserFactory(username="sam2", email="SHARED@example.com")
    UserFactory(username="gone", is_active=False)
    people = ["dave", "carol", "nobody", "Erin@Example.com", "shared@example.com", "gone", "dave"]
    response = api_as(world.alice).post(BULK, {"people": people}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["summary"] == (
        "2 people added, 1 already a member, 1 not known to the portal, "
        "1 email shared by several people, 1 deactivated account, 1 listed twice"
    )
    assert body["added"] == 2
    outcomes = [(r["entry"], r["outcome"], r["username"]) for r in body["results"]]
    assert outcomes == [
        ("dave", "added", "dave"),
        ("carol", "already-member", "carol"),
        ("nobody", "no-such-person", ""),
        ("Erin@Example.com", "added", "erin"),
        ("shared@example.com", "ambiguous-email", ""),
        ("gone", "deactivated", "gone"),
        ("dave", "listed-twice", ""),
    ]
    assert "sam1, sam2" in body["results"][4]["message"]
    assert roles(world) == {**BEFORE, "dave": "member", "erin": "member"}
    assert AuditEvent.objects.filter(action="membership.added", actor=world.alice).count() == 2
    assert Notification.objects.filter(subject="You were added to team-a as a member").count() == 2


def test_several_at_once_as_viewers_and_the_words_for_one(world, api_as, dave):
    response = api_as(world.alice).post(BULK, {"people": ["dave"], "role": "viewer"}, format="json")
    assert response.json()["summary"] == "1 person added"
    assert roles(world)["dave"] == "viewer"


def test_a_list_too_long_or_empty_is_a_400_naming_people_and_adds_nobody(world, api_as, dave):
    lead = api_as(world.alice)
    too_many = lead.post(BULK, {"people": ["dave"] * (TEAM_BULK_MAX + 1)}, format="json")
    assert too_many.status_code == 400
    assert "people" in too_many.json()["fields"]
    empty = lead.post(BULK, {"people": []}, format="json")
    assert empty.status_code == 400
    assert "people" in empty.json()["fields"]
    not_a_list = lead.post(BULK, {"people": "dave"}, format="json")
    assert not_a_list.status_code == 400
    assert roles(world) == BEFORE


def test_only_leads_and_admins_add_several_and_leads_never_add_leads(world, api_as, dave):
    body = {"people": ["dave"]}
    for persona, status in (("carol", 403), ("victor", 403), ("bob", 404), ("dave", 404)):
        response = api_as(getattr(world, persona) if persona != "dave" else dave).post(
            BULK, body, format="json"
        )
        assert response.status_code == status, persona
    lead = api_as(world.alice).post(BULK, {"people": ["dave"], "role": "lead"}, format="json")
    assert lead.status_code == 403
    assert roles(world) == BEFORE
    admin = api_as(world.admin).post(BULK, {"people": ["dave"], "role": "lead"}, format="json")
    assert admin.status_code == 200
    assert roles(world)["dave"] == "lead"


# --- the pages ----------------------------------------------------------------------------


def test_asking_on_the_join_page_then_a_lead_approves_on_the_team_page(world, dave):
    person = logged_in(dave)
    page = person.get("/tenants/team-a/join/")
    assert page.status_code == 200
    assert "Ask to join team-a" in main(page)
    sent = person.post("/tenants/team-a/join/", {"message": "hello"}, follow=True)
    assert "Your ask to join team-a was sent to its leads." in text(sent)
    assert "its leads have not answered yet" in main(sent)
    assert "Withdraw my ask" in main(sent)

    team = main(logged_in(world.alice).get("/tenants/team-a/team/"))
    row = re.search(r'<tr data-ask="dave">(.*?)</tr>', team, re.S)[1]
    assert "Dave Jones" in row and "hello" in row and "Approve as a member" in row
    pk = JoinRequest.objects.get(user=dave).pk
    done = logged_in(world.alice).post(f"/tenants/team-a/team/asks/{pk}/approve/", follow=True)
    assert "dave is now a member of team-a." in text(done)
    assert "Nobody is waiting to join." in main(done)
    assert roles(world)["dave"] == "member"
    assert person.get("/tenants/team-a/").status_code == 200
    assert "You are already a member of team-a" in main(person.get("/tenants/team-a/join/"))


def test_a_refusal_on_the_page_shows_on_the_askers_page_with_its_reason(world, dave):
    logged_in(dave).post("/tenants/team-a/join/", {})
    pk = JoinRequest.objects.get(user=dave).pk
    logged_in(world.alice).post(f"/tenants/team-a/team/asks/{pk}/refuse/", {"reason": "not yet"})
    page = main(logged_in(dave).get("/tenants/team-a/join/"))
    assert re.search(r'data-ask-state="refused">.*?Refused.*?alice.*?not yet', page, re.S)
    assert "Ask to join</button>" in page  # and may ask again


def test_the_join_page_refusals(world, dave):
    person = logged_in(dave)
    assert person.get("/tenants/team-zz/join/").status_code == 404
    tenant_archive(tenant=world.team_c, actor=world.admin)
    assert person.get("/tenants/team-c/join/").status_code == 404
    long = person.post("/tenants/team-a/join/", {"message": "x" * 1001})
    assert long.status_code == 400
    assert 'aria-invalid="true"' in main(long)
    person.post("/tenants/team-a/join/", {})
    twice = person.post("/tenants/team-a/join/", {})
    assert twice.status_code == 409
    assert JoinRequest.objects.count() == 1
    anonymous = logged_in(None).get("/tenants/team-a/join/")
    assert anonymous.status_code == 302


def test_deciding_on_the_page_as_each_identity(world, dave):
    logged_in(dave).post("/tenants/team-a/join/", {})
    pk = JoinRequest.objects.get(user=dave).pk
    url = f"/tenants/team-a/team/asks/{pk}/approve/"
    assert logged_in(dave).post(url).status_code == 404  # not a member: the team page 404s
    assert logged_in(world.carol).post(url).status_code == 403
    assert logged_in(world.victor).post(url).status_code == 403
    assert logged_in(world.bob).post(url).status_code == 404
    assert logged_in(world.alice, csrf=True).post(url).status_code == 403  # no CSRF token
    assert "Asks to join" not in main(logged_in(world.carol).get("/tenants/team-a/team/"))
    assert JoinRequest.objects.get(pk=pk).state == "open"
    assert roles(world) == BEFORE
    withdraw = logged_in(dave).post(f"/tenants/team-a/join/{pk}/withdraw/", follow=True)
    assert "Your ask to join team-a was withdrawn." in text(withdraw)


def test_adding_several_on_the_team_page_reports_each_line(world, dave):
    UserFactory(username="erin")
    response = logged_in(world.alice).post(
        "/tenants/team-a/team/bulk/",
        {"people": "dave\ncarol, nobody\n\nerin@example.com", "role": "member"},
    )
    assert response.status_code == 200
    page = main(response)
    assert "2 people added, 1 already a member, 1 not known to the portal." in page
    assert re.search(r'data-bulk-entry="nobody" data-outcome="no-such-person">', page)
    assert re.search(r'data-bulk-entry="carol".*?carol is already a member', page, re.S)
    assert roles(world) == {**BEFORE, "dave": "member", "erin": "member"}


def test_a_list_too_long_on_the_page_is_a_400_beside_the_field(world, dave):
    people = "\n".join(f"user-{n}" for n in range(TEAM_BULK_MAX + 1))
    response = logged_in(world.alice).post(
        "/tenants/team-a/team/bulk/", {"people": people, "role": "member"}
    )
    assert response.status_code == 400
    assert f"At most {TEAM_BULK_MAX} people at once; this list has {TEAM_BULK_MAX + 1}." in main(
        response
    )
    assert roles(world) == BEFORE
    assert (
        logged_in(world.carol)
        .post("/tenants/team-a/team/bulk/", {"people": "dave", "role": "member"})
        .status_code
        == 403
    )
    assert roles(world) == BEFORE


@pytest.mark.parametrize("slug", ["team%00a", "Team-A", "a" * 300])
def test_what_cannot_be_a_slug_answers_404(world, api_as, dave, slug):
    assert api_as(dave).post(f"/api/v1/tenants/{slug}/join-requests/", {}).status_code == 404
    assert api_as(dave).get(f"/api/v1/tenants/{slug}/join-requests/").status_code == 404
    assert logged_in(dave).get(f"/tenants/{slug}/join/").status_code == 404


def test_the_askers_inbox_links_to_the_join_page_even_though_they_are_not_in_the_team(
    world, api_as, dave
):
    pk = ask(api_as, dave)["id"]
    api_as(world.alice).post(f"{ASKS}{pk}/refuse/", {"reason": "not yet"}, format="json")
    inbox = main(logged_in(dave).get("/inbox/"))
    assert 'href="/tenants/team-a/join/"' in inbox
    assert "You no longer have access" not in inbox
    lead_inbox = main(logged_in(world.alice).get("/inbox/"))
    assert 'href="/tenants/team-a/team/"' in lead_inbox


def test_the_database_itself_holds_one_open_ask_per_person_and_team(world, dave):
    """Two requests racing past the service's check still leave one open ask (a partial
    unique index, on SQLite and PostgreSQL alike); answered asks may pile up."""
    from django.db import IntegrityError, transaction

    JoinRequest.objects.create(tenant=world.team_a, user=dave, state="refused")
    JoinRequest.objects.create(tenant=world.team_a, user=dave, state="withdrawn")
    JoinRequest.objects.create(tenant=world.team_a, user=dave)
    with pytest.raises(IntegrityError), transaction.atomic():
        JoinRequest.objects.create(tenant=world.team_a, user=dave)
    JoinRequest.objects.create(tenant=world.team_b, user=dave)  # another team: fine
    assert JoinRequest.objects.filter(user=dave, state="open").count() == 2


def test_a_lead_is_offered_member_and_viewer_for_several_at_once(world):
    page = main(logged_in(world.alice).get("/tenants/team-a/team/"))
    form = re.search(r'<form[^>]*data-form="team-bulk".*?</form>', page, re.S)[0]
    assert re.findall(r'<option value="(\w+)"', form) == ["member", "viewer"]
    assert "Nobody is waiting to join." in page
    assert 'href="/tenants/team-a/join/"' in page  # the link a lead shares
