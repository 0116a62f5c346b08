"""Reads for clusters, flavors, tiers and quotas, with normalised GPU units (R5)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Prefetch, QuerySet, Sum

from quotas.choices import is_gpu_resource
from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor, TierTemplate
from tenants.models import Tenant


def gpu_units(amount: Decimal, *, resource: str, weight: Decimal) -> Decimal:
    """Normalised GPU units of ``amount`` of ``resource`` (0 for CPU, memory, storage)."""
    return amount * weight if is_gpu_resource(resource) else Decimal(0)


@dataclass(frozen=True)
class EffectiveQuota:
    flavor: ResourceFlavor
    resource: str
    guaranteed: Decimal
    limit: Decimal
    lending_limit: Decimal | None

    @property
    def borrowing_limit(self) -> Decimal:
        return self.limit - self.guaranteed

    @property
    def guaranteed_gpu_units(self) -> Decimal:
        return gpu_units(self.guaranteed, resource=self.resource, weight=self.flavor.gpu_weight)

    @property
    def limit_gpu_units(self) -> Decimal:
        return gpu_units(self.limit, resource=self.resource, weight=self.flavor.gpu_weight)


@dataclass
class EffectiveQuotaSet:
    quota_set: QuotaSet
    items: list[EffectiveQuota] = field(default_factory=list)

    @property
    def cluster(self) -> Cluster:
        return self.quota_set.cluster

    @property
    def guaranteed_gpu_units(self) -> Decimal:
        return sum((i.guaranteed_gpu_units for i in self.items), Decimal(0))

    @property
    def limit_gpu_units(self) -> Decimal:
        return sum((i.limit_gpu_units for i in self.items), Decimal(0))


def _quota_sets(tenant_ids: Iterable[int]) -> QuerySet[QuotaSet]:
    return (
        QuotaSet.objects.filter(tenant_id__in=list(tenant_ids))
        .select_related("cluster", "tier", "tenant")
        .prefetch_related(
            Prefetch(
                "quotas",
                queryset=Quota.objects.select_related("flavor").order_by(
                    "flavor__name", "resource"
                ),
            )
        )
        .order_by("cluster__name")
    )


def _effective(quota_set: QuotaSet) -> EffectiveQuotaSet:
    return EffectiveQuotaSet(
        quota_set=quota_set,
        items=[
            EffectiveQuota(q.flavor, q.resource, q.guaranteed, q.limit, q.lending_limit)
            for q in quota_set.quotas.all()
        ],
    )


def tenant_effective_quotas(*, tenant: Tenant) -> list[EffectiveQuotaSet]:
    """A tenant's quotas per cluster, with normalised GPU units. Constant number of queries."""
    return [_effective(qs) for qs in _quota_sets([tenant.pk])]


def effective_quotas_for_tenants(
    *, tenants: Iterable[Tenant]
) -> dict[int, list[EffectiveQuotaSet]]:
    """The same for many tenants at once (cards on "My tenants"), in a constant number of queries."""
    tenants = list(tenants)
    result: dict[int, list[EffectiveQuotaSet]] = {t.pk: [] for t in tenants}
    for quota_set in _quota_sets(result):
        result[quota_set.tenant_id].append(_effective(quota_set))
    return result


def guarantees_by_flavor(
    *, cluster: Cluster, exclude_quota_set: QuotaSet | None = None
) -> dict[tuple[int, str], Decimal]:
    """Sum of all tenants' guarantees per (flavor id, resource) on ``cluster``."""
    rows = Quota.objects.filter(quota_set__cluster=cluster)
    if exclude_quota_set is not None:
        rows = rows.exclude(quota_set=exclude_quota_set)
    return {
        (row["flavor_id"], row["resource"]): row["total"]
        for row in rows.values("flavor_id", "resource").annotate(total=Sum("guaranteed"))
    }


def cluster_list() -> QuerySet[Cluster]:
    return Cluster.objects.order_by("name")


def flavor_list(*, cluster: Cluster | None = None) -> QuerySet[ResourceFlavor]:
    flavors = ResourceFlavor.objects.select_related("cluster").prefetch_related(
        Prefetch("resources", queryset=FlavorResource.objects.order_by("resource"))
    )
    if cluster is not None:
        flavors = flavors.filter(cluster=cluster)
    return flavors.order_by("cluster__name", "name")


def tier_list() -> QuerySet[TierTemplate]:
    return TierTemplate.objects.order_by("sort_order", "name")


@dataclass(frozen=True)
class FlavorAllocation:
    flavor: ResourceFlavor
    resource: str
    capacity: Decimal
    guaranteed: Decimal

    @property
    def free(self) -> Decimal:
        return self.capacity - self.guaranteed


def cluster_allocations(*, cluster: Cluster) -> list[FlavorAllocation]:
    """Per flavor and resource: capacity and the sum of all tenants' guarantees."""
    totals = guarantees_by_flavor(cluster=cluster)
    return [
        FlavorAllocation(
            fr.flavor, fr.resource, fr.capacity, totals.get((fr.flavor_id, fr.resource), Decimal(0))
        )
        for fr in FlavorResource.objects.filter(flavor__cluster=cluster)
        .select_related("flavor")
        .order_by("flavor__name", "resource")
    ]
