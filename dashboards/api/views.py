"""Thin views of the dashboards API: validate, call one selector or service, serialize."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.mixins import ListModelMixin
from rest_framework.request import Request
from rest_framework.response import Response

from core.csvexport import csv_writer
from core.errors import ValidationFailed
from dashboards import selectors, services
from dashboards.api.serializers import (
    BreakdownOutput,
    BreakdownQueryInput,
    ConsoleQueryInput,
    ConsoleTableOutput,
    FlavorPriceInput,
    FlavorPriceOutput,
    ProfileOutput,
    ProfileQueryInput,
    ShowbackOutput,
    ShowbackQueryInput,
)
from dashboards.models import FlavorPrice
from quotas.models import ResourceFlavor
from tenants.api.base import IsPlatformAdmin, ReadMembersWriteAdmins, TenantScopedMixin, caller
from tenants.selectors import tenant_get_for_user, tenant_list_for_user
from usage.breakdown import Breakdown, Part, usage_breakdown
from usage.choices import Resolution

BAD_RANGE = OpenApiResponse(description="Bad range: start after end, or older than kept.")


class TenantProfileView(TenantScopedMixin, GenericAPIView):
    """The workload profile report of a tenant for a period: submissions by hour
    of week, GPUs per job, run times, queue waits, peak concurrent GPUs, peak memory, mean
    utilisation. The evidence a lead attaches to a quota request."""

    serializer_class = ProfileOutput
    pagination_class = None

    @extend_schema(
        parameters=[ProfileQueryInput],
        responses={
            200: ProfileOutput,
            400: BAD_RANGE,
            404: OpenApiResponse(description="No such tenant (or not yours)."),
        },
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        query = ProfileQueryInput(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        period = selectors.period_resolve(start=data.get("start"), end=data.get("end"))
        profile = selectors.workload_profile(tenant=self.tenant, period=period)
        return Response(ProfileOutput(profile.as_dict()).data)


def _flavors(breakdown: Breakdown, part: Part) -> list[dict[str, Any]]:
    return [
        {
            "cluster": breakdown.flavors[p].cluster,
            "flavor": breakdown.flavors[p].name,
            "gpu_hours": part.hours.get(p, 0.0),
            "unit_hours": part.hours.get(p, 0.0) * breakdown.flavors[p].weight,
        }
        for p in breakdown.places
    ]


def _part(breakdown: Breakdown, part: Part) -> dict[str, Any]:
    return {
        "key": part.key,
        "unattributed": part.key == "",
        "gpu_hours": part.gpu_hours,
        "unit_hours": breakdown.units(part.hours),
        "utilization": part.utilization,
        "workloads": part.workloads,
        "flavors": _flavors(breakdown, part),
    }


class TenantUsageBreakdownView(TenantScopedMixin, GenericAPIView):
    """Who used what: a tenant's GPU-hours over a range (or showback's ``month``) per person
    and per namespace, each list ending with the unattributed rest so that it adds up to the
    tenant's figure (``gpu_hours``, per flavor in ``totals``); with ``person`` also that
    person's workloads. Members of the tenant and platform admins."""

    serializer_class = BreakdownOutput
    pagination_class = None

    @extend_schema(
        parameters=[BreakdownQueryInput],
        responses={
            200: BreakdownOutput,
            400: OpenApiResponse(description="A bad parameter; the field says why."),
            404: OpenApiResponse(description="No such tenant (or not yours), cluster or flavor."),
        },
    )
    def get(self, request: Request, tenant_slug: str) -> Response:
        query = BreakdownQueryInput(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        now = timezone.now()
        person = selectors.profile_person_parse(tenant=self.tenant, value=data.get("person"))
        if "month" in data and ("cluster" in data or "flavor" in data):
            raise ValidationFailed.for_field(
                "cluster" if "cluster" in data else "flavor",
                "a month covers every flavor: give a range to narrow it.",
            )
        if "month" in data:
            month = selectors.parse_month(data["month"], now=now)
            report = selectors.showback(month=month, tenant_ids=[self.tenant.pk], now=now)
            breakdown = usage_breakdown(
                tenant_id=self.tenant.pk,
                start=report.start,
                end=report.end,
                resolution=Resolution.HOUR,
                now=now,
            )
        else:
            period = selectors.period_resolve(
                name=data.get("range"), start=data.get("start"), end=data.get("end"), now=now
            )
            breakdown = selectors.tenant_breakdown(
                tenant=self.tenant,
                period=period,
                cluster=data.get("cluster"),
                flavor=data.get("flavor"),
                now=now,
            )
        clusters = {c: info.cluster for (c, _), info in breakdown.flavors.items()}
        workloads = [w for w in breakdown.workloads if person and w.submitter == person]
        return Response(
            BreakdownOutput(
                {
                    "tenant": self.tenant.slug,
                    "start": breakdown.start,
                    "end": breakdown.end,
                    "resolution_s": breakdown.resolution,
                    "gpu_hours": breakdown.gpu_hours,
                    "unit_hours": breakdown.unit_hours,
                    "totals": breakdown.total_rows(),
                    "people": [_part(breakdown, p) for p in breakdown.parts("person")],
                    "namespaces": [_part(breakdown, p) for p in breakdown.parts("namespace")],
                    "workloads": [
                        _part(breakdown, w)
                        | {
                            "id": w.workload_id,
                            "name": w.key,
                            "namespace": w.namespace,
                            "cluster": clusters.get(w.cluster_id, ""),
                            "submitter": w.submitter,
                            "state": w.state,
                        }
                        for w in workloads
                    ],
                }
            ).data
        )


class ShowbackView(GenericAPIView):
    """GPU-hours per tenant, cluster and flavor for a month, priced per flavor-hour: every
    tenant for platform admins, the caller's own tenants for everyone else."""

    serializer_class = ShowbackOutput
    pagination_class = None

    @extend_schema(
        parameters=[ShowbackQueryInput],
        responses={
            200: ShowbackOutput,
            400: OpenApiResponse(description="Bad month, in the future or older than kept."),
            404: OpenApiResponse(description="No such tenant (or not yours)."),
        },
    )
    def get(self, request: Request) -> Response:
        query = ShowbackQueryInput(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        user = caller(request)
        tenant_ids: list[int] | None
        if "tenant" in data:
            tenant_ids = [tenant_get_for_user(user=user, slug=data["tenant"]).pk]
        elif user.is_platform_admin:
            tenant_ids = None
        else:
            tenant_ids = list(tenant_list_for_user(user=user).values_list("pk", flat=True))
        month = selectors.parse_month(data.get("month"))
        report = selectors.showback(month=month, tenant_ids=tenant_ids)
        out: dict[str, Any] = {
            "month": f"{month:%Y-%m}",
            "start": report.start,
            "end": report.end,
            "rows": [{**r.__dict__, "cost": r.cost} for r in report.rows],
            "totals": report.totals(),
        }
        if "by" in data:
            tenant = tenant_get_for_user(user=user, slug=data["tenant"])
            parts = selectors.showback_parts(report=report, tenant=tenant, by=data["by"])
            out["parts"] = [{**r, "key": r[data["by"]]} for r in parts.rows]
        return Response(ShowbackOutput(out).data)


class FlavorPriceListView(ListModelMixin, GenericAPIView):
    """Showback prices per flavor-hour, newest first per flavor; platform admins add them
    (one per flavor and day; a price holds until the flavor's next one)."""

    serializer_class = FlavorPriceOutput
    permission_classes = [ReadMembersWriteAdmins]

    def get_queryset(self) -> Any:
        return FlavorPrice.objects.select_related("flavor", "flavor__cluster").order_by(
            "flavor__cluster__name", "flavor__name", "-valid_from"
        )

    def get(self, request: Request) -> Response:
        return self.list(request)

    @extend_schema(
        request=FlavorPriceInput,
        responses={
            201: FlavorPriceOutput,
            400: OpenApiResponse(description="Invalid; the fields say why."),
            403: OpenApiResponse(description="Only platform admins may do this."),
            409: OpenApiResponse(description="The flavor already has a price from that day."),
        },
    )
    def post(self, request: Request) -> Response:
        body = FlavorPriceInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        flavor = (
            ResourceFlavor.objects.select_related("cluster")
            .filter(cluster__name=data["cluster"], name=data["flavor"])
            .first()
        )
        if flavor is None:
            raise ValidationFailed.for_field(
                "flavor", f"no flavor {data['flavor']!r} on cluster {data['cluster']!r}."
            )
        price = services.flavor_price_set(
            actor=caller(request),
            flavor=flavor,
            price=data["price"],
            currency=data["currency"],
            valid_from=data["valid_from"],
        )
        return Response(FlavorPriceOutput(price).data, status=status.HTTP_201_CREATED)


class ConsoleTenantsView(GenericAPIView):
    """Platform admins: every tenant and department (not archived) with its quota
    (guaranteed, limit), Kueue's use now (allocated, borrowed), what it lends now, its mean
    GPU utilisation over ``range``, its pending workloads and open requests, and the totals
    over every matching tenant. GPUs are normalised GPU units; ``flavors`` breaks them down
    in GPUs (or MIG instances) of each flavor. Sort (``sort=-allocated``), filter
    (``department``, ``cluster``, ``flavor``, ``q``), page (``page``, ``page_size``); with
    ``download=csv`` every matching row as CSV."""

    permission_classes = [IsPlatformAdmin]
    serializer_class = ConsoleTableOutput
    pagination_class = None

    @extend_schema(
        parameters=[ConsoleQueryInput],
        responses={
            200: ConsoleTableOutput,
            400: OpenApiResponse(description="A parameter not offered; the message lists them."),
            403: OpenApiResponse(description="Only platform admins may do this."),
        },
    )
    def get(self, request: Request) -> HttpResponse | Response:
        download = request.query_params.get("download") == "csv"
        table, _ = selectors.console_table(request.query_params, every_row=download)
        if download:
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = (
                f'attachment; filename="tenants-{table.period.end:%Y%m%dT%H%M}.csv"'
            )
            writer = csv_writer(response)
            for row in selectors.console_csv_rows(table):
                writer.writerow(row)
            return response
        return Response(
            ConsoleTableOutput(
                {
                    "start": table.period.start,
                    "end": table.period.end,
                    "count": table.count,
                    "page": table.page,
                    "pages": table.pages,
                    "page_size": table.page_size,
                    "sort": table.sort,
                    "totals": table.totals,
                    "results": [r.as_dict() for r in table.rows],
                }
            ).data
        )
