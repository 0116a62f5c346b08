"""Holding a tenant's new work on a cluster at 100% (R11) and allowing it again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from quotas.models import QuotaHold, QuotaSet
from quotas.services.outbox import quota_set_repush
from tenants.services import audit_record


@transaction.atomic
def quota_set_hold(
    *,
    tenant_id: int,
    cluster_id: int,
    held: bool,
    source: str,
    detail: Mapping[str, Any] | None = None,
) -> QuotaSet | None:
    """New work of a tenant on a cluster is held by ``source`` (``held``: its ClusterQueue's
    ``stopPolicy: Hold``, R11) or that source's hold is lifted. The hold is quotas' data (a
    ``QuotaHold`` row per source, e.g. ``alert:<id>``): the tenant stays held while any
    source holds it, and the loader reads the rows when its objects are compiled. This writes
    the row, pushes the change at the next generation through the outbox and audits it
    (``tenant.new_work_held`` / ``tenant.new_work_allowed``, with ``detail``). None when the
    tenant has no quotas on the cluster (the hold is kept for when it has)."""
    if held:
        QuotaHold.objects.update_or_create(
            tenant_id=tenant_id,
            cluster_id=cluster_id,
            source=source,
            defaults={"detail": dict(detail or {})},
        )
    else:
        QuotaHold.objects.filter(tenant_id=tenant_id, cluster_id=cluster_id, source=source).delete()
    quota_set = (
        QuotaSet.objects.select_for_update()
        .select_related("tenant", "cluster")
        .filter(tenant_id=tenant_id, cluster_id=cluster_id)
        .first()
    )
    if quota_set is None:
        return None
    quota_set_repush(quota_set)
    cluster, tenant = quota_set.cluster, quota_set.tenant
    hold, lifted = {"stopPolicy": "Hold"}, {"stopPolicy": "None"}
    audit_record(
        actor=None,
        action="tenant.new_work_held" if held else "tenant.new_work_allowed",
        obj=cluster,
        tenant=tenant,
        object_id=f"{cluster.name}: {tenant.slug}",
        before=None if held else hold,
        after={**(hold if held else lifted), **(detail or {})},
    )
    return quota_set
