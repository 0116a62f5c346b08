"""Per-person caps in the API: the members API (``tenants``) with each member's caps
and ``PATCH`` setting them, and the tenant's pipeline account and default caps."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.serializers import StrictInputSerializer
from quotas import selectors, services
from quotas.choices import CapSubject
from quotas.quantity import format_quantity
from tenants.api.base import TenantScopedMixin, caller
from tenants.api.serializers import MembershipOutput
from tenants.api.views import MembershipViewSet
from tenants.choices import MembershipRole
from tenants.models import Membership
from tenants.services import team_member_role_change


class CapLineInput(StrictInputSerializer):
    cluster = serializers.CharField(max_length=63)
    flavor = serializers.CharField(max_length=63)
    resource = serializers.CharField(max_length=100)
    amount = serializers.CharField(
        max_length=40,
        allow_null=True,
        help_text="GPUs, cores or a quantity (64Gi); null removes the cap. Whole numbers for "
        "GPUs and bytes, at most the tenant's limit.",
    )


class CapLineOutput(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    resource = serializers.CharField()
    amount = serializers.CharField(help_text="A Kubernetes quantity: 2, 500m, 64Gi.")
    cluster_queue = serializers.CharField(
        help_text="The person's ClusterQueue on that cluster; empty for the default."
    )


class MemberPatchInput(StrictInputSerializer):
    role = serializers.ChoiceField(choices=MembershipRole.choices, required=False)
    caps = CapLineInput(
        many=True,
        required=False,
        help_text="Cap lines to set (or, with amount null, remove); lines not named stay.",
    )


class MemberWithCapsOutput(MembershipOutput):
    caps = CapLineOutput(many=True, read_only=True)

    class Meta(MembershipOutput.Meta):
        fields = [*MembershipOutput.Meta.fields, "caps"]


def _line(line: selectors.PersonCapLine) -> dict[str, Any]:
    return {
        "cluster": line.cluster,
        "flavor": line.flavor,
        "resource": line.resource,
        "amount": format_quantity(line.amount, line.resource),
        "cluster_queue": line.cluster_queue,
    }


class MembershipCapsViewSet(MembershipViewSet):
    """Members of a tenant with their caps. ``PATCH`` changes a member's role and/or
    caps: a lead (or a platform admin) caps a member per cluster, flavor and resource, at
    most the tenant's limit; a bad line is a 400 naming ``caps[i].<field>`` and changes
    nothing."""

    serializer_class = MemberWithCapsOutput

    def _caps_by_user(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for line in selectors.person_cap_lines(tenant=self.tenant):
            if line.subject == CapSubject.MEMBER:
                out.setdefault(line.username, []).append(_line(line))
        return out

    def _output(self, username: str) -> dict[str, Any]:
        membership = get_object_or_404(self.get_queryset(), user__username=username)
        data = dict(MembershipOutput(membership).data)
        data["caps"] = self._caps_by_user().get(username, [])
        return data

    @extend_schema(responses=MemberWithCapsOutput(many=True))
    def list(self, request: Request, tenant_slug: str) -> Response:
        caps = self._caps_by_user()
        page = self.paginate_queryset(self.get_queryset())
        rows = page if page is not None else list(self.get_queryset())
        data = []
        for membership in rows:
            row = dict(MembershipOutput(membership).data)
            row["caps"] = caps.get(membership.user.username, [])
            data.append(row)
        return self.get_paginated_response(data) if page is not None else Response(data)

    @extend_schema(request=MemberPatchInput, responses=MemberWithCapsOutput)
    def partial_update(self, request: Request, tenant_slug: str, username: str) -> Response:
        data = MemberPatchInput(data=request.data)
        data.is_valid(raise_exception=True)
        actor = caller(request)
        with transaction.atomic():  # caps and role together, or neither
            self._patch(username, data.validated_data, actor)
        return Response(self._output(username))

    def _patch(self, username: str, data: dict[str, Any], actor: Any) -> None:
        if "caps" in data:
            membership = get_object_or_404(
                Membership.objects.select_related("user"),
                tenant=self.tenant,
                user__username=username,
            )
            services.person_caps_set(
                tenant=self.tenant,
                subject=CapSubject.MEMBER,
                membership=membership,
                caps=[dict(line) for line in data["caps"]],
                actor=actor,
            )
        if "role" in data:
            team_member_role_change(
                tenant=self.tenant, username=username, role=data["role"], actor=actor
            )


class AccountCapsInput(StrictInputSerializer):
    subject = serializers.ChoiceField(
        choices=[CapSubject.PIPELINE, CapSubject.DEFAULT],
        help_text="pipeline: the team's ServiceAccount (a lead sets it); default: every member "
        "without a cap of their own (a platform admin sets it).",
    )
    caps = CapLineInput(many=True)


class PersonCapsOutput(serializers.Serializer):
    subject = serializers.CharField()
    username = serializers.CharField()
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    resource = serializers.CharField()
    amount = serializers.CharField()
    cluster_queue = serializers.CharField()


class TenantPersonCapsView(TenantScopedMixin, APIView):
    """Every per-person cap of a tenant (members', the pipeline account's, the default);
    ``PATCH`` sets the pipeline account's (a lead) or the default (a platform admin)."""

    @extend_schema(responses=PersonCapsOutput(many=True))
    def get(self, request: Request, tenant_slug: str) -> Response:
        lines = selectors.person_cap_lines(tenant=self.tenant)
        return Response(
            [{"subject": line.subject, "username": line.username, **_line(line)} for line in lines]
        )

    @extend_schema(request=AccountCapsInput, responses=PersonCapsOutput(many=True))
    def patch(self, request: Request, tenant_slug: str) -> Response:
        data = AccountCapsInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.person_caps_set(
            tenant=self.tenant,
            subject=data.validated_data["subject"],
            caps=[dict(line) for line in data.validated_data["caps"]],
            actor=caller(request),
        )
        return self.get(request, tenant_slug)
