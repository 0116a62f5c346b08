"""Tenant-wide limits set by request: a maximum run time (R12) and a cap on normalised GPU
units summed over every cluster (R22). Validated at submit and again at approval; bad input
is a 400 naming the field and the rule, with nothing stored.

team-a's limits: 10 A100s (weight 1) on demo-a100 and 6 H100s (weight 2) on demo-h100: 22
GPU units in all."""

from __future__ import annotations

from decimal import Decimal

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve, quota_request_create
from core.errors import Conflict, ValidationFailed
from quotas.choices import GPU_RESOURCE
from quotas.services import QuotaItem
from tenants.models import AuditEvent, Tenant
from tests.approvals.conftest import URL, body, database_state

pytestmark = pytest.mark.django_db


def _file(world, *, items=(), **changes):  # type: ignore[no-untyped-def]
    return quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice, reason="why",
        items=list(items), tenant_changes=changes, submit=True,
    )  # fmt: skip


def _a100(guaranteed: int, limit: int, world) -> QuotaItem:  # type: ignore[no-untyped-def]
    return QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit))


# --- services ---------------------------------------------------------------------------------


def test_a_cap_below_what_the_tenant_holds_is_refused_naming_the_sum_and_each_cluster(world):
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        _file(world, gpu_unit_cap=Decimal(16))
    [message] = refused.value.fields["gpu_unit_cap"]
    assert message == (
        "team-a's GPU limits would add up to 22 GPU units over every cluster (demo-a100 10 GPU "
        "units, demo-h100 12 GPU units), above its cap of 16 GPU units (each limit counts times "
        "its GPU model's weight)"
    )
    assert database_state() == before


def test_an_approved_cap_is_set_audited_and_then_holds_later_requests(world):
    request = _file(world, gpu_unit_cap=Decimal(22))
    quota_request_approve(request=request, approver=world.admin)
    assert Tenant.objects.get(pk=world.team_a.pk).gpu_unit_cap == Decimal(22)
    event = AuditEvent.objects.get(action="tenant.limits_changed")
    assert event.before == {"gpu_unit_cap": None} and event.after["gpu_unit_cap"] == "22"

    _file(world, items=[_a100(8, 10, world)])  # the guarantee only: still 22 units, fits
    with pytest.raises(ValidationFailed) as refused:
        quota_request_create(
            tenant=world.team_a, cluster=world.h100, requester=world.alice, reason="more",
            items=[QuotaItem(world.h100_gpu, GPU_RESOURCE, Decimal(4), Decimal(7))], submit=True,
        )  # fmt: skip
    assert refused.value.fields["items"] == [
        "team-a's GPU limits would add up to 24 GPU units over every cluster (demo-a100 10 GPU "
        "units, demo-h100 14 GPU units), above its cap of 22 GPU units (each limit counts times "
        "its GPU model's weight)"
    ]


def test_approval_checks_the_cap_again(world):
    """Filed under no cap (6 -> 7 H100s: 24 units); by approval a cap of 23 is in force: 409
    naming it, nothing applied."""
    request = quota_request_create(
        tenant=world.team_a, cluster=world.h100, requester=world.alice, reason="more",
        items=[QuotaItem(world.h100_gpu, GPU_RESOURCE, Decimal(4), Decimal(7))], submit=True,
    )  # fmt: skip
    Tenant.objects.filter(pk=world.team_a.pk).update(gpu_unit_cap=Decimal(23))
    before = database_state()
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=request, approver=world.admin)
    assert "24 GPU units" in refused.value.fields["items"][0]
    assert "above its cap of 23 GPU units" in refused.value.fields["items"][0]
    assert database_state() == before
    assert QuotaChangeRequest.objects.get(pk=request.pk).status == "pending"


def test_over_a_cap_in_force_a_request_that_lowers_the_sum_passes(world):
    """A cap below what the tenant holds (a GPU model's weight rose since it was set): a
    request lowering its limits is accepted, one keeping them is not what the cap refuses."""
    Tenant.objects.filter(pk=world.team_a.pk).update(gpu_unit_cap=Decimal(20))
    _file(world, items=[_a100(6, 9, world)])  # 21 units: still over, but lower


def test_a_cap_or_maximum_already_in_force_changes_nothing(world):
    Tenant.objects.filter(pk=world.team_a.pk).update(
        gpu_unit_cap=Decimal(30), max_run_time_hours=48
    )
    with pytest.raises(ValidationFailed) as refused:
        _file(world, gpu_unit_cap=Decimal(30), max_run_time_hours=48)
    assert "already 30 GPU units" in refused.value.fields["gpu_unit_cap"][0]
    assert "already 48 hours" in refused.value.fields["max_run_time_hours"][0]


def test_a_zero_cap_removes_it(world):
    Tenant.objects.filter(pk=world.team_a.pk).update(gpu_unit_cap=Decimal(30))
    quota_request_approve(request=_file(world, gpu_unit_cap=0), approver=world.admin)
    assert Tenant.objects.get(pk=world.team_a.pk).gpu_unit_cap is None


def test_approval_checks_the_maximum_run_time_again(world):
    request = _file(world, max_run_time_hours=24)
    Tenant.objects.filter(pk=world.team_a.pk).update(max_run_time_hours=24)
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=request, approver=world.admin)
    assert "already 24 hours" in refused.value.fields["max_run_time_hours"][0]


# --- API --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hours", [-1, 9000, "ten", "\u0663", "\u0664\u0668", "\uff14\uff18", "\u00b3"]
)  # Arabic-Indic 3 and 48, fullwidth 48, superscript 3: int() reads the first three
def test_api_refuses_a_bad_maximum_run_time_naming_the_field(world, api_as, hours):
    before = database_state()
    response = api_as(world.alice).post(
        URL, body(items=[], max_run_time_hours=hours), format="json"
    )
    assert response.status_code == 400, response.json()
    assert "max_run_time_hours" in response.json()["fields"]
    assert database_state() == before


@pytest.mark.parametrize("field", ["max_run_time_hours", "gpu_unit_cap"])
def test_api_numbers_are_ascii_digits_only(world, api_as, field):
    before = database_state()
    response = api_as(world.alice).post(URL, body(items=[], **{field: "\u0663"}), format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["fields"][field] == ["A number in ASCII digits (0-9) is required."]
    assert database_state() == before


def test_api_refuses_a_cap_below_the_sum_naming_the_field(world, api_as):
    before = database_state()
    response = api_as(world.alice).post(URL, body(items=[], gpu_unit_cap="12.5"), format="json")
    assert response.status_code == 400
    assert "above its cap of 12.5 GPU units" in response.json()["fields"]["gpu_unit_cap"][0]
    assert database_state() == before


def test_api_files_both_limits_and_the_tenant_has_them_once_approved(world, api_as):
    filed = api_as(world.alice).post(
        URL,
        body(items=[], max_run_time_hours=72, gpu_unit_cap="24", submit=True),
        format="json",
    )
    assert filed.status_code == 201, filed.json()
    assert (filed.json()["max_run_time_hours"], filed.json()["gpu_unit_cap"]) == (72, "24")
    checked = api_as(world.alice).post(f"{URL}validate/", body(gpu_unit_cap="1"), format="json")
    assert checked.status_code == 200 and checked.json()["valid"] is False
    assert "gpu_unit_cap" in checked.json()["errors"]
    approved = api_as(world.admin).post(f"{URL}{filed.json()['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    team = Tenant.objects.get(pk=world.team_a.pk)
    assert (team.max_run_time_hours, team.gpu_unit_cap) == (72, Decimal(24))
    shown = api_as(world.carol).get("/api/v1/tenants/team-a/").json()
    assert (shown["max_run_time_hours"], shown["gpu_unit_cap"]) == (72, "24")
    listed = api_as(world.carol).get("/api/v1/tenants/").json()["results"]
    assert [(t["slug"], t["gpu_unit_cap"]) for t in listed] == [("team-a", "24")]
    # Another tenant's lead cannot ask for team-a.
    outsider = api_as(world.bob).post(URL, body(items=[], max_run_time_hours=5), format="json")
    assert outsider.status_code in (403, 404)
