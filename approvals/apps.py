"""The approvals app's wiring: its handlers on the push hooks of ``quotas.sync``."""

from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The push is the quotas app's; it tells this one where a push stands through its
        # hooks, and requests move with it (approved -> applying -> applied / failed).
        from approvals.services import quota_requests_push_started, quota_requests_pushed
        from quotas.sync import PUSH_STARTED, PUSHED

        if quota_requests_push_started not in PUSH_STARTED:
            PUSH_STARTED.append(quota_requests_push_started)
        if quota_requests_pushed not in PUSHED:
            PUSHED.append(quota_requests_pushed)
