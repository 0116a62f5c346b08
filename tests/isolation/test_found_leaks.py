"""Leaks the sweep found, each pinned down with what the fix must keep working."""

from __future__ import annotations

from django.test import Client
from rest_framework.test import APIClient

from tests.isolation.world import IsoWorld


def _what_if_tenants(world: IsoWorld, user: object) -> list[str]:
    api = APIClient()
    api.force_authenticate(user)
    pk = world.ours.requests["pending"].pk
    response = api.get(f"/api/v1/quota-requests/{pk}/what-if/?days=7")
    assert response.status_code == 200, response.content
    return [row["tenant"] for row in response.json()["tenants"]]


def test_a_leads_what_if_shows_only_their_own_tenants_rows(iso):
    """The replay runs every tenant of the cluster (they share its capacity), but a lead sees
    the rows of their own tenants only: another tenant's queue waits and GPU hours are its
    data. It answered every tenant's rows, by slug, to anyone who could see the request."""
    assert _what_if_tenants(iso, iso.alice) == ["team-a"]


def test_platform_admins_still_see_every_tenant_in_the_what_if(iso):
    assert _what_if_tenants(iso, iso.admin) == ["team-a", "team-b"]


def test_the_request_page_what_if_hides_other_tenants_from_a_lead(iso):
    page = Client()
    page.force_login(iso.alice)
    pk = iso.ours.requests["pending"].pk
    response = page.get(f"/requests/{pk}/?what_if=1&days=7")
    assert response.status_code == 200
    text = response.content.decode()
    assert "team-a" in text
    assert "team-b" not in text
    page.force_login(iso.admin)
    assert "team-b" in page.get(f"/requests/{pk}/?what_if=1&days=7").content.decode()
