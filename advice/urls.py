"""The tenant page's "compute suggestions now". Included by ``portal/pages.py`` in the
portal's URL namespace."""

from django.urls import path

from advice import views

urlpatterns = [
    path(
        "tenants/<str:slug>/suggestions/compute/",
        views.SuggestionsComputeView.as_view(),
        name="tenant-suggestions-compute",
    ),
    path(
        "tenants/<str:slug>/workloads/<int:pk>/ask/",
        views.workload_ask,
        name="tenant-workload-ask",
    ),
]
