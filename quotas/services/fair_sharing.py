"""A cluster's fair sharing as a platform admin sets it (``quotas.kube.fair_sharing``): the
mode compiled into every tenant's ClusterQueue, and the half-life and sampling of admission
fair sharing shown in the Kueue configuration the admin applies."""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction

from core.errors import ValidationFailed
from quotas.choices import FairSharing
from quotas.kube import fair_sharing
from quotas.models import Cluster, QuotaSet
from quotas.services.outbox import quota_set_repush
from tenants.models import User
from tenants.services import audit_record

# The Cluster fields these settings are kept in, by the name the API and the form use.
FAIR_SHARING_FIELDS = ("fair_sharing", "usage_half_life_hours", "usage_sampling_minutes")


def _whole(value: Any, *, field: str, low: int, high: int, what: str) -> int:
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"\s*\d{1,9}\s*", value):
        number = int(value)
    else:
        number = None
    if number is None or not low <= number <= high:
        raise ValidationFailed.for_field(
            field, f"{what} must be a whole number from {low} to {high}; got {value!r}."
        )
    return number


def fair_sharing_read(
    *,
    cluster: Cluster,
    fair_sharing_mode: Any = None,
    usage_half_life_hours: Any = None,
    usage_sampling_minutes: Any = None,
) -> fair_sharing.FairSharingSpec:
    """The settings ``cluster`` would have with these changes (None: as it is), refused with
    the field named where one is not allowed. Reads only."""
    mode = cluster.fair_sharing if fair_sharing_mode is None else fair_sharing_mode
    if mode not in FairSharing.values:
        raise ValidationFailed.for_field(
            "fair_sharing", f"{mode!r} is not one of {', '.join(FairSharing.values)}."
        )
    if mode != FairSharing.NONE and not cluster.has_kueue:
        raise ValidationFailed.for_field(
            "fair_sharing",
            f"Cluster {cluster.name} runs no Kueue: nothing there can share GPUs fairly.",
        )
    half_life = (
        cluster.usage_half_life_hours
        if usage_half_life_hours is None
        else _whole(
            usage_half_life_hours,
            field="usage_half_life_hours",
            low=fair_sharing.HALF_LIFE_HOURS_MIN,
            high=fair_sharing.HALF_LIFE_HOURS_MAX,
            what="The half-life of recent use, in hours,",
        )
    )
    sampling = (
        cluster.usage_sampling_minutes
        if usage_sampling_minutes is None
        else _whole(
            usage_sampling_minutes,
            field="usage_sampling_minutes",
            low=fair_sharing.SAMPLING_MINUTES_MIN,
            high=fair_sharing.SAMPLING_MINUTES_MAX,
            what="How often Kueue samples use, in minutes,",
        )
    )
    return fair_sharing.FairSharingSpec(
        mode=mode, half_life_hours=half_life, sampling_minutes=sampling
    )


def cluster_fair_sharing_spec(cluster: Cluster) -> fair_sharing.FairSharingSpec:
    return fair_sharing.FairSharingSpec(
        mode=cluster.fair_sharing,
        half_life_hours=cluster.usage_half_life_hours,
        sampling_minutes=cluster.usage_sampling_minutes,
    )


@transaction.atomic
def cluster_fair_sharing_set(
    *,
    cluster: Cluster,
    actor: User | None,
    fair_sharing_mode: Any = None,
    usage_half_life_hours: Any = None,
    usage_sampling_minutes: Any = None,
) -> Cluster:
    """Set how ``cluster`` shares fairly, audited; a new mode pushes every tenant on it again
    (their ClusterQueues change). Bad input changes nothing."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    wanted = fair_sharing_read(
        cluster=cluster,
        fair_sharing_mode=fair_sharing_mode,
        usage_half_life_hours=usage_half_life_hours,
        usage_sampling_minutes=usage_sampling_minutes,
    )
    after = {
        "fair_sharing": wanted.mode,
        "usage_half_life_hours": wanted.half_life_hours,
        "usage_sampling_minutes": wanted.sampling_minutes,
    }
    before = {field: getattr(cluster, field) for field in after}
    changed = [field for field in after if before[field] != after[field]]
    if not changed:
        return cluster
    for field in changed:
        setattr(cluster, field, after[field])
    cluster.save(update_fields=changed)
    audit_record(
        actor=actor,
        action="cluster.fair_sharing_set",
        obj=cluster,
        before={field: before[field] for field in changed},
        after={field: after[field] for field in changed},
    )
    if "fair_sharing" in changed:
        # Every tenant's ClusterQueue changes (as ``clusters.cluster_tenants_repush``).
        for quota_set in QuotaSet.objects.select_for_update().filter(cluster=cluster):
            quota_set_repush(quota_set)
    return cluster
