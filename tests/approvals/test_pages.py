"""The pages of quota change requests, with Django's test client: the request form (prefill,
tier presets, errors next to their fields, nothing stored on error), its live check, "My
requests", a request's page and buttons, and the admins' approvals queue (filters, decisions,
a constant number of queries).

demo-a100 has 16 A100s and an elastic cap of 0.625 (10 GPUs a tenant); team-a holds 6/10,
team-b 4/6, team-c 2/4 of them. The form's rows on demo-a100: items-0 GPUs, items-1 CPU,
items-2 memory.
"""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.choices import RequestStatus
from approvals.models import ApprovalDecision, QuotaChangeRequest
from approvals.services import approval_policy, quota_request_create
from quotas.choices import GPU_RESOURCE
from quotas.models import Cluster, Quota, ResourceFlavor
from quotas.services import QuotaItem
from tenants.models import AuditEvent, Tenant, User
from tests.conftest import World
from tests.factories import ClusterFactory, UserFactory, gpu_flavor
from tests.pages import logged_in, main, text

NEW = "/tenants/team-a/requests/new/?cluster=demo-a100"
VALIDATE = "/tenants/team-a/requests/validate/?cluster=demo-a100"
QUEUE = "/console/approvals/"
ELASTIC_CAP_ERROR = "limit 12 exceeds the elastic cap of 10"


def a100_form(**changes: str) -> dict[str, str]:
    """The form as it comes prefilled for team-a on demo-a100, with ``changes`` applied."""
    data = {
        "items-0-guaranteed": "6",
        "items-0-limit": "10",
        "items-0-lending_limit": "",
        "items-1-guaranteed": "48",
        "items-1-limit": "80",
        "items-1-lending_limit": "",
        "items-2-guaranteed": "384Gi",
        "items-2-limit": "640Gi",
        "items-2-lending_limit": "",
        "max_running_jobs": "5",
        "max_queued_jobs": "20",
        "max_pods": "20",
        "storage_bytes": "",
        "max_pvcs": "",
        "reason": "",
        "action": "submit",
    }
    data.update(changes)
    return data


def slot(response: Any, name: str) -> str:
    """The messages shown in the error slot of input ``name``."""
    match = re.search(
        rf'data-error-for="{re.escape(name)}">(.*?)</div>', response.content.decode(), re.S
    )
    assert match, f"no error slot for {name}"
    return unescape(re.sub(r"<[^>]+>", " ", match.group(1))).strip()


def input_value(response: Any, name: str) -> str | None:
    match = re.search(rf'<input[^>]*name="{re.escape(name)}"[^>]*>', response.content.decode())
    assert match, f"no input {name}"
    value = re.search(r'value="([^"]*)"', match.group(0))
    return unescape(value.group(1)) if value else None


def file_request(
    world: World,
    *,
    tenant: Tenant,
    guaranteed: int,
    limit: int,
    requester: User | None = None,
    cluster: Cluster | None = None,
    flavor: ResourceFlavor | None = None,
    submit: bool = True,
) -> QuotaChangeRequest:
    """A GPU request through the service, as the API or the form would file it."""
    return quota_request_create(
        tenant=tenant,
        cluster=cluster or world.a100,
        requester=requester or world.admin,
        reason="more training runs",
        items=[
            QuotaItem(flavor or world.a100_gpu, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit))
        ],
        submit=submit,
    )


def a100_gpu_quota(tenant: Tenant) -> tuple[Decimal, Decimal]:
    quota = Quota.objects.get(
        quota_set__tenant=tenant, quota_set__cluster__name="demo-a100", resource=GPU_RESOURCE
    )
    return quota.guaranteed, quota.limit


def stored() -> tuple[int, int]:
    return QuotaChangeRequest.objects.count(), AuditEvent.objects.count()


# --- "Request a change" ---------------------------------------------------------------------


def test_the_form_is_prefilled_with_the_quota_in_force(world):
    response = logged_in(world.alice).get(NEW)

    assert response.status_code == 200
    values = {
        name: input_value(response, name)
        for name in ("items-0-guaranteed", "items-0-limit", "items-2-guaranteed", "items-2-limit")
    }
    assert values == {
        "items-0-guaranteed": "6",
        "items-0-limit": "10",
        "items-2-guaranteed": "384Gi",
        "items-2-limit": "640Gi",
    }
    assert input_value(response, "max_running_jobs") == "5"
    body = text(response)
    # What each job cap counts, and where Kueue cannot count it exactly (docs: job caps).
    assert "of every kind Kueue manages" in body
    assert "Kueue cannot count jobs, so it counts their pods" in body
    assert "running and waiting jobs together are capped at the sum of both caps" in body
    assert 'data-resource="nvidia.com/gpu"' in body
    assert 'data-validate-url="/tenants/team-a/requests/validate/?cluster=demo-a100"' in body
    assert "/static/portal/request-form.js" in body
    # The tier presets, and the capacity: 12 of 16 A100s guaranteed, 4 free, 10 at most a tenant.
    assert "?cluster=demo-a100&tier=medium" in body
    capacity = re.search(r'<table class="capacity">.*?</table>', body, re.S)
    assert capacity
    gpu_line = re.search(r'data-resource="nvidia.com/gpu">(.*?)</tr>', capacity.group(0), re.S)
    assert gpu_line
    cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", gpu_line.group(1), re.S)]
    assert cells[2:6] == ["16", "12", "4", "±0"]


def test_a_tier_preset_prefills_the_gpu_flavor_rows(world):
    response = logged_in(world.alice).get(NEW + "&tier=medium")

    assert response.status_code == 200
    assert [input_value(response, f"items-0-{n}") for n in ("guaranteed", "limit")] == ["16", "24"]
    assert [input_value(response, f"items-1-{n}") for n in ("guaranteed", "limit")] == ["32", "48"]
    assert [input_value(response, f"items-2-{n}") for n in ("guaranteed", "limit")] == [
        "256Gi",
        "384Gi",
    ]
    assert input_value(response, "max_running_jobs") == "20"
    assert input_value(response, "storage_bytes") == "5Ti"
    assert "Prefilled from the" in text(response)


def test_on_a_cluster_without_quota_the_rows_start_empty_and_only_filled_ones_count(world):
    l40 = ClusterFactory(name="demo-l40")
    gpu_flavor(l40, "l40s", gpus=8, gpu_model="NVIDIA L40S")
    url = "/tenants/team-a/requests/new/?cluster=demo-l40"
    alice = logged_in(world.alice)

    page = alice.get(url)
    assert [input_value(page, f"items-{i}-guaranteed") for i in range(3)] == [None, None, None]

    response = alice.post(
        url,
        {
            "items-0-guaranteed": "2",
            "items-0-limit": "3",
            "items-1-guaranteed": "",
            "items-1-limit": "",
            "reason": "try the L40S",
            "action": "submit",
        },
    )

    assert response.status_code == 302
    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert [(i.flavor.name, i.resource, i.guaranteed, i.limit) for i in change.items.all()] == [
        ("l40s", GPU_RESOURCE, Decimal(2), Decimal(3))
    ]
    again = text(alice.get(url))
    assert "team-a already has open requests on demo-l40:" in again
    assert f'href="/requests/{change.pk}/"' in again


def test_a_half_filled_row_names_what_is_missing(world):
    gpu_flavor(ClusterFactory(name="demo-l40"), "l40s", gpus=8, gpu_model="NVIDIA L40S")

    response = logged_in(world.alice).post(
        "/tenants/team-a/requests/new/?cluster=demo-l40",
        {"items-0-guaranteed": "2", "reason": "x", "action": "submit"},
    )

    assert slot(response, "items-0-limit") == "guaranteed and limit are required."
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_without_a_cluster_the_lead_chooses_one(world):
    response = logged_in(world.alice).get("/tenants/team-a/requests/new/")

    assert response.status_code == 200
    body = text(response)
    assert "/tenants/team-a/requests/new/?cluster=demo-a100" in body
    assert "/tenants/team-a/requests/new/?cluster=demo-h100" in body


@pytest.mark.parametrize(
    ("persona", "status"),
    [("admin", 200), ("alice", 200), ("carol", 403), ("victor", 403), ("bob", 404)],
)
def test_only_leads_and_admins_open_the_form(world, persona, status):
    client = logged_in(getattr(world, persona))

    assert client.get(NEW).status_code == status
    assert client.post(NEW, a100_form(reason="x")).status_code in (status, 302)
    assert client.post(VALIDATE, a100_form()).status_code == status


def test_the_form_is_not_for_anonymous_visitors_or_unknown_places(world):
    response = logged_in(None).get(NEW)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")
    assert logged_in(None).post(VALIDATE, a100_form()).status_code == 302

    alice = logged_in(world.alice)
    assert alice.get(VALIDATE).status_code == 405  # the live check only takes POST
    assert alice.get("/tenants/team-a/requests/new/?cluster=no-such").status_code == 404
    assert alice.get("/tenants/no-such/requests/new/?cluster=demo-a100").status_code == 404
    # bob's 404 for team-a reads like one for a tenant that does not exist.
    bob = logged_in(world.bob)
    assert main(bob.get(NEW)) == main(bob.get("/tenants/no-such/requests/new/?cluster=x"))


def test_a_lead_submits_a_request_with_only_the_lines_that_change(world):
    alice = logged_in(world.alice)
    response = alice.post(
        NEW, a100_form(**{"items-0-guaranteed": "8", "reason": "  two more for the new model "})
    )

    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert response.status_code == 302
    assert response["Location"] == f"/requests/{change.pk}/"
    assert change.status == RequestStatus.PENDING
    assert change.reason == "two more for the new model"
    assert change.source == "portal"
    assert [(i.resource, i.guaranteed, i.limit) for i in change.items.all()] == [
        (GPU_RESOURCE, Decimal(8), Decimal(10))
    ]
    assert change.max_running_jobs is None  # unchanged scheduling stays as it is
    page = alice.get(response["Location"])
    assert f"Request #{change.pk} submitted for approval." in text(page)


def test_save_draft_stores_a_draft_with_the_scheduling_change(world):
    response = logged_in(world.alice).post(
        NEW,
        a100_form(
            **{
                "action": "draft",
                "reason": "more jobs",
                "max_running_jobs": "8",
                "storage_bytes": "2Ti",
            }
        ),
    )

    assert response.status_code == 302
    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert change.status == RequestStatus.DRAFT
    assert list(change.items.all()) == []
    assert (change.max_running_jobs, change.storage_bytes) == (8, Decimal(2 * 1024**4))


def test_a_broken_rule_is_shown_next_to_its_field_and_nothing_is_stored(world):
    before = stored()

    response = logged_in(world.alice).post(
        NEW, a100_form(**{"items-0-limit": "12", "reason": "peak"})
    )

    assert response.status_code == 200
    assert stored() == before
    assert slot(response, "items-0-limit") == (
        f"{ELASTIC_CAP_ERROR} (62.5% of 16 NVIDIA A100-SXM4-80GB on demo-a100)"
    )
    assert slot(response, "items-0-guaranteed") == ""
    assert input_value(response, "items-0-limit") == "12"  # what was typed stays
    assert "peak</textarea>" in response.content.decode()
    assert "1 problem" in text(response)
    assert 'aria-invalid="true"' in response.content.decode()


def test_every_error_shows_at_once_with_the_numbers(world):
    before = stored()

    response = logged_in(world.alice).post(
        NEW,
        a100_form(
            **{
                "items-0-guaranteed": "11",
                "items-0-limit": "11",
                "items-1-limit": "8x",
                "max_pods": "-1",
                "reason": "   ",
            }
        ),
    )

    assert response.status_code == 200
    assert stored() == before
    assert "unknown suffix 'x'" in slot(response, "items-1-limit")
    assert slot(response, "max_pods") == "Ensure this value is greater than or equal to 0."
    assert slot(response, "reason") == "a reason is required: say why the team needs it"
    # The rules speak once every amount parses: capacity and the elastic cap, with numbers.
    response = logged_in(world.alice).post(
        NEW, a100_form(**{"items-0-guaranteed": "11", "items-0-limit": "11", "max_pods": "-1"})
    )
    assert stored() == before
    assert "other tenants hold 6 of 16" in slot(response, "items-0-guaranteed")
    assert "limit 11 exceeds the elastic cap of 10" in slot(response, "items-0-limit")
    assert slot(response, "max_pods") == "Ensure this value is greater than or equal to 0."
    assert slot(response, "reason") == "a reason is required: say why the team needs it"


def test_the_check_button_shows_the_difference_and_stores_nothing(world):
    before = stored()

    response = logged_in(world.alice).post(
        NEW, a100_form(**{"items-0-guaranteed": "8", "action": "check"})
    )

    assert response.status_code == 200
    assert stored() == before
    body = text(response)
    assert "No rule broken" in body
    assert "1 approval" in body
    diff = re.search(r'<table class="diff">.*?</table>', body, re.S)
    assert diff
    assert re.sub(r"<[^>]+>|\s+", "", diff.group(0)).count("6→8") == 1
    assert slot(response, "reason") == ""  # a check does not need a reason yet


def test_the_capacity_lines_read_in_units_a_person_reads(world):
    response = logged_in(world.alice).post(
        NEW, a100_form(**{"items-2-guaranteed": "512Gi", "action": "check"})
    )

    body = text(response)
    capacity = re.search(r'<table class="capacity">.*?</table>', body, re.S)
    assert capacity
    memory = re.search(
        r'<tr data-flavor="a100-80gb" data-resource="memory".*?</tr>', capacity.group(0), re.S
    )
    assert memory
    cells = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", memory.group(0))).split()
    # capacity 2 TiB; this change (the guarantee) +128 GiB; max limit per tenant 0.625 of it
    assert "2 TiB" in " ".join(cells) and "+128 GiB" in " ".join(cells)
    assert "1.25 TiB" in " ".join(cells)
    assert "1280Gi" not in body.split('<table class="capacity">')[1]


def test_lowering_a_quota_is_allowed_with_a_warning(world):
    response = logged_in(world.alice).post(
        NEW, a100_form(**{"items-0-guaranteed": "2", "items-0-limit": "4", "action": "check"})
    )

    assert "goes down from 6/10 to 2/4" in text(response)


def test_the_live_check_answers_like_a_submit_and_stores_nothing(world):
    alice = logged_in(world.alice)
    before = stored()

    broken = alice.post(VALIDATE, a100_form(**{"items-0-limit": "12"})).json()
    fine = alice.post(VALIDATE, a100_form(**{"items-0-guaranteed": "8"})).json()
    typo = alice.post(VALIDATE, a100_form(**{"items-2-limit": "640GB"})).json()

    assert stored() == before
    assert broken["valid"] is False
    assert list(broken["errors"]) == ["items-0-limit"]
    assert broken["errors"]["items-0-limit"][0].startswith(ELASTIC_CAP_ERROR)
    assert "1 problem" in broken["panel"]
    assert fine["valid"] is True
    assert fine["errors"] == {}  # no reason yet, and that is fine while typing
    assert fine["required_approvals"] == 1
    assert fine["diff"] == [
        {
            "flavor": "a100-80gb",
            "resource": GPU_RESOURCE,
            "guaranteed_before": "6",
            "limit_before": "10",
            "guaranteed_after": "8",
            "limit_after": "10",
            "gpu_units_before": "10",
            "gpu_units_after": "10",
        }
    ]
    assert "No rule broken" in fine["panel"]
    assert list(typo["errors"]) == ["items-2-limit"]
    assert "use Gi or G" in typo["errors"]["items-2-limit"][0]


def test_the_live_check_needs_the_csrf_token(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)

    assert client.post(VALIDATE, a100_form()).status_code == 403


# --- "Requests" and a request's page --------------------------------------------------------


def test_my_requests_lists_what_the_caller_may_see(world):
    mine = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)
    theirs = file_request(world, tenant=world.team_b, guaranteed=5, limit=6, requester=world.bob)

    alice = text(logged_in(world.alice).get("/requests/"))
    bob = text(logged_in(world.bob).get("/requests/"))
    pending_only = text(logged_in(world.alice).get("/requests/?status=approved"))
    admin = text(logged_in(world.admin).get("/requests/?tenant=team-b"))

    assert f'data-request="{mine.pk}"' in alice
    assert f'data-request="{theirs.pk}"' not in alice
    assert f'data-request="{theirs.pk}"' in bob
    assert f'data-request="{mine.pk}"' not in bob
    assert f'data-request="{mine.pk}"' not in pending_only
    assert f'data-request="{theirs.pk}"' in admin
    assert f'data-request="{mine.pk}"' not in admin


def test_the_list_heading_says_whose_requests_it_lists(world):
    def heading(user, query=""):
        page = text(logged_in(user).get(f"/requests/{query}"))
        return re.sub(r"<[^>]+>|\s+", " ", re.search(r"<h1>(.*?)</h1>", page, re.S).group(1))

    assert heading(world.alice).split() == ["Requests", "of", "your", "tenants"]
    assert heading(world.alice, "?mine=on").split() == ["Your", "requests"]
    assert heading(world.admin).split() == ["Requests", "of", "all", "tenants"]
    assert "My requests" not in text(logged_in(world.alice).get("/requests/"))


def test_my_requests_runs_a_constant_number_of_queries(world):
    def count() -> int:
        client = logged_in(world.admin)
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/requests/").status_code == 200
        return len(queries)

    file_request(world, tenant=world.team_a, guaranteed=7, limit=10)
    few = count()
    for _ in range(10):
        file_request(world, tenant=world.team_b, guaranteed=5, limit=6, submit=False)
    assert count() == few


@pytest.mark.parametrize(
    ("persona", "status"), [("alice", 200), ("carol", 200), ("admin", 200), ("bob", 404)]
)
def test_a_request_page_is_for_its_tenant_and_admins(world, persona, status):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)

    assert logged_in(getattr(world, persona)).get(f"/requests/{change.pk}/").status_code == status


def test_a_request_page_shows_the_diff_decisions_and_timeline(world):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)

    response = logged_in(world.alice).get(f"/requests/{change.pk}/")

    body = text(response)
    assert "Pending approval" in body
    assert "more training runs" in body
    diff = re.search(r'<table class="diff">.*?</table>', body, re.S)
    assert diff
    assert re.sub(r"<[^>]+>|\s+", "", diff.group(0)).count("6→8") == 1
    # ...and what the cluster would see says it in words (the dry run).
    assert "nvidia.com/gpu on a100-80gb: guaranteed 6 → 8" in body
    assert re.findall(r'data-action="([^"]+)"', body) == [
        "quota_request.created",
        "quota_request.pending",
    ]
    assert "a100-80gb nvidia.com/gpu 6/10 → 8/10" in body
    assert "Cancel request" in body
    assert "Approve" not in body
    assert logged_in(world.bob).get(f"/requests/{change.pk}/").status_code == 404
    assert "Cancel request" not in text(logged_in(world.carol).get(f"/requests/{change.pk}/"))


def test_a_draft_is_submitted_with_its_button(world):
    change = file_request(
        world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice, submit=False
    )
    alice = logged_in(world.alice)
    assert "Submit for approval" in text(alice.get(f"/requests/{change.pk}/"))

    response = alice.post(f"/requests/{change.pk}/submit/")

    assert response.status_code == 302
    change.refresh_from_db()
    assert change.status == RequestStatus.PENDING
    assert f"Request #{change.pk} submitted" in text(alice.get(response["Location"]))


def test_the_requester_cancels_a_pending_request_and_others_cannot(world):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)

    carol = logged_in(world.carol)
    response = carol.post(f"/requests/{change.pk}/cancel/", follow=True)
    change.refresh_from_db()
    assert change.status == RequestStatus.PENDING
    assert "Only the requester cancels a request" in text(response)
    assert logged_in(world.bob).post(f"/requests/{change.pk}/cancel/").status_code == 404

    response = logged_in(world.alice).post(f"/requests/{change.pk}/cancel/", follow=True)

    change.refresh_from_db()
    assert change.status == RequestStatus.CANCELLED
    assert f"Request #{change.pk} cancelled." in text(response)
    assert "Cancel request" not in text(response)


def test_buttons_are_post_forms_with_csrf(world):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.alice)

    assert client.get(f"/requests/{change.pk}/cancel/").status_code == 405
    assert client.post(f"/requests/{change.pk}/cancel/").status_code == 403
    body = client.get(f"/requests/{change.pk}/").content.decode()
    cancel = re.search(r'<form method="post" action="/requests/\d+/cancel/".*?</form>', body, re.S)
    assert cancel
    assert "csrfmiddlewaretoken" in cancel.group(0)


# --- the approvals queue --------------------------------------------------------------------


def test_the_queue_is_for_platform_admins(world):
    response = logged_in(None).get(QUEUE)
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/console/approvals/"
    for persona in ("alice", "carol", "bob"):
        assert logged_in(getattr(world, persona)).get(QUEUE).status_code == 403
    assert logged_in(world.admin).get(QUEUE).status_code == 200


def test_the_queue_shows_pending_requests_oldest_first_with_diff_and_capacity(world):
    first = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)
    second = file_request(world, tenant=world.team_b, guaranteed=5, limit=6, requester=world.bob)
    draft = file_request(world, tenant=world.team_c, guaranteed=3, limit=4, submit=False)

    body = text(logged_in(world.admin).get(QUEUE))

    assert re.findall(r'<article class="queue-entry" data-request="(\d+)"', body) == [
        str(first.pk),
        str(second.pk),
    ]
    assert f'data-request="{draft.pk}"' not in body
    entry = body.split(f'data-request="{first.pk}"')[1].split("</article>")[0]
    assert "0 of 1 approval" in entry
    assert re.sub(r"<[^>]+>|\s+", "", entry).count("6→8") == 1
    # After approval 8 + 4 + 2 = 14 of 16 A100s are guaranteed: 2 free.
    free_after = re.search(r'class="num free-after">([^<]*)', entry)
    assert free_after
    assert free_after.group(1).strip() == "2"
    assert "+2 GPU units" in entry  # two more guaranteed (the limit stays 10)
    assert f'action="/requests/{first.pk}/approve/"' in entry
    assert f'formaction="/requests/{first.pk}/reject/"' in entry


def test_the_queue_says_one_gpu_unit_in_the_singular(world):
    request = file_request(world, tenant=world.team_a, guaranteed=7, limit=10)

    body = text(logged_in(world.admin).get(QUEUE))

    entry = body.split(f'data-request="{request.pk}"')[1].split("</article>")[0]
    assert re.search(r"\+1 GPU unit\s*</span>", entry), entry


def test_the_queue_filters_by_cluster_tenant_and_size(world):
    a = file_request(world, tenant=world.team_a, guaranteed=6, limit=8)  # -2 units
    b = file_request(world, tenant=world.team_b, guaranteed=4, limit=10)  # +4 units
    h = file_request(
        world, tenant=world.team_c, guaranteed=4, limit=8, cluster=world.h100, flavor=world.h100_gpu
    )  # 2 more H100s (weight 2) on the limit: +4 units
    policy = approval_policy()
    policy.two_approvers_above_gpu_units = Decimal(3)
    policy.save()
    admin = logged_in(world.admin)

    def listed(query: str) -> list[int]:
        body = admin.get(QUEUE + query).content.decode()
        return [int(pk) for pk in re.findall(r'class="queue-entry" data-request="(\d+)"', body)]

    assert listed("") == [a.pk, b.pk, h.pk]
    assert listed("?cluster=demo-h100") == [h.pk]
    assert listed("?tenant=team-b") == [b.pk]
    assert listed("?size=none") == [a.pk]
    assert listed("?size=large") == [b.pk, h.pk]
    assert listed("?size=small") == []
    assert listed("?cluster=demo-a100&size=large") == [b.pk]
    assert listed("?cluster=nowhere") == [a.pk, b.pk, h.pk]  # an unknown choice filters nothing
    assert listed("?cluster=nowhere&tenant=team-c") == [h.pk]  # and the others still apply


def test_the_queue_offers_only_the_tenants_with_something_to_approve(world):
    """One option per tenant with a pending request (not one per tenant of the platform: at
    10,000 tenants that list was most of the page), plus the tenant the URL names."""
    file_request(world, tenant=world.team_b, guaranteed=4, limit=10)
    admin = logged_in(world.admin)

    def offered(query: str) -> list[str]:
        body = admin.get(QUEUE + query).content.decode()
        select = body.split('name="tenant"', 1)[1].split("</select>", 1)[0]
        return re.findall(r'<option value="([^"]*)"', select)

    assert offered("") == ["", "team-b"]
    assert offered("?tenant=team-a") == ["", "team-a", "team-b"]  # named: kept as chosen
    assert offered("?tenant=no-such-team") == ["", "team-b"]


def test_the_queue_runs_a_constant_number_of_queries(world):
    def queue_queries() -> int:
        client = logged_in(world.admin)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(QUEUE)
        assert response.status_code == 200
        return len(queries)

    def add(count: int) -> None:
        for n in range(count):
            tenant = (world.team_a, world.team_b, world.team_c)[n % 3]
            if n % 2:  # (team-c holds 2/4 already: a request must change something)
                file_request(world, tenant=tenant, guaranteed=3, limit=4)
            else:
                file_request(
                    world,
                    tenant=tenant,
                    guaranteed=4,
                    limit=8,
                    cluster=world.h100,
                    flavor=world.h100_gpu,
                )

    add(5)
    five = queue_queries()
    add(45)
    assert QuotaChangeRequest.objects.filter(status=RequestStatus.PENDING).count() == 50
    assert queue_queries() == five


def test_an_admin_approves_from_the_queue(world):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)
    admin = logged_in(world.admin)

    response = admin.post(
        f"/requests/{change.pk}/approve/",
        {"comment": "go ahead", "next": QUEUE + "?cluster=demo-a100"},
    )

    assert response.status_code == 302
    assert response["Location"] == QUEUE + "?cluster=demo-a100"
    change.refresh_from_db()
    assert change.status == RequestStatus.APPROVED
    assert a100_gpu_quota(world.team_a) == (Decimal(8), Decimal(10))
    assert ApprovalDecision.objects.get(request=change).comment == "go ahead"
    page = text(admin.get(response["Location"]))
    assert f"Request #{change.pk} approved: team-a on demo-a100 now has quota generation" in page
    assert f'data-request="{change.pk}"' not in page
    tenant_page = text(logged_in(world.alice).get("/tenants/team-a/"))
    assert "Request a change" in tenant_page


def test_an_admin_rejects_with_a_comment(world):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)

    response = logged_in(world.admin).post(
        f"/requests/{change.pk}/reject/", {"comment": "not this quarter"}, follow=True
    )

    change.refresh_from_db()
    assert change.status == RequestStatus.REJECTED
    assert a100_gpu_quota(world.team_a) == (Decimal(6), Decimal(10))
    body = text(response)
    assert f"Request #{change.pk} (team-a on demo-a100) rejected." in body
    assert "not this quarter" in body  # the request page shows the decision's comment


def test_nobody_approves_their_own_request(world):
    own = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.admin)
    admin = logged_in(world.admin)

    queue = text(admin.get(QUEUE))
    entry = queue.split(f'data-request="{own.pk}"')[1].split("</article>")[0]
    assert "Your own request: another admin must decide it." in entry
    assert "/approve/" not in entry

    response = admin.post(f"/requests/{own.pk}/approve/", {"next": QUEUE}, follow=True)

    own.refresh_from_db()
    assert own.status == RequestStatus.PENDING
    assert "Nobody approves or rejects their own request" in text(response)
    other = UserFactory(username="erin", is_platform_admin=True)
    logged_in(other).post(f"/requests/{own.pk}/approve/")
    own.refresh_from_db()
    assert own.status == RequestStatus.APPROVED


@pytest.mark.parametrize("persona", ["alice", "carol", "bob"])
def test_only_admins_decide(world, persona):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)
    client = logged_in(getattr(world, persona))

    assert client.post(f"/requests/{change.pk}/approve/").status_code == 403
    assert client.post(f"/requests/{change.pk}/reject/").status_code == 403
    change.refresh_from_db()
    assert change.status == RequestStatus.PENDING
    assert not ApprovalDecision.objects.exists()


def test_a_rule_broken_at_approval_is_a_message_and_the_other_request_needs_revalidation(world):
    # Each fits alone (14 and 15 of 16 A100s guaranteed); together they would need 17.
    first = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)
    second = file_request(world, tenant=world.team_b, guaranteed=7, limit=7, requester=world.bob)
    later = file_request(world, tenant=world.team_a, guaranteed=6, limit=9, requester=world.alice)
    admin = logged_in(world.admin)
    admin.post(f"/requests/{first.pk}/approve/")

    queue = text(admin.get(QUEUE))
    entry = queue.split(f'data-request="{second.pk}"')[1].split("</article>")[0]
    assert "breaks a rule now" in entry
    assert "does not fit" in entry

    response = admin.post(f"/requests/{second.pk}/approve/", {"next": QUEUE}, follow=True)

    second.refresh_from_db()
    assert second.status == RequestStatus.PENDING
    body = text(response)
    assert f"Request #{second.pk} was not approved:" in body
    assert "guaranteed 7 does not fit: other tenants hold 10 of 16" in body
    assert a100_gpu_quota(world.team_b) == (Decimal(4), Decimal(6))
    detail = text(admin.get(f"/requests/{later.pk}/"))
    assert 'data-warning="needs_revalidation"' in detail
    assert "needs re-validation" in text(admin.get(QUEUE))


def test_a_large_increase_needs_two_different_admins(world):
    policy = approval_policy()
    policy.two_approvers_above_gpu_units = Decimal(0)
    policy.save()
    change = file_request(world, tenant=world.team_c, guaranteed=2, limit=6, requester=world.admin)
    assert change.required_approvals == 2
    erin = UserFactory(username="erin", is_platform_admin=True)
    frank = UserFactory(username="frank", is_platform_admin=True)

    response = logged_in(erin).post(f"/requests/{change.pk}/approve/", follow=True)

    change.refresh_from_db()
    assert change.status == RequestStatus.PENDING
    assert "recorded; it needs 2 approvals from different admins" in text(response)
    assert "1 of 2 approvals" in text(logged_in(frank).get(QUEUE))
    again = logged_in(erin).post(f"/requests/{change.pk}/approve/", follow=True)
    assert "already decided" in text(again)
    logged_in(frank).post(f"/requests/{change.pk}/approve/")
    change.refresh_from_db()
    assert change.status == RequestStatus.APPROVED
    assert a100_gpu_quota(world.team_c) == (Decimal(2), Decimal(6))


def test_next_never_leaves_the_site(world):
    change = file_request(world, tenant=world.team_a, guaranteed=8, limit=10, requester=world.alice)

    response = logged_in(world.admin).post(
        f"/requests/{change.pk}/reject/", {"next": "https://evil.example/"}
    )

    assert response["Location"] == f"/requests/{change.pk}/"


def test_navigation_links_lead_to_the_pages(world):
    alice = text(logged_in(world.alice).get("/tenants/team-a/"))
    carol = text(logged_in(world.carol).get("/tenants/team-a/"))
    admin = text(logged_in(world.admin).get("/console/"))

    assert 'href="/tenants/team-a/requests/new/?cluster=demo-a100"' in alice
    assert 'href="/requests/"' in alice
    assert "Request a change" not in carol
    assert 'href="/console/approvals/"' in admin
    assert 'href="/console/approvals/"' not in alice


def test_a_form_started_from_a_tier_files_a_tier_change(world):
    alice = logged_in(world.alice)
    page = alice.get(NEW + "&tier=small")
    assert 'name="tier" value="small"' in page.content.decode()

    response = alice.post(
        NEW,
        a100_form(
            tier="small",
            **{"items-0-guaranteed": "4", "items-0-limit": "6"},
            reason="back to the small tier",
        ),
    )

    assert response.status_code == 302
    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert change.tier == world.small


def _a100_draft(world, guaranteed: int, limit: int, reason: str = "from last month's usage"):  # type: ignore[no-untyped-def]
    return quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason=reason,
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit))],
    )


def test_a_draft_opens_in_the_form_prefilled_and_what_is_filed_replaces_it(world):
    draft = _a100_draft(world, 8, 10)
    alice = logged_in(world.alice)
    detail = alice.get(f"/requests/{draft.pk}/").content.decode()
    edit = f"/tenants/team-a/requests/new/?cluster=demo-a100&amp;from={draft.pk}"
    assert f'href="{edit}"' in detail

    page = alice.get(unescape(edit))
    assert page.status_code == 200
    assert [input_value(page, f"items-0-{n}") for n in ("guaranteed", "limit")] == ["8", "10"]
    assert input_value(page, "items-1-guaranteed") == "48"  # not in the draft: the quota in force
    assert input_value(page, "replaces") == str(draft.pk)
    assert "from last month&#x27;s usage</textarea>" in page.content.decode()
    assert f'data-source="{draft.pk}"' in page.content.decode()

    response = alice.post(
        NEW,
        a100_form(
            replaces=str(draft.pk),
            action="draft",
            reason="7 is enough",
            **{"items-0-guaranteed": "7"},
        ),
    )

    assert response.status_code == 302
    new = QuotaChangeRequest.objects.get(pk__gt=draft.pk)
    assert new.status == RequestStatus.DRAFT and new.reason == "7 is enough"
    assert new.items.get(resource=GPU_RESOURCE).guaranteed == 7
    draft.refresh_from_db()
    assert draft.status == RequestStatus.CANCELLED
    created = AuditEvent.objects.get(action="quota_request.created", object_id=f"#{new.pk}")
    assert created.after["replaces"] == f"#{draft.pk}"
    assert f"replaces draft #{draft.pk}" in text(alice.get(response["Location"]))


@pytest.mark.parametrize(
    "which", ["team-b", "pending", "other-cluster", "word", "³", "٣", "9" * 5000]
)
def test_a_form_cannot_start_from_what_is_not_a_draft_of_the_tenant_here(world, which):
    if which == "team-b":
        pk = quota_request_create(
            tenant=world.team_b, cluster=world.a100, requester=world.bob, reason="b",
            items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(5), Decimal(6))],
        ).pk  # fmt: skip
    elif which == "pending":
        pk = _a100_draft(world, 8, 10).pk
        QuotaChangeRequest.objects.filter(pk=pk).update(status=RequestStatus.PENDING)
    elif which == "other-cluster":
        pk = _a100_draft(world, 8, 10).pk
        QuotaChangeRequest.objects.filter(pk=pk).update(cluster=world.h100)
    elif which == "word":
        pk = "abc"  # type: ignore[assignment]
    else:
        pk = which  # type: ignore[assignment]  # digits str.isdigit() takes, int() may not

    response = logged_in(world.alice).get(f"{NEW}&from={pk}")

    assert response.status_code == 404


def test_a_draft_submitted_meanwhile_is_not_replaced_and_nothing_is_filed(world):
    from approvals.services import quota_request_submit

    draft = _a100_draft(world, 8, 10)
    alice = logged_in(world.alice)
    assert alice.get(f"{NEW}&from={draft.pk}").status_code == 200
    quota_request_submit(request=draft, actor=world.alice)  # in another tab

    response = alice.post(
        NEW, a100_form(replaces=str(draft.pk), reason="7 is enough", **{"items-0-guaranteed": "7"})
    )

    assert response.status_code == 200
    assert f"Request #{draft.pk} is pending, no longer a draft" in text(response)
    assert not QuotaChangeRequest.objects.filter(pk__gt=draft.pk).exists()
    draft.refresh_from_db()
    assert draft.status == RequestStatus.PENDING
