"""Single sign-on in a real browser: the login page sends dana to the OpenID provider (a real
one, oidc-provider-mock on a local port), she approves there and comes back as lead of team-a
because she is in ``gpu-team-a-leads``; she files a request. After she leaves the group at the
provider she signs in again and is a lead no more, and her API token is refused for a lead's
action."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from approvals.models import QuotaChangeRequest
from identity.choices import GroupRole
from identity.services import group_mapping_create
from tenants.models import Membership
from tenants.services import api_token_create
from tests.e2e.conftest import Browsing
from tests.identity.servers import PROVIDER_NAME, oidc_provider, provider_user_set, use_oidc

pytestmark = [pytest.mark.e2e]

FORM = "/tenants/team-a/requests/new/?cluster=demo-a100"
SCREENSHOT = "/tmp/e2e-sso-login.png"  # noqa: S108 - a fixed place a person can open


@pytest.fixture
def issuer(settings: Any) -> Iterator[str]:
    with oidc_provider() as url:
        use_oidc(settings, url)
        yield url


def sign_in_through_the_provider(browsing: Browsing, issuer: str, sub: str) -> None:
    browsing.goto("/login/")
    page = browsing.page
    button = page.locator("#sign-in-sso")
    assert button.inner_text() == f"Sign in with {PROVIDER_NAME}"
    page.screenshot(path=SCREENSHOT, full_page=True)
    requests_before, errors_before = len(browsing.requests), len(browsing.console_errors)
    with page.expect_navigation():
        button.click()
    assert page.url.startswith(f"{issuer}/oauth2/authorize?")
    page.fill("input[name=sub]", sub)
    with page.expect_navigation(url=f"{browsing.base_url}/"):
        page.click("button[type=submit]")
    # What the provider's own page loaded (its stylesheet from a CDN, which this machine cannot
    # reach) is the provider's business: the portal's pages are still checked at teardown.
    own = browsing.base_url
    visit = browsing.requests[requests_before:]
    browsing.requests[requests_before:] = [u for u in visit if u.startswith(own)]
    browsing.console_errors[errors_before:] = [
        (text, url) for text, url in browsing.console_errors[errors_before:] if url.startswith(own)
    ]
    page.locator("header .who").wait_for()


def file_with_token(base_url: str, token: str) -> int:
    body = {
        "tenant": "team-a",
        "cluster": "demo-a100",
        "reason": "more GPUs from automation",
        "items": [
            {"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "guaranteed": 7, "limit": 10}
        ],
    }
    response = requests.post(
        f"{base_url}/api/v1/quota-requests/",
        json=body,
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    return response.status_code


def test_a_lead_by_group_signs_in_files_a_request_and_loses_the_role_with_the_group(
    live_world, browse, issuer
) -> None:
    group_mapping_create(
        group="gpu-team-a-leads", role=GroupRole.LEAD, tenant=live_world.team_a,
        actor=live_world.admin,
    )  # fmt: skip
    provider_user_set(
        issuer, "dana-sub", preferred_username="dana", email="dana@example.org",
        groups=["gpu-team-a-leads"],
    )  # fmt: skip
    dana = browse()
    sign_in_through_the_provider(dana, issuer, "dana-sub")
    page = dana.page
    assert page.locator("header .who").inner_text() == "dana"
    assert Membership.objects.get(user__username="dana", tenant=live_world.team_a).role == "lead"

    dana.goto(FORM)
    page.locator("tr[data-flavor='a100-80gb'][data-resource='nvidia.com/gpu'] "
                 "input[name$='-guaranteed']").fill("8")  # fmt: skip
    page.fill("textarea[name=reason]", "Two more A100s for the new speech model")
    with page.expect_navigation():
        page.click("button[value=submit]")
    change = QuotaChangeRequest.objects.get(requester__username="dana")
    assert page.url == dana.base_url + f"/requests/{change.pk}/"

    token = api_token_create(user=change.requester, name="ci")[1]
    assert file_with_token(dana.base_url, token) == 201

    # She leaves the leads' group at the provider, and signs in again.
    provider_user_set(issuer, "dana-sub", preferred_username="dana", groups=[])
    again = browse()
    sign_in_through_the_provider(again, issuer, "dana-sub")
    assert not Membership.objects.filter(user__username="dana").exists()
    again.goto(FORM, status=404)  # team-a is not hers any more
    assert file_with_token(again.base_url, token) in (403, 404)
    # Her first page, still open on the pending request, follows its status: the next ask is
    # refused (the request is not hers to see any more) and the page stops, saying so.
    dana.expected_error_urls.add(f"{dana.base_url}/requests/{change.pk}/status/")
    stopped = page.locator("[data-live-announce]", has_text="can no longer follow the changes")
    stopped.wait_for(state="attached", timeout=20000)
