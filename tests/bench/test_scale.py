"""bench/scale_bench.py's pieces at a tiny size, so that CI keeps the scale run honest: the
pre-loaded stand-in holds exactly what a real first sync leaves (and the comparison sees a
difference), the no-op pass writes nothing, the pages' query counts do not grow with the
tenants, and the usage figures come from rows really stored."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from django.db import connection

from quotas.kube.applier import Scope
from quotas.sync import cluster_reconcile, desired_objects
from tests.bench import load_bench
from tests.conftest import ensure_tier_templates

scale = load_bench("scale_bench")


@pytest.fixture
def tiny(db: None) -> None:
    ensure_tier_templates()
    scale.world_create()
    scale.tenants_add(20, mid=12)


def test_preload_is_what_a_real_first_sync_leaves(tiny: None, tmp_path: Path) -> None:
    real = scale.standin_start(tmp_path, "real", preloaded=False)
    handles = [real]
    try:
        cluster = scale.cluster_point(scale.MID, real)
        first = cluster_reconcile(cluster=cluster)
        desired = desired_objects(cluster)
        assert not first.error and first.result is not None
        assert len(first.result.created) == len(desired) > 12 * 10  # 12 tenants' objects

        scale.preload(desired, tmp_path / "pre", chunk=5)  # several chunks merged
        preloaded = scale.standin_start(tmp_path, "pre", preloaded=True)
        handles.append(preloaded)
        assert scale.compare_stores(real, preloaded) == []

        # The comparison is not blind: one quota different in the pre-load shows.
        changed = [dict(o) for o in desired]
        quota = next(i for i, o in enumerate(changed) if o["kind"] == "ResourceQuota")
        changed[quota] = {**changed[quota], "spec": {"hard": {"pods": "1"}}}
        scale.preload(changed, tmp_path / "wrong", chunk=5)
        wrong = scale.standin_start(tmp_path, "wrong", preloaded=True)
        handles.append(wrong)
        problems = scale.compare_stores(real, wrong)
        assert len(problems) == 1 and problems[0].startswith("differs: ('resourcequotas'")

        run = scale.reconcile_pass(
            scale.cluster_point(scale.MID, preloaded), preloaded, len(desired)
        )
        assert run["error"] == "" and run["failed"] == []
        assert run["writes"] == 0 and run["unchanged"] == len(desired)
        assert run["lists"] == scale.reconcile_bench.expected_lists(
            desired, desired, Scope(scale.MID)
        )
        assert set(run["phases_cpu_s"]) == {
            "desired_objects",
            "validate_objects",
            "apply_objects",
            "rest",
        }
        # The beat's next pass (what the first remembered is used): still nothing written,
        # every object read and found as desired.
        again = scale.reconcile_pass(
            scale.cluster_point(scale.MID, preloaded), preloaded, len(desired)
        )
        assert again["error"] == "" and again["failed"] == []
        assert again["writes"] == 0 and again["unchanged"] == len(desired)
        assert again["lists"] == run["lists"]
    finally:
        for handle in handles:
            handle.stop()


def test_page_query_counts_do_not_grow_with_the_tenants(tiny: None) -> None:
    scale.requests_file(3)
    before = scale.page_counts(scale.admin_client())
    scale.tenants_add(40)
    after = scale.page_counts(scale.admin_client())
    assert before["queue_queries"] == after["queue_queries"] > 0
    assert before["tenants_queries"] == after["tenants_queries"] > 0


@pytest.mark.django_db(transaction=True)
def test_usage_figures_come_from_stored_rows(on_postgres: None) -> None:
    ensure_tier_templates()
    scale.world_create()
    scale.tenants_add(4)
    usage = scale.usage_part(gpus=20, per_node=8, minutes=2)
    assert usage["nodes"] == 3
    # Each GPU gives utilisation, memory and processes: what the agents' path wrote.
    assert usage["rows_stored"] == usage["rows_written"] == 20 * 2 * 3
    assert usage["rows_per_day"] == 20 * 3 * 86400 // usage["sample_every_s"]
    assert usage["bytes_per_row"] > 40  # 11 columns, a 23-byte row header
    assert usage["headroom"] > 0
    assert connection.vendor == "postgresql"


def test_the_wall_figure_of_the_next_no_op_pass_is_named_and_judged() -> None:
    def run(wall: float, cpu_per_object: float) -> dict[str, object]:
        phases = {"desired_objects": 1.0, "validate_objects": 1.0, "apply_objects": 1.0}
        one = {"objects": 10, "writes": 0, "lists": 2, "portal_cpu_per_object_us": cpu_per_object,
               "portal_cpu_s": 1.0, "wall_s": wall, "standin_cpu_s": 1.0,
               "phases_cpu_s": phases | {"rest": 0.1}}  # fmt: skip
        return one | {"repeat": dict(one)}

    args = argparse.Namespace(tenants=10_000, small=100, mid=1000)
    report = {"reconcile": {"checks": [], "10000": run(12.0, 13.0), "1000": run(1.0, 10.0)}}
    figures, failures = scale.figures_of(report, args)
    by_name = {f["figure"]: f for f in figures}
    wall = by_name["no-op reconcile at 10,000 tenants, wall"]
    assert (wall["value"], wall["target"], wall["passed"]) == (12.0, 10, False)
    per_object = by_name[
        "no-op reconcile, next pass: portal CPU per object at 10000 vs 1000 tenants"
    ]
    assert (per_object["ratio"], per_object["passed"]) == (1.3, True)
    assert failures == []
