from django.apps import AppConfig


class AdviceConfig(AppConfig):
    name = "advice"
    verbose_name = "Quota advice"
    default_auto_field = "django.db.models.BigAutoField"
