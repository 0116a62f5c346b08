"""Agents' reports: what a node has (GPUs, MIG instances, processes) stored whole or not at
all, in a bounded number of statements whatever its size, and what the report settles among
the node's layouts (applied ones confirmed, drained ones released, reset GPUs reopened). Its
answer says what the agent has to do next. Observations only: nothing here is audited but a
stale node coming back.

A report is checked once, by ``report_validated``: the JSON Schema the agent checks too
(``gpu_spec/report.schema.json``), then the few rules a schema cannot say (``REPORT_CHECKS``,
and the token's own node); then ``report_ingest`` stores it, the one ingest path.

Two report protocols (PROTOCOL.md). Protocol 1: every report whole. Protocol 2: a full report
(at the agent's start, when asked, every few minutes) stored as protocol 1 is, and change
reports, each naming the acknowledged report it is relative to (``base``: session, sequence
number and state digest): applied (the changed GPUs replaced whole) only when the node holds
exactly that base, else answered with ``full_report`` and nothing applied, so the stored
state never drifts from the agent's. A change report with nothing changed costs one statement
on PostgreSQL. The node records the protocol it speaks (the fleet page shows it).

Once a report commits, its ``ReportReadings`` (what each GPU outside MIG and each MIG
instance was doing, read from the validated report here and nowhere else) go to each
``REPORT_INGESTED`` hook: ``usage`` registers the one that turns them into samples, in its
``AppConfig.ready``; this app imports none of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NewType, cast

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from core.errors import PermissionDenied, ValidationFailed
from gpu_agent.conf import last_report_write_every, layout_deadline
from gpu_agent.models import (
    OPEN_LAYOUT_STATES,
    OPEN_PROBE_STATES,
    Gpu,
    IsolationProbe,
    LayoutState,
    MigInstance,
    MigLayout,
    Node,
)
from gpu_agent.services.capacity import node_capacity_pushed
from gpu_agent.services.common import iso, node_audit_id
from gpu_agent.services.layouts import WHOLE_GPU, agent_desired_generation, waiting_message
from gpu_spec.report import pod_memory, validate_report
from tenants.services import audit_record

# The report's shape and limits (at most 64 GPUs, 7 MIG instances each, 256 processes, ...) are
# gpu_spec's report.schema.json, which the agent checks too; a report past them is refused
# whole, nothing stored.
PROTOCOL_WHOLE, PROTOCOL_CHANGES = 1, 2

# Called as ``hook(readings=ReportReadings)`` once a report is ingested and committed, each in
# its own transaction (a failing hook is logged; the report stands and the agent reports again
# soon). Registered in other apps' AppConfig.ready() (usage: samples per GPU and MIG
# instance), so this app imports none of them and the report's transaction stays short.
REPORT_INGESTED: list[Callable[..., object]] = []


@dataclass(frozen=True)
class DeviceReading:
    """What one GPU outside MIG (``gi_id`` None), or one MIG instance, was doing."""

    gpu_uuid: str
    model: str  # the GPU's model name, as NVML reports it
    gi_id: int | None
    mig_profile: str | None
    utilization_pct: int | None
    memory_used_mib: int
    processes: int
    pod_uids: tuple[str, ...]  # of its processes that run in a pod, in the report's order
    # Per pod on the device, as the agent read it: GPU memory (MiB, NVML usedGpuMemory of the
    # pod's processes) and SM use (percent of the GPU, None with no sample): what each
    # container holds and computes of a GPU shared through HAMi.
    pod_memory: tuple[tuple[str, int, int | None], ...] = ()


@dataclass(frozen=True)
class ReportReadings:
    """A committed report's readings, as the ``REPORT_INGESTED`` hooks receive them."""

    node_id: int
    cluster_id: int | None
    at: datetime
    devices: tuple[DeviceReading, ...]
    node_name: str = ""  # the reporting node (a pod the collector places elsewhere is not its)


def report_readings(*, node: Node, report: Mapping[str, Any], now: datetime) -> ReportReadings:
    """The readings of a validated report: one per GPU outside MIG (MIG off, or on with no
    instance) and one per MIG instance (a protocol 2 change report sends them as such)."""
    if report.get("readings") is not None:
        return ReportReadings(
            node.pk,
            node.cluster_id,
            now,
            tuple(
                DeviceReading(
                    gpu_uuid=r["uuid"],
                    model=r["model"],
                    gi_id=r["gi_id"],
                    mig_profile=r["profile"],
                    utilization_pct=r["utilization_pct"],
                    memory_used_mib=r["memory_used_mib"],
                    processes=r["processes"],
                    pod_uids=tuple(r["pod_uids"]),
                    pod_memory=tuple(
                        (m["pod_uid"], m["used_memory_mib"], m.get("sm_util_pct"))
                        for m in r.get("pod_memory") or []
                    ),
                )
                for r in report["readings"]
            ),
            node.name,
        )
    devices: list[DeviceReading] = []
    for g in report.get("gpus") or []:
        instances = g.get("instances") or []
        if not g.get("mig_mode_current") or not instances:
            processes = g.get("processes") or []
            devices.append(
                DeviceReading(
                    gpu_uuid=g["uuid"],
                    model=g["name"],
                    gi_id=None,
                    mig_profile=None,
                    utilization_pct=g.get("utilization_pct"),
                    memory_used_mib=g.get("memory_used_mib") or 0,
                    processes=len(processes),
                    pod_uids=_pod_uids(processes),
                    pod_memory=_pod_memory(processes),
                )
            )
            continue
        for inst in instances:
            processes = inst.get("processes") or []
            devices.append(
                DeviceReading(
                    gpu_uuid=g["uuid"],
                    model=g["name"],
                    gi_id=inst["gi_id"],
                    mig_profile=inst["profile"],
                    utilization_pct=inst.get("utilization_pct"),
                    memory_used_mib=inst.get("memory_used_mib") or 0,
                    processes=len(processes),
                    pod_uids=_pod_uids(processes),
                    pod_memory=_pod_memory(processes),
                )
            )
    return ReportReadings(node.pk, node.cluster_id, now, tuple(devices), node.name)


def _pod_uids(processes: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(uid for p in processes if (uid := p.get("pod_uid")))


def _pod_memory(
    processes: Sequence[Mapping[str, Any]],
) -> tuple[tuple[str, int, int | None], ...]:
    """GPU memory (MiB) and SM use per pod, as tuples (``gpu_spec.report.pod_memory``: the
    agent's ``pod_memory`` of a change report, built from a full report's processes)."""
    return tuple(
        (row["pod_uid"], row["used_memory_mib"], row["sm_util_pct"])
        for row in pod_memory(processes)
    )


# --- validation: the schema, then what a schema cannot say ----------------------------------

ValidReport = NewType("ValidReport", dict[str, Any])
"""A report ``report_validated`` passed: the agent's JSON as received, nothing converted."""

Problems = Iterator[tuple[str, str]]  # (field path, why)


def report_validated(*, node: Node, data: object) -> ValidReport:
    """The one validation of an agent's report (the endpoint's and every other caller's): its
    shape by the JSON Schema the agent checks too (``gpu_spec/report.schema.json``), then, for
    a report of that shape, each check of ``REPORT_CHECKS`` (what a schema cannot say).

    Refused (nothing stored): a report the schema or a check refuses (400, every problem by
    its path: ``gpus[0].instances[1].gi_id``), a report for another node (403)."""
    _refuse_problems((p.path, p.message) for p in validate_report(data))
    report = cast(dict[str, Any], data)
    _check_own_node(node=node, report=report)
    _refuse_problems(problem for check in REPORT_CHECKS for problem in check(report))
    return ValidReport(report)


def _refuse_problems(problems: Iterable[tuple[str, str]]) -> None:
    fields: dict[str, list[str]] = {}
    for path, message in problems:
        fields.setdefault(path, []).append(message)
    if fields:
        raise ValidationFailed(
            "; ".join(f"{path}: {messages[0]}" for path, messages in fields.items()),
            fields=fields,
        )


def _check_own_node(*, node: Node, report: Mapping[str, Any]) -> None:
    """A node token reports for its own node only (403)."""
    if report["node"] != node.name:
        raise PermissionDenied(
            "A node token may only report for its own node.",
            fields={"node": [f"this token belongs to node {node.name}"]},
        )


def _protocol_2_fields(report: Mapping[str, Any]) -> Problems:
    """Protocol 2 names its session, number and digest; a change report (``full: false``)
    its base, an earlier report; only a change report carries ``readings``."""
    if report.get("protocol", PROTOCOL_WHOLE) != PROTOCOL_CHANGES:
        return
    for name in ("session", "seq", "digest"):
        if not report.get(name):
            yield name, "protocol 2 reports need it."
    if report.get("full", True):
        if report.get("readings") is not None:
            yield "readings", "only in a change report: a full report's GPUs carry the readings."
        return
    for name in ("base", "base_digest"):
        if not report.get(name):
            yield name, "a change report (full: false) needs it."
    if report.get("base") and report.get("seq") and report["base"] >= report["seq"]:
        yield "base", "must be lower than seq: the base is an earlier report."


def _protocol_1_fields(report: Mapping[str, Any]) -> Problems:
    """Protocol 1 reports are whole, without protocol 2's fields."""
    if report.get("protocol", PROTOCOL_WHOLE) == PROTOCOL_CHANGES:
        return
    for name in ("session", "seq", "base", "base_digest", "digest", "readings"):
        if report.get(name):
            yield name, "only with protocol 2."
    if not report.get("full", True):
        yield "full", "only with protocol 2: a protocol 1 report is always whole."


def _unique_gpus(report: Mapping[str, Any]) -> Problems:
    """Each GPU once: no UUID or index twice."""
    seen_uuids: dict[str, int] = {}
    seen_indexes: dict[int, int] = {}
    for i, gpu in enumerate(report["gpus"]):
        uuid, index = gpu["uuid"], gpu["index"]
        if uuid in seen_uuids:
            yield f"gpus[{i}].uuid", f"{uuid} is also gpus[{seen_uuids[uuid]}]."
        if index in seen_indexes:
            yield f"gpus[{i}].index", f"index {index} is also gpus[{seen_indexes[index]}]."
        seen_uuids.setdefault(uuid, i)
        seen_indexes.setdefault(index, i)


def _unique_instances(report: Mapping[str, Any]) -> Problems:
    """Each MIG instance of a GPU once: no ``gi_id`` twice."""
    for i, gpu in enumerate(report["gpus"]):
        seen: dict[int, int] = {}
        for j, instance in enumerate(gpu.get("instances") or ()):
            gi_id = instance["gi_id"]
            if gi_id in seen:
                yield (
                    f"gpus[{i}].instances[{j}].gi_id",
                    f"gi_id {gi_id} is also gpus[{i}].instances[{seen[gi_id]}].",
                )
            seen.setdefault(gi_id, j)


# What a report of the schema's shape is checked for after it, in this order (each yields its
# problems; all of them are named in one 400).
REPORT_CHECKS: tuple[Callable[[Mapping[str, Any]], Problems], ...] = (
    _protocol_2_fields,
    _protocol_1_fields,
    _unique_gpus,
    _unique_instances,
)


def _processes(raw: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "pid": p["pid"],
            "used_memory_mib": p.get("used_memory_mib"),
            "pod_uid": p.get("pod_uid") or "",
        }
        for p in raw
    ]


GPU_REPORTED_FIELDS = [
    "index",
    "name",
    "memory_total_mib",
    "memory_used_mib",
    "utilization_pct",
    "mig_mode_current",
    "mig_mode_pending",
    "applied_generation",
    "processes",
    "last_seen_at",
]


@dataclass(frozen=True)
class ReportAnswer:
    """What ``POST agent/report/`` answers: the generation to apply and the open probes; for
    protocol 2, the report the node now holds (``ack``, None when this one was not applied)
    and whether the agent must send a full report."""

    desired_generation: int
    probes: int
    ack: int | None = None
    full_report: bool = False


def report_ingest(*, node: Node, report: ValidReport) -> ReportAnswer:
    """The one ingest path of a validated report (``report_validated``): a quiet node's report
    (``_quiet_report``) answered from one read when the node row needs no write, any other
    stored by ``_report_answer``."""
    quiet = _quiet_report(node=node, report=report)
    return quiet if quiet is not None else _report_answer(node=node, report=report)


def agent_report_ingest(*, node: Node, report: object) -> int:
    """``report`` validated and ingested as the endpoint does it; the desired generation."""
    checked = report_validated(node=node, data=report)
    return report_ingest(node=node, report=checked).desired_generation


# A quiet node's open work: whether a layout is open (pending, applying, reboot-required) and
# its open isolation probes. Plain SQL that PostgreSQL and SQLite both run.
_NODE_WORK = """
SELECT EXISTS (SELECT 1 FROM gpu_agent_miglayout l JOIN gpu_agent_gpu g ON g.id = l.gpu_id
               WHERE g.node_id = %s AND l.state IN (%s, %s, %s)),
       (SELECT count(*) FROM gpu_agent_isolationprobe p JOIN gpu_agent_gpu g ON g.id = p.gpu_id
        WHERE g.node_id = %s AND p.state IN (%s, %s))"""


def _quiet_report(*, node: Node, report: ValidReport) -> ReportAnswer | None:
    """A protocol 2 change report in which nothing changed (no GPU, the digest its base's), on
    the state the node holds, from a node that is not stale and whose last-report time was
    written less than ``AGENT_LAST_REPORT_WRITE_S`` ago, with no layout open: acknowledged
    from one read, nothing written (the node row as the token lookup read it). None: the
    general path answers (it writes the node row)."""
    if report.get("protocol") != PROTOCOL_CHANGES or report.get("full", True) or report.get("gpus"):
        return None
    base, digest = report.get("base"), report.get("base_digest")
    if not isinstance(base, int) or not digest or report.get("digest") != digest:
        return None
    held_on_base = (
        node.report_protocol == PROTOCOL_CHANGES
        and node.report_session == report.get("session")
        and node.report_seq <= base
        and node.report_digest == digest
    )
    versions_known = all(
        not report.get(name) or report.get(name) == getattr(node, name)
        for name in ("agent_version", "driver_version")
    )
    now = timezone.now()
    seen = node.last_report_at
    if not held_on_base or not versions_known or node.stale or seen is None:
        return None
    if not timedelta(0) <= now - seen < last_report_write_every():
        return None
    _check_readings(node=node, report=report)
    row: Any = node.open_work  # read with the node token (the report endpoint)
    if row is None:
        with connection.cursor() as cursor:
            cursor.execute(
                _NODE_WORK,
                [
                    node.pk, *(s.value for s in (*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED)),
                    node.pk, *(s.value for s in OPEN_PROBE_STATES),
                ],
            )  # fmt: skip
            row = cursor.fetchone()
    if row is None or row[0]:
        return None  # a layout to confirm, release or reopen: the general path
    if REPORT_INGESTED and report.get("readings") is not None:
        readings = report_readings(node=node, report=report, now=now)
        for hook in REPORT_INGESTED:
            transaction.on_commit(partial(hook, readings=readings), robust=True)
    return ReportAnswer(0, int(row[1]), report["seq"], False)


@node_capacity_pushed  # the MIG capacity this report changed reaches quotas once it commits
@transaction.atomic
def _report_answer(*, node: Node, report: ValidReport) -> ReportAnswer:
    """Store what ``node``'s agent reports: GPUs upserted, MIG instances replaced, the node
    marked seen; layouts the agent reports applied (``applied_generation``) succeed, drained
    layouts whose instances went idle are released, and layouts waiting for a reboot go back
    to pending once the GPU's MIG mode is right. A bounded number of queries whatever the
    report's size (bulk writes). Answers the desired generation (the highest generation the
    agent has to apply, ``GET agent/desired/``, 0 when none) and how many isolation probes
    it has to run (``GET agent/probes/``).

    Refused whole (nothing stored): a GPU registered to another node (403); a reading of a
    GPU the node has not reported (400)."""
    now = timezone.now()
    ack: int | None = None
    full_report = False
    busy: dict[int, set[int]] | None
    if report.get("protocol", PROTOCOL_WHOLE) == PROTOCOL_CHANGES and not report.get("full", True):
        was_stale, ack, full_report, layouts_open, probes = _change_report(
            node=node, report=report, now=now
        )
        busy = None  # read from the database if a drained layout needs it
    elif connection.vendor == "postgresql":
        was_stale, busy, layouts_open, probes = _ingest_postgresql(
            node=node, report=report, now=now
        )
    else:
        was_stale, busy = _ingest_orm(node=node, report=report, now=now)
        layouts_open, probes = _node_work(node)
    if report.get("protocol", PROTOCOL_WHOLE) == PROTOCOL_CHANGES and report.get("full", True):
        ack = report["seq"]  # a full report is always taken: it is the new base
    if was_stale:
        audit_record(
            actor=None,
            action="node.reporting",
            obj=node,
            object_id=node_audit_id(node.name),
            before={"stale": True},
            after={"stale": False, "last_report_at": iso(now)},
        )
    # A whole report's GPUs carry their readings; a change report sends them once a sampling
    # interval as ``readings`` (taken even when the report is not applied: they do not
    # depend on the base).
    has_readings = report.get("full", True) or report.get("readings") is not None
    if REPORT_INGESTED and has_readings:
        readings = report_readings(node=node, report=report, now=now)
        for hook in REPORT_INGESTED:
            transaction.on_commit(partial(hook, readings=readings), robust=True)
    if not layouts_open:
        # No pending, applying or reboot-required layout on the node (the usual case): nothing
        # to confirm, release or reopen, and nothing for the agent to apply.
        return ReportAnswer(0, probes, ack, full_report)
    _confirm_applied(node=node, now=now)
    # After a reset, a GPU whose MIG mode is now the layout's gets its layout applied.
    MigLayout.objects.filter(
        gpu__node_id=node.pk,
        state=LayoutState.REBOOT_REQUIRED,
        mig_enabled=F("gpu__mig_mode_current"),
    ).update(
        state=LayoutState.PENDING,
        message="MIG mode changed after the reset; applying the layout.",
        deadline=now + layout_deadline(),
        updated_at=now,
    )
    _release_drained(node=node, busy=_busy_stored(node) if busy is None else busy, now=now)
    return ReportAnswer(agent_desired_generation(node=node), probes, ack, full_report)


def _foreign_gpus(uuids: Sequence[str], foreign: Sequence[str]) -> PermissionDenied:
    return PermissionDenied(
        "A node may only report its own GPUs.",
        fields={
            f"gpus[{uuids.index(u)}].uuid": [f"{u} is registered to another node"]
            for u in sorted(foreign)
        },
    )


def _busy(gpus: Sequence[Mapping[str, Any]], ids: Mapping[str, int]) -> dict[int, set[int]]:
    """GPU id -> gi_ids with processes (WHOLE_GPU: processes outside MIG)."""
    busy: dict[int, set[int]] = {}
    for g in gpus:
        gpu_id = ids[g["uuid"]]
        if g.get("processes"):
            busy.setdefault(gpu_id, set()).add(WHOLE_GPU)
        for inst in g.get("instances") or []:
            if inst.get("processes"):
                busy.setdefault(gpu_id, set()).add(inst["gi_id"])
    return busy


def _ingest_orm(
    *, node: Node, report: Mapping[str, Any], now: datetime
) -> tuple[bool, dict[int, set[int]]]:
    """The portable path (SQLite): GPUs, instances and the node through the ORM. Returns
    whether the node was stale and the busy instances."""
    gpus = list(report.get("gpus") or [])
    locked = Node.objects.select_for_update().only("pk", "stale", "name").get(pk=node.pk)
    uuids = [g["uuid"] for g in gpus]
    foreign = list(
        Gpu.objects.filter(uuid__in=uuids)
        .exclude(node_id=node.pk)
        .order_by()
        .values_list("uuid", flat=True)
    )
    if foreign:
        raise _foreign_gpus(uuids, foreign)
    rows = [_gpu_row(node, g, now) for g in gpus]
    if rows:
        saved = Gpu.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["uuid"],
            update_fields=GPU_REPORTED_FIELDS,
        )
        ids = {row.uuid: row.pk for row in saved}
        if None in ids.values():  # a database that does not return ids from an upsert
            ids = dict(Gpu.objects.filter(uuid__in=uuids).values_list("uuid", "pk"))
    else:
        ids = {}
    MigInstance.objects.filter(gpu__node_id=node.pk).delete()
    MigInstance.objects.bulk_create(
        [
            MigInstance(gpu_id=ids[g["uuid"]], observed_at=now, **_instance_fields(inst))
            for g in gpus
            for inst in g.get("instances") or []
        ]
    )
    Node.objects.filter(pk=node.pk).update(
        last_report_at=now,
        stale=False,
        agent_version=report.get("agent_version") or F("agent_version"),
        driver_version=report.get("driver_version") or F("driver_version"),
        **_base_fields(report),
    )
    return locked.stale, _busy(gpus, ids)


def _base_fields(report: Mapping[str, Any]) -> dict[str, Any]:
    """What a whole report makes the node's base: its protocol, and for protocol 2 the
    report's session, number and digest (protocol 1: none, so no change report matches)."""
    protocol = report.get("protocol", PROTOCOL_WHOLE)
    if protocol != PROTOCOL_CHANGES:
        return {"report_protocol": protocol, "report_session": "", "report_seq": 0,
                "report_digest": ""}  # fmt: skip
    return {
        "report_protocol": protocol,
        "report_session": report["session"],
        "report_seq": report["seq"],
        "report_digest": report["digest"],
    }


def _node_work(node: Node) -> tuple[bool, int]:
    """Whether the node has a layout open (pending, applying, reboot-required), and its open
    isolation probes."""
    layouts_open = MigLayout.objects.filter(
        gpu__node_id=node.pk, state__in=[*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED]
    ).exists()
    probes = IsolationProbe.objects.filter(gpu__node=node, state__in=OPEN_PROBE_STATES).count()
    return layouts_open, probes


def _busy_stored(node: Node) -> dict[int, set[int]]:
    """The busy instances as stored (a change report sends only the GPUs that changed)."""
    busy: dict[int, set[int]] = {}
    for gpu_id, processes in Gpu.objects.filter(node_id=node.pk).values_list("id", "processes"):
        if processes:
            busy.setdefault(gpu_id, set()).add(WHOLE_GPU)
    for gpu_id, gi_id in MigInstance.objects.filter(gpu__node_id=node.pk, busy=True).values_list(
        "gpu_id", "gi_id"
    ):
        busy.setdefault(gpu_id, set()).add(gi_id)
    return busy


# PostgreSQL, a change report on the base the node holds: the node moved to this report and
# the work it has, in one statement (all of a quiet node's report); then the changed GPUs, if
# any, as a whole report writes them. No row back: the node does not hold the base (the
# general path decides what to answer).
_PG_ON_BASE = """
UPDATE gpu_agent_node n SET last_report_at = %s, stale = false, report_seq = %s,
  report_digest = %s,
  agent_version = COALESCE(NULLIF(%s, ''), n.agent_version),
  driver_version = COALESCE(NULLIF(%s, ''), n.driver_version)
FROM (SELECT id, stale FROM gpu_agent_node WHERE id = %s FOR UPDATE) o
WHERE n.id = o.id AND n.report_protocol = 2 AND n.report_session = %s AND n.report_seq <= %s
  AND n.report_digest = %s
RETURNING o.stale,
  EXISTS (SELECT 1 FROM gpu_agent_miglayout l JOIN gpu_agent_gpu g ON g.id = l.gpu_id
          WHERE g.node_id = n.id AND l.state IN (%s, %s, %s)),
  (SELECT count(*) FROM gpu_agent_isolationprobe p JOIN gpu_agent_gpu g ON g.id = p.gpu_id
   WHERE g.node_id = n.id AND p.state IN (%s, %s))"""


def _change_report(
    *, node: Node, report: Mapping[str, Any], now: datetime
) -> tuple[bool, int | None, bool, bool, int]:
    """A protocol 2 change report: applied when the node holds its base (the changed GPUs
    upserted whole, their instances replaced), taken as done when it is the report the node
    already holds (delivered twice), else nothing applied and a full report asked for.
    Returns (was stale, ack, full report wanted, layouts open, open probes)."""
    gpus = list(report.get("gpus") or [])
    _check_readings(node=node, report=report)
    versions = [report.get("agent_version") or "", report.get("driver_version") or ""]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _PG_ON_BASE,
                [
                    now, report["seq"], report["digest"], *versions, node.pk, report["session"],
                    report["base"], report["base_digest"],
                    *(s.value for s in (*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED)),
                    *(s.value for s in OPEN_PROBE_STATES),
                ],
            )  # fmt: skip
            row = cursor.fetchone()
            if row is not None and gpus:
                _pg_write_gpus(cursor, node=node, gpus=gpus, now=now, only_these=True)
        if row is not None:
            return bool(row[0]), report["seq"], False, bool(row[1]), int(row[2])
    locked = (
        Node.objects.select_for_update()
        .only("pk", "stale", "report_protocol", "report_session", "report_seq", "report_digest")
        .get(pk=node.pk)
    )
    held = (locked.report_protocol, locked.report_session, locked.report_seq, locked.report_digest)
    session = report["session"]
    seen: dict[str, Any] = {"last_report_at": now, "stale": False}
    on_base = (
        held[:2] == (PROTOCOL_CHANGES, session)
        and held[2] <= report["base"]
        and held[3] == report["base_digest"]
    )
    if on_base:
        if gpus:
            _upsert_changed_gpus(node=node, gpus=gpus, now=now)
        Node.objects.filter(pk=node.pk).update(
            **seen,
            report_seq=report["seq"],
            report_digest=report["digest"],
            agent_version=versions[0] or F("agent_version"),
            driver_version=versions[1] or F("driver_version"),
        )
        ack, full_report = report["seq"], False
    elif held == (PROTOCOL_CHANGES, session, report["seq"], report["digest"]):
        Node.objects.filter(pk=node.pk).update(**seen)  # this report again: already applied
        ack, full_report = report["seq"], False
    else:
        Node.objects.filter(pk=node.pk).update(**seen)  # alive, but the base is not held
        ack, full_report = None, True
    layouts_open, probes = _node_work(node)
    return locked.stale, ack, full_report, layouts_open, probes


def _check_readings(*, node: Node, report: Mapping[str, Any]) -> None:
    """Readings name only the node's own GPUs (400, naming the reading, otherwise)."""
    readings = report.get("readings") or []
    if not readings:
        return
    uuids = {r["uuid"] for r in readings}
    own = set(Gpu.objects.filter(node_id=node.pk, uuid__in=uuids).values_list("uuid", flat=True))
    problems = {
        f"readings[{i}].uuid": [f"{r['uuid']} is not a GPU this node has reported."]
        for i, r in enumerate(readings)
        if r["uuid"] not in own
    }
    if problems:
        raise ValidationFailed(
            "; ".join(f"{k}: {v[0]}" for k, v in problems.items()), fields=problems
        )


def _upsert_changed_gpus(*, node: Node, gpus: Sequence[Mapping[str, Any]], now: datetime) -> None:
    """The GPUs a change report sends, each whole: upserted, and their instances replaced
    (those of the other GPUs stay). A GPU of another node refuses the report (403)."""
    uuids = [g["uuid"] for g in gpus]
    foreign = list(
        Gpu.objects.filter(uuid__in=uuids).exclude(node_id=node.pk).values_list("uuid", flat=True)
    )
    if foreign:
        raise _foreign_gpus(uuids, foreign)
    saved = Gpu.objects.bulk_create(
        [_gpu_row(node, g, now) for g in gpus],
        update_conflicts=True,
        unique_fields=["uuid"],
        update_fields=GPU_REPORTED_FIELDS,
    )
    ids = {row.uuid: row.pk for row in saved}
    if None in ids.values():  # a database that does not return ids from an upsert
        ids = dict(Gpu.objects.filter(uuid__in=uuids).values_list("uuid", "pk"))
    MigInstance.objects.filter(gpu_id__in=ids.values()).delete()
    MigInstance.objects.bulk_create(
        [
            MigInstance(gpu_id=ids[g["uuid"]], observed_at=now, **_instance_fields(inst))
            for g in gpus
            for inst in g.get("instances") or []
        ]
    )


def _gpu_row(node: Node, g: Mapping[str, Any], now: datetime) -> Gpu:
    return Gpu(
        node_id=node.pk,
        uuid=g["uuid"],
        index=g["index"],
        name=g["name"],
        memory_total_mib=g["memory_total_mib"],
        memory_used_mib=g["memory_used_mib"],
        utilization_pct=g.get("utilization_pct"),
        mig_mode_current=g["mig_mode_current"],
        mig_mode_pending=g["mig_mode_pending"],
        applied_generation=g.get("applied_generation") or 0,
        processes=_processes(g.get("processes") or []),
        last_seen_at=now,
    )


def _instance_fields(inst: Mapping[str, Any]) -> dict[str, Any]:
    processes = _processes(inst.get("processes") or [])
    return {
        "gi_id": inst["gi_id"],
        "profile": inst["profile"],
        "start": inst["start"],
        "size": inst["size"],
        "ci_ids": list(inst.get("ci_ids") or []),
        "memory_used_mib": inst.get("memory_used_mib") or 0,
        "utilization_pct": inst.get("utilization_pct"),
        "busy": bool(processes),
        "processes": processes,
    }


# PostgreSQL: the node locked and updated in one statement (the old ``stale`` comes back).
_PG_NODE_UPDATE = """
UPDATE gpu_agent_node n SET last_report_at = %s, stale = false,
  agent_version = COALESCE(NULLIF(%s, ''), n.agent_version),
  driver_version = COALESCE(NULLIF(%s, ''), n.driver_version),
  report_protocol = %s, report_session = %s, report_seq = %s, report_digest = %s
FROM (SELECT id, stale FROM gpu_agent_node WHERE id = %s FOR UPDATE) o
WHERE n.id = o.id
RETURNING o.stale"""

# GPUs upserted from one JSON parameter; a GPU registered to another node is neither updated
# nor returned (fewer rows back than sent: the report is refused, the transaction rolls back).
_PG_GPU_UPSERT = """
INSERT INTO gpu_agent_gpu (node_id, uuid, index, name, memory_total_mib, memory_used_mib,
  utilization_pct, mig_mode_current, mig_mode_pending, applied_generation, processes,
  last_seen_at)
SELECT %s, r.uuid, r.index, r.name, r.memory_total_mib, r.memory_used_mib, r.utilization_pct,
  r.mig_mode_current, r.mig_mode_pending, r.applied_generation, r.processes, %s
FROM jsonb_to_recordset(%s::jsonb) AS r(uuid text, index int, name text,
  memory_total_mib bigint, memory_used_mib bigint, utilization_pct int, mig_mode_current bool,
  mig_mode_pending bool, applied_generation bigint, processes jsonb)
ON CONFLICT (uuid) DO UPDATE SET index = EXCLUDED.index, name = EXCLUDED.name,
  memory_total_mib = EXCLUDED.memory_total_mib, memory_used_mib = EXCLUDED.memory_used_mib,
  utilization_pct = EXCLUDED.utilization_pct, mig_mode_current = EXCLUDED.mig_mode_current,
  mig_mode_pending = EXCLUDED.mig_mode_pending,
  applied_generation = EXCLUDED.applied_generation, processes = EXCLUDED.processes,
  last_seen_at = EXCLUDED.last_seen_at
WHERE gpu_agent_gpu.node_id = EXCLUDED.node_id
RETURNING uuid, id"""

_PG_INSTANCES_DELETE = """
DELETE FROM gpu_agent_miginstance
WHERE gpu_id IN (SELECT id FROM gpu_agent_gpu WHERE node_id = %s)"""

_PG_INSTANCES_INSERT = """
INSERT INTO gpu_agent_miginstance (gpu_id, gi_id, profile, start, size, ci_ids,
  memory_used_mib, utilization_pct, busy, processes, observed_at)
SELECT r.gpu_id, r.gi_id, r.profile, r.start, r.size, r.ci_ids, r.memory_used_mib,
  r.utilization_pct, r.busy, r.processes, %s
FROM jsonb_to_recordset(%s::jsonb) AS r(gpu_id bigint, gi_id int, profile text, start int,
  size int, ci_ids jsonb, memory_used_mib bigint, utilization_pct int, busy bool,
  processes jsonb)"""

# Whether the node has a layout open, and how many isolation probes its agent has to run
# (the report's answer says so): one round trip.
_PG_NODE_WORK = """
SELECT EXISTS (
  SELECT 1 FROM gpu_agent_miglayout l JOIN gpu_agent_gpu g ON g.id = l.gpu_id
  WHERE g.node_id = %s AND l.state IN (%s, %s, %s)),
  (SELECT count(*) FROM gpu_agent_isolationprobe p JOIN gpu_agent_gpu g ON g.id = p.gpu_id
   WHERE g.node_id = %s AND p.state IN (%s, %s))"""


def _ingest_postgresql(
    *, node: Node, report: Mapping[str, Any], now: datetime
) -> tuple[bool, dict[int, set[int]], bool, int]:
    """The same writes as ``_ingest_orm`` in at most five statements (every value a bound
    parameter). Returns whether the node was stale, the busy instances, whether the node
    has a layout open (pending, applying, reboot-required) and its open probes."""
    gpus = list(report.get("gpus") or [])
    with connection.cursor() as cursor:
        base = _base_fields(report)
        cursor.execute(
            _PG_NODE_UPDATE,
            [
                now, report.get("agent_version") or "", report.get("driver_version") or "",
                base["report_protocol"], base["report_session"], base["report_seq"],
                base["report_digest"], node.pk,
            ],
        )  # fmt: skip
        row = cursor.fetchone()
        if row is None:
            raise Node.DoesNotExist("Node matching query does not exist.")
        was_stale = bool(row[0])
        ids = _pg_write_gpus(cursor, node=node, gpus=gpus, now=now, only_these=False)
        cursor.execute(
            _PG_NODE_WORK,
            [
                node.pk,
                *(s.value for s in (*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED)),
                node.pk,
                *(s.value for s in OPEN_PROBE_STATES),
            ],
        )
        layouts_open, probes = cursor.fetchone()
    return was_stale, _busy(gpus, ids), bool(layouts_open), int(probes)


_PG_INSTANCES_DELETE_OF = """
DELETE FROM gpu_agent_miginstance WHERE gpu_id = ANY(%s)"""


def _pg_write_gpus(
    cursor: Any,
    *,
    node: Node,
    gpus: Sequence[Mapping[str, Any]],
    now: datetime,
    only_these: bool,
) -> dict[str, int]:
    """GPUs upserted, their instances replaced (``only_these``: of these GPUs; else of the
    whole node), at most three statements. A GPU of another node refuses the report."""
    uuids = [g["uuid"] for g in gpus]
    ids: dict[str, int] = {}
    if gpus:
        rows = [
            {
                "uuid": g["uuid"],
                "index": g["index"],
                "name": g["name"],
                "memory_total_mib": g["memory_total_mib"],
                "memory_used_mib": g["memory_used_mib"],
                "utilization_pct": g.get("utilization_pct"),
                "mig_mode_current": g["mig_mode_current"],
                "mig_mode_pending": g["mig_mode_pending"],
                "applied_generation": g.get("applied_generation") or 0,
                "processes": _processes(g.get("processes") or []),
            }
            for g in gpus
        ]
        cursor.execute(_PG_GPU_UPSERT, [node.pk, now, json.dumps(rows)])
        ids = dict(cursor.fetchall())
        if len(ids) < len(uuids):
            raise _foreign_gpus(uuids, [u for u in uuids if u not in ids])
    if only_these:
        cursor.execute(_PG_INSTANCES_DELETE_OF, [list(ids.values())])
    else:
        cursor.execute(_PG_INSTANCES_DELETE, [node.pk])
    instances = [
        {"gpu_id": ids[g["uuid"]], **_instance_fields(inst)}
        for g in gpus
        for inst in g.get("instances") or []
    ]
    if instances:
        cursor.execute(_PG_INSTANCES_INSERT, [now, json.dumps(instances)])
    return ids


_PG_INSTANCES_ATTRIBUTE = """
UPDATE gpu_agent_miginstance m SET tenant_id = r.tenant_id
FROM gpu_agent_gpu g, jsonb_to_recordset(%s::jsonb) AS r(uuid text, gi_id int, tenant_id bigint)
WHERE g.id = m.gpu_id AND g.node_id = %s AND g.uuid = r.uuid AND m.gi_id = r.gi_id"""


def instances_attribute(*, node_id: int, tenants: Mapping[tuple[str, int], int | None]) -> int:
    """Set ``MigInstance.tenant`` of the node's instances from (GPU uuid, gi_id) -> tenant id
    (the tenant whose pod runs on it; None: unknown). One statement on PostgreSQL. Returns
    the rows updated."""
    if not tenants:
        return 0
    if connection.vendor == "postgresql":
        rows = [{"uuid": u, "gi_id": gi, "tenant_id": t} for (u, gi), t in tenants.items()]
        with connection.cursor() as cursor:
            cursor.execute(_PG_INSTANCES_ATTRIBUTE, [json.dumps(rows), node_id])
            return cursor.rowcount
    updated = 0
    for (uuid, gi_id), tenant_id in tenants.items():
        updated += MigInstance.objects.filter(
            gpu__node_id=node_id, gpu__uuid=uuid, gi_id=gi_id
        ).update(tenant_id=tenant_id)
    return updated


def _confirm_applied(*, node: Node, now: datetime) -> None:
    """A layout whose generation the agent reports as applied (``applied_generation``) is a
    success even when its result never arrived (a lost POST, an agent restart)."""
    confirmed = list(
        MigLayout.objects.filter(
            gpu__node_id=node.pk,
            state__in=[*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED],
            generation__lte=F("gpu__applied_generation"),
        )
        .filter(waiting_for=[])
        .select_related("gpu")
        .only("pk", "generation", "state", "gpu__uuid")
    )
    for layout in confirmed:
        message = "applied (the agent's report says so; its result did not arrive)"
        updated = MigLayout.objects.filter(pk=layout.pk, state=layout.state).update(
            state=LayoutState.SUCCESS, message=message, applied_at=now, updated_at=now
        )
        if updated:
            audit_record(
                actor=None,
                action="mig_layout.success",
                obj=layout,
                object_id=f"{layout.gpu.uuid}@{layout.generation}",
                before={"state": layout.state},
                after={"state": LayoutState.SUCCESS, "message": message, "node": node.name},
            )


def _release_drained(*, node: Node, busy: dict[int, set[int]], now: datetime) -> None:
    """Layouts queued with ``drain`` wait for their busy instances to go idle; release those
    whose instances are idle now (they get their deadline from now)."""
    waiting = list(
        MigLayout.objects.filter(gpu__node_id=node.pk, state=LayoutState.PENDING)
        .exclude(waiting_for=[])
        .only("pk", "gpu_id", "waiting_for", "message", "deadline")
    )
    changed = []
    for layout in waiting:
        still = sorted(set(layout.waiting_for) & busy.get(layout.gpu_id, set()))
        if still == sorted(layout.waiting_for):
            continue
        layout.waiting_for = still
        if still:
            layout.message = waiting_message(still)
        else:
            layout.message = "Instances idle; the agent applies the layout."
            layout.deadline = now + layout_deadline()
        layout.updated_at = now
        changed.append(layout)
    if changed:
        MigLayout.objects.bulk_update(changed, ["waiting_for", "message", "deadline", "updated_at"])
