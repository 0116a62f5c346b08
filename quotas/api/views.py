"""Thin read views of the quotas API: clusters, flavors, tiers, and (scoped to the caller's
tenants) a tenant's quotas, where their push stands and the manifests the portal owns."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.renderers import YamlTextRenderer
from quotas import selectors, services, sync
from quotas.api.serializers import (
    ClusterDetailOutput,
    ClusterEnforcementInput,
    ClusterOutput,
    ClusterPoolOutput,
    FlavorOutput,
    QuotaSetOutput,
    TenantSyncOutput,
    TierTemplateInput,
    TierTemplateOutput,
    pool_representation,
)
from quotas.choices import FlavorKind
from quotas.models import QuotaSet, ResourceFlavor
from tenants.api.base import IsPlatformAdmin, ReadMembersWriteAdmins, TenantScopedMixin, caller
from tenants.selectors import tenant_list_for_user


def _visible_tenants(request: Request) -> list[str] | None:
    """The slugs of the tenants whose fair-sharing standing the caller may see (None: all)."""
    user = caller(request)
    if user.is_platform_admin:
        return None
    return list(tenant_list_for_user(user=user).values_list("slug", flat=True))


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    """Clusters; platform admins choose how each enforces tenants' limits (PATCH
    ``enforcement``), which namespaces' pods may reach tenants' pods
    (``tenant_ingress_namespaces``, ``tenant_monitoring_namespaces``), which pushes every
    tenant on it again, and how Kueue shares unused GPUs there (``fair_sharing``,
    ``usage_half_life_hours``, ``usage_sampling_minutes``). A cluster's detail shows each
    tenant's fair-sharing standing to those who may see the tenant."""

    serializer_class = ClusterOutput
    permission_classes = [ReadMembersWriteAdmins]
    lookup_field = "name"
    lookup_value_regex = "[a-z0-9-]+"  # DNS-1123 labels

    def get_queryset(self) -> Any:
        return selectors.cluster_list()

    @extend_schema(responses=ClusterDetailOutput)
    def retrieve(self, request: Request, name: str) -> Response:
        cluster = get_object_or_404(self.get_queryset(), name=name)
        context = {
            "allocations": selectors.cluster_allocations(cluster=cluster),
            "fair_share_tenants": _visible_tenants(request),
        }
        return Response(ClusterDetailOutput(cluster, context=context).data)

    @extend_schema(request=ClusterEnforcementInput, responses=ClusterDetailOutput)
    def partial_update(self, request: Request, name: str) -> Response:
        cluster = get_object_or_404(self.get_queryset(), name=name)
        data = ClusterEnforcementInput(data=request.data)
        data.is_valid(raise_exception=True)
        cluster = services.cluster_update(
            cluster=cluster, actor=caller(request), **data.validated_data
        )
        context = {
            "allocations": selectors.cluster_allocations(cluster=cluster),
            "fair_share_tenants": _visible_tenants(request),
        }
        return Response(ClusterDetailOutput(cluster, context=context).data)


class ClusterPoolListView(APIView):
    """Clusters marked as one pool (in Django admin), each with the tenants whose quotas
    differ between its clusters. Platform admins only."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(responses=ClusterPoolOutput(many=True))
    def get(self, request: Request) -> Response:
        differences = selectors.pool_differences()
        return Response(
            [
                pool_representation(pool, names, [d for d in differences if d.pool == pool.name])
                for pool, names in selectors.pool_list()
            ]
        )


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
    """The standard tiers (small, medium, large) and any an admin adds. Admins create and change them; quota sets already
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


class TenantSyncViewSet(TenantScopedMixin, viewsets.GenericViewSet):
    """Where a tenant's quotas stand in each cluster: the push's state (in sync, applying with
    its attempts, failed with the cluster's message, drift repaired), the generation the
    cluster has, what the cluster reports (``?live=true``: ResourceQuota use, ClusterQueue
    workloads), and the YAML the portal owns for the tenant."""

    serializer_class = TenantSyncOutput
    queryset = QuotaSet.objects.none()  # for the schema
    lookup_field = "cluster"
    lookup_value_regex = "[a-z0-9-]+"
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "live", bool, description="Also read what the cluster reports (slower)."
            )
        ],
        responses={200: TenantSyncOutput(many=True)},
    )
    def list(self, request: Request, tenant_slug: str) -> Response:
        live = request.query_params.get("live", "").lower() in ("1", "true", "yes")
        rows = selectors.tenant_sync_rows(tenant=self.tenant)
        if live:
            for row in rows:
                row.in_cluster = sync.in_cluster(tenant=self.tenant, cluster=row.cluster)
        return Response(TenantSyncOutput(rows, many=True).data)

    @extend_schema(
        responses={(200, "application/yaml"): OpenApiTypes.STR, 404: None},
        description="The objects the portal owns for the tenant on this cluster, as YAML "
        "(multi-document, apply order): what `kubectl apply -f` or a GitOps repository takes.",
    )
    @action(detail=True, methods=["get"], renderer_classes=[YamlTextRenderer])
    def manifests(self, request: Request, tenant_slug: str, cluster: str) -> Response:
        target = get_object_or_404(
            selectors.cluster_list(), name=cluster, quota_sets__tenant=self.tenant
        )
        text = sync.tenant_manifests(tenant=self.tenant, cluster=target)
        response = Response(text, content_type="application/yaml")
        response["Content-Disposition"] = (
            f'attachment; filename="{self.tenant.slug}-{target.name}.yaml"'
        )
        return response
