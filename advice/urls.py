"""The tenant page's "compute suggestions now" and an applied request's "go back to the
previous numbers". Included by ``portal/pages.py`` in the
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
    path("requests/<int:pk>/revert/", views.request_revert, name="request-revert"),
]
