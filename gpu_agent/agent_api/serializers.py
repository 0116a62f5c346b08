"""Input serializers check the shape of bodies (types, ranges, lengths, list sizes); the
services check the rest. Output serializers describe what the views return.

An agent's report has no serializer: the report service validates it
(``reports.report_validated``) against gpu_spec's JSON Schema, the one the agent checks too,
which ``report_request_schema`` turns into the OpenAPI document's request body."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.serializers import StrictInputSerializer
from gpu_agent.models import (
    AGENT_KEY_MAX,
    GPU_UUID_MAX,
    GPU_UUID_RE,
    GPU_UUID_RULE,
    HOSTNAME_MAX,
    MIG_PROFILE_MAX,
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
from gpu_spec.report import report_schema
from tenants.validators import DNS1123_LABEL_MAX, NODE_NAME_RULE, kubernetes_node_name

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


SERVICE_ACCOUNT_TOKEN_MAX = 8192  # a projected token is a JWT of 1 to 2 KiB


class RegisterInput(StrictInputSerializer):
    """A join token (an agent anywhere), or in a cluster the agent pod's ServiceAccount token:
    exactly one of the two."""

    join_token = serializers.CharField(max_length=200, trim_whitespace=True, required=False)
    service_account_token = serializers.CharField(
        max_length=SERVICE_ACCOUNT_TOKEN_MAX,
        trim_whitespace=True,
        required=False,
        help_text="In a cluster, instead of a join token: the agent pod's projected "
        "ServiceAccount token (audience AGENT_SERVICE_ACCOUNT_AUDIENCE), which the cluster's "
        "TokenReview checks; the node is the one the pod runs on.",
    )
    cluster = serializers.CharField(
        max_length=DNS1123_LABEL_MAX,
        allow_blank=True,
        default="",
        help_text="With service_account_token: the cluster the agent runs in (optional when "
        "the portal reaches one cluster through the Kubernetes API).",
    )
    node = serializers.CharField(
        validators=[kubernetes_node_name],  # its length first
        allow_blank=True,
        default="",
        help_text="With service_account_token: the node the agent believes it runs on "
        "(its pod's spec.nodeName); refused when the token's pod runs on another.",
    )
    hostname = serializers.CharField(max_length=HOSTNAME_MAX, allow_blank=True, default="")
    agent_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")
    agent_key = serializers.CharField(
        max_length=AGENT_KEY_MAX,
        allow_blank=True,
        default="",
        help_text="A random secret the agent keeps: the same request again (same join token, "
        "same key) shortly after the token was used gets the same node back with a new token.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        given = [f for f in ("join_token", "service_account_token") if attrs.get(f)]
        if len(given) != 1:
            field = given[-1] if given else "join_token"
            raise serializers.ValidationError(
                {field: ["Send a join_token or a service_account_token: exactly one."]}
            )
        if attrs.get("join_token"):
            for field in ("cluster", "node"):
                if attrs.get(field):
                    raise serializers.ValidationError(
                        {field: ["Only with service_account_token (a join token names its node)."]}
                    )
        return attrs


class RegisterOutput(serializers.Serializer):
    node = serializers.CharField()
    node_token = serializers.CharField(help_text="Shown once; send it as 'Bearer <node_token>'.")


# --- agent: report --------------------------------------------------------------------------


def _openapi(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON Schema (2020-12) node as OpenAPI 3.0 says it: references inlined, a nullable
    type as ``nullable``."""
    if isinstance(node, list):
        return [_openapi(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        out.update(_openapi(defs[ref.removeprefix("#/$defs/")], defs))
    for key, value in node.items():
        if key in ("$ref", "$schema", "$id", "$defs"):
            continue
        if key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            out["type"], out["nullable"] = types[0], "null" in value
        elif key in ("properties", "$defs"):
            out[key] = {name: _openapi(sub, defs) for name, sub in value.items()}
        else:
            out[key] = _openapi(value, defs)
    return out


def report_request_schema() -> dict[str, Any]:
    """``POST agent/report/``'s body for the OpenAPI document: gpu_spec's report.schema.json,
    the one the endpoint validates with (``reports.report_validated``)."""
    schema = report_schema()
    return {"application/json": _openapi(schema, schema["$defs"])}


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
    node = serializers.CharField(
        validators=[kubernetes_node_name],  # its length first
        help_text=f"The node's name, {NODE_NAME_RULE}.",
    )
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


class VgpuLimitsOutput(serializers.Serializer):
    target_cores_pct = serializers.IntegerField(
        allow_null=True, help_text="The probed tenant's compute share, percent of the GPU."
    )
    target_memory_mib = serializers.IntegerField(
        allow_null=True, help_text="The probed tenant's GPU memory share, MiB."
    )
    neighbour_cores_pct = serializers.IntegerField(
        allow_null=True, help_text="The saturating tenant's compute share, percent of the GPU."
    )
    neighbour_memory_mib = serializers.IntegerField(
        allow_null=True, help_text="The saturating tenant's GPU memory share, MiB."
    )


class ProbeOutput(serializers.Serializer):
    id = serializers.IntegerField()
    uuid = serializers.CharField(source="gpu.uuid")
    mig = serializers.BooleanField(help_text="Two MIG instances (else two processes).")
    target_gi_id = serializers.IntegerField(allow_null=True)
    neighbour_gi_id = serializers.IntegerField(allow_null=True)
    target_profile = serializers.CharField()
    neighbour_profile = serializers.CharField()
    vgpu = VgpuLimitsOutput(
        source="vgpu_limits",
        allow_null=True,
        help_text="On a GPU shared as vGPUs (HAMi): the two tenants' shares the probe ran "
        "under; null on MIG and time-sliced GPUs.",
    )
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
    vgpu = VgpuLimitsOutput(
        source="vgpu_limits",
        allow_null=True,
        help_text="On a GPU shared as vGPUs (HAMi): the shares the two processes run under "
        "(HAMi-core's limits); null otherwise.",
    )
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
