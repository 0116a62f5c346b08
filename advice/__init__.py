"""advice: what to change. Monthly quota suggestions from last month's usage, filed as draft
requests (guarantee >= 80% of the daily peak, limit within the elastic cap), and the what-if
replay of recorded workloads against a proposed quota (``replay`` is a pure simulator).

Modules: ``models``, ``selectors`` (suggestions, the what-if with its cache), ``services``
(computing suggestions, filing drafts through ``approvals.services``), ``replay``, ``tasks``,
``api/``, ``views`` and ``templates/`` (the tenant page's suggestions, the request page's
what-if, shown through ``approvals.panels``).

Top of the apps with alerts and dashboards; imports approvals, usage, quotas, tenants, core.
"""
