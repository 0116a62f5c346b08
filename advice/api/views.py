"""Thin views of the advice API: quota suggestions of a tenant, what-if of a request."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from advice import selectors, services, watch
from advice.api.serializers import SuggestionOutput, WhatIfOutput, change_watch_representation
from advice.models import Suggestion
from approvals.models import QuotaChangeRequest
from approvals.selectors import quota_request_get_for_user
from approvals.services import quota_request_ensure_can_file
from tenants.api.base import TenantScopedMixin, caller
from tenants.models import User


class TenantSuggestionsView(TenantScopedMixin, GenericAPIView):
    """Quota suggestions from last month's usage, each with the numbers behind it
    and the draft request filed from it. POST computes them now, replacing the tenant's
    unsubmitted suggestion drafts (leads and platform admins); the monthly run does the same."""

    serializer_class = SuggestionOutput
    queryset = Suggestion.objects.none()  # for the schema; the selector scopes the rows
    pagination_class = None
    permission_classes = [IsAuthenticated]

    @extend_schema(
        responses={
            200: SuggestionOutput(many=True),
            404: OpenApiResponse(description="No such tenant, or not yours."),
        }
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        rows = selectors.suggestion_list_for_tenant(tenant=self.tenant)[:100]
        return Response(SuggestionOutput(rows, many=True).data)

    @extend_schema(
        request=None,
        responses={
            201: SuggestionOutput(many=True),
            403: OpenApiResponse(description="Only the tenant's leads and platform admins."),
            404: OpenApiResponse(description="No such tenant, or not yours."),
        },
    )
    def post(self, request: Request, tenant_slug: str) -> Response:
        actor = caller(request)
        quota_request_ensure_can_file(actor=actor, tenant=self.tenant)
        rows = services.suggestions_compute(tenant=self.tenant, actor=actor)
        return Response(SuggestionOutput(rows, many=True).data, status=status.HTTP_201_CREATED)


class QuotaRequestWhatIfView(GenericAPIView):
    """Replay the cluster's last ``days`` of recorded workloads against the quotas in force
    and against this request's, with a Kueue-like admission model: predicted queue wait,
    utilisation of the guarantee, borrowing and preemptions per tenant of the cohort, before
    and after. Scoped like the request (others' answer 404)."""

    serializer_class = WhatIfOutput
    queryset = QuotaChangeRequest.objects.none()  # for the schema; the selector scopes it
    pagination_class = None
    permission_classes = [IsAuthenticated]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "days",
                OpenApiTypes.INT,
                description=f"Days replayed, 1 to {selectors.WHAT_IF_DAYS_MAX} "
                f"(default {selectors.WHAT_IF_DAYS_DEFAULT}).",
            )
        ],
        responses={
            200: WhatIfOutput,
            400: OpenApiResponse(description="days out of range or not a number."),
            404: OpenApiResponse(description="No such request, or not yours."),
        },
    )
    def get(self, request: Request, id: int) -> Response:  # the document's name for the pk
        change = quota_request_get_for_user(user=caller(request), pk=id)
        days = selectors.what_if_days(request.query_params.get("days"))
        result = selectors.quota_request_what_if(request=change, days=days)
        result = selectors.what_if_for_user(what_if=result, user=caller(request))
        return Response(WhatIfOutput(result).data)


def request_watch_field(*, user: User, change: QuotaChangeRequest) -> dict[str, Any] | None:
    """The API request detail's ``watch`` (composed into approvals' request routes by
    ``portal/api/urls.py``): null until the change applied. ``change`` is already scoped to
    ``user``."""
    seen = watch.change_watch(request=change)
    if seen is None:
        return None
    offered = watch.change_revert_offered(user=user, change=change, seen=seen)
    return change_watch_representation(seen, revert_offered=offered)
