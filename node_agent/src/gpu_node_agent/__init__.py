"""The node agent: reports a GPU node's inventory to the portal and applies MIG layouts.

It imports nothing from Django (``gpu-node-agent`` runs on GPU nodes without the portal's
dependencies); NVML is reached through ``gpu_node_agent.backend.Backend``.
"""

AGENT_VERSION = "1.0"
