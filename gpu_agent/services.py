"""Writes for the GPU fleet: node registration and tokens, agents' reports and results, desired
MIG layouts. Keyword-only, atomic, audited (state changes; reports are observations and are not
audited, except a stale node coming back)."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from core.errors import ApplicationError, Conflict, NotFound, PermissionDenied, ValidationFailed
from gpu_agent.models import (
    GPU_NAME_MAX,
    GPU_UUID_MAX,
    HOSTNAME_MAX,
    MIG_PROFILE_MAX,
    OPEN_LAYOUT_STATES,
    OPEN_PROBE_STATES,
    VERSION_MAX,
    Gpu,
    IsolationProbe,
    LayoutState,
    MigInstance,
    MigLayout,
    Node,
    NodeJoinToken,
    NodeToken,
)
from quotas.choices import MigDriver
from quotas.models import Cluster
from tenants.models import User
from tenants.services import audit_record
from tenants.validators import DNS1123_LABEL_MAX, dns1123_label

TOKEN_BYTES = 30  # 240 random bits: a fast hash is enough, there is no dictionary to attack
TOKEN_PREFIX_LEN = 8

# Report limits (a report past them is refused whole, nothing stored).
MAX_GPUS_PER_REPORT = 64
MAX_INSTANCES_PER_GPU = 7  # the most MIG instances any NVIDIA GPU offers
MAX_PROCESSES = 256  # per GPU or per MIG instance
POD_UID_MAX = 64
MESSAGE_MAX = 2000

# The agent reports this gi_id in ``MigLayout.waiting_for`` for processes on a GPU outside MIG
# instances (a MIG mode change resets the whole GPU).
WHOLE_GPU = -1

# Called with (node=, report=, now=) once a report is ingested and committed, each in its own
# transaction (a failing hook is logged; the report stands and the agent reports again soon).
# Registered in other apps' AppConfig.ready() (usage: samples per GPU and MIG instance), so
# this app imports none of them and the report's transaction stays short.
REPORT_INGESTED: list[Callable[..., object]] = []

JOIN_TOKEN_TTL_MIN = timedelta(minutes=1)
JOIN_TOKEN_TTL_MAX = timedelta(days=7)


def join_token_ttl_default() -> timedelta:
    return timedelta(seconds=settings.AGENT_JOIN_TOKEN_TTL_S)


def stale_after() -> timedelta:
    """A node is stale after this long without a report (3 missed reports by default)."""
    return timedelta(seconds=settings.AGENT_STALE_AFTER_S)


def layout_deadline() -> timedelta:
    """An open desired layout fails when the agent has not applied it within this."""
    return timedelta(seconds=settings.AGENT_LAYOUT_DEADLINE_S)


class AuthenticationFailed(ApplicationError):
    """A credential the agent presented is unknown, used, expired or revoked (401)."""

    status_code = 401
    code = "authentication_failed"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _iso(value: datetime | None) -> str:
    if value is None:
        return "never"
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_node_name(field_name: str, value: str) -> None:
    if not value:
        raise ValidationFailed.for_field(field_name, "This field is required.")
    if len(value) > DNS1123_LABEL_MAX:
        raise ValidationFailed.for_field(
            field_name,
            f"{value[:80]!r} is {len(value)} characters long; at most {DNS1123_LABEL_MAX} are "
            "allowed.",
        )
    try:
        dns1123_label(value)
    except ValidationError as exc:
        raise ValidationFailed.for_field(field_name, f"{value!r} {exc.messages[0]}.") from exc


def _check_length(field_name: str, value: str, max_length: int) -> None:
    if len(value) > max_length:
        raise ValidationFailed.for_field(
            field_name, f"is {len(value)} characters long; at most {max_length} are allowed."
        )


# --- tokens ---------------------------------------------------------------------------------


@transaction.atomic
def join_token_create(
    *,
    node_name: str,
    actor: User,
    ttl: timedelta | None = None,
    cluster: Cluster | None = None,
) -> tuple[NodeJoinToken, str]:
    """A one-time join token for ``node_name`` (a new node, or a node re-installing its agent).
    The secret is returned once; only its digest is stored."""
    _check_node_name("node", node_name)
    ttl = join_token_ttl_default() if ttl is None else ttl
    if not JOIN_TOKEN_TTL_MIN <= ttl <= JOIN_TOKEN_TTL_MAX:
        raise ValidationFailed.for_field(
            "ttl_s",
            f"{int(ttl.total_seconds())} s is outside {int(JOIN_TOKEN_TTL_MIN.total_seconds())} "
            f"to {int(JOIN_TOKEN_TTL_MAX.total_seconds())} s.",
        )
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    token = NodeJoinToken.objects.create(
        node_name=node_name,
        cluster=cluster,
        prefix=secret[:TOKEN_PREFIX_LEN],
        digest=_digest(secret),
        expires_at=timezone.now() + ttl,
        created_by=actor,
    )
    audit_record(
        actor=actor,
        action="node_join_token.created",
        obj=token,
        object_id=token.prefix,
        after={
            "node": node_name,
            "cluster": cluster.name if cluster else None,
            "prefix": token.prefix,
            "expires_at": _iso(token.expires_at),
        },
    )
    return token, secret


@transaction.atomic
def agent_register(*, join_secret: str, hostname: str, agent_version: str) -> tuple[Node, str]:
    """Exchange a join token for a node token (returned once). The join token works once and
    until it expires; registering an existing node again revokes its earlier tokens."""
    _check_length("hostname", hostname, HOSTNAME_MAX)
    _check_length("agent_version", agent_version, VERSION_MAX)
    now = timezone.now()
    join = (
        NodeJoinToken.objects.select_for_update(of=("self",))
        .select_related("cluster", "created_by")
        .filter(digest=_digest(join_secret))
        .first()
    )
    if join is None or join.used_at is not None:
        raise AuthenticationFailed("Unknown or already used join token.")
    if join.expires_at <= now:
        raise AuthenticationFailed(
            f"The join token expired at {_iso(join.expires_at)}; ask an admin for a new one."
        )
    node = Node.objects.select_for_update().filter(name=join.node_name).first()
    revoked: list[str] = []
    if node is None:
        try:
            with transaction.atomic():
                node = Node.objects.create(
                    name=join.node_name,
                    cluster=join.cluster,
                    hostname=hostname,
                    agent_version=agent_version,
                )
        except IntegrityError as exc:  # a concurrent registration of the same name
            raise Conflict(f"Node {join.node_name} is registering right now; retry.") from exc
        action = "node.registered"
    else:
        live = NodeToken.objects.filter(node=node, revoked_at__isnull=True)
        revoked = list(live.values_list("prefix", flat=True))
        live.update(revoked_at=now)
        node.hostname = hostname
        node.agent_version = agent_version
        if join.cluster is not None:
            node.cluster = join.cluster
        node.save(update_fields=["hostname", "agent_version", "cluster"])
        action = "node.reregistered"
    secret = secrets.token_urlsafe(TOKEN_BYTES)
    token = NodeToken.objects.create(
        node=node, prefix=secret[:TOKEN_PREFIX_LEN], digest=_digest(secret)
    )
    NodeJoinToken.objects.filter(pk=join.pk).update(used_at=now, node=node)
    audit_record(
        actor=join.created_by,
        action=action,
        obj=node,
        after={
            "hostname": hostname,
            "agent_version": agent_version,
            "join_token": join.prefix,
            "node_token": token.prefix,
            "revoked_tokens": revoked,
        },
    )
    return node, secret


def node_token_authenticate(*, secret: str) -> NodeToken | None:
    """The live node token for ``secret`` (with its node), else None."""
    now = timezone.now()
    token = (
        NodeToken.objects.select_related("node")
        .filter(digest=_digest(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None:
        return None
    if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=5):
        # Coarse on purpose: agents call every few seconds.
        NodeToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


@transaction.atomic
def node_token_revoke(*, node: Node, actor: User) -> int:
    """Revoke every live token of ``node``; its agent answers 401 from now on and needs a new
    join token. Returns how many were revoked."""
    live = list(
        NodeToken.objects.select_for_update()
        .filter(node=node, revoked_at__isnull=True)
        .values_list("pk", "prefix")
    )
    prefixes = [prefix for _, prefix in live]
    count = NodeToken.objects.filter(pk__in=[pk for pk, _ in live]).update(
        revoked_at=timezone.now()
    )
    if count:
        audit_record(
            actor=actor, action="node_token.revoked", obj=node, after={"prefixes": prefixes}
        )
    return count


@transaction.atomic
def node_update(*, node: Node, actor: User, cluster: Cluster | None) -> Node:
    """Set the cluster a node belongs to (everything else about a node comes from its agent)."""
    locked = Node.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=node.pk)
    before = locked.cluster.name if locked.cluster else None
    after = cluster.name if cluster else None
    if before != after:
        Node.objects.filter(pk=node.pk).update(cluster=cluster)
        audit_record(
            actor=actor,
            action="node.updated",
            obj=locked,
            before={"cluster": before},
            after={"cluster": after},
        )
    node.cluster = cluster
    return node


# --- reports --------------------------------------------------------------------------------


def _report_problems(report: Mapping[str, Any]) -> dict[str, list[str]]:
    """Sizes and consistency of a report whose shape the API checked. Every problem, by path."""
    problems: dict[str, list[str]] = {}

    def add(path: str, message: str) -> None:
        problems.setdefault(path, []).append(message)

    for name, limit in (
        ("agent_version", VERSION_MAX),
        ("driver_version", VERSION_MAX),
    ):
        if len(report.get(name) or "") > limit:
            add(name, f"at most {limit} characters are allowed.")
    gpus = report.get("gpus") or []
    if len(gpus) > MAX_GPUS_PER_REPORT:
        add("gpus", f"{len(gpus)} GPUs; at most {MAX_GPUS_PER_REPORT} per node are accepted.")
        return problems
    seen_uuids: dict[str, int] = {}
    seen_indexes: dict[int, int] = {}
    for i, gpu in enumerate(gpus):
        at = f"gpus[{i}]"
        for name, limit in (("uuid", GPU_UUID_MAX), ("name", GPU_NAME_MAX)):
            if len(gpu[name]) > limit:
                add(f"{at}.{name}", f"at most {limit} characters are allowed.")
        if gpu["uuid"] in seen_uuids:
            add(f"{at}.uuid", f"{gpu['uuid']} is also gpus[{seen_uuids[gpu['uuid']]}].")
        seen_uuids.setdefault(gpu["uuid"], i)
        if gpu["index"] in seen_indexes:
            add(f"{at}.index", f"index {gpu['index']} is also gpus[{seen_indexes[gpu['index']]}].")
        seen_indexes.setdefault(gpu["index"], i)
        if len(gpu.get("processes") or []) > MAX_PROCESSES:
            add(f"{at}.processes", f"at most {MAX_PROCESSES} processes are accepted.")
        instances = gpu.get("instances") or []
        if len(instances) > MAX_INSTANCES_PER_GPU:
            add(
                f"{at}.instances",
                f"{len(instances)} MIG instances; a GPU has at most {MAX_INSTANCES_PER_GPU}.",
            )
            continue
        seen_gi: dict[int, int] = {}
        for j, instance in enumerate(instances):
            at_instance = f"{at}.instances[{j}]"
            if len(instance["profile"]) > MIG_PROFILE_MAX:
                add(f"{at_instance}.profile", f"at most {MIG_PROFILE_MAX} characters are allowed.")
            if instance["gi_id"] in seen_gi:
                add(
                    f"{at_instance}.gi_id",
                    f"gi_id {instance['gi_id']} is also {at}.instances[{seen_gi[instance['gi_id']]}].",
                )
            seen_gi.setdefault(instance["gi_id"], j)
            if len(instance.get("processes") or []) > MAX_PROCESSES:
                add(f"{at_instance}.processes", f"at most {MAX_PROCESSES} processes are accepted.")
    return problems


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
    """What ``POST agent/report/`` answers: the generation to apply and the open probes."""

    desired_generation: int
    probes: int


def agent_report_ingest(*, node: Node, report: Mapping[str, Any]) -> int:
    """``agent_report_answer``'s desired generation."""
    return agent_report_answer(node=node, report=report).desired_generation


@transaction.atomic
def agent_report_answer(*, node: Node, report: Mapping[str, Any]) -> ReportAnswer:
    """Store what ``node``'s agent reports: GPUs upserted, MIG instances replaced, the node
    marked seen; layouts the agent reports applied (``applied_generation``) succeed, drained
    layouts whose instances went idle are released, and layouts waiting for a reboot go back
    to pending once the GPU's MIG mode is right. A bounded number of queries whatever the
    report's size (bulk writes). Answers the desired generation (the highest generation the
    agent has to apply, ``GET agent/desired/``, 0 when none) and how many isolation probes
    it has to run (``GET agent/probes/``).

    Refused whole (nothing stored): a report for another node (403), a GPU registered to
    another node (403), sizes past the limits or duplicates (400, every problem named)."""
    if report.get("node") != node.name:
        raise PermissionDenied(
            "A node token may only report for its own node.",
            fields={"node": [f"this token belongs to node {node.name}"]},
        )
    problems = _report_problems(report)
    if problems:
        raise ValidationFailed(
            "; ".join(f"{path}: {msgs[0]}" for path, msgs in problems.items()), fields=problems
        )
    now = timezone.now()
    if connection.vendor == "postgresql":
        was_stale, busy, layouts_open, probes = _ingest_postgresql(
            node=node, report=report, now=now
        )
    else:
        was_stale, busy = _ingest_orm(node=node, report=report, now=now)
        layouts_open = True
        probes = IsolationProbe.objects.filter(gpu__node=node, state__in=OPEN_PROBE_STATES).count()
    if was_stale:
        audit_record(
            actor=None,
            action="node.reporting",
            obj=node,
            before={"stale": True},
            after={"stale": False, "last_report_at": _iso(now)},
        )
    for hook in REPORT_INGESTED:
        transaction.on_commit(partial(hook, node=node, report=report, now=now), robust=True)
    if not layouts_open:
        # No pending, applying or reboot-required layout on the node (the usual case): nothing
        # to confirm, release or reopen, and nothing for the agent to apply.
        return ReportAnswer(0, probes)
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
    _release_drained(node=node, busy=busy, now=now)
    return ReportAnswer(agent_desired_generation(node=node), probes)


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
    rows = [
        Gpu(
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
        for g in gpus
    ]
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
    )
    return locked.stale, _busy(gpus, ids)


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
  driver_version = COALESCE(NULLIF(%s, ''), n.driver_version)
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
    uuids = [g["uuid"] for g in gpus]
    with connection.cursor() as cursor:
        cursor.execute(
            _PG_NODE_UPDATE,
            [now, report.get("agent_version") or "", report.get("driver_version") or "", node.pk],
        )
        row = cursor.fetchone()
        if row is None:
            raise Node.DoesNotExist("Node matching query does not exist.")
        was_stale = bool(row[0])
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
        cursor.execute(_PG_INSTANCES_DELETE, [node.pk])
        instances = [
            {"gpu_id": ids[g["uuid"]], **_instance_fields(inst)}
            for g in gpus
            for inst in g.get("instances") or []
        ]
        if instances:
            cursor.execute(_PG_INSTANCES_INSERT, [now, json.dumps(instances)])
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


_PG_INSTANCES_ATTRIBUTE = """
UPDATE gpu_agent_miginstance m SET tenant_id = r.tenant_id
FROM gpu_agent_gpu g, jsonb_to_recordset(%s::jsonb) AS r(uuid text, gi_id int, tenant_id bigint)
WHERE g.id = m.gpu_id AND g.node_id = %s AND g.uuid = r.uuid AND m.gi_id = r.gi_id"""


def instances_attribute(*, node: Node, tenants: Mapping[tuple[str, int], int | None]) -> int:
    """Set ``MigInstance.tenant`` of ``node``'s instances from (GPU uuid, gi_id) -> tenant id
    (the tenant whose pod runs on it; None: unknown). One statement on PostgreSQL. Returns
    the rows updated."""
    if not tenants:
        return 0
    if connection.vendor == "postgresql":
        rows = [{"uuid": u, "gi_id": gi, "tenant_id": t} for (u, gi), t in tenants.items()]
        with connection.cursor() as cursor:
            cursor.execute(_PG_INSTANCES_ATTRIBUTE, [json.dumps(rows), node.pk])
            return cursor.rowcount
    updated = 0
    for (uuid, gi_id), tenant_id in tenants.items():
        updated += MigInstance.objects.filter(
            gpu__node_id=node.pk, gpu__uuid=uuid, gi_id=gi_id
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
            layout.message = _waiting_message(still)
        else:
            layout.message = "Instances idle; the agent applies the layout."
            layout.deadline = now + layout_deadline()
        layout.updated_at = now
        changed.append(layout)
    if changed:
        MigLayout.objects.bulk_update(changed, ["waiting_for", "message", "deadline", "updated_at"])


def _waiting_message(waiting: Sequence[int]) -> str:
    names = [("processes outside MIG" if gi == WHOLE_GPU else f"instance {gi}") for gi in waiting]
    return f"waiting for {', '.join(names)} to go idle"


def agent_desired_generation(*, node: Node) -> int:
    """The highest generation among the layouts ``node``'s agent has to apply; 0: none."""
    value = (
        MigLayout.objects.filter(gpu__node_id=node.pk, state__in=OPEN_LAYOUT_STATES)
        .filter(waiting_for=[])
        .exclude(gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR)  # the operator applies
        .aggregate(top=Max("generation"))["top"]
    )
    return int(value or 0)


# --- desired layouts ------------------------------------------------------------------------


@dataclass(frozen=True)
class DesiredGpu:
    uuid: str
    generation: int
    mig_enabled: bool
    instances: list[dict[str, Any]] = field(default_factory=list)


def agent_desired(*, node: Node) -> list[DesiredGpu]:
    """The GPUs of ``node`` with a layout to apply (pending or applying, not draining)."""
    layouts = (
        MigLayout.objects.filter(gpu__node_id=node.pk, state__in=OPEN_LAYOUT_STATES)
        .filter(waiting_for=[])
        .exclude(gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR)  # the operator applies
        .select_related("gpu")
        .order_by("gpu__index", "gpu_id")
    )
    return [
        DesiredGpu(
            uuid=layout.gpu.uuid,
            generation=layout.generation,
            mig_enabled=layout.mig_enabled,
            instances=[{"profile": i["profile"], "start": i["start"]} for i in layout.instances],
        )
        for layout in layouts
    ]


def _validate_placements(
    *, gpu: Gpu, instances: Sequence[Mapping[str, Any]]
) -> list[tuple[str, int, int]]:
    """(profile, start, size) for every requested instance, or 400 with every broken rule."""
    from gpu_agent.mig.catalogue import load_catalogue  # pure, loaded on first use
    from gpu_agent.mig.layout import InstanceRequest, validate_layout

    model = load_catalogue().find_model(gpu.name)
    if model is None:
        raise ValidationFailed.for_field(
            "instances", f"{gpu.name} has no MIG profiles in the catalogue; it cannot be split."
        )
    result = validate_layout(
        model,
        [InstanceRequest(profile=i["profile"], start=i.get("start")) for i in instances],
    )
    if not result.ok:
        issues = getattr(result, "issues", None) or []
        pairs = (
            [(issue.path, issue.message) for issue in issues]
            if issues
            else [(_error_field(str(e)), str(e)) for e in result.errors]
        )
        fields: dict[str, list[str]] = {}
        for path, message in pairs:
            fields.setdefault(path, []).append(message)
        rules = sorted({issue.rule for issue in issues})
        raise ValidationFailed(
            "; ".join(f"{path}: {message}" for path, message in pairs),
            fields=fields,
            **({"rules": rules} if rules else {}),
        )
    return [(p.profile, p.start, p.size) for p in result.placements]


def _error_field(message: str) -> str:
    """The field an error of the layout validator is about when it gives no path:
    ``instances[i].field`` when the message names it, else ``instances``."""
    match = re.search(r"instances\[\d+\](?:\.\w+)?", message)
    return match.group(0) if match else "instances"


def busy_destroyed_by(
    *, gpu: Gpu, keep: set[tuple[str, int]], mig_enabled: bool
) -> list[tuple[int, str]]:
    """(gi_id or WHOLE_GPU, why) for every busy thing a layout keeping ``keep`` (profile,
    start) would destroy: what makes ``layout_set`` answer 409 unless drained. The portal's
    live check asks the same question here, so the two cannot disagree."""
    found: list[tuple[int, str]] = []
    resets = mig_enabled != gpu.mig_mode_current
    if resets and gpu.processes:
        found.append((WHOLE_GPU, f"GPU {gpu.uuid} is busy: {_pids(gpu.processes)}"))
    for instance in gpu.instances.all():
        if not instance.busy:
            continue
        if not resets and mig_enabled and (instance.profile, instance.start) in keep:
            continue
        found.append(
            (
                instance.gi_id,
                f"instance {instance.gi_id} ({instance.profile} at slice {instance.start}) is "
                f"busy: {_pids(instance.processes)}",
            )
        )
    return found


def _pids(processes: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for p in processes:
        pod = f" (pod {p['pod_uid']})" if p.get("pod_uid") else ""
        parts.append(f"pid {p['pid']}{pod}")
    return ", ".join(parts)


@transaction.atomic
def layout_set(
    *,
    gpu: Gpu,
    instances: Sequence[Mapping[str, Any]],
    actor: User,
    drain: bool = False,
    mig_enabled: bool = True,
) -> MigLayout:
    """Set ``gpu``'s desired MIG layout: validated against the GPU model's placement rules
    (400 naming ``instances[i].field``), refused when it would destroy a busy instance (409
    naming it and its processes) unless ``drain``: then queued until they go idle. Bumps the
    generation; earlier open layouts fail as superseded; the agent has until the deadline."""
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu.pk)
    if not mig_enabled and instances:
        raise ValidationFailed.for_field(
            "instances", "A GPU with MIG disabled has no MIG instances; send an empty list."
        )
    placements = _validate_placements(gpu=gpu, instances=instances) if mig_enabled else []
    busy = busy_destroyed_by(
        gpu=gpu,
        keep={(profile, start) for profile, start, _ in placements},
        mig_enabled=mig_enabled,
    )
    if busy and not drain:
        raise Conflict(
            "The layout would destroy what is running: "
            + "; ".join(why for _, why in busy)
            + ". Send drain: true to apply it once they are idle.",
            fields={"instances": [why for _, why in busy]},
        )
    now = timezone.now()
    top = MigLayout.objects.filter(gpu=gpu).aggregate(top=Max("generation"))["top"] or 0
    generation = top + 1
    superseded = list(
        MigLayout.objects.filter(
            gpu=gpu, state__in=[*OPEN_LAYOUT_STATES, LayoutState.REBOOT_REQUIRED]
        ).values_list("generation", flat=True)
    )
    if superseded:
        MigLayout.objects.filter(gpu=gpu, generation__in=superseded).update(
            state=LayoutState.FAILED,
            message=f"superseded by generation {generation}",
            updated_at=now,
        )
    waiting = [gi for gi, _ in busy]
    layout = MigLayout.objects.create(
        gpu=gpu,
        generation=generation,
        mig_enabled=mig_enabled,
        instances=[{"profile": profile, "start": start} for profile, start, _ in placements],
        state=LayoutState.PENDING,
        message=_waiting_message(waiting) if waiting else "",
        waiting_for=waiting,
        requested_by=actor,
        deadline=None if waiting else now + layout_deadline(),
    )
    audit_record(
        actor=actor,
        action="mig_layout.set",
        obj=layout,
        object_id=f"{gpu.uuid}@{generation}",
        after={
            "node": gpu.node.name,
            "gpu": gpu.uuid,
            "generation": generation,
            "mig_enabled": mig_enabled,
            "instances": layout.instances,
            "drain": drain,
            "waiting_for": waiting,
            "superseded": superseded,
        },
    )
    # A gpu-operator cluster: push the ConfigMap and node label on commit (no agent applies).
    from gpu_agent.operator_services import operator_layout_changed

    operator_layout_changed(gpu=gpu)
    return layout


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class MigPlan:
    """A confirmed planner proposal, as the audit trail names it."""

    gpus: int


@dataclass(frozen=True)
class PlanRefusal:
    gpu: Gpu
    message: str
    status: int


def plan_apply(
    *, layouts: Sequence[tuple[Gpu, Sequence[Mapping[str, Any]]]], actor: User
) -> tuple[list[MigLayout], list[PlanRefusal]]:
    """A confirmed planner proposal: ``layout_set`` for each GPU it changes (each GPU all or
    nothing; a refused GPU keeps its layout and its reason), and one audit event for the plan
    as a whole."""
    done: list[MigLayout] = []
    refused: list[PlanRefusal] = []
    for gpu, instances in layouts:
        try:
            done.append(layout_set(gpu=gpu, instances=list(instances), actor=actor))
        except ApplicationError as exc:
            details = [m for ms in exc.fields.values() for m in ms if m not in exc.message]
            refused.append(PlanRefusal(gpu, " ".join([exc.message, *details]), exc.status_code))
    audit_record(
        actor=actor,
        action="mig_plan.applied",
        obj=MigPlan(len(layouts)),
        object_id=f"{len(done)} of {len(layouts)} GPU(s)",
        after={
            "applied": [layout.gpu.uuid for layout in done],
            "refused": {r.gpu.uuid: r.message for r in refused},
        },
    )
    return done, refused


RESULT_STATES = (
    LayoutState.APPLYING,
    LayoutState.SUCCESS,
    LayoutState.FAILED,
    LayoutState.REBOOT_REQUIRED,
)


@dataclass(frozen=True)
class ResultOutcome:
    uuid: str
    generation: int
    accepted: bool
    state: str | None
    detail: str


@transaction.atomic
def agent_result(
    *,
    node: Node,
    uuid: str,
    generation: int,
    state: str,
    message: str = "",
    device_plugin: str = "",
    device_plugin_message: str = "",
) -> ResultOutcome:
    """Record the agent's result for a GPU's layout. Results for a generation that is not the
    GPU's latest, or for a layout already applied, are ignored (``accepted`` false), except
    the device plugin's state of the applied one (restarted later)."""
    if state not in RESULT_STATES:
        raise ValidationFailed.for_field(
            "state", f"{state!r} is not one of {[str(s) for s in RESULT_STATES]}."
        )
    _check_length("message", message, MESSAGE_MAX)
    gpu = Gpu.objects.filter(uuid=uuid).only("pk", "node_id", "uuid").first()
    if gpu is None:
        raise NotFound(f"No GPU {uuid} has been reported.", fields={"uuid": ["unknown GPU"]})
    if gpu.node_id != node.pk:
        raise PermissionDenied(
            "A node may only report results for its own GPUs.",
            fields={"uuid": [f"{uuid} is registered to another node"]},
        )
    layout = (
        MigLayout.objects.select_for_update().filter(gpu_id=gpu.pk).order_by("-generation").first()
    )

    def ignored(detail: str) -> ResultOutcome:
        return ResultOutcome(uuid, generation, False, layout.state if layout else None, detail)

    if layout is None or generation != layout.generation:
        latest = layout.generation if layout else 0
        return ignored(f"generation {generation} is not the latest ({latest}); ignored")
    if layout.waiting_for:
        return ignored(f"generation {generation} is still draining; ignored")
    if layout.state == LayoutState.SUCCESS:
        if device_plugin and (device_plugin, device_plugin_message) != (
            layout.device_plugin,
            layout.device_plugin_message,
        ):
            _device_plugin_record(layout, device_plugin, device_plugin_message, node)
            return ResultOutcome(uuid, generation, True, layout.state, "device plugin recorded")
        return ignored(f"generation {generation} is already applied; ignored")
    before = {"state": layout.state, "message": layout.message}
    now = timezone.now()
    layout.state = state
    layout.message = message
    if state == LayoutState.SUCCESS:
        layout.applied_at = now
    if device_plugin:
        layout.device_plugin = device_plugin
        layout.device_plugin_message = device_plugin_message
    layout.save(
        update_fields=[
            "state",
            "message",
            "applied_at",
            "device_plugin",
            "device_plugin_message",
            "updated_at",
        ]
    )
    if before["state"] != state or before["message"] != message:
        audit_record(
            actor=None,
            action=f"mig_layout.{state}",
            obj=layout,
            object_id=f"{uuid}@{generation}",
            before=before,
            after={"state": state, "message": message, "node": node.name},
        )
    return ResultOutcome(uuid, generation, True, layout.state, "recorded")


def _device_plugin_record(layout: MigLayout, state: str, message: str, node: Node) -> None:
    before = {"device_plugin": layout.device_plugin}
    layout.device_plugin, layout.device_plugin_message = state, message
    layout.save(update_fields=["device_plugin", "device_plugin_message", "updated_at"])
    audit_record(
        actor=None,
        action=f"mig_layout.device_plugin_{state}",
        obj=layout,
        object_id=f"{layout.gpu.uuid}@{layout.generation}",
        before=before,
        after={"device_plugin": state, "message": message, "node": node.name},
    )


# --- periodic -------------------------------------------------------------------------------


@transaction.atomic
def nodes_mark_stale(*, now: datetime | None = None) -> list[str]:
    """Mark nodes whose agent stopped reporting (no report for ``AGENT_STALE_AFTER_S``) stale.
    Idempotent; returns the names marked."""
    now = now or timezone.now()
    cutoff = now - stale_after()
    candidates = list(
        Node.objects.select_for_update(skip_locked=True)
        .filter(stale=False)
        .filter(
            Q(last_report_at__lt=cutoff) | Q(last_report_at__isnull=True, created_at__lt=cutoff)
        )
        .only("pk", "name", "last_report_at")
    )
    if not candidates:
        return []
    Node.objects.filter(pk__in=[n.pk for n in candidates], stale=False).update(stale=True)
    for node in candidates:
        audit_record(
            actor=None,
            action="node.stale",
            obj=node,
            before={"stale": False},
            after={"stale": True, "last_report_at": _iso(node.last_report_at)},
        )
    return [n.name for n in candidates]


@transaction.atomic
def layouts_fail_overdue(*, now: datetime | None = None) -> list[MigLayout]:
    """Fail open layouts past their deadline, with the reason. Idempotent."""
    now = now or timezone.now()
    minutes = round(layout_deadline().total_seconds() / 60)
    overdue = list(
        MigLayout.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state__in=OPEN_LAYOUT_STATES, deadline__lt=now)
        # The GPU Operator's layouts: operator_services.operator_layouts_fail_overdue.
        .exclude(gpu__node__cluster__mig_driver=MigDriver.GPU_OPERATOR)
        .select_related("gpu__node")
    )
    failed = []
    for layout in overdue:
        node = layout.gpu.node
        reason = (
            f"not applied within {minutes} minutes by node {node.name} "
            f"(last report at {_iso(node.last_report_at)})"
        )
        updated = MigLayout.objects.filter(pk=layout.pk, state__in=OPEN_LAYOUT_STATES).update(
            state=LayoutState.FAILED, message=reason, updated_at=now
        )
        if not updated:
            continue
        before = {"state": layout.state}
        layout.state, layout.message = LayoutState.FAILED, reason
        audit_record(
            actor=None,
            action="mig_layout.failed",
            obj=layout,
            object_id=f"{layout.gpu.uuid}@{layout.generation}",
            before=before,
            after={"state": LayoutState.FAILED, "message": reason},
        )
        failed.append(layout)
    return failed
