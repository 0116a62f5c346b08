"""At phone width (390 px) and by keyboard (issue 35 item 10): no page scrolls sideways (code
blocks scroll inside their own box, the what-if view's chart fits), every column of the tenant
page's quota table is in sight (each row reflows to a card of labelled values), and the first
Tab of any page lands on a "Skip to content" link that moves the focus to the page's main
content, past the navigation.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from advice.services import suggestions_compute
from approvals.models import QuotaChangeRequest
from tests.advice.conftest import daily_rollups, two_recorded_jobs, workload
from tests.conftest import World

pytestmark = [pytest.mark.e2e]

PHONE = {"width": 390, "height": 844}
QUOTA_SCREENSHOT = "/tmp/e2e-quota-cards-390.png"  # noqa: S108 - a fixed place a person can open
PAGE_WIDTH = "() => [document.scrollingElement.scrollWidth, window.innerWidth]"
# What sticks out past the viewport's right edge (the message of a failed width check).
WIDE = """w => [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > w)
    .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + e.getBoundingClientRect().right)"""


def test_the_preemption_help_does_not_scroll_sideways(live_world, browse) -> None:
    alice = browse()
    alice.page.set_viewport_size(PHONE)
    alice.log_in("alice")
    alice.goto("/help/preemption/")
    page = alice.page
    assert page.locator("[data-help-page] pre").count() > 0  # the code blocks at issue
    scroll_width, inner_width = page.evaluate(PAGE_WIDTH)
    wide = page.evaluate(
        """w => [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect().right > w)
            .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' + e.getBoundingClientRect().right)""",
        inner_width,
    )
    assert scroll_width <= inner_width, wide
    # Each code block keeps its lines and scrolls inside its own box, which a keyboard reaches.
    boxes = page.evaluate(
        """() => [...document.querySelectorAll('[data-help-page] pre')].map(pre => {
            const style = getComputedStyle(pre);
            return [pre.getBoundingClientRect().right, style.overflowX];
        })"""
    )
    for right, overflow_x in boxes:
        assert right <= inner_width and overflow_x == "auto"


def test_every_column_of_the_quota_table_is_in_sight(live_world, browse) -> None:
    """At 390 px each quota row is a card: every value with its column's name beside it, all
    inside the viewport with nothing to scroll, neither the page nor the table's box."""
    alice = browse()
    alice.page.set_viewport_size(PHONE)
    alice.log_in("alice")
    alice.goto("/tenants/team-a/")
    page = alice.page
    scroll_width, inner_width = page.evaluate(PAGE_WIDTH)
    assert scroll_width <= inner_width
    page.locator("table.quotas").first.screenshot(path=QUOTA_SCREENSHOT)
    tables = page.locator("table.quotas")
    assert tables.count() >= 1
    for table in tables.all():
        box = table.locator("xpath=..")
        assert box.get_attribute("class") == "table-scroll"
        assert box.evaluate("b => b.scrollWidth <= b.clientWidth"), "the table's box scrolls"
        cells = table.evaluate(
            """t => [...t.querySelectorAll('tbody td[data-label]')].map(td => {
                const r = td.getBoundingClientRect();
                const label = getComputedStyle(td, '::before').content;
                return [td.dataset.label, label, r.left, r.right, td.innerText.trim()];
            })"""
        )
        labels = {label for label, *_ in cells}
        assert {"Limit", "Borrowing", "Guaranteed", "GPU units (g / l)"} <= labels
        for label, shown, left, right, text in cells:
            assert shown == f'"{label}"', f"{label} is not shown beside its value"
            assert left >= 0 and right <= inner_width, f"{label} ({text}) is out of sight"
            assert text, label  # and its value


def test_the_quota_table_is_a_table_at_a_laptops_width(live_world, browse) -> None:
    alice = browse()
    alice.page.set_viewport_size({"width": 1366, "height": 768})
    alice.log_in("alice")
    alice.goto("/tenants/team-a/")
    table = alice.page.locator("table.quotas").first
    for name in ("Limit", "Borrowing", "GPU units (g / l)"):
        assert table.locator("thead th", has_text=name).is_visible()
    assert table.locator("tbody td[data-label=Limit]").first.evaluate(
        "td => getComputedStyle(td, '::before').content"
    ) in ("none", "normal")


@pytest.fixture
def waiting_draft(live_world: World) -> QuotaChangeRequest:
    """team-a's suggested draft on demo-a100, with a job that waited two days ago: the what-if
    view has its bar chart of queue waits (tests/advice/test_api.py's scenario)."""
    daily_rollups(
        tenant=live_world.team_a, cluster=live_world.a100, flavor=live_world.a100_gpu, peaks=[9]
    )
    two_recorded_jobs(live_world)
    t = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    workload(
        cluster=live_world.a100, tenant=live_world.team_a, name="a-more", gpus=4,
        flavor=live_world.a100_gpu.name, created=t + timedelta(minutes=10),
        admitted=t + timedelta(hours=2), finished=t + timedelta(hours=3),
    ).save()  # fmt: skip
    suggestions_compute(tenant=live_world.team_a, actor=live_world.alice)
    draft = QuotaChangeRequest.objects.filter(tenant=live_world.team_a, status="draft").first()
    assert draft is not None
    return draft


@pytest.mark.parametrize("persona", ["alice", "admin"])
def test_the_what_if_view_does_not_scroll_sideways(
    live_world: World, waiting_draft: QuotaChangeRequest, browse: Any, persona: str
) -> None:
    person = browse()
    person.page.set_viewport_size(PHONE)
    person.log_in(persona)
    person.goto(f"/requests/{waiting_draft.pk}/?what_if=1&days=14")
    page = person.page
    assert page.locator("#what-if figure svg").count() == 1  # the chart at issue
    scroll_width, inner_width = page.evaluate(PAGE_WIDTH)
    assert scroll_width <= inner_width, page.evaluate(WIDE, inner_width)
    chart = page.locator("#what-if figure svg").bounding_box()
    assert chart is not None and chart["x"] >= 0 and chart["x"] + chart["width"] <= inner_width
    # Its tables scroll inside their own boxes, which stay inside the page.
    for box in page.locator("#what-if .table-scroll").all():
        edge = box.bounding_box()
        assert edge is not None and edge["x"] + edge["width"] <= inner_width


def test_the_first_tab_offers_to_skip_to_the_content(live_world, browse) -> None:
    alice = browse()
    alice.page.set_viewport_size(PHONE)
    alice.log_in("alice")
    alice.goto("/tenants/team-a/requests/new/")
    page = alice.page
    skip = page.locator("a.skip-link")
    assert skip.get_attribute("href") == "#main"
    hidden = skip.bounding_box()
    assert hidden is not None and hidden["y"] + hidden["height"] <= 0  # off-screen until focused
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.className") == "skip-link"
    assert skip.inner_text().strip() == "Skip to content"
    box = skip.bounding_box()
    assert box is not None and box["width"] > 1 and box["y"] >= 0  # shown while focused
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"
    # The next Tab goes on from the content, not back to the navigation.
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.closest('main') !== null")
