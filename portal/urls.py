from django.contrib import admin
from django.urls import include, path

from alerts.metrics import alert_families
from portal import observability, views
from usage import metrics as usage_metrics

urlpatterns = [
    path("api/v1/", include("portal.api.urls")),
    path("admin/", admin.site.urls),
    path("", include("identity.urls")),  # login, logout, the OpenID Connect redirect and callback
    # Probes: /livez the process alone, /readyz the database, cache and broker; /healthz (the
    # database alone) is kept for what already asks it.
    path("healthz", views.healthz, name="healthz"),
    path("livez", views.livez, name="livez"),
    path("readyz", views.readyz, name="readyz"),
    # Prometheus (token or networks): usage's gauges and, composed here, the alerts' gauges and
    # the HTTP and Celery figures (portal.observability).
    path(
        "metrics",
        usage_metrics.metrics_view(
            extra=[alert_families, observability.celery_families, observability.http_families]
        ),
        name="metrics",
    ),
    # Browsers ask for /favicon.ico on pages without a <link rel="icon"> (Django admin's).
    path("favicon.ico", views.favicon),
    path("", include("portal.pages")),
]

handler404 = "portal.views.page_not_found"
