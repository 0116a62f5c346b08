"""The team page, /tenants/<slug>/team/ (issue 17): everyone in the tenant sees its people
with their role, who added them and when; a lead (or an admin) adds by username, and changes a
role or removes someone after a confirmation. Refusals show their reason with their status,
and change nothing. Runs on PostgreSQL and on the embedded SQLite default alike.
"""

from __future__ import annotations

import re

import pytest

from tenants.models import AuditEvent, Membership
from tests.factories import UserFactory
from tests.pages import logged_in, main, text

TEAM = "/tenants/team-a/team/"
BEFORE = {"alice": "lead", "carol": "member", "victor": "viewer"}


def roles(world) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(
        Membership.objects.filter(tenant=world.team_a).values_list("user__username", "role")
    )


def rows(response) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """username -> the row's text, as shown."""
    page = main(response)
    found = re.findall(r'<tr data-member="([^"]+)">(.*?)</tr>', page, re.S)
    return {name: " ".join(re.sub(r"<[^>]+>", " ", row).split()) for name, row in found}


def test_every_member_sees_the_team_with_role_and_who_added_them(world):
    response = logged_in(world.victor).get(TEAM)
    assert response.status_code == 200
    shown = rows(response)
    assert list(shown) == ["alice", "carol", "victor"]
    assert shown["carol"].startswith("carol Member admin ")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", shown["carol"])
    page = main(response)
    assert "Add someone" not in page  # a viewer manages nothing
    assert "/team/carol/remove/" not in page


def test_the_tenant_page_links_to_the_team(world):
    page = text(logged_in(world.alice).get("/tenants/team-a/"))
    assert 'href="/tenants/team-a/team/"' in page
    assert "Manage the team" in page


def test_a_lead_sees_forms_for_members_and_viewers_but_not_for_leads(world):
    response = logged_in(world.alice).get(TEAM)
    page = main(response)
    assert "Add someone" in page
    assert "/team/carol/remove/" in page and "/team/victor/role/" in page
    assert "/team/alice/remove/" not in page
    assert "a platform admin changes leads" in rows(response)["alice"]
    add_form = re.search(r'<form[^>]*data-form="team-add".*?</form>', page, re.S)[0]
    assert re.findall(r'<option value="(\w+)"', add_form) == ["member", "viewer"]


def test_a_lead_adds_a_member_who_then_opens_the_tenant(world):
    dave = UserFactory(username="dave")
    assert logged_in(dave).get("/tenants/team-a/").status_code == 404
    response = logged_in(world.alice).post(
        TEAM, {"username": "dave", "role": "member"}, follow=True
    )
    assert response.status_code == 200
    assert "dave is now a member of team-a." in text(response)
    assert rows(response)["dave"].startswith("dave Member alice ")
    assert logged_in(dave).get("/tenants/team-a/").status_code == 200


@pytest.mark.parametrize(
    "form,status,words",
    [
        ({"username": "zoe", "role": "member"}, 400, "No user 'zoe' is known to the portal"),
        ({"username": "carol", "role": "viewer"}, 409, "carol is already a member of team-a"),
        ({"username": "", "role": "member"}, 400, "This field is required."),
        ({"username": "carol", "role": "lead"}, 400, "Select a valid choice"),
    ],
)
def test_a_refused_add_shows_why_beside_the_form_with_its_status(world, form, status, words):
    response = logged_in(world.alice).post(TEAM, form)
    assert response.status_code == status
    assert words in main(response)
    assert 'aria-invalid="true"' in main(response)
    assert roles(world) == BEFORE


def test_removing_asks_first_and_changes_nothing_until_confirmed(world):
    lead = logged_in(world.alice)
    ask = lead.post("/tenants/team-a/team/victor/remove/")
    assert ask.status_code == 200
    confirm = re.search(r"<form[^>]*data-confirm>.*?</form>", text(ask), re.S)[0]
    assert "remove victor (viewer) from team-a" in confirm
    assert roles(world) == BEFORE
    done = lead.post("/tenants/team-a/team/victor/remove/", {"confirm": "yes"}, follow=True)
    assert "victor was removed from team-a." in text(done)
    assert roles(world) == {"alice": "lead", "carol": "member"}
    assert logged_in(world.victor).get("/tenants/team-a/").status_code == 404
    event = AuditEvent.objects.get(action="membership.removed", object_id="victor@team-a")
    assert (event.actor, event.source) == (world.alice, "portal")


def test_changing_a_role_asks_first_then_changes_it(world):
    lead = logged_in(world.alice)
    ask = lead.post("/tenants/team-a/team/carol/role/", {"role": "viewer"})
    assert ask.status_code == 200
    assert "carol becomes a viewer of team-a (now a member)" in text(ask)
    assert roles(world) == BEFORE
    done = lead.post(
        "/tenants/team-a/team/carol/role/", {"role": "viewer", "confirm": "yes"}, follow=True
    )
    assert "carol is now a viewer of team-a." in text(done)
    assert roles(world)["carol"] == "viewer"


def test_refusals_on_the_change_forms_are_pages_with_their_status(world):
    lead = logged_in(world.alice)
    promote = lead.post("/tenants/team-a/team/carol/role/", {"role": "lead", "confirm": "yes"})
    assert promote.status_code == 403
    assert "Only a platform admin makes someone a lead of team-a" in text(promote)
    leave = lead.post("/tenants/team-a/team/alice/remove/", {"confirm": "yes"})
    assert leave.status_code == 403
    bad = lead.post("/tenants/team-a/team/carol/role/", {"role": "owner", "confirm": "yes"})
    assert bad.status_code == 400
    assert "'owner' is not a role" in text(bad)
    stranger = lead.post("/tenants/team-a/team/bob/remove/", {"confirm": "yes"})
    assert stranger.status_code == 404
    last = logged_in(world.admin).post("/tenants/team-a/team/alice/remove/", {"confirm": "yes"})
    assert last.status_code == 409
    assert "alice is the only lead of team-a" in text(last)
    assert roles(world) == BEFORE


@pytest.mark.parametrize("persona,role", [("carol", "member"), ("victor", "viewer")])
def test_members_and_viewers_get_403_saying_their_role(world, persona, role):
    client = logged_in(getattr(world, persona))
    UserFactory(username="dave")
    expected = f"Only a lead of team-a or a platform admin manages its members; you are a {role}."
    for response in (
        client.post(TEAM, {"username": "dave", "role": "viewer"}),
        client.post("/tenants/team-a/team/victor/role/", {"role": "member"}),
        client.post("/tenants/team-a/team/carol/remove/"),
    ):
        assert response.status_code == 403
        assert expected in text(response)
    assert roles(world) == BEFORE


def test_another_tenants_lead_gets_404_and_anonymous_visitors_go_to_log_in(world):
    outsider = logged_in(world.bob)
    assert outsider.get(TEAM).status_code == 404
    assert (
        outsider.post("/tenants/team-a/team/carol/remove/", {"confirm": "yes"}).status_code == 404
    )
    anonymous = logged_in(None).get(TEAM)
    assert anonymous.status_code == 302
    assert "/login/" in anonymous["Location"]
    assert roles(world) == BEFORE


def test_an_admin_makes_someone_a_lead_from_the_page(world):
    UserFactory(username="dave")
    admin = logged_in(world.admin)
    add_form = re.search(r'<form[^>]*data-form="team-add".*?</form>', main(admin.get(TEAM)), re.S)[
        0
    ]
    assert re.findall(r'<option value="(\w+)"', add_form) == ["lead", "member", "viewer"]
    admin.post(TEAM, {"username": "dave", "role": "lead"})
    assert roles(world)["dave"] == "lead"


def test_the_forms_need_the_csrf_token(world):
    client = logged_in(world.alice, csrf=True)
    UserFactory(username="dave")
    assert client.post(TEAM, {"username": "dave", "role": "member"}).status_code == 403
    assert client.post("/tenants/team-a/team/victor/remove/", {"confirm": "yes"}).status_code == 403
    assert roles(world) == BEFORE
