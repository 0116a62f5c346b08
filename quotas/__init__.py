"""quotas: how much. Clusters, resource flavors and their capacity, tier templates, quota
sets (with their generation), the rules a quota line must keep, the outbox, and the push of
quotas into clusters with its record of what each cluster has observed.

Modules: ``models``, ``choices``, ``quantity`` (Kubernetes quantities), ``selectors``
(reads), ``services`` (writes: quota sets, tiers, the outbox, holds, the rules),
``loader`` (database -> compiler specs), ``isolation`` (isolation levels: their layers and
the flavors each allows), ``backends`` (the way to a cluster), ``sync`` (the
push, drift repair, dry runs, reads of the cluster), ``tasks`` (delivery, sweep, reconcile),
``kube/`` (compiler, validation, applier: no Django), ``api/``, ``views`` (sync pages).

Below approvals, gpu_agent, usage and alerts, which it never imports. It offers them hooks:
``loader.BLOCKED_TENANTS`` (which tenants have new work held) and ``sync.PUSH_STARTED`` /
``sync.PUSHED`` (where a tenant's push stands) and ``selectors.MIG_CAPACITY`` (what a MIG
flavor's capacity is: the fleet's instances, observed or planned).
"""
