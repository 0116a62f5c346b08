"""A lead manages her team in a real browser (issue 17): alice adds dave to team-a from the
team page, dave can then open team-a; alice removes him after confirming, and dave's next page
of team-a is a 404."""

from __future__ import annotations

import re

import pytest

from tests.factories import UserFactory

pytestmark = [pytest.mark.e2e]


def test_a_lead_adds_a_member_who_then_opens_the_tenant_and_removes_him(live_world, browse):
    UserFactory(username="dave")
    dave = browse()
    dave.log_in("dave")
    dave.goto("/tenants/team-a/", status=404)

    alice = browse()
    alice.log_in("alice")
    alice.goto("/tenants/team-a/")
    page = alice.page
    with page.expect_navigation():
        page.get_by_role("link", name="Manage the team").click()
    assert page.url == alice.base_url + "/tenants/team-a/team/"
    form = page.locator("form[data-form='team-add']")
    form.get_by_label("Username").fill("dave")
    form.get_by_label("Role").select_option("member")
    with page.expect_navigation():
        form.get_by_role("button", name="Add").click()
    assert "dave is now a member of team-a." in page.locator("main").inner_text()
    row = page.locator("tr[data-member='dave']")
    assert re.sub(r"\s+", " ", row.inner_text()).startswith("dave Member alice ")

    dave.goto("/tenants/team-a/")
    assert dave.page.locator("h1").inner_text().startswith("Team A")

    with page.expect_navigation():
        row.get_by_role("button", name="Remove…").click()
    confirm = page.locator("form[data-confirm]")
    assert "remove dave (member) from team-a" in confirm.inner_text()
    with page.expect_navigation():
        confirm.get_by_role("button", name="Remove dave").click()
    assert "dave was removed from team-a." in page.locator("main").inner_text()
    assert page.locator("tr[data-member='dave']").count() == 0

    dave.goto("/tenants/team-a/", status=404)
