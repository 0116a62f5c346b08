"""Thin views of the usage API: validate, call one selector or service, serialize."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import viewsets
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.pagination import PagePagination
from core.errors import NotFound, ValidationFailed
from quotas.models import Cluster, ResourceFlavor
from tenants.api.base import IsPlatformAdmin, TenantScopedMixin, caller
from usage import selectors, services
from usage.api.serializers import (
    ClusterReadingOutput,
    PrometheusSourceInput,
    PrometheusSourceOutput,
    SamplesInput,
    SamplesOutput,
    UsageOutput,
    UsageQueryInput,
    WorkloadOutput,
)
from usage.models import Workload

UNITS = ("used", "used_max", "guaranteed", "limit", "borrowed")
FIELDS = (*selectors.TENANT_SERIES, "used_max")


def default_step(span: timedelta) -> timedelta:
    if span <= timedelta(days=1):
        return timedelta(minutes=5)
    if span <= timedelta(days=60):
        return timedelta(hours=1)
    return timedelta(days=1)


def _point(point: selectors.FlavorPoint, weight: float) -> dict[str, Any]:
    out: dict[str, Any] = {"time": point.time}
    for name in FIELDS:
        out[name] = point.values.get(name)
    for name in UNITS:
        value = point.values.get(name)
        out[f"{name}_units"] = None if value is None else value * weight
    return out


class TenantUsageView(TenantScopedMixin, GenericAPIView):
    """A tenant's GPU use over time per cluster and flavor: used (mean and peak), guaranteed,
    limit, borrowed, also in normalised GPU units. Read from rollups (5 min, 1 h, 1 day) by
    the step; a range older than the step's resolution keeps is refused with the limit."""

    serializer_class = UsageOutput
    pagination_class = None

    @extend_schema(
        parameters=[UsageQueryInput],
        responses={
            200: UsageOutput,
            400: OpenApiResponse(description="Bad range or step; the fields say why."),
            404: OpenApiResponse(description="No such tenant (or not yours), cluster or flavor."),
        },
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        query = UsageQueryInput(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        now = timezone.now()
        end = data.get("end") or now
        start = data.get("start") or end - timedelta(days=1)
        step = data["step"] if "step" in data else default_step(end - start)
        plan = selectors.series_plan(start=start, end=end, step=step, now=now)
        flavors = ResourceFlavor.objects.filter(kind__in=["gpu", "mig"]).select_related("cluster")
        if "cluster" in data:
            flavors = flavors.filter(cluster__name=data["cluster"])
        if "flavor" in data:
            flavors = flavors.filter(name=data["flavor"])
        flavor_list = list(flavors.order_by("cluster__name", "name"))
        if not flavor_list:
            if "flavor" in data:
                raise NotFound("No such GPU flavor.", fields={"flavor": ["no such GPU flavor"]})
            if "cluster" in data:
                raise NotFound("No such cluster.", fields={"cluster": ["no such cluster"]})
        series = selectors.tenant_usage(tenant=self.tenant, flavors=flavor_list, plan=plan)
        return Response(
            UsageOutput(
                {
                    "tenant": self.tenant.slug,
                    "start": plan.start,
                    "end": plan.end,
                    "step_s": int(plan.step.total_seconds()),
                    "source": plan.source,
                    "series": [
                        {
                            "cluster": s.cluster,
                            "flavor": s.flavor,
                            "gpu_weight": s.gpu_weight,
                            "points": [_point(p, s.gpu_weight) for p in s.points],
                        }
                        for s in series
                    ],
                }
            ).data
        )


class SamplesView(APIView):
    """Store a batch of usage samples (platform admins: exporters, backfills). The batch is
    refused whole on any bad sample (400 naming it); nothing is written then."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(
        request=SamplesInput,
        responses={
            201: SamplesOutput,
            400: OpenApiResponse(description="A bad sample; nothing was written."),
            403: OpenApiResponse(description="Only platform admins may do this."),
        },
    )
    def post(self, request: Request) -> Response:
        body = request.data if isinstance(request.data, dict) else {}
        unknown = sorted(set(body) - {"samples"})
        if unknown:
            raise ValidationFailed.for_field(
                unknown[0], "Unknown field: this endpoint does not accept it."
            )
        written = services.samples_ingest(samples=body.get("samples"))  # type: ignore[arg-type]
        return Response(SamplesOutput({"written": written}).data, status=201)


class PrometheusSourceViewSet(viewsets.GenericViewSet):
    """The Prometheus each cluster's usage is read from (platform admins): list, read,
    PUT (create or replace), DELETE (stop reading it; its samples stay). Secrets are never
    stored: the settings name files on the worker that hold them."""

    permission_classes = [IsPlatformAdmin]
    serializer_class = PrometheusSourceOutput
    lookup_field = "cluster"
    lookup_value_regex = "[a-z0-9-]+"  # cluster names are DNS-1123 labels
    pagination_class = None

    def get_queryset(self) -> Any:
        return selectors.prometheus_sources()

    def list(self, request: Request) -> Response:
        return Response(PrometheusSourceOutput(self.get_queryset(), many=True).data)

    def retrieve(self, request: Request, cluster: str) -> Response:
        source = self.get_queryset().filter(cluster__name=cluster).first()
        if source is None:
            raise NotFound(f"Cluster {cluster} has no Prometheus source.")
        return Response(PrometheusSourceOutput(source).data)

    @extend_schema(
        request=PrometheusSourceInput,
        responses={
            200: PrometheusSourceOutput,
            400: OpenApiResponse(description="A bad setting; nothing was changed."),
            404: OpenApiResponse(description="No such cluster."),
        },
    )
    def update(self, request: Request, cluster: str) -> Response:
        target = Cluster.objects.filter(name=cluster).first()
        if target is None:
            raise NotFound("No such cluster.")
        data = PrometheusSourceInput(data=request.data)
        data.is_valid(raise_exception=True)
        source = services.prometheus_source_set(
            cluster=target, actor=caller(request), settings_=data.validated_data
        )
        return Response(PrometheusSourceOutput(source).data)

    @extend_schema(responses={204: None, 404: OpenApiResponse(description="No such source.")})
    def destroy(self, request: Request, cluster: str) -> Response:
        target = Cluster.objects.filter(name=cluster).first()
        if target is None or not services.prometheus_source_remove(
            cluster=target, actor=caller(request)
        ):
            raise NotFound(f"Cluster {cluster} has no Prometheus source.")
        return Response(status=204)


class TenantWorkloadsView(TenantScopedMixin, GenericAPIView):
    """The tenant's Kueue Workloads on every cluster, as last read (newest first): job,
    submitter, resources by flavor, state, how long it ran or waited, and why it waits.
    Filters ``state``, ``person``, ``cluster`` (another value: 400 with the choices); pages.
    ``clusters`` says which cluster's list is stale (not read lately) and since when."""

    serializer_class = WorkloadOutput
    pagination_class = PagePagination
    queryset = Workload.objects.none()  # the schema's model; rows come from the selector

    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, enum=list(selectors.WORKLOAD_STATES)),
            OpenApiParameter("person", str, description="A submitter's username."),
            OpenApiParameter("cluster", str, description="A cluster's name."),
        ],
        responses={
            200: WorkloadOutput(many=True),
            400: OpenApiResponse(description="Unknown filter value; the choices are listed."),
            404: OpenApiResponse(description="No such tenant (or not yours)."),
        },
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        filters = selectors.workload_filters_parse(
            tenant=self.tenant, params=request.query_params.dict()
        )
        rows = selectors.workload_list_for_tenant(tenant=self.tenant, filters=filters)
        page = self.paginate_queryset(rows)
        assert page is not None
        out = self.get_paginated_response(
            WorkloadOutput(
                selectors.workload_rows(tenant=self.tenant, workloads=page), many=True
            ).data
        )
        out.data["clusters"] = ClusterReadingOutput(selectors.cluster_readings(), many=True).data
        out.data["may_act"] = services.workload_may_act(actor=caller(request), tenant=self.tenant)
        return out


class TenantWorkloadActionView(TenantScopedMixin, APIView):
    """Suspend (``spec.active: false``) or resume one of the tenant's workloads: its leads and
    platform admins (403 for members); 409 with its state when it finished meanwhile."""

    action_name = "suspend"

    @extend_schema(
        request=None,
        responses={
            200: WorkloadOutput,
            403: OpenApiResponse(description="Not a lead of this tenant."),
            404: OpenApiResponse(description="No such tenant or workload."),
            409: OpenApiResponse(description="It finished meanwhile, or the cluster refused."),
        },
    )
    def post(self, request: Request, tenant_slug: str, id: int) -> Response:
        workload = services.workload_set_suspended(
            tenant=self.tenant,
            workload_id=id,
            suspended=self.action_name == "suspend",
            actor=caller(request),
        )
        row = selectors.workload_rows(tenant=self.tenant, workloads=[workload])[0]
        return Response(WorkloadOutput(row).data)
