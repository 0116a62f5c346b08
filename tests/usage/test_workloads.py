"""A tenant's workloads (issue 33 items 1 and 4): what the collector keeps of each Kueue
Workload, the page and API as a lead, a member and another team's lead, the filters, paging,
suspend and resume, a stale cluster, and "Ask for what this needs"."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from devcluster.kueue_sim import DEMO_JOBSET, TEAM_JOBS, Endpoint, simulate_once
from quotas.sync import cluster_reconcile
from tenants.models import AuditEvent
from tests.alerts.conftest import NOW
from tests.standin import kubectl_json
from usage import collector
from usage.choices import WorkloadState
from usage.models import Workload, WorkloadReading

pytestmark = pytest.mark.django_db

WAITING = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
    "flavor a100-80gb, 4 more needed"
)


def _workload(world, name: str, **fields: Any) -> Workload:  # type: ignore[no-untyped-def]
    now = timezone.now()
    defaults: dict[str, Any] = {
        "cluster": world.a100,
        "tenant": world.team_a,
        "namespace": "team-a-training",
        "uid": f"uid-{name}",
        "queue_name": "default",
        "gpus": 2,
        "state": WorkloadState.ADMITTED,
        "created_at": now - timedelta(hours=2),
        "admitted_at": now - timedelta(hours=1),
        "updated_at": now,
        "job_kind": "Job",
        "job_name": name,
        "submitter": "alice",
        "submitter_source": "annotation",
        "resources": [{"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "amount": 2}],
        "running": True,
    }
    return Workload.objects.create(name=name, **(defaults | fields))


@pytest.fixture
def team(world):  # type: ignore[no-untyped-def]
    """team-a (6 guaranteed, 10 limit of A100s): 8 GPUs running, one waiting for 4 more, one
    finished; team-b's one workload."""
    running = _workload(
        world, "train", resources=[{"flavor": "a100-80gb", "resource": "nvidia.com/gpu",
                                    "amount": 8}], gpus=8,
    )  # fmt: skip
    pending = _workload(
        world, "big", submitter="carol", state=WorkloadState.PENDING, admitted_at=None,
        running=False, gpus=4, pending_message=WAITING, pending_reason="Pending",
        resources=[{"flavor": "", "resource": "nvidia.com/gpu", "amount": 4}],
        created_at=timezone.now() - timedelta(minutes=25, seconds=5),
    )  # fmt: skip
    done = _workload(
        world, "old", submitter="carol", state=WorkloadState.FINISHED, running=False,
        finished_at=timezone.now() - timedelta(minutes=10), cluster=world.h100,
    )  # fmt: skip
    other = _workload(world, "theirs", tenant=world.team_b, namespace="team-b-training")
    return {"running": running, "pending": pending, "done": done, "other": other}


def _list(client, **params: str):  # type: ignore[no-untyped-def]
    return client.get("/api/v1/tenants/team-a/workloads/", params)


def test_a_lead_sees_every_workload_with_who_what_how_long_and_why_it_waits(  # type: ignore[no-untyped-def]
    world, team, api_as
):
    response = _list(api_as(world.alice))
    assert response.status_code == 200, response.data
    body = response.json()
    assert body["may_act"] is True
    rows = {r["name"]: r for r in body["results"]}
    assert set(rows) == {"train", "big", "old"}  # not team-b's
    assert (
        rows["train"]["state"] == "running" and rows["train"]["duration"] == "running for 1 h 0 min"
    )
    assert rows["train"]["submitter"] == "alice" and rows["train"]["kind"] == "Job"
    assert rows["train"]["resources"][0]["flavor"] == "a100-80gb"
    assert rows["old"]["state"] == "finished" and rows["old"]["cluster"] == "demo-h100"
    big = rows["big"]
    assert big["state"] == "pending" and big["duration"] == "waiting for 25 min"
    assert big["reason"].startswith("waiting for 4 ")
    assert "team-a uses 8 of 10" in big["reason"]
    assert (
        "borrowing is not possible because that would take it past its limit of 10" in big["reason"]
    )
    assert big["kueue_message"] == WAITING
    # 8 + 4 is 2 past the limit: both numbers 2 higher, the borrowing room kept.
    assert big["need"]["guaranteed"] == "8.000" and big["need"]["limit"] == "12.000"
    assert rows["train"]["need"] is None


def test_a_member_reads_the_list_without_actions_and_another_lead_sees_none(  # type: ignore[no-untyped-def]
    world, team, api_as, client
):
    as_carol = _list(api_as(world.carol))
    assert as_carol.status_code == 200 and as_carol.json()["may_act"] is False
    assert as_carol.json()["count"] == 3
    assert _list(api_as(world.bob)).status_code == 404
    pk = team["running"].pk
    refused = api_as(world.carol).post(f"/api/v1/tenants/team-a/workloads/{pk}/suspend/")
    assert refused.status_code == 403
    assert (
        api_as(world.bob).post(f"/api/v1/tenants/team-a/workloads/{pk}/suspend/").status_code == 404
    )
    assert Workload.objects.get(pk=pk).active
    # The page: carol sees the rows and no buttons; bob gets the 404 page.
    client.force_login(world.carol)
    page = client.get(reverse("portal:tenant-workloads", args=["team-a"]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "team-a-training/big" in text and "waiting for 4" in text
    assert "Suspend" not in text and "Ask for what this needs" not in text
    client.force_login(world.bob)
    assert client.get(reverse("portal:tenant-workloads", args=["team-a"])).status_code == 404


def test_the_lead_page_offers_suspend_and_ask(world, team, client):  # type: ignore[no-untyped-def]
    client.force_login(world.alice)
    text = client.get(reverse("portal:tenant-workloads", args=["team-a"])).content.decode()
    assert text.count("Ask for what this needs") == 1  # the waiting one only
    assert reverse("portal:tenant-workload-suspend", args=["team-a", team["running"].pk]) in text
    assert reverse("portal:tenant-workload-suspend", args=["team-a", team["done"].pk]) not in text


def test_filters_narrow_the_list_and_an_unknown_value_is_a_400_with_the_choices(  # type: ignore[no-untyped-def]
    world, team, api_as, client
):
    alice = api_as(world.alice)
    assert [r["name"] for r in _list(alice, state="pending").json()["results"]] == ["big"]
    assert {r["name"] for r in _list(alice, person="carol").json()["results"]} == {"big", "old"}
    assert [r["name"] for r in _list(alice, cluster="demo-h100").json()["results"]] == ["old"]
    assert _list(alice, state="running", person="alice").json()["count"] == 1
    bad = _list(alice, state="sleeping")
    assert bad.status_code == 400
    assert "state" in bad.json()["fields"]
    message = bad.json()["fields"]["state"][0]
    for state in ("pending", "admitted", "running", "suspended", "finished", "evicted"):
        assert state in message
    assert _list(alice, person="mallory").status_code == 400
    assert "demo-a100" in _list(alice, cluster="nowhere").json()["fields"]["cluster"][0]
    client.force_login(world.alice)
    page = client.get(reverse("portal:tenant-workloads", args=["team-a"]), {"state": "sleeping"})
    assert page.status_code == 400


def test_pages_of_the_list(world, team, api_as):  # type: ignore[no-untyped-def]
    alice = api_as(world.alice)
    first = _list(alice, page_size="2").json()
    assert first["count"] == 3 and len(first["results"]) == 2 and first["next"]
    second = _list(alice, page_size="2", page="2").json()
    assert len(second["results"]) == 1
    names = {r["name"] for r in first["results"] + second["results"]}
    assert names == {"train", "big", "old"}
    assert _list(alice, page="0").status_code == 400


def test_suspending_a_finished_workload_is_a_409_with_its_state(world, team, api_as):  # type: ignore[no-untyped-def]
    alice = api_as(world.alice)
    done = team["done"]
    response = alice.post(f"/api/v1/tenants/team-a/workloads/{done.pk}/suspend/")
    assert response.status_code == 409
    assert response.json()["fields"]["state"] == ["finished"]
    assert not AuditEvent.objects.filter(action="workload.suspended").exists()


def test_a_cluster_that_cannot_be_read_marks_its_list_stale_and_says_since_when(  # type: ignore[no-untyped-def]
    world, team, api_as, client
):
    now = timezone.now()
    WorkloadReading.objects.create(cluster=world.a100, last_attempt_at=now, last_success_at=now)
    failing = now - timedelta(minutes=20)
    WorkloadReading.objects.create(
        cluster=world.h100, last_attempt_at=now, last_success_at=failing - timedelta(minutes=1),
        failing_since=failing, last_error="connection refused",
    )  # fmt: skip
    body = _list(api_as(world.alice)).json()
    stale = {c["name"]: c for c in body["clusters"]}
    assert stale["demo-h100"]["stale"] and not stale["demo-a100"]["stale"]
    rows = {r["name"]: r for r in body["results"]}
    assert rows["old"]["stale"] and not rows["train"]["stale"]  # the last known list, marked
    client.force_login(world.alice)
    text = client.get(reverse("portal:tenant-workloads", args=["team-a"])).content.decode()
    assert "demo-h100 could not be read since" in text
    assert f"{failing:%Y-%m-%d %H:%M} UTC" in text and "connection refused" in text
    assert "team-a-training/old" in text


def test_a_failed_reading_keeps_when_it_began_and_a_success_clears_it(world):  # type: ignore[no-untyped-def]
    collector.workload_reading_record(cluster=world.a100, now=NOW, error="refused")
    collector.workload_reading_record(cluster=world.a100, now=NOW + timedelta(minutes=1), error="x")
    reading = WorkloadReading.objects.get(cluster=world.a100)
    assert reading.failing_since == NOW and reading.last_error == "x"
    collector.workload_reading_record(cluster=world.a100, now=NOW + timedelta(minutes=2))
    reading.refresh_from_db()
    assert reading.failing_since is None and reading.last_success_at == NOW + timedelta(minutes=2)


def test_ask_for_what_this_needs_drafts_a_request_the_lead_reviews(world, team, client):  # type: ignore[no-untyped-def]
    """6 of 10 in use, Kueue short of 2 in the cohort: the guarantee raised to 8 holds it."""
    team["running"].resources = [{"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "amount": 6}]
    team["running"].save()
    pending = team["pending"]
    pending.pending_message = WAITING.replace("4 more", "2 more")
    pending.save()
    client.force_login(world.alice)
    url = reverse("portal:tenant-workload-ask", args=["team-a", pending.pk])
    response = client.post(url)
    assert response.status_code == 302
    target = urlsplit(response["Location"])
    assert target.path == reverse("portal:request-new", args=["team-a"])
    query = parse_qs(target.query)
    draft = QuotaChangeRequest.objects.get(pk=query["from"][0])
    assert query["cluster"] == ["demo-a100"]
    assert draft.status == RequestStatus.DRAFT and draft.requester == world.alice
    assert "team-a-training/big" in draft.reason and "carol" in draft.reason
    assert "waiting for 25 min" in draft.reason and "team-a uses 6 of 10" in draft.reason
    (line,) = [i for i in draft.items.all() if i.resource == "nvidia.com/gpu"]
    assert (line.guaranteed, line.limit) == (Decimal(8), Decimal(10))
    # The form opens on the draft, its numbers filled in; nothing is filed until she submits.
    form = client.get(response["Location"])
    assert form.status_code == 200
    assert 'value="8"' in form.content.decode()
    # Not for a member, nor for work that does not wait.
    client.force_login(world.carol)
    assert client.post(url).status_code == 403
    client.force_login(world.alice)
    running = reverse("portal:tenant-workload-ask", args=["team-a", team["running"].pk])
    assert client.post(running).status_code == 409
    assert QuotaChangeRequest.objects.filter(tenant=world.team_a, status="draft").count() == 1
    assert AuditEvent.objects.filter(action="workload.request_drafted").count() == 1


def test_numbers_that_break_a_rule_file_nothing_and_say_why(world, team, client):  # type: ignore[no-untyped-def]
    """8 in use and 4 more wanted: a limit of 12, past the A100s' elastic cap of 10."""
    before = QuotaChangeRequest.objects.count()
    client.force_login(world.alice)
    url = reverse("portal:tenant-workload-ask", args=["team-a", team["pending"].pk])
    response = client.post(url, follow=True)
    assert response.redirect_chain[-1][0] == reverse("portal:tenant-workloads", args=["team-a"])
    assert "break a rule" in response.content.decode()
    assert "elastic" in response.content.decode() or "cap" in response.content.decode()
    assert QuotaChangeRequest.objects.count() == before


def test_the_simulated_kueue_gives_the_team_its_jobs_with_who_submitted_them(  # type: ignore[no-untyped-def]
    world, standin, api_as
):
    """The demo: the stand-in stamps the submitter on each Job its person creates (as the
    portal's admission policy does), Kueue's stand-in makes and admits the Workloads, the
    collector reads them, alice sees them and suspends one, audited."""
    assert cluster_reconcile(cluster=world.a100).ok
    endpoint = Endpoint.from_kubeconfig(standin.kubeconfig_path)
    simulate_once(endpoint, NOW, teams=["team-a"], started=NOW)
    simulate_once(endpoint, NOW, teams=["team-a"], started=NOW)  # made once, not twice
    job = kubectl_json(standin, "get", "job", "-n", "team-a-training", "pretrain-8x")
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["portal.gpu-quota.io/submitter"] == "carol"

    # carol's JobSet is one more: its Workload made as Kueue would (devcluster.kueue_jobs).
    assert collector.cluster_collect(cluster=world.a100, now=NOW).workloads == len(TEAM_JOBS) + 1
    rows = {w.job_name: w for w in Workload.objects.filter(tenant=world.team_a)}
    assert set(rows) == {j.name for j in TEAM_JOBS} | {DEMO_JOBSET}
    # Held by the job cap: team-a may run 5 jobs, 3 run, the JobSet's 3 pods take 3 slots.
    assert rows[DEMO_JOBSET].job_kind == "JobSet"
    assert rows[DEMO_JOBSET].state == WorkloadState.PENDING
    assert rows[DEMO_JOBSET].pending_message.endswith(
        "insufficient unused quota for pods in flavor portal-job-slots, 1 more needed"
    )
    assert rows["llm-finetune"].submitter == "alice" and rows["llm-finetune"].job_kind == "Job"
    assert rows["llm-finetune"].resources == [
        {"flavor": "a100-80gb", "resource": "nvidia.com/gpu", "amount": 4.0}
    ]
    assert rows["pretrain-8x"].state == WorkloadState.PENDING
    # The stand-in's Kueue decides it: 7 of team-a's 10 GPUs in use, 8 asked.
    assert (
        "nvidia.com/gpu in flavor a100-80gb, 5 more needed" in rows["pretrain-8x"].pending_message
    )
    assert WorkloadReading.objects.get(cluster=world.a100).last_success_at == NOW

    alice = api_as(world.alice)
    listed = {r["job"]: r for r in _list(alice).json()["results"]}
    assert listed["llm-finetune"]["state"] == "running"
    assert listed["eval-batch"]["state"] == "admitted"
    assert "team-a uses 7 of 10" in listed["pretrain-8x"]["reason"]

    pk = rows["resnet-sweep"].pk
    done = alice.post(f"/api/v1/tenants/team-a/workloads/{pk}/suspend/")
    assert done.status_code == 200 and done.json()["state"] == "suspended"
    name = rows["resnet-sweep"].name
    assert (
        kubectl_json(standin, "get", "workload", "-n", "team-a-training", name)["spec"]["active"]
        is False
    )
    assert AuditEvent.objects.get(action="workload.suspended").actor == world.alice
    again = alice.post(f"/api/v1/tenants/team-a/workloads/{pk}/suspend/")
    assert again.status_code == 409 and again.json()["fields"]["state"] == ["suspended"]
    back = alice.post(f"/api/v1/tenants/team-a/workloads/{pk}/resume/")
    assert back.status_code == 200 and back.json()["state"] == "pending"
    assert (
        kubectl_json(standin, "get", "workload", "-n", "team-a-training", name)["spec"]["active"]
        is True
    )


def test_without_the_annotation_the_pods_service_account_stands_for_the_submitter() -> None:
    fields = collector.workload_fields(
        {
            "metadata": {
                "uid": "u1", "namespace": "team-a-training", "name": "pod-x",
                "creationTimestamp": "2026-12-02T10:00:00Z",
                "ownerReferences": [{"kind": "Pod", "name": "x", "uid": "p", "controller": True}],
            },
            "spec": {"podSets": [{"name": "main", "count": 2, "template": {"spec": {
                "serviceAccountName": "team-a-workloads",
                "containers": [{"name": "m", "resources": {"requests": {"nvidia.com/gpu": "1",
                                                                         "cpu": "2"}}}],
            }}}]},
        }
    )  # fmt: skip
    assert (fields["job_kind"], fields["submitter"]) == ("Pod", "team-a-workloads")
    assert fields["submitter_source"] == "service-account"
    assert fields["resources"] == [
        {"flavor": "", "resource": "cpu", "amount": 4.0},
        {"flavor": "", "resource": "nvidia.com/gpu", "amount": 2.0},
    ]


def test_a_workload_that_cannot_fit_or_is_held_says_so_and_what_to_ask(world, team):  # type: ignore[no-untyped-def]
    from usage.selectors import workload_rows

    pending = team["pending"]
    pending.pending_message = (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor a100-80gb, request > maximum capacity (12 > 10)"
    )
    (row,) = workload_rows(tenant=world.team_a, workloads=[pending])
    assert row.reason.startswith("cannot fit: it asks for 12 ")
    assert "team-a's quota on demo-a100 allows at most 10" in row.reason
    assert row.need is not None and (row.need.guaranteed, row.need.limit) == (6, 12)

    pending.pending_message = "ClusterQueue team-a is inactive"
    (row,) = workload_rows(tenant=world.team_a, workloads=[pending])
    assert row.reason.startswith("held: demo-a100 takes no new work of team-a")
    assert row.need is not None and row.need.flavor == "a100-80gb"
    assert (row.need.guaranteed, row.need.limit) == (12, 12)  # 8 in use + its 4

    pending.pending_message = (
        "couldn't assign flavors to pod set workers: insufficient unused quota for pods in "
        "flavor portal-job-slots, 2 more needed"
    )
    (row,) = workload_rows(tenant=world.team_a, workloads=[pending])
    assert row.reason == (
        "waiting for 2 more running-job slots: team-a is at its cap on running jobs on "
        "demo-a100 (Kueue counts each pod of a job as one)"
    )
    assert row.need is None  # a job cap, not a quota line: nothing to ask for here

    pending.pending_message = "something Kueue says"
    (row,) = workload_rows(tenant=world.team_a, workloads=[pending])
    assert (row.reason, row.need) == ("Kueue says: something Kueue says", None)


def test_the_stand_in_stamps_the_creator_whatever_the_job_says() -> None:
    from devcluster.admission import ANNOTATION_SUBMITTER, stamp_submitter

    job: dict[str, Any] = {
        "spec": {"template": {"metadata": {"annotations": {ANNOTATION_SUBMITTER: "bob", "x": "1"}}}}
    }
    stamp_submitter(job, "alice")
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        ANNOTATION_SUBMITTER: "alice",
        "x": "1",
    }
