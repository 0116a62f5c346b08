"""Django admin: requests are read-only, decided through actions that call the services;
the approval policy is editable; nothing is deletable."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.messages import get_messages

from approvals.choices import RequestStatus
from approvals.models import ApprovalDecision, ApprovalPolicy, QuotaChangeRequest
from approvals.services import approval_policy
from tenants.models import AuditEvent
from tests.approvals.conftest import database_state, file, gpu_quota, item

CHANGELIST = "/admin/approvals/quotachangerequest/"


def _act(client, name: str, *requests: QuotaChangeRequest):  # type: ignore[no-untyped-def]
    return client.post(
        CHANGELIST,
        {"action": name, "_selected_action": [r.pk for r in requests], "index": 0},
        follow=True,
    )


def _messages(response) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_the_admin_pages_load_and_offer_no_add_change_or_delete(world, client):
    request = file(world)
    client.force_login(world.admin)
    for model in (QuotaChangeRequest, ApprovalPolicy):
        assert model in admin.site._registry
    listing = client.get(CHANGELIST)
    assert listing.status_code == 200
    html = listing.content.decode()
    assert 'value="approve"' in html and 'value="reject"' in html
    assert "delete_selected" not in html
    detail = client.get(f"{CHANGELIST}{request.pk}/change/")
    assert detail.status_code == 200
    page = detail.content.decode()
    assert "bigger training runs" in page and "a100-80gb" in page
    assert "nvidia.com/gpu: 6/10 -> 8/10" in page  # the diff against the quotas in force
    assert client.get(f"{CHANGELIST}add/").status_code == 403
    assert client.get(f"{CHANGELIST}{request.pk}/delete/").status_code == 403
    state = database_state()
    client.post(f"{CHANGELIST}{request.pk}/change/", {"reason": "changed", "status": "approved"})
    assert database_state() == state
    assert client.get("/admin/approvals/approvalpolicy/").status_code == 200


def test_the_approve_action_calls_the_service_with_the_admin(world, client):
    request = file(world)
    client.force_login(world.admin)
    response = _act(client, "approve", request)
    assert "1 request approved." in _messages(response)
    request.refresh_from_db()
    assert request.status == RequestStatus.APPROVED
    assert gpu_quota(world, world.team_a) == (8, 10)
    decision = ApprovalDecision.objects.get(request=request)
    assert decision.approver == world.admin
    event = AuditEvent.objects.get(action="quota_request.approved", object_id=f"#{request.pk}")
    assert (event.actor, event.source) == (world.admin, "admin")


def test_the_actions_report_what_the_services_refuse(world, client):
    own = file(
        world, requester=world.admin, tenant=world.team_c, items=[item(guaranteed=3, limit=4)]
    )
    cancelled = file(world, reason="changed my mind")
    cancelled_state = QuotaChangeRequest.objects.filter(pk=cancelled.pk)
    cancelled_state.update(status=RequestStatus.CANCELLED)
    fine = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=5, limit=6)]
    )
    client.force_login(world.admin)
    response = _act(client, "reject", own, cancelled, fine)
    messages = _messages(response)
    assert (
        f"Request #{own.pk}: Nobody approves or rejects their own request: another admin must."
        in messages
    )
    assert any(m.startswith(f"Request #{cancelled.pk}:") and "cancelled" in m for m in messages)
    assert "1 request rejected." in messages
    statuses = dict(QuotaChangeRequest.objects.values_list("pk", "status"))
    assert (statuses[own.pk], statuses[cancelled.pk], statuses[fine.pk]) == (
        "pending",
        "cancelled",
        "rejected",
    )


def test_a_staff_user_who_is_not_a_platform_admin_gets_no_decide_actions(world, client):
    from django.contrib.auth.models import Permission

    world.carol.is_staff = True
    world.carol.save()
    world.carol.user_permissions.add(Permission.objects.get(codename="view_quotachangerequest"))
    request = file(world)
    client.force_login(world.carol)
    listing = client.get(CHANGELIST)
    assert listing.status_code == 200
    assert 'value="approve"' not in listing.content.decode()
    _act(client, "approve", request)
    request.refresh_from_db()
    assert request.status == RequestStatus.PENDING


def test_the_policy_is_edited_through_the_service_and_audited(world, client):
    policy = approval_policy()
    client.force_login(world.admin)
    url = f"/admin/approvals/approvalpolicy/{policy.pk}/change/"
    form = {
        "two_approvers_above_gpu_units": "12",
        "two_approvers_above_capacity_fraction": "0.5",
        "pending_expires_after_days": "7",
        "grant_max_days": "30",
        "grant_end_notice_days": "2",
    }
    response = client.post(url, form)
    assert response.status_code == 302, response.content[:2000]
    policy.refresh_from_db()
    assert (policy.two_approvers_above_gpu_units, policy.pending_expires_after_days) == (12, 7)
    assert (policy.grant_max_days, policy.grant_end_notice_days) == (30, 2)
    event = AuditEvent.objects.get(action="approval_policy.updated")
    assert (event.actor, event.source) == (world.admin, "admin")
    refused = client.post(url, {**form, "two_approvers_above_capacity_fraction": "1.5"})
    assert refused.status_code == 200  # the form again, with the error
    policy.refresh_from_db()
    assert policy.two_approvers_above_capacity_fraction == 0.5
    assert client.get(f"/admin/approvals/approvalpolicy/{policy.pk}/delete/").status_code == 403
    assert client.get("/admin/approvals/approvalpolicy/add/").status_code == 403
