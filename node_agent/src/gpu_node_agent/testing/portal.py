"""An in-memory portal and an agent wired to it, for the agent's tests (here and in the
portal's repository): the portal side of PROTOCOL.md over real HTTP on 127.0.0.1, tokens,
reports, pending layouts, results and probes, and a fake node's agent whose waits are recorded
instead of slept."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpu_node_agent.runner import Agent, AgentState, PortalClient
from gpu_node_agent.testing.fake import STATE_FILE as FAKE_STATE_FILE
from gpu_node_agent.testing.fake import FakeNode, build_fake_node
from gpu_spec.report import validate_report

NODE = "gpu-node-1"
TOKEN = "node-token-1"  # noqa: S105 (the fake portal's first node token)
A100 = "NVIDIA A100-SXM4-80GB"

# The fields the portal's report serializers accept, no more (it refuses unknown ones).
REPORT_KEYS = {"node", "sent_at", "agent_version", "driver_version", "gpus"}
GPU_KEYS = {
    "uuid",
    "index",
    "name",
    "memory_total_mib",
    "memory_used_mib",
    "utilization_pct",
    "mig_mode_current",
    "mig_mode_pending",
    "applied_generation",
    "instances",
    "processes",
}
INSTANCE_KEYS = {
    "gi_id",
    "profile",
    "start",
    "size",
    "ci_ids",
    "memory_used_mib",
    "utilization_pct",
    "processes",
}
PROCESS_KEYS = {"pid", "used_memory_mib", "pod_uid"}
PROCESS_OPTIONAL = {"sm_util_pct"}  # outside MIG, where NVML has a sample


def _process_keys_ok(process: Any) -> bool:
    return PROCESS_KEYS <= set(process) <= PROCESS_KEYS | PROCESS_OPTIONAL


def _shape_errors(report: Any) -> list[str]:
    errors = []
    if set(report) != REPORT_KEYS:
        errors.append(f"report keys {sorted(report)}")
    for gpu in report.get("gpus", []):
        if set(gpu) != GPU_KEYS:
            errors.append(f"gpu keys {sorted(gpu)}")
        for process in gpu.get("processes", []):
            if not _process_keys_ok(process):
                errors.append(f"process keys {sorted(process)}")
        for instance in gpu.get("instances", []):
            if set(instance) != INSTANCE_KEYS:
                errors.append(f"instance keys {sorted(instance)}")
            for process in instance.get("processes", []):
                if not _process_keys_ok(process):
                    errors.append(f"process keys {sorted(process)}")
    return errors


class FakePortal:
    """The portal side of PROTOCOL.md, in memory: tokens, reports, pending layouts, results.
    Like the portal, a layout leaves the desired list once a final result arrives."""

    def __init__(self) -> None:
        self.tokens = {TOKEN: NODE}
        self.join_tokens = {"join-1": NODE}
        # ServiceAccount tokens the cluster would vouch for (token -> node): reusable.
        self.service_account_tokens: dict[str, str] = {}
        self.layouts: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.reports: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.down_with: int | None = None  # answer every request with this status
        self.register_bodies: list[dict[str, Any]] = []
        self.knows_agent_key = True  # False: a portal that predates the key refuses the field
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                portal.handle(self, "GET")

            def do_POST(self) -> None:
                portal.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_layout(
        self, uuid: str, generation: int, *pairs: tuple[str, int], mig: bool = True
    ) -> None:
        self.layouts[uuid] = {
            "uuid": uuid,
            "generation": generation,
            "mig_enabled": mig,
            "instances": [{"profile": p, "start": s} for p, s in pairs],
        }

    def report_answer(self) -> dict[str, Any]:
        top = max((layout["generation"] for layout in self.layouts.values()), default=0)
        return {"desired_generation": top}

    def paths(self) -> list[str]:
        return [f"{method} {path.removeprefix('/api/v1/agent/')}" for method, path in self.requests]

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body: Any = json.loads(request.rfile.read(length)) if length else None
        self.requests.append((method, request.path))

        def answer(status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            request.send_response(status)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)

        if self.down_with is not None:
            return answer(self.down_with, {"detail": "Service unavailable."})
        route = (method, request.path)
        if route == ("POST", "/api/v1/agent/register/"):
            self.register_bodies.append(body)
            if not self.knows_agent_key and "agent_key" in body:
                return answer(400, {"detail": "agent_key: Unknown field."})
            if "service_account_token" in body:
                node = self.service_account_tokens.get(body["service_account_token"])
                if node is None:
                    return answer(401, {"detail": "The cluster did not accept the token."})
                if body.get("node") and body["node"] != node:
                    return answer(403, {"detail": f"The token's pod runs on node {node}."})
                token = f"node-token-{len(self.tokens) + 1}"
                self.tokens[token] = node
                return answer(201, {"node": node, "node_token": token})
            node = self.join_tokens.pop(body.get("join_token"), None)
            if node is None:
                return answer(401, {"detail": "Unknown, used or expired join token."})
            token = f"node-token-{len(self.tokens) + 1}"
            self.tokens[token] = node
            return answer(201, {"node": node, "node_token": token})
        auth = request.headers.get("Authorization", "")
        node = self.tokens.get(auth.removeprefix("Bearer "))
        if node is None:
            return answer(401, {"detail": "Invalid token."})
        if route == ("POST", "/api/v1/agent/report/"):
            errors = _shape_errors(body) + [f"{p.path}: {p.message}" for p in validate_report(body)]
            if errors:
                return answer(400, {"detail": errors})
            if body["node"] != node:
                return answer(403, {"detail": "Not your node."})
            self.reports.append(body)
            return answer(200, self.report_answer())
        if route == ("GET", "/api/v1/agent/desired/"):
            return answer(200, {"node": node, "gpus": list(self.layouts.values())})
        if route == ("POST", "/api/v1/agent/result/"):
            self.results.append(body)
            layout = self.layouts.get(body["uuid"])
            if (
                body["state"] != "applying"
                and layout
                and layout["generation"] == body["generation"]
            ):
                del self.layouts[body["uuid"]]
            return answer(200, {**body, "accepted": True, "detail": ""})
        return answer(404, {"detail": "Not found."})


class Clock:
    """Records the waits instead of sleeping."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def fake_node(state_dir: Path, spec: str = f"{A100}:2") -> FakeNode:
    return build_fake_node(spec, state_path=state_dir / FAKE_STATE_FILE, seed=NODE)


def make_agent(
    url: str,
    state_dir: Path,
    node: FakeNode,
    *,
    token: str = TOKEN,
    random: Callable[[], float] = lambda: 0.5,
    **options: Any,
) -> tuple[Agent, Clock]:
    """An agent of the fake portal, which speaks report protocol 1 (every report whole):
    these tests are about the loop; protocol 2 is tested against the portal itself
    (tests/gpu_agent/test_report_protocol.py)."""
    options.setdefault("report_protocol", 1)
    clock = Clock()
    agent = Agent(
        backend=node.backend,
        client=PortalClient(url, token=token, timeout=5),
        state=AgentState(state_dir),
        node=NODE,
        pod_lookup=node.pod_uid_for_pid,
        sleep=clock,
        random=random,
        **options,
    )
    return agent, clock


class ProbingPortal(FakePortal):
    """FakePortal plus the probe endpoints of PROTOCOL.md."""

    def __init__(self) -> None:
        self.probes: dict[int, dict[str, Any]] = {}
        self.probe_results: list[tuple[int, dict[str, Any]]] = []
        super().__init__()

    def handle(self, request: Any, method: str) -> None:
        route = request.path.removeprefix("/api/v1/agent/")
        if method == "GET" and route == "probes/":
            return self._answer(request, {"node": NODE, "probes": list(self.probes.values())})
        found = re.fullmatch(r"probes/(\d+)/result/", route)
        if method == "POST" and found:
            body = json.loads(request.rfile.read(int(request.headers["Content-Length"])))
            probe_id = int(found.group(1))
            self.requests.append((method, request.path))
            self.probe_results.append((probe_id, body))
            if body["state"] != "running":
                self.probes.pop(probe_id, None)
            return self._answer(request, {"id": probe_id, "accepted": True})
        return super().handle(request, method)

    def report_answer(self) -> dict[str, Any]:
        return super().report_answer() | {"probes": len(self.probes)}

    def _answer(self, request: Any, payload: Any) -> None:
        if request.command == "GET":
            self.requests.append(("GET", request.path))
        data = json.dumps(payload).encode()
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)
