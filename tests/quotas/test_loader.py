"""The compiler's input says which tenants are blocked (quota use at 100%, R11): the hold is
quotas' own data (``QuotaHold``, written by ``quotas.services.quota_set_hold``, which the
alerts app calls), the loader reads it without asking any app above, and a blocked tenant's
ClusterQueue holds new work."""

from __future__ import annotations

from quotas import loader
from quotas.kube import compiler
from quotas.models import QuotaHold
from quotas.services import quota_set_hold


def stop_policies(world, specs):  # type: ignore[no-untyped-def]
    return {
        o["metadata"]["name"]: o["spec"]["stopPolicy"]
        for o in compiler.compile_cluster(loader.cluster_spec(world.a100), specs)
        if o["kind"] == "ClusterQueue"
    }


def test_the_loader_marks_the_tenants_a_hold_names_blocked(world, django_assert_num_queries):
    assert not any(t.blocked for t in loader.tenant_specs(world.a100))  # no hold: nobody
    quota_set_hold(tenant_id=world.team_b.pk, cluster_id=world.a100.pk, held=True, source="test")
    with django_assert_num_queries(1):  # one query, whatever the number of tenants
        assert loader.blocked_tenant_ids(world.a100, [world.team_a.pk, world.team_b.pk]) == {
            world.team_b.pk
        }
    specs = {t.slug: t for t in loader.tenant_specs(world.a100)}
    assert {slug for slug, t in specs.items() if t.blocked} == {"team-b"}
    assert not any(t.blocked for t in loader.tenant_specs(world.h100))
    queues = stop_policies(world, list(specs.values()))
    assert queues == {"team-a": "None", "team-b": "Hold", "team-c": "None"}


def test_holds_of_two_sources_are_lifted_independently(world):
    for source in ("alert:1", "alert:2"):
        quota_set_hold(
            tenant_id=world.team_b.pk, cluster_id=world.a100.pk, held=True, source=source
        )
    quota_set_hold(
        tenant_id=world.team_b.pk, cluster_id=world.a100.pk, held=False, source="alert:1"
    )
    assert [t.slug for t in loader.tenant_specs(world.a100) if t.blocked] == ["team-b"]
    quota_set_hold(
        tenant_id=world.team_b.pk, cluster_id=world.a100.pk, held=False, source="alert:2"
    )
    assert not any(t.blocked for t in loader.tenant_specs(world.a100))
    assert not QuotaHold.objects.exists()


def test_a_hold_is_kept_for_a_tenant_without_quotas_yet(world):
    """No quota set on the cluster: nothing to push yet, but the hold is there once it has."""
    from tests.factories import ClusterFactory

    empty = ClusterFactory(name="empty")
    got = quota_set_hold(tenant_id=world.team_a.pk, cluster_id=empty.pk, held=True, source="x")
    assert got is None
    assert loader.blocked_tenant_ids(empty, [world.team_a.pk]) == {world.team_a.pk}
