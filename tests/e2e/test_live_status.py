"""After an action the page moves on its own: an admin approves alice's request on its page,
the push runs (the worker's own function, against the local Kubernetes API stand-in) while the
page stays open, and the page turns to "Applied" in place, without a reload, under the strict
Content-Security-Policy (any violation is a console error, which fails the test). A GPU's page
does the same while its agent applies a MIG layout and reports.

demo-a100 points at the stand-in; team-a holds 6/10 A100s and the request asks for 8/10.
"""

from __future__ import annotations

import pytest

from approvals.choices import RequestStatus
from approvals.services import quota_request_approve
from gpu_agent.models import Gpu
from gpu_agent.services import layouts
from quotas.models import SyncOutbox
from quotas.sync import outbox_deliver
from tests.approvals.conftest import file
from tests.approvals.test_live_status import STRICT_POLICY
from tests.gpu_agent.test_fleet_live_status import NEW_LAYOUT, report
from tests.gpu_agent.test_fleet_live_status import UUID as GPU_UUID
from tests.gpu_agent.test_fleet_pages import BUSY_3G, add_node, gpu, instance

pytestmark = [pytest.mark.e2e]

SCREENSHOT = "/tmp/e2e-request-applied-live.png"  # noqa: S108 - a fixed place a person can open
FOLLOW_MS = 30_000  # the script asks after 1 s, then at most every 15 s


def test_the_request_page_turns_applied_without_a_reload(live_world, standin, browse) -> None:
    change = file(live_world)  # alice's request, pending
    admin = browse()
    admin.log_in("admin")
    response = admin.goto(f"/requests/{change.pk}/")
    assert response.headers["content-security-policy"] == STRICT_POLICY
    page = admin.page
    page.locator("textarea[name=comment]").fill("Fits.")
    with page.expect_navigation():
        page.locator("form.decide button", has_text="Approve").click()
    assert page.url == admin.base_url + f"/requests/{change.pk}/"
    push = page.locator("section[data-push]")
    assert push.get_attribute("data-push") == "approved"
    assert "Approved, waiting for the push to demo-a100" in push.inner_text()
    assert "Approved" in page.locator("h1 [data-live-fragment=badge]").inner_text()
    # A mark only this document carries: a reload would lose it.
    page.evaluate("() => { window.__sameDocument = true; }")

    change.refresh_from_db()
    assert change.status == RequestStatus.APPROVED
    row = SyncOutbox.objects.get(
        tenant=live_world.team_a, cluster=live_world.a100, generation=change.approved_generation
    )
    outbox_deliver(outbox_id=row.pk)  # what the Celery worker does with the outbox row
    change.refresh_from_db()
    assert change.status == RequestStatus.APPLIED

    page.locator("section[data-push=applied]").wait_for(timeout=FOLLOW_MS)
    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    applied = f"Applied at generation {change.approved_generation}"
    assert applied in page.locator("section[data-push]").inner_text()
    assert page.locator("h1 [data-live-fragment=badge]").inner_text().strip() == "Applied"
    assert page.locator("[data-live-announce]").inner_text().strip() == applied
    assert page.locator("[data-live-note]").count() == 0  # nothing left to follow
    last = page.locator("ol.timeline li").last
    assert last.get_attribute("data-action") == "quota_request.applied"
    assert "Applied in demo-a100" in last.inner_text()
    page.screenshot(path=SCREENSHOT, full_page=True)

    asked = [u for u in admin.requests if u.endswith(f"/requests/{change.pk}/status/")]
    assert asked, "the page never asked for the status"
    # It stopped once the answer was final: no more asks after a while.
    count = len(asked)
    page.wait_for_timeout(2500)
    assert len([u for u in admin.requests if u.endswith("/status/")]) == count


def test_a_pending_request_page_follows_an_approval_made_elsewhere(
    live_world, standin, browse
) -> None:
    """Issue 35 item 1: alice keeps her pending request open; an admin approves it elsewhere
    and the push runs; her badge, "In the cluster" section and buttons move without a reload."""
    change = file(live_world)  # alice's request, pending
    alice = browse()
    alice.log_in("alice")
    response = alice.goto(f"/requests/{change.pk}/")
    assert response.headers["content-security-policy"] == STRICT_POLICY
    page = alice.page
    badge = page.locator("h1 [data-live-fragment=badge]")
    assert badge.inner_text().strip() == "Pending approval"
    assert page.locator("section[data-push]").count() == 0
    page.evaluate("() => { window.__sameDocument = true; }")

    quota_request_approve(request=change, approver=live_world.admin, comment="Fits.")
    change.refresh_from_db()
    row = SyncOutbox.objects.get(
        tenant=live_world.team_a, cluster=live_world.a100, generation=change.approved_generation
    )
    outbox_deliver(outbox_id=row.pk)
    change.refresh_from_db()
    assert change.status == RequestStatus.APPLIED

    page.locator("section[data-push=applied]").wait_for(timeout=FOLLOW_MS)
    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    assert badge.inner_text().strip() == "Applied"
    applied = f"Applied at generation {change.approved_generation}"
    assert applied in page.locator("section[data-push]").inner_text()
    assert page.locator("[data-live-announce]").inner_text().strip() == applied
    assert "Applied meanwhile" in page.locator("[data-decided-meanwhile]").inner_text()
    assert page.locator("[data-live-fragment=actions] button").count() == 0  # no Cancel left
    last = page.locator("ol.timeline li").last
    assert last.get_attribute("data-action") == "quota_request.applied"


def test_the_gpu_page_turns_applied_without_a_reload(live_world, browse) -> None:
    node = add_node(live_world.admin, "gpu-node-1", [gpu("gpu-node-1", 0, instances=BUSY_3G)])
    layouts.layout_set(
        gpu=Gpu.objects.get(uuid=GPU_UUID), instances=NEW_LAYOUT, actor=live_world.admin
    )
    admin = browse()
    admin.log_in("admin")
    response = admin.goto(f"/fleet/gpus/{GPU_UUID}/")
    assert response.headers["content-security-policy"] == STRICT_POLICY
    page = admin.page
    assert page.locator("#desired [data-layout-state]").get_attribute("data-layout-state") == (
        "pending"
    )
    assert page.locator("#observed [data-profile='3g.40gb'][data-start='4']").count() == 0
    page.evaluate("() => { window.__sameDocument = true; }")

    # The agent applies it and reports (what its next poll does).
    layouts.agent_result(node=node, uuid=GPU_UUID, generation=1, state="success")
    report(node, 1, [instance(1, "3g.40gb", 0, 4, 4242), instance(3, "3g.40gb", 4, 4)])

    page.locator("#desired [data-layout-state=success]").wait_for(timeout=FOLLOW_MS)
    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    assert page.locator("#observed [data-profile='3g.40gb'][data-start='4']").count() == 1
    assert (
        page.locator("[data-live-announce]")
        .inner_text()
        .startswith("Generation 1 (3g.40gb@0, 3g.40gb@4) is applied")
    )
    assert page.locator("[data-live-note]").count() == 0
