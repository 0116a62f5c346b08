from __future__ import annotations

from rest_framework import serializers

from core.api.serializers import StrictInputSerializer
from identity.choices import GroupRole
from identity.models import GROUP_NAME_MAX, GroupMapping
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

    class Meta:
        model = GroupMapping
        fields = ["id", "group", "role", "tenant", "tenant_exists", "created_at"]

    def get_tenant_exists(self, obj: GroupMapping) -> bool:
        return obj.role == GroupRole.PLATFORM_ADMIN or obj.tenant_id is not None


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
