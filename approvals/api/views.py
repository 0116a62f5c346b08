"""The approvals app's API: tenant onboarding (POST /api/v1/tenants/) and quota change
requests (/api/v1/quota-requests/). Thin: validate input, call one service or selector,
serialize output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import Case, Model, QuerySet, When
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from approvals import selectors, services
from approvals.api.serializers import (
    DecisionInput,
    DryRunOutput,
    GrantExtendInput,
    GrantOutput,
    NoInput,
    QuotaRequestDetailOutput,
    QuotaRequestInput,
    QuotaRequestOutput,
    QuotaRequestValidationOutput,
)
from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import tenant_onboard
from core.errors import NotFound, ValidationFailed
from quotas.choices import GrantState
from quotas.models import Cluster, Grant, ResourceFlavor, TierTemplate
from quotas.selectors import cluster_list
from tenants.api.base import caller
from tenants.api.serializers import TenantCreateInput, TenantOutput
from tenants.api.views import TenantViewSet as TenantReadViewSet
from tenants.api.views import tenant_output
from tenants.models import Tenant, User
from tenants.selectors import tenant_get_for_user

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


# --- quota change requests ------------------------------------------------------------------


class QuotaRequestFilter(filters.FilterSet):
    status = filters.ChoiceFilter(choices=RequestStatus.choices)
    tenant = filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")
    cluster = filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")

    class Meta:
        model = QuotaChangeRequest
        fields = ["status", "tenant", "cluster"]


# An applied change watched (``watch``: its indicators before and after), which an app above
# approvals computes: composed where the routes are (``portal/api/urls.py``), so approvals asks
# no app above it. Standing alone, the detail's ``watch`` is null.
# Called with the keywords ``user`` and ``change`` (already scoped to ``user``).
ChangeWatch = Callable[..., dict[str, Any] | None]


def no_change_watch(*, user: User, change: QuotaChangeRequest) -> None:
    return None


def _detail(
    quota_request: QuotaChangeRequest,
    check: services.RequestCheck | None = None,
    watch: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The detail representation: the request, its diff (against the quotas in force now
    while it is open; once approved, against those in force then), its timeline (a constant
    number of queries) and ``watch``. ``check``: the one its filing just made."""
    context = {
        "check": check or services.quota_request_check_shown(request=quota_request),
        "timeline": selectors.quota_request_timeline_list(request=quota_request),
        "push": selectors.quota_request_push(request=quota_request),
        "watch": watch,
    }
    return QuotaRequestDetailOutput(quota_request, context=context).data


ERRORS = {
    400: OpenApiResponse(description="Bad input; the fields say which and why."),
    403: OpenApiResponse(description="The caller may not do this; the detail says why."),
    404: OpenApiResponse(description="No such request, or not the caller's to see."),
    409: OpenApiResponse(
        description="Not in a state that allows this, or a rule is broken now (named)."
    ),
}


class QuotaRequestViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Quota change requests of the tenants the caller may see (platform admins: all).
    Leads file them for their tenants, platform admins for any; only platform admins approve
    or reject, never their own; the requester cancels while it is open."""

    serializer_class = QuotaRequestOutput
    queryset = QuotaChangeRequest.objects.none()  # for the schema; get_queryset() scopes it
    filterset_class = QuotaRequestFilter
    lookup_value_regex = "[0-9]{1,18}"
    change_watch: ChangeWatch = staticmethod(no_change_watch)

    def get_queryset(self) -> Any:
        return selectors.quota_request_list_for_user(user=caller(self.request))

    def get_object(self) -> QuotaChangeRequest:
        return selectors.quota_request_get_for_user(
            user=caller(self.request), pk=int(self.kwargs["pk"])
        )

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(QuotaRequestOutput(page, many=True).data)

    @extend_schema(responses={200: QuotaRequestDetailOutput, 404: ERRORS[404]})
    def retrieve(self, request: Request, pk: str) -> Response:
        change = self.get_object()
        return Response(
            _detail(change, watch=self.change_watch(user=caller(request), change=change))
        )

    def _filing(self, request: Request) -> tuple[dict[str, Any], Tenant, Cluster]:
        """The validated body, its tenant (404 when not visible; 403 when the caller may not
        file for it) and its cluster (400 when unknown)."""
        data = QuotaRequestInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        user = caller(request)
        tenant = tenant_get_for_user(user=user, slug=v["tenant"])
        services.quota_request_ensure_can_file(actor=user, tenant=tenant)
        return v, tenant, _lookup(cluster_list(), "cluster", name=v["cluster"])

    def _changes(self, v: dict[str, Any], cluster: Cluster, tenant: Tenant) -> dict[str, Any]:
        """Items, scheduling quotas and tier of the body; a tier with no items is prefilled
        from its template (less the lines the tenant holds already)."""
        return services.request_changes(
            cluster=cluster,
            raw_items=v.get("items", []),
            scheduling=_scheduling(v),
            tier=self._tier(v),
            tenant=tenant,
        )

    def _tier(self, v: dict[str, Any]) -> TierTemplate | None:
        if not v.get("tier"):
            return None
        return _lookup(TierTemplate.objects.all(), "tier", name=v["tier"])

    @extend_schema(
        request=QuotaRequestInput,
        responses={201: QuotaRequestDetailOutput, **ERRORS},
        description="File a request: a draft, or pending at once with `submit: true`. "
        "Refused whole (400, naming `items[i].field` and the rule) when it breaks a rule.",
    )
    def create(self, request: Request) -> Response:
        v, tenant, cluster = self._filing(request)
        filed = services.quota_request_file(
            tenant=tenant,
            cluster=cluster,
            requester=caller(request),
            reason=v["reason"],
            submit=v["submit"],
            replaces=self._replaces(v, request, tenant, cluster),
            isolation_level=v.get("isolation_level") or "",
            production_priority=v.get("production_priority"),
            tenant_changes=_tenant_changes(v),
            starts_at=v.get("starts_at"),
            ends_at=v.get("ends_at"),
            **self._changes(v, cluster, tenant),
        )
        return Response(self._fresh(filed.request, filed.check), status=status.HTTP_201_CREATED)

    def _replaces(
        self, v: dict[str, Any], request: Request, tenant: Tenant, cluster: Cluster
    ) -> QuotaChangeRequest | None:
        """The draft named by ``replaces``: 400 naming the field when the caller sees no
        request of that id for the tenant and cluster (the same answer whether it is missing
        or another tenant's)."""
        if v.get("replaces") is None:
            return None
        try:
            return selectors.quota_request_draft_for_form(
                user=caller(request),
                tenant=tenant,
                cluster_id=cluster.pk,
                pk=str(v["replaces"]),
                drafts_only=False,
            )
        except NotFound as exc:
            raise ValidationFailed.for_field(
                "replaces",
                f"No request #{v['replaces']} of {tenant.slug} on {cluster.name} to replace.",
            ) from exc

    @extend_schema(
        request=QuotaRequestInput,
        responses={200: QuotaRequestValidationOutput, **ERRORS},
        description="What filing this request would answer, without storing anything: 200 "
        "with `valid` false and the broken rules in `errors`, or `valid` true with the diff "
        "and the number of approvals it needs. A malformed body, an unknown cluster (400) and "
        "the permission rules of filing (403 / 404) answer as they do for create.",
    )
    @action(detail=False, methods=["post"])
    def validate(self, request: Request) -> Response:
        v, tenant, cluster = self._filing(request)
        check = services.quota_request_validate(
            actor=caller(request),
            tenant=tenant,
            cluster=cluster,
            reason=v["reason"],
            raw_items=v.get("items", []),
            scheduling=_scheduling(v),
            tier=self._tier(v),
            isolation_level=v.get("isolation_level") or "",
            production_priority=v.get("production_priority"),
            tenant_changes=_tenant_changes(v),
            starts_at=v.get("starts_at"),
            ends_at=v.get("ends_at"),
        )
        return Response(QuotaRequestValidationOutput(check).data)

    def _fresh(
        self, quota_request: QuotaChangeRequest, check: services.RequestCheck | None = None
    ) -> dict[str, Any]:
        """The detail of ``quota_request`` as the caller sees it after a change."""
        user = caller(self.request)
        change = selectors.quota_request_get_for_user(user=user, pk=quota_request.pk)
        return _detail(change, check, self.change_watch(user=user, change=change))

    def _acted_on(self) -> QuotaChangeRequest:
        """The request an action names (404 when the caller does not see it), its row alone:
        the service locks and reads it again, and ``_fresh`` reads what the answer shows."""
        return selectors.quota_request_visible(user=caller(self.request), pk=int(self.kwargs["pk"]))

    @extend_schema(request=None, responses={200: QuotaRequestDetailOutput, **ERRORS})
    @action(detail=True, methods=["post"])
    def submit(self, request: Request, pk: str) -> Response:
        """Submit a draft for approval (the requester or a platform admin)."""
        quota_request = self._acted_on()
        NoInput(data=request.data).is_valid(raise_exception=True)
        quota_request = services.quota_request_submit(request=quota_request, actor=caller(request))
        return Response(self._fresh(quota_request))

    @extend_schema(request=DecisionInput, responses={200: QuotaRequestDetailOutput, **ERRORS})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        """Approve (platform admins, not their own request). With enough approvals the change
        applies: the new quota set generation, the audit rows and the outbox row for the
        cluster push are written together, or nothing is (409 naming the broken rule)."""
        if caller(request).is_platform_admin:
            # Who sees every request: the service locks and reads it (404 when there is none),
            # not read here first as well.
            quota_request = QuotaChangeRequest(pk=int(self.kwargs["pk"]))
        else:
            quota_request = self._acted_on()
        data = DecisionInput(data=request.data)
        data.is_valid(raise_exception=True)
        quota_request = services.quota_request_approve(
            request=quota_request, approver=caller(request), **data.validated_data
        )
        return Response(self._fresh(quota_request))

    @extend_schema(request=DecisionInput, responses={200: QuotaRequestDetailOutput, **ERRORS})
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str) -> Response:
        """Reject (platform admins, not their own request)."""
        quota_request = self._acted_on()
        data = DecisionInput(data=request.data)
        data.is_valid(raise_exception=True)
        quota_request = services.quota_request_reject(
            request=quota_request, approver=caller(request), **data.validated_data
        )
        return Response(self._fresh(quota_request))

    @extend_schema(request=None, responses={200: QuotaRequestDetailOutput, **ERRORS})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Cancel a draft or pending request (its requester only; admins reject instead)."""
        quota_request = self._acted_on()
        NoInput(data=request.data).is_valid(raise_exception=True)
        quota_request = services.quota_request_cancel(request=quota_request, actor=caller(request))
        return Response(self._fresh(quota_request))

    @extend_schema(responses={200: DryRunOutput, 404: ERRORS[404]})
    @action(detail=True, methods=["get"], url_path="dry-run")
    def dry_run(self, request: Request, pk: str) -> Response:
        """What approving the request would change in the cluster, object by object (from the
        compiler), and the cluster's own verdict from a server-side dry run where the cluster
        is a Kubernetes API. Changes nothing."""
        dry_run = services.quota_request_dry_run(request=self.get_object())
        return Response(DryRunOutput(dry_run).data)

    @extend_schema(request=None, responses={200: QuotaRequestDetailOutput, **ERRORS})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        """Push a failed request's quotas to the cluster again (platform admins), after the
        cause was fixed."""
        quota_request = self.get_object()
        NoInput(data=request.data).is_valid(raise_exception=True)
        quota_request = services.quota_request_retry(request=quota_request, actor=caller(request))
        return Response(self._fresh(quota_request))


class GrantFilter(filters.FilterSet):
    cluster = filters.CharFilter(field_name="cluster__name", help_text="Cluster name.")
    tenant = filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")
    state = filters.ChoiceFilter(choices=GrantState.choices)
    ends_after = filters.IsoDateTimeFilter(field_name="ends_at", lookup_expr="gt")
    starts_before = filters.IsoDateTimeFilter(field_name="starts_at", lookup_expr="lt")

    class Meta:
        model = Grant
        fields = ["cluster", "tenant", "state", "ends_after", "starts_before"]


class GrantViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Grants for a time: lines added on top of a tenant's standing quota for a window. A
    platform admin sees every tenant's (what is promised next week: ``starts_before``,
    ``ends_after``); anyone else those of their tenants. A lead asks to extend one (a new
    request from its end)."""

    serializer_class = GrantOutput
    queryset = Grant.objects.none()  # for the schema; get_queryset() scopes it
    filterset_class = GrantFilter
    lookup_value_regex = "[0-9]{1,18}"

    def get_queryset(self) -> Any:
        return services.grant_list_for_user(user=caller(self.request))

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(GrantOutput(page, many=True).data)

    @extend_schema(responses={200: GrantOutput, 404: ERRORS[404]})
    def retrieve(self, request: Request, pk: str) -> Response:
        grant = services.grant_get_for_user(user=caller(request), pk=int(pk))
        return Response(GrantOutput(grant).data)

    @extend_schema(
        request=GrantExtendInput,
        responses={201: QuotaRequestDetailOutput, **ERRORS},
        description="Ask to extend the grant (a lead of its tenant or a platform admin): a new "
        "request for the same lines from the grant's end to `ends_at`, checked and decided like "
        "any (400 naming `ends_at` for a bad window).",
    )
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str) -> Response:
        grant = services.grant_get_for_user(user=caller(request), pk=int(pk))
        data = GrantExtendInput(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        filed = services.grant_extend(
            grant=grant, actor=caller(request), ends_at=v["ends_at"], reason=v["reason"],
            submit=v["submit"],
        )  # fmt: skip
        change = selectors.quota_request_get_for_user(user=caller(request), pk=filed.pk)
        return Response(_detail(change), status=status.HTTP_201_CREATED)


def _scheduling(validated: dict[str, Any]) -> dict[str, Any]:
    return {name: validated[name] for name in services.SCHEDULING_FIELDS if name in validated}


def _tenant_changes(v: dict[str, Any]) -> dict[str, Any]:
    """The tenant-wide limits of a request body (null ones left out)."""
    return {name: v[name] for name in services.TENANT_FIELDS if v.get(name) is not None}
