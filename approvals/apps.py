from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The outbox is enqueued by task name from the quotas app; registering the task in
        # every process (not only in workers) lets eager mode and routing apply to it.
        from approvals import tasks  # noqa: F401
