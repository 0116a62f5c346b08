"""The advice API and pages: suggestions (scoping, who computes), the what-if of a request
(numbers worked out by hand, scoping, bad days), and what the pages show."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_create
from quotas.choices import GPU_RESOURCE
from quotas.services import QuotaItem
from tests.advice.conftest import daily_rollups, two_recorded_jobs, workload
from tests.conftest import World

pytestmark = pytest.mark.django_db


def _draft(world: World, guaranteed: int = 8, limit: int = 10) -> QuotaChangeRequest:
    return quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="more guarantee",
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit))],
    )


@pytest.fixture
def two_jobs(world: World) -> None:
    """Two days ago, team-a ran 10 GPUs for 2 h from T; team-b 4 GPUs for 1 h from T+30 min."""
    cache.clear()
    two_recorded_jobs(world)


def test_what_if_shows_the_preemption_the_request_removes(
    world: World, two_jobs: None, api_as
) -> None:
    # Before: guarantees 6 + 4 + 2 = a pool of 12. team-a's 10 GPUs borrow 4; team-b's 4
    # (its own guarantee) find 2 free -> team-a's job is preempted, reruns after team-b ends.
    # After (team-a 8/10): a pool of 14; 10 + 4 fit side by side, nothing is preempted.
    draft = _draft(world)
    # The approver sees every tenant of the cohort; the lead only her own rows (the other
    # tenants' queues weigh in the replay, but their names and numbers are not hers to see).
    response = api_as(world.admin).get(f"/api/v1/quota-requests/{draft.pk}/what-if/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["days"] == 14 and body["workloads"] == 2
    rows = {row["tenant"]: row for row in body["tenants"]}
    assert set(rows) == {"team-a", "team-b", "team-c"}
    lead = api_as(world.alice).get(f"/api/v1/quota-requests/{draft.pk}/what-if/").json()
    assert [row["tenant"] for row in lead["tenants"]] == ["team-a"]
    assert lead["tenants"][0] == rows["team-a"]
    assert "team-b" not in str(lead)
    # Totals too: the lead's are her tenant's (its one workload), the cohort's are admins'.
    assert (lead["workloads"], lead["skipped_workloads"]) == (1, 0)
    assert lead["workloads"] == rows["team-a"]["before"]["workloads"]
    assert rows["team-a"]["is_requester"]
    assert rows["team-a"]["before"]["preemptions"] == 1
    assert rows["team-a"]["after"]["preemptions"] == 0
    # team-a used 10 GPUs: 30 min, then 2 h again = 25 GPU-h before; 20 GPU-h after.
    assert rows["team-a"]["before"]["used_gpu_hours"] == pytest.approx(25)
    assert rows["team-a"]["after"]["used_gpu_hours"] == pytest.approx(20)
    # Borrowed: 4 of the 10 before (x 2.5 h = 10 GPU-h), 2 of 10 after (x 2 h = 4 GPU-h).
    assert rows["team-a"]["before"]["borrowed_gpu_hours"] == pytest.approx(10)
    assert rows["team-a"]["after"]["borrowed_gpu_hours"] == pytest.approx(4)
    assert rows["team-b"]["before"]["wait_p50_s"] == 0
    assert body["changes"] == [
        {"flavor": world.a100_gpu.name, "guaranteed_before": 6.0, "limit_before": 10.0,
         "guaranteed_after": 8.0, "limit_after": 10.0}
    ]  # fmt: skip


def test_the_what_if_is_cached_until_the_recorded_workloads_change(
    world: World, two_jobs: None, api_as
) -> None:
    draft = _draft(world)
    url = f"/api/v1/quota-requests/{draft.pk}/what-if/"
    admin = api_as(world.admin)
    first = admin.get(url).json()
    assert first["workloads"] == 2
    assert admin.get(url).json() == first  # the same replay, replay_ms and all
    t = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    workload(
        cluster=world.a100, tenant=world.team_b, name="b-late", gpus=2,
        flavor=world.a100_gpu.name, created=t, admitted=t, finished=t + timedelta(hours=1),
    ).save()  # fmt: skip

    assert admin.get(url).json()["workloads"] == 3


def test_what_if_is_scoped_like_the_request_and_checks_days(
    world: World, two_jobs: None, api_as
) -> None:
    draft = _draft(world)
    url = f"/api/v1/quota-requests/{draft.pk}/what-if/"
    assert api_as(world.bob).get(url).status_code == 404
    assert api_as(world.bob).get(f"{url}?days=0").status_code == 404  # not 400: not his
    assert api_as(None).get(url).status_code in (401, 403)
    assert api_as(world.carol).get(url).status_code == 200  # a member sees the request
    assert api_as(world.admin).get(url).status_code == 200
    assert api_as(world.alice).get("/api/v1/quota-requests/999999/what-if/").status_code == 404
    for bad in ("0", "91", "abc", "-3", "1.5", "\u0663", "9" * 5000):
        response = api_as(world.alice).get(f"{url}?days={bad}")
        assert response.status_code == 400, bad
        assert "days" in response.json()["fields"]
    assert api_as(world.alice).get(f"{url}?days=90").json()["days"] == 90


def test_suggestions_api_computes_lists_and_is_scoped(world: World, api_as) -> None:
    daily_rollups(tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu, peaks=[9])
    url = "/api/v1/tenants/team-a/suggestions/"
    assert api_as(world.bob).get(url).status_code == 404
    assert api_as(world.bob).post(url).status_code == 404
    assert api_as(world.carol).post(url).status_code == 403  # members read, leads compute
    created = api_as(world.alice).post(url)
    assert created.status_code == 201, created.content
    a100 = next(s for s in created.json() if s["cluster"] == "demo-a100")
    assert a100["request_status"] == "draft"
    line = next(n for n in a100["lines"] if n["resource"] == GPU_RESOURCE)
    assert (line["peak"], line["p80"], line["guaranteed_after"]) == (9, 7.2, 8)
    listed = api_as(world.carol).get(url)
    assert listed.status_code == 200
    assert sorted(s["id"] for s in listed.json()) == sorted(s["id"] for s in created.json())
    # Recomputing replaces: still one suggestion per cluster.
    again = api_as(world.admin).post(url).json()
    assert len(api_as(world.alice).get(url).json()) == len(again)
    assert api_as(world.alice).get("/api/v1/tenants/nope/suggestions/").status_code == 404


def test_pages_show_suggestions_and_the_what_if(world: World, two_jobs: None) -> None:
    daily_rollups(tenant=world.team_a, cluster=world.a100, flavor=world.a100_gpu, peaks=[9])
    # 4 more GPUs for team-a while its 10 run: at its limit, it waits in both replays.
    t = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    workload(
        cluster=world.a100, tenant=world.team_a, name="a-more", gpus=4,
        flavor=world.a100_gpu.name, created=t + timedelta(minutes=10),
        admitted=t + timedelta(hours=2), finished=t + timedelta(hours=3),
    ).save()  # fmt: skip
    client = Client()
    client.force_login(world.alice)
    response = client.post("/tenants/team-a/suggestions/compute/")
    assert response.status_code == 302
    page = client.get("/tenants/team-a/").content.decode()
    assert "Suggestions computed for 2 clusters; 1 draft to review." in page  # not "(s)"
    assert "Suggested changes" in page and 'data-cluster="demo-a100"' in page
    draft = QuotaChangeRequest.objects.filter(tenant=world.team_a, status="draft").first()
    assert draft is not None and f"/requests/{draft.pk}/?what_if=1" in page
    detail = client.get(f"/requests/{draft.pk}/").content.decode()
    assert "What-if" in detail and 'data-tenant="team-b"' not in detail  # only on demand
    detail = client.get(f"/requests/{draft.pk}/?what_if=1&days=14").content.decode()
    assert 'data-tenant="team-a"' in detail and "<svg" in detail  # team-a waits: bars
    assert "what-if-no-wait" not in detail
    assert 'data-tenant="team-b"' not in detail  # another tenant's numbers: approvers only
    assert "2 workloads from" in detail  # team-a's two, not the cohort's three
    approver = Client()
    approver.force_login(world.admin)
    seen = approver.get(f"/requests/{draft.pk}/?what_if=1&days=14").content.decode()
    assert 'data-tenant="team-b"' in seen
    assert "3 workloads from" in seen
    assert "<script" not in detail.split('id="what-if"')[1].split("</section>")[0]
    bad = client.get(f"/requests/{draft.pk}/?what_if=1&days=500").content.decode()
    assert "from 1 to 90 days" in bad
    # Outsiders see neither.
    outsider = Client()
    outsider.force_login(world.bob)
    assert outsider.get(f"/requests/{draft.pk}/?what_if=1").status_code == 404
    assert outsider.post("/tenants/team-a/suggestions/compute/").status_code == 404
    member = Client()
    member.force_login(world.carol)
    assert member.post("/tenants/team-a/suggestions/compute/").status_code == 403
