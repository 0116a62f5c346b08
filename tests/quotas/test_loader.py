"""The compiler's input says which tenants are blocked (quota use at 100%, R11): the loader
asks the hooks registered in ``quotas.loader.BLOCKED_TENANTS`` (the alerts app's), and a
blocked tenant's ClusterQueue holds new work."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from quotas import loader
from quotas.kube import compiler


@pytest.fixture
def only_hook() -> Iterator[list[object]]:
    saved = list(loader.BLOCKED_TENANTS)
    loader.BLOCKED_TENANTS.clear()
    yield loader.BLOCKED_TENANTS  # type: ignore[misc]
    loader.BLOCKED_TENANTS[:] = saved


def test_the_loader_marks_the_tenants_a_hook_names_blocked(world, only_hook):
    assert not any(t.blocked for t in loader.tenant_specs(world.a100))  # no hook: nobody
    asked = []

    def hook(*, cluster_id, tenant_ids):  # type: ignore[no-untyped-def]
        asked.append((cluster_id, sorted(tenant_ids)))
        return {world.team_b.pk} if cluster_id == world.a100.pk else set()

    only_hook.append(hook)
    specs = {t.slug: t for t in loader.tenant_specs(world.a100)}
    assert {slug for slug, t in specs.items() if t.blocked} == {"team-b"}
    assert asked == [(world.a100.pk, sorted([world.team_a.pk, world.team_b.pk, world.team_c.pk]))]
    assert not any(t.blocked for t in loader.tenant_specs(world.h100))
    queues = {
        o["metadata"]["name"]: o["spec"]["stopPolicy"]
        for o in compiler.compile_cluster(loader.cluster_spec(world.a100), list(specs.values()))
        if o["kind"] == "ClusterQueue"
    }
    assert queues == {"team-a": "None", "team-b": "Hold", "team-c": "None"}
