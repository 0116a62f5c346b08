"""``/api/v1/identity-groups/``: which identity-provider groups make which roles. Platform
admins only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from core.errors import ValidationFailed
from identity import selectors, services
from identity.api.serializers import (
    GroupMappingCreateInput,
    GroupMappingOutput,
    GroupMappingUpdateInput,
)
from identity.models import GroupMapping
from tenants.api.base import IsPlatformAdmin, caller
from tenants.models import Tenant


class GroupMappingViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Members of ``group`` get ``role`` in ``tenant`` (or platform admin) at each sign-in."""

    serializer_class = GroupMappingOutput
    queryset = GroupMapping.objects.none()  # for the schema; get_queryset() reads the selector
    permission_classes = [IsPlatformAdmin]

    def get_queryset(self) -> Any:
        return selectors.group_mapping_list()

    @extend_schema(request=GroupMappingCreateInput, responses={201: GroupMappingOutput})
    def create(self, request: Request) -> Response:
        data = GroupMappingCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        slug = data.validated_data.get("tenant") or ""
        tenant = None
        if slug:
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                raise ValidationFailed.for_field("tenant", f"No tenant is called {slug!r}.")
        mapping = services.group_mapping_create(
            group=data.validated_data["group"],
            role=data.validated_data["role"],
            tenant=tenant,
            actor=caller(request),
        )
        return Response(GroupMappingOutput(mapping).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=GroupMappingUpdateInput, responses=GroupMappingOutput)
    def partial_update(self, request: Request, pk: str) -> Response:
        mapping = self.get_object()
        data = GroupMappingUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        mapping = services.group_mapping_update(
            mapping=mapping, role=data.validated_data["role"], actor=caller(request)
        )
        return Response(GroupMappingOutput(mapping).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        services.group_mapping_delete(mapping=self.get_object(), actor=caller(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
