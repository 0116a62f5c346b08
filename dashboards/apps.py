from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "dashboards"
    verbose_name = "Usage dashboards and showback"
    default_auto_field = "django.db.models.BigAutoField"
