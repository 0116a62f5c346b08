from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "dashboards"
    verbose_name = "Usage dashboards and showback"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dashboards import staticfiles  # noqa: F401 - registers the plotly bundle's check
