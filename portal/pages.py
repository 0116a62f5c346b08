"""The portal's HTML pages: the pages that combine apps (home, a tenant, the admin console)
are here; every app's own pages come from its ``urls.py``, all in the ``portal`` URL namespace
(``{% url 'portal:request-detail' pk %}``)."""

from django.urls import include, path

from alerts.selectors import alert_ids_closed
from approvals.selectors import quota_request_ids_closed
from portal import views
from quotas.sync import namespace_adoption_preview
from tenants import views as tenant_views
from usage.selectors import person_cap_use

app_name = "portal"

# The inbox's links to pages of the apps above tenants, and who may still open them.
INBOX_PAGE_CHECKS = {
    "portal:request-detail": quota_request_ids_closed,
    "portal:alert-detail": alert_ids_closed,
}

urlpatterns = [
    path("", views.home, name="home"),
    path("tenants/<str:slug>/", views.tenant_detail, name="tenant-detail"),
    path("console/", views.admin_console, name="console"),
    path("help/preemption/", views.help_preemption, name="help-preemption"),
    # The documentation site (make docs) under /help/; /help/preemption/ above stays the page
    # the tenant page links to, in the portal's own layout.
    path("help/", views.help_site, name="help"),
    path("help/<path:url>", views.help_site, name="help-page"),
    # Adopting a namespace: a tenants page shown with what quotas' push would write there
    # (composed here, so tenants asks no app above it).
    path(
        "console/tenants/<str:slug>/namespaces/<str:name>/adopt/",
        tenant_views.namespace_adoption,
        {"preview": namespace_adoption_preview},
        name="tenant-namespace-adopt",
    ),
    # The inbox (a tenants page) with the checks of the pages its links lead to in the apps
    # above tenants (composed here, so tenants asks no app above it).
    path(
        "inbox/",
        tenant_views.inbox,
        {"page_checks": INBOX_PAGE_CHECKS},
        name="inbox",
    ),
    # The team page (a tenants page) with each capped person's cap and use (R14).
    path(
        "tenants/<str:slug>/team/",
        tenant_views.team,
        {"person_caps": person_cap_use},
        name="tenant-team",
    ),
    path("", include("quotas.urls")),
    path("", include("approvals.urls")),
    path("", include("advice.urls")),
    path("", include("dashboards.urls")),
    path("", include("alerts.urls")),
    path("", include("tenants.urls")),
    path("", include("usage.urls")),
    path("", include("gpu_agent.urls")),
]
