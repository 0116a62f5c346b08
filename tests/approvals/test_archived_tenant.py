"""Requests for an archived tenant: refused when filed (400 naming the tenant) and when an
admin approves one filed before the archiving (409); nothing is stored either way."""

from __future__ import annotations

import pytest

from tenants.services import tenant_archive, tenant_unarchive
from tests.approvals.conftest import URL, body, database_state, file, generation

pytestmark = pytest.mark.django_db

ARCHIVED = "team-a is archived: it gets no new quotas until a platform admin unarchives it"


def test_a_request_for_an_archived_tenant_is_refused_when_filed(world, api_as):
    tenant_archive(tenant=world.team_a, actor=world.admin)
    before = database_state()
    for persona in (world.alice, world.admin):
        refused = api_as(persona).post(URL, body(), format="json")
        assert refused.status_code == 400, refused.content
        assert refused.json()["fields"] == {"tenant": [ARCHIVED]}
    assert database_state() == before


def test_a_pending_request_is_refused_at_approval_once_its_tenant_is_archived(world, api_as):
    pending = file(world)
    a100_generation = generation(world.team_a, world.a100)
    tenant_archive(tenant=world.team_a, actor=world.admin)
    before = database_state()
    refused = api_as(world.admin).post(f"{URL}{pending.pk}/approve/", {}, format="json")
    assert refused.status_code == 409, refused.content
    assert refused.json()["fields"] == {"tenant": [ARCHIVED]}
    assert database_state() == before
    assert generation(world.team_a, world.a100) == a100_generation

    # Unarchived (which pushes what is in force again), the same request goes through.
    tenant_unarchive(tenant=world.team_a, actor=world.admin)
    approved = api_as(world.admin).post(f"{URL}{pending.pk}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "approved"
