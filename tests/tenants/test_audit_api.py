"""The audit trail through the API: scoped like everything else, append-only, exportable."""

from __future__ import annotations

import csv
import io

from tenants.models import AuditEvent
from tenants.services import membership_set


def test_members_see_their_tenants_events_and_admins_all(world, api_as):
    slugs = {
        e["tenant"]
        for e in api_as(world.carol).get("/api/v1/audit-events/?page_size=200").json()["results"]
    }
    assert slugs == {"team-a"}
    admin_slugs = {
        e["tenant"]
        for e in api_as(world.admin).get("/api/v1/audit-events/?page_size=200").json()["results"]
    }
    assert {"team-a", "team-b", "team-c"} <= admin_slugs
    bob = api_as(world.bob).get("/api/v1/audit-events/?tenant=team-a").json()
    assert bob["count"] == 0 and "team-a" not in str(bob)


def test_events_say_who_what_and_from_where(world, api_as):
    api_as(world.admin).patch("/api/v1/tenants/team-a/", {"display_name": "Vision"}, format="json")
    event = (
        api_as(world.alice).get("/api/v1/audit-events/?action=tenant.updated").json()["results"][0]
    )
    assert event["actor"] == "admin" and event["source"] == "api" and event["tenant"] == "team-a"
    assert (
        event["before"]["display_name"] == "Team A" and event["after"]["display_name"] == "Vision"
    )
    membership_set(tenant=world.team_a, user=world.bob, role="viewer", actor=None)
    system = AuditEvent.objects.get(action="membership.added", object_id="bob@team-a")
    assert system.source == "system" and system.actor_username == "system"


def test_the_trail_cannot_be_changed_through_the_api(world, api_as):
    event = AuditEvent.objects.filter(tenant=world.team_a).first()
    admin = api_as(world.admin)
    for method in ("put", "patch", "delete"):
        response = getattr(admin, method)(f"/api/v1/audit-events/{event.pk}/", {}, format="json")
        assert response.status_code in (404, 405)
    assert admin.post("/api/v1/audit-events/", {}, format="json").status_code == 405
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_csv_export_has_the_same_scoped_rows(world, api_as):
    response = api_as(world.carol).get("/api/v1/audit-events/export/?tenant=team-a")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][:4] == ["created_at", "actor", "source", "action"]
    assert len(rows) - 1 == AuditEvent.objects.filter(tenant=world.team_a).count()
    leak = api_as(world.bob).get("/api/v1/audit-events/export/?tenant=team-a")
    assert b"".join(leak.streaming_content).decode().count("\n") == 1  # the header only


def test_inbox_lists_and_marks_notifications(world, api_as):
    from tenants.services import notify

    notify(users=[world.alice], subject="hello", url="/requests/1/")
    notify(users=[world.bob], subject="not for alice")
    alice = api_as(world.alice)
    inbox = alice.get("/api/v1/notifications/").json()
    assert [n["subject"] for n in inbox["results"]] == ["hello"]
    assert alice.post("/api/v1/notifications/mark-read/", {}, format="json").json() == {"marked": 1}
    assert alice.get("/api/v1/notifications/").json()["results"][0]["read_at"] is not None


FORMULAS = ['=HYPERLINK("http://evil","x")', "+1+2", "-2+3", "@SUM(A1)", "\tx", "\rx"]


def test_csv_export_neutralises_spreadsheet_formulas(world, api_as):
    """OWASP's CSV injection advice: a cell a spreadsheet would read as a formula starts with a
    single quote; other cells are written as they are."""
    for i, text in enumerate(FORMULAS):
        AuditEvent.objects.create(
            actor_username=text, action="tenant.update", object_type="tenant",
            object_id=text, tenant=world.team_a, tenant_slug="team-a", after={"n": i},
        )  # fmt: skip
    response = api_as(world.admin).get("/api/v1/audit-events/export/?action=tenant.update")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode(), newline="")))
    header, body = rows[0], rows[1:]
    actor, object_id = header.index("actor"), header.index("object_id")
    assert sorted(row[actor] for row in body) == sorted(f"'{text}" for text in FORMULAS)
    assert sorted(row[object_id] for row in body) == sorted(f"'{text}" for text in FORMULAS)
    assert {row[header.index("tenant")] for row in body} == {"team-a"}
    assert {row[header.index("after")][:1] for row in body} == {"{"}
