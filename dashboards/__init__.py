"""dashboards: what to look at. Usage dashboards per tenant and for admins, the workload
profile report, showback with flavor prices; charts are built with Plotly's Python API (every
property checked), embedded as JSON, and drawn by the bundled plotly.js (no CDN).

Modules: ``models`` (flavor prices), ``selectors`` (reads the usage rollups), ``services``,
``charts`` (the figures, plotly.graph_objects), ``views``, ``templates/``, ``templatetags/``,
``staticfiles`` (the vendored plotly.js cartesian bundle, the hashed and compressed static
storage), ``api/``, ``admin``.

Top of the apps with advice and alerts; reads usage, gpu_agent, quotas, tenants, core.
"""
