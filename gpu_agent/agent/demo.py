"""Simulated GPU nodes for the demo (``make run``): one agent process per node, fake backend.

Development infrastructure, like ``devcluster/``. ``manage.py demo`` writes, for each demo
node not yet registered, ``DIR/<node>.json`` (``{"node": ..., "gpus": "<--fake-gpus spec>"}``)
and a one-time join token in ``DIR/<node>.join``; this starts ``python -m gpu_agent`` for each,
keeping each node's token and simulated GPUs under ``STATE/<node>``, so a restart keeps the
layouts. The agents back off until the portal answers.

    python -m gpu_agent.agent.demo --portal http://127.0.0.1:8000 --dir .run/agents \\
        --state-dir .data/agents
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path


def agent_command(portal: str, spec: Path, state_dir: Path, interval: float) -> list[str]:
    node = json.loads(spec.read_text())
    name = str(node["node"])
    return [
        sys.executable, "-m", "gpu_agent",
        "--portal", portal,
        "--node", name,
        "--join-token-file", str(spec.with_suffix(".join")),
        "--backend", "fake",
        "--fake-gpus", str(node["gpus"]),
        "--state-dir", str(state_dir / name),
        "--interval", str(interval),
        "--max-backoff", str(max(interval * 3, 10)),
        "--log-level", "WARNING",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_agent.agent.demo", description=__doc__)
    parser.add_argument("--portal", required=True)
    parser.add_argument("--dir", type=Path, required=True, help="node specs and join tokens")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args(argv)

    specs = sorted(args.dir.glob("*.json")) if args.dir.is_dir() else []
    agents = [
        subprocess.Popen(agent_command(args.portal, spec, args.state_dir, args.interval))  # noqa: S603 - our own module
        for spec in specs
    ]
    print(f"demo GPU nodes: {len(agents)} simulated agents reporting to {args.portal}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            if agents and all(a.poll() is not None for a in agents):
                return 1
        return 0
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()


if __name__ == "__main__":
    raise SystemExit(main())
