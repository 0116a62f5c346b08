"""``/metrics`` for Prometheus: quota, usage and sync gauges labelled by cluster, tenant and
flavor, read from the database at scrape time (a custom collector, so nothing is kept in a
worker's memory). The portal, which composes the apps, adds the families of apps above this
one to the view it routes (``metrics_view(extra=...)``: alerts' gauges); usage asks no app.

Prometheus' conventions hold for every family (tests/prometheus/test_conventions.py): names
``portal_<area>_<what>_<unit>`` in snake case, base units (seconds, bytes, ratios 0-1, not
percent), ``_total`` only on counters, timestamps as ``_timestamp_seconds``, and label names
from a fixed set whose values come from the portal's own bounded lists (clusters, tenants,
flavors, nodes, rule names, states), never ids, times or free text. The alerting rules and
Grafana dashboards built on these series are in ``deploy/prometheus/`` and ``deploy/grafana/``.

Access: ``Authorization: Bearer <METRICS_TOKEN>``, or a client address inside
``METRICS_ALLOWED_CIDRS``. Otherwise 401 (a token is configured but missing or wrong) or 403.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpu_agent.models import Node
from quotas.choices import is_gpu_resource
from quotas.models import Cluster, Quota, ResourceFlavor, TenantSync
from tenants.models import Tenant
from usage import selectors
from usage.choices import Metric
from usage.models import PrometheusSource

LABELS = ["cluster", "tenant", "flavor"]
USAGE_GAUGES = {
    Metric.QUOTA_USED: ("portal_usage_gpus_used", "GPUs in use (Kueue), latest 5-minute mean."),
    Metric.QUOTA_BORROWED: ("portal_usage_gpus_borrowed", "GPUs borrowed from the cohort."),
    Metric.GPUS_ALLOCATED: ("portal_usage_gpus_allocated", "GPUs requested by running pods."),
    Metric.GPU_UTILIZATION: (
        "portal_usage_gpu_utilization_ratio",
        "Mean GPU utilisation, 0 to 1, latest 5-minute mean.",
    ),
    Metric.WORKLOADS_PENDING: ("portal_usage_workloads_pending", "Pending Kueue workloads."),
}


def allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:
        return [ipaddress.ip_network(c, strict=False) for c in settings.METRICS_ALLOWED_CIDRS]
    except ValueError as exc:
        raise ImproperlyConfigured(f"METRICS_ALLOWED_CIDRS: {exc}") from exc


def access(request: HttpRequest) -> int | None:
    """None when the caller may scrape, else the status to answer (401 or 403)."""
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        if hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode()):
            return None
        return 401
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR") or "")
    except ValueError:
        address = None
    if address is not None and any(address in net for net in allowed_networks()):
        return None
    return 401 if token else 403


class PortalCollector(Collector):
    """Usage's families, then those of ``extra`` (callables returning metric families)."""

    def __init__(self, extra: Sequence[Callable[[], Iterable[Any]]] = ()) -> None:
        self.extra = tuple(extra)

    def collect(self) -> Iterable[Any]:
        clusters = dict(Cluster.objects.values_list("pk", "name"))
        tenants = dict(Tenant.objects.values_list("pk", "slug"))
        flavors = dict(ResourceFlavor.objects.values_list("pk", "name"))
        guaranteed = GaugeMetricFamily(
            "portal_quota_guaranteed_gpus", "Guaranteed GPUs (nominalQuota).", labels=LABELS
        )
        limit = GaugeMetricFamily(
            "portal_quota_limit_gpus", "GPU limit (nominal + borrowingLimit).", labels=LABELS
        )
        for c, t, f, resource, g, lim in Quota.objects.values_list(
            "quota_set__cluster_id", "quota_set__tenant_id", "flavor_id", "resource",
            "guaranteed", "limit",
        ):  # fmt: skip
            if is_gpu_resource(resource):
                labels = [clusters.get(c, ""), tenants.get(t, ""), flavors.get(f, "")]
                guaranteed.add_metric(labels, float(g))
                limit.add_metric(labels, float(lim))
        yield guaranteed
        yield limit
        families: dict[int, GaugeMetricFamily] = {
            m: GaugeMetricFamily(name, text, labels=LABELS)
            for m, (name, text) in USAGE_GAUGES.items()
        }
        for (c, t, f), values in sorted(selectors.usage_now().items()):
            labels = [clusters.get(c, ""), tenants.get(t, ""), flavors.get(f, "")]
            for metric, value in values.items():
                if metric in families:
                    scale = 0.01 if metric == Metric.GPU_UTILIZATION else 1.0  # percent -> ratio
                    families[metric].add_metric(labels, value * scale)
        yield from families.values()
        sync_state = GaugeMetricFamily(
            "portal_sync_in_sync", "1 when the cluster has the tenant's latest quotas.",
            labels=["cluster", "tenant", "state"],
        )  # fmt: skip
        sync_lag = GaugeMetricFamily(
            "portal_sync_generations_behind", "Desired minus applied quota generation.",
            labels=["cluster", "tenant"],
        )  # fmt: skip
        attempts = GaugeMetricFamily(
            "portal_sync_failed_attempts", "Failed pushes in a row.", labels=["cluster", "tenant"]
        )
        for c, t, state, desired, applied, tries in TenantSync.objects.values_list(
            "cluster_id", "tenant_id", "state", "desired_generation", "applied_generation",
            "attempts",
        ):  # fmt: skip
            pair = [clusters.get(c, ""), tenants.get(t, "")]
            sync_state.add_metric([*pair, state], 1.0 if desired <= applied else 0.0)
            sync_lag.add_metric(pair, float(max(desired - applied, 0)))
            attempts.add_metric(pair, float(tries))
        yield sync_state
        yield sync_lag
        yield attempts
        lag = GaugeMetricFamily(
            "portal_usage_rollup_lag_seconds", "Now minus the rollup watermark.",
            labels=["resolution"],
        )  # fmt: skip
        now = timezone.now()
        for resolution, marks in selectors.rollup_freshness().items():
            rolled_until = marks["rolled_until"]
            if rolled_until is not None:
                lag.add_metric([resolution], (now - rolled_until).total_seconds())
        yield lag
        yield from _agent_families(clusters)
        yield from _prometheus_source_families(clusters)
        for extra in self.extra:
            yield from extra()


def _timestamp(when: Any) -> float:
    return float(when.timestamp())


def _agent_families(clusters: dict[int, str]) -> Iterable[Any]:
    """When each GPU node's agent last reported (the "agent stale" alert compares it with
    ``time()``)."""
    last_report = GaugeMetricFamily(
        "portal_agent_last_report_timestamp_seconds",
        "When the node's agent last reported (Unix time).",
        labels=["cluster", "node"],
    )
    for name, cluster_id, at in Node.objects.exclude(last_report_at=None).values_list(
        "name", "cluster_id", "last_report_at"
    ):
        last_report.add_metric([clusters.get(cluster_id, ""), name], _timestamp(at))
    yield last_report


def _prometheus_source_families(clusters: dict[int, str]) -> Iterable[Any]:
    """How the clusters' Prometheus sources were last read."""
    up = GaugeMetricFamily(
        "portal_prometheus_source_up",
        "1 when the last reading of the cluster's Prometheus succeeded.",
        labels=["cluster"],
    )
    success = GaugeMetricFamily(
        "portal_prometheus_source_last_success_timestamp_seconds",
        "When the cluster's Prometheus was last read successfully (Unix time).",
        labels=["cluster"],
    )
    unknown = GaugeMetricFamily(
        "portal_prometheus_source_unknown_series",
        "Series in the last reading whose namespace no tenant owns (ignored).",
        labels=["cluster"],
    )
    rows = PrometheusSource.objects.filter(enabled=True).values_list(
        "cluster_id", "last_error", "last_success_at", "last_unknown_series"
    )
    for cluster_id, error, last_success, unknown_series in rows:
        name = clusters.get(cluster_id, "")
        up.add_metric([name], 0.0 if error or last_success is None else 1.0)
        if last_success is not None:
            success.add_metric([name], _timestamp(last_success))
        unknown.add_metric([name], float(unknown_series))
    yield up
    yield success
    yield unknown


def metrics_view(
    *, extra: Sequence[Callable[[], Iterable[Any]]] = ()
) -> Callable[[HttpRequest], HttpResponse]:
    """The ``/metrics`` view: usage's families and those of ``extra`` (each a callable
    returning metric families), which the portal's URLs pass in (alerts' gauges)."""

    @require_GET
    def metrics(request: HttpRequest) -> HttpResponse:
        return _metrics(request, extra)

    return metrics


def _metrics(request: HttpRequest, extra: Sequence[Callable[[], Iterable[Any]]]) -> HttpResponse:
    refused = access(request)
    if refused == 401:
        response = HttpResponse("A bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if refused == 403:
        return HttpResponse("Not allowed from this address.\n", status=403)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PortalCollector(extra))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
