from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from approvals.services import tenant_onboard
from portal.errors import ValidationFailed
from quotas.models import Cluster, ResourceFlavor, TierTemplate
from tenants.api.serializers import TenantCreateInput, TenantOutput
from tenants.api.views import TenantViewSet as TenantReadViewSet
from tenants.api.views import tenant_output
from tenants.models import Tenant, User


def _lookup(queryset, field: str, **lookup: str):  # type: ignore[no-untyped-def]
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
        cluster = _lookup(Cluster.objects, "cluster", name=v["cluster"])
        tier = _lookup(TierTemplate.objects, "tier", name=v["tier"])
        gpu_flavor = None
        if v.get("gpu_flavor"):
            gpu_flavor = ResourceFlavor.objects.filter(name=v["gpu_flavor"]).select_related(
                "cluster"
            )
            gpu_flavor = _lookup(gpu_flavor, "gpu_flavor", name=v["gpu_flavor"])
            on_cluster = ResourceFlavor.objects.filter(
                cluster=cluster, name=v["gpu_flavor"]
            ).first()
            gpu_flavor = on_cluster or gpu_flavor  # the service names the cluster mismatch
        parent = _lookup(Tenant.objects, "parent", slug=v["parent"]) if v.get("parent") else None
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
            actor=request.user,
        )
        return Response(tenant_output(tenant, user=request.user), status=status.HTTP_201_CREATED)
