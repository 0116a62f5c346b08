"""The inbox pages (a user's notifications), a tenant's team page and adopting a namespace. Included by ``portal/pages.py`` in the portal's
URL namespace."""

from django.urls import path

from tenants import views

urlpatterns = [
    path("inbox/", views.inbox, name="inbox"),
    path("inbox/read/", views.inbox_mark_all_read, name="inbox-read-all"),
    path("inbox/<int:pk>/read/", views.inbox_mark_read, name="inbox-read"),
    path("tenants/<str:slug>/team/", views.team, name="tenant-team"),
    path(
        "tenants/<str:slug>/team/<str:username>/role/",
        views.team_member_role,
        name="tenant-team-role",
    ),
    path(
        "console/tenants/<str:slug>/namespaces/<str:name>/adopt/",
        views.namespace_adoption,
        name="tenant-namespace-adopt",
    ),
    path(
        "tenants/<str:slug>/team/<str:username>/remove/",
        views.team_member_removal,
        name="tenant-team-remove",
    ),
]
