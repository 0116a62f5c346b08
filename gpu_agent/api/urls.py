"""Routes under /api/v1/mig/ (included from portal/api/urls.py)."""

from django.urls import path

from gpu_agent.api.views import MigModelListView, MigValidateView

urlpatterns = [
    path("models/", MigModelListView.as_view(), name="mig-models"),
    path("validate/", MigValidateView.as_view(), name="mig-validate"),
]
