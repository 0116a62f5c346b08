"""The compiler's input from the database: a cluster and its tenants' quota sets as plain
specs (``quotas.kube.spec``), so that ``quotas.kube`` itself never touches Django. A fixed
number of queries, whatever the number of tenants.

Which tenants have new work held (R11) is quotas' own data (``QuotaHold``, written by
``quotas.services.quota_set_hold``): the loader asks no app above."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal

from identity.selectors import tenant_groups
from quotas.choices import CapSubject, GrantState
from quotas.kube.enforcement import KueueConfig
from quotas.kube.spec import (
    CapSpec,
    ClusterSpec,
    EgressSpec,
    FlavorSpec,
    NamespaceSpec,
    PersonSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.models import (
    Cluster,
    FlavorResource,
    GrantLine,
    PersonCap,
    Quota,
    QuotaHold,
    QuotaSet,
    ResourceFlavor,
)
from tenants.choices import MembershipRole
from tenants.models import Membership, Namespace, Tenant


def blocked_tenant_ids(cluster: Cluster, tenant_ids: list[int]) -> set[int]:
    """Which of ``tenant_ids`` have new work held on ``cluster`` (quota use at 100% of the
    limit, R11): those with a ``QuotaHold`` row from any source. One query."""
    return set(
        QuotaHold.objects.filter(cluster=cluster, tenant_id__in=tenant_ids)
        .values_list("tenant_id", flat=True)
        .distinct()
    )


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
            gpu_memory_mib=f.gpu_memory_mib,
            vgpu_split=f.vgpu_split,
            storage_driver=f.storage_driver,
            storage_iops=f.storage_iops,
            storage_throughput_mib=f.storage_throughput_mib,
            volume_attributes_class=f.volume_attributes_class,
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
        ingress_namespaces=_strings(cluster.tenant_ingress_namespaces),
        monitoring_namespaces=_strings(cluster.tenant_monitoring_namespaces),
        fair_sharing=cluster.fair_sharing,
        storage_classes=_strings(cluster.storage_classes),
        volume_attributes_classes=_strings(cluster.volume_attributes_classes),
        default_storage_class=cluster.default_storage_class,
        hami_version=cluster.hami_version,
    )


def egress_specs(value: object) -> tuple[EgressSpec, ...]:
    """The stored exceptions as specs; the compiler checks each again."""
    specs: list[EgressSpec] = []
    for rule in value if isinstance(value, list) else []:
        if isinstance(rule, dict) and isinstance(rule.get("port"), int):
            specs.append(
                EgressSpec(
                    port=rule["port"],
                    protocol=str(rule.get("protocol") or "TCP"),
                    namespace=str(rule.get("namespace") or ""),
                    cidr=str(rule.get("cidr") or ""),
                    tenant=str(rule.get("tenant") or ""),
                )
            )
    return tuple(specs)


def _strings(value: object) -> tuple[str, ...]:
    return (
        tuple(entry for entry in value if isinstance(entry, str)) if isinstance(value, list) else ()
    )


def people_specs(
    cluster: Cluster, tenant_ids: list[int], editors: dict[int, list[str]]
) -> dict[int, tuple[PersonSpec, ...]]:
    """Each tenant's capped people on ``cluster`` (R14): members with caps of their own, the
    pipeline account, and, where a platform admin set a default, every other member who may
    submit (leads and members; viewers cannot), their own lines over the default's. One
    query."""
    own: dict[tuple[int, str], dict[tuple[str, str], CapSpec]] = defaultdict(dict)
    pipeline: dict[int, dict[tuple[str, str], CapSpec]] = defaultdict(dict)
    default: dict[int, dict[tuple[str, str], CapSpec]] = defaultdict(dict)
    rows = PersonCap.objects.filter(tenant_id__in=tenant_ids, flavor__cluster=cluster).values_list(
        "tenant_id", "subject", "membership__user__username", "flavor__name", "resource", "amount"
    )
    for tenant_id, subject, username, flavor, resource, amount in rows:
        line = CapSpec(flavor, resource, amount)
        if subject == CapSubject.MEMBER:
            own[(tenant_id, username)][(flavor, resource)] = line
        elif subject == CapSubject.PIPELINE:
            pipeline[tenant_id][(flavor, resource)] = line
        else:
            default[tenant_id][(flavor, resource)] = line
    out: dict[int, tuple[PersonSpec, ...]] = {}
    for tenant_id in tenant_ids:
        specs = []
        for username in sorted(set(editors.get(tenant_id, ()))):
            lines = {**default.get(tenant_id, {}), **own.get((tenant_id, username), {})}
            if lines:
                specs.append(PersonSpec(username, tuple(lines[k] for k in sorted(lines))))
        if pipeline.get(tenant_id):
            lines = pipeline[tenant_id]
            specs.append(PersonSpec("", tuple(lines[k] for k in sorted(lines)), pipeline=True))
        if specs:
            out[tenant_id] = tuple(specs)
    return out


def tenant_specs(cluster: Cluster, *, tenant_ids: Iterable[int] | None = None) -> list[TenantSpec]:
    """Every tenant with a quota set on ``cluster`` (or only ``tenant_ids``), at the quota
    generation in force, its lines the standing ones plus what its active grants for a time
    add (``active_grant_lines``): the compiler is fed the quota in effect."""
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
    granted = active_grant_lines(cluster=cluster, tenant_ids=ids)
    for qs in quota_sets:
        if qs.tenant_id in granted:
            items[qs.pk] = with_grants(items[qs.pk], granted[qs.tenant_id])
    namespaces: dict[int, list[NamespaceSpec]] = defaultdict(list)
    for ns in Namespace.objects.filter(tenant_id__in=ids).order_by("name"):
        namespaces[ns.tenant_id].append(NamespaceSpec(ns.name, ns.purpose, ns.quota_share))
    editors: dict[int, list[str]] = defaultdict(list)
    viewers: dict[int, list[str]] = defaultdict(list)
    for m in Membership.objects.filter(tenant_id__in=ids).select_related("user"):
        target = viewers if m.role == MembershipRole.VIEWER else editors
        target[m.tenant_id].append(m.user.get_username())
    people = people_specs(cluster, ids, editors)
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
                egress=egress_specs(qs.egress_rules),
                people=people.get(tenant.pk, ()),
            )
        )
    return sorted(specs, key=lambda s: s.slug)


def with_grants(
    standing: Sequence[QuotaSpec], grants: dict[tuple[str, str], tuple[Decimal, Decimal]]
) -> list[QuotaSpec]:
    """The standing lines with what grants add (guaranteed and limit; the lending limit stays
    the standing one), and a line for each granted one the tenant has no standing line of."""
    out = []
    for q in standing:
        g, lim = grants.get((q.flavor, q.resource), (Decimal(0), Decimal(0)))
        out.append(
            QuotaSpec(q.flavor, q.resource, q.guaranteed + g, q.limit + lim, q.lending_limit)
        )
    have = {(q.flavor, q.resource) for q in standing}
    for (flavor, resource), (g, lim) in grants.items():
        if (flavor, resource) not in have:
            out.append(QuotaSpec(flavor, resource, g, lim, None))
    return out


def active_grant_lines(
    *, cluster: Cluster, tenant_ids: Sequence[int] | None = None
) -> dict[int, dict[tuple[str, str], tuple[Decimal, Decimal]]]:
    """Per tenant id: what its active grants add on ``cluster``, per (flavor name,
    resource), guaranteed and limit summed. One query."""
    rows = GrantLine.objects.filter(grant__cluster=cluster, grant__state=GrantState.ACTIVE)
    if tenant_ids is not None:
        rows = rows.filter(grant__tenant_id__in=list(tenant_ids))
    out: dict[int, dict[tuple[str, str], tuple[Decimal, Decimal]]] = defaultdict(dict)
    for tenant_id, flavor, resource, g, lim in rows.values_list(
        "grant__tenant_id", "flavor__name", "resource", "guaranteed", "limit"
    ):
        g0, l0 = out[tenant_id].get((flavor, resource), (Decimal(0), Decimal(0)))
        out[tenant_id][(flavor, resource)] = (g0 + g, l0 + lim)
    return out
