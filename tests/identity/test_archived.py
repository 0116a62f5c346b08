"""Groups mapped to an archived tenant: ignored at sign-in (logged once), shown as stale in
Django admin and the API; the archived tenant's team stays as it was; no new mapping to it."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from identity.choices import GroupRole
from identity.services import group_mapping_create, identity_groups_apply
from tenants.models import Membership
from tenants.services import tenant_archive, tenant_unarchive
from tests.factories import UserFactory
from tests.identity.servers import Directory

pytestmark = pytest.mark.django_db

URL = "/api/v1/identity-groups/"


@pytest.fixture
def mapped(world):  # type: ignore[no-untyped-def]
    group_mapping_create(
        group="gpu-team-c-leads", role=GroupRole.LEAD, tenant=world.team_c, actor=world.admin
    )
    group_mapping_create(
        group="gpu-team-a", role=GroupRole.MEMBER, tenant=world.team_a, actor=world.admin
    )
    return world


def roles(username: str) -> dict[str, tuple[str, str]]:
    return {
        m.tenant.slug: (m.role, m.source)
        for m in Membership.objects.filter(user__username=username).select_related("tenant")
    }


def test_sign_in_ignores_a_mapping_to_an_archived_tenant_and_keeps_its_team(mapped, caplog):
    world = mapped
    erin = UserFactory(username="erin")
    both = ["gpu-team-c-leads", "gpu-team-a"]
    identity_groups_apply(user=erin, groups=both, provider="oidc")
    assert roles("erin") == {
        "team-a": ("member", "group:gpu-team-a"),
        "team-c": ("lead", "group:gpu-team-c-leads"),
    }
    tenant_archive(tenant=world.team_c, actor=world.admin)
    caplog.set_level(logging.INFO, logger="identity")

    # A newcomer in the group gets nothing in the archived tenant, and one line says why.
    fred = UserFactory(username="fred")
    identity_groups_apply(user=fred, groups=both, provider="oidc")
    assert roles("fred") == {"team-a": ("member", "group:gpu-team-a")}
    stale = "'gpu-team-c-leads' is mapped to tenant 'team-c', which is archived: ignored"
    assert caplog.text.count(stale) == 1
    identity_groups_apply(user=fred, groups=both, provider="oidc")
    assert caplog.text.count(stale) == 1  # logged once

    # Erin leaves both groups: team-a follows; the archived team-c stays as it was.
    identity_groups_apply(user=erin, groups=[], provider="oidc")
    assert roles("erin") == {"team-c": ("lead", "group:gpu-team-c-leads")}

    # Unarchived, the mapping counts again from the next sign-in.
    tenant_unarchive(tenant=world.team_c, actor=world.admin)
    identity_groups_apply(user=fred, groups=both, provider="oidc")
    assert roles("fred")["team-c"] == ("lead", "group:gpu-team-c-leads")
    identity_groups_apply(user=erin, groups=[], provider="oidc")
    assert roles("erin") == {}


def test_a_directory_user_signs_in_without_the_archived_tenant(mapped, directory: Directory):
    world = mapped
    dn = directory.user_add("gwen", "gwen-pass-8812")
    directory.group_add("gpu-team-c-leads", dn)
    tenant_archive(tenant=world.team_c, actor=world.admin)
    answer = Client().post("/login/", {"username": "gwen", "password": "gwen-pass-8812"})
    assert answer.status_code == 302, answer.content
    assert roles("gwen") == {}


def test_admin_and_api_show_a_mapping_to_an_archived_tenant_as_stale(mapped, api_as):
    world = mapped
    tenant_archive(tenant=world.team_c, actor=world.admin)
    listed = {m["group"]: m["stale"] for m in api_as(world.admin).get(URL).json()["results"]}
    assert listed == {
        "gpu-team-a": "",
        "gpu-team-c-leads": "ignored: tenant team-c is archived",
    }
    client = Client()
    client.force_login(world.admin)
    page = client.get("/admin/identity/groupmapping/").content.decode()
    assert "ignored: tenant team-c is archived" in page


def test_no_new_mapping_to_an_archived_tenant(mapped, api_as):
    world = mapped
    tenant_archive(tenant=world.team_c, actor=world.admin)
    refused = api_as(world.admin).post(
        URL, {"group": "gpu-team-c", "role": "member", "tenant": "team-c"}
    )
    assert refused.status_code == 400
    assert refused.json()["fields"] == {
        "tenant": ["Tenant team-c is archived: map groups to a tenant in use."]
    }
