"""LDAP sign-in (django-auth-ldap): the login form's password checked against the directory.

python-ldap compiles against OpenLDAP's and Cyrus SASL's headers, so it is an optional extra
(``requirements-ldap.lock``; ``make`` installs it where Debian's libldap2-dev and libsasl2-dev
are). This module is imported only where ``LDAP_SERVER_URI`` is set; settings refuse to start
with LDAP configured and the extra missing."""

from __future__ import annotations

from typing import Any

from django_auth_ldap.backend import LDAPBackend

from identity.choices import IdentitySource
from identity.services import identity_groups_apply


class PortalLDAPBackend(LDAPBackend):
    """Bind, user search and group search as configured (``AUTH_LDAP_*``); then the groups."""

    def authenticate_ldap_user(self, ldap_user: Any, password: str) -> Any:
        user = super().authenticate_ldap_user(ldap_user, password)
        if user is not None:
            identity_groups_apply(
                user=user, groups=ldap_user.group_names, provider=IdentitySource.LDAP
            )
        return user
