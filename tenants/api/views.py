"""Thin API views: validate input, call one service or selector, serialize output."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from django.db import connection
from django.shortcuts import get_object_or_404
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.limits import AnonymousBodyLimit
from core.api.pagination import WindowCountPagination
from core.api.throttling import LoginRateThrottle
from core.errors import ApplicationError
from tenants import selectors, services
from tenants.api.base import ReadMembersWriteAdmins, TenantScopedMixin, caller
from tenants.api.serializers import (
    ApiTokenOutput,
    JoinRequestCreateInput,
    JoinRequestDecisionInput,
    JoinRequestOutput,
    MembershipBulkInput,
    MembershipBulkOutput,
    MembershipOutput,
    MembershipRoleInput,
    MembershipSetInput,
    MeOutput,
    NamespaceAdoptInput,
    NamespaceAdoptionOutput,
    NamespaceCreateInput,
    NamespaceOutput,
    NamespaceSharesInput,
    TenantOutput,
    TenantUpdateInput,
    TokenObtainInput,
    TokenObtainOutput,
)
from tenants.choices import TenantState
from tenants.models import ApiToken, JoinRequest, Membership, Namespace, Tenant, User
from tenants.namespaces import AdoptionPreview, no_clusters


class TenantFilter(filters.FilterSet):
    state = filters.ChoiceFilter(choices=TenantState.choices)
    parent = filters.CharFilter(field_name="parent__slug")
    cohort = filters.CharFilter()
    search = filters.CharFilter(method="filter_search", help_text="Part of slug or display name.")
    archived = filters.ChoiceFilter(
        choices=[("false", "false"), ("true", "true"), ("all", "all")],
        method="filter_archived",
        help_text="false (the default): tenants in use; true: archived ones only; all: both.",
    )

    class Meta:
        model = Tenant
        fields = ["state", "parent", "cohort"]

    def filter_archived(self, queryset: Any, name: str, value: str) -> Any:
        if value == "all":
            return queryset
        return queryset.filter(archived_at__isnull=value != "true")

    def filter_search(self, queryset: Any, name: str, value: str) -> Any:
        from django.db.models import Q

        return queryset.filter(Q(slug__icontains=value) | Q(display_name__icontains=value))


def tenant_output(tenant: Tenant, *, user: User) -> dict[str, Any]:
    rows = selectors.with_namespace_names(
        selectors.tenant_rows_for_user(user=user).filter(pk=tenant.pk)
    )
    return TenantOutput(rows[0]).data


class TenantViewSet(
    TenantScopedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Tenants the caller may see. Creation (onboarding with a tier) is added by ``approvals``."""

    serializer_class = TenantOutput
    queryset = Tenant.objects.none()  # for the schema; get_queryset() scopes it
    permission_classes = [ReadMembersWriteAdmins]
    lookup_field = "slug"
    lookup_value_regex = "[^/]+"
    tenant_url_kwarg = "slug"  # detail routes resolve the tenant like the nested routes do
    pagination_class = WindowCountPagination
    filterset_class = TenantFilter

    def get_queryset(self) -> Any:
        rows = selectors.tenant_rows_for_user(user=caller(self.request))
        if "archived" not in self.request.query_params:  # archived tenants: on request only
            rows = rows.filter(archived_at__isnull=True)
        return rows

    def get_object(self) -> Tenant:
        return self.tenant

    def filter_queryset(self, queryset: Any) -> Any:
        # Building a FilterSet costs more than the page query; skip it when nothing filters.
        if self.request.query_params.keys() & TenantFilter.base_filters.keys():
            return super().filter_queryset(queryset)
        return queryset

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        filtered = self.request.query_params.keys() & TenantFilter.base_filters.keys()
        if filtered or connection.vendor != "postgresql":
            page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        else:  # the common page: its statement compiled once per process (core.prepared)
            user = caller(request)
            statement = (
                "tenants-page",
                "admin" if user.is_platform_admin else "member",
                "archived" in request.query_params,
            )
            params = () if user.is_platform_admin else (user.pk,)
            page = self.paginator.paginate_prepared(  # type: ignore[union-attr]
                self.get_queryset, request, self, statement=statement, params=params
            )
        rows = selectors.with_namespace_names(page or [])
        return self.get_paginated_response(TenantOutput(rows, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(tenant_output(self.tenant, user=caller(request)))

    @extend_schema(request=TenantUpdateInput, responses=TenantOutput)
    def partial_update(self, request: Request, slug: str) -> Response:
        data = TenantUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = services.tenant_update(
            tenant=self.get_object(), actor=caller(request), **data.validated_data
        )
        return Response(tenant_output(tenant, user=caller(request)))

    @extend_schema(request=None, responses=TenantOutput)
    @action(detail=True, methods=["post"])
    def archive(self, request: Request, slug: str) -> Response:
        """Archive the tenant (platform admins): it keeps its history, leaves the lists, gets
        no new quotas and no pushes, and groups mapped to it are ignored at sign-in. 409 when
        it is archived already or a team of it is not."""
        tenant = services.tenant_archive(tenant=self.get_object(), actor=caller(request))
        return Response(tenant_output(tenant, user=caller(request)))

    @extend_schema(request=None, responses=TenantOutput)
    @action(detail=True, methods=["post"])
    def unarchive(self, request: Request, slug: str) -> Response:
        """Bring an archived tenant back (platform admins); what is in force is pushed again.
        409 when it is not archived or its department is."""
        tenant = services.tenant_unarchive(tenant=self.get_object(), actor=caller(request))
        return Response(tenant_output(tenant, user=caller(request)))


class NamespaceViewSet(TenantScopedMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """A tenant's namespaces. ``adoption_preview``: what the push would write into a namespace
    adopted, per cluster; the portal's API routes (``portal/api/urls.py``) set it to quotas'
    (``quotas.sync.namespace_adoption_preview``), so tenants asks no app above it. Alone,
    tenants knows of no cluster: an empty list."""

    adoption_preview: AdoptionPreview = staticmethod(no_clusters)
    serializer_class = NamespaceOutput
    queryset = Namespace.objects.none()  # for the schema; get_queryset() scopes it
    permission_classes = [ReadMembersWriteAdmins]

    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> Any:
        return selectors.namespace_list_for_tenant(tenant=self.tenant)

    @extend_schema(request=NamespaceCreateInput, responses={201: NamespaceOutput})
    def create(self, request: Request, tenant_slug: str) -> Response:
        data = NamespaceCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        namespace = services.namespace_create(
            tenant=self.tenant, actor=caller(request), **data.validated_data
        )
        return Response(NamespaceOutput(namespace).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=NamespaceSharesInput, responses=NamespaceOutput(many=True))
    @action(detail=False, methods=["put"], url_path="shares")
    def shares(self, request: Request, tenant_slug: str) -> Response:
        """How the tenant's limit is divided among its namespaces on clusters that split it
        (platform admins)."""
        data = NamespaceSharesInput(data=request.data)
        data.is_valid(raise_exception=True)
        namespaces = services.namespace_shares_set(
            tenant=self.tenant, shares=data.validated_data["shares"], actor=caller(request)
        )
        return Response(NamespaceOutput(namespaces, many=True).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, tenant_slug: str, name: str) -> Response:
        """Take the namespace away from the tenant (platform admins): the next push deletes
        what the portal wrote in it and takes the portal's labels off it; the namespace and
        what users put in it stay. 409 for the tenant's only namespace."""
        services.namespace_remove(tenant=self.tenant, name=name, actor=caller(request))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=NamespaceAdoptInput, responses=NamespaceAdoptionOutput)
    @action(detail=True, methods=["post"])
    def adopt(self, request: Request, tenant_slug: str, name: str) -> Response:
        """Adopt a namespace that existed on a cluster before the portal (platform admins).
        Without ``confirm`` it only lists what the push would write there, cluster by cluster;
        with ``confirm: true`` it records the adoption (audited) and the next push labels the
        namespace and writes. 400 for a reserved namespace, 409 when adopted already."""
        data = NamespaceAdoptInput(data=request.data)
        data.is_valid(raise_exception=True)
        namespace = services.namespace_adoption_check(tenant=self.tenant, name=name)
        clusters = self.adoption_preview(tenant=self.tenant, namespace=namespace)
        adopted = bool(data.validated_data["confirm"])
        if adopted:
            namespace = services.namespace_adopt(
                tenant=self.tenant, name=name, actor=caller(request)
            )
            message = f"{name} is adopted: the next push labels it and writes these objects."
        else:
            message = (
                f"Nothing changed. Adopting {name} lets the portal label it and write these "
                "objects there; send confirm: true to adopt it."
            )
        body = {
            "namespace": namespace,
            "adopted": adopted,
            "message": message,
            "clusters": clusters,
        }
        return Response(NamespaceAdoptionOutput(body).data)


class MembershipViewSet(TenantScopedMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Members of a tenant. Members read; a lead adds, changes and removes members and viewers
    of her tenant; a platform admin any role (the services decide, with a 403 that says why)."""

    serializer_class = MembershipOutput
    queryset = Membership.objects.none()  # for the schema; get_queryset() scopes it
    permission_classes = [IsAuthenticated]  # the tenant is resolved first: 404 outside it
    lookup_field = "username"
    lookup_value_regex = r"[\w.@+-]+"  # what Django's username validator allows

    def get_queryset(self) -> Any:
        return selectors.membership_list_for_tenant(tenant=self.tenant)

    def _output(self, username: str) -> dict[str, Any]:
        return MembershipOutput(
            get_object_or_404(self.get_queryset(), user__username=username)
        ).data

    @extend_schema(responses=MembershipOutput)
    def retrieve(self, request: Request, tenant_slug: str, username: str) -> Response:
        return Response(self._output(username))

    @extend_schema(request=MembershipSetInput, responses={201: MembershipOutput})
    def create(self, request: Request, tenant_slug: str) -> Response:
        data = MembershipSetInput(data=request.data)
        data.is_valid(raise_exception=True)
        membership = services.team_member_add(
            tenant=self.tenant,
            username=data.validated_data["username"],
            role=data.validated_data["role"],
            actor=caller(request),
        )
        return Response(self._output(membership.user.username), status=status.HTTP_201_CREATED)

    @extend_schema(request=MembershipBulkInput, responses=MembershipBulkOutput)
    @action(detail=False, methods=["post"], url_path="bulk")
    def bulk(self, request: Request, tenant_slug: str) -> Response:
        """Add several people at once (leads: members and viewers; admins: any role), by
        username or email. Each entry is answered on its own (added, already a member, not
        known, an email several people share, ...); the valid ones are added, the rest change
        nothing. More than 200 entries, or none: 400 naming ``people``."""
        data = MembershipBulkInput(data=request.data)
        data.is_valid(raise_exception=True)
        results = services.team_members_add_many(
            tenant=self.tenant,
            entries=data.validated_data["people"],
            role=data.validated_data["role"],
            actor=caller(request),
        )
        body = {
            "summary": services.team_bulk_summary(results),
            "added": sum(1 for r in results if r.outcome == services.ADDED),
            "results": results,
        }
        return Response(MembershipBulkOutput(body).data)

    @extend_schema(request=MembershipRoleInput, responses=MembershipOutput)
    def partial_update(self, request: Request, tenant_slug: str, username: str) -> Response:
        data = MembershipRoleInput(data=request.data)
        data.is_valid(raise_exception=True)
        services.team_member_role_change(
            tenant=self.tenant,
            username=username,
            role=data.validated_data["role"],
            actor=caller(request),
        )
        return Response(self._output(username))

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, tenant_slug: str, username: str) -> Response:
        services.team_member_remove(tenant=self.tenant, username=username, actor=caller(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class JoinRequestViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Asks to join a tenant. Any signed-in person asks to join a tenant that is not archived,
    by its slug (POST, an optional ``message``); they see and withdraw their own asks. The
    tenant's leads and platform admins see them all and approve (a membership with the member
    role) or refuse them, with an optional ``reason``. Someone else's ask answers 404; a member
    or viewer deciding gets 403 saying their role; an ask no longer waiting, 409."""

    serializer_class = JoinRequestOutput
    queryset = JoinRequest.objects.none()  # for the schema; get_queryset() scopes it
    permission_classes = [IsAuthenticated]
    lookup_value_regex = "[0-9]+"
    tenant: Tenant

    def check_permissions(self, request: Request) -> None:
        super().check_permissions(request)  # 401 for anonymous callers, before any lookup
        self.tenant = selectors.join_request_tenant_for_user(
            user=caller(request),
            slug=self.kwargs["tenant_slug"],
            not_found=selectors.JOIN_REQUEST_NOT_FOUND
            if "pk" in self.kwargs
            else selectors.TENANT_NOT_FOUND,
        )
        if "pk" in self.kwargs:
            selectors.join_request_ensure_reachable(
                user=caller(request), tenant=self.tenant, pk=int(self.kwargs["pk"])
            )

    def get_queryset(self) -> Any:
        return selectors.join_requests_for_user(user=caller(self.request), tenant=self.tenant)

    def _output(self, pk: int, status_code: int = status.HTTP_200_OK) -> Response:
        ask = selectors.join_request_get_for_user(
            user=caller(self.request), tenant=self.tenant, pk=pk
        )
        return Response(JoinRequestOutput(ask).data, status=status_code)

    @extend_schema(responses=JoinRequestOutput)
    def retrieve(self, request: Request, tenant_slug: str, pk: str) -> Response:
        return self._output(int(pk))

    @extend_schema(request=JoinRequestCreateInput, responses={201: JoinRequestOutput})
    def create(self, request: Request, tenant_slug: str) -> Response:
        data = JoinRequestCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = selectors.tenant_get_to_join(slug=tenant_slug)
        ask = services.join_request_create(
            tenant=tenant, user=caller(request), message=data.validated_data["message"]
        )
        return self._output(ask.pk, status.HTTP_201_CREATED)

    def _decide(self, request: Request, pk: str, *, approve: bool) -> Response:
        data = JoinRequestDecisionInput(data=request.data)
        data.is_valid(raise_exception=True)
        ask = services.join_request_decide(
            tenant=self.tenant,
            pk=int(pk),
            actor=caller(request),
            approve=approve,
            reason=data.validated_data["reason"],
        )
        return self._output(ask.pk)

    @extend_schema(request=JoinRequestDecisionInput, responses=JoinRequestOutput)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, tenant_slug: str, pk: str) -> Response:
        """Approve it (the tenant's leads, platform admins): the person becomes a member."""
        return self._decide(request, pk, approve=True)

    @extend_schema(request=JoinRequestDecisionInput, responses=JoinRequestOutput)
    @action(detail=True, methods=["post"])
    def refuse(self, request: Request, tenant_slug: str, pk: str) -> Response:
        """Refuse it (the tenant's leads, platform admins), with an optional reason."""
        return self._decide(request, pk, approve=False)

    @extend_schema(request=None, responses=JoinRequestOutput)
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, tenant_slug: str, pk: str) -> Response:
        """Take one's own ask back while it waits."""
        ask = services.join_request_withdraw(tenant=self.tenant, pk=int(pk), actor=caller(request))
        return self._output(ask.pk)


class TokenObtainView(AnonymousBodyLimit, APIView):
    """Exchange a username and password for an API token (shown once, stored hashed).

    Open to anyone: a body of at most ``ANONYMOUS_BODY_MAX_BYTES``, and
    ``LOGIN_THROTTLE_RATE`` attempts per address (the login page's bucket too)."""

    permission_classes = [AllowAny]
    authentication_classes: list[Any] = []
    throttle_classes = [LoginRateThrottle]

    @extend_schema(request=TokenObtainInput, responses={201: TokenObtainOutput}, auth=[])
    def post(self, request: Request) -> Response:
        data = TokenObtainInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request._request,
            username=data.validated_data["username"],
            password=data.validated_data["password"],
        )
        if user is None:
            raise ApplicationError(
                "Unable to log in with these credentials.",
                fields={"password": ["wrong username or password"]},
            )
        token, secret = services.api_token_create(user=user, name=data.validated_data["name"])
        body = {
            "token": secret,
            "id": token.pk,
            "prefix": token.prefix,
            "expires_at": token.expires_at,
        }
        return Response(TokenObtainOutput(body).data, status=status.HTTP_201_CREATED)


class ApiTokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """The caller's own API tokens; DELETE revokes one (kept for the record)."""

    serializer_class = ApiTokenOutput
    queryset = ApiToken.objects.none()  # for the schema; get_queryset() scopes it
    permission_classes = [IsAuthenticated]

    def get_queryset(self) -> Any:
        return selectors.api_token_list_for_user(user=caller(self.request))

    def perform_destroy(self, instance: Any) -> None:
        services.api_token_revoke(token=instance, actor=caller(self.request))


class MeView(APIView):
    """Who the caller is and their roles. Also the benchmark's baseline endpoint."""

    @extend_schema(responses=MeOutput)
    def get(self, request: Request) -> Response:
        user = caller(request)
        memberships = dict(user.memberships.values_list("tenant__slug", "role"))
        return Response(
            MeOutput(
                {
                    "username": user.username,
                    "email": user.email,
                    "is_platform_admin": user.is_platform_admin,
                    "memberships": memberships,
                }
            ).data
        )
