"""The alerts app's wiring: its hooks into quotas and usage, its tasks registered."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Hooks into the apps below this one (they import nothing from here): which tenants
        # are blocked on a cluster (the compiler's TenantSpec.blocked, R11), and the alert
        # gauges of /metrics. (Webhook deliveries are enqueued by task name: core.tasks.)
        from alerts import metrics, selectors
        from quotas import loader
        from usage.metrics import EXTRA_COLLECTORS

        if selectors.blocked_tenant_ids not in loader.BLOCKED_TENANTS:
            loader.BLOCKED_TENANTS.append(selectors.blocked_tenant_ids)
        if metrics.alert_families not in EXTRA_COLLECTORS:
            EXTRA_COLLECTORS.append(metrics.alert_families)
