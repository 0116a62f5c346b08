"""Admin-only pages refuse leads (403) and send anonymous visitors to log in.

The pages come from the URL conf: everything under the console's and the fleet's prefixes is
for platform admins, Django admin is for staff, and every other page must be listed below as
one any signed-in user may open (each with its own tenant checks, tested in
``tests/test_isolation.py``) or a public one. A page added later that is in neither list fails
``test_every_page_is_classified`` until someone says who may open it.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.test import Client

from tests.security.routes import all_routes

ADMIN_ONLY_PREFIXES = ("console/", "fleet/", "usage/", "showback/")
MEMBER_PAGES = {
    "home",
    "tenant-detail",
    "tenant-cluster",
    "tenant-cluster-manifests",
    "cluster-detail",  # read by everyone; the view refuses a non-admin's change itself
    "request-new",
    "request-validate",
    "request-list",
    "request-detail",
    "request-status",  # the request page's status, for its script: the page's own access
    "request-submit",
    "request-cancel",
    "request-approve",  # the view refuses non-admins itself (tests/portal/test_request_pages.py)
    "request-reject",
    "request-retry",
    "inbox",
    "inbox-read-all",
    "inbox-read",
    "tenant-usage",  # the dashboards: tenant-scoped (tests/dashboards/test_pages.py)
    "tenant-profile",
    "tenant-showback",
    "tenant-suggestions-compute",  # leads of the tenant (tests/advice/test_api.py)
    "alert-list",  # scoped to the caller's tenants (tests/alerts/test_api.py)
    "alert-detail",
    "alert-acknowledge",
    "alert-reactivate",
    "tenant-team",  # members read; leads and admins change (tests/tenants/test_team_pages.py)
    "tenant-team-role",
    "tenant-team-remove",
    "tenant-team-bulk",  # leads and admins add several at once (tests/tenants/test_join_requests.py)
    "tenant-team-ask-approve",
    "tenant-team-ask-refuse",
    "tenant-join",  # anyone signed in asks to join a team by its slug (the same file)
    "tenant-join-withdraw",
    "tenant-workloads",  # members read; leads suspend, resume and ask (tests/usage/test_workloads.py)
    "tenant-workload-suspend",
    "tenant-workload-resume",
    "tenant-workload-ask",
    "tenant-grants",  # the tenant's members (tests/approvals/test_grants.py)
    "tenant-grant-new",  # leads of the tenant and admins, as request-new (the same file)
    "grant-extend",  # leads of the grant's tenant and admins (the same file)
    "tenant-person-caps",  # members read; leads (admins: the default) set (test_person_caps.py)
    "request-revert",  # leads of the tenant and admins (tests/approvals/test_change_watch.py)
    "help-preemption",  # the same help text for everyone signed in
    "help",  # the documentation site, the same for everyone signed in (tests/portal/test_help.py)
    "help-page",
}
PUBLIC_PAGES = {
    "login",
    "logout",
    "healthz",
    "livez",  # the probes (portal/health.py)
    "readyz",
    "favicon.ico",
    # Single sign-on: the redirect to the identity provider and its answer (404 while OIDC is
    # not configured; tests/identity/test_oidc.py).
    "oidc_authentication_init",
    "oidc_authentication_callback",
}
# For machines, with their own credentials (the Prometheus scrape: a bearer token or networks).
MACHINE_ENDPOINTS = {"metrics"}

PAGES = [r for r in all_routes() if not r.is_api]
ADMIN_ONLY = [r for r in PAGES if r.route.startswith(ADMIN_ONLY_PREFIXES)]
DJANGO_ADMIN = [
    r
    for r in PAGES
    if r.is_django_admin and r.name not in ("login", "logout") and "url" not in r.route
]


def test_every_page_is_classified():
    unclassified = [
        r.route
        for r in PAGES
        if not r.is_django_admin
        and not r.route.startswith(ADMIN_ONLY_PREFIXES)
        and r.name not in MEMBER_PAGES | PUBLIC_PAGES | MACHINE_ENDPOINTS
    ]
    assert unclassified == [], (
        "say who may open these pages: put them under /console/ or /fleet/ (platform admins), "
        "or add them to MEMBER_PAGES / PUBLIC_PAGES / MACHINE_ENDPOINTS in "
        "tests/security/test_admin_pages.py"
    )
    assert {
        "console",
        "approvals-queue",
        "grants-timeline",
        "fleet",
        "fleet-plan",
        "fleet-gpu",
        "fleet-isolation",
    } <= {r.name for r in ADMIN_ONLY}


@pytest.mark.parametrize("persona", ["alice", "carol", "bob"])
def test_admin_only_pages_refuse_leads_and_members_with_403(world, persona):
    client = Client()
    client.force_login(getattr(world, persona))
    for route in ADMIN_ONLY:
        answers = {m: getattr(client, m)(route.url()).status_code for m in ("get", "post")}
        allowed = {m: code for m, code in answers.items() if code != 405}  # method not offered
        assert allowed, route.url()
        assert set(allowed.values()) == {403}, (persona, route.url(), answers)


def test_admin_only_pages_send_anonymous_visitors_to_log_in(world):
    client = Client()
    for route in ADMIN_ONLY:
        url = route.url()
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            assert response.status_code == 302, (method, url)
            target = urlsplit(response["Location"])
            assert target.path == "/login/", (method, url, response["Location"])


def test_platform_admins_open_them(world):
    """The other side: the refusals above are about who asks, not broken pages."""
    client = Client()
    client.force_login(world.admin)
    for route in ADMIN_ONLY:
        if "<" not in route.route:
            assert client.get(route.url()).status_code == 200, route.url()


def test_django_admin_is_for_staff_only(world):
    anonymous, lead, admin = Client(), Client(), Client()
    lead.force_login(world.alice)
    admin.force_login(world.admin)
    assert len(DJANGO_ADMIN) > 50
    for route in DJANGO_ADMIN:
        url = route.url()
        for client in (anonymous, lead):
            response = client.get(url)
            # Django admin answers a visitor who is not staff with its own login page.
            assert response.status_code == 302, url
            assert urlsplit(response["Location"]).path == "/admin/login/", url
    assert admin.get("/admin/").status_code == 200
    assert admin.get("/admin/tenants/tenant/").status_code == 200
    assert b"team-a" not in lead.get("/admin/tenants/tenant/", follow=True).content
