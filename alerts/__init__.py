"""alerts: what is wrong. Alert rules, alerts with their history, webhooks, the evaluation
(quota use at 80% warns, at 100% holds new work, R11; idle workloads are suspended after a
notice, R12) and the alert pages and API.

Acts on the cluster only through quotas: a hold through ``quotas.services.quota_set_hold``
(the hold is quotas' data, a ``QuotaHold`` row named ``alert:<id>``; quotas never asks alerts
who is held), a suspension through ``quotas.backends.workload_set_active``. Reads use through
``usage``. Its gauges (``metrics.alert_families``) are added to /metrics by the portal's URLs.
It registers no hook.
"""
