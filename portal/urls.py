from django.contrib import admin
from django.urls import include, path

from portal import views
from usage import metrics as usage_metrics

urlpatterns = [
    path("api/v1/", include("portal.api.urls")),
    path("admin/", admin.site.urls),
    path("", include("identity.urls")),  # login, logout, the OpenID Connect redirect and callback
    path("healthz", views.healthz, name="healthz"),
    path("metrics", usage_metrics.metrics, name="metrics"),  # Prometheus (token or networks)
    # Browsers ask for /favicon.ico on pages without a <link rel="icon"> (Django admin's).
    path("favicon.ico", views.favicon),
    path("", include("portal.pages")),
]

handler404 = "portal.views.page_not_found"
