"""A GPU's page after a MIG layout lands (issue 35 item 3): everything on it that depends on
the layout's state moves together, without a reload (the flash that said "is pending", the
free slices, the applied generation, the history row), and the slice drawing shows every
profile name whole at a laptop's width (1366 px) and a phone's (390 px).

gpu-node-1's GPU 0 is an A100-SXM4-80GB (8 memory slices) in MIG mode with a busy 3g.40gb at
slices 0-3 and an idle 1g.10gb at slice 5: 3 slices free. The admin sets 3g.40gb at 0 and 4
through the page's form; the agent applies it and reports: no slice free, generation 1.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_agent.services import layouts
from tests.approvals.test_live_status import STRICT_POLICY
from tests.conftest import World
from tests.gpu_agent.test_fleet_live_status import UUID, report
from tests.gpu_agent.test_fleet_pages import BUSY_3G, add_node, gpu, instance

pytestmark = [pytest.mark.e2e]

PAGE = f"/fleet/gpus/{UUID}/"
FOLLOW_MS = 30_000  # the script asks after 1 s, then at most every 15 s
PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 768}
SCREENSHOT = "/tmp/e2e-mig-live-{width}.png"  # noqa: S108 - a fixed place a person can open


def fact(page: Any, name: str) -> str:
    """The text of the facts list's ``<dd>`` after the ``<dt>`` called ``name``."""
    term = page.locator("dl.facts dt", has_text=name)
    return " ".join(term.locator("xpath=following-sibling::dd[1]").inner_text().split())


def test_the_whole_gpu_page_follows_the_layout_as_it_lands(live_world: World, browse) -> None:
    node = add_node(live_world.admin, "gpu-node-1", [gpu("gpu-node-1", 0, instances=BUSY_3G)])
    admin = browse()
    admin.log_in("admin")
    response = admin.goto(PAGE)
    assert response.headers["content-security-policy"] == STRICT_POLICY
    page = admin.page
    assert fact(page, "Free MIG slices") == "3 of 8"
    assert fact(page, "Applied generation").startswith("0 ")

    # The admin keeps the busy 3g.40gb at 0 and puts a second one at 4 (the form's second row).
    page.select_option("select[name='instances-1-profile']", "3g.40gb")
    page.fill("input[name='instances-1-start']", "4")
    with page.expect_navigation():
        page.locator("button[value=apply]").click()
    flash = page.locator("ul.messages li")
    assert flash.count() == 1
    assert "Generation 1 of" in flash.inner_text() and "is pending" in flash.inner_text()
    assert (
        page.locator(
            "table.layout-history tr[data-generation='1'] [data-layout-state]"
        ).get_attribute("data-layout-state")
        == "pending"
    )
    page.evaluate("() => { window.__sameDocument = true; }")

    # The agent applies it and reports (what its next poll does).
    layouts.agent_result(node=node, uuid=UUID, generation=1, state="success")
    report(node, 1, [instance(1, "3g.40gb", 0, 4, 4242), instance(3, "3g.40gb", 4, 4)])

    page.locator("#desired [data-layout-state=success]").wait_for(timeout=FOLLOW_MS)
    assert page.evaluate("() => window.__sameDocument === true"), "the page was reloaded"
    # Everything else moved with it, in the same swap.
    assert fact(page, "Free MIG slices") == "0 of 8"
    assert fact(page, "Applied generation").startswith("1 ")
    row = page.locator("table.layout-history tr[data-generation='1']")
    assert row.locator("[data-layout-state]").get_attribute("data-layout-state") == "success"
    assert row.locator("td").nth(5).inner_text().strip() != "—"  # applied at
    assert flash.count() == 1
    assert "is pending" not in flash.inner_text()
    assert flash.inner_text().startswith("Generation 1 (3g.40gb@0, 3g.40gb@4) is applied")
    assert "success" in (flash.get_attribute("class") or "")
    page.wait_for_timeout(300)
    assert "pending" not in page.locator("main").inner_text()


def test_a_flash_already_overtaken_when_the_page_loads_says_where_things_stand(
    live_world: World, browse
) -> None:
    """The agent may apply a layout between the form's redirect and the page it leads to: the
    page then has nothing to follow, so its flash must not say "is pending" either."""
    node = add_node(live_world.admin, "gpu-node-1", [gpu("gpu-node-1", 0, instances=BUSY_3G)])
    admin = browse()
    admin.log_in("admin")
    admin.goto(PAGE)
    page = admin.page
    page.select_option("select[name='instances-1-profile']", "3g.40gb")
    page.fill("input[name='instances-1-start']", "4")
    # The form is sent without following its redirect (the flash waits in the session) ...
    sent = page.evaluate(
        """async () => {
            const form = document.querySelector('form.layout-form');
            const data = new FormData(form);
            data.set('action', 'apply');
            const answer = await fetch(form.getAttribute('action'), {method: 'POST', body: data, redirect: 'manual'});
            return answer.type;
        }"""
    )
    assert sent == "opaqueredirect"
    # ... and the agent applies the layout before the browser opens the page it leads to.
    layouts.agent_result(node=node, uuid=UUID, generation=1, state="success")
    report(node, 1, [instance(1, "3g.40gb", 0, 4, 4242), instance(3, "3g.40gb", 4, 4)])
    admin.goto(PAGE)
    assert page.locator("#desired [data-layout-state]").get_attribute("data-layout-state") == (
        "success"
    )
    flash = page.locator("ul.messages li")
    assert flash.count() == 1
    assert "is pending" not in flash.inner_text()
    assert flash.inner_text().startswith("Generation 1 (3g.40gb@0, 3g.40gb@4) is applied")


@pytest.mark.parametrize("width", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_every_profile_name_in_the_slice_drawing_is_shown_whole(
    live_world: World, browse, width: dict[str, int]
) -> None:
    add_node(live_world.admin, "gpu-node-1", [gpu("gpu-node-1", 0, instances=BUSY_3G)])
    admin = browse()
    admin.page.set_viewport_size(width)
    admin.log_in("admin")
    admin.goto(PAGE)
    page = admin.page
    page.screenshot(path=SCREENSHOT.format(width=width["width"]), full_page=True)
    labels = page.evaluate(
        """() => [...document.querySelectorAll('.mig-block[data-profile]')].map(block => {
            const label = block.querySelector('strong');
            const box = block.getBoundingClientRect();
            const style = getComputedStyle(block);
            const inner = [box.left + parseFloat(style.borderLeftWidth),
                           box.right - parseFloat(style.borderRightWidth)];
            const words = label.getBoundingClientRect();
            return {profile: block.dataset.profile, text: label.innerText.replace(/\\s/g, ''),
                    scroll: label.scrollWidth, client: label.clientWidth,
                    left: words.left, right: words.right, inner: inner,
                    size: parseFloat(getComputedStyle(label).fontSize)};
        })"""
    )
    assert sorted(label["profile"] for label in labels) == ["1g.10gb", "3g.40gb"]
    for label in labels:
        assert label["text"] == label["profile"], label
        assert label["scroll"] <= label["client"], label  # nothing cut off inside the label
        inner_left, inner_right = label["inner"]
        assert inner_left <= label["left"] and label["right"] <= inner_right + 0.5, label
        assert label["size"] >= 10, label  # still readable type
    scroll_width, inner_width = page.evaluate(
        "() => [document.scrollingElement.scrollWidth, window.innerWidth]"
    )
    assert scroll_width <= inner_width
