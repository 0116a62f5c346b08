"""The fleet pushes MIG capacity into quotas; quotas never asks (hooks notify, never answer).

Each event that changes a node's part of a MIG flavor's capacity pushes it through
``quotas.services.fleet_node_capacity_set``: a report that writes (once it commits), a desired
layout set, an agent's result, a reading of the cluster's Nodes, a node gone stale, a node
moved to another cluster. Quotas reads what was pushed (``FleetNodeCapacity``) in one query,
and what it reads is what the fleet counts."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_agent.models import Gpu, LayoutState, Node
from gpu_agent.selectors import mig_capacity
from gpu_agent.services.layouts import agent_result, layout_set
from gpu_agent.services.nodes import node_update, nodes_mark_stale
from quotas.models import FleetNodeCapacity
from quotas.selectors import fleet_capacities
from quotas.services import FleetNodeReading, fleet_node_capacity_set
from tests.gpu_agent.test_confirmed_capacity import capacity, fleet, post_report, seven

__all__ = ["fleet"]  # the fixture, shared


def stored(world: Any) -> Any:
    return fleet_capacities(cluster=world.h100, flavors=[world.h100_mig]).get(world.h100_mig.pk)


def counted(world: Any) -> Any:
    return mig_capacity(cluster=world.h100, flavors=[world.h100_mig]).get(world.h100_mig.pk)


def test_a_report_pushes_what_the_fleet_counts(world, fleet):
    row = FleetNodeCapacity.objects.get(node="h100-mig-1", flavor=world.h100_mig)
    assert (row.observed, row.gpus, row.stale) == (14, 2, False)
    assert row.confirmed_until is not None
    assert stored(world) == counted(world) and capacity(world) == 14
    post_report(fleet["real"], "h100-mig-1", seven("h100-mig-1", 1))  # one GPU's instances gone
    assert stored(world) == counted(world) and capacity(world) == 7


def test_quotas_reads_the_pushed_rows_in_one_query(world, fleet, django_assert_num_queries):
    with django_assert_num_queries(1):
        got = stored(world)
    assert got is not None and got.total == 14


@pytest.mark.parametrize("outcome", [LayoutState.SUCCESS, LayoutState.FAILED])
def test_a_layout_set_and_its_result_are_pushed(world, fleet, outcome):
    gpu = Gpu.objects.filter(node__name="h100-mig-1").order_by("index").first()
    assert gpu is not None
    layout = layout_set(
        gpu=gpu, instances=[{"profile": "3g.40gb", "start": 0}], actor=world.admin, drain=True
    )
    assert stored(world) == counted(world) and (stored(world).planned, capacity(world)) == (0, 7)
    node = Node.objects.get(name="h100-mig-1")
    agent_result(node=node, uuid=gpu.uuid, generation=layout.generation, state=outcome)
    # Applied or failed, the GPU counts what its agent reports (still seven 1g.10gb here).
    assert stored(world) == counted(world) and capacity(world) == 14


def test_a_stale_node_and_a_moved_node_are_pushed(world, fleet):
    Node.objects.filter(name="h100-mig-1").update(last_report_at="2020-01-01T00:00:00Z")
    assert nodes_mark_stale() == ["h100-mig-1"]
    assert FleetNodeCapacity.objects.get(node="h100-mig-1").stale
    assert stored(world) == counted(world) and capacity(world) == 0
    node_update(node=Node.objects.get(name="h100-mig-1"), actor=world.admin, cluster=world.a100)
    assert not FleetNodeCapacity.objects.filter(flavor=world.h100_mig).exists()
    assert stored(world) is None and capacity(world) == 14  # the number entered


def test_rows_of_a_flavors_old_model_are_not_counted(world, fleet):
    world.h100_mig.gpu_model = "NVIDIA A100-SXM4-80GB"
    world.h100_mig.save(update_fields=["gpu_model"])
    assert stored(world) is None  # until the fleet pushes for the model it names now


def test_the_service_writes_only_what_changed_and_removes_what_is_gone(world, fleet):
    row = FleetNodeCapacity.objects.get(node="h100-mig-1")
    same = FleetNodeReading(
        row.flavor_id, row.gpu_model, row.mig_profile, observed=row.observed,
        planned=row.planned, gpus=row.gpus, confirmed_until=row.confirmed_until,
        plan_link=row.plan_link,
    )  # fmt: skip
    assert fleet_node_capacity_set(readings={"h100-mig-1": [same]}) == 0
    assert fleet_node_capacity_set(readings={"h100-mig-1": []}) == 1
    assert not FleetNodeCapacity.objects.exists()
