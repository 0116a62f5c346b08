"""The alerts app's wiring: its hook into usage (the /metrics gauges), its tasks registered."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A hook into usage below this one (it imports nothing from here): the alert gauges
        # of /metrics. A hold at 100% (R11) is no hook: alerts writes it into quotas through
        # quotas.services.quota_set_hold. (Webhook deliveries are enqueued by task name:
        # core.tasks.)
        from alerts import metrics
        from usage.metrics import EXTRA_COLLECTORS

        if metrics.alert_families not in EXTRA_COLLECTORS:
            EXTRA_COLLECTORS.append(metrics.alert_families)
