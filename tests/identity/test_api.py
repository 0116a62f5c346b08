"""/api/v1/identity-groups/: platform admins map identity groups to roles; everyone else is
refused; bad input is a 400 naming the field; the tenant's RoleBindings follow."""

from __future__ import annotations

import pytest

from identity.models import GroupMapping
from quotas.loader import tenant_specs
from tenants.models import AuditEvent

URL = "/api/v1/identity-groups/"
pytestmark = pytest.mark.django_db


def test_an_admin_maps_groups_and_the_tenant_binds_them(world, api_as):
    admin = api_as(world.admin)
    lead = admin.post(URL, {"group": "gpu-team-a-leads", "role": "lead", "tenant": "team-a"})
    assert lead.status_code == 201, lead.json()
    assert lead.json() | {"id": 0, "created_at": ""} == {
        "id": 0,
        "group": "gpu-team-a-leads",
        "role": "lead",
        "tenant": "team-a",
        "tenant_exists": True,
        "stale": "",
        "created_at": "",
    }
    assert admin.post(URL, {"group": "gpu-admins", "role": "platform-admin"}).status_code == 201
    assert (
        admin.post(
            URL, {"group": "gpu-team-a-view", "role": "viewer", "tenant": "team-a"}
        ).status_code
        == 201
    )
    listed = admin.get(URL).json()
    assert [m["group"] for m in listed["results"]] == [
        "gpu-admins",
        "gpu-team-a-leads",
        "gpu-team-a-view",
    ]
    spec = next(s for s in tenant_specs(world.a100) if s.slug == "team-a")
    assert (spec.editor_groups, spec.viewer_groups) == (("gpu-team-a-leads",), ("gpu-team-a-view",))
    assert (
        AuditEvent.objects.filter(action="group_mapping.created", tenant=world.team_a).count() == 2
    )

    changed = admin.patch(f"{URL}{lead.json()['id']}/", {"role": "member"})
    assert changed.status_code == 200 and changed.json()["role"] == "member"
    assert admin.delete(f"{URL}{lead.json()['id']}/").status_code == 204
    spec = next(s for s in tenant_specs(world.a100) if s.slug == "team-a")
    assert spec.editor_groups == ()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"group": "", "role": "lead", "tenant": "team-a"}, "group", ""),
        ({"group": "g", "role": "owner", "tenant": "team-a"}, "role", ""),
        ({"group": "g", "role": "lead"}, "tenant", "needs the tenant"),
        ({"group": "g", "role": "lead", "tenant": "no-such-team"}, "tenant", "No tenant"),
        (
            {"group": "g", "role": "platform-admin", "tenant": "team-a"},
            "tenant",
            "leave the tenant out",
        ),
        ({"group": "g", "role": "lead", "tenant": "team-a", "extra": 1}, "extra", "Unknown field"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(world, api_as, body, field, words):
    response = api_as(world.admin).post(URL, body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["fields"], response.json()
    assert words in " ".join(response.json()["fields"][field])
    assert not GroupMapping.objects.exists()


def test_a_group_mapped_twice_for_one_tenant_is_a_409(world, api_as):
    admin = api_as(world.admin)
    body = {"group": "g", "role": "lead", "tenant": "team-a"}
    assert admin.post(URL, body).status_code == 201
    again = admin.post(URL, {**body, "role": "member"})
    assert again.status_code == 409
    assert GroupMapping.objects.get().role == "lead"


@pytest.mark.parametrize("persona", ["alice", "carol", "bob"])
def test_only_platform_admins_see_or_change_mappings(world, api_as, persona):
    mapping = GroupMapping.objects.create(
        group="g", role="lead", tenant=world.team_a, tenant_slug="team-a"
    )
    client = api_as(getattr(world, persona))
    assert client.get(URL).status_code == 403
    assert client.get(f"{URL}{mapping.pk}/").status_code == 403
    assert client.post(URL, {"group": "x", "role": "lead", "tenant": "team-a"}).status_code == 403
    assert client.patch(f"{URL}{mapping.pk}/", {"role": "viewer"}).status_code == 403
    assert client.delete(f"{URL}{mapping.pk}/").status_code == 403
    assert api_as(None).get(URL).status_code == 401
    assert GroupMapping.objects.get().role == "lead"
