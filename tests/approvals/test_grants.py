"""Grants for a time (issue 37 item 3): a request with a start and an end adds its lines on
top of the standing quota for that window. Checked against capacity over the whole window
(overlapping grants together, others not), pushed when it starts and withdrawn when it ends
through the outbox (retried until it lands, shown as ending meanwhile), audited at each step;
a standing change made meanwhile stays. Leads are told ahead of the end and can ask to extend;
admins see every grant on a time line and in the API; nobody else sees another tenant's."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import ApprovalPolicy, QuotaChangeRequest
from approvals.services import grants_tick, quota_request_approve
from quotas.choices import GPU_RESOURCE, GrantState
from quotas.kube.applier import RetryableError
from quotas.models import Cluster, Grant, SyncOutbox
from quotas.sync import outbox_deliver
from tenants.models import AuditEvent, Notification
from tests.approvals.conftest import URL, database_state, file, gpu_quota, item
from tests.standin import a100_gpu_quota, kubectl_json

GRANTS = "/api/v1/grants/"


@pytest.fixture
def roomy(world: Any) -> Any:
    """demo-a100 lets one tenant hold its whole capacity (16 GPUs; 12 are guaranteed to the
    three teams), so a grant's limit is bounded by capacity, not the elastic cap."""
    Cluster.objects.filter(pk=world.a100.pk).update(elastic_cap_fraction=Decimal(1))
    world.a100.refresh_from_db()
    return world


def _iso(when: Any) -> str:
    return when.isoformat()


def grant_body(
    *, starts_in: timedelta | None = None, lasts: timedelta = timedelta(days=14), **changes: Any
) -> dict[str, Any]:
    now = timezone.now()
    start = now + (starts_in or timedelta(0))
    data: dict[str, Any] = {
        "tenant": "team-a",
        "cluster": "demo-a100",
        "reason": "evaluation before the release",
        "items": [item(guaranteed=2, limit=4)],
        "starts_at": _iso(start),
        "ends_at": _iso(start + lasts),
        "submit": True,
    }
    data.update(changes)
    return data


def _file(api_as: Any, user: Any, **changes: Any) -> Any:
    return api_as(user).post(URL, grant_body(**changes), format="json")


def _approve(world: Any, pk: int) -> QuotaChangeRequest:
    return quota_request_approve(request=QuotaChangeRequest(pk=pk), approver=world.admin)


def page(user: Any, url: str) -> Any:
    client = Client()
    client.force_login(user)
    return client.get(url)


def _deliver_open() -> None:
    for row in SyncOutbox.objects.filter(completed_at__isnull=True).order_by("generation"):
        outbox_deliver(outbox_id=row.pk)


def test_a_grant_is_pushed_withdrawn_at_its_end_and_a_standing_change_made_meanwhile_stays(
    roomy, standin, api_as
):
    world = roomy
    _deliver_open()  # the standing quotas in the cluster: team-a 6 / 10
    answer = _file(api_as, world.alice, lasts=timedelta(hours=1))
    assert answer.status_code == 201, answer.json()
    assert answer.json()["diff"][0]["guaranteed_after"] == "8"  # 6 standing + 2

    request = _approve(world, answer.json()["id"])
    grant = Grant.objects.get(request_number=request.pk)
    assert grant.state == GrantState.ACTIVE
    assert request.approved_generation == grant.started_generation
    assert gpu_quota(world, world.team_a) == (6, 10)  # the standing lines are not written
    _deliver_open()
    cq = kubectl_json(standin, "get", "clusterqueue", "team-a")
    assert a100_gpu_quota(cq) == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "8",
        "borrowingLimit": "6",
    }
    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED

    # A standing change while the grant runs: 6 -> 7 guaranteed.
    standing = file(world, items=[item(guaranteed=7, limit=10)])
    quota_request_approve(request=standing, approver=world.admin)
    _deliver_open()
    assert (
        a100_gpu_quota(kubectl_json(standin, "get", "clusterqueue", "team-a"))["nominalQuota"]
        == "9"
    )

    # The end comes while the cluster is unreachable: withdrawn, ending, retried.
    grants_tick(now=grant.ends_at + timedelta(seconds=1))
    grant.refresh_from_db()
    assert grant.state == GrantState.ENDING
    standin.fail_next(None, 503)
    row = SyncOutbox.objects.get(generation=grant.ending_generation, tenant=world.team_a)
    with pytest.raises(RetryableError):
        outbox_deliver(outbox_id=row.pk)
    grants_tick(now=grant.ends_at + timedelta(minutes=1))
    grant.refresh_from_db()
    assert grant.state == GrantState.ENDING
    shown = api_as(world.alice).get(f"{GRANTS}{grant.pk}/").json()
    assert shown["state"] == "ending"
    shown_page = page(world.alice, "/tenants/team-a/grants/")
    assert b"waiting for the cluster to confirm" in shown_page.content

    standin.clear_faults()
    outbox_deliver(outbox_id=row.pk)  # the task's retry
    grant.refresh_from_db()
    assert grant.state == GrantState.ENDED
    cq = kubectl_json(standin, "get", "clusterqueue", "team-a")
    assert a100_gpu_quota(cq)["nominalQuota"] == "7"  # the standing change stays
    actions = list(
        AuditEvent.objects.filter(object_id__startswith=f"grant {grant.pk} ")
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["grant.scheduled", "grant.started", "grant.withdrawn", "grant.ended"]


def test_a_scheduled_grant_starts_by_itself_and_its_request_follows_the_push(
    roomy, standin, api_as
):
    world = roomy
    answer = _file(api_as, world.alice, starts_in=timedelta(days=2))
    request = _approve(world, answer.json()["id"])
    grant = Grant.objects.get(request_number=request.pk)
    assert (grant.state, request.status, request.approved_generation) == (
        GrantState.SCHEDULED,
        RequestStatus.APPROVED,
        None,
    )
    before = SyncOutbox.objects.count()
    grants_tick(now=grant.starts_at - timedelta(seconds=1))
    assert SyncOutbox.objects.count() == before  # not yet

    grants_tick(now=grant.starts_at)
    grants_tick(now=grant.starts_at)  # twice: nothing more
    grant.refresh_from_db()
    request.refresh_from_db()
    assert grant.state == GrantState.ACTIVE
    assert request.approved_generation == grant.started_generation
    assert SyncOutbox.objects.count() == before + 1
    _deliver_open()
    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED


def test_overlapping_grants_must_fit_together_and_one_that_does_not_overlap_does_not_count(
    roomy, api_as
):
    world = roomy  # 16 A100s, 12 guaranteed: 4 left
    first = _file(api_as, world.alice, items=[item(guaranteed=3, limit=3)], lasts=timedelta(days=2))
    _approve(world, first.json()["id"])

    overlapping = api_as(world.bob).post(
        URL,
        grant_body(
            tenant="team-b", items=[item(guaranteed=2, limit=2)], starts_in=timedelta(days=1)
        ),
        format="json",
    )
    assert overlapping.status_code == 400
    assert "items[0].guaranteed" in overlapping.json()["fields"]

    after = api_as(world.bob).post(
        URL,
        grant_body(
            tenant="team-b",
            items=[item(guaranteed=2, limit=2)],
            starts_in=timedelta(days=2, minutes=1),
            lasts=timedelta(days=2),
        ),
        format="json",
    )
    assert after.status_code == 201, after.json()

    # A standing change lasts past every grant: it must leave room for them all.
    standing = api_as(world.bob).post(
        URL,
        {
            "tenant": "team-b",
            "cluster": "demo-a100",
            "reason": "more",
            "items": [item(guaranteed=6, limit=6)],  # 4 -> 6
            "submit": True,
        },
        format="json",
    )
    assert standing.status_code == 400
    assert "items[0].guaranteed" in standing.json()["fields"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"lasts": timedelta(hours=-1)}, "ends_at"),
        ({"starts_in": timedelta(days=-20), "lasts": timedelta(days=14)}, "ends_at"),
        ({"lasts": timedelta(days=91)}, "ends_at"),
        ({"max_pods": 50}, "max_pods"),
        ({"items": []}, "items"),
        ({"items": [item(guaranteed=0, limit=0)]}, "items[0].limit"),
        ({"items": [item(guaranteed=2, limit=4, lending_limit=1)]}, "items[0].lending_limit"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(roomy, api_as, changes, field):
    before = database_state()
    answer = _file(api_as, roomy.alice, **changes)
    assert answer.status_code == 400, answer.json()
    assert field in answer.json()["fields"]
    assert database_state() == before
    assert not Grant.objects.exists()


def test_a_start_without_an_end_is_a_400_naming_ends_at(roomy, api_as):
    body = grant_body()
    del body["ends_at"]
    answer = api_as(roomy.alice).post(URL, body, format="json")
    assert answer.status_code == 400
    assert "ends_at" in answer.json()["fields"]


def test_the_longest_window_is_an_admin_setting(roomy, api_as):
    ApprovalPolicy.objects.update_or_create(pk=1, defaults={"grant_max_days": 7})
    answer = _file(api_as, roomy.alice, lasts=timedelta(days=8))
    assert answer.status_code == 400
    assert "7 days" in answer.json()["fields"]["ends_at"][0]


def test_only_leads_and_admins_file_grants_and_nobody_sees_another_tenants(roomy, api_as):
    world = roomy
    for user in (world.carol, world.victor):  # member and viewer of team-a
        assert _file(api_as, user).status_code == 403
    assert _file(api_as, world.bob).status_code == 404  # team-b's lead: not his tenant
    request = _approve(world, _file(api_as, world.alice).json()["id"])
    grant = Grant.objects.get(request_number=request.pk)

    assert api_as(world.bob).get(GRANTS).json()["results"] == []
    assert api_as(world.bob).get(f"{GRANTS}{grant.pk}/").status_code == 404
    later = _iso(grant.ends_at + timedelta(days=3))
    assert (
        api_as(world.bob).post(f"{GRANTS}{grant.pk}/extend/", {"ends_at": later}).status_code == 404
    )
    assert page(world.bob, "/tenants/team-a/grants/").status_code == 404
    # carol sees her team's grant but may not extend it.
    assert [g["id"] for g in api_as(world.carol).get(GRANTS).json()["results"]] == [grant.pk]
    assert (
        api_as(world.carol).post(f"{GRANTS}{grant.pk}/extend/", {"ends_at": later}).status_code
        == 403
    )
    # The admins' time line: for admins only.
    assert page(world.alice, "/console/grants/").status_code == 403
    timeline = page(world.admin, "/console/grants/")
    assert timeline.status_code == 200
    assert b"team-a" in timeline.content and b"demo-a100" in timeline.content


def test_a_lead_is_told_before_the_end_once_and_can_ask_to_extend(roomy, api_as):
    world = roomy
    request = _approve(world, _file(api_as, world.alice).json()["id"])
    grant = Grant.objects.get(request_number=request.pk)
    grants_tick(now=grant.ends_at - timedelta(days=4))
    assert not Notification.objects.filter(user=world.alice, subject__contains="ends").exists()
    grants_tick(now=grant.ends_at - timedelta(days=2))
    grants_tick(now=grant.ends_at - timedelta(days=1))
    assert Notification.objects.filter(user=world.alice, subject__contains="ends").count() == 1
    assert not Notification.objects.filter(user=world.carol, subject__contains="ends").exists()

    later = _iso(grant.ends_at + timedelta(days=7))
    answer = api_as(world.alice).post(
        f"{GRANTS}{grant.pk}/extend/", {"ends_at": later, "reason": "release slipped"}
    )
    assert answer.status_code == 201, answer.json()
    extension = QuotaChangeRequest.objects.get(pk=answer.json()["id"])
    assert extension.status == RequestStatus.PENDING
    assert extension.starts_at == grant.ends_at
    assert [(i.resource, i.guaranteed, i.limit) for i in extension.items.all()] == [
        (GPU_RESOURCE, 2, 4)
    ]
    bad = api_as(world.alice).post(
        f"{GRANTS}{grant.pk}/extend/", {"ends_at": _iso(grant.ends_at - timedelta(days=1))}
    )
    assert bad.status_code == 400 and "ends_at" in bad.json()["fields"]

    # Approved, the extension takes over as the grant ends: one withdrawn, the other started.
    _approve(world, extension.pk)
    following = Grant.objects.get(request_number=extension.pk)
    grants_tick(now=grant.ends_at)
    grant.refresh_from_db()
    following.refresh_from_db()
    assert (grant.state, following.state) == (GrantState.ENDING, GrantState.ACTIVE)
    assert following.started_generation > grant.ending_generation


def test_the_api_lists_what_is_promised_next_week_for_admins(roomy, api_as):
    world = roomy
    _approve(world, _file(api_as, world.alice, starts_in=timedelta(days=3)).json()["id"])
    _approve(
        world,
        _file(
            api_as, world.alice, starts_in=timedelta(days=20), items=[item(guaranteed=1, limit=1)]
        ).json()["id"],
    )
    week = _iso(timezone.now() + timedelta(days=7))
    found = api_as(world.admin).get(GRANTS, {"cluster": "demo-a100", "starts_before": week}).json()
    assert [(g["tenant"], g["state"], g["lines"][0]["guaranteed"]) for g in found["results"]] == [
        ("team-a", "scheduled", "2")
    ]


def test_the_grant_pages_label_every_control(roomy, api_as):
    from tests.portal.test_labels import parsed

    world = roomy
    _approve(world, _file(api_as, world.alice).json()["id"])
    for user, path in ((world.alice, "/tenants/team-a/grants/"), (world.admin, "/console/grants/")):
        shown = parsed(page(user, path))
        assert shown.unlabelled() == [] and shown.bare_tables == [], path
    assert b"Ask to extend" in page(world.alice, "/tenants/team-a/grants/").content
    assert b"Ask to extend" not in page(world.carol, "/tenants/team-a/grants/").content


def test_a_lead_asks_for_a_grant_on_its_page_and_bad_input_is_named_there(roomy):
    world = roomy
    client = Client()
    client.force_login(world.alice)
    url = "/tenants/team-a/grants/new/"
    assert client.get(url).status_code == 200
    start = timezone.now() + timedelta(days=1)
    form = {
        "line": "demo-a100|a100-80gb|nvidia.com/gpu",
        "guaranteed": "2",
        "limit": "4",
        "starts_at": start.strftime("%Y-%m-%dT%H:%M"),
        "ends_at": (start - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "reason": "evaluation",
    }
    before = database_state()
    refused = client.post(url, form)
    assert refused.status_code == 200
    assert b"the end must come after the start" in refused.content
    assert database_state() == before
    form["ends_at"] = (start + timedelta(days=14)).strftime("%Y-%m-%dT%H:%M")
    filed = client.post(url, form)
    assert filed.status_code == 302
    change = QuotaChangeRequest.objects.get(tenant=world.team_a, ends_at__isnull=False)
    assert change.status == RequestStatus.PENDING
    assert (change.ends_at - change.starts_at) == timedelta(days=14)
    for user, status in ((world.carol, 403), (world.bob, 404)):
        other = Client()
        other.force_login(user)
        assert other.get(url).status_code == status
        assert other.post(url, form).status_code == status


def test_the_beat_runs_the_grants_pass_every_minute(roomy, api_as):
    from approvals.tasks import grants_tick as task
    from portal.celery import app

    entries = [e for e in app.conf.beat_schedule.values() if e["task"] == task.name]
    assert [e["schedule"] for e in entries] == [60.0]
    request = _approve(
        roomy, _file(api_as, roomy.alice, starts_in=timedelta(seconds=1)).json()["id"]
    )
    grant = Grant.objects.get(request_number=request.pk)
    Grant.objects.filter(pk=grant.pk).update(starts_at=timezone.now() - timedelta(seconds=1))
    task.apply()  # the task as the beat sends it, run here
    grant.refresh_from_db()
    assert grant.state == GrantState.ACTIVE


def test_the_dry_run_of_a_grant_adds_its_lines_to_those_in_effect(roomy, api_as):
    answer = _file(api_as, roomy.alice)
    dry = api_as(roomy.admin).get(f"{URL}{answer.json()['id']}/dry-run/").json()
    (queue,) = [o for o in dry["objects"] if o["object"].startswith("ClusterQueue")]
    assert queue["descriptions"] == [
        "nvidia.com/gpu on a100-80gb: guaranteed 6 \u2192 8, limit 10 \u2192 14"
    ], json.dumps(queue)


def test_the_queue_and_the_lists_show_a_grant_as_added_for_a_time(roomy, api_as):
    _file(api_as, roomy.alice)
    queue = page(roomy.admin, "/console/approvals/").content.decode()
    assert "grant for a time," in queue
    assert "6 \u2192 <strong>8</strong>" in queue  # 6 standing + 2, not "6 -> 2"
    assert "added until" in page(roomy.alice, "/requests/").content.decode()


def test_an_ended_grants_request_still_shows_what_it_added(roomy, api_as):
    world = roomy
    request = _approve(world, _file(api_as, world.alice, lasts=timedelta(hours=1)).json()["id"])
    grant = Grant.objects.get(request_number=request.pk)
    grants_tick(now=grant.ends_at + timedelta(seconds=1))
    detail = api_as(world.alice).get(f"{URL}{request.pk}/").json()
    assert detail["errors"] == {}
    assert [(d["guaranteed_before"], d["guaranteed_after"]) for d in detail["diff"]] == [("6", "8")]
