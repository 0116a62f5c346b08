"""The usage dashboards, the workload profile report and showback pages: thin views over
``dashboards.selectors``; charts are JSON drawn by ``static/portal/charts.js``, but on the
tenant usage page SVG drawn on the server (``dashboards.svg``).

Tenant pages answer 404 to anyone who may not see the tenant (before anything else), admin
pages 403 to everyone but platform admins. Bad input (start after end, a range the rollups
no longer hold, a malformed month, a cluster or flavor the tenant's filter does not offer)
renders the page with the message and status 400; on the admin page an unknown cluster is a
404. ``?download=csv`` gives exactly what the page shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django import forms
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render
from django.utils.http import urlencode
from django.views import View

from core.csvexport import csv_writer
from core.dates import OUT_OF_RANGE, in_range
from core.errors import ApplicationError, NotFound
from core.pages import error_text
from dashboards import charts, selectors
from tenants.api.base import caller
from tenants.models import Tenant
from tenants.selectors import membership_role, tenant_get_for_user
from usage.breakdown import breakdown_by_parse

DATETIME_INPUTS = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"]


class BoundedDateTimeField(forms.DateTimeField):
    """A date-time from 1970 to 2999 (``core.dates``): year 9999 is refused, not overflowed."""

    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is not None and not in_range(parsed):
            raise forms.ValidationError(OUT_OF_RANGE, code="out_of_range")
        return parsed


class PeriodForm(forms.Form):
    range = forms.ChoiceField(
        required=False, choices=[(k, v) for k, v in selectors.RANGE_LABELS.items()]
    )
    start = BoundedDateTimeField(required=False, input_formats=DATETIME_INPUTS)
    end = BoundedDateTimeField(required=False, input_formats=DATETIME_INPUTS)


class RangeForm(PeriodForm):
    cluster = forms.CharField(required=False, max_length=63)
    flavor = forms.CharField(required=False, max_length=63)


class PlaceRangeForm(PeriodForm):
    """The range, and the clusters and GPU flavors to choose from (``places``: cluster name ->
    its flavor names): a name not offered is refused with the choices (status 400, the form
    kept), not a 404 page."""

    cluster = forms.ChoiceField(required=False)
    flavor = forms.ChoiceField(required=False)

    def __init__(
        self, data: Any, *, places: dict[str, list[str]], clusters_are: str, flavors_are: str
    ) -> None:
        super().__init__(data)
        self.places = places
        clusters = list(places)
        flavors = sorted({f for names in places.values() for f in names})
        for name, names, what in (
            ("cluster", clusters, clusters_are),
            ("flavor", flavors, flavors_are),
        ):
            field = self.fields[name]
            assert isinstance(field, forms.ChoiceField)
            field.choices = [("", "all"), *((n, n) for n in names)]
            field.error_messages["invalid_choice"] = _not_one_of(what, names)

    def clean(self) -> dict[str, Any] | None:
        data = super().clean()
        cluster, flavor = self.cleaned_data.get("cluster"), self.cleaned_data.get("flavor")
        if cluster and flavor and flavor not in self.places[cluster]:
            there = ", ".join(self.places[cluster])
            why = f"its GPU flavors there: {there}." if there else "it has no GPU flavors yet."
            self.add_error("flavor", f"{flavor} is not on {cluster}; {why}")
        return data


class TenantRangeForm(PlaceRangeForm):
    """The tenant usage page's filter: the tenant's clusters and flavors."""

    def __init__(self, data: Any, *, tenant: Tenant, places: dict[str, list[str]]) -> None:
        super().__init__(
            data,
            places=places,
            clusters_are=f"{tenant.slug}'s clusters",
            flavors_are=f"{tenant.slug}'s GPU flavors",
        )


class AdminRangeForm(PlaceRangeForm):
    """The admin usage page's filter: every cluster and its GPU flavors."""

    def __init__(self, data: Any, *, places: dict[str, list[str]]) -> None:
        super().__init__(
            data, places=places, clusters_are="the clusters", flavors_are="the GPU flavors"
        )


def _not_one_of(what: str, names: list[str]) -> str:
    if not names:
        return f"%(value)s is not one of {what}: there are none yet."
    return f"%(value)s is not one of {what}: {', '.join(names)}."


def _csv(filename: str, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv_writer(response)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return response


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".")
    return value


def _query_without(request: HttpRequest, *names: str) -> str:
    return urlencode([(k, str(v)) for k, v in request.GET.items() if k not in names and v])


class _Page(View):
    http_method_names = ["get"]
    template_name = ""

    def _login(self, request: HttpRequest) -> HttpResponse | None:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return None

    def _period(
        self, request: HttpRequest, default: str = "7d", form: PeriodForm | None = None
    ) -> tuple[PeriodForm, selectors.Period | None, str]:
        form = form or RangeForm(request.GET)
        if not form.is_valid():
            why = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
            return form, None, why
        data = form.cleaned_data
        try:
            period = selectors.period_resolve(
                name=data.get("range") or None,
                start=data.get("start"),
                end=data.get("end"),
                default=default,
            )
        except ApplicationError as exc:
            return form, None, error_text(exc)
        return form, period, ""

    def _page(
        self, request: HttpRequest, context: dict[str, Any], status: int = 200
    ) -> HttpResponse:
        context.setdefault("csv_query", _query_without(request, "download"))
        return render(request, self.template_name, context, status=status)


class _TenantPage(_Page):
    tenant: Tenant

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if refused := self._login(request):
            return refused
        self.tenant = tenant_get_for_user(user=caller(request), slug=kwargs["slug"])
        return super().dispatch(request, *args, **kwargs)

    def _base(self, request: HttpRequest) -> dict[str, Any]:
        user = caller(request)
        return {
            "tenant": self.tenant,
            "role": membership_role(user=user, tenant=self.tenant),
            "ranges": selectors.RANGE_LABELS,
        }


class _AdminPage(_Page):
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if refused := self._login(request):
            return refused
        if not caller(request).is_platform_admin:
            raise PermissionDenied("Platform admins only.")
        return super().dispatch(request, *args, **kwargs)


class TenantUsageView(_TenantPage):
    """A tenant's use vs guaranteed vs limit per cluster and flavor, units, utilisation and
    the rollout indicators; ``?download=csv`` the points shown."""

    template_name = "dashboards/tenant_usage.html"

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        places = selectors.tenant_filter_places(tenant=self.tenant)
        form, period, error = self._period(
            request,
            default="7d",
            form=TenantRangeForm(request.GET, tenant=self.tenant, places=places),
        )
        context = self._base(request) | {"form": form, "error": error, "places": places}
        if period is None:
            return self._page(request, context, status=400)
        data = form.cleaned_data
        try:
            by = breakdown_by_parse(request.GET.get("by"))
        except ApplicationError as exc:
            return self._page(request, context | {"error": error_text(exc)}, status=400)
        place = {"cluster": data.get("cluster") or None, "flavor": data.get("flavor") or None}
        if request.GET.get("download") == "csv" and "by" in request.GET:
            breakdown = selectors.tenant_breakdown(tenant=self.tenant, period=period, **place)
            name = f"usage-{self.tenant.slug}-by-{by}-{period.start:%Y%m%dT%H%M}.csv"
            return _csv(name, (by, *BREAKDOWN_COLUMNS), breakdown.rows(by))
        dashboard = selectors.tenant_dashboard(tenant=self.tenant, period=period, **place)
        if request.GET.get("download") == "csv":
            name = (
                f"usage-{self.tenant.slug}-{period.start:%Y%m%dT%H%M}-{period.end:%Y%m%dT%H%M}.csv"
            )
            return _csv(name, selectors.CSV_COLUMNS, dashboard.rows())
        breakdown = selectors.tenant_breakdown(tenant=self.tenant, period=period, **place)
        context |= {
            "period": period,
            "dashboard": dashboard,
            "figures": charts.tenant_figures(dashboard, checked=False),  # drawn as SVG
            "series": [(f"flavor-{i}", s) for i, s in enumerate(dashboard.series)],
            "by_person": breakdown.table("person"),
            "by_namespace": breakdown.table("namespace"),
            "csv_query_by": _query_without(request, "download", "by"),
            "vgpu_shares": selectors.vgpu_shares(
                start=period.start, end=period.end, tenant_ids=[self.tenant.pk]
            ),
            "vgpu_period": "the period shown"
            if period.name == "custom"
            else f"the {period.label} shown (hourly means)",
        }
        return self._page(request, context)


BREAKDOWN_COLUMNS = ("unattributed", "cluster", "flavor", "gpu_hours", "unit_hours")


class AdminUsageView(_AdminPage):
    """Platform admins: shares, guarantees vs capacity, the GPU heatmap, free MIG slices and
    idle allocations, per cluster and across clusters."""

    template_name = "dashboards/admin_usage.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        places = selectors.admin_filter_places()
        form, period, error = self._period(
            request, default="24h", form=AdminRangeForm(request.GET, places=places)
        )
        context: dict[str, Any] = {"form": form, "error": error, "ranges": selectors.RANGE_LABELS}
        if period is None:
            return self._page(request, context, status=400)
        dashboard = selectors.admin_dashboard(
            period=period,
            cluster=form.cleaned_data.get("cluster") or None,
            flavor=form.cleaned_data.get("flavor") or None,
        )
        context |= {
            "period": period,
            "dashboard": dashboard,
            "figures": charts.admin_figures(dashboard),
            "clusters": list(enumerate(dashboard.clusters)),
            "idle_below": selectors.IDLE_BELOW_PCT,
        }
        return self._page(request, context)


class TenantProfileView(_TenantPage):
    """The workload profile report (R8, R18): printable evidence for a quota request."""

    template_name = "dashboards/profile.html"

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        form, period, error = self._period(request, default="7d")
        context = self._base(request) | {"form": form, "error": error}
        if period is None:
            return self._page(request, context, status=400)
        try:
            person = selectors.profile_person_parse(
                tenant=self.tenant, value=request.GET.get("person")
            )
        except ApplicationError as exc:
            return self._page(request, context | {"error": error_text(exc)}, status=400)
        profile = selectors.workload_profile(tenant=self.tenant, period=period)
        breakdown = selectors.tenant_breakdown(tenant=self.tenant, period=period)
        by_person = breakdown.table("person")
        context |= {
            "period": period,
            "profile": profile,
            "figures": charts.profile_figures(profile),
            "by_person": by_person,
            "person": person,
            "workload_table": selectors.person_workloads(breakdown, by_person, person),
            "person_query": _query_without(request, "person"),
        }
        return self._page(request, context)


SHOWBACK_COLUMNS = ("month", "tenant", "cluster", "flavor", "gpu_hours", "unit_hours",
                    "price_per_hour", "currency", "cost")  # fmt: skip


SHOWBACK_PART_COLUMNS = ("unattributed", "cluster", "flavor", "gpu_hours", "unit_hours",
                         "price_per_hour", "currency", "cost")  # fmt: skip


def _showback_page(
    view: _Page, request: HttpRequest, tenant_ids: list[int] | None, base: dict[str, Any], name: str
) -> HttpResponse:
    context = base | {"months": selectors.month_options()}
    tenant = base.get("tenant")
    try:
        month = selectors.parse_month(request.GET.get("month"))
        report = selectors.showback(month=month, tenant_ids=tenant_ids)
        by = breakdown_by_parse(request.GET.get("by"))
    except NotFound:
        raise  # the 404 page
    except ApplicationError as exc:
        context |= {"error": error_text(exc), "month": request.GET.get("month", "")}
        return view._page(request, context, status=400)
    if tenant is not None:
        shared = selectors.showback_breakdown(report=report, tenant=tenant)
        people, namespaces = (
            selectors.showback_parts(report=report, tenant=tenant, by=kind, breakdown=shared)
            for kind in ("person", "namespace")
        )
        context |= {"people": people, "namespaces": namespaces}
        if request.GET.get("download") == "csv" and "by" in request.GET:
            parts = people if by == "person" else namespaces
            return _csv(
                f"showback-{name}-by-{by}-{month:%Y-%m}.csv",
                ("month", by, *SHOWBACK_PART_COLUMNS),
                (
                    {"month": f"{month:%Y-%m}", **r, "price_per_hour": r["price"]}
                    for r in parts.rows
                ),
            )
    if request.GET.get("download") == "csv":
        return _csv(
            f"showback-{name}-{month:%Y-%m}.csv",
            SHOWBACK_COLUMNS,
            (
                {
                    "month": f"{month:%Y-%m}",
                    "tenant": r.tenant,
                    "cluster": r.cluster,
                    "flavor": r.flavor,
                    "gpu_hours": r.gpu_hours,
                    "unit_hours": r.unit_hours,
                    "price_per_hour": r.price,
                    "currency": r.currency,
                    "cost": r.cost,
                }
                for r in report.rows
            ),
        )
    context |= {
        "report": report,
        "month": f"{month:%Y-%m}",
        "figures": charts.showback_figures(report),
        "vgpu_shares": selectors.vgpu_shares(
            start=report.start, end=report.end, tenant_ids=tenant_ids
        ),
        "vgpu_period": f"{month:%B %Y}'s hourly means",
        "vgpu_show_tenant": tenant is None,
    }
    return view._page(request, context)


class ShowbackView(_AdminPage):
    template_name = "dashboards/showback.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        return _showback_page(self, request, None, {"tenant": None}, "all")


class TenantShowbackView(_TenantPage):
    template_name = "dashboards/showback.html"

    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        return _showback_page(
            self, request, [self.tenant.pk], self._base(request), self.tenant.slug
        )


class ConsoleTenantsView(_AdminPage):
    """Platform admins: every tenant and department with its quota, use now, borrowing and
    lending, utilisation, pending work and open requests; sortable, filtered, paged, and
    ``?download=csv`` the same rows (every page) with the same filters."""

    template_name = "dashboards/console_tenants.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        download = request.GET.get("download") == "csv"
        try:
            table, choices = selectors.console_table(request.GET, every_row=download)
        except ApplicationError as exc:
            context = {
                "error": error_text(exc),
                "query": request.GET,
                "choices": selectors.console_choices(),
                "sorts": selectors.CONSOLE_SORTS,
                "ranges": selectors.CONSOLE_RANGE_LABELS,
                "page_sizes": selectors.CONSOLE_PAGE_SIZES,
            }
            return self._page(request, context, status=400)
        if download:
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = (
                f'attachment; filename="tenants-{table.period.end:%Y%m%dT%H%M}.csv"'
            )
            writer = csv_writer(response)
            for row in selectors.console_csv_rows(table):
                writer.writerow(row)
            return response
        sort = table.sort
        key = sort.removeprefix("-")
        headers = [
            {
                "key": k,
                "label": label,
                "sorted": "descending" if sort == f"-{k}" else "ascending" if sort == k else "",
                "query": _query_without(request, "sort", "page", "download")
                + ("&" if _query_without(request, "sort", "page", "download") else "")
                + urlencode({"sort": f"-{k}" if sort == k else k}),
            }
            for k, label in selectors.CONSOLE_SORTS.items()
        ]
        context = {
            "table": table,
            "choices": choices,
            "query": request.GET,
            "headers": {h["key"]: h for h in headers},
            "sort_key": key,
            "ranges": selectors.CONSOLE_RANGE_LABELS,
            "page_sizes": selectors.CONSOLE_PAGE_SIZES,
            "page_query": _query_without(request, "page", "download"),
            "error": "",
        }
        return self._page(request, context)
