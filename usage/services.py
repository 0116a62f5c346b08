"""Writes of the usage store: samples in bulk, rollups, retention, raw partitions.

Samples are tuples in ``COLUMNS`` order. ``samples_write`` is the one bulk path every producer
uses (agents' reports, the cluster collector, the demo, the API): it checks every row first
and refuses the whole batch on any problem (nothing written), then writes with PostgreSQL
``COPY`` through psycopg 3 (``bulk_create`` elsewhere) and marks the rows' 5-minute buckets
pending in the same transaction, so a late sample re-rolls its window.

Rollups (``rollups_run``): each resolution claims its pending buckets, recomputes them whole
from its source (raw samples for 5 minutes, 5-minute rollups for hours, hourly for days:
delete + insert, so running twice changes nothing) and marks the enclosing coarser buckets
pending. A PostgreSQL advisory lock per resolution serialises concurrent runs.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from core.errors import Conflict, NotFound, PermissionDenied, ValidationFailed
from core.tasks import enqueue
from gpu_agent.services.reports import DeviceReading, ReportReadings, instances_attribute
from quotas.backends import workload_set_active
from quotas.choices import CapSubject
from quotas.kube.applier import ApplyError
from quotas.models import ResourceFlavor
from quotas.services import person_caps_set
from tenants.choices import MembershipRole
from tenants.models import Membership, Tenant, User
from tenants.selectors import user_can_manage_tenant
from tenants.services import audit_record
from usage.buckets import EPOCH, RESOLUTION_NAMES, bucket_start, retention
from usage.choices import (
    RAW,
    ROLLUP_SOURCE,
    Metric,
    PrometheusFigure,
    Resolution,
    Source,
    WorkloadState,
)
from usage.models import (
    GPU_UUID_MAX,
    MIG_PROFILE_MAX,
    PROMETHEUS_STEP_MAX_S,
    PROMETHEUS_STEP_MIN_S,
    PROMETHEUS_TIMEOUT_MAX_S,
    PendingBucket,
    Pod,
    PrometheusSource,
    Rollup,
    RollupState,
    Sample,
    Workload,
    WorkloadActivity,
)
from usage.promql import parse_label_matchers

logger = logging.getLogger(__name__)

COLUMNS = (
    "time", "metric", "value", "cluster_id", "tenant_id", "flavor_id", "node_id", "gpu_uuid",
    "gi_id", "mig_profile",
)  # fmt: skip
SampleRow = tuple[
    datetime, int, float, int | None, int | None, int | None, int | None, str | None,
    int | None, str | None,
]  # fmt: skip
COPY_SQL = f"COPY usage_sample ({', '.join(COLUMNS)}, source) FROM STDIN"
MAX_BATCH = 2_000_000
METRICS = frozenset(int(m) for m in Metric)
FIVE_MINUTES = int(Resolution.FIVE_MINUTES)


# --- raw partitions (PostgreSQL) -------------------------------------------------------------

_PG_PENDING_AND_MISSING = """
WITH marked AS (
  INSERT INTO usage_pending_bucket (resolution, bucket)
  SELECT %s, unnest(%s::timestamptz[]) ON CONFLICT DO NOTHING
)
SELECT d FROM unnest(%s::text[]) AS d WHERE to_regclass(d) IS NULL"""


def partition_name(day: date) -> str:
    return f"usage_sample_p{day:%Y%m%d}"


def partitions_ensure(*, days: Iterable[date]) -> list[str]:
    """Create the daily partitions of ``usage_sample`` that are missing (PostgreSQL; nothing
    elsewhere). Safe to run concurrently. Returns the names created."""
    if connection.vendor != "postgresql":
        return []
    wanted = sorted(set(days))
    created: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d FROM unnest(%s::text[]) AS d WHERE to_regclass(d) IS NULL",
            [[partition_name(d) for d in wanted]],
        )
        missing = {row[0] for row in cursor.fetchall()}
        for day in wanted:
            name = partition_name(day)
            if name not in missing:
                continue
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            try:
                with transaction.atomic():  # a savepoint: the rare path
                    cursor.execute(
                        f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF usage_sample "
                        "FOR VALUES FROM (%s) TO (%s)",
                        [start, start + timedelta(days=1)],
                    )
            except DatabaseError:  # another process created it at the same moment
                logger.info("partition %s created concurrently", name)
            created.append(name)
    return created


def partitions_drop_before(*, day: date) -> list[str]:
    """Drop the daily partitions that end on or before ``day`` (retention). PostgreSQL only."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'usage_sample'::regclass ORDER BY c.relname"
        )
        names = [row[0] for row in cursor.fetchall()]
        dropped = []
        for name in names:
            try:
                part_day = datetime.strptime(name.removeprefix("usage_sample_p"), "%Y%m%d").date()
            except ValueError:
                continue
            if part_day < day:
                cursor.execute(f"DROP TABLE IF EXISTS {name}")
                dropped.append(name)
    return dropped


# --- samples ---------------------------------------------------------------------------------


def _problem(index: int, field: str, message: str) -> ValidationFailed:
    path = f"samples[{index}].{field}"
    return ValidationFailed(f"{path}: {message}", fields={path: [message]})


def _check_rows(rows: Sequence[SampleRow]) -> set[int]:
    """Every row's types and ranges; the 5-minute buckets (epoch // 300) the rows fall in.
    Raises ValidationFailed naming the first bad row and field."""
    if len(rows) > MAX_BATCH:
        raise ValidationFailed.for_field("samples", f"at most {MAX_BATCH} samples per batch.")
    buckets: set[int] = set()
    metrics = METRICS
    isfinite = math.isfinite
    for i, row in enumerate(rows):
        if len(row) != len(COLUMNS):
            raise _problem(i, "", f"a sample has {len(COLUMNS)} fields, not {len(row)}.")
        when, metric, value, cluster_id, tenant_id, flavor_id, node_id, uuid, gi_id, prof = row
        if type(when) is not datetime or when.tzinfo is None:
            raise _problem(i, "time", "an aware datetime (with a time zone) is required.")
        if metric not in metrics:
            raise _problem(i, "metric", f"{metric!r} is not a known metric.")
        if type(value) is not float and type(value) is not int:
            raise _problem(i, "value", f"{value!r} is not a number.")
        if not isfinite(value) or value < 0:
            raise _problem(i, "value", f"{value!r} is not a finite, non-negative number.")
        for name, ident in (
            ("cluster_id", cluster_id),
            ("tenant_id", tenant_id),
            ("flavor_id", flavor_id),
            ("node_id", node_id),
        ):
            if ident is not None and (type(ident) is not int or ident <= 0):
                raise _problem(i, name, f"{ident!r} is not a positive id.")
        if gi_id is not None and (type(gi_id) is not int or not 0 <= gi_id <= 32767):
            raise _problem(i, "gi_id", f"{gi_id!r} is not a MIG GPU instance id.")
        if uuid is not None and (type(uuid) is not str or len(uuid) > GPU_UUID_MAX):
            raise _problem(i, "gpu_uuid", f"a string of at most {GPU_UUID_MAX} characters.")
        if prof is not None and (type(prof) is not str or len(prof) > MIG_PROFILE_MAX):
            raise _problem(i, "mig_profile", f"a string of at most {MIG_PROFILE_MAX} characters.")
        buckets.add(int(when.timestamp()) // FIVE_MINUTES)
    return buckets


def _copy(rows: Sequence[SampleRow], source: int) -> None:
    with connection.cursor() as cursor, cursor.cursor.copy(COPY_SQL) as copy:
        for row in rows:
            copy.write_row((*row, source))


def _insert_portable(rows: Sequence[SampleRow], source: int) -> None:
    """Other databases (SQLite: the embedded demo): one prepared INSERT run for every row
    (``executemany``); ``bulk_create`` would split a batch into statements of ~90 rows and
    build a model instance per row, 5-10x slower for a month of demo samples."""
    adapt = connection.ops.adapt_datetimefield_value
    sql = (
        f"INSERT INTO usage_sample ({', '.join(COLUMNS)}, source) "  # noqa: S608 - constant SQL; every value is a parameter
        f"VALUES ({', '.join(['%s'] * (len(COLUMNS) + 1))})"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(adapt(row[0]), *row[1:], source) for row in rows])


def _mark_pending(resolution: int, buckets: Iterable[datetime]) -> None:
    buckets = sorted(set(buckets))
    if not buckets:
        return
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO usage_pending_bucket (resolution, bucket) "
                "SELECT %s, unnest(%s::timestamptz[]) ON CONFLICT DO NOTHING",
                [resolution, buckets],
            )
    else:
        PendingBucket.objects.bulk_create(
            [PendingBucket(resolution=resolution, bucket=b) for b in buckets],
            ignore_conflicts=True,
        )


# Enqueued by name (alerts sits above usage): the quota rules for a collection's tenants.
QUOTAS_COLLECTED_TASK = "alerts.tasks.evaluate_quotas_collected"


def quota_readings_judge(*, cluster_id: int, rows: Sequence[SampleRow]) -> list[int]:
    """After the collection's transaction commits, have the quota rules judge the tenants
    whose Kueue use (``QUOTA_USED``) it just wrote on ``cluster_id``, and only those: a hold
    waits for one collection, not for the roll-up and the next evaluation. A broker that is
    down is logged; the evaluation on the beat decides the hold then. Returns the tenants."""
    read = [
        r for r in rows if r[1] == Metric.QUOTA_USED and r[4] is not None and r[3] == cluster_id
    ]
    tenants = sorted({int(r[4]) for r in read if r[4] is not None})
    if tenants:
        # Judged as of the reading (the collection's time), not whenever a worker takes it.
        at = max(r[0] for r in read).isoformat()
        transaction.on_commit(lambda: _enqueue_quota_judgement(cluster_id, tenants, at))
    return tenants


def _enqueue_quota_judgement(cluster_id: int, tenants: list[int], at: str) -> None:
    try:
        enqueue(QUOTAS_COLLECTED_TASK, [cluster_id, tenants, at])
    except Exception:
        logger.warning("quota judgement of cluster %s not enqueued now", cluster_id, exc_info=True)


def samples_write(*, rows: Sequence[SampleRow], source: int = Source.UNKNOWN) -> int:
    """Store ``rows`` (tuples in ``COLUMNS`` order), all from ``source`` (a ``Source``, stored
    with each row), whole or not at all: every row is checked
    first (ValidationFailed, 400, names the row and field); then one ``COPY`` on PostgreSQL
    (partitions for new days created on demand), ``executemany`` elsewhere; the rows'
    5-minute buckets are marked for rollup. Returns the rows written."""
    if not rows:
        return 0
    if source not in Source.values:
        raise ValidationFailed.for_field("source", f"{source!r} is not a known source.")
    buckets = _check_rows(rows)  # before any write: a bad batch changes nothing
    # No savepoint of its own: inside a caller's transaction it joins it (the agents' hook).
    with transaction.atomic(savepoint=False):
        starts = sorted(EPOCH + timedelta(seconds=b * FIVE_MINUTES) for b in buckets)
        if connection.vendor == "postgresql":
            days = sorted({date.fromordinal(719163 + b * FIVE_MINUTES // 86400) for b in buckets})
            # One statement marks the buckets pending and names the day partitions missing.
            with connection.cursor() as cursor:
                cursor.execute(
                    _PG_PENDING_AND_MISSING,
                    [FIVE_MINUTES, starts, [partition_name(d) for d in days]],
                )
                missing = {row[0] for row in cursor.fetchall()}
            if missing:
                partitions_ensure(days=[d for d in days if partition_name(d) in missing])
            _copy(rows, int(source))
        else:
            _insert_portable(rows, int(source))
            _mark_pending(FIVE_MINUTES, starts)
    return len(rows)


def _parse_time(value: Any, path: str) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return parsed
    raise ValidationFailed(
        f"{path}: an ISO 8601 time with a zone is required.",
        fields={path: ["an ISO 8601 time with a zone is required."]},
    )


def samples_ingest(*, samples: Sequence[Mapping[str, Any]]) -> int:
    """A JSON batch (``[{"time", "metric", "value", "cluster_id", ...}]``, metric by name:
    ``"gpu_utilization"``): every item checked, refused whole on any problem."""
    if not isinstance(samples, list) or not samples:
        raise ValidationFailed.for_field("samples", "a non-empty list of samples is required.")
    by_name = {m.name.lower(): int(m) for m in Metric}
    rows: list[Any] = []
    for i, item in enumerate(samples):
        at = f"samples[{i}]"
        if not isinstance(item, dict):
            raise ValidationFailed.for_field(at, "an object is required.")
        unknown = sorted(set(item) - set(COLUMNS))
        if unknown:
            raise ValidationFailed.for_field(f"{at}.{unknown[0]}", "unknown field.")
        metric = by_name.get(str(item.get("metric", "")).lower())
        if metric is None:
            raise ValidationFailed.for_field(
                f"{at}.metric", f"{item.get('metric')!r} is not one of {sorted(by_name)}."
            )
        rows.append(
            (  # the types are checked by samples_write
                _parse_time(item.get("time"), f"{at}.time"),
                metric,
                item.get("value"),
                *(item.get(c) for c in COLUMNS[3:]),
            )
        )
    return samples_write(rows=rows, source=Source.API)


# --- agents' reports -------------------------------------------------------------------------
#
# One way from an agent's report to the charts: gpu_agent validates and stores the report,
# then (after its commit) hands this app the report's readings through its REPORT_INGESTED
# hook (registered in ``UsageConfig.ready``); ``agent_readings_record`` attributes the MIG
# instances to tenants and, at most once per USAGE_AGENT_SAMPLE_EVERY_S per node, writes the readings as samples
# through ``samples_write`` like every other producer; the dashboards read the rollups.


def _flavor_map(cluster_id: int | None) -> dict[tuple[str, str], int]:
    """(GPU model, MIG profile or "") -> flavor id on the cluster."""
    if cluster_id is None:
        return {}
    rows = ResourceFlavor.objects.filter(cluster_id=cluster_id, kind__in=["gpu", "mig", "vgpu"])
    return {
        (model, VGPU_KEY if kind == "vgpu" else profile if kind == "mig" else ""): pk
        for pk, kind, model, profile in rows.values_list("pk", "kind", "gpu_model", "mig_profile")
    }


# The second part of a vGPU flavor's key in ``_flavor_map`` (no MIG profile is spelt so).
VGPU_KEY = "vgpu"


_FLAVOR_CACHE: dict[int | None, tuple[datetime, dict[tuple[str, str], int]]] = {}
FLAVOR_CACHE_TTL = timedelta(seconds=60)


def _flavors_cached(cluster_id: int | None, now: datetime) -> dict[tuple[str, str], int]:
    cached = _FLAVOR_CACHE.get(cluster_id)
    if cached is None or now - cached[0] > FLAVOR_CACHE_TTL or now < cached[0]:
        cached = (now, _flavor_map(cluster_id))
        _FLAVOR_CACHE[cluster_id] = cached
    return cached[1]


PodOwner = tuple[int | None, str, str]  # (tenant id, Workload uid or "", node name or "")
_POD_CACHE: dict[int, tuple[datetime, dict[str, PodOwner]]] = {}
POD_CACHE_TTL = timedelta(seconds=60)  # the collector refreshes pods every minute anyway


def _pod_owners(cluster_id: int | None, now: datetime) -> dict[str, PodOwner]:
    """pod uid -> (tenant id, Workload uid or "", node) of the cluster's pods, read once a minute
    per process (an agent report then costs no query for it; a new pod is attributed within a
    minute or two)."""
    if cluster_id is None:
        return {}
    cached = _POD_CACHE.get(cluster_id)
    if cached is None or not timedelta(0) <= now - cached[0] <= POD_CACHE_TTL:
        pods = Pod.objects.filter(cluster_id=cluster_id).values_list(
            "uid", "tenant_id", "workload_uid", "node_name"
        )
        cached = (now, {uid: (tenant, workload, node) for uid, tenant, workload, node in pods})
        _POD_CACHE[cluster_id] = cached
    return cached[1]


def _owner(device: DeviceReading, pods: Mapping[str, PodOwner]) -> int | None:
    """The tenant of the first of the device's processes whose pod the collector knows."""
    for pod_uid in device.pod_uids:
        tenant_id = pods.get(pod_uid, (None, "", ""))[0]
        if tenant_id is not None:
            return tenant_id
    return None


def _workloads_of(device: DeviceReading, pods: Mapping[str, PodOwner]) -> set[str]:
    """The Workloads whose pods run on the device (several where a GPU is time-sliced)."""
    return {pods[uid][1] for uid in device.pod_uids if uid in pods and pods[uid][1]}


def vgpu_tenant_use(
    *, devices: Sequence[DeviceReading], pods: Mapping[str, PodOwner], node_name: str
) -> tuple[dict[int, float], dict[int, float]]:
    """GPU memory (MiB) and compute (percent points of a GPU) per tenant on a node's GPUs
    shared through HAMi, from the agent's per-pod figures (compute only for tenants with a
    sample). What a node says is held to what it can know: a pod the collector places on
    another node is not counted (a node cannot report for pods not on it), nor one no tenant
    owns; one pod counts at most the device's memory in use and 100% of it, and where the
    pods' sum passes the device's memory in use or 100% (a node's figures disagreeing with
    themselves) they are scaled down to it."""
    memory: dict[int, float] = defaultdict(float)
    cores: dict[int, float] = defaultdict(float)
    for device in devices:
        owned: list[tuple[int, float, float | None]] = []
        for pod_uid, mib, sm in device.pod_memory:
            tenant_id, _, pod_node = pods.get(pod_uid, (None, "", ""))
            if tenant_id is None or (pod_node and node_name and pod_node != node_name):
                continue
            util = None if sm is None else float(min(max(sm, 0), 100))
            owned.append((tenant_id, float(min(max(mib, 0), device.memory_used_mib)), util))
        total = sum(mib for _, mib, _ in owned)
        scale = device.memory_used_mib / total if total > device.memory_used_mib else 1.0
        busy = sum(util for _, _, util in owned if util is not None)
        busy_scale = 100.0 / busy if busy > 100 else 1.0
        for tenant_id, share, util in owned:
            memory[tenant_id] += share * scale
            if util is not None:
                cores[tenant_id] += util * busy_scale
    return dict(memory), dict(cores)


def workload_activity_record(*, cluster_id: int, at: datetime, peaks: Mapping[str, float]) -> int:
    """Fold ``peaks`` (Workload uid -> the highest utilisation of its GPUs in one reading)
    into the hour of ``at``: the hour's peak is the highest seen, whichever process writes
    it (one upsert, SQLite and PostgreSQL alike)."""
    if not peaks:
        return 0
    hour = bucket_start(at, Resolution.HOUR)
    table = WorkloadActivity._meta.db_table
    values = ", ".join(["(%s, %s, %s, %s, 1)"] * len(peaks))
    params: list[Any] = []
    for uid, peak in sorted(peaks.items()):
        params.extend([cluster_id, uid, _param(hour), float(peak)])
    sql = (
        f"INSERT INTO {table} (cluster_id, workload_uid, bucket, peak_utilization, samples) "  # noqa: S608 - constant SQL; every value is a parameter
        f"VALUES {values} ON CONFLICT (cluster_id, workload_uid, bucket) DO UPDATE SET "
        f"peak_utilization = CASE WHEN excluded.peak_utilization > {table}.peak_utilization "
        f"THEN excluded.peak_utilization ELSE {table}.peak_utilization END, "
        f"samples = {table}.samples + 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return len(peaks)


_AGENT_SAMPLES_CACHE: dict[int, tuple[datetime, bool]] = {}


def agent_samples_wanted(cluster_id: int | None, now: datetime) -> bool:
    """False where the cluster's Prometheus gives GPU utilisation and memory and its admin
    turned the node agents' usage samples off (the agents then only drive MIG). Read once a
    minute per process."""
    if cluster_id is None:
        return True
    cached = _AGENT_SAMPLES_CACHE.get(cluster_id)
    if cached is None or not timedelta(0) <= now - cached[0] <= FLAVOR_CACHE_TTL:
        source = (
            PrometheusSource.objects.filter(cluster_id=cluster_id, enabled=True)
            .values_list("node_agent_samples", "figures")
            .first()
        )
        wanted = source is None or source[0] or PrometheusFigure.GPU_USAGE not in source[1]
        cached = (now, bool(wanted))
        _AGENT_SAMPLES_CACHE[cluster_id] = cached
    return cached[1]


class SampleThrottle:
    """At most one sample set per node per ``USAGE_AGENT_SAMPLE_EVERY_S``, whichever web
    process receives its reports: a node's first report in a window adds a key to the shared
    cache that expires with the window (Redis in production, where ``add`` is one atomic
    ``SET NX EX``; without Redis, the file cache every process of the machine shares). A
    throttle, not state: a lost key only samples sooner, and a cache that cannot answer lets
    the report be sampled."""

    def __init__(self, *, cache: BaseCache | None = None, prefix: str = "usage:agent-sampled"):
        self._cache = cache
        self.prefix = prefix

    def due(self, *, node_id: int) -> bool:
        """Whether the node's readings become samples now (and spend its window if so)."""
        cache = self._cache if self._cache is not None else caches["default"]
        try:
            return bool(
                cache.add(
                    f"{self.prefix}:{node_id}", 1, timeout=settings.USAGE_AGENT_SAMPLE_EVERY_S
                )
            )
        except Exception:  # the cache is down: sample (the rollups average the extra rows)
            logger.warning("agent sample throttle: cache unavailable", exc_info=True)
            return True


agent_sample_throttle = SampleThrottle()


def agent_readings_record(*, readings: ReportReadings) -> int:
    """Record a committed report's readings (the ``gpu_agent`` hook): every MIG instance
    running a known tenant's pod gets its ``tenant`` (the report stored the instances anew),
    and, when ``agent_sample_throttle`` says the node is due, each GPU outside MIG and each
    MIG instance becomes samples (utilisation, memory used, processes) with its cluster,
    flavor, node and tenant (process ``pod_uid`` -> the collector's pods -> namespace ->
    tenant); each Workload whose pods run on a reported GPU gets its hour's peak
    (``workload_activity_record``). Returns the samples written (0 when throttled). A bounded number of statements
    per report."""
    pods = _pod_owners(readings.cluster_id, readings.at)
    owned = [(device, _owner(device, pods)) for device in readings.devices]
    attributed = {
        (device.gpu_uuid, device.gi_id): tenant_id
        for device, tenant_id in owned
        if device.gi_id is not None and tenant_id is not None
    }
    with transaction.atomic():
        if attributed:
            instances_attribute(node_id=readings.node_id, tenants=attributed)
        if not agent_samples_wanted(readings.cluster_id, readings.at):
            return 0
        if not agent_sample_throttle.due(node_id=readings.node_id):
            return 0
        flavors = _flavors_cached(readings.cluster_id, readings.at)
        rows: list[SampleRow] = []
        for device, tenant_id in owned:
            base = (
                readings.cluster_id,
                tenant_id,
                flavors.get((device.model, device.mig_profile or "")),
                readings.node_id,
                device.gpu_uuid,
                device.gi_id,
                device.mig_profile,
            )
            if device.utilization_pct is not None:
                rows.append(
                    (readings.at, Metric.GPU_UTILIZATION, float(device.utilization_pct), *base)
                )
            rows.append((readings.at, Metric.GPU_MEMORY_USED, float(device.memory_used_mib), *base))
            rows.append((readings.at, Metric.GPU_PROCESSES, float(device.processes), *base))
        by_vgpu: dict[int, list[DeviceReading]] = defaultdict(list)
        for device in readings.devices:
            vgpu_flavor = flavors.get((device.model, VGPU_KEY))
            if vgpu_flavor is not None and device.gi_id is None:
                by_vgpu[vgpu_flavor].append(device)
        for flavor_id, devices in sorted(by_vgpu.items()):
            memory, cores = vgpu_tenant_use(
                devices=devices, pods=pods, node_name=readings.node_name
            )
            for metric, figures in ((Metric.VGPU_MEMORY_USED, memory),
                                    (Metric.VGPU_CORES_USED, cores)):  # fmt: skip
                for tenant_id, value in sorted(figures.items()):
                    rows.append(
                        (readings.at, metric, round(value, 1), readings.cluster_id,
                         tenant_id, flavor_id, readings.node_id, None, None, None)
                    )  # fmt: skip
        peaks: dict[str, float] = {}
        for device, _ in owned:
            if device.utilization_pct is None:
                continue
            for uid in _workloads_of(device, pods):
                peaks[uid] = max(peaks.get(uid, 0.0), float(device.utilization_pct))
        if readings.cluster_id is not None:
            workload_activity_record(cluster_id=readings.cluster_id, at=readings.at, peaks=peaks)
        return samples_write(rows=rows, source=Source.NODE_AGENT)


# --- rollups ---------------------------------------------------------------------------------


def _bucket_sql(column: str, resolution: int) -> str:
    if connection.vendor == "postgresql":
        return f"date_bin(interval '{resolution} seconds', {column}, timestamptz '1970-01-01')"
    return (
        f"datetime((CAST(strftime('%%s', {column}) AS INTEGER) / {resolution}) * {resolution}, "
        "'unixepoch')"
    )


def _param(value: datetime) -> Any:
    """A datetime as the raw SQL of this database wants it (SQLite: Django's text form)."""
    if connection.vendor == "postgresql":
        return value
    return connection.ops.adapt_datetimefield_value(value)


def _in_buckets() -> str:
    """SQL for "this bucket is one of the claimed ones" (one array / JSON parameter)."""
    if connection.vendor == "postgresql":
        return "IN (SELECT unnest(%s::timestamptz[]))"  # hashed: one probe per row
    return "IN (SELECT value FROM json_each(%s))"


def _buckets_param(buckets: Sequence[datetime]) -> Any:
    if connection.vendor == "postgresql":
        return list(buckets)
    return json.dumps([connection.ops.adapt_datetimefield_value(b) for b in buckets])


def _rollup_insert_sql(resolution: int, source: int | None) -> str:
    """Recompute the claimed buckets (params: resolution, [source resolution], range start,
    range end, claimed buckets)."""
    if source is None:
        bucket = _bucket_sql("time", resolution)
        return (
            "INSERT INTO usage_rollup (resolution, bucket, metric, cluster_id, tenant_id, "  # noqa: S608 - constant SQL; every value is a parameter
            "flavor_id, samples, sum, min, max, source) "
            f"SELECT %s, {bucket}, metric, COALESCE(cluster_id, 0), COALESCE(tenant_id, 0), "
            "COALESCE(flavor_id, 0), COUNT(*), SUM(value), MIN(value), MAX(value), MAX(source) "
            f"FROM usage_sample WHERE time >= %s AND time < %s AND {bucket} {_in_buckets()} "
            f"GROUP BY {bucket}, metric, COALESCE(cluster_id, 0), COALESCE(tenant_id, 0), "
            "COALESCE(flavor_id, 0)"
        )
    bucket = _bucket_sql("bucket", resolution)
    return (
        "INSERT INTO usage_rollup (resolution, bucket, metric, cluster_id, tenant_id, "  # noqa: S608 - constant SQL; every value is a parameter
        "flavor_id, samples, sum, min, max, source) "
        f"SELECT %s, {bucket}, metric, cluster_id, tenant_id, flavor_id, SUM(samples), "
        "SUM(sum), MIN(min), MAX(max), MAX(source) FROM usage_rollup "
        f"WHERE resolution = %s AND bucket >= %s AND bucket < %s AND {bucket} {_in_buckets()} "
        f"GROUP BY {bucket}, metric, cluster_id, tenant_id, flavor_id"
    )


def _claim_pending(resolution: int) -> list[datetime]:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM usage_pending_bucket WHERE resolution = %s RETURNING bucket",
                [resolution],
            )
            return [row[0] for row in cursor.fetchall()]
    pending = list(PendingBucket.objects.filter(resolution=resolution).values_list("pk", "bucket"))
    if pending:  # SQLite: writers are serialised, nothing is added under us
        PendingBucket.objects.filter(
            resolution=resolution, pk__lte=max(pk for pk, _ in pending)
        ).delete()
    return [bucket for _, bucket in pending]


def _lock(resolution: int) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # one roll-up of a resolution at a time
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [0x75736167, resolution])


@transaction.atomic
def rollups_run(*, resolution: int, now: datetime | None = None) -> int:
    """Roll up the pending buckets of ``resolution``; returns how many were rolled. Idempotent
    (a bucket is recomputed whole from its source) and safe to run concurrently."""
    now = now or timezone.now()
    _lock(resolution)
    buckets = _claim_pending(resolution)
    if not buckets:
        RollupState.objects.update_or_create(resolution=resolution, defaults={"last_run_at": now})
        return 0
    width = timedelta(seconds=resolution)
    source = ROLLUP_SOURCE[resolution]
    insert = _rollup_insert_sql(resolution, source)
    # Two statements whatever the number of buckets: the claimed buckets' rows go, and are
    # recomputed from the source rows of the span they cover.
    buckets = sorted(buckets)
    claimed = _buckets_param(buckets)
    params: list[Any] = [resolution] if source is None else [resolution, source]
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM usage_rollup WHERE resolution = %s AND bucket {_in_buckets()}",  # noqa: S608 - constant SQL; every value is a parameter
            [resolution, claimed],
        )
        cursor.execute(insert, [*params, _param(buckets[0]), _param(buckets[-1] + width), claimed])
    parent = next((r for r, s in ROLLUP_SOURCE.items() if s == resolution), None)
    if parent is not None:
        _mark_pending(parent, {bucket_start(b, parent) for b in buckets})
    state, _ = RollupState.objects.select_for_update().get_or_create(resolution=resolution)
    until = max(buckets) + width
    if state.rolled_until is None or until > state.rolled_until:
        state.rolled_until = until
    state.last_run_at = now
    state.buckets_rolled += len(buckets)
    state.save()
    return len(buckets)


def rollups_run_all(*, now: datetime | None = None) -> dict[str, int]:
    """5 minutes, then hours, then days (each its own transaction); then the raw partitions
    written since the last run get their BRIN ranges summarised."""
    done = {
        RESOLUTION_NAMES[r]: rollups_run(resolution=r, now=now)
        for r in (Resolution.FIVE_MINUTES, Resolution.HOUR, Resolution.DAY)
    }
    partitions_summarize(now=now or timezone.now())
    return done


_BRIN_INDEXES_SQL = """
SELECT i.indexrelid::regclass::text FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE i.indrelid = to_regclass(%s) AND a.amname = 'brin'"""


def partitions_summarize(*, now: datetime) -> int:
    """Summarise the new BRIN page ranges of yesterday's and today's raw partitions
    (PostgreSQL; nothing elsewhere). A range filled since the last autovacuum has no summary,
    and a BRIN scan reads every unsummarised range: without this, the dashboards' read of the
    last minutes scans the whole day written so far. Returns the ranges summarised."""
    if connection.vendor != "postgresql":
        return 0
    summarised = 0
    with connection.cursor() as cursor:
        for day in (now.date() - timedelta(days=1), now.date()):
            cursor.execute(_BRIN_INDEXES_SQL, [partition_name(day)])
            for (index,) in cursor.fetchall():
                cursor.execute("SELECT brin_summarize_new_values(%s::regclass)", [index])
                summarised += cursor.fetchone()[0]
    return summarised


# --- retention -------------------------------------------------------------------------------


def retention_enforce(*, now: datetime | None = None) -> dict[str, int]:
    """Drop what is older than each resolution keeps: raw partitions (PostgreSQL; rows
    elsewhere), rollups by resolution, stale pods. Also creates the partitions ahead."""
    now = now or timezone.now()
    out: dict[str, int] = {}
    raw_cutoff = now - retention(RAW)
    if connection.vendor == "postgresql":
        # Whole days only: a partition goes when all of its day is past the cutoff.
        out["raw_partitions"] = len(partitions_drop_before(day=raw_cutoff.date()))
        today = now.date()
        ahead = settings.USAGE_PARTITIONS_AHEAD_DAYS
        partitions_ensure(days=[today + timedelta(days=d) for d in range(ahead + 1)])
    else:
        out["raw"] = Sample.objects.filter(time__lt=raw_cutoff).delete()[0]
    for resolution in (Resolution.FIVE_MINUTES, Resolution.HOUR, Resolution.DAY):
        cutoff = now - retention(resolution)
        out[RESOLUTION_NAMES[resolution]] = Rollup.objects.filter(
            resolution=resolution, bucket__lt=cutoff
        ).delete()[0]
    out["pods"] = Pod.objects.filter(seen_at__lt=now - timedelta(hours=1)).delete()[0]
    out["workload_activity"] = WorkloadActivity.objects.filter(
        bucket__lt=now - retention(Resolution.HOUR)
    ).delete()[0]
    return out


# --- Prometheus sources ----------------------------------------------------------------------

PROMETHEUS_SETTINGS = (
    "url", "enabled", "bearer_token_file", "basic_auth_user", "basic_auth_password_file",
    "ca_bundle", "label_matchers", "query_timeout_s", "step_s", "figures", "node_agent_samples",
)  # fmt: skip


def _prometheus_settings(source: PrometheusSource) -> dict[str, Any]:
    return {name: getattr(source, name) for name in PROMETHEUS_SETTINGS}


@transaction.atomic
def prometheus_source_set(
    *, cluster: Any, actor: Any, settings_: Mapping[str, Any]
) -> PrometheusSource:
    """Create or replace the Prometheus a cluster's usage is read from (the settings not
    given take their defaults). Refused whole, naming the field, on a bad value; audited."""
    unknown = sorted(set(settings_) - set(PROMETHEUS_SETTINGS))
    if unknown:
        raise ValidationFailed.for_field(unknown[0], "Unknown field: this setting does not exist.")
    existing = PrometheusSource.objects.select_for_update().filter(cluster=cluster).first()
    before = _prometheus_settings(existing) if existing else None
    source = existing or PrometheusSource(cluster=cluster)
    fresh = PrometheusSource(cluster=cluster)
    for name in PROMETHEUS_SETTINGS:
        setattr(source, name, settings_.get(name, getattr(fresh, name)))
    source.figures = sorted(set(source.figures or []))
    prometheus_settings_check(settings_=_prometheus_settings(source))
    if before is not None and before["url"] != source.url:
        source.read_until = None  # another server: read its recent window afresh
    source.save()
    _AGENT_SAMPLES_CACHE.pop(cluster.pk, None)
    audit_record(
        actor=actor,
        action="usage.prometheus_source_set",
        obj=cluster,
        before=before,
        after=_prometheus_settings(source),
    )
    return source


@transaction.atomic
def prometheus_source_remove(*, cluster: Any, actor: Any) -> bool:
    """Stop reading the cluster's Prometheus (its samples stay). False where it had none."""
    source = PrometheusSource.objects.select_for_update().filter(cluster=cluster).first()
    if source is None:
        return False
    before = _prometheus_settings(source)
    source.delete()
    _AGENT_SAMPLES_CACHE.pop(cluster.pk, None)
    audit_record(actor=actor, action="usage.prometheus_source_remove", obj=cluster, before=before)
    return True


# What is read from these files is sent to the source's URL: only a file in
# PROMETHEUS_SECRETS_DIR may be named, so no other file the worker can read leaves it.
PROMETHEUS_CREDENTIAL_FILES = ("bearer_token_file", "basic_auth_password_file")


def prometheus_secrets_dir_holds(path: str, *, resolve: bool = False) -> bool:
    """Whether ``path`` names a file inside ``PROMETHEUS_SECRETS_DIR`` (``..`` taken into
    account; with ``resolve``, symbolic links followed too, as the worker reads it)."""
    clean = os.path.realpath if resolve else os.path.normpath
    base = clean(settings.PROMETHEUS_SECRETS_DIR)
    target = clean(path)
    return target != base and os.path.commonpath([target, base]) == base


def prometheus_secrets_dir_refusal(path: str) -> str:
    return (
        f"{path} is not in PROMETHEUS_SECRETS_DIR ({settings.PROMETHEUS_SECRETS_DIR}): "
        "credentials files are read from there only (what is read is sent to the URL)."
    )


def _prometheus_paths_absolute(*, settings_: Mapping[str, Any]) -> None:
    """Files are named by absolute paths on the worker."""
    for name in ("bearer_token_file", "basic_auth_password_file", "ca_bundle"):
        path = str(settings_.get(name) or "")
        if path and not path.startswith("/"):
            raise ValidationFailed.for_field(name, "an absolute path on the worker is required.")


def _prometheus_credentials_in_secrets_dir(*, settings_: Mapping[str, Any]) -> None:
    """The credentials files, whose contents go to the URL, only in PROMETHEUS_SECRETS_DIR."""
    for name in PROMETHEUS_CREDENTIAL_FILES:
        path = str(settings_.get(name) or "")
        if path and not prometheus_secrets_dir_holds(path):
            raise ValidationFailed.for_field(name, prometheus_secrets_dir_refusal(path))


def prometheus_settings_check(*, settings_: Mapping[str, Any]) -> None:
    """The rules of a Prometheus source's settings (ValidationFailed naming the field)."""
    url = str(settings_.get("url") or "")
    label_matchers = str(settings_.get("label_matchers") or "")
    figures = settings_.get("figures") or []
    try:
        parse_label_matchers(label_matchers)
    except ValueError as exc:
        raise ValidationFailed.for_field("label_matchers", str(exc)) from None
    unknown = sorted(set(figures) - set(PrometheusFigure.values))
    if unknown:
        raise ValidationFailed.for_field(
            "figures", f"{unknown[0]!r} is not one of {', '.join(PrometheusFigure.values)}."
        )
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.query:
        raise ValidationFailed.for_field(
            "url", "an http:// or https:// URL with a host (and no query) is required."
        )
    timeout = settings_.get("query_timeout_s", 10)
    if not isinstance(timeout, int) or not 1 <= timeout <= PROMETHEUS_TIMEOUT_MAX_S:
        raise ValidationFailed.for_field(
            "query_timeout_s", f"a whole number of seconds from 1 to {PROMETHEUS_TIMEOUT_MAX_S}."
        )
    step = settings_.get("step_s", 60)
    if not isinstance(step, int) or not PROMETHEUS_STEP_MIN_S <= step <= PROMETHEUS_STEP_MAX_S:
        raise ValidationFailed.for_field(
            "step_s",
            f"a whole number of seconds from {PROMETHEUS_STEP_MIN_S} to {PROMETHEUS_STEP_MAX_S}.",
        )
    _prometheus_paths_absolute(settings_=settings_)
    if settings_.get("basic_auth_password_file") and not settings_.get("basic_auth_user"):
        raise ValidationFailed.for_field(
            "basic_auth_user", "a password file needs the user it belongs to."
        )
    if settings_.get("bearer_token_file") and settings_.get("basic_auth_user"):
        raise ValidationFailed.for_field(
            "bearer_token_file", "use a bearer token or basic auth, not both."
        )
    _prometheus_credentials_in_secrets_dir(settings_=settings_)


# A tenant's workloads: suspend and resume (Kueue's spec.active) --------------------------------


def workload_may_act(*, actor: User, tenant: Tenant) -> bool:
    return user_can_manage_tenant(user=actor, tenant=tenant)


def workload_ensure_can_act(*, actor: User, tenant: Tenant) -> None:
    """Leads of the tenant and platform admins act on its workloads; members read them."""
    if not user_can_manage_tenant(user=actor, tenant=tenant):
        raise PermissionDenied(
            f"Only a lead of {tenant.slug} or a platform admin suspends or resumes its "
            "workloads; you can read them."
        )


def workload_set_suspended(
    *, tenant: Tenant, workload_id: int, suspended: bool, actor: User
) -> Workload:
    """Suspend (``spec.active: false``: Kueue evicts it and frees its quota) or resume a
    workload of ``tenant`` through the suspension service the idle rule uses, audited. 409
    with its state when it finished (or is already so) meanwhile, or the cluster refuses."""
    workload_ensure_can_act(actor=actor, tenant=tenant)
    workload = (
        Workload.objects.select_related("cluster").filter(tenant=tenant, pk=workload_id).first()
    )
    if workload is None:
        raise NotFound("No such workload of this tenant.")
    doing = "suspended" if suspended else "resumed"
    if workload.state == WorkloadState.FINISHED:
        raise Conflict(
            f"{workload.namespace}/{workload.name} has finished; it cannot be {doing}.",
            fields={"state": ["finished"]},
            state="finished",
        )
    is_suspended = workload.state == WorkloadState.INACTIVE or not workload.active
    if is_suspended == suspended:
        state = "suspended" if is_suspended else str(workload.state)
        raise Conflict(
            f"{workload.namespace}/{workload.name} is {state} already.",
            fields={"state": [state]},
            state=state,
        )
    try:
        workload_set_active(
            cluster=workload.cluster,
            namespace=workload.namespace,
            name=workload.name,
            active=not suspended,
        )
    except ApplyError as exc:
        raise Conflict(f"The cluster could not change the workload: {exc.message}") from exc
    with transaction.atomic():
        before = {"active": workload.active, "state": workload.state}
        workload.active = not suspended
        if suspended:
            workload.state = WorkloadState.INACTIVE
        elif workload.state == WorkloadState.INACTIVE:
            workload.state = WorkloadState.PENDING
        workload.save(update_fields=["active", "state"])
        audit_record(
            actor=actor,
            action=f"workload.{doing}",
            obj=workload,
            tenant=tenant,
            object_id=f"{workload.cluster.name}/{workload.namespace}/{workload.name}",
            before=before,
            after={"active": workload.active, "state": workload.state},
        )
    return workload


# --- per-person caps from the caps page (R14) -------------------------------------------------


def person_cap_set_from_form(*, tenant: Tenant, actor: User, form: Mapping[str, str]) -> None:
    """One cap line from the page's form: ``who`` (a member's username, ``pipeline`` or
    ``default``), ``line`` ("cluster/flavor/resource"), ``amount`` (empty: remove the cap).
    The rules are the API's (``quotas.services.person_caps_set``)."""
    who = str(form.get("who") or "").strip()
    parts = str(form.get("line") or "").split("/", 2)
    if len(parts) != 3:
        raise ValidationFailed.for_field("line", "Choose a flavor and resource of the quota.")
    amount = str(form.get("amount") or "").strip()
    caps = [
        {"cluster": parts[0], "flavor": parts[1], "resource": parts[2], "amount": amount or None}
    ]
    membership = None
    if who in (CapSubject.PIPELINE, CapSubject.DEFAULT):
        subject = who
    else:
        subject = CapSubject.MEMBER
        membership = Membership.objects.filter(tenant=tenant, user__username=who).first()
        if membership is None or membership.role == MembershipRole.VIEWER:
            raise ValidationFailed.for_field(
                "who", f"{who or 'Nobody'} is not a member of {tenant.slug} who submits work."
            )
    person_caps_set(tenant=tenant, subject=subject, membership=membership, caps=caps, actor=actor)
