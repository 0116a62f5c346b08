"""The inbox pages (a user's notifications) and a tenant's team page. Included by
``portal/pages.py`` in the portal's URL namespace, which also routes the page adopting a
namespace (``views.namespace_adoption``, given what quotas would write there)."""

from django.urls import path

from tenants import views

urlpatterns = [
    path("inbox/read/", views.inbox_mark_all_read, name="inbox-read-all"),
    path("inbox/<int:pk>/read/", views.inbox_mark_read, name="inbox-read"),
    path("tenants/<str:slug>/team/", views.team, name="tenant-team"),
    path(
        "tenants/<str:slug>/team/<str:username>/role/",
        views.team_member_role,
        name="tenant-team-role",
    ),
    path(
        "tenants/<str:slug>/team/<str:username>/remove/",
        views.team_member_removal,
        name="tenant-team-remove",
    ),
]
