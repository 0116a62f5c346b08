from django.apps import AppConfig


class AdviceConfig(AppConfig):
    name = "advice"
    verbose_name = "Quota advice"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The request page (approvals, below this app) shows the what-if through its hook.
        from advice.views import request_watch_panel, request_what_if_panel
        from approvals.panels import request_panel_register

        request_panel_register(request_what_if_panel)
        # Once a change applied: the rollout indicators before and after, and the way back.
        request_panel_register(request_watch_panel)
