"""dashboards: what to look at. Usage dashboards per tenant and for admins, the workload
profile report, showback with flavor prices; charts are JSON that the bundled plotly.js draws
(no CDN).

Modules: ``models`` (flavor prices), ``selectors`` (reads the usage rollups), ``services``,
``charts`` (figures as data), ``views``, ``templates/``, ``templatetags/``, ``staticfiles``
(the vendored plotly.js cartesian bundle, the hashed and compressed static storage), ``api/``, ``admin``.

Top of the apps with advice and alerts; reads usage, gpu_agent, quotas, tenants, core.
"""
