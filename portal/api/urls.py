"""Every route under /api/v1/. Tenant-scoped routes nest under tenants/{tenant_slug}/."""

from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from advice.api.views import QuotaRequestWhatIfView, TenantSuggestionsView, request_watch_field
from alerts.api.views import AdmissionCheckView, AlertViewSet
from approvals.api.views import GrantViewSet, TenantViewSet
from approvals.api.views import QuotaRequestViewSet as ApprovalsQuotaRequestViewSet
from core.api.schema import CachedSchemaView
from dashboards.api.views import (
    ConsoleTenantsView,
    FlavorPriceListView,
    ShowbackView,
    TenantProfileView,
    TenantUsageBreakdownView,
)
from gpu_agent.agent_api import urls as gpu_agent_urls
from identity.api.views import GroupMappingViewSet
from quotas.api.person_caps import MembershipCapsViewSet, TenantPersonCapsView
from quotas.api.views import (
    ClusterPoolListView,
    ClusterViewSet,
    FlavorViewSet,
    TenantQuotaViewSet,
    TenantSyncViewSet,
    TierTemplateViewSet,
)
from quotas.sync import namespace_adoption_preview
from tenants.api.audit import AuditEventViewSet, NotificationViewSet
from tenants.api.views import (
    ApiTokenViewSet,
    JoinRequestViewSet,
    MeView,
    TokenObtainView,
)
from tenants.api.views import NamespaceViewSet as TenantNamespaceViewSet
from usage.api.views import (
    PrometheusSourceViewSet,
    SamplesView,
    TenantUsageView,
    TenantWorkloadActionView,
    TenantWorkloadsView,
)


class NamespaceViewSet(TenantNamespaceViewSet):
    """A tenant's namespaces, the adoption's preview being what quotas' push would write
    (composed here: tenants asks no app above it)."""

    adoption_preview = staticmethod(namespace_adoption_preview)


class QuotaRequestViewSet(ApprovalsQuotaRequestViewSet):
    """Quota change requests, an applied one's detail watched by advice (its indicators
    before and after; composed here: approvals asks no app above it)."""

    change_watch = staticmethod(request_watch_field)


router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("flavors", FlavorViewSet, basename="flavor")
router.register("tier-templates", TierTemplateViewSet, basename="tier-template")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("grants", GrantViewSet, basename="grant")
router.register("auth/tokens", ApiTokenViewSet, basename="api-token")
router.register("audit-events", AuditEventViewSet, basename="audit-event")
router.register("notifications", NotificationViewSet, basename="notification")
router.register("alerts", AlertViewSet, basename="alert")
router.register("identity-groups", GroupMappingViewSet, basename="identity-group")
router.register(
    "usage/prometheus-sources", PrometheusSourceViewSet, basename="usage-prometheus-source"
)

tenant_router = DefaultRouter(trailing_slash=True)
tenant_router.include_root_view = False
tenant_router.register("namespaces", NamespaceViewSet, basename="tenant-namespace")
# The members API with each member's caps (R14): tenants' viewset, composed with quotas' caps.
tenant_router.register("members", MembershipCapsViewSet, basename="tenant-member")
tenant_router.register("join-requests", JoinRequestViewSet, basename="tenant-join-request")
tenant_router.register("quotas", TenantQuotaViewSet, basename="tenant-quota")
tenant_router.register("sync", TenantSyncViewSet, basename="tenant-sync")

app_name = "api"
urlpatterns = [
    path("auth/token/", TokenObtainView.as_view(), name="token-obtain"),
    path("me/", MeView.as_view(), name="me"),
    path("tenants/<str:tenant_slug>/usage/", TenantUsageView.as_view(), name="tenant-usage"),
    path(
        "tenants/<str:tenant_slug>/usage/breakdown/",
        TenantUsageBreakdownView.as_view(),
        name="tenant-usage-breakdown",
    ),
    path(
        "tenants/<str:tenant_slug>/person-caps/",
        TenantPersonCapsView.as_view(),
        name="tenant-person-caps",
    ),
    path(
        "tenants/<str:tenant_slug>/workloads/",
        TenantWorkloadsView.as_view(),
        name="tenant-workloads",
    ),
    *(
        path(
            f"tenants/<str:tenant_slug>/workloads/<int:id>/{action}/",
            TenantWorkloadActionView.as_view(action_name=action),
            name=f"tenant-workload-{action}",
        )
        for action in ("suspend", "resume")
    ),
    path(
        "tenants/<str:tenant_slug>/suggestions/",
        TenantSuggestionsView.as_view(),
        name="tenant-suggestions",
    ),
    path(
        "quota-requests/<int:id>/what-if/",
        QuotaRequestWhatIfView.as_view(),
        name="quota-request-what-if",
    ),
    path("tenants/<str:tenant_slug>/profile/", TenantProfileView.as_view(), name="tenant-profile"),
    path("showback/", ShowbackView.as_view(), name="showback"),
    path("console/tenants/", ConsoleTenantsView.as_view(), name="console-tenants"),
    path("cluster-pools/", ClusterPoolListView.as_view(), name="cluster-pool-list"),
    path("flavor-prices/", FlavorPriceListView.as_view(), name="flavor-price-list"),
    path(
        "tenants/<str:tenant_slug>/admission-check/",
        AdmissionCheckView.as_view(),
        name="tenant-admission-check",
    ),
    path("tenants/<str:tenant_slug>/", include(tenant_router.urls)),
    path("usage/samples/", SamplesView.as_view(), name="usage-samples"),
    path("mig/", include("gpu_agent.api.urls")),  # MIG catalogue and layout check
    path("", include(gpu_agent_urls)),  # agent/..., nodes/..., gpus/{uuid}/layout/
    path("schema/", CachedSchemaView.as_view(), name="schema"),
    # Swagger UI from drf-spectacular-sidecar's static files. No ReDoc: its page loads web
    # fonts from Google, and the portal must work offline (no CDN anywhere). The split view
    # serves the start-up script as a file (?script=): the CSP allows no inline script.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    *router.urls,
]
