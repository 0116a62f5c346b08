"""Directory sign-in in a real browser: lena exists only in the company's OpenLDAP directory (a
real slapd, started by the test) and is in its ``gpu-team-a-leads`` group, which an admin mapped
to "lead of team-a". She types her directory password into the portal's login form, lands on her
tenants with team-a among them as its lead, and files a request. After she leaves the group in
the directory she signs in again: team-a is not hers any more, and her API token is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from approvals.models import QuotaChangeRequest
from identity.choices import GroupRole
from identity.services import group_mapping_create
from tenants.models import Membership
from tenants.services import api_token_create
from tests.e2e.conftest import Browsing
from tests.e2e.test_sso import FORM, file_with_token
from tests.identity.servers import Directory, slapd, use_ldap

pytestmark = [pytest.mark.e2e]

PASSWORD = "lena-directory-Pw-4417"
SCREENSHOT = "/tmp/e2e-ldap-home.png"  # noqa: S108 - a fixed place a person can open


@pytest.fixture(scope="module")
def directory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    with slapd(tmp_path_factory.mktemp("slapd")) as directory:
        yield directory


@pytest.fixture
def directory(directory_server: Directory, settings: Any) -> Directory:
    use_ldap(settings, directory_server)
    return directory_server


def sign_in_with_the_form(browsing: Browsing, username: str, password: str) -> None:
    browsing.goto("/login/")
    page = browsing.page
    assert page.locator("#sign-in-sso").count() == 0  # no OpenID provider configured here
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation(url=f"{browsing.base_url}/"):
        page.click("form button[type=submit]")


def test_a_directory_lead_signs_in_with_the_form_sees_her_tenant_and_loses_it_with_the_group(
    live_world, browse, directory: Directory
) -> None:
    dn = directory.user_add("lena", PASSWORD, email="lena@example.org")
    directory.group_add("gpu-team-a-leads", dn)
    group_mapping_create(
        group="gpu-team-a-leads", role=GroupRole.LEAD, tenant=live_world.team_a,
        actor=live_world.admin,
    )  # fmt: skip

    lena = browse()
    sign_in_with_the_form(lena, "lena", PASSWORD)
    page = lena.page
    assert page.locator("header .who").inner_text() == "lena"
    assert page.locator("h1").inner_text() == "My tenants"
    cards = page.locator("article.card")
    assert cards.count() == 1
    assert cards.first.get_attribute("data-tenant") == "team-a"
    assert cards.first.locator("h2").inner_text() == "Team A"
    page.screenshot(path=SCREENSHOT, full_page=True)
    membership = Membership.objects.get(user__username="lena", tenant=live_world.team_a)
    assert (membership.role, membership.source) == ("lead", "group:gpu-team-a-leads")

    # The tenant's page lists her as its lead.
    with page.expect_navigation():
        cards.first.locator("h2 a").click()
    assert page.url == lena.base_url + "/tenants/team-a/"
    members = page.locator("section", has=page.locator("h2", has_text="Members"))
    row = members.locator("tbody tr", has_text="lena")
    assert [cell.strip() for cell in row.locator("td, th").all_inner_texts()][:2] == [
        "lena",
        "Lead",
    ]

    # As a lead she files a request in the browser, and her token files one too.
    lena.goto(FORM)
    page.locator("tr[data-flavor='a100-80gb'][data-resource='nvidia.com/gpu'] "
                 "input[name$='-guaranteed']").fill("8")  # fmt: skip
    page.fill("textarea[name=reason]", "Two more A100s for the directory team")
    with page.expect_navigation():
        page.click("button[value=submit]")
    change = QuotaChangeRequest.objects.get(requester__username="lena")
    assert page.url == lena.base_url + f"/requests/{change.pk}/"
    token = api_token_create(user=change.requester, name="ci")[1]
    assert file_with_token(lena.base_url, token) == 201
    # Her first page leaves the pending request, whose page asks for its status now and then
    # (what such a page does when she loses the role is test_sso's): an ask landing after she
    # left the group would be refused, and when that happens depends on the machine's speed.
    lena.goto("/")

    # She leaves the group in the directory and signs in again.
    directory.group_member_remove("gpu-team-a-leads", dn)
    again = browse()
    sign_in_with_the_form(again, "lena", PASSWORD)
    assert again.page.locator("article.card").count() == 0
    assert not Membership.objects.filter(user__username="lena").exists()
    again.goto("/tenants/team-a/", status=404)
    assert file_with_token(again.base_url, token) in (403, 404)
