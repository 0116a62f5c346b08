"""Input serializers check the shape of bodies (types, ranges, lengths, list sizes); the
services check the rest. Output serializers describe what the views return."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpu_agent.models import (
    GPU_NAME_MAX,
    GPU_UUID_MAX,
    HOSTNAME_MAX,
    MIG_PROFILE_MAX,
    VERSION_MAX,
    LayoutState,
    Node,
)
from gpu_agent.selectors import node_is_stale
from gpu_agent.services import (
    MAX_GPUS_PER_REPORT,
    MAX_INSTANCES_PER_GPU,
    MAX_PROCESSES,
    MESSAGE_MAX,
    POD_UID_MAX,
    RESULT_STATES,
)
from portal.api.serializers import StrictInputSerializer
from tenants.validators import DNS1123_LABEL_MAX, dns1123_label

INT32_MAX = 2**31 - 1
MAX_SLICES = 64  # memory slices of a GPU, far above any real one (8)
MAX_GI_ID = 1023

# --- agent: register ------------------------------------------------------------------------


class RegisterInput(StrictInputSerializer):
    join_token = serializers.CharField(max_length=200, trim_whitespace=True)
    hostname = serializers.CharField(max_length=HOSTNAME_MAX, allow_blank=True, default="")
    agent_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")


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
    uuid = serializers.CharField(max_length=GPU_UUID_MAX)
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


class ReportInput(StrictInputSerializer):
    node = serializers.CharField(
        max_length=DNS1123_LABEL_MAX, help_text="Must be the node the token belongs to."
    )
    sent_at = serializers.DateTimeField()
    agent_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")
    driver_version = serializers.CharField(max_length=VERSION_MAX, allow_blank=True, default="")
    gpus = serializers.ListField(child=GpuReport(), max_length=MAX_GPUS_PER_REPORT)


class ReportOutput(serializers.Serializer):
    desired_generation = serializers.IntegerField(
        help_text="The highest layout generation the agent has to apply (GET agent/desired/); "
        "0 when there is nothing to do."
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
    uuid = serializers.CharField(max_length=GPU_UUID_MAX)
    generation = serializers.IntegerField(min_value=1, max_value=INT32_MAX)
    state = serializers.ChoiceField(choices=[(s.value, s.label) for s in RESULT_STATES])
    message = serializers.CharField(
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
