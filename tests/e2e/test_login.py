"""The portal in a real browser: logging in, what each persona sees, and what it may not see.

alice leads team-a (6 guaranteed / 10 limit A100-80GB GPUs on demo-a100); bob leads team-b and
must not learn that team-a exists, neither from the pages nor from the API with his session.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.conftest import Browsing
from tests.factories import PASSWORD

pytestmark = [pytest.mark.e2e]

SCREENSHOT = "/tmp/e2e-home.png"  # noqa: S108 - a fixed place a person can open


def card(browsing: Browsing, slug: str) -> Any:
    return browsing.page.locator(f"article.card[data-tenant='{slug}']")


def test_alice_logs_in_and_sees_team_a_quotas(live_world, browse) -> None:
    alice = browse()
    alice.log_in("alice")

    page = alice.page
    assert page.url == alice.base_url + "/"
    assert page.locator("h1").inner_text() == "My tenants"
    assert page.locator("header .who").inner_text() == "alice"
    assert page.locator("article.card").count() == 1
    team_a = card(alice, "team-a")
    assert team_a.locator("h2").inner_text() == "Team A"

    units = team_a.locator("p.units").nth(_cluster_index(team_a, "demo-a100"))
    assert re.sub(r"\s+", " ", units.inner_text()) == (
        "Normalised GPU units: 6 guaranteed, 10 limit"
    )
    flavor = team_a.locator("ul.flavors li", has_text="a100-80gb")
    words = flavor.inner_text()
    assert "10 GPUs limit" in words and "6 guaranteed" in words
    # demo-h100 carries the small tier's 4 / 6 H100s, which weigh 2 units each.
    h100_units = team_a.locator("p.units").nth(_cluster_index(team_a, "demo-h100"))
    assert "8 guaranteed, 12 limit" in h100_units.inner_text()

    page.screenshot(path=SCREENSHOT, full_page=True)

    with page.expect_navigation():
        team_a.locator("h2 a").click()
    assert page.url == alice.base_url + "/tenants/team-a/"
    namespaces = page.locator("section", has=page.locator("h2", has_text="Namespaces"))
    assert namespaces.locator("li code").all_inner_texts() == [
        "team-a-inference",
        "team-a-training",
    ]
    members = page.locator("section", has=page.locator("h2", has_text="Members"))
    rows = [
        tuple(cell.strip() for cell in row.split("\t"))
        for row in members.locator("tbody tr").all_inner_texts()
    ]
    assert rows == [("alice", "Lead"), ("carol", "Member"), ("victor", "Viewer")]
    assert "bob" not in page.locator("main").inner_text()
    quota_set = page.locator("section.quota-set[data-cluster='demo-a100']")
    gpu_row = quota_set.locator("tbody tr", has_text="nvidia.com/gpu")
    assert [c.strip() for c in gpu_row.locator("td").all_inner_texts()][:4] == [
        "a100-80gb",
        "nvidia.com/gpu",
        "6",
        "10",
    ]


def _cluster_index(card_locator: Any, cluster: str) -> int:
    headings = [text.split()[0] for text in card_locator.locator("h3").all_inner_texts()]
    return headings.index(cluster)


def test_bob_does_not_see_team_a_anywhere(live_world, browse) -> None:
    bob = browse()
    bob.log_in("bob")
    page = bob.page

    assert page.url == bob.base_url + "/"
    assert [c.get_attribute("data-tenant") for c in page.locator("article.card").all()] == [
        "team-b"
    ]
    assert "team-a" not in page.content()
    assert "Team A" not in page.locator("body").inner_text()

    bob.goto("/tenants/team-a/", status=404)
    assert page.locator("h1").inner_text() == "Not found"
    assert "team-a" not in page.locator("main").inner_text()
    # A tenant that does not exist answers exactly the same, so the 404 leaks nothing.
    not_there = page.locator("body").inner_text()
    bob.goto("/tenants/no-such-team/", status=404)
    assert page.locator("body").inner_text() == not_there

    # The API with bob's browser session (cookies shared with the page).
    detail = page.request.get(bob.base_url + "/api/v1/tenants/team-a/")
    assert detail.status == 404
    missing = page.request.get(bob.base_url + "/api/v1/tenants/no-such-team/")
    assert missing.status == 404
    # Word for word the answer for a tenant that does not exist (it only echoes the slug asked).
    assert detail.text().replace("team-a", "SLUG") == missing.text().replace("no-such-team", "SLUG")
    listing = page.request.get(bob.base_url + "/api/v1/tenants/")
    assert listing.status == 200
    assert [t["slug"] for t in listing.json()["results"]] == ["team-b"]
    quotas = page.request.get(bob.base_url + "/api/v1/tenants/team-a/quotas/")
    assert quotas.status == 404


def test_admin_console_is_for_platform_admins_only(live_world, browse) -> None:
    anonymous = browse()
    anonymous.goto("/console/")
    assert anonymous.page.url == anonymous.base_url + "/login/?next=/console/"
    assert anonymous.page.locator("h1").inner_text() == "Log in"

    alice = browse()
    alice.log_in("alice")
    assert alice.page.locator("nav a", has_text="Admin console").count() == 0
    alice.goto("/console/", status=403)
    assert alice.page.locator("h1").inner_text() == "Forbidden"

    admin = browse()
    admin.log_in("admin")
    with admin.page.expect_navigation():
        admin.page.locator("nav a", has_text="Admin console").click()
    assert admin.page.url == admin.base_url + "/console/"
    assert admin.page.locator("h1").inner_text() == "Admin console"
    body = admin.page.locator("main").inner_text()
    assert "3 tenants: the tenants table" in body
    assert {
        s.get_attribute("data-cluster") for s in admin.page.locator("section.cluster").all()
    } == {"demo-a100", "demo-h100"}


def test_logging_in_from_a_protected_page_returns_to_it(live_world, browse) -> None:
    alice = browse()
    alice.goto("/tenants/team-a/")
    assert alice.page.url == alice.base_url + "/login/?next=/tenants/team-a/"
    alice.page.fill("#id_username", "alice")
    alice.page.fill("#id_password", "not-her-password")
    with alice.page.expect_navigation():
        alice.page.click("form button[type=submit]")
    assert "did not match" in alice.page.locator("main").inner_text()
    alice.page.fill("#id_username", "alice")
    alice.page.fill("#id_password", PASSWORD)
    with alice.page.expect_navigation():
        alice.page.click("form button[type=submit]")
    assert alice.page.url == alice.base_url + "/tenants/team-a/"

    with alice.page.expect_navigation():
        alice.page.click("form.inline button[type=submit]")  # log out
    assert alice.page.url == alice.base_url + "/login/"
    alice.goto("/")
    assert alice.page.url == alice.base_url + "/login/?next=/"


@pytest.mark.parametrize(
    ("username", "paths"),
    [
        ("alice", ["/", "/tenants/team-a/", "/api/v1/docs/"]),
        ("admin", ["/", "/tenants/team-c/", "/console/", "/admin/", "/api/v1/docs/"]),
    ],
)
def test_pages_load_nothing_from_other_hosts(live_world, browse, username, paths) -> None:
    browsing = browse()
    browsing.log_in(username)
    for path in paths:
        before = len(browsing.requests)
        browsing.goto(path)
        if path == "/api/v1/docs/":
            # Swagger UI renders from the app's own static files and fetches the schema.
            browsing.page.wait_for_selector(".swagger-ui .info .title")
            browsing.page.wait_for_load_state("networkidle")
            assert any(u.endswith("/api/v1/schema/") for u in browsing.requests[before:])
        loaded = browsing.requests[before:]
        assert any(u.endswith(".css") for u in loaded), f"{path}: no stylesheet loaded"
        assert browsing.foreign_requests() == [], f"{path} requested another host"
    browsing.assert_clean()
