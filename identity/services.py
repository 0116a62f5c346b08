"""Writes: group mappings (audited), and a user's group-made roles brought in line with the
groups the identity provider sent at sign-in."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from core.errors import Conflict, ValidationFailed
from identity.choices import TENANT_ROLE_RANK, GroupRole
from identity.models import GROUP_NAME_MAX, GroupMapping
from tenants.models import GROUP_SOURCE_PREFIX, MEMBERSHIP_SOURCE_MANUAL, Membership, Tenant, User
from tenants.services import TENANT_CHANGED, audit_record

logger = logging.getLogger(__name__)

# Group names that map nowhere, logged once per process (a provider sends every group a user
# is in, most of which mean nothing to the portal: one line each, not one per sign-in).
_unmapped_logged: set[str] = set()
# Stale mappings (their tenant deleted or archived), logged once per process each likewise.
_stale_logged: set[tuple[str, str, str]] = set()


def _log_stale(provider: str, mapping: GroupMapping, why: str) -> None:
    key = (mapping.group, mapping.tenant_slug, why)
    if key in _stale_logged:
        return
    _stale_logged.add(key)
    logger.warning(
        "%s group %r is mapped to tenant %r, which %s: ignored",
        provider,
        mapping.group,
        mapping.tenant_slug,
        why,
    )


def _tenant_changed(tenant: Tenant, actor: User | None) -> None:
    """The tenant's RoleBindings follow its members and mapped groups (quotas pushes again)."""
    for hook in TENANT_CHANGED:
        hook(tenant=tenant, actor=actor)


def _snapshot(mapping: GroupMapping) -> dict[str, Any]:
    return {"group": mapping.group, "role": mapping.role, "tenant": mapping.tenant_slug or None}


# Kubernetes' own groups start with this: system:authenticated (everyone signed in),
# system:serviceaccounts (every workload's account), system:masters (past every authorizer).
# The same rule as quotas.kube.subjects, which the compiler applies to legacy rows (this app
# sits below quotas and may not import it; a test keeps the two in step).
SYSTEM_GROUP_PREFIX = "system:"


def _check_group_subject(group: str) -> None:
    """A mapped group becomes a Group subject of the tenant's RoleBindings (and a platform
    admin group is one an identity provider sends): never one of Kubernetes' own ``system:``
    groups, nor a name with control characters. The API server itself takes any non-empty
    name for a Group subject, so the portal is the one to refuse."""
    if group.lower().startswith(SYSTEM_GROUP_PREFIX):
        raise ValidationFailed.for_field(
            "group",
            f"{group} is one of Kubernetes' own groups (system:...): bound in a tenant's "
            "namespaces it would give far more than the tenant's people access. Map the group "
            "the identity provider sends for these people instead.",
        )
    if any(ord(char) < 32 or ord(char) == 127 for char in group):
        raise ValidationFailed.for_field(
            "group",
            "A group name holds no control characters (line breaks, tabs): give it exactly "
            "as the identity provider sends it.",
        )


def _check_mapping(*, group: str, role: str, tenant: Tenant | None) -> str:
    group = group.strip()
    if not group:
        raise ValidationFailed.for_field("group", "Give the group's name as the provider sends it.")
    if len(group) > GROUP_NAME_MAX:
        raise ValidationFailed.for_field(
            "group", f"A group name has at most {GROUP_NAME_MAX} characters."
        )
    _check_group_subject(group)
    if role not in GroupRole.values:
        raise ValidationFailed.for_field(
            "role", f"{role!r} is not a role: use one of {', '.join(GroupRole.values)}."
        )
    if role == GroupRole.PLATFORM_ADMIN and tenant is not None:
        raise ValidationFailed.for_field(
            "tenant", "A platform-admin group applies to every tenant: leave the tenant out."
        )
    if role != GroupRole.PLATFORM_ADMIN and tenant is None:
        raise ValidationFailed.for_field("tenant", f"A {role} group needs the tenant it is for.")
    if tenant is not None and tenant.archived_at is not None:
        raise ValidationFailed.for_field(
            "tenant", f"Tenant {tenant.slug} is archived: map groups to a tenant in use."
        )
    return group


@transaction.atomic
def group_mapping_create(
    *, group: str, role: str, tenant: Tenant | None, actor: User | None
) -> GroupMapping:
    """Members of ``group`` get ``role`` in ``tenant`` (or platform admin) from their next
    sign-in; the tenant's RoleBindings name the group from its next push."""
    group = _check_mapping(group=group, role=role, tenant=tenant)
    try:
        with transaction.atomic():
            mapping = GroupMapping.objects.create(
                group=group, role=role, tenant=tenant, tenant_slug=tenant.slug if tenant else ""
            )
    except IntegrityError as exc:
        where = f"tenant {tenant.slug}" if tenant else "platform admin"
        raise Conflict(
            f"Group {group} is already mapped for {where}: change that mapping instead.",
            fields={"group": [f"already mapped for {where}"]},
        ) from exc
    audit_record(
        actor=actor,
        action="group_mapping.created",
        obj=mapping,
        object_id=str(mapping),
        tenant=tenant,
        after=_snapshot(mapping),
    )
    if tenant is not None:
        _tenant_changed(tenant, actor)
    return mapping


@transaction.atomic
def group_mapping_update(*, mapping: GroupMapping, role: str, actor: User | None) -> GroupMapping:
    """Change what the group makes its members (within the same tenant, or admin)."""
    mapping = GroupMapping.objects.select_for_update().get(pk=mapping.pk)
    tenant = mapping.tenant
    _check_mapping(group=mapping.group, role=role, tenant=tenant)
    if role == mapping.role:
        return mapping
    before = _snapshot(mapping)
    mapping.role = role
    mapping.save(update_fields=["role"])
    audit_record(
        actor=actor,
        action="group_mapping.changed",
        obj=mapping,
        object_id=str(mapping),
        tenant=tenant,
        before=before,
        after=_snapshot(mapping),
    )
    if tenant is not None:
        _tenant_changed(tenant, actor)
    return mapping


@transaction.atomic
def group_mapping_delete(*, mapping: GroupMapping, actor: User | None) -> None:
    """Forget the mapping. Memberships it made stay until each user's next sign-in."""
    tenant = mapping.tenant
    audit_record(
        actor=actor,
        action="group_mapping.deleted",
        obj=mapping,
        object_id=str(mapping),
        tenant=tenant,
        before=_snapshot(mapping),
    )
    mapping.delete()
    if tenant is not None:
        _tenant_changed(tenant, actor)


@dataclass
class GroupsApplied:
    """What one sign-in changed: ``(tenant slug, role, group)`` added / changed, slugs removed."""

    added: list[tuple[str, str, str]] = field(default_factory=list)
    changed: list[tuple[str, str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    platform_admin: bool | None = None  # None: unchanged


def _wanted_roles(
    groups: set[str], provider: str
) -> tuple[dict[int, tuple[str, str, Tenant]], str | None]:
    """``{tenant id: (role, group, tenant)}`` and the group that makes a platform admin."""
    mappings = list(GroupMapping.objects.filter(group__in=groups).select_related("tenant"))
    for name in sorted(groups - {m.group for m in mappings}):
        if name not in _unmapped_logged:
            _unmapped_logged.add(name)
            logger.info("%s group %r maps to no tenant role: ignored", provider, name)
    wanted: dict[int, tuple[str, str, Tenant]] = {}
    admin_group: str | None = None
    for m in sorted(mappings, key=lambda m: (m.group, m.tenant_slug)):
        if m.role == GroupRole.PLATFORM_ADMIN:
            admin_group = admin_group or m.group
            continue
        if m.tenant is None:
            _log_stale(provider, m, "no longer exists")
            continue
        if m.tenant.archived_at is not None:
            _log_stale(provider, m, "is archived")
            continue
        held = wanted.get(m.tenant.pk)
        if (
            held is None
            or TENANT_ROLE_RANK[GroupRole(m.role)] > TENANT_ROLE_RANK[GroupRole(held[0])]
        ):
            wanted[m.tenant.pk] = (m.role, m.group, m.tenant)
    return wanted, admin_group


@transaction.atomic
def identity_groups_apply(*, user: User, groups: Iterable[str], provider: str) -> GroupsApplied:
    """Bring ``user``'s group-made memberships (``source`` ``group:<name>``) and group-made
    platform admin in line with ``groups``, the groups the provider sent at this sign-in:
    add what a mapped group gives, change a role whose strongest group changed, remove what no
    group gives any more. Memberships and admin rights granted by hand stay as they are, and
    so does every membership of an archived tenant; mappings to an archived or deleted tenant
    are ignored (logged once).
    Every change is audited with the group that caused it; the user is the actor."""
    names = {g for g in groups if isinstance(g, str) and g}
    wanted, admin_group = _wanted_roles(names, provider)
    result = GroupsApplied()
    touched: dict[int, Tenant] = {}
    current = {
        m.tenant_id: m for m in Membership.objects.filter(user=user).select_related("tenant")
    }

    for tenant_id, (role, group, tenant) in wanted.items():
        source = f"{GROUP_SOURCE_PREFIX}{group}"
        membership = current.get(tenant_id)
        if membership is None:
            created = Membership.objects.create(user=user, tenant=tenant, role=role, source=source)
            result.added.append((tenant.slug, role, group))
            audit_record(
                actor=user,
                action="membership.added_by_group",
                obj=created,
                object_id=f"{user.username}@{tenant.slug}",
                tenant=tenant,
                after={"user": user.username, "role": role, "group": group, "provider": provider},
            )
            touched[tenant_id] = tenant
        elif membership.source != MEMBERSHIP_SOURCE_MANUAL and (
            membership.role != role or membership.source != source
        ):
            before = {"user": user.username, "role": membership.role, "source": membership.source}
            membership.role = role
            membership.source = source
            membership.save(update_fields=["role", "source"])
            result.changed.append((tenant.slug, role, group))
            audit_record(
                actor=user,
                action="membership.changed_by_group",
                obj=membership,
                object_id=f"{user.username}@{tenant.slug}",
                tenant=tenant,
                before=before,
                after={"user": user.username, "role": role, "group": group, "provider": provider},
            )
            touched[tenant_id] = tenant

    for tenant_id, membership in current.items():
        if tenant_id in wanted or membership.source == MEMBERSHIP_SOURCE_MANUAL:
            continue
        if membership.tenant.archived_at is not None:
            continue  # an archived tenant's team stays as it was when archived (its history)
        group = membership.source.removeprefix(GROUP_SOURCE_PREFIX)
        audit_record(
            actor=user,
            action="membership.removed_by_group",
            obj=membership,
            object_id=f"{user.username}@{membership.tenant.slug}",
            tenant=membership.tenant,
            before={"user": user.username, "role": membership.role, "group": group},
            after={"left_group": group, "provider": provider},
        )
        membership.delete()
        result.removed.append(membership.tenant.slug)
        touched[tenant_id] = membership.tenant

    _platform_admin_apply(user=user, admin_group=admin_group, provider=provider, result=result)
    for tenant in touched.values():
        _tenant_changed(tenant, user)
    return result


def _platform_admin_apply(
    *, user: User, admin_group: str | None, provider: str, result: GroupsApplied
) -> None:
    from_group = user.platform_admin_source.startswith(GROUP_SOURCE_PREFIX)
    if admin_group is not None and not user.is_platform_admin:
        user.is_platform_admin = True
        user.platform_admin_source = f"{GROUP_SOURCE_PREFIX}{admin_group}"
        result.platform_admin = True
    elif admin_group is None and user.is_platform_admin and from_group:
        admin_group = user.platform_admin_source.removeprefix(GROUP_SOURCE_PREFIX)
        user.is_platform_admin = False
        user.platform_admin_source = ""
        result.platform_admin = False
    else:
        return
    user.save(update_fields=["is_platform_admin", "platform_admin_source"])
    audit_record(
        actor=user,
        action="platform_admin.granted_by_group"
        if result.platform_admin
        else "platform_admin.removed_by_group",
        obj=user,
        object_id=user.username,
        after={"group": admin_group, "provider": provider, "platform_admin": result.platform_admin},
    )
