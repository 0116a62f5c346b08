"""The GPU fleet app; ``ready`` registers the node token's OpenAPI description and the
fleet's count of MIG instances as the capacity of MIG flavors (``quotas.selectors.MIG_CAPACITY``)."""

from django.apps import AppConfig


class GpuAgentConfig(AppConfig):
    name = "gpu_agent"
    verbose_name = "GPU fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from gpu_agent.agent_api import schema  # noqa: F401 - registers the OpenAPI auth extension
        from gpu_agent.selectors import mig_capacity
        from quotas.selectors import MIG_CAPACITY

        if mig_capacity not in MIG_CAPACITY:
            MIG_CAPACITY.append(mig_capacity)
