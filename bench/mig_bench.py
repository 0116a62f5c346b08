"""MIG benchmark: the planner (gpu_spec/src/gpu_spec/mig/planner.py) and 1,000 agents reporting to the portal.

Part (a) needs no Django, no database and no GPU: the planner is pure Python. Part (b) needs
PostgreSQL; neither needs a GPU (the agents use the ``fake`` backend).

(a) Part one, the large cluster: 1,000 nodes x 8 GPUs (``--nodes``, ``--gpus-per-node``), each
    node one model at random (A100-80GB, H100 80GB HBM3, H200, A30), each GPU with a layout a
    cluster typically has (empty, one full-GPU instance, all 1g, all 2g, 2 x 3g, mig-parted's
    "balanced"), about 30% of the instances busy. 300 tenants want a MIG profile each (half for
    one model, half for any model offering it), in two scenarios: "within" (1-40 instances a
    tenant, which the cluster can hold) and "over" (1-150, far more than it can). It prints the
    planner's wall time, cold (the first plan builds the per-model layout tables) and warm
    (the median of ``--repeat`` runs), and per GPU. The baseline, measured in the same run, is
    a trivial per-GPU loop: ``layout.validate_layout`` of each GPU's current instances (one
    rules check per GPU). The figure is planning time per GPU as a ratio of that loop's.
    Part two, the gap: on 200 seeded random small instances (1-4 GPUs; the generator of
    gpu_spec/tests/test_planner.py) and 200 harder ones (3-6 GPUs, 3-6 demands of up to 7
    instances), the demand the heuristic ``plan`` meets against the optimum of
    ``plan_exhaustive``, in compute slices: instances equal, average and worst gap, and each
    solver's time.

(b) 1,000 agents reporting inventory and metrics every 10 s, through gunicorn (2 sync workers) on
    PostgreSQL: bench/agent_report_bench.py, which this script runs (``--part b``; it also runs
    alone). 1,000 fake nodes (``--agents``; the agent's ``fake`` backend and its own report
    code, 8 GPUs of two models, MIG instances and processes) register through the services,
    each with its own node token; client threads then post each node's report in turn to
    ``POST /api/v1/agent/report/`` for a fixed time, in rounds alternating with the trivial
    authenticated ``GET /api/v1/me/`` of the same run. It prints req/s, p50/p99, the ratio
    report / baseline (target >= 0.5), the SQL queries of one report, the server CPU per
    request (gunicorn, PostgreSQL), what 1,000 agents every 10 s need (100 reports/s) against
    the measured capacity, and checks that the reports landed (GPU and MIG instance rows).
    Needs the PostgreSQL server of ``--database-url``; it uses a database of its own
    (``--db-name``, dropped afterwards).

Exit status 0 when every plan keeps every busy instance where it was, the heuristic never
meets more than the optimum (which would mean the "optimum" is not one), and (b) reaches its
target with every report answered 200 and stored; 1 otherwise. A ``BENCH_JSON {...}`` line
carries all figures; ``--json PATH`` also writes them to a file.

    .venv/bin/python bench/mig_bench.py [--part all|a|b] [--nodes 1000] [--gpus-per-node 8]
        [--instances 200] [--agents 1000] [--seconds 10] [--database-url URL]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import emit, figure  # noqa: E402 - bench/figures.py, the line bench/run.py reads

from gpu_spec.mig.catalogue import GpuModel, load_catalogue  # noqa: E402
from gpu_spec.mig.layout import (  # noqa: E402
    InstanceRequest,
    Placement,
    enumerate_layouts,
    validate_layout,
)
from gpu_spec.mig.planner import (  # noqa: E402
    CurrentInstance,
    Demand,
    GpuState,
    Plan,
    plan,
    plan_exhaustive,
)

# bench/run.py runs part (a) here; part (b) is bench/agent_report_bench.py, which it runs alone.
BENCH_RUNNER = {"args": ["--part", "a"]}
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A30")
BUSY_FRACTION = 0.3
TENANTS = 300
SCENARIOS = {"within": 40, "over": 150}  # most instances one tenant wants


# --- the large cluster ---------------------------------------------------------------------------


def typical_layouts(model: GpuModel) -> list[tuple[Placement, ...]]:
    """Empty, one full-GPU instance, all of the smallest, all 2g, 2 x 3g, and "balanced"
    (2 x 1g, a 2g and a 3g; on an A30 2 x 1g and a 2g), placed by the layout rules."""
    plain = sorted(
        (p for p in model.profiles.values() if not p.media_extensions),
        key=lambda p: (p.compute_slices, p.memory_slices, p.name),
    )
    smallest, full = plain[0], plain[-1]
    by_compute: dict[int, str] = {}
    for profile in plain:
        by_compute.setdefault(profile.compute_slices, profile.name)
    wanted: list[list[str]] = [[], [full.name], [smallest.name] * smallest.max_count]
    if 2 in by_compute:
        wanted.append([by_compute[2]] * model.profiles[by_compute[2]].max_count)
    if 3 in by_compute:
        wanted.append([by_compute[3]] * 2)
        wanted.append([smallest.name, smallest.name, by_compute[2], by_compute[3]])
    else:
        wanted.append([smallest.name, smallest.name, by_compute[2]])
    layouts = []
    for names in wanted:
        result = validate_layout(model, [InstanceRequest(name) for name in names])
        if not result.ok:
            raise RuntimeError(f"{model.name}: {names} is not a valid layout: {result.errors}")
        layouts.append(tuple(result.placements))
    return layouts


def large_cluster(
    nodes: int, gpus_per_node: int, most: int, seed: int
) -> tuple[list[GpuState], list[Demand]]:
    rng = random.Random(seed)
    catalogue = load_catalogue()
    typical = {name: typical_layouts(catalogue.model(name)) for name in MODELS}
    gpus = []
    for node in range(nodes):
        model = rng.choice(MODELS)
        for index in range(gpus_per_node):
            layout = rng.choice(typical[model])
            gpus.append(
                GpuState(
                    f"GPU-{node:04d}-{index}",
                    f"node-{node:04d}",
                    model,
                    tuple(
                        CurrentInstance(p.profile, p.start, rng.random() < BUSY_FRACTION)
                        for p in layout
                    ),
                )
            )
    demand = []
    for tenant in range(TENANTS):
        model = catalogue.model(rng.choice(MODELS))
        profile = rng.choice(sorted(n for n, p in model.profiles.items() if not p.media_extensions))
        demand.append(
            Demand(
                profile,
                rng.randint(1, most),
                f"team-{tenant:03d}",
                model.name if rng.random() < 0.5 else None,
            )
        )
    return gpus, demand


def baseline_loop(gpus: list[GpuState]) -> float:
    """The trivial per-GPU loop: check each GPU's instances against its model's rules."""
    catalogue = load_catalogue()
    started = time.perf_counter()
    for state in gpus:
        model = catalogue.find_model(state.model_name)
        if model is not None:
            validate_layout(model, [InstanceRequest(i.profile, i.start) for i in state.instances])
    return time.perf_counter() - started


def busy_kept(gpus: list[GpuState], result: Plan) -> bool:
    by_uuid = {g.uuid: g for g in gpus}
    for planned in result.gpus:
        held = {(i.profile, i.start) for i in by_uuid[planned.uuid].instances if i.busy}
        if not held <= {(p.profile, p.start) for p in planned.layout}:
            return False
    return True


def measure_cluster(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    rows = []
    failures = []
    for scenario, most in SCENARIOS.items():
        gpus, demand = large_cluster(args.nodes, args.gpus_per_node, most, args.seed)
        started = time.perf_counter()
        result = plan(gpus, demand)
        cold = time.perf_counter() - started
        warm = []
        baselines = []
        for _ in range(args.repeat):
            baselines.append(baseline_loop(gpus))
            started = time.perf_counter()
            again = plan(gpus, demand)
            warm.append(time.perf_counter() - started)
            if again.score != result.score or again.explanation != result.explanation:
                failures.append(f"{scenario}: two plans of the same input differ")
        warm_s = statistics.median(warm)
        baseline_s = statistics.median(baselines)
        if not busy_kept(gpus, result):
            failures.append(f"{scenario}: a busy instance was moved or destroyed")
        wanted = sum(result.wanted.values())
        met = sum(result.met.values())
        row = {
            "scenario": scenario,
            "gpus": len(gpus),
            "wanted_instances": wanted,
            "met_instances": met,
            "met_slices": result.score.met_slices,
            "changed_gpus": result.score.changed_gpus,
            "instance_changes": result.score.instance_changes,
            "unmet_groups": len(result.unmet),
            "cold_s": round(cold, 3),
            "warm_s": round(warm_s, 3),
            "per_gpu_us": round(1e6 * warm_s / len(gpus), 1),
            "baseline_s": round(baseline_s, 3),
            "baseline_per_gpu_us": round(1e6 * baseline_s / len(gpus), 1),
            "ratio_to_baseline": round(warm_s / baseline_s, 2),
        }
        rows.append(row)
        print(
            f"{scenario:>6}: {len(gpus)} GPUs, {met} of {wanted} instances met "
            f"({len(result.unmet)} groups short), {row['changed_gpus']} GPUs reconfigured; "
            f"plan {cold:.2f} s cold, {warm_s:.2f} s warm = {row['per_gpu_us']} µs/GPU; "
            f"baseline {row['baseline_per_gpu_us']} µs/GPU; ratio {row['ratio_to_baseline']}"
        )
        for line in (
            result.explanation[:1]
            + [line for line in result.explanation if " placed: " in line][:3]
        ):
            print(f"        {line}")
    return rows, failures


# --- the gap to the optimum ----------------------------------------------------------------------


def random_instance(
    seed: int,
    *,
    min_gpus: int = 1,
    max_gpus: int = 4,
    min_demands: int = 1,
    max_demands: int = 4,
    most: int = 4,
) -> tuple[list[GpuState], list[Demand]]:
    """The generator of gpu_spec/tests/test_planner.py (same defaults, same instances)."""
    rng = random.Random(seed)
    catalogue = load_catalogue()
    gpus = []
    for i in range(rng.randint(min_gpus, max_gpus)):
        model = catalogue.model(rng.choice(MODELS))
        layout = rng.choice(enumerate_layouts(model)) if rng.random() < 0.8 else ()
        instances = tuple(
            CurrentInstance(p.profile, p.start, busy=rng.random() < 0.3)
            for p in layout
            if rng.random() < 0.6
        )
        gpus.append(GpuState(f"GPU-{seed}-{i}", f"node-{i // 2}", model.name, instances))
    present = sorted({g.model_name for g in gpus})
    demand = []
    for _ in range(rng.randint(min_demands, max_demands)):
        model = catalogue.model(rng.choice(present if rng.random() < 0.9 else MODELS))
        demand.append(
            Demand(
                rng.choice(sorted(model.profiles)),
                rng.randint(1, most),
                rng.choice(["team-a", "team-b", None]),
                model.name if rng.random() < 0.3 else None,
            )
        )
    return gpus, demand


GAP_SETS = {
    "small": {},  # as the test: 1-4 GPUs, 1-4 demands of 1-4 instances
    "harder": {"min_gpus": 3, "max_gpus": 6, "min_demands": 3, "max_demands": 6, "most": 7},
}


def measure_gap(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    rows = []
    failures = []
    for name, shape in GAP_SETS.items():
        gaps = []
        whole_equal = 0
        heuristic_s = exhaustive_s = 0.0
        for seed in range(args.instances):
            gpus, demand = random_instance(seed, **shape)
            started = time.perf_counter()
            heuristic = plan(gpus, demand)
            heuristic_s += time.perf_counter() - started
            started = time.perf_counter()
            best = plan_exhaustive(gpus, demand)
            exhaustive_s += time.perf_counter() - started
            gap = best.score.met_slices - heuristic.score.met_slices
            if gap < 0 or heuristic.score.key() > best.score.key():
                failures.append(f"{name} seed {seed}: the heuristic beats the exhaustive solver")
            if not busy_kept(gpus, heuristic) or not busy_kept(gpus, best):
                failures.append(f"{name} seed {seed}: a busy instance was moved or destroyed")
            gaps.append(gap)
            whole_equal += heuristic.score.key() == best.score.key()
        row = {
            "set": name,
            "instances": args.instances,
            "met_equal": sum(1 for g in gaps if g == 0),
            "average_gap_slices": round(sum(gaps) / len(gaps), 4),
            "worst_gap_slices": max(gaps),
            "whole_score_equal": whole_equal,
            # The heuristic runs first, so the exhaustive solver finds each GPU's layout options
            # already computed (they are cached and shared): its time is the search alone.
            "heuristic_ms": round(1e3 * heuristic_s / len(gaps), 2),
            "exhaustive_ms": round(1e3 * exhaustive_s / len(gaps), 2),
        }
        rows.append(row)
        print(
            f"{name:>6}: met demand equal to the optimum in {row['met_equal']} of "
            f"{args.instances}; gap average {row['average_gap_slices']} compute slices, worst "
            f"{row['worst_gap_slices']}; whole score equal in {whole_equal}; "
            f"{row['heuristic_ms']} ms heuristic, {row['exhaustive_ms']} ms exhaustive each"
        )
    return rows, failures


def planner_figures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Part (a): time per GPU against the trivial loop (no target), demand met, and the gap to
    the optimum (0 expected); part (b): agents' reports against /me/."""
    figures = []
    for row in report.get("cluster", []):
        figures.append(
            figure(f"planner {row['scenario']}: µs per GPU vs validate loop", row["per_gpu_us"],
                   "µs", baseline=row["baseline_per_gpu_us"], ratio=row["ratio_to_baseline"],
                   better="lower")
        )  # fmt: skip
        figures.append(
            figure(f"planner {row['scenario']}: instances met", row["met_instances"], "instances",
                   baseline=row["wanted_instances"])
        )  # fmt: skip
    for row in report.get("gap", []):
        figures.append(
            figure(f"planner gap {row['set']}: instances at the optimum", row["met_equal"],
                   "instances", baseline=row["instances"], target=1.0)
        )  # fmt: skip
    if "agents" in report:
        import api_bench

        figures += api_bench.row_figures(report["agents"]["results"])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part",
        choices=("all", "a", "b"),
        default="all",
        help="(a) the planner, (b) agents reporting through gunicorn; default all",
    )
    parser.add_argument("--nodes", type=int, default=1000, help="default 1000")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="default 8")
    parser.add_argument("--instances", type=int, default=200, help="small instances, default 200")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per scenario, default 3")
    parser.add_argument("--seed", type=int, default=1, help="of the large cluster, default 1")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    group = parser.add_argument_group("part (b), agents reporting (bench/agent_report_bench.py)")
    sys.path.insert(0, str(ROOT / "bench"))
    import agent_report_bench  # here: part (a) needs neither Django nor PostgreSQL

    agent_report_bench.add_arguments(group)
    args = parser.parse_args()
    if min(args.nodes, args.gpus_per_node, args.instances, args.repeat) < 1:
        parser.error("--nodes, --gpus-per-node, --instances and --repeat must be 1 or more")

    report: dict[str, Any] = {"benchmark": "mig_planner", "python": sys.version.split()[0]}
    failures: list[str] = []
    if args.part in ("all", "a"):
        print(f"(a) the planner on {args.nodes} nodes x {args.gpus_per_node} GPUs")
        report["cluster"], cluster_failures = measure_cluster(args)
        print(
            f"\n(a) the heuristic against the exhaustive optimum, {args.instances} instances a set"
        )
        report["gap"], gap_failures = measure_gap(args)
        failures += cluster_failures + gap_failures
    if args.part in ("all", "b"):
        print(f"\n(b) {args.agents} agents reporting every 10 s through gunicorn")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the finally blocks run
        try:
            report["agents"], agent_failures = agent_report_bench.run(args)
        except ValueError as exc:
            parser.error(str(exc))
        except agent_report_bench.ERRORS as exc:
            agent_failures = [f"error: {exc}"]
        failures += [f"(b) {failure}" for failure in agent_failures]
    report["failed_checks"] = failures
    print("BENCH_JSON " + json.dumps(report, sort_keys=True))
    emit("mig", planner_figures(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    for failure in failures:
        print(f"FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
