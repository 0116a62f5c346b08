"""The alerts app's configuration."""

from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    verbose_name = "Alerts"
    default_auto_field = "django.db.models.BigAutoField"

    # No hook into the apps below: a hold at 100% (R11) is written into quotas through
    # quotas.services.quota_set_hold, the alert gauges are added to /metrics by the portal's
    # URLs (portal/urls.py), and webhook deliveries are enqueued by task name (core.tasks).
