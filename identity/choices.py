from django.db import models


class GroupRole(models.TextChoices):
    """What a group makes its members: a role in one tenant, or platform admin."""

    LEAD = "lead", "Lead"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"
    PLATFORM_ADMIN = "platform-admin", "Platform admin"


# Stronger first: a user in two groups of one tenant gets the stronger role.
TENANT_ROLE_RANK = {GroupRole.LEAD: 3, GroupRole.MEMBER: 2, GroupRole.VIEWER: 1}


class IdentitySource(models.TextChoices):
    OIDC = "oidc", "OpenID Connect"
    LDAP = "ldap", "LDAP"
