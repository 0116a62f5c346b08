"""The GPU fleet: nodes and their agents, GPUs and MIG instances as reported, desired MIG
layouts, the MIG planner and its proposals, isolation probes, MIG through the GPU Operator.

- ``agent/`` (the node agent) and ``mig/`` (the MIG catalogue, layout rules and planner) are
  pure: no Django, no app. ``operator.py`` is the GPU Operator's pure compiler.
- ``models``, ``selectors`` (reads), ``services/`` (writes, one module per concern),
  ``conf`` (timing settings), ``tasks`` (Celery, thin).
- ``agent_api/`` (the agents' protocol and the admins' fleet endpoints), ``api/`` (the MIG
  catalogue and layout check), ``views/`` and ``templates/`` (the fleet pages), ``admin``.

Above ``quotas`` and ``tenants``; ``usage`` (above this app) takes the agents' readings
through ``services.reports.REPORT_INGESTED``.
"""
