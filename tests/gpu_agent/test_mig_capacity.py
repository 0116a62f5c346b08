"""MIG capacity from the fleet (R24): a MIG flavor's capacity is what the cluster's GPUs are
partitioned into (instances the agents report, and those of repartitions under way), not the
number typed in Django admin. The selector, the capacity every rule reads, the request and
approval refusals (service and API), the planner link they offer, and the cluster page.

The fleet pushes each node's part into quotas (``gpu_agent.services.capacity``: on reports,
layouts, readings of the cluster's Nodes); these tests build the fleet's rows directly, so
they push as those events would (``cluster_capacity_push``) before quotas reads."""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from approvals.services import quota_request_approve
from core.errors import Conflict, ValidationFailed
from gpu_agent.models import Gpu, LayoutState, MigInstance, MigLayout, Node
from gpu_agent.selectors import mig_capacity
from gpu_agent.services.capacity import cluster_capacity_push
from quotas.choices import mig_resource
from quotas.models import FlavorResource, FleetNodeCapacity
from quotas.selectors import cluster_allocations, flavor_capacities
from tests.approvals.conftest import database_state, file
from tests.factories import ClusterFactory, UserFactory, mig_flavor

H100 = "NVIDIA H100 80GB HBM3"
MIG_1G = mig_resource("1g.10gb")
_gpu_seq = iter(range(10_000))


def a_gpu(node: Node, name: str = H100, *, profiles: list[str] = ()) -> Gpu:  # type: ignore[assignment]
    """A GPU of ``node`` whose agent reports instances of ``profiles``, side by side."""
    n = next(_gpu_seq)
    now = timezone.now()
    gpu = Gpu.objects.create(
        node=node,
        uuid=f"GPU-{n:08d}-0000-0000-0000-000000000000",
        index=n % 8,
        name=name,
        memory_total_mib=81559,
        mig_mode_current=bool(profiles),
        last_seen_at=now,
    )
    for gi, profile in enumerate(profiles, start=1):
        MigInstance.objects.create(
            gpu=gpu, gi_id=gi, profile=profile, start=gi - 1, size=1, observed_at=now
        )
    return gpu


def a_layout(gpu: Gpu, profiles: list[str], *, state: str, generation: int = 1) -> MigLayout:
    return MigLayout.objects.create(
        gpu=gpu,
        generation=generation,
        instances=[{"profile": p, "start": i} for i, p in enumerate(profiles)],
        state=state,
    )


def a_node(cluster: Any, name: str, *, confirmed: bool = True) -> Node:
    """A reporting node; ``confirmed``: its cluster's last reading found its Node object, with
    room for 8 GPUs and every instance its agent could report (what bounds capacity is
    ``test_confirmed_capacity``'s)."""
    now = timezone.now()
    return Node.objects.create(
        name=name,
        cluster=cluster,
        last_report_at=now,
        cluster_seen_at=now if confirmed else None,
        cluster_gpus=8 if confirmed else None,
        cluster_mig={"1g.10gb": 56, "3g.40gb": 16} if confirmed else {},
    )


@pytest.fixture
def fleet(world: Any) -> dict[str, Any]:
    """demo-h100's fleet: 5 instances of 1g.10gb observed on two GPUs, a third GPU being
    repartitioned to 2 of them (its 3 observed ones do not count: the layout replaces them),
    a fourth whose repartition failed (its 1 observed instance counts). 8 in all, typed 14."""
    world.h100.elastic_cap_fraction = Decimal("1")
    world.h100.save(update_fields=["elastic_cap_fraction"])
    node = a_node(world.h100, "h100-mig-1")
    a_gpu(node, profiles=["1g.10gb"] * 3 + ["3g.40gb"])
    a_gpu(node, profiles=["1g.10gb"] * 2)
    moving = a_gpu(node, profiles=["1g.10gb"] * 3)
    a_layout(moving, ["1g.10gb", "1g.10gb", "3g.40gb"], state=LayoutState.PENDING)
    failed = a_gpu(a_node(world.h100, "h100-mig-2"), profiles=["1g.10gb"])
    a_layout(failed, ["1g.10gb"] * 7, state=LayoutState.FAILED)
    # Not demo-h100's, or not its model: never counted.
    a_gpu(a_node(world.a100, "a100-node-1"), profiles=["1g.10gb"] * 7)
    a_gpu(node, "NVIDIA A100-SXM4-80GB", profiles=["1g.10gb"] * 7)
    cluster_capacity_push(cluster=world.h100)  # what the agents' reports would push
    cluster_capacity_push(cluster=world.a100)
    return {"node": node, "moving": moving}


# --- the selector ---------------------------------------------------------------------------


def test_the_fleet_counts_observed_instances_and_open_repartitions(world, fleet):
    found = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])
    got = found[world.h100_mig.pk]
    assert (got.observed, got.planned, got.gpus, got.total) == (6, 2, 4, 8)


def test_an_applied_layout_counts_what_the_agent_reports(world, fleet):
    MigLayout.objects.filter(gpu=fleet["moving"]).update(state=LayoutState.SUCCESS)
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.observed, got.planned, got.total) == (9, 0, 9)


def test_a_newer_open_layout_wins_over_an_older_applied_one(world, fleet):
    a_layout(fleet["moving"], ["3g.40gb", "3g.40gb"], state=LayoutState.APPLYING, generation=2)
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.observed, got.planned, got.total) == (6, 0, 6)


def test_a_cluster_without_gpus_of_the_model_keeps_the_entered_number(world):
    assert mig_capacity(cluster=world.h100, flavors=[world.h100_mig]) == {}
    a_gpu(a_node(world.h100, "a100-on-h100"), "NVIDIA A100-SXM4-80GB", profiles=["1g.10gb"])
    assert mig_capacity(cluster=world.h100, flavors=[world.h100_mig]) == {}
    assert flavor_capacities(cluster=world.h100)[(world.h100_mig.pk, MIG_1G)].amount == 14


def test_gpus_of_the_model_without_mig_give_a_capacity_of_zero(world):
    a_gpu(a_node(world.h100, "h100-node-1"))
    got = mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    assert (got.total, got.gpus) == (0, 1)


def test_the_pushed_capacity_makes_every_rule_read_the_fleet(world, fleet):
    # What quotas stored is what the fleet counts (pushed, not asked for).
    assert FleetNodeCapacity.objects.filter(flavor=world.h100_mig).count() == 2  # two nodes
    capacities = flavor_capacities(cluster=world.h100)
    mig = capacities[(world.h100_mig.pk, MIG_1G)]
    assert (
        mig.fleet == mig_capacity(cluster=world.h100, flavors=[world.h100_mig])[world.h100_mig.pk]
    )
    assert mig.amount == 8 and mig.fleet is not None
    assert FlavorResource.objects.get(flavor=world.h100_mig).capacity == 14  # typed, unused
    # Whole GPUs keep the number entered.
    whole = [c for (fid, _r), c in capacities.items() if fid == world.h100_gpu.pk]
    assert whole and all(c.fleet is None for c in whole)
    rows = {r.resource: r for r in cluster_allocations(cluster=world.h100) if r.fleet}
    assert rows[MIG_1G].capacity == 8 and rows[MIG_1G].free == 8


# --- requests and approvals -------------------------------------------------------------------


def mig_item(guaranteed: int, limit: int) -> dict[str, Any]:
    return {
        "flavor": "h100-mig-1g-10gb",
        "resource": MIG_1G,
        "guaranteed": guaranteed,
        "limit": limit,
    }


def test_a_request_beyond_the_instances_is_refused_naming_profile_and_counts(world, fleet):
    before = database_state()
    with pytest.raises(ValidationFailed) as caught:
        file(world, cluster=world.h100, items=[mig_item(2, 9)])
    message = caught.value.fields["items[0].limit"][0]
    assert message.startswith("1g.10gb on demo-h100: 9 asked, 8 instances exist or are planned")
    assert "(2 of them in repartitions under way)" in message
    assert database_state() == before


@pytest.fixture
def second_admin(world: Any) -> Any:
    return UserFactory(username="admin2", is_platform_admin=True, is_staff=True)


def approve(request: Any, world: Any, second_admin: Any) -> Any:
    """Every approval the request needs (more than a quarter of the capacity needs two)."""
    for approver in (world.admin, second_admin)[: request.required_approvals]:
        request = quota_request_approve(request=request, approver=approver)
    return request


def test_guarantees_beyond_the_instances_are_refused_with_the_sum(world, fleet, second_admin):
    approved = approve(file(world, cluster=world.h100, items=[mig_item(5, 8)]), world, second_admin)
    assert approved.status == "approved"
    before = database_state()
    with pytest.raises(ValidationFailed) as caught:
        file(
            world, cluster=world.h100, items=[mig_item(4, 4)], tenant=world.team_b,
            requester=world.bob,
        )  # fmt: skip
    message = caught.value.fields["items[0].guaranteed"][0]
    assert message.startswith("1g.10gb on demo-h100: 9 asked, 8 instances exist or are planned")
    assert "guaranteed 4 here and 5 to other tenants" in message
    assert database_state() == before
    # What is left fits.
    assert file(
        world, cluster=world.h100, items=[mig_item(3, 3)], tenant=world.team_b,
        requester=world.bob,
    )  # fmt: skip


def test_an_approval_is_refused_when_the_repartition_it_waited_on_failed(
    world, fleet, second_admin
):
    request = file(world, cluster=world.h100, items=[mig_item(2, 8)])
    # The repartition fails (its GPU keeps its 3 instances: 9 in all), then the GPU goes away.
    MigLayout.objects.filter(gpu=fleet["moving"]).update(state=LayoutState.FAILED)
    Gpu.objects.filter(pk=fleet["moving"].pk).delete()
    cluster_capacity_push(cluster=world.h100)  # as the result and the next report would
    before = database_state()
    with pytest.raises(Conflict) as caught:
        approve(request, world, second_admin)
    message = caught.value.fields["items[0].limit"][0]
    assert message.startswith("1g.10gb on demo-h100: 8 asked, 6 instances exist or are planned")
    assert database_state()["quotas"] == before["quotas"]
    request.refresh_from_db()
    assert request.status == "pending"


def test_the_refusal_offers_the_planner_with_the_demand_filled_in(world, fleet):
    with pytest.raises(ValidationFailed) as caught:
        file(world, cluster=world.h100, items=[mig_item(2, 9)])
    message = caught.value.fields["items[0].limit"][0]
    link = message.rsplit(": ", 1)[1]
    parts = urlsplit(link)
    assert parts.path == "/fleet/plan/"
    assert parse_qs(parts.query) == {
        "source": ["manual"],
        "cluster": ["demo-h100"],
        "demand-0-profile": ["1g.10gb"],
        "demand-0-count": ["9"],
        "demand-0-model": [H100],
    }
    client = Client()
    client.force_login(world.admin)
    page = client.get(link)
    assert page.status_code == 200
    assert page.context["proposal"].demand[0].count == 9


def test_the_api_answers_400_naming_the_field_and_stores_nothing(world, fleet, api_as):
    before = database_state()
    answer = api_as(world.alice).post(
        "/api/v1/quota-requests/",
        {"tenant": "team-a", "cluster": "demo-h100", "reason": "more", "items": [mig_item(1, 12)]},
        format="json",
    )
    assert answer.status_code == 400, answer.content
    text = str(answer.json())
    assert "items[0].limit" in text
    assert "1g.10gb on demo-h100: 12 asked, 8 instances exist or are planned" in text
    assert database_state() == before


def test_within_the_instances_a_request_is_approved(world, fleet, second_admin):
    request = approve(file(world, cluster=world.h100, items=[mig_item(3, 8)]), world, second_admin)
    assert request.status == "approved"


# --- the cluster page -------------------------------------------------------------------------


def capacity_cells(html: str, flavor: str) -> str:
    start = html.index(f'data-flavor="{flavor}"')
    return html[start : html.index("</tr>", start)]


def test_the_cluster_page_shows_the_capacity_the_fleet_gives(world, fleet):
    client = Client()
    client.force_login(world.alice)
    html = client.get("/clusters/demo-h100/").content.decode()
    row = capacity_cells(html, "h100-mig-1g-10gb")
    assert ">8<" in row and ">14<" not in row
    assert "the fleet: 6 instances observed, 2 planned in repartitions under way on 4 GPUs" in row
    assert "/fleet/plan/" not in row  # the planner is for platform admins
    assert "entered by an admin" in capacity_cells(html, "h100-80gb")
    client.force_login(world.admin)
    row = capacity_cells(client.get("/clusters/demo-h100/").content.decode(), "h100-mig-1g-10gb")
    assert "plan a repartition" in row and "demand-0-count=1" in row


def test_the_cluster_page_says_when_no_node_reports_the_model(world):
    client = Client()
    client.force_login(world.alice)
    row = capacity_cells(client.get("/clusters/demo-h100/").content.decode(), "h100-mig-1g-10gb")
    assert ">14<" in row
    assert "entered by an admin (no node of this GPU model reports yet)" in row


def test_one_gpu_and_one_instance_read_in_the_singular(world):
    tiny = ClusterFactory(name="tiny")
    flavor = mig_flavor(tiny, "3g.40gb", count=4)
    a_gpu(a_node(tiny, "tiny-1"), profiles=["3g.40gb"])
    cluster_capacity_push(cluster=tiny)
    client = Client()
    client.force_login(world.alice)
    row = capacity_cells(client.get("/clusters/tiny/").content.decode(), flavor.name)
    assert "the fleet: 1 instance observed on 1 GPU" in row
    assert "instances" not in row and "GPUs" not in row


def test_the_api_gives_the_capacity_and_where_it_comes_from(world, fleet, api_as):
    answer = api_as(world.alice).get("/api/v1/clusters/demo-h100/")
    assert answer.status_code == 200
    rows = {(r["flavor"], r["resource"]): r for r in answer.json()["allocations"]}
    mig = rows[("h100-mig-1g-10gb", MIG_1G)]
    assert mig["capacity"] == "8"
    assert mig["fleet"] == {
        "observed": 6,
        "planned": 2,
        "gpus": 4,
        "unconfirmed_nodes": 0,
        "stale_nodes": 0,
    }
    assert mig["not_counted"] == ""
    assert rows[("h100-80gb", "nvidia.com/gpu")]["fleet"] is None


def test_the_usage_dashboard_shows_the_capacity_the_approval_check_counts(world, fleet):
    from dashboards.selectors import admin_dashboard, period_resolve

    board = admin_dashboard(period=period_resolve(name="24h"), cluster=world.h100.name)
    shown = {f.flavor.pk: f.capacity for c in board.clusters for f in c.flavors}
    checked = flavor_capacities(cluster=world.h100)[(world.h100_mig.pk, MIG_1G)].amount
    assert shown[world.h100_mig.pk] == float(checked) == 8  # not the 14 typed in admin
    # Whole GPUs keep the number an admin entered.
    assert shown[world.h100_gpu.pk] == 16
