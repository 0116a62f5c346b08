"""Onboarding (DESIGN flow 1): a tenant, its leads and its tier's quotas, all or nothing."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from approvals.services.checks import scheduling_fields
from approvals.services.deciding import quota_request_grant
from core.errors import (
    Conflict,
    ValidationFailed,
)
from quotas.models import (
    Cluster,
    ResourceFlavor,
    TierTemplate,
)
from quotas.services import (
    default_gpu_flavor,
    tier_flavor_check,
    tier_items,
    tier_scheduling,
)
from tenants.choices import MembershipRole, Priority
from tenants.models import Tenant, User
from tenants.services import (
    audit_record,
    membership_set,
    tenant_create,
)


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
    """Create a tenant with its namespaces, its leads and the tier's quotas on ``cluster``, all
    or nothing. The quotas go through an auto-approved request (source "system"), so the
    audit trail has no gap."""
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
    gpu_flavor = gpu_flavor or default_gpu_flavor(cluster=cluster)
    if gpu_flavor.cluster_id != cluster.pk:
        raise ValidationFailed.for_field(
            "gpu_flavor",
            f"flavor {gpu_flavor.name!r} belongs to cluster {gpu_flavor.cluster.name!r}, not {cluster.name!r}",
        )
    tier_flavor_check(gpu_flavor)
    try:
        request = quota_request_grant(
            tenant=tenant,
            cluster=cluster,
            items=tier_items(tier=tier, gpu_flavor=gpu_flavor),
            scheduling=scheduling_fields(tier_scheduling(tier)),
            reason=f"onboarding on tier {tier.name}",
            actor=actor,
            tier=tier,
            # A tier that sets GPUs apart for inference, or a tenant whose work defaults to
            # production, is made to run at the production priority: the admin who onboards
            # it grants that too (R15).
            production_priority=True
            if (tier.inference_gpus or default_priority == Priority.PRODUCTION)
            else None,
        )
    except Conflict as exc:
        # The caller chose a tier, not items: name the tier and keep every reason.
        reasons = [m for messages in exc.fields.values() for m in messages]
        raise ValidationFailed(
            f"tier {tier.name!r} does not fit on {cluster.name}: {exc.message}",
            fields={"tier": reasons},
        ) from exc
    audit_record(
        actor=actor,
        action="tenant.onboarded",
        obj=tenant,
        tenant=tenant,
        after={
            "tier": tier.name,
            "cluster": cluster.name,
            "generation": request.approved_generation,
            "request": request.pk,
        },
    )
    return tenant
