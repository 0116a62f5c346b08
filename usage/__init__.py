"""usage: what is used. Raw samples (partitioned by day, written with ``COPY``, each with its
source), their 5-minute, hourly and daily rollups and retention, the collector that reads each
cluster (pods, Kueue ClusterQueue status and Workloads, ResourceQuota use) and, where the admin
set one, its Prometheus (DCGM exporter, kube-state-metrics, Kueue, kubelet volume stats), the
agents' readings, and ``/metrics``.

Modules: ``models``, ``choices``, ``services`` (writes: samples, the agents' readings with a
throttle shared by every process, rollups, retention), ``selectors`` (reads for the apps
above), ``collector`` (the cluster side, through ``quotas.backends.cluster_backend``),
``prometheus`` (a cluster's Prometheus as a source: the HTTP client, series -> samples,
``prometheus_collect``), ``promql`` (the queries and label matchers, no I/O), ``metrics``
(the portal's own ``/metrics``), ``admin`` (the Prometheus sources), ``demo`` (a simulated
month), ``tasks``, ``api/``.

Above gpu_agent, quotas and tenants: it takes the agents' readings through gpu_agent's
``services.reports.REPORT_INGESTED`` notify hook (registered in ``apps.py``). Its /metrics
view takes the families of apps above as an argument (``metrics.metrics_view(extra=...)``,
given alerts' gauges by ``portal/urls.py``): it offers no hook.
"""
