"""Department caps and fair sharing (R14) through the request flow: a team's limits and its
sibling teams' stay within the department's cap, a department's cap holds its teams'
guarantees and its own pool, a department's own request is checked against the cluster, and
the fair-share weight is a validated request field that reaches the compiler's input."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from approvals.services import quota_request_approve, request_items_parse
from core.errors import ValidationFailed
from quotas.choices import GPU_RESOURCE
from quotas.loader import tenant_specs
from quotas.models import QuotaSet
from quotas.services import QuotaItem, SchedulingQuotas, quota_set_write
from tenants.models import Tenant
from tests.approvals.conftest import database_state, file, gpu_quota, item


@pytest.fixture
def research(world: Any) -> Tenant:
    """Department "research" over team-b (4 guaranteed / 6 limit) and team-c (2 / 4) on
    demo-a100 (16 GPUs), with a pool of 2 GPUs and a cap of 10, its lead alice."""
    from approvals.services import tenant_onboard

    department = tenant_onboard(
        slug="research",
        display_name="Research",
        tier=world.small,
        cluster=world.h100,
        gpu_flavor=world.h100_gpu,
        actor=world.admin,
        leads=[world.alice],
    )
    Tenant.objects.filter(pk__in=[world.team_b.pk, world.team_c.pk]).update(parent=department)
    quota_set_write(
        tenant=department,
        cluster=world.a100,
        actor=world.admin,
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(2), Decimal(10))],
        scheduling=SchedulingQuotas(),
    )
    world.team_b.refresh_from_db()
    world.team_c.refresh_from_db()
    return department


def test_a_team_over_its_departments_cap_is_refused_naming_it(world, research):
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        file(world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=4, limit=7)])
    message = refused.value.fields["items[0].limit"][0]
    assert "department research" in message
    assert "caps its teams at 10" in message
    assert "add up to 11" in message  # 7 + team-c's 4
    assert database_state() == before


def test_a_team_within_its_departments_cap_is_approved(world, research, admin2):
    shrink = file(world, tenant=world.team_c, requester=admin2, items=[item(guaranteed=2, limit=3)])
    quota_request_approve(request=shrink, approver=world.admin)
    grow = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=4, limit=7)]
    )
    quota_request_approve(request=grow, approver=world.admin)
    assert gpu_quota(world, world.team_b) == (4, 7)


def test_a_department_cap_below_its_teams_guarantees_is_refused_with_the_numbers(world, research):
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        file(world, tenant=research, items=[item(guaranteed=2, limit=7)])
    message = refused.value.fields["items[0].limit"][0]
    assert "department cap of 7" in message
    assert "teams' guarantees of 6" in message
    assert "own pool of 2" in message
    assert "make 8" in message
    assert database_state() == before


def test_a_departments_own_pool_is_checked_against_the_cluster(world, research):
    # The cluster's 16 GPUs: teams guarantee 6 + 4 + 2; a pool of 5 would not fit.
    with pytest.raises(ValidationFailed) as refused:
        file(world, tenant=research, items=[item(guaranteed=5, limit=10)])
    assert "does not fit" in refused.value.fields["items[0].guaranteed"][0]


def test_fair_share_weight_is_validated_and_reaches_the_compiler(world, research):
    from approvals.services import quota_request_create

    def ask(weight: Any) -> Any:
        return quota_request_create(
            tenant=world.team_b,
            cluster=world.a100,
            requester=world.bob,
            reason="a larger share of idle GPUs",
            items=request_items_parse(cluster=world.a100, raw_items=[]),
            scheduling={"fair_share_weight": weight},
            submit=True,
        )

    before = database_state()
    for bad in (0, 1001):
        with pytest.raises(ValidationFailed) as refused:
            ask(bad)
        assert "from 1 to 1000" in refused.value.fields["fair_share_weight"][0]
    assert database_state() == before
    quota_request_approve(request=ask(3), approver=world.admin)
    assert QuotaSet.objects.get(tenant=world.team_b, cluster=world.a100).fair_share_weight == 3
    specs = {spec.slug: spec for spec in tenant_specs(world.a100)}
    assert specs["team-b"].fair_share_weight == 3
    assert specs["research"].department and not specs["team-b"].department
    assert specs["team-b"].parent == "research"


def test_the_tenant_pages_show_the_department_cap_and_the_weight(world, research):
    import re

    from tests.pages import logged_in, main

    QuotaSet.objects.filter(tenant=world.team_b, cluster=world.a100).update(fair_share_weight=3)
    department_page = re.sub(r"\s+", " ", main(logged_in(world.alice).get("/tenants/research/")))
    assert "Research is a department over 2 teams: team-b, team-c." in department_page
    row = re.search(r'<tr data-cluster="demo-a100">(.*?)</tr>', department_page).group(1)
    # cap, pool, the teams' limits (6 + 4), the teams' guarantees (4 + 2)
    assert re.findall(r'<td class="num">([^<]*)</td>', row) == ["10", "2", "10", "6"]
    team_page = re.sub(r"\s+", " ", main(logged_in(world.bob).get("/tenants/team-b/")))
    assert "belongs to the department research" in team_page
    weights = re.findall(
        r'data-cluster="([^"]+)".*?data-field="fair-share-weight">([^<]*)<', team_page
    )
    assert ("demo-a100", "3") in weights
    assert ("demo-h100", "1 (default)") in weights


def test_the_api_refuses_a_team_over_the_cap_and_takes_a_weight(world, research, api_as):
    from tests.approvals.conftest import URL, body

    client = api_as(world.bob)
    refused = client.post(
        URL, body(tenant="team-b", items=[item(guaranteed=4, limit=7)]), format="json"
    )
    assert refused.status_code == 400, refused.content
    assert "department research" in str(refused.json())
    bad = client.post(URL, body(tenant="team-b", items=[], fair_share_weight=0), format="json")
    assert bad.status_code == 400, bad.content
    assert "fair_share_weight" in str(bad.json())
    good = client.post(URL, body(tenant="team-b", items=[], fair_share_weight=2), format="json")
    assert good.status_code == 201, good.content
    assert good.json()["fair_share_weight"] == 2
    QuotaSet.objects.filter(tenant=world.team_b, cluster=world.a100).update(fair_share_weight=5)
    listed = client.get("/api/v1/tenants/team-b/quotas/").json()["results"]
    assert {q["cluster"]: q["fair_share_weight"] for q in listed} == {
        "demo-a100": 5,
        "demo-h100": None,
    }


def test_the_department_cohort_and_the_weight_reach_the_cluster(world, research, standin):
    from quotas import sync
    from quotas.models import SyncOutbox
    from tests.standin import kubectl_json

    request = file(
        world, tenant=world.team_b, requester=world.bob, items=[item(guaranteed=3, limit=6)]
    )
    quota_request_approve(request=request, approver=world.admin)
    QuotaSet.objects.filter(tenant=world.team_b, cluster=world.a100).update(fair_share_weight=4)
    row = SyncOutbox.objects.filter(tenant=world.team_b, cluster=world.a100).latest("pk")
    outcome = sync.outbox_deliver(outbox_id=row.pk)
    assert outcome is not None and outcome.ok, outcome

    cohort = kubectl_json(standin, "get", "cohorts.kueue.x-k8s.io", "research")
    assert cohort["spec"]["parentName"] == "portal-root"
    (group,) = cohort["spec"]["resourceGroups"]
    gpu = next(r for f in group["flavors"] for r in f["resources"] if r["name"] == "nvidia.com/gpu")
    # Pool 2, cap 10: 10 - 2 - (team-b's 3 + team-c's 2) = 3 more from the cohorts above.
    assert (str(gpu["nominalQuota"]), str(gpu["borrowingLimit"])) == ("2", "3")
    queue = kubectl_json(standin, "get", "clusterqueues.kueue.x-k8s.io", "team-b")
    assert queue["spec"]["cohortName"] == "research"
    assert str(queue["spec"]["fairSharing"]["weight"]) == "4"


def test_the_request_form_takes_a_weight_and_refuses_one_out_of_range(world):
    from approvals.models import QuotaChangeRequest
    from tests.approvals.test_pages import NEW, a100_form, slot

    client = logged_in_as(world.alice)
    refused = client.post(NEW, a100_form(reason="share", fair_share_weight="0"))
    assert refused.status_code == 200
    assert "from 1 to 1000" in slot(refused, "fair_share_weight")
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()
    taken = client.post(NEW, a100_form(reason="share", fair_share_weight="2"))
    assert taken.status_code == 302
    assert QuotaChangeRequest.objects.get(requester=world.alice).fair_share_weight == 2


def logged_in_as(user: Any) -> Any:
    from tests.pages import logged_in

    return logged_in(user)
