"""The request pages: the form (with its live check), my requests, one request, its
transitions, and the approvals queue. Included by ``portal/pages.py`` in the portal's URL
namespace (``portal:request-detail``)."""

from django.urls import path

from approvals import views

urlpatterns = [
    path("tenants/<str:slug>/requests/new/", views.request_new, name="request-new"),
    path(
        "tenants/<str:slug>/requests/validate/",
        views.RequestValidateView.as_view(),
        name="request-validate",
    ),
    path("requests/", views.request_list, name="request-list"),
    path("requests/<int:pk>/", views.request_detail, name="request-detail"),
    path("requests/<int:pk>/status/", views.request_status, name="request-status"),
    path("requests/<int:pk>/submit/", views.request_submit, name="request-submit"),
    path("requests/<int:pk>/cancel/", views.request_cancel, name="request-cancel"),
    path("requests/<int:pk>/approve/", views.request_approve, name="request-approve"),
    path("requests/<int:pk>/reject/", views.request_reject, name="request-reject"),
    path("requests/<int:pk>/retry/", views.request_retry, name="request-retry"),
    path("console/approvals/", views.approvals_queue, name="approvals-queue"),
    path("console/grants/", views.grants_timeline, name="grants-timeline"),
    path("tenants/<str:slug>/grants/", views.tenant_grants, name="tenant-grants"),
    path("tenants/<str:slug>/grants/new/", views.grant_new, name="tenant-grant-new"),
    path("grants/<int:pk>/extend/", views.grant_extend_view, name="grant-extend"),
]
