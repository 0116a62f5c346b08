"""Input serializers check the shape of bodies (types, ranges, lengths, list sizes); the
services check the rest. Output serializers describe what the views return.

An agent's report has one validator, ``validate_report`` (what ``ReportInput`` validates to,
by hand for a clean report, by ``ReportInput`` itself otherwise); the report service then
checks what a shape cannot (duplicates, GPUs of another node) and hands the readings on."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.serializers import StrictInputSerializer
from gpu_agent.models import (
    AGENT_KEY_MAX,
    GPU_NAME_MAX,
    GPU_UUID_MAX,
    GPU_UUID_RE,
    GPU_UUID_RULE,
    HOSTNAME_MAX,
    MIG_PROFILE_MAX,
    REPORT_DIGEST_MAX,
    REPORT_SESSION_MAX,
    VERSION_MAX,
    DevicePlugin,
    LayoutState,
    Node,
    ProbeState,
)
from gpu_agent.selectors import node_is_stale
from gpu_agent.services.common import MESSAGE_MAX
from gpu_agent.services.layouts import RESULT_STATES
from gpu_agent.services.probes import MAX_PROBE_SECONDS
from gpu_agent.services.reports import (
    MAX_GPUS_PER_REPORT,
    MAX_INSTANCES_PER_GPU,
    MAX_PROCESSES,
    MAX_READINGS,
    MAX_REPORT_SEQ,
    POD_UID_MAX,
    REPORT_PROTOCOLS,
)
from tenants.validators import DNS1123_LABEL_MAX, dns1123_label

INT32_MAX = 2**31 - 1


def _gpu_uuid(value: str) -> None:
    if not GPU_UUID_RE.match(value):
        raise serializers.ValidationError(f"{value!r} is not {GPU_UUID_RULE}.")


def gpu_uuid_field() -> serializers.CharField:
    """A GPU's UUID as an agent reports it (NVML's form; it becomes a URL path segment)."""
    return serializers.CharField(
        max_length=GPU_UUID_MAX, validators=[_gpu_uuid], help_text="GPU-... or MIG-... (NVML)."
    )


MAX_SLICES = 64  # memory slices of a GPU, far above any real one (8)
MAX_GI_ID = 1023

# --- agent: register ------------------------------------------------------------------------


class RegisterInput(StrictInputSerializer):
    join_token = serializers.CharField(max_length=200, trim_whitespace=True)
    hostname = serializers.CharField(max_length=HOSTNAME_MAX, allow_blank=True, default="")
    agent_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")
    agent_key = serializers.CharField(
        max_length=AGENT_KEY_MAX,
        allow_blank=True,
        default="",
        help_text="A random secret the agent keeps: the same request again (same join token, "
        "same key) shortly after the token was used gets the same node back with a new token.",
    )


class RegisterOutput(serializers.Serializer):
    node = serializers.CharField()
    node_token = serializers.CharField(help_text="Shown once; send it as 'Bearer <node_token>'.")


# --- agent: report --------------------------------------------------------------------------


class ProcessReport(StrictInputSerializer):
    pid = serializers.IntegerField(min_value=0, max_value=INT32_MAX)
    used_memory_mib = serializers.IntegerField(
        min_value=0, max_value=INT32_MAX, allow_null=True, required=False, default=None
    )
    pod_uid = serializers.CharField(
        max_length=POD_UID_MAX, allow_blank=True, allow_null=True, required=False, default=""
    )


class InstanceReport(StrictInputSerializer):
    gi_id = serializers.IntegerField(min_value=0, max_value=MAX_GI_ID)
    profile = serializers.CharField(max_length=MIG_PROFILE_MAX)
    start = serializers.IntegerField(min_value=0, max_value=MAX_SLICES - 1)
    size = serializers.IntegerField(min_value=1, max_value=MAX_SLICES)
    ci_ids = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_GI_ID),
        max_length=MAX_SLICES,
        required=False,
        default=list,
    )
    memory_used_mib = serializers.IntegerField(min_value=0, max_value=INT32_MAX, default=0)
    utilization_pct = serializers.IntegerField(
        min_value=0, max_value=100, allow_null=True, required=False, default=None
    )
    processes = serializers.ListField(
        child=ProcessReport(), max_length=MAX_PROCESSES, required=False, default=list
    )


class GpuReport(StrictInputSerializer):
    uuid = gpu_uuid_field()
    index = serializers.IntegerField(min_value=0, max_value=MAX_GI_ID)
    name = serializers.CharField(max_length=GPU_NAME_MAX)
    memory_total_mib = serializers.IntegerField(min_value=0, max_value=INT32_MAX)
    memory_used_mib = serializers.IntegerField(min_value=0, max_value=INT32_MAX)
    utilization_pct = serializers.IntegerField(
        min_value=0,
        max_value=100,
        allow_null=True,
        required=False,
        default=None,
        help_text="Null in MIG mode (NVML does not report it).",
    )
    mig_mode_current = serializers.BooleanField()
    mig_mode_pending = serializers.BooleanField()
    applied_generation = serializers.IntegerField(
        min_value=0,
        max_value=INT32_MAX,
        required=False,
        default=0,
        help_text="The desired layout generation last applied.",
    )
    instances = serializers.ListField(
        child=InstanceReport(), max_length=MAX_INSTANCES_PER_GPU, required=False, default=list
    )
    processes = serializers.ListField(
        child=ProcessReport(),
        max_length=MAX_PROCESSES,
        required=False,
        default=list,
        help_text="Processes on a GPU without MIG.",
    )


class ReadingReport(StrictInputSerializer):
    """Protocol 2: what one GPU outside MIG (``gi_id`` null) or one MIG instance was doing."""

    uuid = gpu_uuid_field()
    model = serializers.CharField(max_length=GPU_NAME_MAX, help_text="The GPU's model name.")
    gi_id = serializers.IntegerField(min_value=0, max_value=MAX_GI_ID, allow_null=True)
    profile = serializers.CharField(max_length=MIG_PROFILE_MAX, allow_null=True)
    utilization_pct = serializers.IntegerField(min_value=0, max_value=100, allow_null=True)
    memory_used_mib = serializers.IntegerField(min_value=0, max_value=INT32_MAX)
    processes = serializers.IntegerField(min_value=0, max_value=MAX_PROCESSES)
    pod_uids = serializers.ListField(
        child=serializers.CharField(max_length=POD_UID_MAX), max_length=MAX_PROCESSES
    )


def _hex(value: str) -> None:
    if value and not all(c in "0123456789abcdef" for c in value):
        raise serializers.ValidationError("lower-case hexadecimal digits only.")


class ReportInput(StrictInputSerializer):
    node = serializers.CharField(
        max_length=DNS1123_LABEL_MAX, help_text="Must be the node the token belongs to."
    )
    sent_at = serializers.DateTimeField()
    agent_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")
    driver_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")
    gpus = serializers.ListField(
        child=GpuReport(),
        max_length=MAX_GPUS_PER_REPORT,
        help_text="Every GPU (protocol 1, or a full report); a change report: the GPUs that "
        "changed since the base report, each whole.",
    )
    protocol = serializers.ChoiceField(
        choices=REPORT_PROTOCOLS,
        default=1,
        help_text="1: every report whole; 2: full reports and change reports (PROTOCOL.md).",
    )
    session = serializers.CharField(
        max_length=REPORT_SESSION_MAX,
        allow_blank=True,
        default="",
        validators=[_hex],
        help_text="Protocol 2: the agent's session, new at each start.",
    )
    seq = serializers.IntegerField(
        min_value=1,
        max_value=MAX_REPORT_SEQ,
        allow_null=True,
        default=None,
        help_text="Protocol 2: this report's number in the session.",
    )
    full = serializers.BooleanField(
        default=True, help_text="Protocol 2: false for a change report."
    )
    base = serializers.IntegerField(
        min_value=1,
        max_value=MAX_REPORT_SEQ,
        allow_null=True,
        default=None,
        help_text="A change report: the acknowledged report it is relative to.",
    )
    base_digest = serializers.CharField(
        max_length=REPORT_DIGEST_MAX, allow_blank=True, default="", validators=[_hex]
    )
    digest = serializers.CharField(
        max_length=REPORT_DIGEST_MAX,
        allow_blank=True,
        default="",
        validators=[_hex],
        help_text="Protocol 2: SHA-256 of the node's state after this report.",
    )
    readings = serializers.ListField(
        child=ReadingReport(),
        max_length=MAX_READINGS,
        allow_null=True,
        default=None,
        help_text="A change report: each device's readings, once a sampling interval.",
    )


class ReportOutput(serializers.Serializer):
    desired_generation = serializers.IntegerField(
        help_text="The highest layout generation the agent has to apply (GET agent/desired/); "
        "0 when there is nothing to do."
    )
    probes = serializers.IntegerField(
        help_text="Isolation probes the agent has to run (GET agent/probes/); 0: none."
    )


class ReportChangesOutput(ReportOutput):
    """The answer to a protocol 2 report (a protocol 1 report gets ``ReportOutput`` alone)."""

    ack = serializers.IntegerField(
        allow_null=True,
        required=False,
        help_text="Protocol 2 only: the report the portal now holds (its seq); null when it "
        "did not apply this one.",
    )
    full_report = serializers.BooleanField(
        required=False,
        help_text="Protocol 2 only: send a full report now (the portal does not hold the base).",
    )
    sample_every_s = serializers.IntegerField(
        required=False, help_text="Protocol 2 only: send readings this often (seconds)."
    )


# --- agent: desired and result --------------------------------------------------------------


class PlacementSerializer(serializers.Serializer):
    profile = serializers.CharField(max_length=MIG_PROFILE_MAX, help_text="e.g. 3g.40gb")
    start = serializers.IntegerField(min_value=0, help_text="First memory slice.")


class DesiredGpuOutput(serializers.Serializer):
    uuid = serializers.CharField()
    generation = serializers.IntegerField()
    mig_enabled = serializers.BooleanField()
    instances = PlacementSerializer(many=True)


class DesiredOutput(serializers.Serializer):
    node = serializers.CharField()
    gpus = DesiredGpuOutput(many=True)


class ResultInput(StrictInputSerializer):
    uuid = gpu_uuid_field()
    generation = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    state = serializers.ChoiceField(choices=[(s.value, s.label) for s in RESULT_STATES])
    message = serializers.CharField(
        max_length=MESSAGE_MAX, allow_blank=True, default="", trim_whitespace=False
    )
    device_plugin = serializers.ChoiceField(
        choices=DevicePlugin.choices,
        required=False,
        help_text="After changing instances: restart-needed (the device plugin still "
        "advertises the old devices), restarted, restart-failed, or not-needed.",
    )
    device_plugin_message = serializers.CharField(
        max_length=MESSAGE_MAX, allow_blank=True, default="", trim_whitespace=False
    )


class ResultOutput(serializers.Serializer):
    uuid = serializers.CharField()
    generation = serializers.IntegerField()
    accepted = serializers.BooleanField(
        help_text="False when the result was ignored (an older generation, already applied)."
    )
    state = serializers.CharField(
        allow_null=True,
        help_text="The layout's state now: pending, applying, success, failed or "
        "reboot-required (null: the GPU has no layout).",
    )
    detail = serializers.CharField()


# --- admins: nodes, join tokens, layouts ----------------------------------------------------


class JoinTokenInput(StrictInputSerializer):
    node = serializers.CharField(max_length=DNS1123_LABEL_MAX, validators=[dns1123_label])
    cluster = serializers.CharField(
        required=False, help_text="Name of the cluster the node belongs to."
    )
    ttl_s = serializers.IntegerField(
        required=False, min_value=60, max_value=7 * 24 * 3600, help_text="Default: 1 hour."
    )


class JoinTokenOutput(serializers.Serializer):
    node = serializers.CharField()
    join_token = serializers.CharField(help_text="Shown once; one-time use.")
    prefix = serializers.CharField()
    expires_at = serializers.DateTimeField()


class TokenRevokeOutput(serializers.Serializer):
    node = serializers.CharField()
    revoked = serializers.IntegerField(help_text="How many live tokens were revoked.")


class NodeOutput(serializers.Serializer):
    name = serializers.CharField()
    cluster = serializers.CharField(source="cluster.name", allow_null=True)
    hostname = serializers.CharField()
    agent_version = serializers.CharField()
    report_protocol = serializers.IntegerField(
        help_text="The report protocol the agent speaks: 1 every report whole, 2 changes only."
    )
    driver_version = serializers.CharField()
    last_report_at = serializers.DateTimeField(allow_null=True)
    stale = serializers.SerializerMethodField(
        help_text="No report for AGENT_STALE_AFTER_S (3 missed reports)."
    )
    gpu_count = serializers.IntegerField()
    mig_gpu_count = serializers.IntegerField()
    instance_count = serializers.IntegerField()
    busy_instance_count = serializers.IntegerField()
    created_at = serializers.DateTimeField()

    @extend_schema_field(OpenApiTypes.BOOL)
    def get_stale(self, node: Node) -> bool:
        return node_is_stale(node)


class ProcessOutput(serializers.Serializer):
    pid = serializers.IntegerField()
    used_memory_mib = serializers.IntegerField(allow_null=True)
    pod_uid = serializers.CharField()


class InstanceOutput(serializers.Serializer):
    gi_id = serializers.IntegerField()
    profile = serializers.CharField()
    start = serializers.IntegerField()
    size = serializers.IntegerField()
    memory_used_mib = serializers.IntegerField()
    utilization_pct = serializers.IntegerField(allow_null=True)
    busy = serializers.BooleanField()
    processes = ProcessOutput(many=True)


class LayoutOutput(serializers.Serializer):
    uuid = serializers.CharField(source="gpu.uuid")
    generation = serializers.IntegerField()
    mig_enabled = serializers.BooleanField()
    instances = PlacementSerializer(many=True)
    state = serializers.ChoiceField(choices=LayoutState.choices)
    message = serializers.CharField()
    waiting_for = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Drain: GPU instance ids that must go idle first (-1: processes outside MIG).",
    )
    requested_by = serializers.CharField(source="requested_by.username", allow_null=True)
    created_at = serializers.DateTimeField()
    applied_at = serializers.DateTimeField(allow_null=True)
    deadline = serializers.DateTimeField(allow_null=True)
    device_plugin = serializers.CharField(
        help_text="restart-needed, restarted, restart-failed, not-needed; blank: not reported."
    )
    device_plugin_message = serializers.CharField()


class GpuOutput(serializers.Serializer):
    uuid = serializers.CharField()
    index = serializers.IntegerField()
    name = serializers.CharField()
    memory_total_mib = serializers.IntegerField()
    memory_used_mib = serializers.IntegerField()
    utilization_pct = serializers.IntegerField(allow_null=True)
    mig_mode_current = serializers.BooleanField()
    mig_mode_pending = serializers.BooleanField()
    applied_generation = serializers.IntegerField()
    last_seen_at = serializers.DateTimeField()
    processes = ProcessOutput(many=True)
    instances = InstanceOutput(many=True, source="instances.all")
    layout = LayoutOutput(source="current_layout", allow_null=True)


class NodeDetailOutput(NodeOutput):
    gpu_count = None  # type: ignore[assignment]
    mig_gpu_count = None  # type: ignore[assignment]
    instance_count = None  # type: ignore[assignment]
    busy_instance_count = None  # type: ignore[assignment]
    gpus = GpuOutput(many=True, source="gpu_rows")


class LayoutInstanceInput(StrictInputSerializer):
    profile = serializers.CharField(max_length=MIG_PROFILE_MAX, help_text="e.g. 3g.40gb")
    start = serializers.IntegerField(
        min_value=0,
        max_value=MAX_SLICES - 1,
        required=False,
        allow_null=True,
        default=None,
        help_text="First memory slice; omitted: the first free placement.",
    )


class LayoutInput(StrictInputSerializer):
    instances = serializers.ListField(child=LayoutInstanceInput(), max_length=16)
    drain = serializers.BooleanField(
        default=False,
        help_text="Queue the layout until the busy instances it replaces go idle, instead of "
        "refusing it (409).",
    )
    mig_enabled = serializers.BooleanField(
        default=True, help_text="False: turn MIG off (no instances); needs a GPU reset."
    )


# --- agent: report, the fast path -----------------------------------------------------------
#
# ``ReportInput`` validates about 300 fields per report through DRF (2-3 ms). ``validate_report``
# accepts the usual, clean report by hand: it takes a report only when every value is already of
# the exact type and within the bounds ``ReportInput`` declares, and then returns what
# ``ReportInput`` would. Anything else (a wrong type, a value DRF would convert or trim, a
# missing field, a value out of range, an unknown field) goes to ``ReportInput`` itself, so a
# refused report gets DRF's errors, paths and messages, and a convertible one DRF's conversion.
# tests/gpu_agent/test_server_api.py feeds the same bodies to both and checks they agree.


class _Unclean(Exception):
    """The fast path cannot vouch for a value; ``ReportInput`` decides."""


_sent_at_field = serializers.DateTimeField()
_REPORT_KEYS = frozenset(ReportInput._declared_fields)
_READING_KEYS = frozenset(ReadingReport._declared_fields)
_GPU_KEYS = frozenset(GpuReport._declared_fields)
_GPU_REQUIRED = (
    "uuid",
    "index",
    "name",
    "memory_total_mib",
    "memory_used_mib",
    "mig_mode_current",
    "mig_mode_pending",
)
_INSTANCE_KEYS = frozenset(InstanceReport._declared_fields)
_PROCESS_KEYS = frozenset(ProcessReport._declared_fields)


def _int(value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise _Unclean
    return value


def _opt_int(value: object, low: int, high: int) -> int | None:
    return None if value is None else _int(value, low, high)


def _str(value: object, max_length: int, allow_blank: bool = False) -> str:
    if (
        type(value) is not str
        or len(value) > max_length
        or not (value or allow_blank)
        or not value.isascii()
        or "\x00" in value
        or len(value.strip()) != len(value)
    ):
        raise _Unclean
    return value


def _uuid(value: object) -> str:
    uuid = _str(value, GPU_UUID_MAX)
    if not GPU_UUID_RE.match(uuid):
        raise _Unclean
    return uuid


def _list(value: object, max_length: int) -> list[Any]:
    if type(value) is not list or len(value) > max_length:
        raise _Unclean
    return value


def _bool(value: object) -> bool:
    if type(value) is not bool:
        raise _Unclean
    return value


def _keys(data: object, allowed: frozenset[str]) -> dict[str, Any]:
    if type(data) is not dict or not allowed.issuperset(data):
        raise _Unclean
    return data


def _process(data: object) -> dict[str, Any]:
    p = _keys(data, _PROCESS_KEYS)
    pod_uid = p.get("pod_uid", "")
    return {
        "pid": _int(p["pid"], 0, INT32_MAX),
        "used_memory_mib": _opt_int(p.get("used_memory_mib"), 0, INT32_MAX),
        "pod_uid": None if pod_uid is None else _str(pod_uid, POD_UID_MAX, allow_blank=True),
    }


def _instance(data: object) -> dict[str, Any]:
    i = _keys(data, _INSTANCE_KEYS)
    return {
        "gi_id": _int(i["gi_id"], 0, MAX_GI_ID),
        "profile": _str(i["profile"], MIG_PROFILE_MAX),
        "start": _int(i["start"], 0, MAX_SLICES - 1),
        "size": _int(i["size"], 1, MAX_SLICES),
        "ci_ids": [_int(c, 0, MAX_GI_ID) for c in _list(i.get("ci_ids", []), MAX_SLICES)],
        "memory_used_mib": _int(i.get("memory_used_mib", 0), 0, INT32_MAX),
        "utilization_pct": _opt_int(i.get("utilization_pct"), 0, 100),
        "processes": [_process(p) for p in _list(i.get("processes", []), MAX_PROCESSES)],
    }


def _gpu(data: object) -> dict[str, Any]:
    g = _keys(data, _GPU_KEYS)
    return {
        "uuid": _uuid(g["uuid"]),
        "index": _int(g["index"], 0, MAX_GI_ID),
        "name": _str(g["name"], GPU_NAME_MAX),
        "memory_total_mib": _int(g["memory_total_mib"], 0, INT32_MAX),
        "memory_used_mib": _int(g["memory_used_mib"], 0, INT32_MAX),
        "utilization_pct": _opt_int(g.get("utilization_pct"), 0, 100),
        "mig_mode_current": _bool(g["mig_mode_current"]),
        "mig_mode_pending": _bool(g["mig_mode_pending"]),
        "applied_generation": _int(g.get("applied_generation", 0), 0, INT32_MAX),
        "instances": [_instance(i) for i in _list(g.get("instances", []), MAX_INSTANCES_PER_GPU)],
        "processes": [_process(p) for p in _list(g.get("processes", []), MAX_PROCESSES)],
    }


def _hex_str(value: object, max_length: int) -> str:
    text = _str(value, max_length, allow_blank=True)
    if text and not all(c in "0123456789abcdef" for c in text):
        raise _Unclean
    return text


def _reading(data: object) -> dict[str, Any]:
    r = _keys(data, _READING_KEYS)
    return {
        "uuid": _uuid(r["uuid"]),
        "model": _str(r["model"], GPU_NAME_MAX),
        "gi_id": _opt_int(r["gi_id"], 0, MAX_GI_ID),
        "profile": None if r["profile"] is None else _str(r["profile"], MIG_PROFILE_MAX),
        "utilization_pct": _opt_int(r["utilization_pct"], 0, 100),
        "memory_used_mib": _int(r["memory_used_mib"], 0, INT32_MAX),
        "processes": _int(r["processes"], 0, MAX_PROCESSES),
        "pod_uids": [_str(u, POD_UID_MAX) for u in _list(r["pod_uids"], MAX_PROCESSES)],
    }


def _report_fast(data: object) -> dict[str, Any]:
    r = _keys(data, _REPORT_KEYS)
    try:
        sent_at = _sent_at_field.run_validation(r["sent_at"])
    except serializers.ValidationError as exc:
        raise _Unclean from exc
    protocol = r.get("protocol", 1)
    if type(protocol) is not int or protocol not in dict(REPORT_PROTOCOLS):
        raise _Unclean
    readings = r.get("readings")
    return {
        "node": _str(r["node"], DNS1123_LABEL_MAX),
        "sent_at": sent_at,
        "agent_version": _str(r.get("agent_version", ""), VERSION_MAX, allow_blank=True),
        "driver_version": _str(r.get("driver_version", ""), VERSION_MAX, allow_blank=True),
        "gpus": [_gpu(g) for g in _list(r["gpus"], MAX_GPUS_PER_REPORT)],
        "protocol": protocol,
        "session": _hex_str(r.get("session", ""), REPORT_SESSION_MAX),
        "seq": _opt_int(r.get("seq"), 1, MAX_REPORT_SEQ),
        "full": _bool(r.get("full", True)),
        "base": _opt_int(r.get("base"), 1, MAX_REPORT_SEQ),
        "base_digest": _hex_str(r.get("base_digest", ""), REPORT_DIGEST_MAX),
        "digest": _hex_str(r.get("digest", ""), REPORT_DIGEST_MAX),
        "readings": None
        if readings is None
        else [_reading(x) for x in _list(readings, MAX_READINGS)],
    }


def validate_report(data: Any) -> dict[str, Any]:
    """What ``ReportInput(data=data)`` validates to, or its ``ValidationError`` (400)."""
    try:
        return _report_fast(data)
    except (_Unclean, KeyError, TypeError):
        serializer = ReportInput(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)


# --- isolation probes -------------------------------------------------------------------------


class ProbeRequestInput(StrictInputSerializer):
    target_gi_id = serializers.IntegerField(
        min_value=0,
        max_value=MAX_GI_ID,
        required=False,
        help_text="MIG GPUs: the GPU instance probed (default: the first idle one).",
    )
    neighbour_gi_id = serializers.IntegerField(
        min_value=0,
        max_value=MAX_GI_ID,
        required=False,
        help_text="MIG GPUs: the GPU instance saturated meanwhile (default: the next idle one).",
    )
    target_tenant = serializers.CharField(
        max_length=63,
        required=False,
        help_text="Tenant B, whose share is probed (slug): on a MIG GPU a tenant running on "
        "one of its instances, on a GPU without MIG a tenant holding time-sliced shares of its "
        "model on its cluster. Default: from the shares' tenants, where known.",
    )
    neighbour_tenant = serializers.CharField(
        max_length=63,
        required=False,
        help_text="Tenant A, whose share is saturated meanwhile (slug); another tenant than "
        "target_tenant.",
    )


class ProbeOutput(serializers.Serializer):
    id = serializers.IntegerField()
    uuid = serializers.CharField(source="gpu.uuid")
    mig = serializers.BooleanField(help_text="Two MIG instances (else two processes).")
    target_gi_id = serializers.IntegerField(allow_null=True)
    neighbour_gi_id = serializers.IntegerField(allow_null=True)
    target_profile = serializers.CharField()
    neighbour_profile = serializers.CharField()
    target_tenant = serializers.CharField(
        source="target_tenant.slug",
        allow_null=True,
        help_text="Tenant B, whose share was probed; null: not known.",
    )
    neighbour_tenant = serializers.CharField(
        source="neighbour_tenant.slug",
        allow_null=True,
        help_text="Tenant A, whose share was saturated; null: not known.",
    )
    state = serializers.ChoiceField(choices=ProbeState.choices)
    t_alone_s = serializers.FloatField(allow_null=True)
    t_together_s = serializers.FloatField(allow_null=True)
    slowdown_pct = serializers.FloatField(
        allow_null=True, help_text="(t_together / t_alone - 1) * 100; null until done."
    )
    passed = serializers.BooleanField(
        allow_null=True, help_text="slowdown_pct <= 5; null until done."
    )
    simulated = serializers.BooleanField()
    library = serializers.CharField()
    message = serializers.CharField()
    requested_by = serializers.CharField(source="requested_by.username", allow_null=True)
    requested_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class IsolationPairOutput(serializers.Serializer):
    saturating_tenant = serializers.CharField(
        source="saturating.slug", help_text="Tenant A, whose share was saturated."
    )
    probed_tenant = serializers.CharField(
        source="probed.slug", help_text="Tenant B, whose slowdown was measured."
    )
    probe = serializers.IntegerField(source="latest.pk", help_text="The pair's latest probe.")
    uuid = serializers.CharField(source="latest.gpu.uuid", help_text="The GPU it ran on.")
    node = serializers.CharField(source="latest.gpu.node.name")
    mig = serializers.BooleanField(
        source="latest.mig", help_text="MIG instances (else time slices of the whole GPU)."
    )
    state = serializers.ChoiceField(source="latest.state", choices=ProbeState.choices)
    slowdown_pct = serializers.FloatField(source="latest.slowdown_pct", allow_null=True)
    passed = serializers.BooleanField(
        allow_null=True, help_text="slowdown_pct <= 5; null until a probe is done."
    )
    simulated = serializers.BooleanField(
        source="latest.simulated", help_text="Measured by the fake backend: no GPU work."
    )
    finished_at = serializers.DateTimeField(source="latest.finished_at", allow_null=True)
    probes = serializers.IntegerField(help_text="Probes of the pair among the latest ones.")
    failed = serializers.IntegerField(help_text="Of them, finished over the 5 % line.")


class AgentProbeOutput(serializers.Serializer):
    id = serializers.IntegerField()
    uuid = serializers.CharField(source="gpu.uuid")
    mig = serializers.BooleanField()
    target_gi_id = serializers.IntegerField(allow_null=True)
    neighbour_gi_id = serializers.IntegerField(allow_null=True)
    state = serializers.ChoiceField(choices=ProbeState.choices)


class AgentProbesOutput(serializers.Serializer):
    node = serializers.CharField()
    probes = AgentProbeOutput(many=True)


def _probe_seconds() -> serializers.FloatField:
    return serializers.FloatField(
        min_value=0, max_value=MAX_PROBE_SECONDS, required=False, allow_null=True, default=None
    )


class ProbeResultInput(StrictInputSerializer):
    state = serializers.ChoiceField(
        choices=ProbeState.choices,
        help_text="running, then done (with both times), skipped or failed.",
    )
    t_alone_s = _probe_seconds()
    t_together_s = _probe_seconds()
    simulated = serializers.BooleanField(default=False)
    library = serializers.CharField(max_length=40, allow_blank=True, default="")
    message = serializers.CharField(
        max_length=MESSAGE_MAX, allow_blank=True, default="", trim_whitespace=False
    )


class ProbeResultOutput(serializers.Serializer):
    id = serializers.IntegerField()
    accepted = serializers.BooleanField(help_text="False when ignored (the probe is finished).")
    state = serializers.ChoiceField(choices=ProbeState.choices)
    slowdown_pct = serializers.FloatField(allow_null=True)
    detail = serializers.CharField()
