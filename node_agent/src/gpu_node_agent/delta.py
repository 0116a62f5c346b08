"""Report protocol 2 on the agent's side (PROTOCOL.md): send what changed since the report the
portal last acknowledged, and the readings once a sampling interval. No Django here.

What counts as a change is a GPU's state: its index, name, total memory, MIG modes, applied
generation, its MIG instances (placement, compute instances) and the processes on it or on its
instances (pid and pod). Readings (utilisation, memory in use, a process's memory) are not a
change: they travel as ``readings``, every ``sample_every_s`` (the portal's sampling interval).

A changed GPU is sent whole (its instances and processes with it), so the portal replaces what
it has for that GPU. Each report carries ``seq`` (one more each report of this session), the
``session`` (random, new at each start), and the digest of the node's state after it. A change
report also names ``base`` (the acknowledged report it is relative to) and ``base_digest``:
the portal applies it only when both are what it holds, and otherwise asks for a full report.
The agent moves its acknowledged state forward only when an answer acknowledges the report
(``ack``): a lost answer leaves it where it was, and the next report is relative to the same
base; the portal, which holds the newer state, then asks for a full report. State never
diverges: either the portal holds what the agent described, or it asks for all of it.

A full report is sent at start, when the portal asks (``full_report: true``), and at least
every ``full_every_s``.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_spec.report import pod_memory

PROTOCOL = 2
DEFAULT_FULL_EVERY_S = 600.0  # a full report at least this often
DEFAULT_SAMPLE_EVERY_S = 60.0  # readings this often until the portal says otherwise


def gpu_state(gpu: Mapping[str, Any]) -> dict[str, Any]:
    """A GPU entry of a report without its readings: what a change is measured on."""

    def process(p: Mapping[str, Any]) -> dict[str, Any]:
        return {"pid": p["pid"], "pod_uid": p.get("pod_uid") or ""}

    return {
        "uuid": gpu["uuid"],
        "index": gpu["index"],
        "name": gpu["name"],
        "memory_total_mib": gpu["memory_total_mib"],
        "mig_mode_current": gpu["mig_mode_current"],
        "mig_mode_pending": gpu["mig_mode_pending"],
        "applied_generation": gpu.get("applied_generation", 0),
        "instances": [
            {
                "gi_id": i["gi_id"],
                "profile": i["profile"],
                "start": i["start"],
                "size": i["size"],
                "ci_ids": list(i.get("ci_ids") or []),
                "processes": [process(p) for p in i.get("processes") or []],
            }
            for i in gpu.get("instances") or []
        ],
        "processes": [process(p) for p in gpu.get("processes") or []],
    }


def state_digest(states: Mapping[str, Mapping[str, Any]]) -> str:
    """SHA-256 (hex) of the node's GPU states, by uuid: the same on both sides for the same
    state (the portal computes it from a full report the same way)."""
    canonical = json.dumps(
        [states[u] for u in sorted(states)], sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def readings(gpus: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One reading per GPU outside MIG (MIG off, or on with no instance) and per MIG instance:
    what the portal turns into usage samples."""
    out: list[dict[str, Any]] = []

    def pods(processes: Sequence[Mapping[str, Any]]) -> list[str]:
        return [uid for p in processes if (uid := p.get("pod_uid"))]

    for g in gpus:
        instances = g.get("instances") or []
        if not g.get("mig_mode_current") or not instances:
            processes = g.get("processes") or []
            out.append(
                {
                    "uuid": g["uuid"],
                    "model": g["name"],
                    "gi_id": None,
                    "profile": None,
                    "utilization_pct": g.get("utilization_pct"),
                    "memory_used_mib": g.get("memory_used_mib") or 0,
                    "processes": len(processes),
                    "pod_uids": pods(processes),
                    "pod_memory": pod_memory(processes),
                }
            )
            continue
        for i in instances:
            processes = i.get("processes") or []
            out.append(
                {
                    "uuid": g["uuid"],
                    "model": g["name"],
                    "gi_id": i["gi_id"],
                    "profile": i["profile"],
                    "utilization_pct": i.get("utilization_pct"),
                    "memory_used_mib": i.get("memory_used_mib") or 0,
                    "processes": len(processes),
                    "pod_uids": pods(processes),
                    "pod_memory": pod_memory(processes),
                }
            )
    return out


@dataclass
class _Sent:
    seq: int
    states: dict[str, dict[str, Any]]
    digest: str


@dataclass
class ReportTracker:
    """What the agent keeps between reports: the state the portal acknowledged, the report in
    flight, and when the last full report and the last readings went. In memory only: a
    restarted agent starts a new session with a full report."""

    full_every_s: float = DEFAULT_FULL_EVERY_S
    sample_every_s: float = DEFAULT_SAMPLE_EVERY_S
    clock: Callable[[], float] = time.monotonic
    session: str = field(default_factory=lambda: secrets.token_hex(8))
    seq: int = 0
    acked: _Sent | None = None
    in_flight: _Sent | None = None
    need_full: bool = True
    last_full_at: float | None = None
    last_readings_at: float | None = None

    def body(self, inventory: Mapping[str, Any]) -> dict[str, Any]:
        """The report for ``inventory`` (``Agent.inventory()``, a whole report): whole when
        one is due, else the GPUs changed since the acknowledged report; readings when due."""
        now = self.clock()
        gpus = list(inventory["gpus"])
        states = {g["uuid"]: gpu_state(g) for g in gpus}
        digest = state_digest(states)
        self.seq += 1
        full = (
            self.need_full
            or self.acked is None
            or self.last_full_at is None
            or now - self.last_full_at >= self.full_every_s
        )
        body: dict[str, Any] = {
            k: v for k, v in inventory.items() if k in ("node", "sent_at", "agent_version")
        }
        body.update(protocol=PROTOCOL, session=self.session, seq=self.seq, full=full, digest=digest)
        if "driver_version" in inventory:
            body["driver_version"] = inventory["driver_version"]
        if full:
            body["gpus"] = gpus
            self.last_readings_at = now  # a full report's GPUs carry the readings
        else:
            assert self.acked is not None
            body["base"] = self.acked.seq
            body["base_digest"] = self.acked.digest
            body["gpus"] = [
                g for g in gpus if self.acked.states.get(g["uuid"]) != states[g["uuid"]]
            ]
            if self.last_readings_at is None or now - self.last_readings_at >= self.sample_every_s:
                body["readings"] = readings(gpus)
                self.last_readings_at = now
        self.in_flight = _Sent(self.seq, states, digest)
        if full:
            self.last_full_at = now
        return body

    def answered(self, answer: Mapping[str, Any]) -> None:
        """The portal's answer to the report in flight: ``ack`` moves the acknowledged state
        to it; ``full_report`` makes the next report whole; ``sample_every_s`` sets the
        readings' interval. An answer that acknowledges nothing changes nothing else."""
        sent, self.in_flight = self.in_flight, None
        ack = answer.get("ack")
        if sent is not None and isinstance(ack, int) and ack == sent.seq:
            self.acked = sent
            self.need_full = False
        if answer.get("full_report"):
            self.need_full = True
        every = answer.get("sample_every_s")
        if isinstance(every, int | float) and every > 0:
            self.sample_every_s = float(every)

    def lost(self) -> None:
        """The report (or its answer) was lost: the acknowledged state stays as it was, so the
        next report is relative to the same base (the portal asks for a full one if it had
        applied the lost one)."""
        self.in_flight = None
