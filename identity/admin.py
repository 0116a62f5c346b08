"""Django admin for group mappings; writes go through the audited services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from identity import services
from identity.models import GroupMapping
from identity.selectors import group_mapping_stale


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin):
    list_display = ["group", "role", "tenant_slug", "tenant", "stale", "created_at"]
    list_filter = ["role"]
    list_select_related = ["tenant"]
    search_fields = ["group", "tenant_slug"]
    fields = ["group", "role", "tenant"]

    @admin.display(description="Stale")
    def stale(self, obj: GroupMapping) -> str:
        return group_mapping_stale(obj) or "no"

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return ["group", "tenant"] if obj else []  # a new group or tenant is a new mapping

    def save_model(self, request: Any, obj: GroupMapping, form: Any, change: bool) -> None:
        if change:
            services.group_mapping_update(mapping=obj, role=obj.role, actor=request.user)
        else:
            created = services.group_mapping_create(
                group=obj.group, role=obj.role, tenant=obj.tenant, actor=request.user
            )
            obj.pk = created.pk

    def delete_model(self, request: Any, obj: GroupMapping) -> None:
        services.group_mapping_delete(mapping=obj, actor=request.user)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for mapping in queryset:
            services.group_mapping_delete(mapping=mapping, actor=request.user)
