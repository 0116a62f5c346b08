"""R27: a per-pod bandwidth cap on a tenant, set only through a quota request. Validated at
submit and again at approval; bad input is a 400 naming ``pod_bandwidth_max`` and the rule,
with nothing stored; "" withdraws the cap."""

from __future__ import annotations

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve, quota_request_create
from core.errors import Conflict, ValidationFailed
from quotas.models import Cluster, SyncOutbox
from tenants.models import AuditEvent, Tenant
from tests.approvals.conftest import URL, body, database_state
from tests.approvals.test_pages import NEW, a100_form, slot, stored
from tests.pages import logged_in, main

pytestmark = pytest.mark.django_db


def _file(world, value):  # type: ignore[no-untyped-def]
    return quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice, reason="shared link",
        items=[], tenant_changes={"pod_bandwidth_max": value}, submit=True,
    )  # fmt: skip


def _cap(world) -> str:  # type: ignore[no-untyped-def]
    return Tenant.objects.get(pk=world.team_a.pk).pod_bandwidth_max


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("fast", "a quantity of bits per second such as 1G or 500M; 'fast' is not one"),
        ("1 G", "is not one"),
        ("0", "0 is not above 0"),
        ("-1G", "-1G is not above 0"),
        ("1500m", "1500m is a fraction of a bit per second"),
        ("999", "999 is under 1k (1,000 bits per second)"),
        ("401G", "401G is over 400G (400 Gbit/s)"),
        ("1T", "1T is over 400G"),
    ],
)
def test_a_bad_cap_is_refused_naming_the_field_and_the_rule_storing_nothing(world, value, rule):
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        _file(world, value)
    [message] = refused.value.fields["pod_bandwidth_max"]
    assert rule in message
    assert database_state() == before
    assert _cap(world) == ""


def test_the_api_refuses_a_bad_cap_with_a_400_naming_the_field(world, api_as):
    before = database_state()
    response = api_as(world.alice).post(URL, body(items=[], pod_bandwidth_max="500"), format="json")
    assert response.status_code == 400, response.json()
    assert "under 1k" in response.json()["fields"]["pod_bandwidth_max"][0]
    assert database_state() == before


def test_an_approved_cap_is_stored_canonical_audited_and_pushed(world, api_as):
    filed = api_as(world.alice).post(
        URL, body(items=[], pod_bandwidth_max="1000M", submit=True), format="json"
    )
    assert filed.status_code == 201, filed.json()
    assert filed.json()["pod_bandwidth_max"] == "1G"  # stored in canonical form
    assert QuotaChangeRequest.objects.get(pk=filed.json()["id"]).pod_bandwidth_max == "1G"
    assert _cap(world) == ""  # nothing in force before approval
    outbox = SyncOutbox.objects.count()
    approved = api_as(world.admin).post(f"{URL}{filed.json()['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    assert _cap(world) == "1G"
    event = AuditEvent.objects.get(action="tenant.limits_changed")
    assert event.before == {"pod_bandwidth_max": None}
    assert event.after["pod_bandwidth_max"] == "1G"
    # Both of team-a's clusters are pushed: the cap labels its namespaces everywhere.
    assert SyncOutbox.objects.count() >= outbox + 2
    shown = api_as(world.carol).get("/api/v1/tenants/team-a/").json()
    assert shown["pod_bandwidth_max"] == "1G"
    listed = api_as(world.carol).get("/api/v1/tenants/").json()["results"]
    assert [(t["slug"], t["pod_bandwidth_max"]) for t in listed] == [("team-a", "1G")]


def test_the_cap_in_force_is_refused_as_changing_nothing_and_so_is_withdrawing_none(world):
    with pytest.raises(ValidationFailed) as refused:
        _file(world, "")
    assert refused.value.fields["pod_bandwidth_max"] == [
        "team-a's pod bandwidth cap is already no cap: the request changes nothing there; "
        "leave it out"
    ]
    Tenant.objects.filter(pk=world.team_a.pk).update(pod_bandwidth_max="1G")
    with pytest.raises(ValidationFailed) as refused:
        _file(world, "1000M")  # the same amount, written otherwise
    assert "already 1G (1 Gbit/s)" in refused.value.fields["pod_bandwidth_max"][0]


def test_withdrawing_the_cap(world):
    Tenant.objects.filter(pk=world.team_a.pk).update(pod_bandwidth_max="1G")
    request = _file(world, "")
    assert QuotaChangeRequest.objects.get(pk=request.pk).pod_bandwidth_max == ""
    quota_request_approve(request=request, approver=world.admin)
    assert _cap(world) == ""
    event = AuditEvent.objects.get(action="tenant.limits_changed")
    assert (event.before, event.after["pod_bandwidth_max"]) == ({"pod_bandwidth_max": "1G"}, None)


def test_a_cluster_older_than_kubernetes_1_30_refuses_a_cap(world):
    """team-a also has quotas on demo-h100: that cluster too must run the admission policy."""
    Cluster.objects.filter(pk=world.h100.pk).update(kubernetes_version="1.29")
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        _file(world, "1G")
    [message] = refused.value.fields["pod_bandwidth_max"]
    assert "needs Kubernetes 1.30 or later" in message
    assert "demo-h100 (Kubernetes 1.29)" in message and "demo-a100" not in message
    assert database_state() == before
    # Withdrawing a cap needs no policy.
    Tenant.objects.filter(pk=world.team_a.pk).update(pod_bandwidth_max="1G")
    quota_request_approve(request=_file(world, ""), approver=world.admin)
    assert _cap(world) == ""


def test_approval_checks_the_cap_again(world):
    """Filed for 2G; by approval the cluster was downgraded below 1.30: 409, nothing applied."""
    request = _file(world, "2G")
    Cluster.objects.filter(pk=world.a100.pk).update(kubernetes_version="1.28")
    before = database_state()
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=request, approver=world.admin)
    assert "needs Kubernetes 1.30" in refused.value.fields["pod_bandwidth_max"][0]
    assert database_state() == before
    assert _cap(world) == ""


def test_approval_refuses_a_cap_that_came_into_force_meanwhile(world):
    request = _file(world, "2G")
    Tenant.objects.filter(pk=world.team_a.pk).update(pod_bandwidth_max="2G")
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=request, approver=world.admin)
    assert "already 2G" in refused.value.fields["pod_bandwidth_max"][0]


# --- pages ------------------------------------------------------------------------------------


def test_the_form_files_a_cap_and_the_pages_show_it(world):
    alice = logged_in(world.alice)
    form = alice.get(NEW).content.decode()
    assert "most bits per second each pod may send and receive, e.g. 1G" in form
    response = alice.post(NEW, a100_form(pod_bandwidth_max="1G", reason="shared link"))
    assert response.status_code == 302, main(response)
    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert change.pod_bandwidth_max == "1G"
    assert "at most 1G bits per second each way per pod" in main(alice.get(response["Location"]))
    assert "Pod bandwidth: <strong>no cap</strong>" in main(alice.get("/tenants/team-a/"))
    quota_request_approve(request=change, approver=world.admin)
    page = main(alice.get("/tenants/team-a/"))
    assert "Pod bandwidth: <strong>at most 1 Gbit/s each way per pod</strong>" in page


def test_the_form_puts_a_bad_cap_next_to_its_field_and_none_withdraws(world):
    before = stored()
    response = logged_in(world.alice).post(
        NEW, a100_form(pod_bandwidth_max="500G", reason="shared link")
    )
    assert response.status_code == 200
    assert "500G is over 400G" in slot(response, "pod_bandwidth_max")
    assert stored() == before
    Tenant.objects.filter(pk=world.team_a.pk).update(pod_bandwidth_max="1G")
    response = logged_in(world.alice).post(
        NEW, a100_form(pod_bandwidth_max="none", reason="no more cap")
    )
    assert response.status_code == 302, main(response)
    assert QuotaChangeRequest.objects.get(requester=world.alice).pod_bandwidth_max == ""
