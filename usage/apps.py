from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        from gpu_agent.services.reports import REPORT_INGESTED
        from usage.services import agent_readings_record

        if settings.USAGE_AGENT_SAMPLES and agent_readings_record not in REPORT_INGESTED:
            REPORT_INGESTED.append(agent_readings_record)
        from usage.metrics import allowed_networks

        allowed_networks()  # a bad METRICS_ALLOWED_CIDRS fails at start, not at a scrape
