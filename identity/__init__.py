"""identity: signing in through the company's identity provider, and the groups that make roles.

Modules: ``models`` (``GroupMapping``: an identity group -> a tenant role or platform admin),
``choices``, ``services`` (mapping writes, audited; ``identity_groups_apply``: a user's
group-made memberships brought in line with the groups the provider sent, at each sign-in),
``selectors`` (mappings; the groups a tenant's RoleBindings name), ``oidc`` (the issuer's
discovery document, fetched once and cached), ``backends`` (OpenID Connect through
mozilla-django-oidc, LDAP through django-auth-ldap, local accounts behind
``LOCAL_LOGIN_ENABLED``), ``views`` (the login page, the OIDC redirect and callback, logout),
``admin``, ``api/`` (admin-only ``/api/v1/identity-groups/``).

Above ``tenants`` (it writes memberships and the audit trail through tenants' models and
services), below ``quotas`` (whose loader asks ``selectors.tenant_groups`` which groups a
tenant's RoleBindings bind).
"""
