"""The GPU fleet app; ``ready`` registers the node token's OpenAPI description. (The fleet's
count of MIG instances reaches quotas as data it pushes, ``gpu_agent.services.capacity``: no
hook.)"""

from django.apps import AppConfig


class GpuAgentConfig(AppConfig):
    name = "gpu_agent"
    verbose_name = "GPU fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from gpu_agent.agent_api import schema  # noqa: F401 - registers the OpenAPI auth extension
