"""The quotas app's wiring: its hook into tenants (a tenant change
pushes its quota sets again)."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from quotas.services import quota_sets_resync
        from tenants.services import TENANT_CHANGED

        if quota_sets_resync not in TENANT_CHANGED:
            TENANT_CHANGED.append(quota_sets_resync)
