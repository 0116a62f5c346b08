"""Alert gauges for ``/metrics`` (added to ``usage.metrics.metrics_view`` by the portal's URLs,
``portal/urls.py``): read from the database at scrape time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from alerts.choices import OPEN_STATES, ActionState, DeliveryState
from alerts.models import Alert, WebhookDelivery


def alert_families() -> Iterable[Any]:
    open_alerts = GaugeMetricFamily(
        "portal_alerts_open",
        "Open alerts (firing or acknowledged) by rule, severity and state.",
        labels=["rule", "severity", "state", "cluster", "tenant"],
    )
    held = GaugeMetricFamily(
        "portal_tenant_new_work_held",
        "1 while a tenant's new work is held on a cluster (quota use at the limit, R11).",
        labels=["cluster", "tenant"],
    )
    suspended = GaugeMetricFamily(
        "portal_workloads_suspended_idle",
        "Idle workloads the portal suspended and nobody reactivated yet.",
        labels=["cluster", "tenant"],
    )
    rows = (
        Alert.objects.filter(state__in=OPEN_STATES)
        .values("rule__name", "severity", "state", "cluster__name", "tenant__slug", "action_state")
        .annotate(count=Count("pk"))
        .order_by()
    )
    held_pairs: set[tuple[str, str]] = set()
    suspended_counts: dict[tuple[str, str], int] = {}
    totals: dict[tuple[str, str, str, str, str], int] = {}
    for r in rows:
        cluster, tenant = r["cluster__name"] or "", r["tenant__slug"] or ""
        key = (r["rule__name"], r["severity"], r["state"], cluster, tenant)
        totals[key] = totals.get(key, 0) + r["count"]
        if r["action_state"] == ActionState.BLOCKED:
            held_pairs.add((cluster, tenant))
        elif r["action_state"] == ActionState.SUSPENDED:
            suspended_counts[(cluster, tenant)] = (
                suspended_counts.get((cluster, tenant), 0) + r["count"]
            )
    for key, count in sorted(totals.items()):
        open_alerts.add_metric(list(key), float(count))
    for pair in sorted(held_pairs):
        held.add_metric(list(pair), 1.0)
    for pair, count in sorted(suspended_counts.items()):
        suspended.add_metric(list(pair), float(count))
    pending = GaugeMetricFamily(
        "portal_alert_webhook_deliveries_pending", "Webhook notifications not sent yet."
    )
    pending.add_metric(
        [], float(WebhookDelivery.objects.filter(state=DeliveryState.PENDING).count())
    )
    return [open_alerts, held, suspended, pending]
