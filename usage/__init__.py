"""usage: what is used. Raw samples (partitioned by day, written with ``COPY``), their 5-minute,
hourly and daily rollups and retention, the collector that reads each cluster (pods, Kueue
ClusterQueue status and Workloads, ResourceQuota use), the agents' readings, and ``/metrics``.

Modules: ``models``, ``choices``, ``services`` (writes: samples, the agents' readings with a
throttle shared by every process, rollups, retention), ``selectors`` (reads for the apps
above), ``collector`` (the cluster side, through ``quotas.backends.cluster_backend``),
``metrics`` (Prometheus), ``demo`` (a simulated month), ``tasks``, ``api/``.

Above gpu_agent, quotas and tenants: it takes the agents' readings through gpu_agent's
``services.reports.REPORT_INGESTED`` hook (registered in ``apps.py``). Offers
``metrics.EXTRA_COLLECTORS`` to the apps above (alerts adds its gauges).
"""
