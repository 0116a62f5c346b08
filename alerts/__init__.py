"""alerts: what is wrong. Alert rules, alerts with their history, webhooks, the evaluation
(quota use at 80% warns, at 100% holds new work, R11; idle workloads are suspended after a
notice, R12) and the alert pages and API.

Acts on the cluster only through quotas: a hold through ``quotas.services.quota_set_hold``
(and the ``quotas.loader.BLOCKED_TENANTS`` hook it registers, which says who is held), a
suspension through ``quotas.backends.workload_set_active``. Reads use through ``usage``.
"""
