"""Run every benchmark in bench/ and write one summary table, so two commits can be compared.

    .venv/bin/python bench/run.py                      # every bench/*_bench.py (make bench)
    .venv/bin/python bench/run.py --only api,mig       # those whose name contains a word
    .venv/bin/python bench/run.py --compare A.json B.json

A benchmark is any ``bench/*_bench.py``: one added later is picked up without editing this
file. Each prints its own report and one ``BENCH_FIGURES {...}`` line (``bench/figures.py``):
figure, value, baseline, ratio, target, pass. A module may set ``BENCH_RUNNER = {"args":
[...]}`` (read from its source, not imported) for the arguments this runner gives it, or
``{"skip": "why"}``. A benchmark that prints no figures still gets a row: its exit status.

The summary goes to ``.data/bench/`` as ``bench-<UTC time>-<commit>.json`` and ``.md``, and
``latest.json`` / ``latest.md``; the Markdown is printed at the end. Exit status 0 when every
benchmark exited 0 and no figure missed its target.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUT = ROOT / ".data" / "bench"
PREFIX = "BENCH_FIGURES "


@dataclass
class Benchmark:
    name: str  # "api" for bench/api_bench.py
    path: Path
    args: list[str]
    skip: str | None = None


def discover(bench_dir: Path = BENCH) -> list[Benchmark]:
    found = []
    for path in sorted(bench_dir.glob("*_bench.py")):
        config = runner_config(path.read_text())
        found.append(
            Benchmark(
                name=path.stem.removesuffix("_bench"),
                path=path,
                args=[str(a) for a in config.get("args", [])],
                skip=config.get("skip"),
            )
        )
    return found


def runner_config(source: str) -> dict[str, Any]:
    """The module's ``BENCH_RUNNER = {...}`` literal, without importing it (benchmarks import
    Django, psycopg, the stand-in: the runner needs none of that)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "BENCH_RUNNER" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if not isinstance(value, dict):
                raise ValueError("BENCH_RUNNER must be a dict")
            return value
    return {}


def parse_figures(name: str, output: str, returncode: int) -> list[dict[str, Any]]:
    """The figures of one benchmark's output; its exit status as a figure when it printed
    none (or failed without a failing figure, so that the failure shows in the table)."""
    figures: list[dict[str, Any]] = []
    for line in output.splitlines():
        if line.startswith(PREFIX):
            try:
                payload = json.loads(line[len(PREFIX) :])
            except json.JSONDecodeError:
                continue
            figures += [{**f, "benchmark": name} for f in payload.get("figures", [])]
    if not figures or (returncode != 0 and all(f.get("passed") is not False for f in figures)):
        figures.append(
            {
                "benchmark": name,
                "figure": "exit status (checks beyond the figures)",
                "value": returncode,
                "unit": "",
                "baseline": None,
                "ratio": None,
                "target": 0,
                "better": "lower",
                "passed": returncode == 0,
            }
        )
    return figures


def _number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _target(figure: dict[str, Any]) -> str:
    if figure.get("target") is None:
        return "-"
    sign = ">=" if figure.get("better", "higher") == "higher" else "<="
    what = "ratio" if figure.get("ratio") is not None else "value"
    return f"{what} {sign} {_number(figure['target'])}"


def _verdict(passed: Any) -> str:
    return {True: "PASS", False: "FAIL"}.get(passed, "-")


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"Benchmarks at {summary['commit']}{' (uncommitted changes)' if summary['dirty'] else ''}"
        f", {summary['started']}, {summary['cpus']} CPUs",
        "",
        "| benchmark | figure | value | baseline | ratio | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for bench in summary["benchmarks"]:
        for f in bench["figures"]:
            unit = f" {f['unit']}" if f.get("unit") else ""
            lines.append(
                f"| {bench['name']} | {f['figure']} | {_number(f['value'])}{unit} | "
                f"{_number(f.get('baseline'))} | {_number(f.get('ratio'))} | {_target(f)} | "
                f"{_verdict(f.get('passed'))} |"
            )
    lines.append("")
    for bench in summary["benchmarks"]:
        state = f"skipped: {bench['skip']}" if bench.get("skip") else f"exit {bench['returncode']}"
        lines.append(f"- {bench['name']}: {state}, {bench['seconds']:.0f} s")
    return "\n".join(lines) + "\n"


def compare(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Figure by figure (by benchmark and name): A, B, change of the checked quantity (the
    ratio when there is one), and whether it got better or worse."""

    def index(summary: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(x["name"], f["figure"]): f for x in summary["benchmarks"] for f in x["figures"]}

    before, after = index(a), index(b)
    lines = [
        f"A: {a['commit']} ({a['started']})  B: {b['commit']} ({b['started']})",
        "",
        "| benchmark | figure | A | B | change | A result | B result |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in list(before) + [k for k in after if k not in before]:
        fa, fb = before.get(key), after.get(key)
        show = "ratio" if (fa or fb or {}).get("ratio") is not None else "value"
        va = fa.get(show) if fa else None
        vb = fb.get(show) if fb else None
        change = "-"
        if isinstance(va, int | float) and isinstance(vb, int | float) and va:
            delta = (vb - va) / abs(va)
            better = (fb or fa or {}).get("better", "higher")
            word = "better" if (delta > 0) == (better == "higher") else "worse"
            change = f"{delta:+.1%} ({word})" if abs(delta) >= 0.005 else "same"
        lines.append(
            f"| {key[0]} | {key[1]} ({show}) | {_number(va)} | {_number(vb)} | {change} | "
            f"{_verdict(fa.get('passed')) if fa else 'absent'} | "
            f"{_verdict(fb.get('passed')) if fb else 'absent'} |"
        )
    return "\n".join(lines) + "\n"


def git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_one(bench: Benchmark, timeout_s: float) -> dict[str, Any]:
    print(f"\n=== {bench.path.relative_to(ROOT)} {' '.join(bench.args)}", flush=True)
    started = time.monotonic()
    if bench.skip:
        print(f"skipped: {bench.skip}")
        return {"name": bench.name, "returncode": None, "seconds": 0.0, "skip": bench.skip,
                "args": bench.args, "figures": []}  # fmt: skip
    lines: list[str] = []
    proc = subprocess.Popen(
        [sys.executable, str(bench.path), *bench.args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:  # echoed as it comes: benchmarks take minutes
            print(line, end="", flush=True)
            lines.append(line)
            if time.monotonic() - started > timeout_s:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
        returncode = proc.wait()
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.terminate()  # SIGTERM: the benchmarks clean up (databases, gunicorn) on it
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        returncode = 124
    return {
        "name": bench.name,
        "args": bench.args,
        "returncode": returncode,
        "seconds": round(time.monotonic() - started, 1),
        "figures": parse_figures(bench.name, "".join(lines), returncode),
    }


def summary_ok(summary: dict[str, Any]) -> bool:
    return all(
        b.get("skip") or (b["returncode"] == 0 and all(f.get("passed") is not False for f in b["figures"]))
        for b in summary["benchmarks"]
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated words of benchmark names")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and stop")
    parser.add_argument("--timeout", type=float, default=1800, help="per benchmark, seconds")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {OUT.relative_to(ROOT)}")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A.json", "B.json"))
    args = parser.parse_args(argv)

    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        print(compare(a, b), end="")
        return 0
    benches = discover()
    if args.only:
        words = [w for w in args.only.split(",") if w]
        benches = [b for b in benches if any(w in b.name for w in words)]
    if args.list:
        for b in benches:
            print(
                f"{b.name}: {b.path.relative_to(ROOT)} {' '.join(b.args)}{' (skip)' if b.skip else ''}"
            )
        return 0
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary: dict[str, Any] = {
        "commit": commit,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "started": started,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "benchmarks": [run_one(b, args.timeout) for b in benches],
    }
    text = markdown(summary)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"bench-{started.replace(':', '')}-{commit}"
    for name in (stem, "latest"):
        (args.out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
        (args.out / f"{name}.md").write_text(text)
    print("\n" + text, end="")
    print(
        f"\nwritten to {(args.out / stem).relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out / stem}.json/.md"
    )
    return 0 if summary_ok(summary) else 1


if __name__ == "__main__":
    sys.exit(main())
