"""Reads for tenant data. Each takes the actor and sees only what the actor may see."""

from __future__ import annotations

import re

from django.db.models import Prefetch, QuerySet

from portal.errors import NotFound
from tenants.choices import MembershipRole
from tenants.models import ApiToken, Membership, Namespace, Tenant, User
from tenants.validators import DNS1123_LABEL_REGEX


def tenant_list_for_user(*, user: User) -> QuerySet[Tenant]:
    return (
        Tenant.objects.visible_to(user)
        .select_related("parent")
        .prefetch_related(Prefetch("namespaces", queryset=Namespace.objects.order_by("name")))
        .order_by("slug")
    )


def tenant_get_for_user(*, user: User, slug: str) -> Tenant:
    """The tenant, or NotFound (404) when it does not exist *or* the user may not see it, so
    that tenant names do not leak (the message does not repeat the slug either)."""
    tenant = None
    if re.fullmatch(DNS1123_LABEL_REGEX, slug):  # no query for what cannot be a slug ("\x00")
        tenant = Tenant.objects.visible_to(user).select_related("parent").filter(slug=slug).first()
    if tenant is None:
        raise NotFound("No such tenant, or it is not yours to see.")
    return tenant


def membership_role(*, user: User, tenant: Tenant) -> str | None:
    return (
        Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).first()
    )


def user_can_manage_tenant(*, user: User, tenant: Tenant) -> bool:
    """Platform admins, and the tenant's leads (who may file requests for it)."""
    return (
        user.is_platform_admin or membership_role(user=user, tenant=tenant) == MembershipRole.LEAD
    )


def namespace_list_for_tenant(*, tenant: Tenant) -> QuerySet[Namespace]:
    return Namespace.objects.filter(tenant=tenant).order_by("name")


def membership_list_for_tenant(*, tenant: Tenant) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(tenant=tenant).select_related("user").order_by("user__username")
    )


def api_token_list_for_user(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at")
