"""Quota change requests in a real browser: alice (lead of team-a) files one, an admin approves
it in the approvals queue, alice sees the new quota and the request's timeline; alice may not
approve (the queue is not hers) and bob may not even see the request. The request form checks
while alice types (with JavaScript) and after she submits (without).

demo-a100: 16 A100s, elastic cap 0.625 (10 a tenant); team-a holds 6 guaranteed / 10 limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from tests.e2e.conftest import TIMEOUT_MS, Browsing

pytestmark = [pytest.mark.e2e]

FORM_SCREENSHOT = "/tmp/e2e-request-form.png"  # noqa: S108 - a fixed place a person can open
QUEUE_SCREENSHOT = "/tmp/e2e-approvals-queue.png"  # noqa: S108
REQUEST_SCREENSHOT = "/tmp/e2e-request-page.png"  # noqa: S108
ERROR_SCREENSHOT = "/tmp/e2e-request-form-error.png"  # noqa: S108
LIST_SCREENSHOT = "/tmp/e2e-my-requests.png"  # noqa: S108
FORM = "/tenants/team-a/requests/new/?cluster=demo-a100"
ELASTIC_CAP_ERROR = "limit 12 exceeds the elastic cap of 10"


def gpu_row(browsing: Browsing) -> Any:
    return browsing.page.locator("tr[data-flavor='a100-80gb'][data-resource='nvidia.com/gpu']")


def gpu_input(browsing: Browsing, field: str) -> Any:
    return gpu_row(browsing).locator(f"input[name$='-{field}']")


def gpu_errors(browsing: Browsing, field: str) -> Any:
    return gpu_row(browsing).locator(f".field-errors[data-error-for$='-{field}']")


def squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.fixture
def browse_without_js(browser: Any, live_server: Any) -> Iterator[Browsing]:
    """A browsing like ``browse()``'s, in a context with JavaScript turned off."""
    context = browser.new_context(java_script_enabled=False)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    browsing = Browsing(page=page, base_url=live_server.url)
    page.on("request", lambda request: browsing.requests.append(request.url))

    def on_console(message: Any) -> None:
        if message.type == "error":
            browsing.console_errors.append((message.text, message.location.get("url", "")))

    page.on("console", on_console)
    yield browsing
    context.close()
    browsing.assert_clean()


def test_alice_files_a_request_the_admin_approves_it_and_alice_sees_the_new_quota(
    live_world, browse
) -> None:
    alice = browse()
    alice.log_in("alice")
    alice.goto("/tenants/team-a/")
    page = alice.page
    with page.expect_navigation():
        page.locator(
            "section.quota-set[data-cluster='demo-a100'] a", has_text="Request a change"
        ).click()
    assert page.url == alice.base_url + FORM
    assert gpu_input(alice, "guaranteed").input_value() == "6"
    assert gpu_input(alice, "limit").input_value() == "10"

    gpu_input(alice, "guaranteed").fill("8")
    page.fill("textarea[name=reason]", "Two more A100s for the new speech model")
    page.locator("#check-panel .verdict.ok").wait_for()  # the live check has answered
    diff = page.locator("#check-panel table.diff tr[data-resource='nvidia.com/gpu']")
    assert "6 → 8" in squeeze(diff.inner_text())
    page.screenshot(path=FORM_SCREENSHOT, full_page=True)
    with page.expect_navigation():
        page.click("button[value=submit]")

    change = QuotaChangeRequest.objects.get(requester=live_world.alice)
    assert page.url == alice.base_url + f"/requests/{change.pk}/"
    assert change.status == RequestStatus.PENDING
    assert "Pending approval" in page.locator("h1").inner_text()
    assert page.locator("button", has_text="Approve").count() == 0
    # The queue is for platform admins only: alice cannot approve her own request there.
    assert page.locator("nav a", has_text="Approvals").count() == 0
    alice.goto("/console/approvals/", status=403)

    admin = browse()
    admin.log_in("admin")
    with admin.page.expect_navigation():
        admin.page.locator("nav a", has_text="Approvals").click()
    assert admin.page.url == admin.base_url + "/console/approvals/"
    entry = admin.page.locator(f"article.queue-entry[data-request='{change.pk}']")
    assert "Two more A100s" in entry.inner_text()
    assert "6 → 8" in squeeze(entry.locator("table.diff").inner_text())
    assert "0 of 1 approval" in entry.inner_text()
    admin.page.screenshot(path=QUEUE_SCREENSHOT, full_page=True)
    entry.locator("textarea[name=comment]").fill("Fits: approved.")
    with admin.page.expect_navigation():
        entry.locator("button", has_text="Approve").click()
    assert admin.page.url == admin.base_url + "/console/approvals/"
    assert f"Request #{change.pk} approved" in admin.page.locator("ul.messages").inner_text()
    assert admin.page.locator(f"article.queue-entry[data-request='{change.pk}']").count() == 0

    alice.goto("/tenants/team-a/")
    quota_set = page.locator("section.quota-set[data-cluster='demo-a100']")
    row = quota_set.locator("tbody tr", has_text="nvidia.com/gpu")
    assert [c.strip() for c in row.locator("td").all_inner_texts()][:4] == [
        "a100-80gb",
        "nvidia.com/gpu",
        "8",
        "10",
    ]
    alice.goto(f"/requests/{change.pk}/")
    assert "Approved" in page.locator("h1").inner_text()
    timeline = page.locator("ol.timeline li")
    assert [li.get_attribute("data-action") for li in timeline.all()] == [
        "quota_request.created",
        "quota_request.pending",
        "quota_request.approved",
    ]
    assert "by admin" in timeline.nth(2).inner_text()
    assert "Fits: approved." in page.locator("ul.decisions").inner_text()
    page.screenshot(path=REQUEST_SCREENSHOT, full_page=True)
    with page.expect_navigation():
        page.locator("nav a", has_text="Requests").click()
    assert page.locator(f"tr[data-request='{change.pk}']").count() == 1
    page.screenshot(path=LIST_SCREENSHOT, full_page=True)

    bob = browse()
    bob.log_in("bob")
    bob.goto(f"/requests/{change.pk}/", status=404)
    assert "team-a" not in bob.page.locator("main").inner_text()
    bob.goto("/requests/")
    assert bob.page.locator(f"tr[data-request='{change.pk}']").count() == 0


def test_the_form_shows_the_elastic_cap_error_while_alice_types(live_world, browse) -> None:
    alice = browse()
    alice.log_in("alice")
    alice.goto(FORM)

    limit = gpu_input(alice, "limit")
    limit.fill("")
    limit.press_sequentially("12", delay=50)

    errors = gpu_errors(alice, "limit")
    errors.locator("p", has_text=ELASTIC_CAP_ERROR).wait_for()
    assert "62.5% of 16 NVIDIA A100-SXM4-80GB on demo-a100" in errors.inner_text()
    assert limit.get_attribute("aria-invalid") == "true"
    assert "1 problem" in alice.page.locator("#check-panel .verdict").inner_text()
    assert QuotaChangeRequest.objects.filter(requester=live_world.alice).count() == 0

    limit.fill("9")  # lowering is allowed, with a warning
    alice.page.locator("#check-panel .verdict.ok").wait_for()
    assert errors.inner_text().strip() == ""
    assert limit.get_attribute("aria-invalid") is None
    assert "goes down from 6/10 to 6/9" in alice.page.locator("#check-panel .warnings").inner_text()


def test_without_javascript_the_same_error_shows_after_submit(
    live_world, browse_without_js
) -> None:
    alice = browse_without_js
    alice.log_in("alice")
    alice.goto(FORM)
    gpu_input(alice, "limit").fill("12")
    alice.page.fill("textarea[name=reason]", "Peak for the conference deadline")

    with alice.page.expect_navigation():
        alice.page.click("button[value=submit]")

    assert alice.page.url == alice.base_url + FORM  # the form again, not a request page
    assert ELASTIC_CAP_ERROR in gpu_errors(alice, "limit").inner_text()
    assert gpu_input(alice, "limit").input_value() == "12"
    alice.page.screenshot(path=ERROR_SCREENSHOT, full_page=True)
    assert "Peak for the conference deadline" in alice.page.input_value("textarea[name=reason]")
    assert not QuotaChangeRequest.objects.filter(requester=live_world.alice).exists()
