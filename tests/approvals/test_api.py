"""/api/v1/quota-requests/: file, follow, submit, approve, reject, cancel and validate change
requests. Every bad input answers 400 / 403 / 404 / 409 and changes no row."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db.models import F
from drf_spectacular.generators import SchemaGenerator

from approvals.models import ApprovalDecision, QuotaChangeRequest
from approvals.services import approval_policy_update, quota_request_approve
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE
from quotas.models import FlavorResource, Quota, QuotaSet, SyncOutbox
from quotas.services import quota_set_create_from_tier
from tenants.models import AuditEvent
from tenants.services import membership_remove, membership_set
from tests.approvals.conftest import (
    URL,
    body,
    database_state,
    file,
    generation,
    gpu_quota,
    item,
)
from tests.factories import GI, TI, ClusterFactory, gpu_flavor


def post(client, url: str, data: object = None):  # type: ignore[no-untyped-def]
    return client.post(url, data, format="json")


def action(client, request_id: int, name: str, data: object = None):  # type: ignore[no-untyped-def]
    return post(client, f"{URL}{request_id}/{name}/", data)


# --- the flows ------------------------------------------------------------------------------


def test_a_lead_files_a_draft_submits_it_and_an_admin_approves(world, api_as):
    alice, admin = api_as(world.alice), api_as(world.admin)
    before_generation = generation(world.team_a, world.a100)

    filed = post(alice, URL, body())
    assert filed.status_code == 201, filed.content
    draft = filed.json()
    assert (draft["status"], draft["requester"], draft["source"]) == ("draft", "alice", "api")
    assert (draft["tenant"], draft["cluster"], draft["required_approvals"]) == (
        "team-a",
        "demo-a100",
        1,
    )
    assert draft["items"] == [
        {
            "flavor": "a100-80gb",
            "resource": GPU_RESOURCE,
            "guaranteed": "8",
            "limit": "10",
            "lending_limit": None,
        }
    ]
    assert draft["diff"] == [
        {
            "flavor": "a100-80gb",
            "resource": GPU_RESOURCE,
            "guaranteed_before": "6",
            "guaranteed_after": "8",
            "limit_before": "10",
            "limit_after": "10",
            "gpu_units_before": 10.0,
            "gpu_units_after": 10.0,
            "changed": True,
        }
    ]
    assert draft["errors"] == {} and draft["warnings"] == []
    assert [e["action"] for e in draft["timeline"]] == ["quota_request.created"]
    request_id = draft["id"]

    submitted = action(alice, request_id, "submit")
    assert submitted.status_code == 200, submitted.content
    assert submitted.json()["status"] == "pending"
    assert submitted.json()["submitted_at"].endswith("Z")
    assert gpu_quota(world, world.team_a) == (6, 10)  # nothing applies before approval

    approved = action(admin, request_id, "approve", {"comment": "fits the plan"})
    assert approved.status_code == 200, approved.content
    detail = approved.json()
    assert (detail["status"], detail["approvals"]) == ("approved", 1)
    assert detail["applied_generation"] == before_generation + 1
    assert detail["decided_at"].endswith("Z")
    assert [(d["approver"], d["decision"], d["comment"]) for d in detail["decisions"]] == [
        ("admin", "approve", "fits the plan")
    ]
    assert [(e["action"], e["actor"], e["source"]) for e in detail["timeline"]] == [
        ("quota_request.created", "alice", "api"),
        ("quota_request.pending", "alice", "api"),
        ("quota_request.approved", "admin", "api"),
    ]
    # the new generation, its audit row and the outbox row for the cluster push
    assert generation(world.team_a, world.a100) == before_generation + 1
    assert gpu_quota(world, world.team_a) == (8, 10)
    lines = Quota.objects.filter(quota_set__tenant=world.team_a, quota_set__cluster=world.a100)
    assert set(lines.values_list("resource", flat=True)) == {
        GPU_RESOURCE,
        CPU_RESOURCE,
        MEMORY_RESOURCE,
    }  # the lines the request did not list stay as they were
    assert SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.a100, generation=before_generation + 1
    ).exists()
    written = AuditEvent.objects.get(
        action="quota_set.written", after__generation=before_generation + 1
    )
    assert written.actor == world.admin and written.source == "api"
    assert written.after["reason"] == f"request #{request_id}: bigger training runs"

    # the lead sees the new quota
    quotas = alice.get("/api/v1/tenants/team-a/quotas/").json()["results"]
    a100 = next(q for q in quotas if q["cluster"] == "demo-a100")
    assert a100["generation"] == before_generation + 1
    assert {i["resource"]: i["guaranteed"] for i in a100["items"]}[GPU_RESOURCE] == "8"


def test_submit_true_files_it_pending_at_once(world, api_as):
    response = post(api_as(world.alice), URL, body(submit=True))
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "pending"
    assert [e["action"] for e in response.json()["timeline"]] == [
        "quota_request.created",
        "quota_request.pending",
    ]


def test_scheduling_and_storage_quotas_are_requested_too(world, api_as, admin2):
    response = post(
        api_as(world.alice),
        URL,
        body(items=[], storage="2Ti", max_pods=40, max_running_jobs=8, submit=True),
    )
    assert response.status_code == 201, response.content
    assert (response.json()["storage"], response.json()["max_pods"]) == ("2Ti", 40)
    approved = action(api_as(world.admin), response.json()["id"], "approve")
    assert approved.status_code == 200, approved.content
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    assert quota_set.storage_bytes == 2 * TI
    assert (quota_set.max_pods, quota_set.max_running_jobs) == (40, 8)
    assert quota_set.max_queued_jobs == 20  # left out: stays as it was
    assert gpu_quota(world, world.team_a) == (6, 10)


def test_an_admin_rejects_with_a_comment_and_nothing_applies(world, api_as):
    request = file(world)
    state = database_state()
    response = action(api_as(world.admin), request.pk, "reject", {"comment": "not this quarter"})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "rejected"
    assert response.json()["decisions"][0]["decision"] == "reject"
    assert response.json()["decisions"][0]["comment"] == "not this quarter"
    after = database_state()
    assert after["quotas"] == state["quotas"] and after["generations"] == state["generations"]
    assert after["outbox"] == state["outbox"]


@pytest.mark.parametrize("persona", ["carol", "victor", "admin"])
def test_only_the_requester_cancels(world, api_as, persona):
    request = file(world)
    state = database_state()
    response = action(api_as(getattr(world, persona)), request.pk, "cancel")
    assert response.status_code == 403, response.content
    assert "Only the requester cancels" in response.json()["detail"]
    assert database_state() == state


def test_the_requester_cancels_while_pending_and_then_it_is_final(world, api_as):
    alice = api_as(world.alice)
    request = file(world)
    response = action(alice, request.pk, "cancel")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"
    state = database_state()
    for name, client in (("cancel", alice), ("submit", alice), ("approve", api_as(world.admin))):
        again = action(client, request.pk, name)
        assert again.status_code == 409, (name, again.content)
        assert "cancelled" in again.json()["detail"]
    assert database_state() == state


def test_a_draft_can_be_cancelled_too(world, api_as):
    request = file(world, submit=False)
    response = action(api_as(world.alice), request.pk, "cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


# --- who may do what ----------------------------------------------------------------------


@pytest.mark.parametrize("now", ["member", "viewer", "removed"])
def test_a_lead_demoted_since_filing_cannot_submit_the_draft(world, api_as, now):
    """Who may submit is the caller's role now, not who filed the draft."""
    request = file(world, submit=False)
    membership_set(tenant=world.team_a, user=world.carol, role="lead", actor=world.admin)
    if now == "removed":
        membership_remove(tenant=world.team_a, user=world.alice, actor=world.admin)
    else:
        membership_set(tenant=world.team_a, user=world.alice, role=now, actor=world.admin)
    state = database_state()
    response = action(api_as(world.alice), request.pk, "submit")
    assert response.status_code in (403, 404), response.content
    request.refresh_from_db()
    assert request.status == "draft"
    assert database_state() == state
    if now != "removed":
        assert response.status_code == 403
        assert f"you are a {now}" in response.json()["detail"]
    # Made lead again, she submits it.
    membership_set(tenant=world.team_a, user=world.alice, role="lead", actor=world.admin)
    assert action(api_as(world.alice), request.pk, "submit").status_code == 200


def test_an_admin_files_for_any_tenant_but_does_not_approve_their_own(world, api_as, admin2):
    admin = api_as(world.admin)
    filed = post(
        admin, URL, body(tenant="team-c", submit=True, items=[item(guaranteed=3, limit=4)])
    )
    assert filed.status_code == 201, filed.content
    assert filed.json()["requester"] == "admin"
    state = database_state()
    for name in ("approve", "reject"):
        response = action(admin, filed.json()["id"], name)
        assert response.status_code == 403, response.content
        assert response.json()["detail"] == (
            "Nobody approves or rejects their own request: another admin must."
        )
    assert database_state() == state
    approved = action(api_as(admin2), filed.json()["id"], "approve")
    assert approved.status_code == 200 and approved.json()["status"] == "approved"


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_only_platform_admins_approve_or_reject(world, api_as, persona):
    request = file(world)
    state = database_state()
    for name in ("approve", "reject"):
        response = action(api_as(getattr(world, persona)), request.pk, name)
        assert response.status_code == 403, response.content
        assert "Only platform admins" in response.json()["detail"]
    assert database_state() == state


def test_members_and_viewers_see_their_tenants_requests(world, api_as):
    request = file(world)
    for persona in ("alice", "carol", "victor", "admin"):
        client = api_as(getattr(world, persona))
        assert client.get(f"{URL}{request.pk}/").status_code == 200, persona
        rows = client.get(URL).json()["results"]
        assert request.pk in [r["id"] for r in rows], persona
        if persona != "admin":
            assert {r["tenant"] for r in rows} == {"team-a"}, persona


INTRUSIONS = [
    pytest.param("bob", "team-a", id="team-b lead -> team-a"),
    pytest.param("alice", "team-b", id="team-a lead -> team-b"),
    pytest.param("victor", "team-c", id="team-a viewer -> team-c"),
]


@pytest.mark.parametrize(("intruder", "target"), INTRUSIONS)
def test_another_tenants_request_answers_404_to_every_route(world, api_as, intruder, target):
    tenant = {"team-a": world.team_a, "team-b": world.team_b, "team-c": world.team_c}[target]
    requester = {"team-a": world.alice, "team-b": world.bob, "team-c": world.admin}[target]
    request = file(world, tenant=tenant, requester=requester, items=[item(guaranteed=3, limit=4)])
    client = api_as(getattr(world, intruder))
    missing_id = request.pk + 1000
    state = database_state()
    routes = [("get", "")] + [
        ("post", f"{name}/") for name in ("submit", "approve", "reject", "cancel")
    ]
    for method, suffix in routes:
        response = getattr(client, method)(f"{URL}{request.pk}/{suffix}", format="json")
        assert response.status_code == 404, (suffix, response.content)
        assert target not in response.content.decode()
        missing = getattr(client, method)(f"{URL}{missing_id}/{suffix}", format="json")
        assert missing.status_code == 404
        assert missing.content == response.content  # no oracle: same as a request that is not
    for query in ("", f"?tenant={target}", "?status=pending", "?cluster=demo-a100"):
        listed = client.get(f"{URL}{query}").json()
        assert request.pk not in [r["id"] for r in listed["results"]], query
        assert target not in str(listed)
    assert database_state() == state


def test_filing_for_another_tenant_is_404_and_names_nothing(world, api_as):
    state = database_state()
    for slug in ("team-a", "no-such-team", "Not_A_Slug"):
        response = post(api_as(world.bob), URL, body(tenant=slug))
        assert response.status_code == 404, (slug, response.content)
        assert response.json()["detail"] == "No such tenant, or it is not yours to see."
        validate = post(api_as(world.bob), f"{URL}validate/", body(tenant=slug))
        assert validate.status_code == 404
    assert database_state() == state


# --- the list ---------------------------------------------------------------------------------


def test_the_list_filters_by_status_tenant_and_cluster(world, api_as):
    onboarding = list(QuotaChangeRequest.objects.order_by("-pk").values_list("pk", flat=True))
    assert len(onboarding) == 3  # one auto-approved request per tenant the world onboarded
    a_pending = file(world)
    a_draft = file(world, submit=False, reason="later")
    b_pending = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=4, limit=7)]
    )
    h100 = file(
        world,
        cluster=world.h100,
        items=[{"flavor": "h100-80gb", "resource": GPU_RESOURCE, "guaranteed": 4, "limit": 7}],
    )
    admin = api_as(world.admin)

    def ids(query: str) -> list[int]:
        response = admin.get(f"{URL}{query}")
        assert response.status_code == 200, response.content
        return [r["id"] for r in response.json()["results"]]

    newest_first = [h100.pk, b_pending.pk, a_draft.pk, a_pending.pk, *onboarding]
    assert ids("") == newest_first
    assert ids("?status=draft") == [a_draft.pk]
    assert ids("?status=pending&tenant=team-b") == [b_pending.pk]
    assert ids("?cluster=demo-h100&status=pending") == [h100.pk]
    assert ids("?tenant=team-a&cluster=demo-a100&status=pending") == [a_pending.pk]
    assert ids("?tenant=nobody") == []
    assert admin.get(f"{URL}?status=maybe").status_code == 400
    page = admin.get(f"{URL}?page_size=2").json()
    assert page["count"] == 7 and len(page["results"]) == 2 and page["next"]
    bobs = [r["id"] for r in api_as(world.bob).get(URL).json()["results"]]
    assert bobs == [b_pending.pk, onboarding[1]]
    row = admin.get(f"{URL}?tenant=team-b&status=pending").json()["results"][0]
    assert (row["status"], row["requester"], row["approvals"]) == ("pending", "bob", 0)
    assert "diff" not in row and "timeline" not in row  # only the detail computes those


def test_the_outputs_match_the_openapi_document(world, api_as):
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    request = file(world)
    quota_request_approve(request=request, approver=world.admin, comment="ok")
    admin = api_as(world.admin)
    row = admin.get(URL).json()["results"][0]
    assert set(row) == set(components["QuotaRequestOutput"]["properties"])
    assert set(row["items"][0]) == set(components["QuotaRequestItemOutput"]["properties"])
    assert set(row["decisions"][0]) == set(components["DecisionOutput"]["properties"])
    detail = admin.get(f"{URL}{request.pk}/").json()
    assert set(detail) == set(components["QuotaRequestDetailOutput"]["properties"])
    assert set(detail["diff"][0]) == set(components["DiffLineOutput"]["properties"])
    assert set(detail["timeline"][0]) == set(components["TimelineEventOutput"]["properties"])
    checked = post(admin, f"{URL}validate/", body()).json()
    assert set(checked) == set(components["QuotaRequestValidationOutput"]["properties"])


def test_a_request_id_that_is_not_one_answers_404(world, api_as):
    admin = api_as(world.admin)
    for suffix in ("999999999999999999/", "1x/", "-1/", "9999999999999999999/"):
        assert admin.get(f"{URL}{suffix}").status_code == 404, suffix


# --- validation at approval, staleness, two approvers ---------------------------------------


def test_approval_fails_whole_when_capacity_was_taken_meanwhile(world, api_as):
    team_a = file(world, items=[item(guaranteed=9, limit=10)])  # 9 + 4 + 2 = 15 of 16: fits
    team_b = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=6, limit=6)]
    )
    admin = api_as(world.admin)
    assert action(admin, team_b.pk, "approve").status_code == 200  # now 9 + 6 + 2 = 17
    state = database_state()
    response = action(admin, team_a.pk, "approve")
    assert response.status_code == 409, response.content
    assert response.json()["fields"] == {
        "items[0].guaranteed": [
            "nvidia.com/gpu on a100-80gb: guaranteed 9 does not fit: other tenants hold 8 of 16 "
            "NVIDIA A100-SXM4-80GB on demo-a100 and the cluster does not allow overcommitting "
            "guarantees"
        ]
    }
    assert database_state() == state  # no decision, no generation, no audit row, no outbox
    detail = admin.get(f"{URL}{team_a.pk}/").json()
    assert detail["status"] == "pending" and detail["decisions"] == []
    assert "does not fit" in detail["errors"]["items[0].guaranteed"][0]


def test_a_newer_approved_change_marks_open_requests_for_revalidation(world, api_as):
    first = file(world, items=[item(guaranteed=7, limit=10)])
    second = file(world, items=[item(guaranteed=8, limit=10)], reason="even more")
    draft = file(world, submit=False, items=[item(guaranteed=5, limit=10)], reason="smaller")
    elsewhere = file(
        world,
        cluster=world.h100,
        items=[{"flavor": "h100-80gb", "resource": GPU_RESOURCE, "guaranteed": 4, "limit": 7}],
    )
    other_team = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=5, limit=6)]
    )
    admin = api_as(world.admin)
    assert action(admin, first.pk, "approve").status_code == 200

    def stale(request: QuotaChangeRequest) -> bool:
        return admin.get(f"{URL}{request.pk}/").json()["needs_revalidation"]

    assert (stale(second), stale(draft)) == (True, True)
    assert (stale(elsewhere), stale(other_team), stale(first)) == (False, False, False)
    # the diff is against the quotas in force now, so the admin reads the real change
    diff = admin.get(f"{URL}{second.pk}/").json()["diff"][0]
    assert (diff["guaranteed_before"], diff["guaranteed_after"]) == ("7", "8")
    warned = admin.get(f"{URL}{draft.pk}/").json()["warnings"]
    assert warned and "goes down from 7/10 to 5/10" in warned[0]
    # submitting checks it again and clears the mark
    submitted = action(api_as(world.alice), draft.pk, "submit")
    assert submitted.status_code == 200 and submitted.json()["needs_revalidation"] is False


def test_a_large_increase_needs_two_distinct_admins(world, api_as, admin2):
    big = ClusterFactory(name="demo-big", elastic_cap_fraction=Decimal("0.5"))
    gpu_flavor(big, "a100-big", gpus=64)  # +10 GPUs is 16% of it: only the units rule applies
    filed = post(
        api_as(world.alice),
        URL,
        body(
            cluster="demo-big",
            submit=True,
            items=[item(flavor="a100-big", guaranteed=10, limit=10)],
        ),
    )
    assert filed.status_code == 201, filed.content
    assert filed.json()["required_approvals"] == 2
    request_id = filed.json()["id"]
    admin = api_as(world.admin)
    first = action(admin, request_id, "approve")
    assert first.status_code == 200, first.content
    assert (first.json()["status"], first.json()["approvals"]) == ("pending", 1)
    assert not QuotaSet.objects.filter(tenant=world.team_a, cluster=big).exists()
    assert "quota_request.approval_recorded" in [e["action"] for e in first.json()["timeline"]]
    state = database_state()
    again = action(admin, request_id, "approve")
    assert again.status_code == 409 and "already decided" in again.json()["detail"]
    assert database_state() == state
    second = action(api_as(admin2), request_id, "approve")
    assert second.status_code == 200, second.content
    assert (second.json()["status"], second.json()["approvals"]) == ("approved", 2)
    assert gpu_quota(world, world.team_a, big) == (10, 10)
    assert SyncOutbox.objects.filter(tenant=world.team_a, cluster=big).count() == 1


def test_a_large_share_of_a_flavor_needs_two_admins_as_the_policy_says(world, api_as):
    body_ = body(items=[item(guaranteed=8, limit=10)])  # +2 GPUs: 12.5% of 16
    assert post(api_as(world.alice), f"{URL}validate/", body_).json()["required_approvals"] == 1
    approval_policy_update(actor=world.admin, two_approvers_above_capacity_fraction=Decimal("0.1"))
    assert post(api_as(world.alice), f"{URL}validate/", body_).json()["required_approvals"] == 2


def test_a_tier_change_small_to_medium_is_a_request_like_any_other(world, api_as, admin2):
    big = ClusterFactory(name="demo-big", elastic_cap_fraction=Decimal("0.5"))
    gpu_flavor(big, "a100-big", gpus=64, cpu=1024, memory=16 * TI)
    quota_set_create_from_tier(tenant=world.team_a, cluster=big, tier=world.small, actor=None)
    alice = api_as(world.alice)
    medium = alice.get("/api/v1/tier-templates/medium/").json()

    def line(resource: str, prefix: str) -> dict[str, object]:
        return item(
            flavor="a100-big",
            resource=resource,
            guaranteed=medium[f"{prefix}_guaranteed"],
            limit=medium[f"{prefix}_limit"],
        )

    prefilled = body(
        cluster="demo-big",
        reason="tier small -> medium: the project went into production",
        items=[
            line(GPU_RESOURCE, "gpus"),
            line(CPU_RESOURCE, "cpu"),
            line(MEMORY_RESOURCE, "memory"),
        ],
        **{
            name: medium[name]
            for name in ("max_running_jobs", "max_queued_jobs", "max_pods", "storage", "max_pvcs")
        },
        submit=True,
    )
    filed = post(alice, URL, prefilled)
    assert filed.status_code == 201, filed.content
    assert filed.json()["required_approvals"] == 2
    gpu = next(d for d in filed.json()["diff"] if d["resource"] == GPU_RESOURCE)
    assert (gpu["guaranteed_before"], gpu["limit_before"]) == ("4", "6")
    assert (gpu["guaranteed_after"], gpu["limit_after"]) == ("16", "24")
    assert action(api_as(world.admin), filed.json()["id"], "approve").status_code == 200
    assert action(api_as(admin2), filed.json()["id"], "approve").json()["status"] == "approved"
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=big)
    amounts = {q.resource: (q.guaranteed, q.limit) for q in quota_set.quotas.all()}
    assert amounts == {
        GPU_RESOURCE: (16, 24),
        CPU_RESOURCE: (32, 48),
        MEMORY_RESOURCE: (256 * GI, 384 * GI),
    }
    assert (quota_set.max_running_jobs, quota_set.max_pods, quota_set.storage_bytes) == (
        20,
        100,
        5 * TI,
    )


# --- bad input --------------------------------------------------------------------------------

CAP_MESSAGE = (
    "limit 12 exceeds the elastic cap of 10 (62.5% of 16 NVIDIA A100-SXM4-80GB on demo-a100)"
)

BAD_INPUT = [
    # (persona, body, status, field, words in the message)
    pytest.param("alice", body(items=[item(), item(guaranteed=7)]), 400, "items[1].resource", "listed twice", id="item-twice"),
    pytest.param("alice", body(items=[]), 400, "items", "at least one quota", id="empty-request"),
    pytest.param("alice", body(items=[item(guaranteed=6, limit=10)]), 400, "items[0]", "nvidia.com/gpu on a100-80gb is already 6 guaranteed, 10 limit: this line changes nothing", id="unchanged-line"),
    pytest.param("alice", body(items=[item(), item(resource="cpu", guaranteed=48, limit=80)]), 400, "items[1]", "cpu on a100-80gb is already 48 cores guaranteed, 80 cores limit", id="one-line-unchanged"),
    pytest.param("alice", body(items=[], max_running_jobs=5), 400, "max_running_jobs", "max_running_jobs is already 5: the request changes nothing", id="unchanged-scheduling"),
    pytest.param("alice", body(reason="    "), 400, "reason", "a reason is required", id="reason-only-spaces"),
    pytest.param("alice", body(reason=""), 400, "reason", "a reason is required", id="reason-empty"),
    pytest.param("alice", {k: v for k, v in body().items() if k != "reason"}, 400, "reason", "required", id="reason-missing"),
    pytest.param("carol", body(), 403, None, "Only a lead of team-a", id="member-files"),
    pytest.param("victor", body(), 403, None, "you are a viewer", id="viewer-files"),
    pytest.param("bob", body(), 404, None, "No such tenant", id="another-tenants-lead-files"),
    pytest.param("alice", body(priority="high"), 400, "priority", "Unknown field", id="unknown-field"),
    pytest.param("alice", body(items=[item(colour="red")]), 400, "items[0].colour", "Unknown field", id="unknown-item-field"),
    pytest.param("alice", body(items=[item(guaranteed=-1)]), 400, "items[0].guaranteed", "negative", id="negative"),
    pytest.param("alice", body(items=[item(limit="lots")]), 400, "items[0].limit", "not a Kubernetes quantity", id="non-numeric"),
    pytest.param("alice", body(items=[item(limit="12GB")]), 400, "items[0].limit", "unknown suffix 'GB'", id="12GB"),
    pytest.param("alice", body(items=[item(guaranteed=7.5)]), 400, "items[0].guaranteed", "whole number", id="half-a-gpu"),
    pytest.param("alice", body(items=[item(guaranteed=True)]), 400, "items[0].guaranteed", "Kubernetes quantity", id="boolean"),
    pytest.param("alice", body(items=[item(guaranteed=None)]), 400, "items[0].guaranteed", "may not be null", id="null-amount"),
    pytest.param("alice", body(items=[item(guaranteed=10, limit=8)]), 400, "items[0].guaranteed", "guaranteed 10 is above the limit 8", id="guaranteed-above-limit"),
    pytest.param("alice", body(items=[item(lending_limit=9)]), 400, "items[0].lending_limit", "above guaranteed", id="lending-above-guaranteed"),
    pytest.param("alice", body(items=[item(flavor="h100-80gb")]), 400, "items[0].flavor", "belongs to cluster 'demo-h100', not 'demo-a100'", id="flavor-of-another-cluster"),
    pytest.param("alice", body(items=[item(flavor="h100-mig-1g-10gb", resource="nvidia.com/mig-1g.10gb")]), 400, "items[0].flavor", "belongs to cluster 'demo-h100'", id="mig-flavor-not-on-this-cluster"),
    pytest.param("alice", body(items=[item(flavor="nope")]), 400, "items[0].flavor", "no flavor 'nope' on cluster 'demo-a100'", id="flavor-unknown"),
    pytest.param("alice", body(items=[item(resource="nvidia.com/mig-1g.10gb")]), 400, "items[0].resource", "does not cover", id="resource-not-covered"),
    pytest.param("alice", body(items=[item(guaranteed=6, limit=12)]), 400, "items[0].limit", CAP_MESSAGE, id="above-elastic-cap"),
    pytest.param("alice", body(cluster="nowhere"), 400, "cluster", "No cluster 'nowhere'", id="cluster-unknown"),
    pytest.param("alice", body(storage="2TB"), 400, "storage", "unknown suffix 'TB'", id="storage-bad-suffix"),
    pytest.param("alice", body(max_pods=-1), 400, "max_pods", "greater than or equal to 0", id="negative-count"),
    pytest.param("alice", body(items="a100"), 400, "items", "list", id="items-not-a-list"),
    pytest.param("alice", body(items=["a100"]), 400, "items[0]", "dictionary", id="item-not-an-object"),
    pytest.param("alice", [body()], 400, None, "dictionary", id="body-a-list"),
]  # fmt: skip


@pytest.mark.parametrize(("persona", "data", "status", "field", "words"), BAD_INPUT)
def test_bad_requests_are_refused_and_change_nothing(
    world, api_as, persona, data, status, field, words
):
    state = database_state()
    response = post(api_as(getattr(world, persona)), URL, data)
    assert response.status_code == status, response.content
    payload = response.json()
    if field is None:
        assert words in payload["detail"], payload
    else:
        assert any(name.startswith(field) for name in payload["fields"]), payload
        messages = [
            m for name, ms in payload["fields"].items() if name.startswith(field) for m in ms
        ]
        assert any(words in m for m in messages), payload
    assert database_state() == state


def test_the_elastic_cap_message_names_the_numbers_exactly(world, api_as):
    response = post(api_as(world.alice), URL, body(items=[item(guaranteed=6, limit=12)]))
    assert response.json()["fields"] == {"items[0].limit": [CAP_MESSAGE]}
    assert response.json()["detail"] == CAP_MESSAGE


def _decided(world, how: str) -> QuotaChangeRequest:
    request = file(world)
    if how == "approved":
        quota_request_approve(request=request, approver=world.admin)
    elif how == "rejected":
        from approvals.services import quota_request_reject

        quota_request_reject(request=request, approver=world.admin)
    elif how == "cancelled":
        from approvals.services import quota_request_cancel

        quota_request_cancel(request=request, actor=world.alice)
    request.refresh_from_db()
    assert request.status == how
    return request


@pytest.mark.parametrize("how", ["approved", "rejected", "cancelled"])
@pytest.mark.parametrize("name", ["approve", "reject"])
def test_deciding_a_decided_or_cancelled_request_is_409(world, api_as, admin2, how, name):
    request = _decided(world, how)
    state = database_state()
    response = action(api_as(admin2), request.pk, name, {"comment": "late"})
    assert response.status_code == 409, response.content
    assert f"is {how}" in response.json()["detail"]
    assert response.json()["code"] == "conflict"
    assert database_state() == state


@pytest.mark.parametrize("name", ["approve", "reject"])
def test_deciding_a_draft_is_409(world, api_as, name):
    request = file(world, submit=False)
    state = database_state()
    response = action(api_as(world.admin), request.pk, name)
    assert response.status_code == 409 and "draft" in response.json()["detail"]
    assert database_state() == state


@pytest.mark.parametrize("how", ["approved", "rejected"])
def test_submitting_or_cancelling_a_decided_request_is_409(world, api_as, how):
    request = _decided(world, how)
    state = database_state()
    for name in ("submit", "cancel"):
        response = action(api_as(world.alice), request.pk, name)
        assert response.status_code == 409, (name, response.content)
    assert database_state() == state


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("approve", {"comment": "ok", "force": True}),
        ("reject", {"reason": "no"}),
        ("approve", {"comment": ["a list"]}),
        ("submit", {"now": True}),
        ("cancel", {"why": "changed my mind"}),
    ],
)
def test_transitions_refuse_unknown_fields(world, api_as, name, data):
    request = file(world, submit=name != "submit")
    client = api_as(world.alice if name in ("submit", "cancel") else world.admin)
    state = database_state()
    response = action(client, request.pk, name, data)
    assert response.status_code == 400, response.content
    assert database_state() == state


# --- validate ---------------------------------------------------------------------------------


def test_validate_answers_without_storing_anything(world, api_as):
    state = database_state()
    response = post(api_as(world.alice), f"{URL}validate/", body())
    assert response.status_code == 200, response.content
    assert response.json() == {
        "valid": True,
        "errors": {},
        "warnings": [],
        "diff": [
            {
                "flavor": "a100-80gb",
                "resource": GPU_RESOURCE,
                "guaranteed_before": "6",
                "guaranteed_after": "8",
                "limit_before": "10",
                "limit_after": "10",
                "gpu_units_before": 10.0,
                "gpu_units_after": 10.0,
                "changed": True,
            }
        ],
        "required_approvals": 1,
    }
    assert database_state() == state


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        (body(items=[item(guaranteed=6, limit=12)]), "items[0].limit", CAP_MESSAGE),
        (body(reason="  "), "reason", "a reason is required"),
        (body(items=[item(limit="12GB")]), "items[0].limit", "unknown suffix"),
        (body(items=[item(), item()]), "items[1].resource", "listed twice"),
        (body(items=[]), "items", "at least one quota"),
        (body(items=[item(flavor="h100-80gb")]), "items[0].flavor", "belongs to cluster"),
    ],
)
def test_validate_names_what_a_request_would_break(world, api_as, data, field, words):
    state = database_state()
    response = post(api_as(world.alice), f"{URL}validate/", data)
    assert response.status_code == 200, response.content
    assert response.json()["valid"] is False
    assert any(words in m for m in response.json()["errors"][field]), response.json()
    assert database_state() == state


def test_validate_warns_when_a_quota_goes_down(world, api_as):
    response = post(
        api_as(world.alice), f"{URL}validate/", body(items=[item(guaranteed=2, limit=4)])
    )
    assert response.json()["valid"] is True
    assert "goes down from 6/10 to 2/4" in response.json()["warnings"][0]


@pytest.mark.parametrize(
    ("persona", "data", "status"),
    [
        ("carol", body(), 403),
        ("victor", body(), 403),
        ("bob", body(), 404),
        ("alice", body(cluster="nowhere"), 400),
        ("alice", body(dry_run=True), 400),
        ("alice", body(items=[item(note="x")]), 400),
    ],
)
def test_validate_follows_the_rules_of_filing(world, api_as, persona, data, status):
    state = database_state()
    response = post(api_as(getattr(world, persona)), f"{URL}validate/", data)
    assert response.status_code == status, response.content
    assert database_state() == state


def test_anonymous_callers_are_refused(world, api):
    request = file(world)
    assert api.get(URL).status_code in (401, 403)
    assert api.get(f"{URL}{request.pk}/").status_code in (401, 403)
    assert post(api, URL, body()).status_code in (401, 403)
    assert post(api, f"{URL}{request.pk}/approve/").status_code in (401, 403)
    assert ApprovalDecision.objects.count() == 0


def test_a_tier_change_is_prefilled_from_the_template_and_moves_the_quota_set_to_it(
    world, api_as, admin2
):
    # demo-h100 grows so that medium (16 / 24 GPUs) fits next to the other small tenants.
    FlavorResource.objects.filter(flavor=world.h100_gpu).update(capacity=F("capacity") * 4)
    filed = api_as(world.alice).post(
        URL,
        {
            "tenant": "team-a",
            "cluster": "demo-h100",
            "reason": "moving to medium",
            "tier": "medium",
            "submit": True,
        },
        format="json",
    )
    assert filed.status_code == 201, filed.json()
    data = filed.json()
    assert data["tier"] == "medium"
    gpus = next(i for i in data["items"] if i["resource"] == GPU_RESOURCE)
    assert (gpus["flavor"], gpus["guaranteed"], gpus["limit"]) == ("h100-80gb", "16", "24")
    assert data["max_running_jobs"] == world.medium.max_running_jobs
    for admin in (world.admin, admin2):  # +12 GPUs (24 units): two approvers
        decided = api_as(admin).post(f"{URL}{data['id']}/approve/", {}, format="json")
        assert decided.status_code == 200, decided.json()
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.h100)
    assert quota_set.tier == world.medium
    assert quota_set.max_running_jobs == world.medium.max_running_jobs


def test_an_unknown_tier_is_refused_naming_the_field(world, api_as):
    before = QuotaChangeRequest.objects.count()
    response = api_as(world.alice).post(URL, body(tier="enormous", items=[]), format="json")
    assert response.status_code == 400
    assert "tier" in response.json()["fields"]
    assert QuotaChangeRequest.objects.count() == before


def test_a_request_replaces_a_draft_which_is_cancelled_with_it(world, api_as):
    alice = api_as(world.alice)
    draft = post(alice, URL, body(reason="the portal's suggestion")).json()

    filed = post(alice, URL, body(replaces=draft["id"], items=[item(guaranteed="7")], submit=True))

    assert filed.status_code == 201, filed.content
    assert filed.json()["status"] == "pending"
    old = alice.get(f"{URL}{draft['id']}/").json()
    assert old["status"] == "cancelled"
    created = AuditEvent.objects.get(
        action="quota_request.created", object_id=f"#{filed.json()['id']}"
    )
    assert created.after["replaces"] == f"#{draft['id']}"


@pytest.mark.parametrize("which", ["missing", "team-b", "other-cluster"])
def test_replacing_what_is_not_a_request_of_the_tenant_here_is_400_and_changes_nothing(
    world, api_as, which
):
    if which == "missing":
        target = 999_999
    elif which == "team-b":
        team_b = body(tenant="team-b", items=[item(guaranteed="5", limit="6")])
        target = post(api_as(world.bob), URL, team_b).json()["id"]
    else:  # alice's own draft, but on demo-h100
        target = post(api_as(world.alice), URL, body()).json()["id"]
        QuotaChangeRequest.objects.filter(pk=target).update(cluster=world.h100)
    before = database_state()

    response = post(api_as(world.alice), URL, body(replaces=target))

    assert response.status_code == 400, response.content
    assert response.json()["fields"]["replaces"] == [
        f"No request #{target} of team-a on demo-a100 to replace."
    ]
    assert database_state() == before


def test_replacing_a_draft_submitted_meanwhile_is_409_and_files_nothing(world, api_as):
    alice = api_as(world.alice)
    draft = post(alice, URL, body()).json()
    assert action(alice, draft["id"], "submit").status_code == 200
    before = database_state()

    response = post(alice, URL, body(replaces=draft["id"], items=[item(guaranteed="7")]))

    assert response.status_code == 409, response.content
    assert response.json()["fields"]["replaces"] == [f"request #{draft['id']} is pending"]
    assert database_state() == before


def test_a_tier_change_shows_its_real_errors_not_the_lines_the_tier_left_as_they_are(world, api_as):
    """bob (lead of team-b) asks for tier medium on demo-a100: medium's CPU and memory are
    team-b's already (32 / 48 CPUs, 256 / 384 GiB), its 16 / 24 GPUs pass the A100s' capacity
    and elastic cap. The lines the tier filled in that change nothing are left out, not
    refused as "changes nothing": the answer names the real errors."""
    answer = api_as(world.bob).post(
        f"{URL}validate/",
        {"tenant": "team-b", "cluster": "demo-a100", "reason": "medium", "tier": "medium"},
        format="json",
    )
    assert answer.status_code == 200, answer.json()
    data = answer.json()
    assert data["valid"] is False
    messages = [m for field in data["errors"].values() for m in field]
    assert not [m for m in messages if "changes nothing" in m], messages
    assert any("elastic cap" in m for m in messages), messages
    assert [d["resource"] for d in data["diff"]] in ([], [GPU_RESOURCE])

    filed = api_as(world.bob).post(
        URL,
        {"tenant": "team-b", "cluster": "demo-a100", "reason": "medium", "tier": "medium"},
        format="json",
    )
    assert filed.status_code == 400
    assert "changes nothing" not in str(filed.json())
    assert "elastic cap" in str(filed.json())
