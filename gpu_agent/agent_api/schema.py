"""OpenAPI description of the node token authentication (loaded by GpuAgentConfig.ready)."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class NodeTokenScheme(OpenApiAuthenticationExtension):
    target_class = "gpu_agent.agent_api.authentication.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "Node token from POST /api/v1/agent/register/, sent as "
            '"Bearer <node token>". Accepted by the agent endpoints only.',
        }


class NodeTokenReportScheme(NodeTokenScheme):
    """The report endpoint's node token (its lookup also reads the node's open work): the same
    token; a component of its own because the schema names one authenticator class per
    component."""

    target_class = "gpu_agent.agent_api.authentication.NodeTokenWithWorkAuthentication"
    name = "nodeTokenReport"
