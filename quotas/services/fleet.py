"""What the fleet (the ``gpu_agent`` app above) says a cluster's GPUs are partitioned into:
pushed here per node whenever it changes, so quota checks read quotas' own data
(``FleetNodeCapacity``) and never ask the fleet (R24)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from datetime import datetime

from django.db import transaction

from quotas.models import FleetNodeCapacity


@dataclass(frozen=True)
class FleetNodeReading:
    """One node's part of one MIG flavor's capacity (``FleetNodeCapacity``'s fields): the
    instances its agent reports on GPUs that keep their layout (``observed``) and those of
    open repartitions (``planned``), on the ``gpus`` the cluster confirms, with what is left
    out (GPUs beyond the cluster's count, instances beyond what the device plugin
    advertises). ``confirmed_until`` None: the cluster does not confirm the node (the counts
    are then 0); ``stale``: its agent stopped reporting."""

    flavor_id: int
    gpu_model: str
    mig_profile: str
    observed: int = 0
    planned: int = 0
    gpus: int = 0
    unconfirmed_gpus: int = 0
    unconfirmed_instances: int = 0
    confirmed_until: datetime | None = None
    stale: bool = False
    plan_link: str = ""


_FIELDS = [f.name for f in fields(FleetNodeReading) if f.name != "flavor_id"]


def _reading_of(row: FleetNodeCapacity) -> FleetNodeReading:
    return FleetNodeReading(row.flavor_id, **{name: getattr(row, name) for name in _FIELDS})


@transaction.atomic
def fleet_node_capacity_set(*, readings: Mapping[str, Sequence[FleetNodeReading]]) -> int:
    """Replace what the fleet says each node (by name, the keys of ``readings``) holds of the
    MIG flavors: a flavor missing from a node's readings (or a node mapped to none: removed,
    moved to a cluster without MIG flavors) loses that node's row. Rows that did not change
    are not written. Three queries at most, whatever the number of nodes; returns the rows
    written or removed."""
    if not readings:
        return 0
    existing = {
        (row.node, row.flavor_id): row
        for row in FleetNodeCapacity.objects.filter(node__in=list(readings))
    }
    wanted = {
        (node, reading.flavor_id): reading
        for node, node_readings in readings.items()
        for reading in node_readings
    }
    gone = [row.pk for key, row in existing.items() if key not in wanted]
    if gone:
        FleetNodeCapacity.objects.filter(pk__in=gone).delete()
    changed = [
        FleetNodeCapacity(
            node=node,
            flavor_id=reading.flavor_id,
            **{name: getattr(reading, name) for name in _FIELDS},
        )
        for (node, flavor_id), reading in wanted.items()
        if (node, flavor_id) not in existing
        or astuple(_reading_of(existing[(node, flavor_id)])) != astuple(reading)
    ]
    if changed:
        FleetNodeCapacity.objects.bulk_create(
            changed,
            update_conflicts=True,
            unique_fields=["flavor", "node"],
            update_fields=[*_FIELDS, "updated_at"],
        )
    return len(gone) + len(changed)
