"""Simulated GPU nodes for the demo (``make run``): one agent process per node, fake backend.

Development infrastructure, like ``devcluster/``. ``manage.py demo`` writes, for each demo
node not yet registered, ``DIR/<node>.json`` (``{"node": ..., "gpus": "<--fake-gpus spec>"}``)
and a one-time join token in ``DIR/<node>.join``; this starts ``gpu-node-agent`` for each,
keeping each node's token and simulated GPUs under ``STATE/<node>``, so a restart keeps the
layouts. The agents back off until the portal answers. ``manage.py demo`` also writes the demo's
load plan, ``DIR/load.json`` (``gpu_spec.demo_load``): which tenant holds each whole GPU and how
busy it is, as the demo's usage history and simulated Kueue tell it; each agent's fake GPUs
carry that load (``--fake-load``).

With ``--metrics-port`` it also serves, on that port, what NVIDIA's DCGM exporter and
kube-state-metrics would say about the same simulated devices (``gpu_node_agent.testing.demo_metrics``),
for a Prometheus to scrape; ``make run`` starts one when the binary is installed.

    python -m gpu_node_agent.testing.demo --portal http://127.0.0.1:8000 --dir .run/agents \\
        --state-dir .data/agents [--metrics-port 9400]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

from gpu_node_agent.testing.demo_metrics import DEFAULT_PERIOD_S, PLAN_FILE, serve
from gpu_spec.demo_load import DEMO_LOAD_PLAN_FILE


def agent_command(portal: str, spec: Path, state_dir: Path, interval: float) -> list[str]:
    node = json.loads(spec.read_text())
    name = str(node["node"])
    return [
        sys.executable, "-m", "gpu_node_agent",
        "--portal", portal,
        "--node", name,
        "--join-token-file", str(spec.with_suffix(".join")),
        "--backend", "fake",
        "--fake-gpus", str(node["gpus"]),
        "--fake-load", str(spec.with_name(DEMO_LOAD_PLAN_FILE)),
        "--state-dir", str(state_dir / name),
        "--interval", str(interval),
        "--max-backoff", str(max(interval * 3, 10)),
        "--log-level", "WARNING",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_node_agent.testing.demo", description=__doc__
    )
    parser.add_argument("--portal", required=True)
    parser.add_argument("--dir", type=Path, required=True, help="node specs and join tokens")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve DCGM-exporter and kube-state-metrics series of the simulated GPUs here",
    )
    parser.add_argument("--metrics-address", default="127.0.0.1")
    parser.add_argument(
        "--load-period",
        type=float,
        default=DEFAULT_PERIOD_S,
        help="seconds between changes of the simulated utilisation (default %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        parser.error("--metrics-port: a port number from 0 to 65535")
    if args.load_period <= 0:
        parser.error("--load-period: a number of seconds above 0")

    metrics_server = None
    if args.metrics_port is not None:
        try:
            metrics_server, port = serve(
                port=args.metrics_port,
                address=args.metrics_address,
                spec_dir=args.dir,
                state_dir=args.state_dir,
                period_s=args.load_period,
            )
        except OSError as error:
            parser.error(f"--metrics-port {args.metrics_port}: {error.strerror}")
        print(f"demo DCGM exporter: http://{args.metrics_address}:{port}/metrics", flush=True)

    found = sorted(args.dir.glob("*.json")) if args.dir.is_dir() else []
    # The exporter's plan and the load plan are no nodes.
    specs = [spec for spec in found if spec.name not in (PLAN_FILE, DEMO_LOAD_PLAN_FILE)]
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
        if metrics_server is not None:
            metrics_server.shutdown()
        for agent in agents:
            agent.terminate()
        for agent in agents:
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()


if __name__ == "__main__":
    raise SystemExit(main())
