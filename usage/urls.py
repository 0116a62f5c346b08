"""The tenant's workloads page (in the portal's URL namespace, included by portal/pages.py)."""

from django.urls import path

from usage import views

urlpatterns = [
    path("tenants/<str:slug>/workloads/", views.workloads, name="tenant-workloads"),
    path("tenants/<str:slug>/people/caps/", views.person_caps, name="tenant-person-caps"),
    *(
        path(
            f"tenants/<str:slug>/workloads/<int:pk>/{action}/",
            views.workload_suspension,
            {"action": action},
            name=f"tenant-workload-{action}",
        )
        for action in ("suspend", "resume")
    ),
]
