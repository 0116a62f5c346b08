"""Writes of the GPU fleet, one module per concern. Keyword-only, typed, atomic, audited
(state changes; agents' reports are observations and are not audited, except a stale node
coming back). The modules import each other one way only, and never ``gpu_agent.tasks``
(tasks import services; a service sends a task by name, ``core.tasks.enqueue``):

- ``nodes``: join tokens, registration, node tokens, a node's cluster, stale nodes.
- ``layouts``: desired MIG layouts (set, drained, what the agent has to apply, its results,
  overdue ones failed).
- ``reports``: an agent's report stored (GPUs, MIG instances, the node seen) and what it
  confirms or releases among the layouts; its readings handed on to ``REPORT_INGESTED``.
- ``plans``: the MIG planner's proposal for a demand, and applying one while the GPUs are
  still as the planner saw them.
- ``proposals``: the planner run periodically per cluster, its proposals stored and applied.
- ``probes``: isolation probes (R30), asked for and recorded.
- ``mig_operator``: MIG through NVIDIA's GPU Operator (ConfigMap, node labels, state read back).
- ``cluster_nodes``: what each cluster's Node objects say of the portal's nodes (the GPUs and
  MIG instances it confirms, which bound fleet capacity).
- ``capacity``: each node's part of MIG flavors' capacity pushed into quotas
  (``quotas.services.fleet_node_capacity_set``) whenever a report, a layout, a reading of the
  cluster's Nodes, a stale mark or a node's cluster changes it; quotas never asks the fleet.

``common`` holds the few helpers several of them share.
"""
