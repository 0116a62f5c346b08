"""Tenant services (audited writes) and the database constraints that hold without them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, NotFound, ValidationFailed
from tenants.choices import MembershipRole, TenantState
from tenants.models import ApiToken, AuditEvent, Membership, Namespace, Tenant
from tenants.services import (
    api_token_authenticate,
    api_token_create,
    api_token_revoke,
    membership_remove,
    membership_set,
    namespace_create,
    tenant_create,
    tenant_update,
)
from tests.factories import TenantFactory, UserFactory

# --- tenant_create -------------------------------------------------------------------------


def test_tenant_create_makes_the_tenant_its_namespaces_and_audit_rows(db):
    admin = UserFactory(username="admin", is_platform_admin=True)
    tenant = tenant_create(slug="vision", display_name="  Vision  ", cohort="research", actor=admin)
    assert tenant.display_name == "Vision"
    assert tenant.state == TenantState.ACTIVE
    assert sorted(tenant.namespaces.values_list("name", "purpose")) == [
        ("vision-inference", "inference"),
        ("vision-training", "training"),
    ]
    created = AuditEvent.objects.get(action="tenant.created")
    assert created.actor == admin
    assert created.actor_username == "admin"
    assert created.tenant == tenant
    assert created.tenant_slug == "vision"
    assert created.object_type == "Tenant"
    assert created.before is None
    assert created.after["slug"] == "vision"
    assert created.after["cohort"] == "research"
    assert AuditEvent.objects.filter(action="namespace.created", tenant=tenant).count() == 2


def test_tenant_create_with_explicit_namespaces_and_a_parent(db):
    org = TenantFactory(slug="org")
    tenant = tenant_create(
        slug="team-x",
        display_name="X",
        parent=org,
        namespaces=[("team-x", "general")],
        actor=None,
    )
    assert tenant.parent == org
    assert list(tenant.namespaces.values_list("name", flat=True)) == ["team-x"]
    assert AuditEvent.objects.get(action="tenant.created").actor_username == "system"


@pytest.mark.parametrize(
    ("kwargs", "field", "reason"),
    [
        ({"slug": "Team_A"}, "slug", "DNS-1123"),
        ({"slug": "-a"}, "slug", "DNS-1123"),
        ({"slug": "a-"}, "slug", "DNS-1123"),
        ({"slug": "a" * 41}, "slug", "at most 40"),
        ({"slug": ""}, "slug", "required"),
        ({"slug": "team-a"}, "slug", "already exists"),
        ({"cohort": "Big Cohort"}, "cohort", "DNS-1123"),
        ({"display_name": "   "}, "display_name", "blank"),
    ],
)
def test_tenant_create_refuses_bad_input_and_writes_nothing(db, kwargs, field, reason):
    TenantFactory(slug="team-a")
    counts = (Tenant.objects.count(), Namespace.objects.count(), AuditEvent.objects.count())
    with pytest.raises(ValidationFailed) as caught:
        tenant_create(**{"slug": "fresh", "display_name": "Fresh", "actor": None, **kwargs})
    assert reason in " ".join(caught.value.fields[field])
    assert (Tenant.objects.count(), Namespace.objects.count(), AuditEvent.objects.count()) == counts


def test_tenant_create_is_all_or_nothing_when_a_namespace_is_taken(db):
    taken_by = TenantFactory(slug="other")
    Namespace.objects.create(tenant=taken_by, name="fresh-inference")
    with pytest.raises(ValidationFailed) as caught:
        tenant_create(slug="fresh", display_name="Fresh", actor=None)
    assert "fresh-inference" in caught.value.fields["name"][0]
    assert not Tenant.objects.filter(slug="fresh").exists()
    assert not Namespace.objects.filter(name="fresh-training").exists()
    assert not AuditEvent.objects.exists()


def test_tenant_update_audits_before_and_after_and_skips_no_ops(db):
    admin = UserFactory(username="admin", is_platform_admin=True)
    tenant = TenantFactory(slug="team-a", display_name="Team A")
    tenant_update(tenant=tenant, actor=admin, display_name="Team A")
    assert not AuditEvent.objects.exists()
    tenant_update(tenant=tenant, actor=admin, state="suspended", default_priority="experiment")
    event = AuditEvent.objects.get(action="tenant.updated")
    assert event.actor == admin
    assert event.before["state"] == "active"
    assert event.after["state"] == "suspended"
    assert event.after["default_priority"] == "experiment"


def test_tenant_update_refuses_unknown_choices(db):
    tenant = TenantFactory(slug="team-a")
    with pytest.raises(ValidationFailed) as caught:
        tenant_update(tenant=tenant, actor=None, state="sleeping")
    assert "state" in caught.value.fields
    with pytest.raises(ValidationFailed) as caught:
        tenant_update(tenant=tenant, actor=None, default_priority="urgent")
    assert "default_priority" in caught.value.fields
    tenant.refresh_from_db()
    assert tenant.state == "active"


def test_namespace_create_is_audited_and_refuses_taken_names(db):
    tenant = TenantFactory(slug="team-a")
    namespace_create(tenant=tenant, name="team-a-batch", purpose="training", actor=None)
    assert AuditEvent.objects.get(action="namespace.created").after == {
        "name": "team-a-batch",
        "purpose": "training",
    }
    with pytest.raises(ValidationFailed) as caught:
        namespace_create(tenant=tenant, name="team-a-batch", purpose="general", actor=None)
    assert "already taken" in caught.value.fields["name"][0]
    with pytest.raises(ValidationFailed) as caught:
        namespace_create(tenant=tenant, name="team-a-x", purpose="mining", actor=None)
    assert "purpose" in caught.value.fields


# --- memberships ---------------------------------------------------------------------------


def test_membership_set_adds_changes_and_audits(db):
    admin = UserFactory(username="admin", is_platform_admin=True)
    carol = UserFactory(username="carol")
    tenant = TenantFactory(slug="team-a")
    membership_set(tenant=tenant, user=carol, role=MembershipRole.VIEWER, actor=admin)
    added = AuditEvent.objects.get(action="membership.added")
    assert (added.actor, added.tenant, added.before) == (admin, tenant, None)
    assert added.after == {"user": "carol", "role": "viewer"}

    membership_set(tenant=tenant, user=carol, role=MembershipRole.MEMBER, actor=admin)
    changed = AuditEvent.objects.get(action="membership.role_changed")
    assert changed.before == {"user": "carol", "role": "viewer"}
    assert changed.after == {"user": "carol", "role": "member"}
    assert Membership.objects.get(tenant=tenant, user=carol).role == "member"

    # setting the same role again is not a change
    membership_set(tenant=tenant, user=carol, role=MembershipRole.MEMBER, actor=admin)
    assert AuditEvent.objects.filter(action__startswith="membership.").count() == 2


def test_membership_set_refuses_an_unknown_role(db):
    carol = UserFactory(username="carol")
    tenant = TenantFactory(slug="team-a")
    with pytest.raises(ValidationFailed) as caught:
        membership_set(tenant=tenant, user=carol, role="owner", actor=None)
    assert "role" in caught.value.fields
    assert not Membership.objects.exists()


def test_membership_remove_audits_what_was_removed(db):
    admin = UserFactory(username="admin", is_platform_admin=True)
    carol = UserFactory(username="carol")
    tenant = TenantFactory(slug="team-a")
    membership_set(tenant=tenant, user=carol, role="member", actor=admin)
    membership_remove(tenant=tenant, user=carol, actor=admin)
    assert not Membership.objects.exists()
    removed = AuditEvent.objects.get(action="membership.removed")
    assert removed.actor == admin
    assert removed.before == {"user": "carol", "role": "member"}
    assert removed.after is None


def test_membership_remove_of_a_non_member_is_not_found(db):
    tenant = TenantFactory(slug="team-a")
    with pytest.raises(NotFound):
        membership_remove(tenant=tenant, user=UserFactory(username="carol"), actor=None)


def test_the_only_lead_of_an_active_tenant_cannot_be_removed(db):
    alice = UserFactory(username="alice")
    tenant = TenantFactory(slug="team-a")
    membership_set(tenant=tenant, user=alice, role="lead", actor=None)
    with pytest.raises(Conflict) as caught:
        membership_remove(tenant=tenant, user=alice, actor=None)
    assert "only lead" in caught.value.message
    assert Membership.objects.filter(user=alice, role="lead").exists()
    assert not AuditEvent.objects.filter(action="membership.removed").exists()


def test_a_lead_can_go_when_another_lead_stays_or_the_tenant_is_suspended(db):
    alice, dave = UserFactory(username="alice"), UserFactory(username="dave")
    tenant = TenantFactory(slug="team-a")
    membership_set(tenant=tenant, user=alice, role="lead", actor=None)
    membership_set(tenant=tenant, user=dave, role="lead", actor=None)
    membership_remove(tenant=tenant, user=alice, actor=None)
    tenant = tenant_update(tenant=tenant, actor=None, state="suspended")
    membership_remove(tenant=tenant, user=dave, actor=None)
    assert not Membership.objects.filter(tenant=tenant).exists()


# --- API tokens ----------------------------------------------------------------------------


def test_api_token_create_stores_only_a_digest_and_audits(db):
    alice = UserFactory(username="alice")
    token, secret = api_token_create(user=alice, name="ci")
    assert token.digest != secret
    assert len(token.digest) == 64
    assert secret[:8] == token.prefix
    assert token.expires_at > timezone.now() + timedelta(days=89)
    event = AuditEvent.objects.get(action="api_token.created")
    assert event.actor == alice
    assert secret not in str(event.after)


def test_api_token_authenticate_checks_secret_expiry_and_revocation(db):
    alice = UserFactory(username="alice")
    token, secret = api_token_create(user=alice, ttl=timedelta(hours=1))
    assert api_token_authenticate(secret=secret) == token
    assert api_token_authenticate(secret=secret + "x") is None
    api_token_revoke(token=token, actor=alice)
    assert api_token_authenticate(secret=secret) is None

    expired, expired_secret = api_token_create(user=alice, ttl=timedelta(hours=1))
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now())
    assert api_token_authenticate(secret=expired_secret) is None


def test_api_token_revoke_is_idempotent_and_audited_once(db):
    alice = UserFactory(username="alice")
    token, _ = api_token_create(user=alice)
    first = api_token_revoke(token=token, actor=alice).revoked_at
    second = api_token_revoke(token=token, actor=alice).revoked_at
    assert first is not None
    assert first == second
    assert AuditEvent.objects.filter(action="api_token.revoked").count() == 1


# --- database constraints, bypassing the services ------------------------------------------


@pytest.mark.parametrize("slug", ["Team_A", "-a", "a-", "team a", ""])
def test_the_database_refuses_a_tenant_slug_that_is_not_dns1123(db, slug):
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.create(slug=slug, display_name="Raw")


def test_the_database_refuses_a_duplicate_slug(db):
    TenantFactory(slug="team-a")
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.create(slug="team-a", display_name="Again")


def test_the_database_refuses_a_bad_cohort(db):
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.create(slug="team-a", display_name="A", cohort="Not_A_Label")


def test_the_database_refuses_a_tenant_that_is_its_own_parent(db):
    tenant = TenantFactory(slug="team-a")
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.filter(pk=tenant.pk).update(parent=tenant)


def test_the_database_refuses_a_duplicate_membership(db):
    tenant, carol = TenantFactory(slug="team-a"), UserFactory(username="carol")
    Membership.objects.create(tenant=tenant, user=carol, role="member")
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(tenant=tenant, user=carol, role="viewer")


def test_the_database_refuses_an_unknown_role(db):
    tenant, carol = TenantFactory(slug="team-a"), UserFactory(username="carol")
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(tenant=tenant, user=carol, role="owner")


@pytest.mark.parametrize("name", ["Team_A", "team-a-", "x y"])
def test_the_database_refuses_a_bad_namespace_name(db, name):
    tenant = TenantFactory(slug="team-a")
    with pytest.raises(IntegrityError), transaction.atomic():
        Namespace.objects.create(tenant=tenant, name=name)


def test_the_database_refuses_a_namespace_name_used_twice(db):
    a, b = TenantFactory(slug="team-a"), TenantFactory(slug="team-b")
    Namespace.objects.create(tenant=a, name="shared")
    with pytest.raises(IntegrityError), transaction.atomic():
        Namespace.objects.create(tenant=b, name="shared")


def test_the_database_refuses_a_duplicate_token_digest(db):
    alice = UserFactory(username="alice")
    token, _ = api_token_create(user=alice)
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiToken.objects.create(
            user=alice, prefix="x", digest=token.digest, expires_at=timezone.now()
        )
