"""The what-if's calibration: the replay of the quotas in force (before) beside what was
recorded, on a record the quotas allow (reproduced) and on one they do not (flagged in words).
The numbers are worked out in the comments."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import Client, override_settings
from django.utils import timezone

from advice.selectors import calibration
from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_create
from quotas.choices import GPU_RESOURCE
from quotas.services import QuotaItem
from tests.advice.conftest import workload
from tests.conftest import World
from usage.models import Workload

pytestmark = pytest.mark.django_db


def _draft(world: World) -> QuotaChangeRequest:
    cache.clear()
    return quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="more guarantee",
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(8), Decimal(10))],
    )


def _t() -> datetime:
    return timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)


def _two_six_gpu_jobs_side_by_side(world: World) -> None:
    """team-a (limit 10) recorded running two 6-GPU jobs at once for 2 h from ``_t()``, with
    no wait: 12 GPUs, more than its limit allows."""
    t = _t()
    Workload.objects.bulk_create(
        [
            workload(cluster=world.a100, tenant=world.team_a, name=f"a-{n}", gpus=6,
                     flavor=world.a100_gpu.name, created=t, admitted=t,
                     finished=t + timedelta(hours=2))
            for n in (1, 2)
        ]
    )  # fmt: skip


def _figures(row: dict) -> dict[str, dict]:
    return {figure["figure"]: figure for figure in row["calibration"]}


def test_a_record_the_quotas_allow_is_reproduced(world: World, api_as) -> None:
    # team-a (6 guaranteed, limit 10, a cohort pool of 12): 8 GPUs for 2 h from T; 4 more at
    # T+10 min would take it to 12 > 10, so that job waited until T+2 h (110 min) and ran 1 h.
    # The replay of the same quotas admits them at the same times: waits 0 and 110 min
    # (p50 55 min, p95 104.5 min), 16 + 4 = 20 GPU-h, as recorded.
    t = _t()
    Workload.objects.bulk_create(
        [
            workload(cluster=world.a100, tenant=world.team_a, name="a-8", gpus=8,
                     flavor=world.a100_gpu.name, created=t, admitted=t,
                     finished=t + timedelta(hours=2)),
            workload(cluster=world.a100, tenant=world.team_a, name="a-4", gpus=4,
                     flavor=world.a100_gpu.name, created=t + timedelta(minutes=10),
                     admitted=t + timedelta(hours=2), finished=t + timedelta(hours=3)),
        ]
    )  # fmt: skip
    draft = _draft(world)
    body = api_as(world.alice).get(f"/api/v1/quota-requests/{draft.pk}/what-if/").json()
    assert body["tolerance_pct"] == 25
    (row,) = body["tenants"]
    figures = _figures(row)
    assert figures["wait_p50"]["recorded"] == pytest.approx(55 * 60)
    assert figures["wait_p50"]["replayed"] == pytest.approx(55 * 60)
    assert figures["wait_p95"]["recorded"] == pytest.approx(104.5 * 60)
    assert figures["wait_p95"]["replayed"] == pytest.approx(104.5 * 60)
    assert figures["gpu_hours"]["recorded"] == pytest.approx(20)
    assert figures["gpu_hours"]["replayed"] == pytest.approx(20)
    # The unit names what the values are: seconds, not the minutes the page shows them in.
    assert {key: figure["unit"] for key, figure in figures.items()} == {
        "wait_p50": "s", "wait_p95": "s", "gpu_hours": "GPU-h",
    }  # fmt: skip
    assert all(figure["within_tolerance"] for figure in figures.values())
    assert row["calibrated"] and row["calibration_note"] == ""

    client = Client()
    client.force_login(world.alice)
    page = client.get(f"/requests/{draft.pk}/?what_if=1").content.decode()
    assert "Does the replay reproduce what happened?" in page
    assert 'data-figure="wait_p95"' in page and "104.5 min" in page
    assert "reproduces what was recorded within 25% for the tenant shown" in page
    assert "off by more than" not in page


def test_a_record_the_quotas_cannot_produce_is_flagged_in_words(world: World, api_as) -> None:
    # team-a (limit 10) was recorded running two 6-GPU jobs side by side for 2 h from T, with
    # no wait: 12 GPUs, more than its limit allows (the quotas changed since, or the record is
    # wrong). The replay admits the second at T+2 h: waits 0 and 2 h, p95 114 min against
    # 0 recorded; 24 GPU-h both ways.
    _two_six_gpu_jobs_side_by_side(world)
    draft = _draft(world)
    admin = api_as(world.admin).get(f"/api/v1/quota-requests/{draft.pk}/what-if/").json()
    rows = {row["tenant"]: row for row in admin["tenants"]}
    row = rows["team-a"]
    figures = _figures(row)
    assert figures["wait_p95"]["recorded"] == 0
    assert figures["wait_p95"]["replayed"] == pytest.approx(114 * 60)
    assert figures["wait_p95"]["within_tolerance"] is False
    assert figures["gpu_hours"]["within_tolerance"] is True
    assert not row["calibrated"]
    assert row["calibration_note"] == (
        "The replay of the quotas in force differs from what was recorded by more than 25% "
        "(queue wait p50 60.0 min replayed, 0.0 min recorded; queue wait p95 114.0 min "
        "replayed, 0.0 min recorded): read its predictions as a direction, not as a forecast."
    )
    # The tenants with no workloads have nothing to disagree about.
    assert rows["team-b"]["calibrated"] and rows["team-c"]["calibrated"]
    # The lead sees her tenant's calibration, and nothing of the others'.
    lead = api_as(world.alice).get(f"/api/v1/quota-requests/{draft.pk}/what-if/").json()
    assert [r["tenant"] for r in lead["tenants"]] == ["team-a"]
    assert lead["tenants"][0]["calibration"] == row["calibration"]

    client = Client()
    client.force_login(world.alice)
    page = client.get(f"/requests/{draft.pk}/?what_if=1").content.decode()
    assert "off by more than 25%" in page
    assert "team-a: The replay of the quotas in force differs from what was recorded" in page
    assert "114.0 min replayed" in page
    assert "reproduces what was recorded" not in page
    assert 'data-tenant="team-b"' not in page and 'data-calibration-tenant="team-b"' not in page


def test_the_tolerance_is_a_setting() -> None:
    # p95 recorded 100 min, replayed 120 min: 20% off, within 25% but not within 10%.
    recorded = {"recorded_wait_p95_s": 6000.0}
    before = {"wait_p95_s": 7200.0}
    figures, note = calibration(recorded=recorded, before=before, tolerance=25)
    p95 = next(f for f in figures if f["figure"] == "wait_p95")
    assert p95["within_tolerance"] and p95["difference_pct"] == 20.0 and note == ""
    figures, note = calibration(recorded=recorded, before=before, tolerance=10)
    assert not next(f for f in figures if f["figure"] == "wait_p95")["within_tolerance"]
    assert "more than 10%" in note and "120.0 min replayed, 100.0 min recorded" in note
    # A wait of 0 against 50 s is within the minute's floor, whatever the percentage.
    figures, _ = calibration(
        recorded={"recorded_wait_p50_s": 0.0}, before={"wait_p50_s": 50.0}, tolerance=25
    )
    assert next(f for f in figures if f["figure"] == "wait_p50")["within_tolerance"]


@override_settings(WHAT_IF_TOLERANCE_PCT=1000)
def test_the_page_states_the_tolerance_in_force(world: World, api_as) -> None:
    _two_six_gpu_jobs_side_by_side(world)
    draft = _draft(world)
    body = api_as(world.alice).get(f"/api/v1/quota-requests/{draft.pk}/what-if/").json()
    assert body["tolerance_pct"] == 1000
    # 0 recorded against 114 min replayed is off by any percentage of 0 (beyond the floor).
    assert not body["tenants"][0]["calibrated"]
    assert "more than 1000%" in body["tenants"][0]["calibration_note"]
