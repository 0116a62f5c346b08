from __future__ import annotations

from typing import TypeVar

from django.db.models import Case, Model, QuerySet, When
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from approvals.services import tenant_onboard
from portal.errors import ValidationFailed
from quotas.models import Cluster, ResourceFlavor, TierTemplate
from tenants.api.base import caller
from tenants.api.serializers import TenantCreateInput, TenantOutput
from tenants.api.views import TenantViewSet as TenantReadViewSet
from tenants.api.views import tenant_output
from tenants.models import Tenant, User

M = TypeVar("M", bound=Model)


def _lookup(queryset: QuerySet[M], field: str, **lookup: str) -> M:
    obj = queryset.filter(**lookup).first()
    if obj is None:
        value = next(iter(lookup.values()))
        raise ValidationFailed.for_field(field, f"No {field.replace('_', ' ')} {value!r}.")
    return obj


class TenantViewSet(TenantReadViewSet):
    """Tenants; platform admins onboard new ones from a tier template on a cluster."""

    @extend_schema(request=TenantCreateInput, responses={201: TenantOutput})
    def create(self, request: Request) -> Response:
        data = TenantCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        cluster = _lookup(Cluster.objects.all(), "cluster", name=v["cluster"])
        tier = _lookup(TierTemplate.objects.all(), "tier", name=v["tier"])
        gpu_flavor: ResourceFlavor | None = None
        if v.get("gpu_flavor"):
            # Prefer the flavor on the chosen cluster; one of that name elsewhere still goes to
            # the service, whose error names the cluster it belongs to.
            flavors = ResourceFlavor.objects.select_related("cluster").order_by(
                Case(When(cluster=cluster, then=0), default=1)
            )
            gpu_flavor = _lookup(flavors, "gpu_flavor", name=v["gpu_flavor"])
        parent = (
            _lookup(Tenant.objects.all(), "parent", slug=v["parent"]) if v.get("parent") else None
        )
        leads = [
            _lookup(User.objects.filter(is_active=True), "leads", username=name)
            for name in v["leads"]
        ]
        tenant = tenant_onboard(
            slug=v["slug"],
            display_name=v["display_name"],
            description=v["description"],
            tier=tier,
            cluster=cluster,
            gpu_flavor=gpu_flavor,
            parent=parent,
            cohort=v["cohort"],
            default_priority=v["default_priority"],
            leads=leads,
            actor=caller(request),
        )
        return Response(tenant_output(tenant, user=caller(request)), status=status.HTTP_201_CREATED)
