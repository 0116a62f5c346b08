"""The push tells the apps above where it stands through the hooks quotas offers
(``quotas.sync.PUSH_STARTED`` / ``PUSHED``): in order, and in the transaction that records the
push, so what a hook derives commits with what the cluster observed, or neither does and the
outbox row stays open for the retry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from quotas import sync
from quotas.choices import SyncState
from quotas.models import QuotaSet, SyncOutbox, TenantSync
from quotas.services import DELIVER_OUTBOX_TASK, outbox_record


@pytest.fixture
def hooks() -> Iterator[tuple[list[Callable[..., object]], list[Callable[..., object]]]]:
    saved = list(sync.PUSH_STARTED), list(sync.PUSHED)
    yield sync.PUSH_STARTED, sync.PUSHED
    sync.PUSH_STARTED[:], sync.PUSHED[:] = saved


def test_the_hooks_hear_the_start_and_the_end_of_a_delivery(world, hooks):
    started, pushed = hooks
    heard: list[tuple[Any, ...]] = []
    started.append(lambda **kw: heard.append(("started", kw["tenant_id"], kw["generation"])))
    pushed.append(
        lambda **kw: heard.append(("pushed", kw["tenant_id"], kw["generation"], kw["outcome"].ok))
    )
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    row = outbox_record(quota_set=quota_set)

    outcome = sync.outbox_deliver(outbox_id=row.pk)  # demo-a100 keeps quotas in the portal

    assert outcome is not None and outcome.ok
    team_a, generation = world.team_a.pk, quota_set.generation
    assert heard == [("started", team_a, generation), ("pushed", team_a, generation, True)]


def test_a_hook_that_fails_records_nothing_and_the_row_stays_open(world, hooks):
    _, pushed = hooks

    def failing(**_: Any) -> None:
        raise RuntimeError("the database went away")

    pushed.append(failing)
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    row = outbox_record(quota_set=quota_set)

    with pytest.raises(RuntimeError):
        sync.outbox_deliver(outbox_id=row.pk)

    row.refresh_from_db()
    assert row.completed_at is None  # the sweep or the task's retry sends it again
    assert not TenantSync.objects.filter(tenant=world.team_a, cluster=world.a100).exists()

    pushed.remove(failing)
    assert sync.outbox_deliver(outbox_id=row.pk).ok  # type: ignore[union-attr]
    row.refresh_from_db()
    assert row.completed_at is not None
    sync_row = TenantSync.objects.get(tenant=world.team_a, cluster=world.a100)
    assert (sync_row.state, sync_row.applied_generation) == (
        SyncState.IN_SYNC,
        quota_set.generation,
    )
    assert not SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.a100, completed_at__isnull=True
    ).exists()


def test_the_outbox_is_delivered_by_a_quotas_task():
    from celery import current_app

    current_app.loader.import_default_modules()  # what a worker does when it starts
    assert DELIVER_OUTBOX_TASK == "quotas.tasks.deliver_outbox"
    assert DELIVER_OUTBOX_TASK in current_app.tasks
    # Messages queued by the previous release still find a task under the old name.
    assert "approvals.tasks.deliver_outbox" in current_app.tasks
