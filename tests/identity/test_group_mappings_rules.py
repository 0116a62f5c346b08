"""Group mappings never name one of Kubernetes' own groups: ``system:authenticated`` (everyone
signed in), ``system:serviceaccounts`` (every workload's account), ``system:masters`` (past
every authorizer) would, bound in a tenant's namespaces, hand them to far more than the team.
The API server itself accepts any non-empty name for a Group subject (its RBAC validation
requires only a name), so the portal refuses: a 400 naming ``group``, nothing changed. A legacy
row is never bound by the push (tests/quotas/test_namespaces_push.py)."""

from __future__ import annotations

import pytest

from identity.models import GroupMapping
from quotas.kube.subjects import bindable_groups, refused_group
from tenants.models import AuditEvent

URL = "/api/v1/identity-groups/"
pytestmark = pytest.mark.django_db

SYSTEM_GROUPS = [
    "system:authenticated",
    "system:unauthenticated",
    "system:serviceaccounts",
    "system:serviceaccounts:team-a-training",
    "system:masters",
    "system:nodes",
    "System:Masters",
]


def test_a_system_group_is_refused_naming_the_field(world, api_as, subtests):
    admin = api_as(world.admin)
    before = GroupMapping.objects.count(), AuditEvent.objects.count()
    roles = [
        ("member", "team-a"),
        ("viewer", "team-a"),
        ("lead", "team-a"),
        ("platform-admin", None),
    ]
    for group in SYSTEM_GROUPS:
        for role, tenant in roles:
            with subtests.test(group=group, role=role):
                body = {"group": group, "role": role} | ({"tenant": tenant} if tenant else {})
                response = admin.post(URL, body, format="json")
                assert response.status_code == 400, response.content
                answer = response.json()
                assert list(answer["fields"]) == ["group"]
                message = answer["fields"]["group"][0]
                assert "one of Kubernetes' own groups (system:...)" in message
                assert "Map the group the identity provider sends" in message  # what instead
    assert (GroupMapping.objects.count(), AuditEvent.objects.count()) == before


@pytest.mark.parametrize(
    ("group", "words"),
    [
        ("", "This field may not be blank."),
        ("   ", "This field may not be blank."),
        ("ml\nengineers", "no control characters"),
        ("ml\tengineers", "no control characters"),
        ("x" * 201, "200 characters"),
    ],
)
def test_names_kubernetes_would_not_bind_are_refused(world, api_as, group, words):
    response = api_as(world.admin).post(
        URL, {"group": group, "role": "member", "tenant": "team-a"}, format="json"
    )
    assert response.status_code == 400, response.content
    assert words in response.json()["fields"]["group"][0]
    assert not GroupMapping.objects.exists()


@pytest.mark.parametrize(
    "group",
    ["ml-engineers", "cn=ml,ou=groups,dc=example,dc=com", "oidc:ml-team", "team a", "systems"],
)
def test_ordinary_provider_groups_are_mapped(world, api_as, group):
    response = api_as(world.admin).post(
        URL, {"group": group, "role": "member", "tenant": "team-a"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert refused_group(group) is None


def test_only_a_platform_admin_maps_groups(world, api_as):
    for persona in (world.alice, world.carol, world.victor, world.bob):
        response = api_as(persona).post(
            URL, {"group": "ml-engineers", "role": "member", "tenant": "team-a"}, format="json"
        )
        assert response.status_code == 403
    assert not GroupMapping.objects.exists()


def test_a_legacy_system_group_is_deleted_not_changed(world, api_as):
    legacy = GroupMapping.objects.create(
        group="system:authenticated", role="viewer", tenant=world.team_a, tenant_slug="team-a"
    )
    admin = api_as(world.admin)
    changed = admin.patch(f"{URL}{legacy.pk}/", {"role": "member"}, format="json")
    assert changed.status_code == 400 and "group" in changed.json()["fields"]
    assert GroupMapping.objects.get(pk=legacy.pk).role == "viewer"
    assert admin.delete(f"{URL}{legacy.pk}/").status_code == 204


def test_the_two_copies_of_the_rule_agree():
    """identity sits below quotas and keeps its own copy of the rule; the compiler's
    (quotas.kube.subjects) refuses the same groups."""
    for group in SYSTEM_GROUPS:
        assert refused_group(group) is not None
    assert refused_group("") and refused_group("a\nb")
    assert bindable_groups(["b", "system:masters", "a", "b"]) == ["a", "b"]
