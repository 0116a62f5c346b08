"""Statements compiled once per process (core.prepared, issue 36): the tenants page and a
tenant's quotas answer exactly what the ORM path answers, and a statement remembered for one
caller never answers with another caller's rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import prepared
from tenants.models import Tenant
from tests.factories import UserFactory

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the tenants page prepares on PostgreSQL only"
)

PAGES = [
    "/api/v1/tenants/",
    "/api/v1/tenants/?page_size=2",
    "/api/v1/tenants/?page_size=2&page=2",
    "/api/v1/tenants/?archived=true",
]


@pytest.fixture
def fresh(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(prepared, "_STATEMENTS", {})


def bodies(world, api_as, urls):  # type: ignore[no-untyped-def]
    users = [world.admin, world.alice, world.bob, world.carol, UserFactory(username="loner")]
    return {(u.username, url): api_as(u).get(url).content for u in users for url in urls}


def test_the_tenants_page_answers_what_the_orm_answers(world, api_as, fresh, monkeypatch):
    Tenant.objects.filter(slug="team-c").update(
        description="archived", archived_at="2026-01-01T00:00:00Z"
    )
    quota_urls = [f"/api/v1/tenants/{slug}/quotas/" for slug in ("team-a", "team-b", "team-c")]
    urls = PAGES + quota_urls
    first, again = bodies(world, api_as, urls), bodies(world, api_as, urls)
    assert prepared._STATEMENTS  # remembered, then used
    monkeypatch.setattr(prepared, "_compile", lambda qs, params: None)  # the ORM every time
    monkeypatch.setattr(prepared, "_STATEMENTS", {})
    plain = bodies(world, api_as, urls)
    assert first == again == plain
    assert b'"team-b"' not in first[("alice", "/api/v1/tenants/")]


def test_a_remembered_member_page_answers_each_member_with_their_own(world, api_as, fresh):
    assert [t["slug"] for t in api_as(world.alice).get("/api/v1/tenants/").json()["results"]] == [
        "team-a"
    ]
    with CaptureQueriesContext(connection) as queries:
        body = api_as(world.bob).get("/api/v1/tenants/").json()
    assert [t["slug"] for t in body["results"]] == ["team-b"] and body["count"] == 1
    assert len(queries.captured_queries) == 1  # the page and its count, in one statement
    assert api_as(UserFactory(username="loner")).get("/api/v1/tenants/").json()["count"] == 0


def test_a_statement_with_parameters_the_key_does_not_name_is_not_remembered(db, fresh):
    Tenant.objects.create(slug="one", display_name="One")
    Tenant.objects.create(slug="two", display_name="Two")

    def build(slug: str):  # type: ignore[no-untyped-def]
        return lambda: Tenant.objects.filter(slug=slug).values_list("slug")

    # The compiled parameters ("one") are not the ones given (): the ORM answers every time.
    assert prepared.prepared_rows("by-slug", build("one")) == [("one",)]
    assert prepared.prepared_rows("by-slug", build("two")) == [("two",)]
    # Given as parameters, one statement serves both.
    assert prepared.prepared_rows("by-slug-2", build("one"), ["one"]) == [("one",)]
    assert prepared.prepared_rows("by-slug-2", build("two"), ["two"]) == [("two",)]
    assert prepared.prepared_rows("by-slug-2", build("x"), ["two"], limit=1, offset=1) == []


def test_the_page_writes_date_times_as_drf_does(world, api_as):
    """PostgreSQL writes the page's date-times (tenants.selectors.UtcIso) as DRF's
    DateTimeField does: UTC, "Z", six digits of fraction, none when it is zero."""
    from datetime import UTC, datetime

    from rest_framework.fields import DateTimeField

    whole, tenth = (
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 3, 4, 5, 6, 7, 120000, tzinfo=UTC),
    )
    Tenant.objects.filter(slug="team-a").update(created_at=whole, updated_at=tenth)
    Tenant.objects.filter(slug="team-c").update(archived_at=tenth)
    admin = api_as(world.admin)
    rows = [
        *admin.get("/api/v1/tenants/").json()["results"],
        *admin.get("/api/v1/tenants/?archived=true").json()["results"],
    ]
    drf = DateTimeField().to_representation
    for row in rows:
        tenant = Tenant.objects.get(slug=row["slug"])
        assert row["created_at"] == drf(tenant.created_at)
        assert row["updated_at"] == drf(tenant.updated_at)
        assert row["archived_at"] == (drf(tenant.archived_at) if tenant.archived_at else None)
    by_slug = {row["slug"]: row for row in rows}
    assert by_slug["team-a"]["created_at"] == "2026-01-01T00:00:00Z"
    assert by_slug["team-a"]["updated_at"] == "2026-03-04T05:06:07.120000Z"
    assert by_slug["team-c"]["archived_at"] == "2026-03-04T05:06:07.120000Z"
    assert by_slug["team-b"]["archived_at"] is None
