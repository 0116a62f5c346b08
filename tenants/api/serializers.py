from __future__ import annotations

from decimal import Decimal
from typing import Any

from rest_framework import serializers

from core.api.serializers import StrictInputSerializer, utc_iso
from tenants.choices import MembershipRole, NamespacePurpose, Priority, TenantState
from tenants.models import (
    JOIN_REQUEST_MESSAGE_MAX,
    JOIN_REQUEST_REASON_MAX,
    ApiToken,
    JoinRequest,
    Membership,
    Namespace,
    Tenant,
)
from tenants.services import BULK_OUTCOME_WORDS, TEAM_BULK_MAX
from tenants.validators import DNS1123_LABEL_MAX, TENANT_SLUG_MAX, dns1123_label


class NamespaceOutput(serializers.ModelSerializer):
    quota_share = serializers.DecimalField(
        max_digits=5,
        decimal_places=2,
        coerce_to_string=False,
        allow_null=True,
        help_text="Percentage of the tenant's limit this namespace holds on clusters that "
        "split limits across namespaces; null: an even split.",
    )

    adopted_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When a platform admin adopted it (it existed on a cluster before the "
        "portal); null: the portal created it, or it waits to be adopted.",
    )

    class Meta:
        model = Namespace
        fields = ["name", "purpose", "quota_share", "adopted_at", "created_at"]


class NamespaceAdoptInput(StrictInputSerializer):
    confirm = serializers.BooleanField(
        default=False,
        help_text="false (the default): only show what adopting would write; true: adopt.",
    )


class AdoptionClusterOutput(serializers.Serializer):
    cluster = serializers.CharField()
    state = serializers.CharField(
        help_text="The namespace on that cluster, in words: whether it exists and whose it is."
    )
    objects = serializers.ListField(
        child=serializers.CharField(),
        help_text="What the push writes there once adopted: the Namespace's labels first.",
    )


class NamespaceAdoptionOutput(serializers.Serializer):
    namespace = NamespaceOutput()
    adopted = serializers.BooleanField(help_text="Whether this call adopted it.")
    message = serializers.CharField()
    clusters = AdoptionClusterOutput(many=True)


class NamespaceSharesInput(StrictInputSerializer):
    shares = serializers.DictField(
        child=serializers.DecimalField(max_digits=6, decimal_places=2),
        allow_null=True,
        help_text="Each namespace's percentage, adding up to 100; null or {} for an even split.",
    )


class TenantOutput(serializers.ModelSerializer):
    """A tenant, from a row of ``selectors.tenant_rows_for_user`` with ``namespaces`` added
    by ``selectors.with_namespace_names``."""

    # "parent" shadows Field.parent for mypy only: DRF's metaclass pops declared fields.
    parent = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)  # type: ignore[assignment,var-annotated]
    namespaces = serializers.ListField(child=serializers.CharField())
    max_run_time_hours = serializers.IntegerField(
        allow_null=True,
        help_text="Its own maximum run time (set by request); null: the platform's.",
    )
    gpu_unit_cap = serializers.CharField(
        allow_null=True,
        help_text="Its cap on normalised GPU units over every cluster (set by request); null: "
        "none.",
    )
    pod_bandwidth_max = serializers.CharField(
        allow_blank=True,
        help_text="The most bits per second each of its pods may send and receive, a "
        'Kubernetes quantity such as "1G" (set by request); "": no cap.',
    )

    class Meta:
        model = Tenant
        fields = [
            "slug",
            "display_name",
            "description",
            "parent",
            "cohort",
            "default_priority",
            "state",
            "isolation_level",
            "production_priority_allowed",
            "max_run_time_hours",
            "gpu_unit_cap",
            "pod_bandwidth_max",
            "namespaces",
            "archived_at",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {
            "archived_at": {
                "help_text": "When a platform admin archived it; null while it is in use."
            }
        }

    def to_representation(self, row: dict[str, Any]) -> dict[str, Any]:
        # Written out by hand: GET /api/v1/tenants/ serializes 50 of these per page and DRF's
        # per-field machinery cost more than the queries. The fields declared above describe
        # the same shape for the OpenAPI document; a test keeps the two in step.
        return {
            "slug": row["slug"],
            "display_name": row["display_name"],
            "description": row["description"],
            "parent": row["parent__slug"],
            "cohort": row["cohort"],
            "default_priority": row["default_priority"],
            "state": row["state"],
            "isolation_level": row["isolation_level"],
            "production_priority_allowed": row["production_priority_allowed"],
            "max_run_time_hours": row["max_run_time_hours"],
            "gpu_unit_cap": _decimal(row["gpu_unit_cap"]),
            "pod_bandwidth_max": row["pod_bandwidth_max"],
            "namespaces": row["namespace_names"],
            "archived_at": _when(row, "archived_at"),
            "created_at": _when(row, "created_at"),
            "updated_at": _when(row, "updated_at"),
        }


def _when(row: dict[str, Any], name: str) -> str | None:
    """A date-time of the row as DRF writes it: already text on PostgreSQL (``name_iso``,
    ``selectors.UtcIso``), a datetime elsewhere."""
    text = f"{name}_iso"
    if text in row:
        return row[text]
    return utc_iso(row[name]) if row[name] else None


def _decimal(value: Decimal | None) -> str | None:
    """8, 2.5: a decimal as people write it, or None."""
    if value is None:
        return None
    return format(value.normalize(), "f") if value else "0"


class TenantCreateInput(StrictInputSerializer):
    slug = serializers.CharField(max_length=TENANT_SLUG_MAX, validators=[dns1123_label])
    display_name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    tier = serializers.CharField(help_text="Tier template name, e.g. 'medium'.")
    cluster = serializers.CharField(help_text="Cluster name the tier's quotas apply on.")
    gpu_flavor = serializers.CharField(
        required=False, help_text="Whole-GPU flavor on that cluster; default: its first one."
    )
    parent = serializers.CharField(required=False, help_text="Parent tenant slug.")  # type: ignore[assignment]  # see TenantOutput
    cohort = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=DNS1123_LABEL_MAX,
        validators=[dns1123_label],
    )
    default_priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.DEFAULT)
    leads = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        default=list,
        help_text="Usernames made leads of the new tenant.",
    )


class TenantUpdateInput(StrictInputSerializer):
    display_name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    state = serializers.ChoiceField(choices=TenantState.choices, required=False)
    default_priority = serializers.ChoiceField(choices=Priority.choices, required=False)


class NamespaceCreateInput(StrictInputSerializer):
    name = serializers.CharField(max_length=DNS1123_LABEL_MAX, validators=[dns1123_label])
    purpose = serializers.ChoiceField(
        choices=NamespacePurpose.choices, default=NamespacePurpose.GENERAL
    )


class MembershipOutput(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.CharField(source="user.email", read_only=True, help_text="May be empty.")
    added_by = serializers.CharField(
        read_only=True,
        allow_null=True,
        help_text="Username of whoever added them ('system' for a seed or a sign-in); null "
        "where the audit trail has no record. created_at says when.",
    )

    class Meta:
        model = Membership
        fields = ["username", "email", "role", "added_by", "created_at"]


class MembershipSetInput(StrictInputSerializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=MembershipRole.choices)


class MembershipRoleInput(StrictInputSerializer):
    role = serializers.ChoiceField(choices=MembershipRole.choices)


class MembershipBulkInput(StrictInputSerializer):
    people = serializers.ListField(
        child=serializers.CharField(max_length=254, allow_blank=True),
        max_length=TEAM_BULK_MAX,
        help_text=f"Usernames or emails, at most {TEAM_BULK_MAX}; each is answered on its own.",
    )
    role = serializers.ChoiceField(
        choices=MembershipRole.choices,
        default=MembershipRole.MEMBER,
        help_text="The role each person gets (a lead gives member or viewer).",
    )


class MembershipBulkResultOutput(serializers.Serializer):
    entry = serializers.CharField(help_text="The username or email as given.")
    outcome = serializers.ChoiceField(choices=list(BULK_OUTCOME_WORDS))
    message = serializers.CharField(help_text="What became of it, in words.")
    username = serializers.CharField(help_text="The account it named; empty when none.")


class MembershipBulkOutput(serializers.Serializer):
    summary = serializers.CharField(help_text='In words: "2 people added, 1 already a member".')
    added = serializers.IntegerField()
    results = MembershipBulkResultOutput(many=True)


class JoinRequestOutput(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)
    full_name = serializers.CharField(source="user.get_full_name", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="Who approved, refused or withdrew it; null while it waits.",
    )

    class Meta:
        model = JoinRequest
        fields = [
            "id", "tenant", "username", "full_name", "message", "state", "created_at",
            "decided_at", "decided_by", "reason",
        ]  # fmt: skip


class JoinRequestCreateInput(StrictInputSerializer):
    message = serializers.CharField(
        max_length=JOIN_REQUEST_MESSAGE_MAX, required=False, default="", allow_blank=True
    )


class JoinRequestDecisionInput(StrictInputSerializer):
    reason = serializers.CharField(
        max_length=JOIN_REQUEST_REASON_MAX, required=False, default="", allow_blank=True
    )


class TokenObtainInput(StrictInputSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"})
    name = serializers.CharField(max_length=100, required=False, default="")


class TokenObtainOutput(serializers.Serializer):
    token = serializers.CharField(help_text="Shown once; send as 'Authorization: Token <token>'.")
    id = serializers.IntegerField()
    prefix = serializers.CharField()
    expires_at = serializers.DateTimeField()


class ApiTokenOutput(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]


class MeOutput(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.CharField(help_text="May be empty.")
    is_platform_admin = serializers.BooleanField()
    memberships = serializers.DictField(child=serializers.CharField(), help_text="slug -> role")
