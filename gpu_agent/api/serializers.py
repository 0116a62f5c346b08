"""Input and output shapes of the MIG catalogue and layout-check endpoints."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.serializers import StrictInputSerializer
from gpu_spec.mig.catalogue import GpuModel
from gpu_spec.mig.config import MAX_CONFIG_BYTES

MAX_INSTANCES = 64  # a GPU holds at most 7; room for a layout that is wrong in many ways
# A config pasted by any signed-in user is parsed by pure-Python YAML: bounded well below the
# files the operator reads (gpu_spec's MAX_CONFIG_BYTES, MAX_NODES), so that a handful of
# parallel posts costs milliseconds, not seconds. NVIDIA's example file is 12 KB, 1,412 nodes.
PASTED_CONFIG_MAX_BYTES = 64 * 1024
PASTED_CONFIG_MAX_NODES = 10_000
# The body: a file at gpu_spec's limit still fits (its JSON escaping included), to be refused
# with a 400 naming the field; anything larger is a 413 before a byte is parsed.
VALIDATE_BODY_MAX_BYTES = 2 * MAX_CONFIG_BYTES


class MigProfileOutput(serializers.Serializer):
    name = serializers.CharField(help_text='As nvidia-smi and mig-parted write it: "3g.40gb".')
    nvidia_smi_profile_id = serializers.IntegerField(
        help_text="GpuInstanceProfileInfo.id (nvidia-smi mig -lgip ID): what the NVML create "
        "and placement calls take."
    )
    nvml_profile_const = serializers.CharField(
        help_text="The NVML_GPU_INSTANCE_PROFILE_* constant nvmlDeviceGetGpuInstanceProfileInfo "
        "takes (not the id above)."
    )
    nvml_profile_const_value = serializers.IntegerField()
    memory_mib = serializers.IntegerField(
        allow_null=True, help_text="As nvidia-smi reported it (driver-dependent); null: unseen."
    )
    memory_gb_nominal = serializers.IntegerField()
    memory_fraction = serializers.CharField()
    compute_slices = serializers.IntegerField()
    memory_slices = serializers.IntegerField(help_text="The placement size.")
    max_count = serializers.IntegerField()
    placements = serializers.ListField(
        child=serializers.IntegerField(), help_text="Valid starts, in memory slices."
    )
    sm_count = serializers.IntegerField(allow_null=True)
    media_extensions = serializers.BooleanField()
    confirmed = serializers.BooleanField(
        help_text="Name/count, profile id and placements all read from a source for this GPU."
    )
    name_confirmed = serializers.BooleanField()
    profile_id_confirmed = serializers.BooleanField()
    placements_confirmed = serializers.BooleanField()
    status = serializers.DictField(
        child=serializers.CharField(), help_text="The table's confirmed/inferred notes per field."
    )
    notes = serializers.CharField()


class GpuModelOutput(serializers.Serializer):
    name = serializers.CharField(help_text="As nvmlDeviceGetName() reports it.")
    aliases = serializers.ListField(child=serializers.CharField())
    pci_device_ids = serializers.ListField(child=serializers.CharField())
    compute_slices = serializers.IntegerField()
    memory_slices = serializers.IntegerField()
    total_sms = serializers.IntegerField(allow_null=True)
    derived_from = serializers.CharField(
        allow_null=True, help_text="The model whose table this one shares, if any."
    )
    confirmed = serializers.BooleanField()
    notes = serializers.CharField()
    profiles = serializers.SerializerMethodField()

    @extend_schema_field(MigProfileOutput(many=True))
    def get_profiles(self, model: GpuModel) -> Any:
        return MigProfileOutput(list(model.profiles.values()), many=True).data


class MigInstanceInput(StrictInputSerializer):
    """A GPU instance: a profile of the model and, optionally, its first memory slice."""

    profile = serializers.CharField(max_length=40)
    start = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=63,
        help_text="First memory slice; leave out to have one chosen.",
    )


class MigValidateInput(StrictInputSerializer):
    """A layout to check for one GPU model: `instances`, or `mig_parted_config` with `config`."""

    gpu_model = serializers.CharField(max_length=100, help_text="As NVML names it.")
    instances: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=MigInstanceInput(), required=False, max_length=MAX_INSTANCES
    )
    mig_parted_config = serializers.CharField(
        required=False,
        max_length=PASTED_CONFIG_MAX_BYTES,
        trim_whitespace=False,
        help_text=f"A mig-parted config file (YAML, version v1); with `config`. At most "
        f"{PASTED_CONFIG_MAX_BYTES} characters and {PASTED_CONFIG_MAX_NODES} YAML nodes, aliases "
        "counted as the nodes they stand for.",
    )
    config = serializers.CharField(
        required=False, max_length=253, help_text="Which config of the file, e.g. all-balanced."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        has_instances = "instances" in attrs
        has_file = "mig_parted_config" in attrs
        if has_instances and has_file:
            raise serializers.ValidationError(
                {"mig_parted_config": ["Give instances or mig_parted_config, not both."]}
            )
        if not has_instances and not has_file:
            raise serializers.ValidationError(
                {"instances": ["Give instances, or mig_parted_config with config."]}
            )
        if has_file and "config" not in attrs:
            raise serializers.ValidationError(
                {"config": ["Name the config of the file to check, e.g. all-balanced."]}
            )
        if has_instances and "config" in attrs:
            raise serializers.ValidationError({"config": ["Only with mig_parted_config."]})
        return attrs


class MigPlacementOutput(serializers.Serializer):
    profile = serializers.CharField()
    start = serializers.IntegerField(help_text="First memory slice.")
    size = serializers.IntegerField(help_text="Memory slices taken.")


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string", "enum": ["all"]},
            {"type": "array", "items": {"type": "integer"}},
        ]
    }
)
class DevicesField(serializers.Field):
    def to_representation(self, value: Any) -> Any:
        return value if isinstance(value, str) else list(value)


class MigConfigEntryOutput(serializers.Serializer):
    path = serializers.CharField(help_text='Where it is in the file: mig-configs["x"][0].')
    devices = DevicesField(help_text='"all" or GPU indices.')
    device_filter = serializers.ListField(child=serializers.CharField())
    mig_enabled = serializers.BooleanField()
    placements = MigPlacementOutput(many=True, help_text="Where each instance would go.")


class MigValidateOutput(serializers.Serializer):
    valid = serializers.BooleanField()
    gpu_model = serializers.CharField(help_text="The catalogue's name for the model.")
    placements = MigPlacementOutput(
        many=True, required=False, help_text="With instances: one per instance, in order."
    )
    config = serializers.CharField(required=False, help_text="With mig_parted_config.")
    entries = MigConfigEntryOutput(
        many=True,
        required=False,
        help_text="With mig_parted_config: the config's entries that apply to the model.",
    )
