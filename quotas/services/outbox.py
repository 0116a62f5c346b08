"""Pushing a change to a cluster without losing it: an outbox row written in the caller's
transaction and its delivery enqueued after commit (``outbox_record``); ``outbox_sweep``
re-sends what no worker took, ``outbox_reopen`` is an admin's retry. ``quota_set_repush`` and
``quota_sets_resync`` push a quota set again when something else the compiler reads changed."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.tasks import enqueue
from quotas.models import (
    Cluster,
    QuotaSet,
    SyncOutbox,
)
from tenants.models import Tenant, User

logger = logging.getLogger(__name__)


def outbox_record(*, quota_set: QuotaSet) -> SyncOutbox:
    """Write "sync this tenant on this cluster up to this generation" in the caller's
    transaction and enqueue its delivery after commit. If the broker is down then, the row
    stays and ``outbox_sweep`` sends it later: an approved change is never lost."""
    # One statement, the row's id returned: a row already there for this generation is kept
    # as it is (the update writes the generation it has), a new one inserted.
    (row,) = SyncOutbox.objects.bulk_create(
        [
            SyncOutbox(
                tenant_id=quota_set.tenant_id,
                cluster_id=quota_set.cluster_id,
                generation=quota_set.generation,
            )
        ],
        update_conflicts=True,
        unique_fields=["tenant", "cluster", "generation"],
        update_fields=["generation"],
    )
    transaction.on_commit(lambda: enqueue_outbox(row.pk))
    return row


def quota_set_repush(quota_set: QuotaSet) -> None:
    """Something the compiler reads besides the quota lines changed: the next generation and
    an outbox row, so the change is pushed like an approved one (and the reconcile does not
    mistake it for a hand edit). In the caller's transaction, ``quota_set`` locked."""
    quota_set.generation += 1
    quota_set.save(update_fields=["generation", "updated_at"])
    outbox_record(quota_set=quota_set)


@transaction.atomic
def quota_sets_resync(
    *, tenant: Tenant, actor: User | None, exclude: Cluster | None = None
) -> list[QuotaSet]:
    """The tenant changed in a way its clusters see (state, namespaces, members, the
    production grant): each of its quota sets is pushed again at the next generation
    (``exclude``: a cluster the caller pushes already). Nothing is pushed for an archived
    tenant; unarchiving it calls this again, so what changed meanwhile still arrives."""
    if Tenant.objects.filter(pk=tenant.pk, archived_at__isnull=False).exists():
        return []
    query = QuotaSet.objects.select_for_update().filter(tenant=tenant)
    if exclude is not None:
        query = query.exclude(cluster=exclude)
    quota_sets = list(query)
    for quota_set in quota_sets:
        quota_set_repush(quota_set)
    return quota_sets


def enqueue_outbox(outbox_id: int) -> None:
    """Send the row to a worker (``quotas.tasks.deliver_outbox``, by name, so that this module
    does not import the tasks that import it). A broker that is down is logged, not raised:
    the row stays and the sweep sends it later."""
    try:
        enqueue(DELIVER_OUTBOX_TASK, [outbox_id], queue=settings.SYNC_QUEUE or None)
    except Exception:
        logger.warning(
            "outbox %s not enqueued now; the sweep will send it", outbox_id, exc_info=True
        )


DELIVER_OUTBOX_TASK = "quotas.tasks.deliver_outbox"
OUTBOX_RESEND_AFTER = timedelta(minutes=10)
OUTBOX_FIRST_SEND_GRACE = timedelta(seconds=30)


def outbox_reopen(*, tenant: Tenant, cluster: Cluster) -> SyncOutbox | None:
    """Open the newest outbox row of ``tenant`` on ``cluster`` again and send it after commit
    (an admin's retry of a push that failed for good, once the cause is fixed). None when
    there is none."""
    row = SyncOutbox.objects.filter(tenant=tenant, cluster=cluster).order_by("-generation").first()
    if row is None:
        return None
    SyncOutbox.objects.filter(pk=row.pk).update(completed_at=None, last_error="")
    transaction.on_commit(lambda: enqueue_outbox(row.pk))
    return row


def outbox_sweep(*, now: datetime | None = None) -> list[int]:
    """Re-send open rows no worker took (never taken after a short grace, or taken long ago).
    Safe to run twice and from several beats: a row sent twice is taken twice, harmlessly."""
    now = now or timezone.now()
    due = SyncOutbox.objects.filter(completed_at__isnull=True).filter(
        Q(dispatched_at__isnull=True, created_at__lt=now - OUTBOX_FIRST_SEND_GRACE)
        | Q(dispatched_at__lt=now - OUTBOX_RESEND_AFTER)
    )
    ids = list(due.values_list("pk", flat=True)[:1000])
    for outbox_id in ids:
        enqueue_outbox(outbox_id)
    return ids
