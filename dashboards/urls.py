"""Usage dashboards, the workload profile report and showback. Included by
``portal/pages.py`` in the portal's URL namespace."""

from django.urls import path

from dashboards import views

urlpatterns = [
    path("tenants/<str:slug>/usage/", views.TenantUsageView.as_view(), name="tenant-usage"),
    path("tenants/<str:slug>/profile/", views.TenantProfileView.as_view(), name="tenant-profile"),
    path(
        "tenants/<str:slug>/showback/", views.TenantShowbackView.as_view(), name="tenant-showback"
    ),
    path("usage/", views.AdminUsageView.as_view(), name="usage"),
    path("showback/", views.ShowbackView.as_view(), name="showback"),
    path("console/tenants/", views.ConsoleTenantsView.as_view(), name="console-tenants"),
]
