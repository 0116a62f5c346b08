from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from quotas import selectors
from quotas.api.serializers import (
    ClusterDetailOutput,
    ClusterOutput,
    FlavorOutput,
    QuotaSetOutput,
    TierTemplateOutput,
)
from quotas.choices import FlavorKind
from quotas.models import QuotaSet, ResourceFlavor
from tenants.api.base import TenantScopedMixin


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
    serializer_class = TierTemplateOutput
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9-]+"  # DNS-1123 labels

    def get_queryset(self) -> Any:
        return selectors.tier_list()


class TenantQuotaViewSet(TenantScopedMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """A tenant's effective quotas, per cluster, with normalised GPU units. Quotas change only
    through approved change requests."""

    serializer_class = QuotaSetOutput

    queryset = QuotaSet.objects.none()  # for the schema; list() reads through the selector

    def list(self, request: Request, tenant_slug: str) -> Response:
        quota_sets = selectors.tenant_effective_quotas(tenant=self.tenant)
        page = self.paginate_queryset(quota_sets)
        return self.get_paginated_response(QuotaSetOutput(page, many=True).data)
