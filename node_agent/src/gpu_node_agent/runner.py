"""The agent's loop and command line: report, fetch the desired layouts, apply, post results.

Every ``--interval`` seconds (jittered by +/-20% so a fleet does not call in step) the agent:

1. reports the node's inventory (``POST /api/v1/agent/report/``, PROTOCOL.md): with report
   protocol 2 (the default) only what changed since the report the portal acknowledged, whole
   at start, when the portal asks and every ``--full-report-every`` seconds
   (``gpu_node_agent.delta``); protocol 1 (``--report-protocol 1``, and by itself against a
   portal that refuses protocol 2) sends every report whole;
2. unless the answer's ``desired_generation`` is 0 (nothing to do), fetches the desired
   layouts (``GET /api/v1/agent/desired/``) and applies each one with
   ``gpu_node_agent.apply`` (posting ``applying`` first when something is to change);
3. posts each result (``POST /api/v1/agent/result/``) and, when something changed, reports
   again so the portal sees the new instances at once.

When the portal cannot be reached, answers 5xx, or refuses the token (401/403), the next try
waits ``interval * 2**failures`` seconds, capped at ``--max-backoff``, with full jitter (a
random point in the upper half of that wait). The state directory keeps the node token
(``node-token``, mode 0600), the applied generation and layout of every GPU and the last result
posted (``agent-state.json``): after a restart the agent does not post a result twice, and a GPU
that lost its instances to a reset or a reboot gets its last applied layout back (GPU instances
do not survive either, notes-mig.md).

Nothing here imports Django; HTTP is the standard library's ``urllib``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import random
import secrets
import signal
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from gpu_node_agent import AGENT_VERSION
from gpu_node_agent.apply import (
    STATE_APPLYING,
    STATE_FAILED,
    STATE_SUCCESS,
    ApplyResult,
    DesiredGpu,
    DesiredLayoutError,
    PodLookup,
    apply_gpu,
    format_plan,
    plan_gpu,
)
from gpu_node_agent.backend import Backend, BackendError
from gpu_node_agent.delta import DEFAULT_FULL_EVERY_S, PROTOCOL, ReportTracker
from gpu_node_agent.device_plugin import (
    DEFAULT_NAMESPACE,
    DEFAULT_SELECTOR,
    RESTART_NEEDED,
    DevicePluginError,
    DevicePluginRestarter,
)
from gpu_node_agent.pods import pod_uid_for_pid
from gpu_node_agent.probe import (
    STATE_RUNNING,
    CudaProber,
    ProbeOutcome,
    Prober,
    ProbeRequest,
    ProbeRequestError,
    SimulatedProber,
)
from gpu_spec.mig.catalogue import Catalogue, load_catalogue
from gpu_spec.report import node_name_problem, validate_report

logger = logging.getLogger("gpu_node_agent")

DEFAULT_STATE_DIR = "/var/lib/gpu-agent"
DEFAULT_INTERVAL = 10.0
DEFAULT_MAX_BACKOFF = 300.0
STATE_FILE = "agent-state.json"
TOKEN_FILE = "node-token"  # noqa: S105 - a file name, not a secret
AGENT_KEY_FILE = "agent-key"


# -- the portal -----------------------------------------------------------------------------------


class PortalError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class PortalUnavailable(PortalError):
    """Not reachable, timed out, or 5xx / 429: try again later."""


class PortalAuthError(PortalError):
    """401 / 403: the token is unknown, revoked, or not this node's."""


class PortalRejected(PortalError):
    """Another 4xx: the portal refused the request itself (its detail says why)."""


class ReportInvalid(PortalError):
    """The agent built a report its own schema refuses (gpu_spec.report): a bug of the agent.
    It is not sent; the message names the fields."""


class ReportAnswer(NamedTuple):
    desired_generation: int
    probes: int  # isolation probes to run (0 from a portal that predates them)
    raw: dict[str, Any] = {}  # the whole answer (protocol 2: ack, full_report, sample_every_s)

    @property
    def full_report(self) -> bool:
        return bool(self.raw.get("full_report"))


class PortalClient:
    """The agent side of PROTOCOL.md, over ``urllib``."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 15.0,
        ca_file: str | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--portal must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def _url(self, path: str) -> str:
        return f"{self.base_url}/api/v1/agent/{path}"

    def _request(
        self, method: str, path: str, body: Any = None, *, authenticate: bool = True
    ) -> Any:
        url = self._url(path)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "User-Agent": f"gpu-agent/{AGENT_VERSION}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if authenticate:
            if not self.token:
                raise PortalAuthError(f"{method} {url}: no node token")
            headers["Authorization"] = f"Bearer {self.token}"
        # S310: the scheme was checked in __init__ (http or https only).
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
        try:
            response = urllib.request.urlopen(request, timeout=self.timeout, context=self._context)  # noqa: S310
            with response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
            error.close()
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise PortalUnavailable(f"{method} {url}: {reason}") from error
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        if 200 <= status < 300:
            return payload
        detail = payload.get("detail", payload) if isinstance(payload, dict) else None
        if detail is None:
            detail = raw[:300].decode(errors="replace")
        message = f"{method} {url}: HTTP {status}: {detail}"
        if status in (401, 403):
            raise PortalAuthError(message, status)
        if status >= 500 or status in (408, 429):
            raise PortalUnavailable(message, status)
        raise PortalRejected(message, status)

    def register(self, join_token: str, hostname: str, agent_key: str = "") -> tuple[str, str]:
        """Exchange a one-time join token for (node name, node token). With ``agent_key`` (the
        agent's own random key, kept in its state directory) the portal answers the same
        request again for a while after the token was used, so a retry after an answer lost
        to a timeout registers instead of being refused; a portal that predates the key (a
        400 naming it) is asked without it."""
        body = {"join_token": join_token, "hostname": hostname, "agent_version": AGENT_VERSION}
        try:
            answer = self._request(
                "POST", "register/", {**body, "agent_key": agent_key} if agent_key else body,
                authenticate=False,
            )  # fmt: skip
        except PortalRejected as error:
            if not agent_key or error.status != 400 or "agent_key" not in str(error):
                raise
            answer = self._request("POST", "register/", body, authenticate=False)
        if not isinstance(answer, dict) or not answer.get("node_token") or not answer.get("node"):
            raise PortalRejected(f"register: unexpected answer {answer!r}")
        return str(answer["node"]), str(answer["node_token"])

    def register_in_cluster(
        self, service_account_token: str, *, cluster: str = "", node: str = "", hostname: str = ""
    ) -> tuple[str, str]:
        """Register with the agent pod's ServiceAccount token instead of a join token: the
        portal asks the cluster (TokenReview) which pod the token is bound to and registers the
        node that pod runs on. ``node``: the node the agent believes it is on (refused when the
        token's pod runs elsewhere); ``cluster``: the portal's name of the cluster."""
        body = {
            "service_account_token": service_account_token,
            "hostname": hostname,
            "agent_version": AGENT_VERSION,
        }
        if cluster:
            body["cluster"] = cluster
        if node:
            body["node"] = node
        answer = self._request("POST", "register/", body, authenticate=False)
        if not isinstance(answer, dict) or not answer.get("node_token") or not answer.get("node"):
            raise PortalRejected(f"register: unexpected answer {answer!r}")
        return str(answer["node"]), str(answer["node_token"])

    def report(self, body: dict[str, Any]) -> ReportAnswer:
        problems = validate_report(body)
        if problems:
            raise ReportInvalid(
                "the agent built a report the schema refuses (not sent): "
                + "; ".join(f"{p.path}: {p.message}" for p in problems[:5])
            )
        answer = self._request("POST", "report/", body)
        answer = answer if isinstance(answer, dict) else {}
        generation, probes = answer.get("desired_generation"), answer.get("probes")
        return ReportAnswer(
            generation if isinstance(generation, int) else 0,
            probes if isinstance(probes, int) else 0,
            answer,
        )

    def probes(self) -> list[ProbeRequest]:
        answer = self._request("GET", "probes/")
        raw = answer.get("probes") if isinstance(answer, dict) else None
        if not isinstance(raw, list):
            raise PortalRejected(f"probes: unexpected answer {answer!r}")
        found = []
        for entry in raw:
            try:
                found.append(ProbeRequest.from_json(entry))
            except ProbeRequestError as error:
                logger.error("ignoring a malformed probe: %s", error)
        return found

    def probe_result(self, probe_id: int, outcome: ProbeOutcome) -> Any:
        return self._request("POST", f"probes/{probe_id}/result/", outcome.to_json())

    def desired(self) -> list[DesiredGpu]:
        answer = self._request("GET", "desired/")
        raw = answer.get("gpus") if isinstance(answer, dict) else None
        if not isinstance(raw, list):
            raise PortalRejected(f"desired: unexpected answer {answer!r}")
        layouts = []
        for entry in raw:
            try:
                layouts.append(DesiredGpu.from_json(entry))
            except DesiredLayoutError as error:
                logger.error("ignoring a malformed desired layout: %s", error)
        return layouts

    def result(self, result: ApplyResult) -> Any:
        return self._request("POST", "result/", result.to_json())


# -- local state ------------------------------------------------------------------------------------


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only (0600)."""
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)


class AgentState:
    """``agent-state.json`` and ``node-token`` in the state directory (in memory when None)."""

    def __init__(self, directory: Path | str | None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.data: dict[str, Any] = {"version": 1, "node": None, "gpus": {}}
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = self.directory / STATE_FILE
            if path.exists():
                try:
                    loaded = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as error:
                    logger.warning(
                        "starting with an empty state: %s is unreadable (%s)", path, error
                    )
                else:
                    if isinstance(loaded, dict) and isinstance(loaded.get("gpus"), dict):
                        self.data = loaded

    def save(self) -> None:
        if self.directory is not None:
            _write_private(self.directory / STATE_FILE, json.dumps(self.data, indent=1) + "\n")

    @property
    def node(self) -> str | None:
        node = self.data.get("node")
        return node if isinstance(node, str) else None

    @node.setter
    def node(self, value: str) -> None:
        self.data["node"] = value

    def _gpu(self, uuid: str) -> dict[str, Any]:
        gpus: dict[str, Any] = self.data.setdefault("gpus", {})
        return gpus.setdefault(uuid, {})

    def applied_generation(self, uuid: str) -> int:
        value = self.data.get("gpus", {}).get(uuid, {}).get("applied_generation", 0)
        return value if isinstance(value, int) else 0

    def record_applied(self, desired: DesiredGpu) -> None:
        gpu = self._gpu(desired.uuid)
        gpu["applied_generation"] = desired.generation
        gpu["layout"] = desired.to_json()
        self.save()

    def saved_layout(self, uuid: str) -> DesiredGpu | None:
        raw = self.data.get("gpus", {}).get(uuid, {}).get("layout")
        if raw is None:
            return None
        try:
            return DesiredGpu.from_json(raw)
        except DesiredLayoutError:
            return None

    def last_result(self, uuid: str) -> dict[str, Any] | None:
        value = self.data.get("gpus", {}).get(uuid, {}).get("last_result")
        return value if isinstance(value, dict) else None

    def record_result(self, result: ApplyResult, *, posted: bool) -> None:
        self._gpu(result.uuid)["last_result"] = {
            "generation": result.generation,
            "state": result.state,
            "message": result.message,
            "posted": posted,
        }
        self.save()

    def read_token(self) -> str | None:
        if self.directory is None:
            return None
        path = self.directory / TOKEN_FILE
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return token or None

    def write_token(self, token: str, *, join_token: str | None = None) -> None:
        """Keep the node token (and which join token bought it, so that it is not spent
        twice)."""
        if join_token is not None:
            self.data["join_token_sha256"] = hashlib.sha256(join_token.encode()).hexdigest()
            self.save()
        if self.directory is not None:
            _write_private(self.directory / TOKEN_FILE, token + "\n")

    def agent_key(self) -> str:
        """This agent's registration key: random, made once and kept (0600) in the state
        directory, so that a retried registration (after a restart too) sends the same one.
        Empty without a state directory (the portal then treats a join token as one-time)."""
        if self.directory is None:
            return ""
        path = self.directory / AGENT_KEY_FILE
        with contextlib.suppress(OSError):
            key = path.read_text(encoding="utf-8").strip()
            if key:
                return key
        key = secrets.token_urlsafe(32)
        _write_private(path, key + "\n")
        return key

    def join_token_used(self, join_token: str) -> bool:
        return self.data.get("join_token_sha256") == hashlib.sha256(join_token.encode()).hexdigest()


# -- the agent ----------------------------------------------------------------------------------


def _utc_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _percent(value: int | None) -> int | None:
    return None if value is None else max(0, min(100, value))


@dataclasses.dataclass(frozen=True)
class InClusterJoin:
    """Joining as a Kubernetes identity: the ServiceAccount token the kubelet projects into the
    agent's pod (audience: the portal's), read from ``token_file`` at each use since the kubelet
    rotates it; ``cluster``, the portal's name of the cluster (optional where the portal reaches
    one); ``node``, the node the pod runs on (the downward API's spec.nodeName), sent as a claim
    the portal checks against the token's."""

    token_file: Path
    cluster: str = ""
    node: str = ""

    def token(self) -> str | None:
        """The token now in the file; None while there is none (not in a cluster)."""
        try:
            return self.token_file.read_text(encoding="utf-8").strip() or None
        except OSError:
            return None

    def register(self, client: PortalClient) -> tuple[str, str]:
        token = self.token()
        if token is None:
            raise PortalAuthError(f"no ServiceAccount token in {self.token_file}")
        return client.register_in_cluster(
            token, cluster=self.cluster, node=self.node, hostname=socket.gethostname()
        )


class Agent:
    """One node's agent. ``sleep``, ``random`` and ``now`` are injectable for tests."""

    def __init__(
        self,
        *,
        backend: Backend,
        client: PortalClient,
        state: AgentState,
        node: str,
        interval: float = DEFAULT_INTERVAL,
        max_backoff: float = DEFAULT_MAX_BACKOFF,
        dry_run: bool = False,
        catalogue: Catalogue | None = None,
        pod_lookup: PodLookup = pod_uid_for_pid,
        join_token: str | None = None,
        in_cluster: InClusterJoin | None = None,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = random.random,
        now: Callable[[], str] = _utc_now,
        out: TextIO | None = None,
        prober: Prober | None = None,
        device_plugin: DevicePluginRestarter | None = None,
        report_protocol: int = PROTOCOL,
        full_report_every: float = DEFAULT_FULL_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.client = client
        self.state = state
        self.node = node
        self.interval = interval
        self.max_backoff = max_backoff
        self.dry_run = dry_run
        self.catalogue = catalogue if catalogue is not None else load_catalogue()
        self.pod_lookup = pod_lookup
        self.join_token = join_token
        self.in_cluster = in_cluster
        self._sleep = sleep
        self._random = random
        self._now = now
        self.out = out if out is not None else sys.stdout
        self.failures = 0
        self._restored = False
        self._gave_up: set[tuple[str, int]] = set()
        self.prober: Prober = prober if prober is not None else CudaProber()
        self.device_plugin = device_plugin
        self._changed: list[ApplyResult] = []  # successes waiting for the device plugin
        self._probe_outcomes: dict[int, ProbeOutcome] = {}  # run, not posted yet
        # Protocol 2: what the portal acknowledged (None: protocol 1, every report whole).
        self.tracker: ReportTracker | None = (
            ReportTracker(full_every_s=full_report_every, clock=clock)
            if report_protocol >= PROTOCOL
            else None
        )

    # -- inventory --------------------------------------------------------------------------------

    def _process(
        self, pid: int, used_memory_mib: int | None, sm_util_pct: int | None = None
    ) -> dict[str, Any]:
        found = {"pid": pid, "used_memory_mib": used_memory_mib, "pod_uid": self.pod_lookup(pid)}
        if sm_util_pct is not None:
            found["sm_util_pct"] = sm_util_pct
        return found

    def inventory(self) -> dict[str, Any]:
        """The report body (PROTOCOL.md), exactly the fields the portal accepts."""
        gpus = []
        for gpu in self.backend.list_gpus():
            entry: dict[str, Any] = {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "name": gpu.name,
                "memory_total_mib": gpu.memory_total_mib,
                "memory_used_mib": gpu.memory_used_mib,
                "utilization_pct": None if gpu.mig_mode_current else _percent(gpu.utilization_pct),
                "mig_mode_current": gpu.mig_mode_current,
                "mig_mode_pending": gpu.mig_mode_pending,
                "applied_generation": self.state.applied_generation(gpu.uuid),
                "instances": [],
                "processes": [],
            }
            if gpu.mig_mode_current:
                entry["instances"] = [
                    {
                        "gi_id": instance.gi_id,
                        "profile": instance.profile,
                        "start": instance.start,
                        "size": instance.size,
                        "ci_ids": list(instance.ci_ids),
                        "memory_used_mib": instance.memory_used_mib or 0,
                        "utilization_pct": None,  # NVML has none per MIG instance (notes-mig.md)
                        "processes": [
                            self._process(p.pid, p.used_memory_mib) for p in instance.processes
                        ],
                    }
                    for instance in self.backend.list_gpu_instances(gpu.index)
                ]
            else:
                entry["processes"] = [
                    self._process(p.pid, p.used_memory_mib, p.sm_util_pct)
                    for p in self.backend.list_processes(gpu.index)
                ]
            gpus.append(entry)
        return {
            "node": self.node,
            "sent_at": self._now(),
            "agent_version": AGENT_VERSION,
            "driver_version": self.backend.driver_version(),
            "gpus": gpus,
        }

    # -- one cycle ----------------------------------------------------------------------------------

    def cycle(self) -> None:
        """Report, fetch, apply, post. Raises ``PortalError`` / ``BackendError`` on failure."""
        if not self._restored:
            self.restore_after_reset()
            self._restored = True
        if self.dry_run:
            self.print_plans()
            return
        answer = self.report()
        changed = False
        if answer.desired_generation:
            for desired in self.client.desired():
                changed = self.handle(desired) or changed
        self.post_changed()
        if answer.probes:
            for probe in self.client.probes():
                self.probe(probe)
        if changed:
            self.report()

    def report(self) -> ReportAnswer:
        """One report (protocol 2: what changed since the acknowledged one), and at once a full
        one when the portal asks for it. A portal that refuses protocol 2 (400: it predates it)
        gets protocol 1 from then on."""
        if self.tracker is None:
            return self.client.report(self.inventory())
        tracker = self.tracker
        for _ in range(2):  # a change report, then (when asked) a full one
            inventory = self.inventory()
            body = tracker.body(inventory)
            try:
                answer = self.client.report(body)
            except PortalRejected as error:
                tracker.lost()
                if error.status != 400 or "protocol" not in str(error):
                    raise
                logger.warning(
                    "the portal refuses report protocol 2 (%s): sending protocol 1", error
                )
                self.tracker = None
                return self.client.report(inventory)
            except PortalError:
                tracker.lost()
                raise
            tracker.answered(answer.raw)
            if not answer.full_report:
                return answer
        return answer

    def print_plans(self) -> None:
        """``--dry-run``: what the pending layouts would change; nothing is changed or posted."""
        layouts = self.client.desired()
        if not layouts:
            print(f"{self.node}: no layout pending", file=self.out)
        for desired in layouts:
            plan = plan_gpu(
                self.backend, desired, catalogue=self.catalogue, pod_uid_for_pid=self.pod_lookup
            )
            print(format_plan(plan), file=self.out)

    def handle(self, desired: DesiredGpu) -> bool:
        """Apply one desired layout and post the result; True when the GPU was changed."""
        key = (desired.uuid, desired.generation)
        if key in self._gave_up:
            # It failed half-way once; the portal decides whether to try again (a new
            # generation). Only make sure it heard about it.
            last = self.state.last_result(desired.uuid)
            if last is not None and not last.get("posted"):
                self.post(
                    ApplyResult(desired.uuid, desired.generation, last["state"], last["message"])
                )
            return False

        def applying() -> None:
            self.post(ApplyResult(desired.uuid, desired.generation, STATE_APPLYING, ""))

        try:
            result = apply_gpu(
                self.backend,
                desired,
                catalogue=self.catalogue,
                pod_uid_for_pid=self.pod_lookup,
                on_applying=applying,
            )
        except BackendError as error:
            result = ApplyResult(
                desired.uuid, desired.generation, STATE_FAILED, error.message, True
            )
        except PortalError:
            raise
        except Exception as error:  # a bug must not stop the agent; the portal hears of it
            logger.exception("applying generation %s to %s", desired.generation, desired.uuid)
            result = ApplyResult(
                desired.uuid, desired.generation, STATE_FAILED, f"agent error: {error!r}", True
            )
        log = logger.info if result.state == STATE_SUCCESS else logger.warning
        log(
            "GPU %s generation %s: %s %s",
            desired.uuid,
            desired.generation,
            result.state,
            result.message,
        )
        if result.state == STATE_SUCCESS:
            self.state.record_applied(desired)
        elif result.state == STATE_FAILED and result.attempted_changes:
            self._gave_up.add(key)
        if result.state == STATE_SUCCESS and result.attempted_changes:
            self._changed.append(result)  # posted by post_changed, after the device plugin
        else:
            self.post(result)
        return result.attempted_changes

    def post_changed(self) -> None:
        """Post the successes that changed instances, with the device plugin's state: restarted
        once for all of them (it lists devices when it starts) with ``--restart-device-plugin``,
        else ``restart-needed``."""
        changed, self._changed = self._changed, []
        if not changed:
            return
        gpus = ", ".join(r.uuid for r in changed)
        if self.device_plugin is None:
            state = RESTART_NEEDED
            message = (
                f"the NVIDIA device plugin on {self.node} still advertises the old devices of "
                f"{gpus}: restart its pod (or start the agent with --restart-device-plugin)"
            )
        else:
            outcome = self.device_plugin.restart()
            state, message = outcome.state, outcome.message
            log = logger.info if state != "restart-failed" else logger.error
            log("device plugin: %s: %s", state, message)
        for result in changed:
            self.post(
                dataclasses.replace(result, device_plugin=state, device_plugin_message=message)
            )

    def probe(self, request: ProbeRequest) -> None:
        """Run one isolation probe (``running`` posted first) and post its outcome; an
        outcome the portal did not get is posted again, not measured again."""
        outcome = self._probe_outcomes.get(request.id)
        if outcome is None:
            self.client.probe_result(request.id, ProbeOutcome(STATE_RUNNING))
            try:
                outcome = self.prober.run(self.backend, request)
            except BackendError as error:
                outcome = ProbeOutcome("failed", f"NVML: {error.message}")
            logger.info(
                "probe %s of GPU %s: %s %s",
                request.id,
                request.uuid,
                outcome.state,
                outcome.message,
            )
            self._probe_outcomes[request.id] = outcome
        self.client.probe_result(request.id, outcome)
        del self._probe_outcomes[request.id]

    def post(self, result: ApplyResult) -> None:
        """Post a result unless this very result was posted already (restarts, re-checks)."""
        last = self.state.last_result(result.uuid)
        if (
            last is not None
            and last.get("posted")
            and (last.get("generation"), last.get("state"), last.get("message"))
            == (result.generation, result.state, result.message)
        ):
            return
        try:
            self.client.result(result)
        except PortalError:
            self.state.record_result(result, posted=False)
            raise
        self.state.record_result(result, posted=True)

    def restore_after_reset(self) -> None:
        """At start: a MIG GPU with no instances at all that had a layout applied lost it to a
        reset or a reboot (instances are not persistent); re-create that layout."""
        for gpu in self.backend.list_gpus():
            saved = self.state.saved_layout(gpu.uuid)
            if saved is None or not saved.mig_enabled or not saved.instances:
                continue
            if not gpu.mig_mode_current or self.backend.list_gpu_instances(gpu.index):
                continue
            logger.warning(
                "GPU %s (%s) has none of the %s GPU instances of generation %s (a reset or a "
                "reboot?): re-creating them",
                gpu.index,
                gpu.uuid,
                len(saved.instances),
                saved.generation,
            )
            if self.dry_run:
                plan = plan_gpu(self.backend, saved, catalogue=self.catalogue)
                print("restore " + format_plan(plan), file=self.out)
                continue
            result = apply_gpu(
                self.backend, saved, catalogue=self.catalogue, pod_uid_for_pid=self.pod_lookup
            )
            logger.warning("restoring GPU %s: %s %s", gpu.uuid, result.state, result.message)

    # -- the loop ------------------------------------------------------------------------------------

    def delay(self, ok: bool) -> float:
        """Seconds until the next cycle: the interval +/-20%, or the capped exponential backoff
        with full jitter after ``self.failures`` failures in a row."""
        if ok:
            return self.interval * (0.8 + 0.4 * self._random())
        ceiling = min(self.max_backoff, self.interval * 2**self.failures)
        return ceiling * (0.5 + 0.5 * self._random())

    def reregister(self) -> bool:
        """After a 401: the pod's ServiceAccount token (read afresh: the kubelet rotates it), or
        a join token not used yet, replaces a revoked node token."""
        if self.in_cluster is not None and self.in_cluster.token() is not None:
            node, token = self.in_cluster.register(self.client)
            self.state.write_token(token)
            self.state.node = node
            self.state.save()
            self.client.token, self.node = token, node
            logger.warning("registered again as node %s with the pod's ServiceAccount token", node)
            return True
        if not self.join_token or self.state.join_token_used(self.join_token):
            return False
        node, token = self.client.register(self.join_token, self.node, self.state.agent_key())
        self.state.write_token(token, join_token=self.join_token)
        self.state.node = node
        self.state.save()
        self.client.token, self.node = token, node
        logger.warning("registered again as node %s with the new join token", node)
        return True

    def run_cycle(self) -> bool:
        """One cycle, its failure logged; True when it went through."""
        try:
            self.cycle()
        except PortalAuthError as error:
            logger.error(
                "the portal refused the node token (%s); ask an admin for a new join token", error
            )
            with contextlib.suppress(PortalError):
                if self.reregister():
                    return self.run_cycle()
        except PortalUnavailable as error:
            logger.warning("the portal is unavailable: %s", error)
        except PortalRejected as error:
            logger.error("the portal refused a request: %s", error)
        except BackendError as error:
            logger.error("NVML: %s", error.message)
        else:
            self.failures = 0
            return True
        self.failures += 1
        return False

    def run(self, *, once: bool = False, max_cycles: int | None = None) -> int:
        """Cycle until stopped (or once); the exit status of the last cycle."""
        cycles = 0
        while True:
            ok = self.run_cycle()
            cycles += 1
            if once or (max_cycles is not None and cycles >= max_cycles):
                return 0 if ok else 1
            wait = self.delay(ok)
            if not ok:
                logger.info("retrying in %.1f s (failure %s in a row)", wait, self.failures)
            self._sleep(wait)


# -- command line -----------------------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="gpu-node-agent",
        description="The GPU node agent: reports this node's GPUs and MIG instances to the "
        "portal and applies the MIG layouts it asks for (PROTOCOL.md). Every option can also "
        "be set with the GPU_AGENT_* variable named in its help.",
    )
    parser.add_argument(
        "--portal",
        default=env("GPU_AGENT_PORTAL"),
        help="portal base URL, e.g. https://portal.example.org (GPU_AGENT_PORTAL)",
    )
    parser.add_argument(
        "--token", default=env("GPU_AGENT_TOKEN"), help="node token (GPU_AGENT_TOKEN)"
    )
    parser.add_argument(
        "--token-file",
        default=env("GPU_AGENT_TOKEN_FILE"),
        help="file holding the node token, e.g. a mounted Secret (GPU_AGENT_TOKEN_FILE)",
    )
    parser.add_argument(
        "--join-token",
        default=env("GPU_AGENT_JOIN_TOKEN"),
        help="one-time join token: registers the node and saves its token in the state directory (GPU_AGENT_JOIN_TOKEN)",
    )
    parser.add_argument(
        "--join-token-file",
        default=env("GPU_AGENT_JOIN_TOKEN_FILE"),
        help="file holding the join token; a missing file is fine once the node is registered "
        "(GPU_AGENT_JOIN_TOKEN_FILE)",
    )
    parser.add_argument(
        "--service-account-token-file",
        default=env("GPU_AGENT_SERVICE_ACCOUNT_TOKEN_FILE"),
        help="in a cluster: the pod's projected ServiceAccount token (audience: the portal's, "
        "e.g. /var/run/secrets/gpu-portal/token); with no node token yet the agent registers "
        "with it instead of a join token, and again whenever the portal refuses its node token "
        "(GPU_AGENT_SERVICE_ACCOUNT_TOKEN_FILE)",
    )
    parser.add_argument(
        "--cluster",
        default=env("GPU_AGENT_CLUSTER", ""),
        help="with --service-account-token-file: the portal's name of this cluster (needed "
        "when the portal reaches several) (GPU_AGENT_CLUSTER)",
    )
    parser.add_argument(
        "--node",
        default=env("GPU_AGENT_NODE"),
        help="node name (default: the registered name, else the hostname) (GPU_AGENT_NODE)",
    )
    parser.add_argument(
        "--backend",
        choices=("nvml", "fake"),
        default=env("GPU_AGENT_BACKEND", "nvml"),
        help="nvml: the GPUs through pynvml (nvidia-ml-py); fake: simulated GPUs (GPU_AGENT_BACKEND)",
    )
    parser.add_argument(
        "--fake-gpus",
        default=env("GPU_AGENT_FAKE_GPUS"),
        help='with --backend fake: "NAME[:COUNT[:nomig]],...", e.g. "NVIDIA A100-SXM4-80GB:2,NVIDIA H100 80GB HBM3:2" (GPU_AGENT_FAKE_GPUS)',
    )
    parser.add_argument(
        "--fake-load",
        default=env("GPU_AGENT_FAKE_LOAD"),
        help="with --backend fake: a demo load plan (JSON, gpu_spec.demo_load) that gives the simulated GPUs their utilisation and memory in use (GPU_AGENT_FAKE_LOAD)",
    )
    parser.add_argument(
        "--state-dir",
        default=env("GPU_AGENT_STATE_DIR", DEFAULT_STATE_DIR),
        help=f"token, applied generations, fake GPUs (default {DEFAULT_STATE_DIR}) (GPU_AGENT_STATE_DIR)",
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        default=env("GPU_AGENT_INTERVAL", str(DEFAULT_INTERVAL)),
        help="seconds between cycles, jittered +/-20%% (default 10) (GPU_AGENT_INTERVAL)",
    )
    parser.add_argument(
        "--report-protocol",
        type=int,
        choices=(1, 2),
        default=env("GPU_AGENT_REPORT_PROTOCOL", str(PROTOCOL)),
        help="2 (default): report what changed since the report the portal acknowledged; 1: "
        "every report whole, for a portal that predates protocol 2 (GPU_AGENT_REPORT_PROTOCOL)",
    )
    parser.add_argument(
        "--full-report-every",
        type=_positive_float,
        default=env("GPU_AGENT_FULL_REPORT_EVERY", str(DEFAULT_FULL_EVERY_S)),
        help="protocol 2: a full report at least this often, seconds (default 600) "
        "(GPU_AGENT_FULL_REPORT_EVERY)",
    )
    parser.add_argument(
        "--max-backoff",
        type=_positive_float,
        default=env("GPU_AGENT_MAX_BACKOFF", str(DEFAULT_MAX_BACKOFF)),
        help="longest wait after failures, seconds (default 300) (GPU_AGENT_MAX_BACKOFF)",
    )
    parser.add_argument(
        "--ca-file",
        default=env("GPU_AGENT_CA_FILE"),
        help="CA bundle for the portal's certificate (GPU_AGENT_CA_FILE)",
    )
    parser.add_argument(
        "--once", action="store_true", help="run one cycle and exit (status 1 if it failed)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the pending layouts would change; change nothing, post nothing",
    )
    parser.add_argument(
        "--restart-device-plugin",
        action="store_true",
        default=env("GPU_AGENT_RESTART_DEVICE_PLUGIN", "") in ("1", "true", "yes"),
        help="after changing MIG instances, delete the NVIDIA device plugin's pod on this node "
        "(in-cluster credentials; its DaemonSet starts a new one that advertises the new "
        "devices); without it the agent only reports restart-needed "
        "(GPU_AGENT_RESTART_DEVICE_PLUGIN=1)",
    )
    parser.add_argument(
        "--device-plugin-namespace",
        default=env("GPU_AGENT_DEVICE_PLUGIN_NAMESPACE", DEFAULT_NAMESPACE),
        help=f"(default {DEFAULT_NAMESPACE}) (GPU_AGENT_DEVICE_PLUGIN_NAMESPACE)",
    )
    parser.add_argument(
        "--device-plugin-selector",
        default=env("GPU_AGENT_DEVICE_PLUGIN_SELECTOR", DEFAULT_SELECTOR),
        help=f"label selector of its pods (default {DEFAULT_SELECTOR}) "
        "(GPU_AGENT_DEVICE_PLUGIN_SELECTOR)",
    )
    parser.add_argument(
        "--kubernetes-node",
        default=env("GPU_AGENT_KUBERNETES_NODE") or env("NODE_NAME"),
        help="this node's Kubernetes name, for the device plugin's pod (default: NODE_NAME, "
        "else the agent's node name) (GPU_AGENT_KUBERNETES_NODE)",
    )
    parser.add_argument(
        "--log-level",
        default=env("GPU_AGENT_LOG_LEVEL", "INFO"),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="(GPU_AGENT_LOG_LEVEL)",
    )
    return parser


def _register(
    client: PortalClient,
    state: AgentState,
    join_token: str | None,
    hostname: str,
    *,
    sleep: Callable[[float], None],
    max_backoff: float,
    in_cluster: InClusterJoin | None = None,
) -> tuple[str, str]:
    """Register with the pod's ServiceAccount token (``in_cluster``), else ``join_token``,
    retrying while the portal (or the cluster it asks) is unavailable."""
    failures = 0
    while True:
        try:
            if in_cluster is not None:
                node, token = in_cluster.register(client)
            else:
                assert join_token is not None
                node, token = client.register(join_token, hostname, state.agent_key())
        except PortalUnavailable as error:
            failures += 1
            jitter = random.random()  # noqa: S311 - jitter, not a secret
            wait = min(max_backoff, 2.0**failures) * (0.5 + 0.5 * jitter)
            logger.warning(
                "registering: the portal is unavailable (%s); retrying in %.1f s", error, wait
            )
            sleep(wait)
            continue
        state.write_token(token, join_token=None if in_cluster is not None else join_token)
        state.node = node
        state.save()
        how = "the pod's ServiceAccount token" if in_cluster is not None else "a join token"
        logger.info("registered as node %s with %s; token saved in %s", node, how, state.directory)
        return node, token


def main(argv: Sequence[str] | None = None, *, sleep: Callable[[float], None] = time.sleep) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.portal:
        parser.error("--portal (or GPU_AGENT_PORTAL) is required")
    try:
        client = PortalClient(args.portal, ca_file=args.ca_file)
    except ValueError as error:
        parser.error(str(error))
    state = AgentState(args.state_dir)

    token = args.token
    if not token and args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            parser.error(f"--token-file: {error}")
    token = token or state.read_token()
    join_token = args.join_token
    if not join_token and args.join_token_file:
        with contextlib.suppress(OSError):  # a Secret key a registered node may lack
            join_token = Path(args.join_token_file).read_text(encoding="utf-8").strip() or None
    for flag, value in (("--node", args.node), ("--kubernetes-node", args.kubernetes_node)):
        if value and (problem := node_name_problem(value)):
            parser.error(f"{flag}: {problem}")
    # Without a name: the host's, lower-cased as the kubelet names its Node.
    node = args.node or state.node or socket.gethostname().lower()
    if args.backend == "fake":
        # Checked before registering: a join token is spent only on a start that can go on.
        from gpu_spec.simulated import FakeSpecError, parse_fake_gpus

        if not args.fake_gpus:
            parser.error("--backend fake needs --fake-gpus (or GPU_AGENT_FAKE_GPUS)")
        try:
            parse_fake_gpus(args.fake_gpus)
        except FakeSpecError as error:
            parser.error(f"--fake-gpus: {error}")
    if not token and args.dry_run:
        parser.error("--dry-run needs a node token (a dry run does not register the node)")
    in_cluster = None
    if args.service_account_token_file:
        in_cluster = InClusterJoin(
            Path(args.service_account_token_file),
            cluster=args.cluster,
            node=args.kubernetes_node or args.node or "",
        )
    if not token:
        use_in_cluster = in_cluster if in_cluster is not None and in_cluster.token() else None
        if not join_token and use_in_cluster is None:
            parser.error(
                "no node token: pass --token / --token-file, or --join-token / "
                "--join-token-file to register"
                + (
                    f" (no ServiceAccount token in {args.service_account_token_file})"
                    if in_cluster is not None
                    else ""
                )
            )
        try:
            node, token = _register(
                client, state, join_token, node, sleep=sleep, max_backoff=args.max_backoff,
                in_cluster=use_in_cluster,
            )  # fmt: skip
        except PortalAuthError as error:
            if use_in_cluster is not None:
                logger.error("the portal refused the pod's ServiceAccount token: %s", error)
            else:
                logger.error(
                    "the join token was refused (used or expired): ask an admin for a new one"
                )
            return 2
        except PortalRejected as error:
            logger.error("registering failed: %s", error)
            return 2
    client.token = token

    pod_lookup: PodLookup = pod_uid_for_pid
    restarter = None
    if args.restart_device_plugin:
        try:
            restarter = DevicePluginRestarter.in_cluster(
                node=args.kubernetes_node or node,
                namespace=args.device_plugin_namespace,
                selector=args.device_plugin_selector,
            )
        except DevicePluginError as error:
            logger.error("%s", error)
            return 2
    prober: Prober = CudaProber()
    try:
        backend: Backend
        if args.backend == "fake":
            from gpu_node_agent.testing.fake import STATE_FILE as FAKE_STATE_FILE
            from gpu_node_agent.testing.fake import build_fake_node

            fake = build_fake_node(
                args.fake_gpus,
                state_path=Path(args.state_dir) / FAKE_STATE_FILE,
                seed=node,
                load_plan=Path(args.fake_load) if args.fake_load else None,
            )
            backend, pod_lookup = fake.backend, fake.pod_uid_for_pid
            prober = SimulatedProber(seed=node)
        else:
            from gpu_node_agent.nvml import NvmlBackend, load_pynvml

            backend = NvmlBackend(load_pynvml())
    except BackendError as error:
        logger.error("%s", error.message)
        return 2

    agent = Agent(
        backend=backend,
        client=client,
        state=state,
        node=node,
        interval=args.interval,
        max_backoff=args.max_backoff,
        dry_run=args.dry_run,
        pod_lookup=pod_lookup,
        join_token=join_token,
        in_cluster=in_cluster,
        sleep=sleep,
        prober=prober,
        device_plugin=restarter,
        report_protocol=args.report_protocol,
        full_report_every=args.full_report_every,
    )
    previous: Any = None
    with contextlib.suppress(ValueError):  # only the main thread may set handlers
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return agent.run(once=args.once or args.dry_run)
    except KeyboardInterrupt:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
