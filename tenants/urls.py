"""The inbox pages (a user's notifications) and a tenant's team page. Included by
``portal/pages.py`` in the portal's URL namespace, which also routes the page adopting a
namespace (``views.namespace_adoption``, given what quotas would write there)."""

from django.urls import path

from tenants import views

urlpatterns = [
    path("inbox/read/", views.inbox_mark_all_read, name="inbox-read-all"),
    path("inbox/<int:pk>/read/", views.inbox_mark_read, name="inbox-read"),
    path("tenants/<str:slug>/team/", views.team, name="tenant-team"),
    # Several people at once, and asks to join (issue 33).
    path("tenants/<str:slug>/team/bulk/", views.team_bulk_add, name="tenant-team-bulk"),
    path(
        "tenants/<str:slug>/team/asks/<int:pk>/approve/",
        views.team_join_decision,
        {"decision": "approve"},
        name="tenant-team-ask-approve",
    ),
    path(
        "tenants/<str:slug>/team/asks/<int:pk>/refuse/",
        views.team_join_decision,
        {"decision": "refuse"},
        name="tenant-team-ask-refuse",
    ),
    path("tenants/<str:slug>/join/", views.team_join, name="tenant-join"),
    path(
        "tenants/<str:slug>/join/<int:pk>/withdraw/",
        views.team_join_withdraw,
        name="tenant-join-withdraw",
    ),
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
