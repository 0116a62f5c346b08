"""The tenant-wide limits in the browser (Django's test client): the request form's two
fields, their errors next to them with nothing stored, the request's page, and the tenant's
page saying which idle and run-time rules apply and how its GPU units add up."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve
from tests.approvals.test_pages import NEW, a100_form, input_value, slot, stored
from tests.pages import logged_in, main

pytestmark = pytest.mark.django_db


def words(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_lead_asks_for_a_maximum_run_time_and_a_cap_and_the_page_shows_them(world):
    alice = logged_in(world.alice)
    response = alice.post(
        NEW,
        a100_form(max_run_time_hours="36", gpu_unit_cap="24", reason="stuck runs cost us"),
    )
    assert response.status_code == 302, words(main(response))
    change = QuotaChangeRequest.objects.get(requester=world.alice)
    assert (change.max_run_time_hours, change.gpu_unit_cap) == (36, Decimal(24))
    assert list(change.items.all()) == []  # the quota lines in force are left as they are
    page = words(main(alice.get(response["Location"])))
    assert "Maximum run time to 36 hours, for the whole team" in page
    assert "Cap over every cluster to 24 GPU units" in page

    quota_request_approve(request=change, approver=world.admin)
    tenant_page = words(main(alice.get("/tenants/team-a/")))
    assert "Maximum run time: 36 hours , this team's own." in tenant_page
    assert "is suspended after 1 day's notice to the leads (a lead can undo it)" in tenant_page
    assert "Limits add up to 22 GPU units : demo-a100 10, demo-h100 12." in tenant_page
    assert "Cap: 24 GPU units ." in tenant_page


def test_a_cap_below_the_sum_is_shown_next_to_its_field_and_nothing_is_stored(world):
    before = stored()
    response = logged_in(world.alice).post(
        NEW, a100_form(gpu_unit_cap="20", max_run_time_hours="-3", reason="tight")
    )
    assert response.status_code == 200
    assert stored() == before
    assert slot(response, "gpu_unit_cap") == (
        "team-a's GPU limits would add up to 22 GPU units over every cluster (demo-a100 10 GPU "
        "units, demo-h100 12 GPU units), above its cap of 20 GPU units (each limit counts "
        "times its GPU model's weight)"
    )
    assert "a whole number of hours" in slot(response, "max_run_time_hours")
    assert input_value(response, "gpu_unit_cap") == "20"


def test_without_own_limits_the_tenant_page_names_the_platform_rules(world):
    page = words(main(logged_in(world.carol).get("/tenants/team-a/")))
    assert "Idle and long-running workloads" in page
    assert (
        "A workload whose own GPUs stay at or under 1% utilisation, with no progress, for 3 days "
        "is suspended after 1 day's notice to the leads" in page
    )
    assert "Maximum run time: 7 days , the platform's. A workload running longer is reported" in (
        page
    )
    assert "No cap over every cluster." in page
    assert (
        "request a change"
        not in page.split("GPU units over every cluster")[1].split("Use from a pipeline")[0]
    )  # a member reads; only leads and admins are offered the form


def test_a_grace_of_minutes_reads_in_minutes_not_in_a_fraction_of_an_hour(world):
    from datetime import timedelta

    from alerts.choices import RuleKind
    from alerts.models import AlertRule

    AlertRule.objects.filter(kind=RuleKind.IDLE_WORKLOAD).update(grace=timedelta(minutes=10))
    AlertRule.objects.filter(kind=RuleKind.MAX_RUNTIME).update(
        act=True, grace=timedelta(hours=1), duration=timedelta(hours=36)
    )
    page = words(main(logged_in(world.carol).get("/tenants/team-a/")))
    assert "is suspended after 10 minutes' notice to the leads" in page
    assert "Maximum run time: 36 hours , the platform's." in page
    assert "is suspended after 1 hour's notice to the leads (a lead can undo it)" in page
    assert "0.166667" not in page and "hours's" not in page


def test_django_admin_shows_the_limits_but_does_not_edit_them(world, client):
    from tenants.models import Tenant

    Tenant.objects.filter(pk=world.team_a.pk).update(max_run_time_hours=36)
    client.force_login(world.admin)
    html = client.get(f"/admin/tenants/tenant/{world.team_a.pk}/change/").content.decode()
    assert "36" in html
    assert 'name="max_run_time_hours"' not in html and 'name="gpu_unit_cap"' not in html
