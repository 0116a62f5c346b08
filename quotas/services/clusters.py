"""Cluster-wide settings the push reads: how a cluster keeps tenants within their limits
(``cluster_enforcement_set``) and the namespaces it keeps for itself."""

from __future__ import annotations

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
from quotas.services.outbox import quota_set_repush
from tenants.models import User
from tenants.services import audit_record, namespace_reservations_set


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
    for quota_set in QuotaSet.objects.select_for_update().filter(cluster=cluster):
        quota_set_repush(quota_set)
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
    {"name", "kueue_config", "mig_operator_namespace", "reserved_namespaces"}
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
