"""At phone width (390 px) and by keyboard (issue 35 item 10): no page scrolls sideways (code
blocks scroll inside their own box), every column of the tenant page's quota table can be
reached (its box scrolls), and the first Tab of any page lands on a "Skip to content" link that
moves the focus to the page's main content, past the navigation.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.e2e]

PHONE = {"width": 390, "height": 844}
PAGE_WIDTH = "() => [document.scrollingElement.scrollWidth, window.innerWidth]"


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


def test_every_column_of_the_quota_table_is_reachable(live_world, browse) -> None:
    alice = browse()
    alice.page.set_viewport_size(PHONE)
    alice.log_in("alice")
    alice.goto("/tenants/team-a/")
    page = alice.page
    scroll_width, inner_width = page.evaluate(PAGE_WIDTH)
    assert scroll_width <= inner_width
    box = page.locator("table.quotas").first.locator("xpath=..")
    assert box.get_attribute("class") == "table-scroll" and box.get_attribute("tabindex") == "0"
    for name in ("Limit", "Borrowing", "GPU units (g / l)"):
        header = page.locator("table.quotas").first.locator("th", has_text=name)
        header.scroll_into_view_if_needed()
        left, right = header.evaluate(
            "th => { const r = th.getBoundingClientRect(); return [r.left, r.right]; }"
        )
        assert left >= 0 and right <= inner_width, f"{name} is out of reach"


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
