from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors, services
from quotas.api.serializers import (
    ClusterDetailOutput,
    ClusterOutput,
    FlavorOutput,
    QuotaSetOutput,
    TierTemplateInput,
    TierTemplateOutput,
)
from quotas.choices import FlavorKind
from quotas.models import QuotaSet, ResourceFlavor
from tenants.api.base import ReadMembersWriteAdmins, TenantScopedMixin, caller


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ClusterOutput
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9-]+"  # DNS-1123 labels

    def get_queryset(self) -> Any:
        return selectors.cluster_list()

    @extend_schema(responses=ClusterDetailOutput)
    def retrieve(self, request: Request, name: str) -> Response:
        cluster = get_object_or_404(self.get_queryset(), name=name)
        context = {"allocations": selectors.cluster_allocations(cluster=cluster)}
        return Response(ClusterDetailOutput(cluster, context=context).data)


class FlavorFilter(filters.FilterSet):
    cluster = filters.CharFilter(field_name="cluster__name")
    kind = filters.ChoiceFilter(choices=FlavorKind.choices)

    class Meta:
        model = ResourceFlavor
        fields = ["cluster", "kind"]


class FlavorViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = FlavorOutput
    filterset_class = FlavorFilter
    lookup_value_regex = "[0-9]+"

    def get_queryset(self) -> Any:
        return selectors.flavor_list()


class TierTemplateViewSet(viewsets.ReadOnlyModelViewSet):
    """R9's tiers and any an admin adds. Admins create and change them; quota sets already
    made from a tier keep their numbers."""

    serializer_class = TierTemplateOutput
    permission_classes = [ReadMembersWriteAdmins]
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9-]+"  # DNS-1123 labels

    def get_queryset(self) -> Any:
        return selectors.tier_list()

    @extend_schema(request=TierTemplateInput, responses={201: TierTemplateOutput})
    def create(self, request: Request) -> Response:
        data = TierTemplateInput(data=request.data)
        data.is_valid(raise_exception=True)
        tier = services.tier_template_save(actor=caller(request), **data.validated_data)
        return Response(TierTemplateOutput(tier).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=TierTemplateInput(partial=True), responses=TierTemplateOutput)
    def partial_update(self, request: Request, name: str) -> Response:
        tier = get_object_or_404(self.get_queryset(), name=name)
        data = TierTemplateInput(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        tier = services.tier_template_save(actor=caller(request), tier=tier, **data.validated_data)
        return Response(TierTemplateOutput(tier).data)


class TenantQuotaViewSet(TenantScopedMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """A tenant's effective quotas, per cluster, with normalised GPU units. Quotas change only
    through approved change requests."""

    serializer_class = QuotaSetOutput

    queryset = QuotaSet.objects.none()  # for the schema; list() reads through the selector

    def list(self, request: Request, tenant_slug: str) -> Response:
        quota_sets = selectors.tenant_effective_quotas(tenant=self.tenant)
        page: list[Any] | None = self.paginate_queryset(quota_sets)  # type: ignore[arg-type]  # any sequence pages
        return self.get_paginated_response(QuotaSetOutput(page, many=True).data)
