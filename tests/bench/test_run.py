"""bench/run.py's table building on canned outputs (the benchmarks themselves are not run)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bench import BENCH, load_bench

run = load_bench("run")
figures = load_bench("figures")

API_OUTPUT = """seeded in 12.0 s
me (baseline)       1000      0   380.0    20.0    33.0    1.0       -   PASS
BENCH_JSON {"results": []}
""" + figures.PREFIX + json.dumps(
    {
        "benchmark": "api",
        "figures": [
            figures.figure("tenants page 50: req/s vs me", 240.0, "req/s", baseline=380.0,
                           target=0.6),
            figures.figure("tenant quotas: req/s vs me", 200.0, "req/s", baseline=380.0,
                           target=0.6),
        ],
    }
)  # fmt: skip
RECONCILE_OUTPUT = figures.PREFIX + json.dumps(
    {
        "benchmark": "reconcile",
        "figures": [
            figures.figure("no-op vs first sync", 4.8, "s", baseline=90.0, target=0.1,
                           better="lower"),
        ],
    }
)  # fmt: skip


def summary(commit: str, benchmarks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"commit": commit, "dirty": False, "started": "2026-12-03T10:00:00Z", "cpus": 2,
            "benchmarks": benchmarks}  # fmt: skip


def bench(name: str, output: str, returncode: int = 0) -> dict[str, Any]:
    return {"name": name, "returncode": returncode, "seconds": 60.0, "args": [],
            "figures": run.parse_figures(name, output, returncode)}  # fmt: skip


def test_figures_are_read_from_the_line_and_checked_against_their_targets():
    found = run.parse_figures("api", API_OUTPUT, 1)
    assert [(f["figure"], f["ratio"], f["passed"]) for f in found] == [
        ("tenants page 50: req/s vs me", 0.632, True),
        ("tenant quotas: req/s vs me", 0.526, False),
    ]
    lower = run.parse_figures("reconcile", RECONCILE_OUTPUT, 0)
    assert (lower[0]["ratio"], lower[0]["passed"]) == (0.053, True)


def test_a_benchmark_without_figures_still_gets_its_exit_status():
    (row,) = run.parse_figures("usage", "some text\nno figures here\n", 2)
    assert (row["figure"], row["value"], row["passed"]) == (
        "exit status (checks beyond the figures)",
        2,
        False,
    )
    # A failing exit with only passing figures shows the failure too.
    assert run.parse_figures("reconcile", RECONCILE_OUTPUT, 1)[-1]["passed"] is False


def test_the_markdown_table_has_every_column_and_verdict():
    text = run.markdown(summary("abc123", [bench("api", API_OUTPUT, 1), bench("usage", "", 0)]))
    assert "| benchmark | figure | value | baseline | ratio | target | result |" in text
    assert (
        "| api | tenants page 50: req/s vs me | 240 req/s | 380 | 0.632 | ratio >= 0.6 | PASS |"
        in text
    )
    assert (
        "| api | tenant quotas: req/s vs me | 200 req/s | 380 | 0.526 | ratio >= 0.6 | FAIL |"
        in text
    )
    assert (
        "| usage | exit status (checks beyond the figures) | 0 | - | - | value <= 0 | PASS |"
        in text
    )
    assert not run.summary_ok(summary("abc123", [bench("api", API_OUTPUT, 1)]))
    assert run.summary_ok(summary("abc123", [bench("reconcile", RECONCILE_OUTPUT)]))


def test_two_runs_compare_figure_by_figure():
    slower = API_OUTPUT.replace('"value": 240.0', '"value": 190.0').replace(
        '"ratio": 0.632', '"ratio": 0.5'
    )
    a = summary("aaa", [bench("api", API_OUTPUT, 1), bench("reconcile", RECONCILE_OUTPUT)])
    b = summary("bbb", [bench("api", slower, 1)])
    text = run.compare(a, b)
    assert (
        "| api | tenants page 50: req/s vs me (ratio) | 0.632 | 0.5 | -20.9% (worse) | PASS | PASS |"
        in text
    )
    assert "| reconcile | no-op vs first sync (ratio) | 0.053 | - | - | PASS | absent |" in text


def test_compare_reads_the_written_files(tmp_path, capsys):
    for name, commit in (("a", "aaa"), ("b", "bbb")):
        (tmp_path / f"{name}.json").write_text(
            json.dumps(summary(commit, [bench("reconcile", RECONCILE_OUTPUT)]))
        )
    assert run.main(["--compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "| reconcile | no-op vs first sync (ratio) | 0.053 | 0.053 | same | PASS | PASS |" in (
        capsys.readouterr().out
    )


def test_every_benchmark_file_is_discovered_with_its_runner_arguments(tmp_path):
    (tmp_path / "usage_bench.py").write_text("print('hi')\n")
    (tmp_path / "mig_bench.py").write_text('BENCH_RUNNER = {"args": ["--part", "a"]}\n')
    (tmp_path / "helpers.py").write_text("")
    found = {b.name: b.args for b in run.discover(tmp_path)}
    assert found == {"mig": ["--part", "a"], "usage": []}
    real = {b.name for b in run.discover()}
    assert {"api", "reconcile", "mig", "agent_report"} <= real


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*_bench.py")))
def test_every_benchmark_prints_the_figures_line(name):
    """A benchmark that forgets the line still gets a row (its exit status), but says less."""
    source = (BENCH / f"{name}.py").read_text()
    assert "emit(" in source or figures.PREFIX in source, f"bench/{name}.py prints no figures"
