"""The compiler's input from the database: a cluster and its tenants' quota sets as plain
specs (``quotas.kube.spec``), so that ``quotas.kube`` itself never touches Django. A fixed
number of queries, whatever the number of tenants.

It offers the hook through which an app above says which tenants have new work held
(``BLOCKED_TENANTS``: the alerts app's, R11)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from identity.selectors import tenant_groups
from quotas.kube.enforcement import KueueConfig
from quotas.kube.spec import ClusterSpec, FlavorSpec, NamespaceSpec, QuotaSpec, TenantSpec
from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor
from tenants.choices import MembershipRole
from tenants.models import Membership, Namespace, Tenant

# Which tenants have new work held on a cluster (quota use at 100% of the limit, R11): each
# hook takes ``cluster_id=`` and ``tenant_ids=`` and returns the blocked tenants' ids. The
# alerts app registers its selector in its AppConfig.ready(), so this app imports nothing
# above it; with no hook nobody is blocked.
BLOCKED_TENANTS: list[Callable[..., Iterable[int]]] = []


def blocked_tenant_ids(cluster: Cluster, tenant_ids: list[int]) -> set[int]:
    blocked: set[int] = set()
    for hook in BLOCKED_TENANTS:
        blocked.update(hook(cluster_id=cluster.pk, tenant_ids=tenant_ids))
    return blocked


def cluster_spec(cluster: Cluster) -> ClusterSpec:
    capacities: dict[int, dict[str, object]] = defaultdict(dict)
    for fr in FlavorResource.objects.filter(flavor__cluster=cluster):
        capacities[fr.flavor_id][fr.resource] = fr.capacity
    flavors = tuple(
        FlavorSpec(
            name=f.name,
            kind=f.kind,
            capacity=dict(capacities[f.pk]),  # type: ignore[arg-type]
            gpu_model=f.gpu_model,
            mig_profile=f.mig_profile,
            storage_class=f.storage_class,
            node_labels=dict(f.node_labels or {}),
            node_taints=tuple(f.node_taints or ()),
            time_slicing_replicas=f.time_slicing_replicas,
        )
        for f in ResourceFlavor.objects.filter(cluster=cluster).order_by("name")
    )
    return ClusterSpec(
        name=cluster.name,
        flavors=flavors,
        kubernetes_version=cluster.kubernetes_version,
        has_kueue=cluster.has_kueue,
        enforcement=cluster.enforcement,
        kueue_config=(
            KueueConfig.from_json(cluster.kueue_config) if cluster.kueue_config else None
        ),
        trusted_controllers=tuple(
            entry for entry in cluster.trusted_controllers or () if isinstance(entry, str)
        ),
        has_volcano=cluster.has_volcano,
        volcano_hierarchy=cluster.volcano_hierarchy,
    )


def tenant_specs(cluster: Cluster, *, tenant_ids: Iterable[int] | None = None) -> list[TenantSpec]:
    """Every tenant with a quota set on ``cluster`` (or only ``tenant_ids``), at the quota
    generation in force."""
    query = QuotaSet.objects.filter(cluster=cluster).select_related("tenant__parent")
    if tenant_ids is not None:
        query = query.filter(tenant_id__in=list(tenant_ids))
    quota_sets = list(query)
    ids = [qs.tenant_id for qs in quota_sets]
    items: dict[int, list[QuotaSpec]] = defaultdict(list)
    for q in Quota.objects.filter(quota_set__in=quota_sets).select_related("flavor"):
        items[q.quota_set_id].append(
            QuotaSpec(q.flavor.name, q.resource, q.guaranteed, q.limit, q.lending_limit)
        )
    namespaces: dict[int, list[NamespaceSpec]] = defaultdict(list)
    for ns in Namespace.objects.filter(tenant_id__in=ids).order_by("name"):
        namespaces[ns.tenant_id].append(NamespaceSpec(ns.name, ns.purpose, ns.quota_share))
    editors: dict[int, list[str]] = defaultdict(list)
    viewers: dict[int, list[str]] = defaultdict(list)
    for m in Membership.objects.filter(tenant_id__in=ids).select_related("user"):
        target = viewers if m.role == MembershipRole.VIEWER else editors
        target[m.tenant_id].append(m.user.get_username())
    groups = tenant_groups(ids)
    blocked = blocked_tenant_ids(cluster, ids)
    # A tenant others name as parent is a department (R14): its quota becomes its Cohort's.
    departments = set(
        Tenant.objects.filter(parent_id__in=ids).values_list("parent_id", flat=True).distinct()
    )
    specs = []
    for qs in quota_sets:
        tenant = qs.tenant
        specs.append(
            TenantSpec(
                slug=tenant.slug,
                generation=qs.generation,
                namespaces=tuple(namespaces[tenant.pk]),
                quotas=tuple(sorted(items[qs.pk], key=lambda i: (i.flavor, i.resource))),
                display_name=tenant.display_name,
                parent=tenant.parent.slug if tenant.parent else None,
                cohort=tenant.cohort,
                state=tenant.state,
                default_priority=tenant.default_priority,
                max_running_jobs=qs.max_running_jobs,
                max_queued_jobs=qs.max_queued_jobs,
                max_pods=qs.max_pods,
                storage_bytes=qs.storage_bytes,
                max_pvcs=qs.max_pvcs,
                editors=tuple(sorted(editors[tenant.pk])),
                viewers=tuple(sorted(viewers[tenant.pk])),
                editor_groups=tuple(groups.get(tenant.pk, ((), ()))[0]),
                viewer_groups=tuple(groups.get(tenant.pk, ((), ()))[1]),
                blocked=tenant.pk in blocked,
                department=tenant.pk in departments,
                fair_share_weight=qs.fair_share_weight,
                max_gpus_per_pod=qs.max_gpus_per_pod,
                max_cpu_per_pod=qs.max_cpu_per_pod,
                max_memory_per_pod=qs.max_memory_per_pod,
                inference_gpus=qs.inference_gpus,
                production_priority_allowed=tenant.production_priority_allowed,
                pod_bandwidth_max=tenant.pod_bandwidth_max,
            )
        )
    return sorted(specs, key=lambda s: s.slug)
