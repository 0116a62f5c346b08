from __future__ import annotations

from rest_framework import serializers

from core.api.serializers import StrictInputSerializer
from identity.choices import GroupRole
from identity.models import GROUP_NAME_MAX, GroupMapping
from identity.selectors import group_mapping_stale
from tenants.validators import TENANT_SLUG_MAX


class GroupMappingOutput(serializers.ModelSerializer):
    tenant = serializers.CharField(
        source="tenant_slug",
        read_only=True,
        allow_null=True,
        help_text="The tenant's slug; empty for a platform-admin group.",
    )
    tenant_exists = serializers.SerializerMethodField(
        help_text="False when the tenant was deleted: the mapping is then ignored at sign-in."
    )

    stale = serializers.SerializerMethodField(
        help_text="Why sign-in ignores the mapping (its tenant was deleted or is archived); "
        "empty when it counts."
    )

    class Meta:
        model = GroupMapping
        fields = ["id", "group", "role", "tenant", "tenant_exists", "stale", "created_at"]

    def get_tenant_exists(self, obj: GroupMapping) -> bool:
        return obj.role == GroupRole.PLATFORM_ADMIN or obj.tenant_id is not None

    def get_stale(self, obj: GroupMapping) -> str:
        return group_mapping_stale(obj)


class GroupMappingCreateInput(StrictInputSerializer):
    group = serializers.CharField(max_length=GROUP_NAME_MAX, help_text="As the provider sends it.")
    role = serializers.ChoiceField(choices=GroupRole.choices)
    tenant = serializers.CharField(
        max_length=TENANT_SLUG_MAX,
        required=False,
        allow_blank=True,
        help_text="The tenant's slug; leave it out for platform-admin.",
    )


class GroupMappingUpdateInput(StrictInputSerializer):
    role = serializers.ChoiceField(choices=GroupRole.choices)
