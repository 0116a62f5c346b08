"""A suggested change in a real browser: alice finds it on her tenant's page, opens the draft
with its what-if replay (server-drawn SVG, no script), edits the numbers in the request form
and saves a draft that replaces the suggested one."""

from __future__ import annotations

from typing import Any

import pytest

from advice.services import suggestions_compute
from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from tests.advice.conftest import daily_rollups, two_recorded_jobs
from tests.conftest import World
from tests.e2e.test_requests import gpu_input

pytestmark = [pytest.mark.e2e]

WHAT_IF_SCREENSHOT = "/tmp/e2e-what-if.png"  # noqa: S108 - a fixed place a person can open


@pytest.fixture
def suggested(live_world: World) -> QuotaChangeRequest:
    """team-a peaked at 9 A100s last month (guarantee 6): a draft to 8/10 is suggested; two
    recorded jobs two days ago give the replay something to admit."""
    daily_rollups(
        tenant=live_world.team_a, cluster=live_world.a100, flavor=live_world.a100_gpu,
        peaks=[3, 9, 7], utilization=70,
    )  # fmt: skip
    two_recorded_jobs(live_world)
    [a100] = [
        s for s in suggestions_compute(tenant=live_world.team_a, actor=live_world.alice)
        if s.cluster == live_world.a100
    ]  # fmt: skip
    assert a100.request is not None
    return a100.request


def test_alice_reviews_a_suggestion_replays_it_and_edits_it_into_her_own_draft(
    live_world: World, suggested: QuotaChangeRequest, browse: Any
) -> None:
    alice = browse()
    alice.log_in("alice")
    alice.goto("/tenants/team-a/")
    page = alice.page
    card = page.locator("#suggested-changes article[data-cluster='demo-a100']")
    assert "6 → 8" in " ".join(card.locator("td.guaranteed").inner_text().split())
    with page.expect_navigation():
        card.locator("a", has_text=f"Review draft #{suggested.pk}").click()

    # The request page replays the last 14 days with the draft's quotas.
    assert f"/requests/{suggested.pk}/" in page.url and "what_if=1" in page.url
    row = page.locator("#what-if tr[data-tenant='team-a']")
    assert "(this request)" in row.inner_text()
    assert page.locator("#what-if tr[data-tenant]").count() == 1  # her own row only
    # team-a's big job is preempted before and not after; nobody waits in either replay.
    assert " ".join(row.locator("td").nth(6).inner_text().split()) == "1 → 0"
    assert page.locator("#what-if .what-if-no-wait").count() == 1
    assert page.locator("#what-if svg").count() == 0
    page.screenshot(path=WHAT_IF_SCREENSHOT, full_page=True)

    with page.expect_navigation():
        page.locator("a[data-edit-draft]").click()
    assert gpu_input(alice, "guaranteed").input_value() == "8"
    assert "Suggested by the portal" in page.input_value("textarea[name=reason]")
    gpu_input(alice, "guaranteed").fill("7")
    with page.expect_navigation():
        page.click("button[value=draft]")

    assert f"replaces draft #{suggested.pk}, now cancelled" in page.locator("main").inner_text()
    mine = QuotaChangeRequest.objects.get(pk__gt=suggested.pk, cluster=live_world.a100)
    assert mine.status == RequestStatus.DRAFT
    assert mine.items.get(resource="nvidia.com/gpu").guaranteed == 7
    suggested.refresh_from_db()
    assert suggested.status == RequestStatus.CANCELLED
    alice.assert_clean()
