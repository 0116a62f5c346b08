"""Changes to quotas. This issue's part: onboarding a tenant from a tier (DESIGN flow 1).

Onboarding lives here, not in ``tenants``, because it touches tenants *and* quotas and the
dependencies point ``approvals -> quotas -> tenants``. When quota change requests land, the
onboarding is recorded as an auto-approved request as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from portal.errors import ValidationFailed
from quotas.models import Cluster, ResourceFlavor, TierTemplate
from quotas.services import quota_set_create_from_tier
from tenants.choices import MembershipRole, Priority
from tenants.models import Tenant, User
from tenants.services import audit_record, membership_set, tenant_create


@transaction.atomic
def tenant_onboard(
    *,
    slug: str,
    display_name: str,
    tier: TierTemplate,
    cluster: Cluster,
    actor: User | None,
    gpu_flavor: ResourceFlavor | None = None,
    parent: Tenant | None = None,
    cohort: str = "",
    description: str = "",
    default_priority: str = Priority.DEFAULT,
    leads: Sequence[User] = (),
) -> Tenant:
    """Create a tenant with its namespaces, its leads, and the tier's quotas on ``cluster``,
    all or nothing."""
    if parent is not None and parent.slug == slug:
        raise ValidationFailed.for_field("parent", "A tenant cannot be its own parent.")
    tenant = tenant_create(
        slug=slug,
        display_name=display_name,
        parent=parent,
        cohort=cohort,
        description=description,
        default_priority=default_priority,
        actor=actor,
    )
    for lead in leads:
        membership_set(tenant=tenant, user=lead, role=MembershipRole.LEAD, actor=actor)
    quota_set = quota_set_create_from_tier(
        tenant=tenant, cluster=cluster, tier=tier, gpu_flavor=gpu_flavor, actor=actor
    )
    audit_record(
        actor=actor,
        action="tenant.onboarded",
        obj=tenant,
        tenant=tenant,
        after={"tier": tier.name, "cluster": cluster.name, "generation": quota_set.generation},
    )
    return tenant
