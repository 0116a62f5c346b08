"""Quota services: every business rule refuses with the item, the rule and the numbers, and
writes nothing; the database holds the invariants even when the services are bypassed."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from core.errors import ValidationFailed
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, FlavorKind, mig_resource
from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor
from quotas.selectors import cluster_allocations
from quotas.services import (
    QuotaItem,
    SchedulingQuotas,
    capacity_lines_check,
    elastic_cap,
    quota_item_parse,
    quota_items_check,
    quota_set_create_from_tier,
    quota_set_write,
)
from tenants.models import AuditEvent
from tests.factories import GI, ClusterFactory, TenantFactory, gpu_flavor

NO_SCHEDULING = SchedulingQuotas()


def gpus(flavor: ResourceFlavor, guaranteed: int, limit: int, **kwargs: Decimal) -> QuotaItem:
    return QuotaItem(flavor, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit), **kwargs)


def write(world, items: list[QuotaItem], *, tenant=None, cluster=None):  # type: ignore[no-untyped-def]
    return quota_set_write(
        tenant=tenant or world.team_a,
        cluster=cluster or world.a100,
        items=items,
        scheduling=NO_SCHEDULING,
        actor=world.admin,
    )


def state(world) -> tuple:  # type: ignore[no-untyped-def]
    """Everything a refused write must leave alone."""
    return (
        list(QuotaSet.objects.order_by("pk").values_list("pk", "generation", "max_running_jobs")),
        list(
            Quota.objects.order_by("pk").values_list(
                "quota_set_id", "flavor_id", "resource", "guaranteed", "limit", "lending_limit"
            )
        ),
        AuditEvent.objects.count(),
    )


def refused(world, items: list[QuotaItem], **kwargs: object) -> ValidationFailed:  # type: ignore[no-untyped-def]
    before = state(world)
    with pytest.raises(ValidationFailed) as caught:
        write(world, items, **kwargs)
    assert state(world) == before, "a refused write changed the database"
    return caught.value


# --- generation and audit ------------------------------------------------------------------


def test_every_write_increases_the_generation_by_exactly_one(world):
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    assert quota_set.generation == 1
    for expected in (2, 3, 4):
        quota_set = write(world, [gpus(world.a100_gpu, 6, 10)])  # the same numbers: still a write
        assert quota_set.generation == expected
        assert QuotaSet.objects.get(pk=quota_set.pk).generation == expected


def test_a_first_write_creates_the_set_at_generation_one(world):
    tenant = TenantFactory(slug="fresh")
    quota_set = write(world, [gpus(world.a100_gpu, 1, 2)], tenant=tenant)
    assert quota_set.generation == 1
    assert quota_set.quotas.count() == 1


def test_a_write_replaces_the_items_and_the_scheduling_quotas(world):
    quota_set = quota_set_write(
        tenant=world.team_a,
        cluster=world.a100,
        items=[gpus(world.a100_gpu, 2, 3)],
        scheduling=SchedulingQuotas(max_running_jobs=2, storage_bytes=Decimal(100 * GI)),
        actor=world.admin,
    )
    assert list(quota_set.quotas.values_list("resource", "guaranteed", "limit")) == [
        (GPU_RESOURCE, Decimal(2), Decimal(3))
    ]
    quota_set.refresh_from_db()
    assert quota_set.max_running_jobs == 2
    assert quota_set.max_queued_jobs is None
    assert quota_set.storage_bytes == Decimal(100 * GI)


def test_a_write_is_audited_with_before_and_after(world):
    write(world, [gpus(world.a100_gpu, 5, 8)])
    event = AuditEvent.objects.filter(action="quota_set.written", tenant=world.team_a).first()
    assert event.actor == world.admin
    assert event.object_type == "QuotaSet"
    assert event.before["generation"] == 1
    assert event.after["generation"] == 2
    before_gpu = [i for i in event.before["items"] if i["resource"] == GPU_RESOURCE]
    assert before_gpu == [
        {
            "flavor": "a100-80gb",
            "resource": GPU_RESOURCE,
            "guaranteed": "6",
            "limit": "10",
            "lending_limit": None,
        }
    ]
    assert event.after["items"] == [
        {
            "flavor": "a100-80gb",
            "resource": GPU_RESOURCE,
            "guaranteed": "5",
            "limit": "8",
            "lending_limit": None,
        }
    ]


# --- business rules ------------------------------------------------------------------------


def test_guaranteed_above_limit_is_refused_naming_the_item(world):
    error = refused(
        world,
        [
            QuotaItem(world.a100_gpu, CPU_RESOURCE, Decimal(8), Decimal(16)),
            gpus(world.a100_gpu, 6, 4),
        ],
    )
    assert error.fields == {
        "items[1].guaranteed": [
            "nvidia.com/gpu on a100-80gb: guaranteed 6 is above the limit 4",
        ]
    }
    assert error.message == "nvidia.com/gpu on a100-80gb: guaranteed 6 is above the limit 4"


def test_memory_amounts_are_named_as_kubernetes_quantities(world):
    error = refused(
        world, [QuotaItem(world.a100_gpu, MEMORY_RESOURCE, Decimal(128 * GI), Decimal(64 * GI))]
    )
    assert error.fields["items[0].guaranteed"] == [
        "memory on a100-80gb: guaranteed 128Gi is above the limit 64Gi"
    ]


def test_a_lending_limit_above_guaranteed_is_refused(world):
    error = refused(world, [gpus(world.a100_gpu, 4, 6, lending_limit=Decimal(5))])
    assert error.fields["items[0].lending_limit"] == [
        "nvidia.com/gpu on a100-80gb: lending limit 5 is above guaranteed 4"
    ]


def test_guarantees_beyond_capacity_are_refused(world):
    # team-b and team-c hold 4 + 2 of the 16 A100s, so team-a may hold at most 10
    write(world, [gpus(world.a100_gpu, 10, 10)])
    error = refused(world, [gpus(world.a100_gpu, 11, 11)])
    assert error.fields["items[0].guaranteed"] == [
        "nvidia.com/gpu on a100-80gb: guaranteed 11 does not fit: other tenants hold 6 of 16 "
        "NVIDIA A100-SXM4-80GB on demo-a100 and the cluster does not allow overcommitting "
        "guarantees"
    ]


def test_guarantees_may_overcommit_where_the_cluster_allows_it(world):
    Cluster.objects.filter(pk=world.a100.pk).update(
        allow_guarantee_overcommit=True, elastic_cap_fraction=Decimal(1)
    )
    world.a100.refresh_from_db()
    quota_set = write(world, [gpus(world.a100_gpu, 16, 16)])
    assert quota_set.quotas.get(resource=GPU_RESOURCE).guaranteed == 16


def test_the_elastic_cap_message_names_the_rule_and_the_numbers(world):
    """R19: the seed's own example (team A at 6/10 of 16 A100s) breaks a 50% cap."""
    Cluster.objects.filter(pk=world.a100.pk).update(elastic_cap_fraction=Decimal("0.5"))
    world.a100.refresh_from_db()
    error = refused(world, [gpus(world.a100_gpu, 6, 10)])
    assert error.fields == {
        "items[0].limit": [
            "limit 10 exceeds the elastic cap of 8 (50% of 16 NVIDIA A100-SXM4-80GB on demo-a100)"
        ]
    }
    assert write(world, [gpus(world.a100_gpu, 6, 8)]).generation == 2


def test_the_elastic_cap_of_cpu_and_memory_names_the_resource_not_the_gpu(world):
    Cluster.objects.filter(pk=world.a100.pk).update(elastic_cap_fraction=Decimal("0.5"))
    world.a100.refresh_from_db()
    error = refused(
        world,
        [
            QuotaItem(world.a100_gpu, CPU_RESOURCE, Decimal(8), Decimal(200)),
            QuotaItem(world.a100_gpu, MEMORY_RESOURCE, Decimal(GI), Decimal(1536 * GI)),
        ],
    )
    assert error.fields == {
        "items[0].limit": [
            "limit 200 exceeds the elastic cap of 128 (50% of 256 cpu in a100-80gb on demo-a100)"
        ],
        "items[1].limit": [
            "limit 1536Gi exceeds the elastic cap of 1Ti (50% of 2Ti memory in a100-80gb on "
            "demo-a100)"
        ],
    }


def test_elastic_cap_is_whole_gpus_but_exact_for_cpu():
    assert elastic_cap(capacity=Decimal(15), fraction=Decimal("0.5"), resource=GPU_RESOURCE) == 7
    assert elastic_cap(
        capacity=Decimal(15), fraction=Decimal("0.5"), resource=CPU_RESOURCE
    ) == Decimal("7.5")
    assert (
        elastic_cap(capacity=Decimal(7), fraction=Decimal("0.5"), resource=mig_resource("1g.10gb"))
        == 3
    )


def test_every_broken_rule_is_reported_at_once(world):
    Cluster.objects.filter(pk=world.a100.pk).update(elastic_cap_fraction=Decimal("0.5"))
    world.a100.refresh_from_db()
    error = refused(
        world,
        [
            gpus(world.a100_gpu, 12, 9),
            QuotaItem(world.a100_gpu, CPU_RESOURCE, Decimal(1), Decimal(1)),
        ],
        cluster=world.a100,
    )
    assert len(error.fields["items[0].guaranteed"]) == 2  # above the limit, beyond capacity
    assert "items[0].limit" in error.fields  # above the cap
    assert not any(name.startswith("items[1]") for name in error.fields)


def test_a_flavor_from_another_cluster_is_refused(world):
    error = refused(world, [gpus(world.h100_gpu, 1, 2)])
    assert error.fields == {
        "items[0].flavor": ["flavor 'h100-80gb' belongs to cluster 'demo-h100', not 'demo-a100'"]
    }


def test_a_resource_the_flavor_does_not_cover_is_refused(world):
    error = refused(
        world, [QuotaItem(world.a100_gpu, mig_resource("1g.10gb"), Decimal(1), Decimal(1))]
    )
    assert error.fields == {
        "items[0].resource": ["flavor 'a100-80gb' does not cover 'nvidia.com/mig-1g.10gb'"]
    }


def test_an_item_listed_twice_is_refused(world):
    error = refused(world, [gpus(world.a100_gpu, 1, 2), gpus(world.a100_gpu, 2, 3)])
    assert error.fields == {"items[1].resource": ["nvidia.com/gpu on a100-80gb is listed twice"]}


def test_a_refused_first_write_leaves_no_empty_quota_set(world):
    tenant = TenantFactory(slug="fresh")
    refused(world, [gpus(world.a100_gpu, 3, 2)], tenant=tenant)
    assert not QuotaSet.objects.filter(tenant=tenant).exists()


# --- parsing amounts -----------------------------------------------------------------------


def test_quota_item_parse_reads_kubernetes_quantities(world):
    item = quota_item_parse(
        flavor=world.a100_gpu, resource=MEMORY_RESOURCE, guaranteed="64Gi", limit="0.125Ti"
    )
    assert (item.guaranteed, item.limit, item.lending_limit) == (64 * GI, 128 * GI, None)
    cpu = quota_item_parse(flavor=world.a100_gpu, resource=CPU_RESOURCE, guaranteed="500m", limit=2)
    assert (cpu.guaranteed, cpu.limit) == (Decimal("0.5"), Decimal(2))


BAD_AMOUNTS = [
    (MEMORY_RESOURCE, "limit", "12GB", "unknown suffix 'GB'"),
    (MEMORY_RESOURCE, "limit", "1.5.3", "more than one decimal point"),
    (MEMORY_RESOURCE, "guaranteed", "-1", "negative"),
    (GPU_RESOURCE, "guaranteed", "-1", "negative"),
    (GPU_RESOURCE, "limit", "lots", "must start with a number"),
    (GPU_RESOURCE, "limit", "1.5", "whole number"),
    (GPU_RESOURCE, "lending_limit", "", "empty"),
    (CPU_RESOURCE, "limit", 1.5, "floats are inexact"),
    (CPU_RESOURCE, "limit", "0.0001", "multiple of 1m"),
]


def test_quota_item_parse_refuses_bad_amounts_naming_the_field(world, subtests):
    for resource, field, value, reason in BAD_AMOUNTS:
        with subtests.test(f"{resource} {field}={value!r}"):
            amounts = {"guaranteed": "1", "limit": "2", "lending_limit": None, field: value}
            with pytest.raises(ValidationFailed) as caught:
                quota_item_parse(
                    flavor=world.a100_gpu, resource=resource, field_prefix="items[3].", **amounts
                )
            assert list(caught.value.fields) == [f"items[3].{field}"]
            assert reason in caught.value.fields[f"items[3].{field}"][0]


def test_quota_item_parse_requires_guaranteed_and_limit(world):
    with pytest.raises(ValidationFailed) as caught:
        quota_item_parse(flavor=world.a100_gpu, resource=GPU_RESOURCE, guaranteed="1", limit=None)
    assert "limit" in caught.value.fields


# --- tiers ---------------------------------------------------------------------------------


def test_a_tier_gives_gpus_cpu_memory_and_scheduling_quotas(world):
    cluster = ClusterFactory(name="big", elastic_cap_fraction=Decimal("0.5"))
    flavor = gpu_flavor(cluster, "a100-80gb", gpus=64, cpu=512, memory=4 * 1024 * GI)
    tenant = TenantFactory(slug="fresh")
    quota_set = quota_set_create_from_tier(
        tenant=tenant, cluster=cluster, tier=world.medium, actor=world.admin
    )
    amounts = {q.resource: (q.guaranteed, q.limit) for q in quota_set.quotas.all()}
    assert amounts == {
        GPU_RESOURCE: (16, 24),
        CPU_RESOURCE: (32, 48),
        MEMORY_RESOURCE: (256 * GI, 384 * GI),
    }
    assert all(q.flavor == flavor for q in quota_set.quotas.all())
    assert quota_set.tier == world.medium
    assert (quota_set.max_running_jobs, quota_set.max_queued_jobs, quota_set.max_pods) == (
        20,
        100,
        100,
    )
    assert quota_set.storage_bytes == 5 * 1024 * GI
    assert quota_set.max_pvcs == 50
    audit = AuditEvent.objects.filter(action="quota_set.written", tenant=tenant).get()
    assert audit.after["reason"] == "tier medium"


def test_a_tier_on_a_flavor_of_another_cluster_is_refused(world):
    tenant = TenantFactory(slug="fresh")
    with pytest.raises(ValidationFailed) as caught:
        quota_set_create_from_tier(
            tenant=tenant,
            cluster=world.h100,
            tier=world.small,
            gpu_flavor=world.a100_gpu,
            actor=world.admin,
        )
    assert caught.value.fields == {
        "gpu_flavor": ["flavor 'a100-80gb' belongs to cluster 'demo-a100', not 'demo-h100'"]
    }
    assert not QuotaSet.objects.filter(tenant=tenant).exists()


def test_a_tier_on_a_mig_flavor_is_refused(world):
    tenant = TenantFactory(slug="fresh")
    with pytest.raises(ValidationFailed) as caught:
        quota_set_create_from_tier(
            tenant=tenant,
            cluster=world.h100,
            tier=world.small,
            gpu_flavor=world.h100_mig,
            actor=world.admin,
        )
    assert "not whole GPUs" in caught.value.fields["gpu_flavor"][0]


def test_a_tier_on_a_cluster_without_gpus_is_refused(world):
    cluster = ClusterFactory(name="cpu-only")
    with pytest.raises(ValidationFailed) as caught:
        quota_set_create_from_tier(
            tenant=TenantFactory(slug="fresh"), cluster=cluster, tier=world.small, actor=None
        )
    assert "no whole-GPU flavor" in caught.value.fields["cluster"][0]


def test_a_tier_that_does_not_fit_is_refused_naming_the_tier(world):
    tenant = TenantFactory(slug="fresh")
    with pytest.raises(ValidationFailed) as caught:
        quota_set_create_from_tier(
            tenant=tenant, cluster=world.h100, tier=world.medium, actor=world.admin
        )
    assert list(caught.value.fields) == ["tier"]
    messages = caught.value.fields["tier"]
    assert any("guaranteed 16 does not fit" in m for m in messages)
    assert any("limit 24 exceeds the elastic cap of 8" in m for m in messages)
    assert not QuotaSet.objects.filter(tenant=tenant).exists()


# --- database constraints, bypassing the services ------------------------------------------


@pytest.fixture
def quota_set(world) -> QuotaSet:  # type: ignore[no-untyped-def]
    return QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)


def raw_quota(quota_set: QuotaSet, resource: str = "nvidia.com/gpu-raw", **amounts: object) -> None:
    Quota.objects.create(
        quota_set=quota_set,
        flavor=ResourceFlavor.objects.get(name="a100-80gb"),
        resource=resource,
        **{"guaranteed": Decimal(1), "limit": Decimal(2), **amounts},
    )


def test_a_raw_quota_within_the_rules_is_accepted(quota_set):
    raw_quota(quota_set, lending_limit=Decimal(1))
    assert quota_set.quotas.filter(resource="nvidia.com/gpu-raw").exists()


BROKEN_QUOTAS = {
    "guaranteed above limit": {"guaranteed": Decimal(3), "limit": Decimal(2)},
    "negative guaranteed": {"guaranteed": Decimal(-1), "limit": Decimal(2)},
    "negative both": {"guaranteed": Decimal(-2), "limit": Decimal(-1)},
    "lending above guaranteed": {"lending_limit": Decimal(2)},
    "negative lending limit": {"lending_limit": Decimal(-1)},
}


def test_the_database_refuses_a_quota_that_breaks_the_rules(quota_set, subtests):
    for rule, amounts in BROKEN_QUOTAS.items():
        with subtests.test(rule), pytest.raises(IntegrityError), transaction.atomic():
            raw_quota(quota_set, **amounts)


def test_the_database_refuses_a_duplicate_quota_item(quota_set):
    with pytest.raises(IntegrityError), transaction.atomic():
        raw_quota(quota_set, resource=GPU_RESOURCE)


def test_the_database_refuses_a_second_quota_set_for_the_same_tenant_and_cluster(world):
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaSet.objects.create(tenant=world.team_a, cluster=world.a100)


@pytest.mark.parametrize("fields", [{"generation": 0}, {"storage_bytes": Decimal(-1)}])
def test_the_database_refuses_a_bad_quota_set(world, fields):
    with pytest.raises(IntegrityError), transaction.atomic():
        QuotaSet.objects.create(tenant=TenantFactory(slug="fresh"), cluster=world.a100, **fields)


@pytest.mark.parametrize("fraction", [Decimal(0), Decimal("1.5"), Decimal("-0.5")])
def test_the_database_refuses_an_elastic_cap_fraction_outside_0_to_1(db, fraction):
    with pytest.raises(IntegrityError), transaction.atomic():
        Cluster.objects.create(name="c", elastic_cap_fraction=fraction)


BROKEN_FLAVORS = {
    "MIG without profile": {"kind": FlavorKind.MIG, "gpu_model": "NVIDIA H100 80GB HBM3"},
    "GPU without model": {"kind": FlavorKind.GPU},
    "storage without class": {"kind": FlavorKind.STORAGE},
    "unknown kind": {"kind": "fpga"},
    "negative weight": {"kind": FlavorKind.CPU, "gpu_weight": Decimal(-1)},
}


def test_the_database_refuses_a_bad_flavor(world, subtests):
    for rule, fields in BROKEN_FLAVORS.items():
        with subtests.test(rule), pytest.raises(IntegrityError), transaction.atomic():
            ResourceFlavor.objects.create(cluster=world.a100, name="raw", **fields)


def test_the_database_refuses_a_duplicate_flavor_name_or_negative_capacity(world):
    with pytest.raises(IntegrityError), transaction.atomic():
        ResourceFlavor.objects.create(cluster=world.a100, name="a100-80gb", kind=FlavorKind.CPU)
    with pytest.raises(IntegrityError), transaction.atomic():
        FlavorResource.objects.create(flavor=world.a100_gpu, resource="storage", capacity=-1)


# --- the per-line check the request pages show ----------------------------------------------


@dataclass(frozen=True)
class Proposed:
    flavor: str
    resource: str
    guaranteed_before: Decimal
    guaranteed_after: Decimal
    limit_after: Decimal


@pytest.mark.parametrize(
    ("guaranteed", "limit", "fits", "over_cap"),
    [(6, 10, True, False), (10, 10, True, False), (11, 11, False, True), (6, 11, True, True)],
)
def test_the_per_line_check_gives_the_answers_of_the_items_check(
    world, guaranteed, limit, fits, over_cap
):
    """team-a holds 6 / 10 of 16 A100s, the others 6 guaranteed; the cap is 10."""
    proposed = Proposed(
        world.a100_gpu.name, GPU_RESOURCE, Decimal(6), Decimal(guaranteed), Decimal(limit)
    )
    allocations = cluster_allocations(cluster=world.a100)
    [line] = [
        line
        for line in capacity_lines_check(
            cluster=world.a100, allocations=allocations, lines=[proposed]
        )
        if line.allocation.flavor == world.a100_gpu and line.resource == GPU_RESOURCE
    ]
    assert (line.fits, line.over_cap) == (fits, over_cap)
    check = quota_items_check(
        cluster=world.a100,
        items=[gpus(world.a100_gpu, guaranteed, limit)],
        quota_set=QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100),
    )
    assert ("does not fit" in str(check.errors)) == (not fits)
    assert ("elastic cap" in str(check.errors)) == over_cap
