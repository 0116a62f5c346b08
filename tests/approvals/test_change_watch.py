"""Each change watched (issue 33): an applied request's page and API detail compare the
tenant's rollout indicators on its cluster (mean GPU utilisation, queue wait, evictions and
preemptions, borrowing) over the week before and the week after it applied, as that week
accrues, and offer its tenant's leads and the admins a draft back to the previous numbers."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from advice.watch import change_watch
from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve
from quotas.choices import GPU_RESOURCE
from quotas.models import Quota, SyncOutbox
from quotas.sync import outbox_deliver
from tenants.models import AuditEvent
from tests.approvals.conftest import URL, file
from tests.pages import logged_in, main
from usage.choices import Metric, Resolution
from usage.models import Rollup, Workload

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def applied_change(world: Any, at: datetime) -> QuotaChangeRequest:
    """team-a's A100 guarantee 6 → 8 (limit 10), approved and applied at ``at``."""
    request = file(world)
    quota_request_approve(request=request, approver=world.admin)
    request.refresh_from_db()
    row = SyncOutbox.objects.get(
        tenant=world.team_a, cluster=world.a100, generation=request.approved_generation
    )
    outbox_deliver(outbox_id=row.pk)
    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED
    events = AuditEvent.objects.filter(object_id=f"#{request.pk}", action="quota_request.applied")
    assert events.update(created_at=at) == 1
    return request


def rollup(
    world: Any, bucket: datetime, metric: int, samples: int, total: float, **key: Any
) -> None:
    """An hourly rollup row of team-a on demo-a100's A100 flavor unless ``key`` says otherwise
    (``flavor=None``: none, as Kueue's admission figures are per tenant)."""
    flavor = key.get("flavor", world.a100_gpu)
    Rollup.objects.create(
        resolution=Resolution.HOUR,
        bucket=bucket,
        metric=metric,
        cluster_id=key.get("cluster", world.a100).pk,
        tenant_id=key.get("tenant", world.team_a).pk,
        flavor_id=flavor.pk if flavor is not None else 0,
        samples=samples,
        sum=total,
        min=0,
        max=total / samples,
    )


def workload(world: Any, name: str, created: datetime, **fields: Any) -> Workload:
    defaults: dict[str, Any] = {
        "cluster": world.a100,
        "tenant": world.team_a,
        "namespace": "team-a-training",
        "uid": f"uid-{name}",
        "updated_at": created,
    }
    return Workload.objects.create(name=name, created_at=created, **(defaults | fields))


def usage_around(world: Any, applied: datetime) -> None:
    """Known rows: before, GPU utilisation 40% and 42% (mean 41%), 100 GPUs in use summed
    with none borrowed, waits of 10 and 20 minutes, 3 evictions and 2 preemptions; after,
    63%, 25 of 100 borrowed, a wait of 45 seconds, none evicted. Around them, rows that must
    not count: another tenant's, another cluster's, and older than the week before."""
    util, used, borrowed = Metric.GPU_UTILIZATION, Metric.QUOTA_USED, Metric.QUOTA_BORROWED
    rollup(world, applied - 2 * DAY, util, 10, 400.0)
    rollup(world, applied - HOUR, util, 10, 420.0)
    rollup(world, applied - 2 * DAY, used, 10, 100.0)
    rollup(world, applied + HOUR, util, 12, 756.0)
    rollup(world, applied + HOUR, used, 10, 100.0)
    rollup(world, applied + HOUR, borrowed, 10, 25.0)
    rollup(world, applied - 8 * DAY, util, 10, 1000.0)  # older than the week before
    rollup(world, applied + HOUR, util, 10, 10.0, tenant=world.team_b)
    rollup(world, applied + HOUR, util, 10, 10.0, cluster=world.h100, flavor=world.h100_gpu)
    for i, wait in enumerate((600.0, 1200.0)):
        created = applied - 3 * DAY + i * HOUR
        workload(
            world, f"before-{i}", created,
            admitted_at=created + timedelta(seconds=wait), queue_wait_s=wait,
            finished_at=created + DAY, state="finished",
            evictions=3 if i == 0 else 0, preemptions=2 if i == 0 else 0,
        )  # fmt: skip
    workload(
        world, "after", applied + 2 * HOUR,
        admitted_at=applied + 2 * HOUR + timedelta(seconds=45), queue_wait_s=45.0,
        finished_at=applied + 3 * HOUR, state="finished",
    )  # fmt: skip
    workload(
        world, "other-tenant", applied + HOUR, tenant=world.team_b,
        admitted_at=applied + 2 * HOUR, queue_wait_s=3600.0, evictions=9,
    )  # fmt: skip


def indicators(seen: Any) -> dict[str, tuple[float | None, float | None]]:
    return {i.key: (i.before, i.after) for i in seen.indicators}


# --- the figures ------------------------------------------------------------------------------


def test_the_indicators_come_from_the_usage_before_and_after(world):
    applied = (timezone.now() - 10 * DAY).replace(minute=0, second=0, microsecond=0)
    request = applied_change(world, applied)
    usage_around(world, applied)
    rollup(world, applied + 8 * DAY, Metric.GPU_UTILIZATION, 10, 1000.0)  # past the week after

    seen = change_watch(request=request)

    assert seen is not None and seen.complete and seen.days_words == "7 of 7 days"
    assert seen.applied_at == applied and seen.after_end == applied + 7 * DAY
    assert indicators(seen) == {
        "gpu_utilization": (41.0, 63.0),
        "queue_wait": (900.0, 45.0),
        "evictions": (3.0, 0.0),
        "preemptions": (2.0, 0.0),
        "borrowing": (0.0, 25.0),
    }
    assert [i.words for i in seen.indicators] == [
        "mean GPU utilisation 41% → 63%",
        "mean queue wait 15 minutes → 45 seconds",
        "evictions 3 → 0",
        "preemptions 2 → 0",
        "borrowing 0% → 25%",
    ]
    assert seen.summary.startswith("Mean GPU utilisation 41% → 63%; mean queue wait")


def test_a_change_applied_three_days_ago_shows_the_days_so_far(world):
    now = timezone.now()
    applied = now - 3 * DAY - 5 * HOUR
    request = applied_change(world, applied)
    rollup(world, applied - HOUR, Metric.GPU_UTILIZATION, 4, 200.0)
    rollup(world, applied + HOUR, Metric.GPU_UTILIZATION, 4, 280.0)

    seen = change_watch(request=request, now=now)

    assert seen is not None and not seen.complete
    assert (seen.days_after, seen.days_words) == (3, "3 of 7 days so far")
    assert seen.after_end == now
    assert indicators(seen)["gpu_utilization"] == (50.0, 70.0)
    # Nothing else was recorded: said so, not shown as zero.
    assert indicators(seen)["queue_wait"] == (None, None)
    assert "mean queue wait: nothing recorded in either week" in seen.summary
    body = main(logged_in(world.alice).get(f"/requests/{request.pk}/"))
    assert "3 of 7 days so far" in body and "Mean GPU utilisation 50% → 70%" in body


def test_without_workload_rows_the_wait_comes_from_kueues_histogram(world):
    applied = timezone.now() - 8 * DAY
    request = applied_change(world, applied)
    flavorless = {"flavor": None}
    rollup(world, applied - HOUR, Metric.ADMISSIONS, 12, 4.0, **flavorless)
    rollup(world, applied - HOUR, Metric.ADMISSION_WAIT, 12, 1200.0, **flavorless)
    rollup(world, applied + HOUR, Metric.ADMISSIONS, 12, 10.0, **flavorless)
    rollup(world, applied + HOUR, Metric.ADMISSION_WAIT, 12, 600.0, **flavorless)

    seen = change_watch(request=request)

    assert seen is not None and indicators(seen)["queue_wait"] == (300.0, 60.0)
    assert "mean queue wait 5 minutes → 60 seconds" in seen.summary


def test_no_usage_recorded_is_said_in_words(world):
    request = applied_change(world, timezone.now() - 2 * DAY)

    seen = change_watch(request=request)
    assert seen is not None and not seen.any_data
    body = main(logged_in(world.alice).get(f"/requests/{request.pk}/"))
    assert "Nothing was recorded for the tenant on this cluster" in body
    detail = logged_api(world.alice).get(f"{URL}{request.pk}/").json()["watch"]
    assert detail["any_data"] is False and detail["days_after"] == 2
    assert all(i["before"] is None and i["after"] is None for i in detail["indicators"])


def test_a_request_not_applied_has_no_such_section(world):
    request = file(world)
    quota_request_approve(request=request, approver=world.admin)  # approved, not yet applied
    request.refresh_from_db()
    assert request.status == RequestStatus.APPROVED

    assert change_watch(request=request) is None
    assert "Since it applied" not in main(logged_in(world.alice).get(f"/requests/{request.pk}/"))
    assert logged_api(world.alice).get(f"{URL}{request.pk}/").json()["watch"] is None


def logged_api(user: Any) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_api_detail_carries_the_figures_in_its_declared_shape(world):
    from drf_spectacular.generators import SchemaGenerator

    applied = (timezone.now() - 10 * DAY).replace(minute=0, second=0, microsecond=0)
    request = applied_change(world, applied)
    usage_around(world, applied)

    detail = logged_api(world.alice).get(f"{URL}{request.pk}/").json()["watch"]

    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    assert set(detail) == set(schemas["ChangeWatchOutput"]["properties"])
    assert set(detail["indicators"][0]) == set(schemas["WatchIndicatorOutput"]["properties"])
    assert detail["complete"] is True and detail["days_total"] == 7
    assert {i["key"]: (i["before"], i["after"]) for i in detail["indicators"]}[
        "gpu_utilization"
    ] == (41.0, 63.0)
    assert detail["previous_items"] == [
        {"flavor": "a100-80gb", "resource": GPU_RESOURCE, "guaranteed": "6", "limit": "10"}
    ]
    assert detail["revert_offered"] is True


# --- the way back -----------------------------------------------------------------------------


def test_the_revert_draft_holds_the_previous_quota_and_filing_it_works(world):
    request = applied_change(world, timezone.now() - 3 * DAY)
    alice = logged_in(world.alice)

    response = alice.post(f"/requests/{request.pk}/revert/")

    draft = QuotaChangeRequest.objects.get(status=RequestStatus.DRAFT)
    assert response.status_code == 302 and response["Location"] == f"/requests/{draft.pk}/"
    assert (draft.status, draft.requester, draft.tenant, draft.cluster) == (
        RequestStatus.DRAFT, world.alice, world.team_a, world.a100,
    )  # fmt: skip
    assert f"before request #{request.pk}" in draft.reason
    assert [(i.flavor, i.resource, i.guaranteed, i.limit) for i in draft.items.all()] == [
        (world.a100_gpu, GPU_RESOURCE, Decimal(6), Decimal(10))
    ]
    # The lead reviews it on its page and files it; once approved the quota is 6 / 10 again.
    assert "Review it, then submit it" in main(alice.get(response["Location"]))
    assert alice.post(f"/requests/{draft.pk}/submit/").status_code == 302
    draft.refresh_from_db()
    assert draft.status == RequestStatus.PENDING
    quota_request_approve(request=draft, approver=world.admin)
    quota = Quota.objects.get(
        quota_set__tenant=world.team_a, flavor=world.a100_gpu, resource=GPU_RESOURCE
    )
    assert (quota.guaranteed, quota.limit) == (Decimal(6), Decimal(10))


@pytest.mark.parametrize(
    ("who", "page", "sees_button", "post"),
    [("alice", 200, True, 302), ("admin", 200, True, 302), ("carol", 200, False, 403),
     ("bob", 404, False, 404)],
)  # fmt: skip
def test_only_the_tenants_leads_and_admins_are_offered_the_way_back(
    world, who, page, sees_button, post
):
    request = applied_change(world, timezone.now() - DAY)
    client = logged_in(getattr(world, who))

    response = client.get(f"/requests/{request.pk}/")

    assert response.status_code == page
    if page == 200:
        assert "Since it applied" in main(response)
        assert ("data-revert" in main(response)) is sees_button
        watch = logged_api(getattr(world, who)).get(f"{URL}{request.pk}/").json()["watch"]
        assert watch["revert_offered"] is sees_button
    assert client.post(f"/requests/{request.pk}/revert/").status_code == post
    drafts = QuotaChangeRequest.objects.filter(status=RequestStatus.DRAFT).count()
    assert drafts == (1 if post == 302 else 0)


def test_only_an_applied_change_is_undone(world):
    request = file(world)
    response = logged_in(world.alice).post(f"/requests/{request.pk}/revert/", follow=True)
    assert "only an applied change is undone" in main(response)
    assert not QuotaChangeRequest.objects.filter(status=RequestStatus.DRAFT).exists()


# --- speed ------------------------------------------------------------------------------------


def _queries(call: Any) -> int:
    with CaptureQueriesContext(connection) as context:
        response = call()
    assert response.status_code == 200
    return len(context.captured_queries)


def test_the_query_count_does_not_grow_with_days_or_workloads(world):
    applied = (timezone.now() - 10 * DAY).replace(minute=0, second=0, microsecond=0)
    request = applied_change(world, applied)
    usage_around(world, applied)
    page = logged_in(world.alice)
    api = logged_api(world.alice)
    small_page = _queries(lambda: page.get(f"/requests/{request.pk}/"))
    small_api = _queries(lambda: api.get(f"{URL}{request.pk}/"))

    Rollup.objects.bulk_create(
        Rollup(
            resolution=Resolution.HOUR, bucket=applied - 7 * DAY + h * HOUR, metric=metric,
            cluster_id=world.a100.pk, tenant_id=world.team_a.pk, flavor_id=world.a100_gpu.pk,
            samples=12, sum=600.0, min=50, max=50,
        )
        for h in range(14 * 24) if h not in (7 * 24 - 1, 7 * 24 + 1, 5 * 24)
        for metric in (Metric.GPU_UTILIZATION, Metric.QUOTA_USED, Metric.QUOTA_BORROWED)
    )  # fmt: skip
    Workload.objects.bulk_create(
        Workload(
            cluster=world.a100, tenant=world.team_a, namespace="team-a-training",
            name=f"w{i}", uid=f"grown-{i}", created_at=applied - 6 * DAY + i * HOUR,
            admitted_at=applied - 6 * DAY + i * HOUR + HOUR, queue_wait_s=3600.0,
            updated_at=applied,
        )
        for i in range(200)
    )  # fmt: skip

    assert _queries(lambda: page.get(f"/requests/{request.pk}/")) == small_page
    assert _queries(lambda: api.get(f"{URL}{request.pk}/")) == small_api
    seen = change_watch(request=request)  # 57 of the 200 were admitted after, with the 45 s one
    assert seen is not None and indicators(seen)["queue_wait"][1] == (57 * 3600.0 + 45) / 58


def test_a_change_whose_previous_lines_were_not_kept_offers_no_way_back(world):
    request = applied_change(world, timezone.now() - DAY)
    request.items.update(guaranteed_before=None, limit_before=None)  # approved before they were
    alice = logged_in(world.alice)

    body = main(alice.get(f"/requests/{request.pk}/"))
    assert "Since it applied" in body and "data-revert" not in body
    assert (
        logged_api(world.alice).get(f"{URL}{request.pk}/").json()["watch"]["previous_items"] == []
    )
    response = alice.post(f"/requests/{request.pk}/revert/", follow=True)
    assert "before the portal kept the quota lines it replaced" in main(response)
    assert not QuotaChangeRequest.objects.filter(status=RequestStatus.DRAFT).exists()
