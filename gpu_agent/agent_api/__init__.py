"""The agents' endpoints (``/api/v1/agent/``, node tokens only) and the admins' fleet
endpoints (``/api/v1/nodes/``, ``/api/v1/gpus/``, platform admins only)."""
