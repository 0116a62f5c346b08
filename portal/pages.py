"""The portal's HTML pages."""

from django.urls import path

from advice import views as advice_views
from dashboards import views as dashboard_views
from portal import (
    views,
    views_alerts,
    views_fleet,
    views_inbox,
    views_plan,
    views_probe,
    views_requests,
    views_sync,
)

app_name = "portal"
urlpatterns = [
    path("", views.home, name="home"),
    path("tenants/<str:slug>/", views.tenant_detail, name="tenant-detail"),
    path(
        "tenants/<str:slug>/clusters/<str:cluster>/",
        views_sync.tenant_cluster,
        name="tenant-cluster",
    ),
    path(
        "tenants/<str:slug>/clusters/<str:cluster>/manifests.yaml",
        views_sync.tenant_cluster_manifests,
        name="tenant-cluster-manifests",
    ),
    path("tenants/<str:slug>/requests/new/", views_requests.request_new, name="request-new"),
    path(
        "tenants/<str:slug>/suggestions/compute/",
        advice_views.SuggestionsComputeView.as_view(),
        name="tenant-suggestions-compute",
    ),
    path(
        "tenants/<str:slug>/requests/validate/",
        views_requests.RequestValidateView.as_view(),
        name="request-validate",
    ),
    path("requests/", views_requests.request_list, name="request-list"),
    path("requests/<int:pk>/", views_requests.request_detail, name="request-detail"),
    path("requests/<int:pk>/submit/", views_requests.request_submit, name="request-submit"),
    path("requests/<int:pk>/cancel/", views_requests.request_cancel, name="request-cancel"),
    path("requests/<int:pk>/approve/", views_requests.request_approve, name="request-approve"),
    path("requests/<int:pk>/reject/", views_requests.request_reject, name="request-reject"),
    path("requests/<int:pk>/retry/", views_requests.request_retry, name="request-retry"),
    # Usage dashboards, the workload profile report and showback (dashboards app).
    path(
        "tenants/<str:slug>/usage/",
        dashboard_views.TenantUsageView.as_view(),
        name="tenant-usage",
    ),
    path(
        "tenants/<str:slug>/profile/",
        dashboard_views.TenantProfileView.as_view(),
        name="tenant-profile",
    ),
    path(
        "tenants/<str:slug>/showback/",
        dashboard_views.TenantShowbackView.as_view(),
        name="tenant-showback",
    ),
    path("usage/", dashboard_views.AdminUsageView.as_view(), name="usage"),
    path("showback/", dashboard_views.ShowbackView.as_view(), name="showback"),
    path("alerts/", views_alerts.alert_list, name="alert-list"),
    path("alerts/<int:pk>/", views_alerts.alert_detail, name="alert-detail"),
    path(
        "alerts/<int:pk>/acknowledge/",
        views_alerts.alert_acknowledge,
        name="alert-acknowledge",
    ),
    path(
        "alerts/<int:pk>/reactivate/",
        views_alerts.alert_reactivate,
        name="alert-reactivate",
    ),
    path("inbox/", views_inbox.inbox, name="inbox"),
    path("inbox/read/", views_inbox.inbox_mark_all_read, name="inbox-read-all"),
    path("inbox/<int:pk>/read/", views_inbox.inbox_mark_read, name="inbox-read"),
    path("console/", views.admin_console, name="console"),
    path("console/approvals/", views_requests.approvals_queue, name="approvals-queue"),
    path("fleet/", views_fleet.fleet, name="fleet"),
    path("fleet/plan/", views_fleet.fleet_plan, name="fleet-plan"),
    path("fleet/plan/proposals/<int:pk>/", views_plan.plan_proposal, name="fleet-plan-proposal"),
    path("fleet/gpus/<str:uuid>/", views_fleet.gpu_detail, name="fleet-gpu"),
    path("fleet/gpus/<str:uuid>/layout/", views_fleet.gpu_layout, name="fleet-gpu-layout"),
    path("fleet/gpus/<str:uuid>/probes/", views_probe.gpu_probe, name="fleet-gpu-probes"),
    path(
        "fleet/gpus/<str:uuid>/layout/validate/",
        views_fleet.GpuLayoutValidateView.as_view(),
        name="fleet-gpu-layout-validate",
    ),
]
