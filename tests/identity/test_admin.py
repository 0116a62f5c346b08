"""Group mappings in Django admin go through the audited services."""

from __future__ import annotations

import pytest
from django.test import Client

from identity.models import GroupMapping
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_an_admin_adds_changes_and_deletes_a_mapping_in_django_admin(world):
    client = Client()
    client.force_login(world.admin)
    added = client.post(
        "/admin/identity/groupmapping/add/",
        {"group": "gpu-team-a-leads", "role": "lead", "tenant": world.team_a.pk},
    )
    assert added.status_code == 302, added.content
    mapping = GroupMapping.objects.get()
    assert (mapping.group, mapping.role, mapping.tenant_slug) == (
        "gpu-team-a-leads",
        "lead",
        "team-a",
    )
    changed = client.post(f"/admin/identity/groupmapping/{mapping.pk}/change/", {"role": "viewer"})
    assert changed.status_code == 302, changed.content
    mapping.refresh_from_db()
    assert mapping.role == "viewer"
    deleted = client.post(f"/admin/identity/groupmapping/{mapping.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not GroupMapping.objects.exists()
    assert list(
        AuditEvent.objects.filter(object_type="GroupMapping")
        .order_by("id")
        .values_list("action", "actor_username")
    ) == [
        ("group_mapping.created", "admin"),
        ("group_mapping.changed", "admin"),
        ("group_mapping.deleted", "admin"),
    ]


def test_a_lead_cannot_open_the_mappings_in_django_admin(world):
    client = Client()
    client.force_login(world.alice)
    assert client.get("/admin/identity/groupmapping/").status_code == 302  # to admin's login
