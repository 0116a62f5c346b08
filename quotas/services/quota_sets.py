"""Writing a tenant's quota set: the items replaced after ``quota_items_check``, the
generation bumped and the change audited, in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from quotas.choices import (
    CPU_RESOURCE,
    MEMORY_RESOURCE,
)
from quotas.kube.egress import read_egress_rule
from quotas.models import (
    Cluster,
    Quota,
    QuotaSet,
    TierTemplate,
)
from quotas.quantity import format_quantity
from quotas.services.rules import QuotaItem, SchedulingQuotas, quota_items_check
from tenants.models import Tenant, User
from tenants.services import audit_record, tenant_ensure_not_archived


def _snapshot(quota_set: QuotaSet) -> dict[str, Any]:
    return {
        "generation": quota_set.generation,
        "max_running_jobs": quota_set.max_running_jobs,
        "max_queued_jobs": quota_set.max_queued_jobs,
        "max_pods": quota_set.max_pods,
        "storage_bytes": None if quota_set.storage_bytes is None else str(quota_set.storage_bytes),
        "max_pvcs": quota_set.max_pvcs,
        "fair_share_weight": quota_set.fair_share_weight,
        "max_gpus_per_pod": quota_set.max_gpus_per_pod,
        "max_cpu_per_pod": None
        if quota_set.max_cpu_per_pod is None
        else format_quantity(quota_set.max_cpu_per_pod, CPU_RESOURCE),
        "max_memory_per_pod": None
        if quota_set.max_memory_per_pod is None
        else format_quantity(quota_set.max_memory_per_pod, MEMORY_RESOURCE),
        "inference_gpus": quota_set.inference_gpus,
        "egress_rules": quota_set.egress_rules,
        "items": [
            {
                "flavor": q.flavor.name,
                "resource": q.resource,
                "guaranteed": format_quantity(q.guaranteed, q.resource),
                "limit": format_quantity(q.limit, q.resource),
                "lending_limit": None
                if q.lending_limit is None
                else format_quantity(q.lending_limit, q.resource),
            }
            for q in quota_set.quotas.select_related("flavor").order_by("flavor__name", "resource")
        ],
    }


@transaction.atomic
def quota_set_write(
    *,
    tenant: Tenant,
    cluster: Cluster,
    items: Sequence[QuotaItem],
    scheduling: SchedulingQuotas,
    actor: User | None,
    tier: TierTemplate | None = None,
    reason: str = "",
) -> QuotaSet:
    """Replace a tenant's quota set on a cluster (creating it if needed) with ``items``.

    Items not listed are removed. The generation increases by one on every write, so the
    cluster side can tell which version it has applied. Callers that hold an approval pass it
    through ``reason``; only approved changes may reach this function (approvals issue).
    An archived tenant gets no new quotas (409)."""
    tenant_ensure_not_archived(tenant=tenant, doing="gets no new quotas")
    quota_set, created = QuotaSet.objects.select_for_update().get_or_create(
        tenant=tenant, cluster=cluster
    )
    # Lock the cluster's quota sets of the flavors involved, so two concurrent writes cannot
    # both pass the capacity check (PostgreSQL; SQLite serialises writers anyway).
    list(Cluster.objects.select_for_update().filter(pk=cluster.pk))
    check = quota_items_check(
        cluster=cluster, items=items, quota_set=quota_set, department=tenant.children.exists()
    )
    check.raise_if_invalid()
    before = None if created else _snapshot(quota_set)

    quota_set.quotas.all().delete()
    Quota.objects.bulk_create(
        Quota(
            quota_set=quota_set,
            flavor=item.flavor,
            resource=item.resource,
            guaranteed=item.guaranteed,
            limit=item.limit,
            lending_limit=item.lending_limit,
        )
        for item in items
    )
    quota_set.max_running_jobs = scheduling.max_running_jobs
    quota_set.max_queued_jobs = scheduling.max_queued_jobs
    quota_set.max_pods = scheduling.max_pods
    quota_set.storage_bytes = scheduling.storage_bytes
    quota_set.max_pvcs = scheduling.max_pvcs
    quota_set.fair_share_weight = scheduling.fair_share_weight
    quota_set.max_gpus_per_pod = scheduling.max_gpus_per_pod
    quota_set.max_cpu_per_pod = scheduling.max_cpu_per_pod
    quota_set.max_memory_per_pod = scheduling.max_memory_per_pod
    quota_set.inference_gpus = scheduling.inference_gpus
    if scheduling.egress_rules is not None:  # None: the exceptions in force stay
        quota_set.egress_rules = egress_rules_canonical(scheduling.egress_rules)
    if tier is not None:
        quota_set.tier = tier
    if not created:
        quota_set.generation += 1
    quota_set.save()
    after = _snapshot(quota_set)
    if reason:
        after["reason"] = reason
    audit_record(
        actor=actor,
        action="quota_set.written",
        object_id=f"{tenant.slug}@{cluster.name}",
        obj=quota_set,
        tenant=tenant,
        before=before,
        after=after,
    )
    return quota_set


def egress_rules_canonical(rules: Any) -> list[dict[str, Any]]:
    """Egress exceptions as stored: each read and checked (``quotas.kube.egress``), each once,
    in the order given. ValueError on one that is wrong (the request's check refused it
    already)."""
    found: list[dict[str, Any]] = []
    for rule in rules or []:
        value = read_egress_rule(rule).as_json()
        if value not in found:
            found.append(value)
    return found
