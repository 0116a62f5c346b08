"""The usage dashboards in a real browser: Plotly (served from the portal's own static files)
draws every chart under the Content-Security-Policy, with no console error and no request to
another host (the ``browse`` fixture fails the test on either); the tenant usage page's charts
come drawn as SVG from the server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import World
from tests.dashboards.data import UsageData, write_usage_data
from tests.e2e.conftest import Browsing

pytestmark = [pytest.mark.e2e]

TENANT_SCREENSHOT = "/tmp/e2e-usage-tenant.png"  # noqa: S108 - a fixed place a person can open
ADMIN_SCREENSHOT = "/tmp/e2e-usage-admin.png"  # noqa: S108
PROFILE_SCREENSHOT = "/tmp/e2e-workload-profile.png"  # noqa: S108
SHOWBACK_SCREENSHOT = "/tmp/e2e-showback.png"  # noqa: S108


@pytest.fixture
def live_usage(live_world: World) -> UsageData:
    return write_usage_data(live_world)


def charts_drawn(browsing: Browsing, svg: str = ".main-svg") -> list[str]:
    """Wait until every chart container has its SVG (Plotly's, or ``.chart-svg`` drawn on the
    server), and return their keys."""
    page = browsing.page
    page.wait_for_function(
        "svg => [...document.querySelectorAll('[data-chart]')]"
        ".every(e => e.getAttribute('data-drawn') === 'true' && e.querySelector(svg))",
        arg=svg,
    )
    return page.eval_on_selector_all("[data-chart]", "els => els.map(e => e.dataset.chart)")


def test_alice_sees_team_a_usage_drawn_under_the_policy(live_usage: UsageData, browse: Any) -> None:
    alice = browse()
    alice.log_in("alice")
    response = alice.goto("/tenants/team-a/usage/?range=7d")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    drawn = charts_drawn(alice, ".chart-svg")
    assert {"units", "utilization", "flavor-0", "flavor-1"} <= set(drawn)
    page = alice.page
    # The series came drawn: the A100 chart has the four quota lines and the peak, the two
    # stacked ones filled, each chart an image named by its title.
    assert page.locator("#chart-flavor-0 svg path[fill=none]").count() == 5
    assert page.locator("#chart-flavor-0 svg path[fill-opacity]").count() == 2
    chart = page.get_by_role("img", name="All clusters and flavors, normalised GPU units")
    assert chart.is_visible() and chart.bounding_box()["height"] > 200
    assert page.locator("[data-kpi=borrowing] .kpi-value").inner_text() == "16.7 %"
    # No chart library to load: nothing left for the browser to draw.
    scripts = page.eval_on_selector_all("script[src]", "els => els.map(e => e.src)")
    assert not any("plotly" in s for s in scripts)
    page.screenshot(path=TENANT_SCREENSHOT, full_page=True)

    # Picking a preset in the range picker reloads the page with it.
    with page.expect_navigation():
        page.select_option("select[name=range]", "24h")
    assert "range=24h" in page.url
    charts_drawn(alice, ".chart-svg")
    assert (
        page.locator("p.period")
        .inner_text()
        .endswith("in steps of 5 minutes, read from the usage totals per 5 minutes")
    )


def test_the_admin_dashboard_draws_shares_capacity_and_the_heatmap(
    live_usage: UsageData, browse: Any
) -> None:
    admin = browse()
    admin.log_in("admin")
    admin.goto("/usage/?range=7d")
    drawn = charts_drawn(admin)
    assert {"across", "share-0", "capacity-0", "share-1", "capacity-1", "heatmap-1"} <= set(drawn)
    page = admin.page
    assert page.locator("#chart-heatmap-1 .hm, #chart-heatmap-1 image").count() >= 1
    assert page.locator("table.idle-allocations tbody tr[data-tenant=team-b]").count() == 1
    assert "fragmented" in page.locator("table.mig-free").inner_text()
    page.screenshot(path=ADMIN_SCREENSHOT, full_page=True)


def test_the_profile_report_and_showback_draw(live_usage: UsageData, browse: Any) -> None:
    alice = browse()
    alice.log_in("alice")
    alice.goto("/tenants/team-a/profile/")
    assert set(charts_drawn(alice)) == {"hour-of-week", "gpus-per-job", "durations"}
    assert alice.page.locator("[data-kpi=submissions] .kpi-value").inner_text() == "5"
    alice.page.screenshot(path=PROFILE_SCREENSHOT, full_page=True)
    alice.goto("/tenants/team-a/showback/")
    assert charts_drawn(alice) == ["gpu-hours"]
    alice.page.screenshot(path=SHOWBACK_SCREENSHOT, full_page=True)


# Issue 35 item 10: the chart toolbar (Plotly's mode bar, top right of every chart) sat on the
# charts' titles on /usage/, at phone width and on a desktop.
TOOLBAR_AND_TITLE = """() => [...document.querySelectorAll('[data-chart]')].map(chart => {
    const box = e => { const r = e.getBoundingClientRect();
                       return [r.left, r.top, r.right, r.bottom]; };
    const bar = chart.querySelector('.modebar'), title = chart.querySelector('.gtitle');
    return [chart.dataset.chart, bar && box(bar), title && box(title)];
})"""


@pytest.mark.parametrize(
    "viewport",
    [{"width": 390, "height": 844}, {"width": 1280, "height": 900}],
    ids=["phone", "desktop"],
)
def test_the_chart_toolbar_leaves_the_chart_titles_clear(
    live_usage: UsageData, browse: Any, viewport: dict[str, int]
) -> None:
    admin = browse()
    admin.page.set_viewport_size(viewport)
    admin.log_in("admin")
    admin.goto("/usage/?range=7d")
    charts_drawn(admin)
    page = admin.page
    page.hover("#chart-across")  # the toolbar shows on hover (a tap on a phone)
    boxes = page.evaluate(TOOLBAR_AND_TITLE)
    assert len(boxes) >= 6
    for key, bar, title in boxes:
        assert bar and title, key  # every chart has its toolbar and its title
        left, top, right, bottom = bar
        overlap_x = min(right, title[2]) - max(left, title[0])
        overlap_y = min(bottom, title[3]) - max(top, title[1])
        assert overlap_x <= 0 or overlap_y <= 0, (key, bar, title)
