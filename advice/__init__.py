"""advice: what to change. Monthly quota suggestions from last month's usage, filed as draft
requests (guarantee >= 80% of the daily peak, limit within the elastic cap), and the what-if
replay of recorded workloads against a proposed quota (``replay`` is a pure simulator), and
each applied change watched: the rollout indicators a week before and after, and a draft
back to the quota lines it replaced.

Modules: ``models``, ``selectors`` (suggestions, the what-if with its cache), ``watch`` (an
applied change's indicators before and after, its previous lines), ``services`` (computing
suggestions, filing drafts through ``approvals.services``, the draft back), ``replay``,
``tasks``, ``api/``, ``views`` and ``templates/`` (the tenant page's suggestions, the request
page's what-if and "Since it applied", shown through ``approvals.panels``, whose field hook
fills the API request detail's ``watch``).

Top of the apps with alerts and dashboards; imports approvals, usage, quotas, tenants, core.
"""
