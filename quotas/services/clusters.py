"""Cluster-wide settings the push reads: how a cluster keeps tenants within their limits
(``cluster_enforcement_set``) and the namespaces it keeps for itself."""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction

from core.errors import ValidationFailed
from quotas.choices import (
    Enforcement,
)
from quotas.kube import enforcement
from quotas.models import (
    Cluster,
    QuotaSet,
)
from quotas.services.fair_sharing import cluster_fair_sharing_set, fair_sharing_read
from quotas.services.outbox import quota_set_repush
from tenants.models import Namespace, User
from tenants.services import audit_record, namespace_reservations_set
from tenants.validators import DNS1123_LABEL_MAX, DNS1123_LABEL_REGEX

# The Cluster fields naming the namespaces let into every tenant's namespaces (the tenant
# NetworkPolicy's ingress), with what each is in words.
TENANT_TRAFFIC_FIELDS = {
    "tenant_ingress_namespaces": "the ingress controller runs there",
    "tenant_monitoring_namespaces": "monitoring runs there",
}


@transaction.atomic
def cluster_enforcement_set(*, cluster: Cluster, mode: str, actor: User | None) -> Cluster:
    """Choose how ``cluster`` keeps tenants within their limits (``quotas.kube.enforcement``)
    and push every tenant's objects again at the next generation. Refused, with the field
    and why, where the cluster cannot run the mode; bad input changes nothing."""
    if mode not in Enforcement.values:
        raise ValidationFailed.for_field(
            "enforcement", f"{mode!r} is not one of {', '.join(Enforcement.values)}."
        )
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if mode == Enforcement.KUEUE:
        if not cluster.has_kueue:
            raise ValidationFailed.for_field(
                "enforcement",
                f"Cluster {cluster.name} runs no Kueue: only a namespace split can bound its "
                "tenants.",
            )
        if (
            enforcement.kubernetes_minor(cluster.kubernetes_version)
            < enforcement.POLICY_MIN_VERSION
        ):
            raise ValidationFailed.for_field(
                "enforcement",
                f"Cluster {cluster.name} runs Kubernetes {cluster.kubernetes_version}; the "
                "admission policy this mode needs is there from 1.30.",
            )
    if cluster.enforcement == mode:
        return cluster
    before = {"enforcement": cluster.enforcement}
    cluster.enforcement = mode
    cluster.save(update_fields=["enforcement"])
    audit_record(
        actor=actor,
        action="cluster.enforcement_set",
        obj=cluster,
        before=before,
        after={"enforcement": mode},
    )
    cluster_tenants_repush(cluster=cluster)
    return cluster


def cluster_namespace_rules(cluster: Cluster) -> list[tuple[str, str]]:
    """(pattern, why) for the namespaces ``cluster`` keeps beside the built-in system ones
    (``tenants.namespaces``): the namespace its Kueue configuration names, its GPU Operator's
    namespace and its ``reserved_namespaces`` (a trailing ``*`` matches a prefix)."""
    rules: list[tuple[str, str]] = []
    kueue_namespace = (cluster.kueue_config or {}).get("namespace")
    if kueue_namespace:
        rules.append((str(kueue_namespace), f"Kueue runs there on {cluster.name}"))
    if cluster.mig_operator_namespace:
        rules.append(
            (cluster.mig_operator_namespace, f"the GPU Operator runs there on {cluster.name}")
        )
    for field, why in TENANT_TRAFFIC_FIELDS.items():
        value = getattr(cluster, field, None)
        for name in value if isinstance(value, list) else []:
            if isinstance(name, str) and name.strip():
                rules.append((name.strip(), f"{why} on {cluster.name}: it reaches every tenant"))
    reserved = cluster.reserved_namespaces if isinstance(cluster.reserved_namespaces, list) else []
    for pattern in reserved:
        if isinstance(pattern, str) and pattern.strip():
            rules.append(
                (pattern.strip(), f"cluster {cluster.name} reserves it ({pattern.strip()})")
            )
    return rules


# The Cluster fields ``cluster_namespace_rules`` reads: a save that changes none of them
# leaves the cluster's reservations as they are.
RESERVING_FIELDS = frozenset(
    {
        "name",
        "kueue_config",
        "mig_operator_namespace",
        "reserved_namespaces",
        *TENANT_TRAFFIC_FIELDS,
    }
)


def cluster_namespaces_reserve(*, cluster_id: int) -> None:
    """Tell tenants which namespaces cluster ``cluster_id`` keeps for itself
    (``cluster_namespace_rules``, as ``cluster:<id>`` in ``tenants.NamespaceReservation``), so
    that no tenant is given one; a cluster that is gone reserves none. Called whenever one of
    ``RESERVING_FIELDS`` may have changed: a cluster saved or deleted (``quotas.receivers``,
    which covers Django admin) and Kueue's configuration read from the cluster
    (``quotas.sync.kueue_config_refresh``)."""
    cluster = Cluster.objects.only(*RESERVING_FIELDS).filter(pk=cluster_id).first()
    namespace_reservations_set(
        source=f"cluster:{cluster_id}",
        rules=cluster_namespace_rules(cluster) if cluster is not None else [],
    )


def tenant_traffic_namespaces_read(value: Any, *, field: str) -> list[str]:
    """The namespace names ``value`` lists (each once, in order), for one of
    ``TENANT_TRAFFIC_FIELDS``; refused, naming ``field``, where one is not a namespace name or
    is a tenant's: a tenant's namespace let into every tenant would reach all the others."""
    if not isinstance(value, list) or not all(isinstance(entry, str) for entry in value):
        raise ValidationFailed.for_field(field, "A list of namespace names.")
    found: list[str] = []
    for entry in value:
        name = entry.strip()
        if len(name) > DNS1123_LABEL_MAX or not re.fullmatch(DNS1123_LABEL_REGEX, name):
            raise ValidationFailed.for_field(
                field,
                f"{name!r} is not a namespace name: lower-case letters, digits and '-', starting "
                f"and ending with a letter or digit, at most {DNS1123_LABEL_MAX} characters.",
            )
        if name not in found:
            found.append(name)
    owned = Namespace.objects.filter(name__in=found).select_related("tenant").order_by("name")
    for namespace in owned:
        raise ValidationFailed.for_field(
            field,
            f"{namespace.name} is tenant {namespace.tenant.slug}'s namespace: let into every "
            "tenant's namespaces, it would let that tenant reach all the others.",
        )
    return found


@transaction.atomic
def cluster_tenant_traffic_set(
    *, cluster: Cluster, actor: User | None, **values: list[str]
) -> Cluster:
    """Set the namespaces ``cluster`` lets into every tenant's namespaces (keyword arguments
    among ``TENANT_TRAFFIC_FIELDS``), checked by ``tenant_traffic_namespaces_read``, audited,
    and push every tenant on it again at the next generation. Bad input changes nothing."""
    unknown = sorted(set(values) - set(TENANT_TRAFFIC_FIELDS))
    if unknown:
        raise ValidationFailed.for_field(unknown[0], "Not a setting of the cluster's traffic.")
    wanted = {
        field: tenant_traffic_namespaces_read(value, field=field) for field, value in values.items()
    }
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = {field: getattr(cluster, field) for field in wanted}
    changed = [field for field in wanted if before[field] != wanted[field]]
    if not changed:
        return cluster
    for field in changed:
        setattr(cluster, field, wanted[field])
    cluster.save(update_fields=changed)
    audit_record(
        actor=actor,
        action="cluster.tenant_traffic_set",
        obj=cluster,
        before={field: before[field] for field in changed},
        after={field: wanted[field] for field in changed},
    )
    cluster_tenants_repush(cluster=cluster)
    return cluster


def cluster_tenants_repush(*, cluster: Cluster) -> None:
    """Push every tenant on ``cluster`` again (something of the cluster the compiler reads
    changed), in the caller's transaction."""
    for quota_set in QuotaSet.objects.select_for_update().filter(cluster=cluster):
        quota_set_repush(quota_set)


@transaction.atomic
def cluster_update(
    *,
    cluster: Cluster,
    actor: User | None,
    enforcement: str | None = None,
    fair_sharing: str | None = None,
    usage_half_life_hours: Any = None,
    usage_sampling_minutes: Any = None,
    **traffic: list[str],
) -> Cluster:
    """What a platform admin changes of a cluster through the API, all or nothing: the
    enforcement mode (``cluster_enforcement_set``), the namespaces let into tenants'
    namespaces (``cluster_tenant_traffic_set``) and fair sharing
    (``cluster_fair_sharing_set``)."""
    for field, value in traffic.items():
        tenant_traffic_namespaces_read(value, field=field)  # refused before anything changes
    fair = {
        "fair_sharing_mode": fair_sharing,
        "usage_half_life_hours": usage_half_life_hours,
        "usage_sampling_minutes": usage_sampling_minutes,
    }
    fair_sharing_read(cluster=cluster, **fair)
    if enforcement is not None:
        cluster = cluster_enforcement_set(cluster=cluster, mode=enforcement, actor=actor)
    if traffic:
        cluster = cluster_tenant_traffic_set(cluster=cluster, actor=actor, **traffic)
    if any(value is not None for value in fair.values()):
        cluster = cluster_fair_sharing_set(cluster=cluster, actor=actor, **fair)
    return cluster
