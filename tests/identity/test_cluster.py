"""A group mapped to a tenant is bound in the cluster: the mapping's push reaches the
stand-in API server and kubectl reads the group in the tenant's RoleBindings."""

from __future__ import annotations

import pytest

from identity.choices import GroupRole
from identity.services import group_mapping_create, group_mapping_delete
from quotas import sync
from quotas.models import SyncOutbox
from tests.standin import kubectl_json

pytestmark = pytest.mark.django_db


def _push(world) -> None:  # type: ignore[no-untyped-def]
    row = SyncOutbox.objects.filter(tenant=world.team_a, cluster=world.a100).latest("pk")
    sync.outbox_deliver(outbox_id=row.pk)


def _edit_subjects(standin, world) -> set[str]:  # type: ignore[no-untyped-def]
    namespace = world.team_a.namespaces.order_by("name").first().name
    binding = kubectl_json(standin, "get", "rolebinding", "gpu-portal-edit", "-n", namespace)
    return {s["name"] for s in binding["subjects"] if s["kind"] == "Group"}


def test_a_mapped_group_is_bound_in_the_tenants_namespaces_and_unbound_when_unmapped(
    world, standin
):
    mapping = group_mapping_create(
        group="gpu-team-a-leads", role=GroupRole.LEAD, tenant=world.team_a, actor=world.admin
    )
    _push(world)
    assert "gpu-team-a-leads" in _edit_subjects(standin, world)
    group_mapping_delete(mapping=mapping, actor=world.admin)
    _push(world)
    assert "gpu-team-a-leads" not in _edit_subjects(standin, world)
