"""Writing a tenant's quota set: the items replaced after ``quota_items_check``, the
generation bumped and the change audited, in one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from core.prepared import prepared_objects
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
from tenants.models import AuditEvent, Tenant, User
from tenants.services import audit_event, tenant_ensure_not_archived


def _snapshot(quota_set: QuotaSet, items: Iterable[QuotaItem]) -> dict[str, Any]:
    """The quota set as the audit keeps it, its lines ``items`` (those in force, or written)."""
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
            for q in sorted(items, key=lambda q: (q.flavor.name, q.resource))
        ],
    }


Line = tuple[int, str]  # (flavor id, resource)


def quota_set_lock(
    *, tenant: Tenant, cluster: Cluster, with_cluster: bool = False
) -> tuple[QuotaSet, bool]:
    """The tenant's quota set on ``cluster``, its row locked for the caller's transaction
    (created when it has none: ``created``). An archived tenant gets no new quotas (409).
    One query when the set exists (the tenant's archive date read with it).

    ``with_cluster``: the cluster's row is locked in the same statement, after the quota
    set's (the order every write takes them in), when the set exists; for a set just
    created the caller takes it (``cluster_lock``)."""
    lock = ("self", "cluster") if with_cluster else ("self",)

    def build() -> QuerySet[QuotaSet]:
        rows = (
            QuotaSet.objects.select_for_update(of=lock)
            .select_related("tenant", *(["cluster"] if with_cluster else []))
            .filter(tenant=tenant, cluster=cluster)
        )
        return (rows if rows.ordered else rows.order_by("pk"))[:1]  # first()

    # Compiled once per process: every approval and write runs it.
    found = prepared_objects(("quota-set-lock", with_cluster), build, (cluster.pk, tenant.pk))
    quota_set = found[0] if found else None
    if quota_set is None or quota_set.tenant.archived_at is not None:
        tenant_ensure_not_archived(tenant=tenant, doing="gets no new quotas")
    if quota_set is None:
        quota_set, created = QuotaSet.objects.select_for_update().get_or_create(
            tenant=tenant, cluster=cluster
        )
    else:
        created = False
    quota_set.cluster = cluster  # the caller's: named in the audit without a query
    return quota_set, created


def quota_set_lines(quota_set: QuotaSet) -> dict[Line, QuotaItem]:
    """The lines in force of a (locked) quota set, with their flavors."""
    return {
        (q.flavor_id, q.resource): QuotaItem(
            q.flavor, q.resource, q.guaranteed, q.limit, q.lending_limit
        )
        for q in quota_set.quotas.select_related("flavor")
    }


def cluster_lock(cluster: Cluster) -> None:
    """Lock the cluster's row until the caller's transaction ends: every write of a quota set
    on it takes this lock before its capacity check, so two concurrent writes cannot both pass
    a check that only one fits (PostgreSQL; SQLite serialises writers anyway). Take it last,
    after the reads that need no lock, just before the check and the writes."""
    list(Cluster.objects.select_for_update().filter(pk=cluster.pk).values_list("pk"))


def quota_set_store(
    *,
    quota_set: QuotaSet,
    created: bool,
    current: Mapping[Line, QuotaItem],
    items: Sequence[QuotaItem],
    scheduling: SchedulingQuotas,
    actor: User | None,
    tier: TierTemplate | None = None,
    reason: str = "",
) -> AuditEvent:
    """Write ``items`` as the quota set's lines in place of ``current`` (those in force, read
    under the set's lock; lines not listed are removed), its scheduling quotas and its next
    generation, once the caller has checked them under the cluster's lock. Returns the audit
    row of the change, not yet saved: the caller saves it with its own (one insert)."""
    before = None if created else _snapshot(quota_set, current.values())
    listed = {(item.flavor.pk, item.resource) for item in items}
    changed = [
        item
        for item in items
        if (old := current.get((item.flavor.pk, item.resource))) is None
        or (old.guaranteed, old.limit, old.lending_limit)
        != (item.guaranteed, item.limit, item.lending_limit)
    ]
    upsert = connection.vendor == "postgresql"
    # Removed lines go; on SQLite changed ones too, inserted again below: an upsert there
    # would make the guarantee totals' trigger (INSERT OR IGNORE) fail on its conflict.
    gone = [key for key in current if key not in listed]
    if not upsert:
        keys = ((item.flavor.pk, item.resource) for item in changed)
        gone += [key for key in keys if key in current]
    if gone:
        rows = Q()
        for flavor_id, resource in gone:
            rows |= Q(flavor_id=flavor_id, resource=resource)
        quota_set.quotas.filter(rows).delete()
    if changed:  # PostgreSQL: one statement, new lines inserted, changed ones updated in place
        Quota.objects.bulk_create(
            [
                Quota(
                    quota_set=quota_set,
                    flavor=item.flavor,
                    resource=item.resource,
                    guaranteed=item.guaranteed,
                    limit=item.limit,
                    lending_limit=item.lending_limit,
                )
                for item in changed
            ],
            update_conflicts=upsert,
            unique_fields=["quota_set", "flavor", "resource"] if upsert else None,
            update_fields=["guaranteed", "limit", "lending_limit"] if upsert else None,
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
    after = _snapshot(quota_set, items)
    if reason:
        after["reason"] = reason
    tenant = quota_set.tenant
    return audit_event(
        actor=actor,
        action="quota_set.written",
        object_id=f"{tenant.slug}@{quota_set.cluster.name}",
        obj=quota_set,
        tenant=tenant,
        before=before,
        after=after,
    )


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
    quota_set, created = quota_set_lock(tenant=tenant, cluster=cluster)
    current = {} if created else quota_set_lines(quota_set)
    cluster_lock(cluster)
    check = quota_items_check(
        cluster=cluster, items=items, quota_set=quota_set, department=tenant.children.exists()
    )
    check.raise_if_invalid()
    quota_set_store(
        quota_set=quota_set,
        created=created,
        current=current,
        items=items,
        scheduling=scheduling,
        actor=actor,
        tier=tier,
        reason=reason,
    ).save()
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
