"""Identity groups mapped to roles."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from identity.choices import GroupRole
from tenants.models import Tenant

GROUP_NAME_MAX = 200


class GroupMapping(models.Model):
    """Members of identity group ``group`` get ``role`` in ``tenant`` (or platform admin) at
    each sign-in; leaving the group takes the role away at the next one.

    ``tenant`` is null for platform admin, and becomes null when the tenant is deleted: such a
    mapping is kept (``tenant_slug`` says what it was for) but ignored, with a log line."""

    group = models.CharField(max_length=GROUP_NAME_MAX, db_index=True)
    role = models.CharField(max_length=20, choices=GroupRole.choices)
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="group_mappings",
    )
    tenant_slug = models.CharField(max_length=63, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "tenant_slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["group", "tenant_slug"], name="group_mapping_unique_group_tenant"
            ),
            models.CheckConstraint(
                condition=Q(role__in=GroupRole.values), name="group_mapping_role_valid"
            ),
            models.CheckConstraint(
                condition=~Q(role=GroupRole.PLATFORM_ADMIN) | Q(tenant_slug=""),
                name="group_mapping_admin_has_no_tenant",
            ),
            models.CheckConstraint(
                condition=Q(role=GroupRole.PLATFORM_ADMIN) | ~Q(tenant_slug=""),
                name="group_mapping_role_has_tenant",
            ),
        ]

    def __str__(self) -> str:
        if self.role == GroupRole.PLATFORM_ADMIN:
            return f"{self.group} -> platform admin"
        return f"{self.group} -> {self.role} of {self.tenant_slug}"
