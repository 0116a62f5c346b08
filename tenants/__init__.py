"""tenants: who. Users, tenants (teams and departments), namespaces, memberships and roles,
API tokens, notifications (the inbox), and the append-only audit trail (the lowest app, so
every service can write it).

Modules: ``models``, ``choices``, ``validators`` (DNS-1123 names), ``selectors`` (reads that
take the actor; ``tenant_get_for_user`` is the tenant-scoping chokepoint), ``services``
(writes, audited; ``team_*``: leads manage their own team's members and viewers),
``authentication`` (API tokens), ``tasks`` (notification emails), ``api/`` (tenants, members,
tokens, audit; ``api/base`` the scoped base views), ``views`` and ``templates/`` (the inbox, a
tenant's team page), ``context_processors`` (the header's unread count).

Above ``core`` only. Offers ``services.TENANT_CHANGED`` to the apps above (a change to a
tenant's members or namespaces: quotas pushes it again).
"""
