"""Leads manage their own team (issue 17): the rules in ``tenants.services``.

A lead of a tenant adds, changes and removes its members and viewers; a platform admin any
role; only admins make, change or remove leads; an active tenant never loses its last lead
(409); members, viewers and outsiders are refused (403 / 404). Who may be added is the
admin's ``TEAM_ADD_USERS``. Every change is audited and the person is told.
"""

from __future__ import annotations

import pytest

from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from tenants.choices import MembershipRole
from tenants.models import AuditEvent, Membership, Notification, User
from tenants.selectors import membership_list_for_tenant, team_roles_to_give
from tenants.services import (
    membership_set,
    team_change_check,
    team_member_add,
    team_member_remove,
    team_member_role_change,
)
from tests.factories import UserFactory


def roles(world) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return dict(
        Membership.objects.filter(tenant=world.team_a).values_list("user__username", "role")
    )


BEFORE = {"alice": "lead", "carol": "member", "victor": "viewer"}


@pytest.fixture
def dave(world) -> User:  # type: ignore[no-untyped-def]
    return UserFactory(username="dave")


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_a_lead_adds_a_member_or_viewer_audited_and_told(world, dave, role):
    membership = team_member_add(tenant=world.team_a, username="dave", role=role, actor=world.alice)
    assert membership.role == role
    assert roles(world) == {**BEFORE, "dave": role}
    event = AuditEvent.objects.get(action="membership.added", object_id="dave@team-a")
    assert event.actor == world.alice
    assert event.tenant == world.team_a
    assert event.after == {"user": "dave", "role": role}
    (notice,) = Notification.objects.filter(user=dave)
    assert notice.subject == f"You were added to team-a as a {role}"
    assert "alice added you" in notice.body
    assert notice.url == "/tenants/team-a/"


def test_the_team_list_says_who_added_each_person(world, dave):
    team_member_add(tenant=world.team_a, username="dave", role="viewer", actor=world.alice)
    added_by = {
        m.user.username: m.added_by for m in membership_list_for_tenant(tenant=world.team_a)
    }
    # alice came with the onboarding, carol and victor from the admin, dave from alice
    assert added_by == {"alice": "admin", "carol": "admin", "victor": "admin", "dave": "alice"}


def test_a_lead_may_not_make_anyone_a_lead(world, dave):
    with pytest.raises(PermissionDenied) as refused:
        team_member_add(tenant=world.team_a, username="dave", role="lead", actor=world.alice)
    assert "Only a platform admin makes someone a lead of team-a" in refused.value.message
    assert "role" in refused.value.fields
    with pytest.raises(PermissionDenied):
        team_member_role_change(
            tenant=world.team_a, username="carol", role="lead", actor=world.alice
        )
    assert roles(world) == BEFORE
    assert not AuditEvent.objects.filter(object_id__in=["dave@team-a"]).exists()


def test_a_lead_may_not_change_or_remove_a_lead_herself_included(world):
    membership_set(tenant=world.team_a, user=world.carol, role="lead", actor=world.admin)
    for username in ("carol", "alice"):
        with pytest.raises(PermissionDenied) as refused:
            team_member_remove(tenant=world.team_a, username=username, actor=world.alice)
        assert f"{username} is a lead of team-a" in refused.value.message
        with pytest.raises(PermissionDenied):
            team_member_role_change(
                tenant=world.team_a, username=username, role="viewer", actor=world.alice
            )
    assert roles(world) == {**BEFORE, "carol": "lead"}


def test_a_lead_turns_a_member_into_a_viewer_and_removes_one(world):
    team_member_role_change(tenant=world.team_a, username="carol", role="viewer", actor=world.alice)
    team_member_remove(tenant=world.team_a, username="victor", actor=world.alice)
    assert roles(world) == {"alice": "lead", "carol": "viewer"}
    changed = AuditEvent.objects.get(action="membership.role_changed", object_id="carol@team-a")
    assert (changed.before, changed.after, changed.actor) == (
        {"user": "carol", "role": "member"},
        {"user": "carol", "role": "viewer"},
        world.alice,
    )
    removed = AuditEvent.objects.get(action="membership.removed", object_id="victor@team-a")
    assert removed.before == {"user": "victor", "role": "viewer"}
    assert Notification.objects.get(user=world.carol).subject == "You are now a viewer of team-a"
    assert Notification.objects.get(user=world.victor).subject == "You were removed from team-a"


@pytest.mark.parametrize("persona,role", [("carol", "member"), ("victor", "viewer")])
def test_members_and_viewers_are_refused_with_their_role(world, dave, persona, role):
    actor = getattr(world, persona)
    expected = f"Only a lead of team-a or a platform admin manages its members; you are a {role}."
    for attempt in (
        lambda: team_member_add(tenant=world.team_a, username="dave", role="viewer", actor=actor),
        lambda: team_member_role_change(
            tenant=world.team_a, username="victor", role="member", actor=actor
        ),
        lambda: team_member_remove(tenant=world.team_a, username="victor", actor=actor),
    ):
        with pytest.raises(PermissionDenied) as refused:
            attempt()
        assert refused.value.message == expected
    assert roles(world) == BEFORE


def test_another_tenants_lead_is_told_nothing_exists(world, dave):
    with pytest.raises(NotFound):
        team_member_add(tenant=world.team_a, username="dave", role="member", actor=world.bob)
    with pytest.raises(NotFound):
        team_member_remove(tenant=world.team_a, username="carol", actor=world.bob)
    assert roles(world) == BEFORE


def test_an_admin_makes_changes_and_removes_leads_but_never_the_last(world, dave):
    team_member_add(tenant=world.team_a, username="dave", role="lead", actor=world.admin)
    team_member_role_change(tenant=world.team_a, username="alice", role="member", actor=world.admin)
    with pytest.raises(Conflict) as conflict:
        team_member_remove(tenant=world.team_a, username="dave", actor=world.admin)
    assert "dave is the only lead of team-a" in conflict.value.message
    with pytest.raises(Conflict):
        team_member_role_change(
            tenant=world.team_a, username="dave", role="viewer", actor=world.admin
        )
    assert roles(world) == {**BEFORE, "alice": "member", "dave": "lead"}


def test_someone_already_in_the_team_is_a_conflict_not_a_silent_role_change(world):
    with pytest.raises(Conflict) as conflict:
        team_member_add(tenant=world.team_a, username="victor", role="member", actor=world.alice)
    assert conflict.value.message == (
        "victor is already a viewer of team-a; change their role instead."
    )
    assert conflict.value.fields == {"username": ["already a viewer of team-a"]}
    assert roles(world) == BEFORE


def test_an_unknown_user_is_a_400_naming_username_by_default(world):
    with pytest.raises(ValidationFailed) as bad:
        team_member_add(tenant=world.team_a, username="zoe", role="member", actor=world.alice)
    assert list(bad.value.fields) == ["username"]
    assert "No user 'zoe' is known to the portal" in bad.value.message
    assert not User.objects.filter(username="zoe").exists()
    assert roles(world) == BEFORE


def test_a_deactivated_account_cannot_be_added(world):
    UserFactory(username="gone", is_active=False)
    with pytest.raises(ValidationFailed) as bad:
        team_member_add(tenant=world.team_a, username="gone", role="member", actor=world.alice)
    assert "deactivated" in bad.value.fields["username"][0]


def test_a_role_outside_the_choices_is_a_400_naming_role(world, dave):
    with pytest.raises(ValidationFailed) as bad:
        team_member_add(tenant=world.team_a, username="dave", role="owner", actor=world.admin)
    assert list(bad.value.fields) == ["role"]
    assert "'owner' is not a role" in bad.value.message


def test_with_team_add_users_any_a_new_name_becomes_an_account_without_a_password(world, settings):
    settings.TEAM_ADD_USERS = "any"
    team_member_add(tenant=world.team_a, username="zoe", role="member", actor=world.alice)
    zoe = User.objects.get(username="zoe")
    assert not zoe.has_usable_password()
    assert roles(world)["zoe"] == "member"
    created = AuditEvent.objects.get(action="user.created", object_id="zoe")
    assert created.actor == world.alice
    # a name Django would never accept as a username is still refused
    with pytest.raises(ValidationFailed) as bad:
        team_member_add(tenant=world.team_a, username="no spaces", role="member", actor=world.alice)
    assert list(bad.value.fields) == ["username"]
    assert not User.objects.filter(username="no spaces").exists()


def test_nobody_is_told_about_what_they_did_themselves(world):
    team_member_add(tenant=world.team_a, username="admin", role="viewer", actor=world.admin)
    assert not Notification.objects.filter(user=world.admin).exists()


def test_a_removed_member_of_another_tenant_or_a_stranger_is_404(world):
    with pytest.raises(NotFound):
        team_member_remove(tenant=world.team_a, username="bob", actor=world.alice)
    with pytest.raises(NotFound):
        team_change_check(tenant=world.team_a, username="bob", role="viewer", actor=world.alice)


def test_the_roles_each_persona_may_give(world):
    assert team_roles_to_give(user=world.admin, tenant=world.team_a) == ["lead", "member", "viewer"]
    assert team_roles_to_give(user=world.alice, tenant=world.team_a) == [
        MembershipRole.MEMBER,
        MembershipRole.VIEWER,
    ]
    assert team_roles_to_give(user=world.carol, tenant=world.team_a) == []
    assert team_roles_to_give(user=world.bob, tenant=world.team_a) == []


def test_a_team_add_users_value_outside_the_two_fails_loudly_at_start(tmp_path):
    from tests.portal.test_settings import PRODUCTION, manage

    result = manage("check", env={**PRODUCTION, "TEAM_ADD_USERS": "everyone"}, tmp_path=tmp_path)
    assert result.returncode != 0
    assert "TEAM_ADD_USERS='everyone': give 'existing' or 'any'." in result.stderr
