"""quotas: how much. Clusters, resource flavors and their capacity, tier templates, quota
sets (with their generation), the rules a quota line must keep, the outbox, and the push of
quotas into clusters with its record of what each cluster has observed.

Modules: ``models``, ``choices``, ``quantity`` (Kubernetes quantities), ``selectors``
(reads), ``services`` (writes: quota sets, tiers, the outbox, holds, the rules),
``loader`` (database -> compiler specs), ``isolation`` (isolation levels: their layers and
the flavors each allows), ``backends`` (the way to a cluster), ``sync`` (the
push, drift repair, dry runs, reads of the cluster), ``tasks`` (delivery, sweep, reconcile),
``kube/`` (compiler, validation, applier: no Django), ``api/``, ``views`` (sync pages).

Below approvals, gpu_agent, usage and alerts, which it never imports. It offers them notify
hooks only (they are told, never asked): ``sync.PUSH_STARTED`` / ``sync.PUSHED`` (where a
tenant's push stands). What it needs from above is written into its own data through its
services: a hold at 100% (``QuotaHold``, ``services.quota_set_hold``, called by alerts) and
what the fleet's GPUs are partitioned into (``FleetNodeCapacity``,
``services.fleet_node_capacity_set``, called by gpu_agent). See docs/develop/hooks.md.
"""
