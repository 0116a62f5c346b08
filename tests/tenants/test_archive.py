"""Archiving a tenant: a team that no longer works here keeps its history, leaves the lists,
gets no new quotas and nothing pushed, and its team no longer changes; unarchiving brings it
back and pushes what is in force. Through the services, the API, the pages and Django admin.

Personas from ``world`` (tests/conftest.py): admin, alice (lead of team-a), carol (member),
victor (viewer), bob (lead of team-b, the outsider)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import Client

from core.errors import Conflict
from quotas.choices import GPU_RESOURCE
from quotas.models import QuotaSet, SyncOutbox
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.models import AuditEvent, Membership, Namespace, Tenant
from tenants.services import (
    membership_set,
    namespace_adopt,
    namespace_create,
    team_member_add,
    tenant_archive,
    tenant_create,
    tenant_unarchive,
)
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def generations(tenant: Tenant) -> list[int]:
    return list(
        QuotaSet.objects.filter(tenant=tenant).order_by("pk").values_list("generation", flat=True)
    )


# --- services ---------------------------------------------------------------------------------


def test_archiving_keeps_the_history_and_is_audited(world):
    quota_sets_before = generations(world.team_a)
    events_before = world.team_a.audit_events.count()
    tenant = tenant_archive(tenant=world.team_a, actor=world.admin)
    assert tenant.archived_at is not None
    assert generations(world.team_a) == quota_sets_before  # quotas kept, nothing pushed
    assert Membership.objects.filter(tenant=world.team_a).count() == 3
    assert world.team_a.audit_events.count() == events_before + 1
    event = world.team_a.audit_events.order_by("-id").first()
    assert (event.action, event.actor_username) == ("tenant.archived", "admin")
    assert (event.before["archived"], event.after["archived"]) == (False, True)


def test_archiving_twice_or_a_department_with_teams_in_use_is_refused(world):
    department = tenant_create(slug="research", display_name="Research", actor=world.admin)
    team = tenant_create(slug="speech", display_name="Speech", parent=department, actor=world.admin)
    with pytest.raises(
        Conflict, match=r"research still has teams that are not archived \(speech\)"
    ):
        tenant_archive(tenant=department, actor=world.admin)
    tenant_archive(tenant=team, actor=world.admin)
    tenant_archive(tenant=department, actor=world.admin)
    with pytest.raises(Conflict, match="already archived"):
        tenant_archive(tenant=department, actor=world.admin)
    # A team comes back only after its department does.
    with pytest.raises(Conflict, match="belongs to research, which is archived"):
        tenant_unarchive(tenant=team, actor=world.admin)
    tenant_unarchive(tenant=department, actor=world.admin)
    assert tenant_unarchive(tenant=team, actor=world.admin).archived_at is None
    with pytest.raises(Conflict, match="is not archived"):
        tenant_unarchive(tenant=team, actor=world.admin)


def test_an_archived_tenant_gets_no_new_quotas_and_no_pushes(world):
    tenant_archive(tenant=world.team_a, actor=world.admin)
    before = generations(world.team_a)
    outbox = SyncOutbox.objects.count()
    with pytest.raises(Conflict, match="team-a is archived, so it gets no new quotas"):
        quota_set_write(
            tenant=world.team_a,
            cluster=world.a100,
            items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(1), Decimal(2))],
            scheduling=SchedulingQuotas(),
            actor=world.admin,
        )
    # A change the cluster would see (its members make its RoleBindings) pushes nothing.
    membership_set(tenant=world.team_a, user=world.bob, role="viewer", actor=world.admin)
    assert generations(world.team_a) == before
    assert SyncOutbox.objects.count() == outbox

    # Unarchived, what is in force (the new viewer included) is pushed again.
    tenant_unarchive(tenant=world.team_a, actor=world.admin)
    assert generations(world.team_a) == [g + 1 for g in before]
    assert SyncOutbox.objects.count() == outbox + len(before)


def test_an_archived_tenant_gets_no_new_namespace_and_nothing_is_pushed(world, api_as):
    """A namespace would be written to its clusters at once: refused like its team (409)."""
    tenant_archive(tenant=world.team_a, actor=world.admin)
    before = generations(world.team_a)
    outbox = SyncOutbox.objects.count()
    events = AuditEvent.objects.count()
    with pytest.raises(Conflict, match="team-a is archived, so it gets no new namespaces"):
        namespace_create(tenant=world.team_a, name="team-a-late", purpose="training",
                         actor=world.admin)  # fmt: skip
    response = api_as(world.admin).post(
        "/api/v1/tenants/team-a/namespaces/", {"name": "team-a-late"}, format="json"
    )
    assert response.status_code == 409, response.content
    assert response.json()["fields"] == {"tenant": ["team-a is archived"]}
    assert not Namespace.objects.filter(name="team-a-late").exists()
    # Nor is one it has adopted: the portal would label it and write into it.
    with pytest.raises(Conflict, match="team-a is archived, so it has no namespace adopted"):
        namespace_adopt(
            tenant=world.team_a, name=world.team_a.namespaces.first().name, actor=world.admin
        )
    assert not Namespace.objects.filter(adopted_at__isnull=False).exists()
    assert generations(world.team_a) == before
    assert SyncOutbox.objects.count() == outbox
    assert AuditEvent.objects.count() == events


def test_the_team_of_an_archived_tenant_does_not_change(world):
    tenant_archive(tenant=world.team_a, actor=world.admin)
    UserFactory(username="dave")
    for actor in (world.alice, world.admin):
        with pytest.raises(Conflict, match="archived, so it keeps the team it had"):
            team_member_add(tenant=world.team_a, username="dave", role="member", actor=actor)
    assert not Membership.objects.filter(user__username="dave").exists()


# --- API --------------------------------------------------------------------------------------


def slugs(response) -> list[str]:  # type: ignore[no-untyped-def]
    assert response.status_code == 200, response.content
    return [t["slug"] for t in response.json()["results"]]


def test_an_admin_archives_and_unarchives_through_the_api(world, api_as):
    admin = api_as(world.admin)
    archived = admin.post("/api/v1/tenants/team-c/archive/")
    assert archived.status_code == 200, archived.content
    assert archived.json()["archived_at"] is not None
    again = admin.post("/api/v1/tenants/team-c/archive/")
    assert again.status_code == 409
    assert again.json()["fields"] == {"archived": ["already archived"]}

    assert slugs(admin.get("/api/v1/tenants/")) == ["team-a", "team-b"]
    assert slugs(admin.get("/api/v1/tenants/?archived=true")) == ["team-c"]
    assert slugs(admin.get("/api/v1/tenants/?archived=all")) == ["team-a", "team-b", "team-c"]
    assert admin.get("/api/v1/tenants/?archived=maybe").status_code == 400
    detail = admin.get("/api/v1/tenants/team-c/")  # its page still answers: history kept
    assert detail.status_code == 200 and detail.json()["archived_at"] is not None

    back = admin.post("/api/v1/tenants/team-c/unarchive/")
    assert back.status_code == 200 and back.json()["archived_at"] is None
    assert slugs(admin.get("/api/v1/tenants/")) == ["team-a", "team-b", "team-c"]


def test_only_platform_admins_archive_and_outsiders_learn_nothing(world, api_as):
    assert api_as(world.alice).post("/api/v1/tenants/team-a/archive/").status_code == 403
    assert api_as(world.bob).post("/api/v1/tenants/team-a/archive/").status_code == 404
    assert api_as(None).post("/api/v1/tenants/team-a/archive/").status_code in (401, 403)
    assert Tenant.objects.get(slug="team-a").archived_at is None


def test_a_member_still_opens_an_archived_tenant_but_it_leaves_her_list(world, api_as):
    tenant_archive(tenant=world.team_a, actor=world.admin)
    carol = api_as(world.carol)
    assert slugs(carol.get("/api/v1/tenants/")) == []
    assert carol.get("/api/v1/tenants/team-a/").status_code == 200
    assert slugs(api_as(world.bob).get("/api/v1/tenants/?archived=all")) == ["team-b"]


# --- pages ------------------------------------------------------------------------------------


def test_the_pages_leave_an_archived_tenant_out_and_say_it_is_archived(world):
    tenant_archive(tenant=world.team_a, actor=world.admin)
    client = Client()
    client.force_login(world.alice)
    home = client.get("/").content.decode()
    assert 'data-tenant="team-a"' not in home
    page = client.get("/tenants/team-a/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Archived on " in text
    assert "it gets no new quotas and its team does not change" in text
    assert "Request a change" not in text
    team = client.get("/tenants/team-a/team/").content.decode()
    assert 'name="username"' not in team  # no form to add people


# --- Django admin -----------------------------------------------------------------------------


def test_django_admin_archives_with_an_action_and_hides_archived_tenants(world):
    client = Client()
    client.force_login(world.admin)
    done = client.post(
        "/admin/tenants/tenant/",
        {"action": "archive", "_selected_action": [world.team_c.pk]},
        follow=True,
    )
    assert "Archived: team-c." in done.content.decode()
    assert Tenant.objects.get(slug="team-c").archived_at is not None
    assert AuditEvent.objects.filter(action="tenant.archived", actor_username="admin").count() == 1

    listed = client.get("/admin/tenants/tenant/").content.decode()
    assert f"/admin/tenants/tenant/{world.team_c.pk}/change/" not in listed
    assert f"/admin/tenants/tenant/{world.team_a.pk}/change/" in listed
    archived = client.get("/admin/tenants/tenant/?archived=yes").content.decode()
    assert f"/admin/tenants/tenant/{world.team_c.pk}/change/" in archived

    refused = client.post(
        "/admin/tenants/tenant/?archived=all",
        {"action": "archive", "_selected_action": [world.team_c.pk]},
        follow=True,
    )
    assert "Tenant team-c is already archived." in refused.content.decode()
    client.post(
        "/admin/tenants/tenant/?archived=all",
        {"action": "unarchive", "_selected_action": [world.team_c.pk]},
    )
    assert Tenant.objects.get(slug="team-c").archived_at is None
