"""Django signal receivers of the quotas app, connected in ``QuotasConfig.ready``. Each only
calls a service: a cluster saved or deleted however it was (Django admin, a factory, the demo,
a fixture) tells tenants which namespaces it keeps for itself
(``quotas.services.cluster_namespaces_reserve``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from quotas.models import Cluster
from quotas.services import RESERVING_FIELDS, cluster_namespaces_reserve


def cluster_saved(
    sender: type[Cluster],
    instance: Cluster,
    update_fields: Iterable[str] | None = None,
    **_: Any,
) -> None:
    if update_fields is not None and not RESERVING_FIELDS.intersection(update_fields):
        return
    cluster_namespaces_reserve(cluster_id=instance.pk)


def cluster_deleted(sender: type[Cluster], instance: Cluster, **_: Any) -> None:
    cluster_namespaces_reserve(cluster_id=instance.pk)
