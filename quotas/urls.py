"""A tenant's quotas in one cluster: where the push stands, the live comparison and the
manifests. Included by ``portal/pages.py`` in the portal's URL namespace."""

from django.urls import path

from quotas import views

urlpatterns = [
    path("clusters/<str:name>/", views.cluster_detail, name="cluster-detail"),
    path(
        "tenants/<str:slug>/clusters/<str:cluster>/",
        views.tenant_cluster,
        name="tenant-cluster",
    ),
    path(
        "tenants/<str:slug>/clusters/<str:cluster>/manifests.yaml",
        views.tenant_cluster_manifests,
        name="tenant-cluster-manifests",
    ),
]
