"""Reads: group mappings (admins only, enforced by the API's permission), and the groups a
tenant's RoleBindings name."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import QuerySet

from identity.choices import GroupRole
from identity.models import GroupMapping


def group_mapping_list() -> QuerySet[GroupMapping]:
    return GroupMapping.objects.select_related("tenant").order_by("group", "tenant_slug", "pk")


def group_mapping_stale(mapping: GroupMapping) -> str:
    """Why sign-in ignores ``mapping`` (its tenant deleted or archived), in words; "" when it
    counts. ``mapping.tenant`` should be selected with it."""
    if mapping.role == GroupRole.PLATFORM_ADMIN:
        return ""
    if mapping.tenant is None:
        return f"ignored: tenant {mapping.tenant_slug} was deleted"
    if mapping.tenant.archived_at is not None:
        return f"ignored: tenant {mapping.tenant_slug} is archived"
    return ""


def tenant_groups(tenant_ids: Iterable[int]) -> dict[int, tuple[list[str], list[str]]]:
    """``{tenant id: (groups that edit, groups that view)}``: the identity groups mapped to the
    tenant, for its RoleBindings (leads and members edit, viewers view), sorted."""
    edit: dict[int, set[str]] = defaultdict(set)
    view: dict[int, set[str]] = defaultdict(set)
    rows = GroupMapping.objects.filter(tenant_id__in=list(tenant_ids)).values_list(
        "tenant_id", "group", "role"
    )
    for tenant_id, group, role in rows:
        assert tenant_id is not None  # filtered on it
        (view if role == GroupRole.VIEWER else edit)[tenant_id].add(group)
    return {
        tenant_id: (sorted(edit.get(tenant_id, ())), sorted(view.get(tenant_id, ())))
        for tenant_id in set(edit) | set(view)
    }
