"""Thin views of the alerts API: list and read alerts (scoped), acknowledge, undo a
suspension, and the admission pre-check (R13)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from alerts import selectors, services
from alerts.api.serializers import (
    AdmissionCheckInput,
    AdmissionCheckOutput,
    AlertDetailOutput,
    AlertOutput,
)
from alerts.choices import AlertState
from alerts.models import Alert
from core.errors import ValidationFailed
from quotas.models import Cluster
from tenants.api.base import TenantScopedMixin, caller


class AlertFilter(filters.FilterSet):
    state = filters.ChoiceFilter(choices=AlertState.choices)
    tenant = filters.CharFilter(field_name="tenant__slug")
    cluster = filters.CharFilter(field_name="cluster__name")
    rule = filters.CharFilter(field_name="rule__name")

    class Meta:
        model = Alert
        fields = ["state", "tenant", "cluster", "rule"]


class AlertViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Alerts, newest first: a tenant's leads see its alerts, platform admins all. Each has
    its history (fired, acknowledged, held, suspended, reactivated, resolved)."""

    serializer_class = AlertOutput
    queryset = Alert.objects.none()  # for the schema; get_queryset() scopes it
    lookup_value_regex = r"\d+"  # anything else is no alert: 404, not a crash
    filterset_class = AlertFilter

    def get_queryset(self) -> Any:
        rows = selectors.alerts_for_user(user=caller(self.request))
        if self.action != "list":
            rows = rows.prefetch_related("events")
        return rows

    def get_serializer_class(self) -> Any:
        return AlertOutput if self.action == "list" else AlertDetailOutput

    def _alert(self) -> Alert:
        return selectors.alert_get_for_user(user=caller(self.request), pk=int(self.kwargs["pk"]))

    @extend_schema(request=None, responses={200: AlertDetailOutput})
    @action(detail=True, methods=["post"])
    def acknowledge(self, request: Request, pk: str) -> Response:
        """Firing -> acknowledged; 409 when it is not firing."""
        alert = services.alert_acknowledge(alert=self._alert(), actor=caller(request))
        return Response(AlertDetailOutput(alert).data)

    @extend_schema(request=None, responses={200: AlertDetailOutput})
    @action(detail=True, methods=["post"])
    def reactivate(self, request: Request, pk: str) -> Response:
        """Undo the suspension of an idle workload (Kueue ``spec.active: true``); 409 when the
        alert's workload is not suspended."""
        alert = services.alert_reactivate(alert=self._alert(), actor=caller(request))
        return Response(AlertDetailOutput(alert).data)


class AdmissionCheckView(TenantScopedMixin, GenericAPIView):
    """Would a job with these requests be admitted now? Per resource: the tenant's quota
    headroom (use from the usage store), what its cohort can lend, the storage left; and why
    not, so a pipeline fails fast instead of halfway ("No space left on device")."""

    serializer_class = AdmissionCheckOutput
    pagination_class = None

    @extend_schema(
        request=AdmissionCheckInput,
        responses={
            200: AdmissionCheckOutput,
            400: OpenApiResponse(
                description="A negative or unparsable quantity, an unknown "
                "flavor or cluster; the field is named."
            ),
            404: OpenApiResponse(description="No such tenant, or not yours."),
        },
    )
    def post(self, request: Request, tenant_slug: str) -> Response:
        data = AdmissionCheckInput(data=request.data)
        data.is_valid(raise_exception=True)
        body = data.validated_data
        clusters = selectors.clusters_of(tenant=self.tenant)
        if "cluster" in body:
            cluster = Cluster.objects.filter(name=body["cluster"]).first()
            if cluster is None or cluster not in clusters:
                raise ValidationFailed.for_field(
                    "cluster", f"{self.tenant.slug} has no quota on a cluster named that."
                )
        elif len(clusters) == 1:
            cluster = clusters[0]
        else:
            raise ValidationFailed.for_field(
                "cluster",
                "required: the tenant has quota on "
                + (", ".join(c.name for c in clusters) or "no cluster"),
            )
        storage = body.get("storage")
        verdict = selectors.admission_check(
            tenant=self.tenant,
            cluster=cluster,
            gpus=body.get("gpus") or {},
            cpu=body.get("cpu"),
            memory=body.get("memory"),
            storage=storage,
            now=timezone.now(),
            storage_used=(
                selectors.storage_used(tenant=self.tenant, cluster=cluster)
                if storage is not None
                else None
            ),
            volumes=body.get("volumes") or {},
        )
        return Response(AdmissionCheckOutput(verdict).data)
