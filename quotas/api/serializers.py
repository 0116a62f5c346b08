"""Input and output of the quotas API (clusters, flavors, tiers, a tenant's quotas and
where their push stands)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.serializers import DeprecatedIntegerField, StrictInputSerializer, utc_iso
from quotas import selectors
from quotas.choices import Enforcement, FairSharing, SyncState
from quotas.kube import job_caps
from quotas.kube.fair_sharing import (
    HALF_LIFE_HOURS_MAX,
    HALF_LIFE_HOURS_MIN,
    SAMPLING_MINUTES_MAX,
    SAMPLING_MINUTES_MIN,
)
from quotas.models import Cluster, ResourceFlavor, TenantSync, TierTemplate
from quotas.quantity import format_quantity
from quotas.selectors import EffectiveQuotaSet, TenantSyncRow
from quotas.timeslicing import percent_of_gpu


@extend_schema_field(OpenApiTypes.STR)
class QuantityField(serializers.Field):
    """A read-only Kubernetes quantity string ("64Gi", "500m", "16") for a given resource."""

    def __init__(self, resource: str = "", resource_attr: str = "resource", **kwargs: Any) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)
        self.resource = resource
        self.resource_attr = resource_attr

    def get_attribute(self, instance: Any) -> Any:
        self._current_resource = self.resource or getattr(instance, self.resource_attr, "")
        return super().get_attribute(instance)

    def to_representation(self, value: Decimal) -> str:
        return format_quantity(value, self._current_resource)


UNITS_PLACES = Decimal("0.001")


class UnitsField(serializers.DecimalField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_digits", 20)
        kwargs.setdefault("decimal_places", 3)
        kwargs.setdefault("coerce_to_string", False)
        kwargs["read_only"] = True
        super().__init__(**kwargs)


class EnforcementOutput(serializers.Serializer):
    mode = serializers.ChoiceField(choices=Enforcement.choices)
    mode_display = serializers.CharField()
    bypass = serializers.ChoiceField(
        choices=["no", "yes", "unknown"],
        help_text="Can a tenant's GPU work get around its limit on this cluster?",
    )
    explanation = serializers.ListField(child=serializers.CharField())
    kueue_config = serializers.JSONField(
        allow_null=True, help_text="Kueue's manager configuration as last read."
    )
    kueue_config_error = serializers.CharField()
    kueue_config_read_at = serializers.DateTimeField(allow_null=True)


class ClusterOutput(serializers.ModelSerializer):
    enforcement = serializers.SerializerMethodField()

    class Meta:
        model = Cluster
        fields = [
            "name",
            "display_name",
            "api_server",
            "has_kueue",
            "has_volcano",
            "elastic_cap_fraction",
            "allow_guarantee_overcommit",
            "enforcement",
            "tenant_ingress_namespaces",
            "tenant_monitoring_namespaces",
        ]

    @extend_schema_field(EnforcementOutput)
    def get_enforcement(self, cluster: Cluster) -> Any:
        return EnforcementOutput(selectors.cluster_enforcement(cluster=cluster)).data


class ClusterEnforcementInput(StrictInputSerializer):
    """What a platform admin changes of a cluster; each field optional."""

    enforcement = serializers.ChoiceField(choices=Enforcement.choices, required=False)
    # Checked by the service (quotas.services.tenant_traffic_namespaces_read), which names the
    # field in a 400.
    tenant_ingress_namespaces = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text="Namespaces of the ingress controller whose pods may reach every tenant's "
        "pods (any port); no tenant may have one. Every tenant is pushed again.",
    )
    tenant_monitoring_namespaces = serializers.ListField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text="Namespaces of the monitoring that may scrape every tenant's pods.",
    )

    fair_sharing = serializers.ChoiceField(
        choices=FairSharing.choices,
        required=False,
        help_text="How Kueue shares unused GPUs between teams here. A new mode pushes every "
        "tenant again.",
    )
    usage_half_life_hours = serializers.IntegerField(
        required=False,
        min_value=HALF_LIFE_HOURS_MIN,
        max_value=HALF_LIFE_HOURS_MAX,
        help_text="With usage: after how many hours a team's past use counts half.",
    )
    usage_sampling_minutes = serializers.IntegerField(
        required=False,
        min_value=SAMPLING_MINUTES_MIN,
        max_value=SAMPLING_MINUTES_MAX,
        help_text="With usage: how often Kueue samples each queue's use, in minutes.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError(
                "Name what to change: enforcement, tenant_ingress_namespaces, "
                "tenant_monitoring_namespaces, fair_sharing, usage_half_life_hours or "
                "usage_sampling_minutes."
            )
        return attrs


class FlavorResourceOutput(serializers.Serializer):
    resource = serializers.CharField()
    capacity = QuantityField()


class FlavorOutput(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    resources = FlavorResourceOutput(many=True)
    gpu_weight = UnitsField()

    class Meta:
        model = ResourceFlavor
        fields = [
            "cluster",
            "name",
            "kind",
            "gpu_model",
            "mig_profile",
            "storage_class",
            "storage_driver",
            "storage_iops",
            "storage_throughput_mib",
            "volume_attributes_class",
            "node_labels",
            "node_taints",
            "gpu_weight",
            "time_slicing_replicas",
            "gpu_memory_mib",
            "vgpu_split",
            "resources",
        ]
        extra_kwargs = {
            "gpu_memory_mib": {
                "help_text": "vGPU flavors (HAMi): the memory of one of the flavor's GPUs in "
                "MiB; the flavor's nvidia.com/gpumem capacity and quotas are in bytes. null: "
                "not given."
            },
            "vgpu_split": {
                "help_text": "vGPU flavors (HAMi): vGPUs each GPU is advertised as (HAMi's "
                "deviceSplitCount); the flavor's nvidia.com/gpu counts vGPUs. null otherwise."
            },
            "time_slicing_replicas": {
                "help_text": "Shares each GPU is advertised as when the device plugin "
                "time-slices this flavor (its GPU capacity and quotas count shares); null: "
                "not shared. Shares split time, not memory."
            },
        }


class FleetCapacityOutput(serializers.Serializer):
    observed = serializers.IntegerField(
        help_text="Instances the node agents report on GPUs that keep their layout."
    )
    planned = serializers.IntegerField(
        help_text="Instances of repartitions under way (desired layouts not applied yet)."
    )
    gpus = serializers.IntegerField(
        help_text="GPUs of the flavor's model counted: on nodes whose agent reports, as far as "
        "the cluster's Node objects confirm them."
    )
    unconfirmed_nodes = serializers.IntegerField(
        help_text="Nodes reporting GPUs of the model that the cluster does not confirm (no Node "
        "object of that name, a reading too old, another GPU product): not counted."
    )
    stale_nodes = serializers.IntegerField(
        help_text="Nodes the cluster confirms whose agent stopped reporting: not counted."
    )


class AllocationOutput(serializers.Serializer):
    flavor = serializers.CharField(source="flavor.name")
    resource = serializers.CharField()
    capacity = QuantityField(
        help_text="A MIG flavor's: the instances the fleet has (observed or planned); "
        "otherwise the number an admin entered."
    )
    fleet = FleetCapacityOutput(
        allow_null=True,
        help_text="Where a MIG flavor's capacity comes from; null: the number an admin entered.",
    )
    not_counted = serializers.CharField(
        help_text="What the node agents report that the capacity leaves out, in words (nodes "
        "the cluster does not confirm, stale nodes, GPUs or MIG instances beyond what the "
        "cluster advertises); empty when nothing is."
    )
    guaranteed = QuantityField(help_text="Sum of all tenants' guarantees.")
    free = QuantityField()
    shares_per_gpu = serializers.IntegerField(
        allow_null=True,
        help_text="Time-sliced flavors: shares per GPU (capacity, guaranteed and free count "
        "shares; capacity / shares_per_gpu is the GPUs). null: not time-sliced.",
    )


class FairShareStandingOutput(serializers.Serializer):
    tenant = serializers.CharField()
    tenant_name = serializers.CharField()
    weighted_share = serializers.IntegerField(
        allow_null=True,
        help_text="Kueue's weighted share of the tenant's ClusterQueue (0: within its "
        "guarantee); null where Kueue reports none.",
    )
    standing = serializers.CharField(help_text="The standing in words.")
    recent_gpus = serializers.FloatField(
        allow_null=True,
        help_text="GPUs held on average as Kueue remembers them (decayed with the half-life); "
        "null where Kueue keeps no record.",
    )
    recent_use = serializers.CharField(help_text="Recent use in words.")
    consumed = serializers.DictField(
        child=serializers.FloatField(),
        help_text="Kueue's decayed use per resource, summed over the tenant's LocalQueues.",
    )
    read_at = serializers.DateTimeField()


class FairSharingOutput(serializers.Serializer):
    mode = serializers.ChoiceField(choices=FairSharing.choices)
    mode_display = serializers.CharField()
    usage_half_life_hours = serializers.IntegerField()
    usage_sampling_minutes = serializers.IntegerField()
    state = serializers.ChoiceField(
        choices=["on", "off", "missing", "differs", "unknown"],
        help_text="Whether Kueue on the cluster does what the portal asks.",
    )
    explanation = serializers.ListField(child=serializers.CharField())
    kueue_configuration = serializers.CharField(
        help_text="The part of Kueue's manager Configuration an admin applies (YAML); empty "
        "for no fair sharing."
    )
    standings = FairShareStandingOutput(many=True)


class ClusterDetailOutput(ClusterOutput):
    allocations = serializers.SerializerMethodField()
    fair_sharing = serializers.SerializerMethodField()

    class Meta(ClusterOutput.Meta):
        fields = [*ClusterOutput.Meta.fields, "allocations", "fair_sharing"]

    @extend_schema_field(AllocationOutput(many=True))
    def get_allocations(self, cluster: Cluster) -> Any:
        return AllocationOutput(self.context["allocations"], many=True).data

    @extend_schema_field(FairSharingOutput)
    def get_fair_sharing(self, cluster: Cluster) -> Any:
        # Standings of the tenants the reader may see (every tenant for a platform admin).
        shown = self.context.get("fair_share_tenants")
        return FairSharingOutput(
            selectors.cluster_fair_sharing(cluster=cluster, tenant_slugs=shown)
        ).data


class TierTemplateOutput(serializers.ModelSerializer):
    cpu_guaranteed = QuantityField(resource="cpu")
    cpu_limit = QuantityField(resource="cpu")
    memory_guaranteed = QuantityField(resource="memory")
    memory_limit = QuantityField(resource="memory")
    storage = QuantityField(resource="storage", source="storage_bytes")
    max_cpu_per_pod = QuantityField(resource="cpu", allow_null=True)
    max_memory_per_pod = QuantityField(resource="memory", allow_null=True)

    class Meta:
        model = TierTemplate
        fields = [
            "name",
            "display_name",
            "description",
            "gpus_guaranteed",
            "gpus_limit",
            "cpu_guaranteed",
            "cpu_limit",
            "memory_guaranteed",
            "memory_limit",
            "max_running_jobs",
            "max_queued_jobs",
            "max_pods",
            "storage",
            "max_pvcs",
            "max_gpus_per_pod",
            "max_cpu_per_pod",
            "max_memory_per_pod",
            "inference_gpus",
        ]


def _units(value: Decimal) -> float:
    return float(value.quantize(UNITS_PLACES))


def _quantity(value: Decimal | None, resource: str) -> str | None:
    return None if value is None else format_quantity(value, resource)


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "number"}]})
class QuantityInput(serializers.Field):
    """A Kubernetes quantity in a request body: "64Gi", "500m", 16 or 0.5. Passed on as text;
    the service parses it with the resource's rules and names the field when it cannot."""

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            raise serializers.ValidationError("must be a Kubernetes quantity (text or a number)")
        return str(data)

    def to_representation(self, value: Any) -> str:
        return str(value)


class TierTemplateInput(StrictInputSerializer):
    name = serializers.CharField(max_length=63)
    display_name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True)
    gpus_guaranteed = QuantityInput()
    gpus_limit = QuantityInput()
    cpu_guaranteed = QuantityInput()
    cpu_limit = QuantityInput()
    memory_guaranteed = QuantityInput()
    memory_limit = QuantityInput()
    max_running_jobs = serializers.IntegerField(min_value=0, help_text=job_caps.RUNNING_CAP_WORDS)
    max_queued_jobs = serializers.IntegerField(min_value=0, help_text=job_caps.QUEUED_CAP_WORDS)
    max_pods = serializers.IntegerField(min_value=0)
    storage = QuantityInput(source="storage_bytes")
    max_pvcs = serializers.IntegerField(min_value=0)
    max_gpus_per_pod = serializers.IntegerField(min_value=1, required=False, allow_null=True)
    max_cpu_per_pod = QuantityInput(required=False, allow_null=True)
    max_memory_per_pod = QuantityInput(required=False, allow_null=True)
    inference_gpus = serializers.IntegerField(min_value=0, required=False, allow_null=True)


class QuotaItemOutput(serializers.Serializer):
    flavor = serializers.CharField()
    flavor_kind = serializers.CharField()
    resource = serializers.CharField()
    guaranteed = QuantityField()
    limit = QuantityField()
    borrowing_limit = QuantityField(help_text="limit - guaranteed (Kueue borrowingLimit).")
    lending_limit = QuantityField(allow_null=True)
    guaranteed_gpu_units = UnitsField()
    limit_gpu_units = UnitsField()
    shares_per_gpu = serializers.IntegerField(
        allow_null=True,
        help_text="Time-sliced flavors: the shares each GPU is advertised as; guaranteed and "
        "limit count shares. A share is time on the GPU, not memory: every pod on it sees the "
        "whole GPU memory. null: whole GPUs.",
    )
    guaranteed_percent_of_gpu = serializers.DecimalField(
        max_digits=9, decimal_places=2, allow_null=True, coerce_to_string=False,
        help_text="Time-sliced flavors: the guarantee as a percentage of one GPU (3 of 10 "
        "shares: 30). null otherwise.",
    )  # fmt: skip
    limit_percent_of_gpu = serializers.DecimalField(
        max_digits=9, decimal_places=2, allow_null=True, coerce_to_string=False,
        help_text="Time-sliced flavors: the limit as a percentage of one GPU. null otherwise.",
    )  # fmt: skip
    storage_iops = serializers.IntegerField(
        allow_null=True,
        help_text="Storage flavors: the IOPS each volume is provisioned with; null: the CSI "
        "driver's default (or not a storage flavor).",
    )
    storage_throughput_mib = serializers.IntegerField(
        allow_null=True,
        help_text="Storage flavors: the throughput each volume is provisioned with, in MiB/s; "
        "null: the CSI driver's default (or not a storage flavor).",
    )


def _percent_of_gpu(amount: Decimal, replicas: int | None) -> float | None:
    return None if replicas is None else float(percent_of_gpu(amount, replicas))


class QuotaSetOutput(serializers.Serializer):
    """A tenant's quota set on one cluster (an ``EffectiveQuotaSet``)."""

    cluster = serializers.CharField()
    generation = serializers.IntegerField()
    tier = serializers.CharField(allow_null=True)
    max_running_jobs = serializers.IntegerField(allow_null=True)
    max_queued_jobs = serializers.IntegerField(allow_null=True)
    max_pods = serializers.IntegerField(allow_null=True)
    storage = QuantityField(allow_null=True)
    max_pvcs = serializers.IntegerField(allow_null=True)
    fair_share_weight = serializers.IntegerField(
        allow_null=True, help_text="Kueue fair-sharing weight; null: the default of 1."
    )
    max_gpus_per_pod = serializers.IntegerField(
        allow_null=True, help_text="Per-pod GPU cap (LimitRange); null: derived, at most 8."
    )
    max_cpu_per_pod = QuantityField(
        allow_null=True, help_text="Per-container CPU cap; null: the largest CPU limit."
    )
    max_memory_per_pod = QuantityField(
        allow_null=True, help_text="Per-container memory cap; null: the largest memory limit."
    )
    inference_gpus = serializers.IntegerField(
        allow_null=True,
        help_text="Whole GPUs set apart for inference (production priority); the rest of the "
        "GPU limit is for batch. Null: no split.",
    )
    guaranteed_gpu_units = UnitsField()
    limit_gpu_units = UnitsField()
    items = QuotaItemOutput(many=True)
    updated_at = serializers.DateTimeField()

    def to_representation(self, qs: EffectiveQuotaSet) -> dict[str, Any]:
        # Written out by hand, like TenantOutput: this is a hot read path and DRF's nested
        # per-field machinery cost more than the queries. The declared fields above describe
        # the same shape for the OpenAPI document; a test keeps the two in step.
        return {
            "cluster": qs.cluster_name,
            "generation": qs.generation,
            "tier": qs.tier_name,
            "max_running_jobs": qs.max_running_jobs,
            "max_queued_jobs": qs.max_queued_jobs,
            "max_pods": qs.max_pods,
            "storage": _quantity(qs.storage_bytes, "storage"),
            "max_pvcs": qs.max_pvcs,
            "fair_share_weight": qs.fair_share_weight,
            "max_gpus_per_pod": qs.max_gpus_per_pod,
            "max_cpu_per_pod": _quantity(qs.max_cpu_per_pod, "cpu"),
            "max_memory_per_pod": _quantity(qs.max_memory_per_pod, "memory"),
            "inference_gpus": qs.inference_gpus,
            "guaranteed_gpu_units": _units(qs.guaranteed_gpu_units),
            "limit_gpu_units": _units(qs.limit_gpu_units),
            "items": [
                {
                    "flavor": item.flavor_name,
                    "flavor_kind": item.flavor_kind,
                    "resource": item.resource,
                    "guaranteed": format_quantity(item.guaranteed, item.resource),
                    "limit": format_quantity(item.limit, item.resource),
                    "borrowing_limit": format_quantity(item.borrowing_limit, item.resource),
                    "lending_limit": _quantity(item.lending_limit, item.resource),
                    "guaranteed_gpu_units": _units(item.guaranteed_gpu_units),
                    "limit_gpu_units": _units(item.limit_gpu_units),
                    "shares_per_gpu": item.shares_per_gpu,
                    "guaranteed_percent_of_gpu": _percent_of_gpu(
                        item.guaranteed, item.shares_per_gpu
                    ),
                    "limit_percent_of_gpu": _percent_of_gpu(item.limit, item.shares_per_gpu),
                    "storage_iops": item.storage_iops,
                    "storage_throughput_mib": item.storage_throughput_mib,
                }
                for item in qs.items
            ],
            "updated_at": utc_iso(qs.updated_at),
        }


class PushOutput(serializers.Serializer):
    """The cluster side of a tenant's quotas on one cluster."""

    state = serializers.ChoiceField(choices=SyncState.choices)
    observed_generation = serializers.IntegerField(
        help_text="The quota generation the cluster has observed (applied there): a request "
        "whose approved_generation is at most this is in force on the cluster."
    )
    # API v1's first name for observed_generation: kept, same value, deprecated.
    applied_generation = DeprecatedIntegerField(
        help_text="Deprecated alias of observed_generation (the same value), kept for API v1 "
        "clients: the generation the cluster has, not the one an approval wrote."
    )
    attempts = serializers.IntegerField(help_text="Failed attempts in a row.")
    message = serializers.CharField(help_text="The cluster's message when it failed.")
    last_attempt_at = serializers.DateTimeField(allow_null=True)
    last_applied_at = serializers.DateTimeField(allow_null=True)


def push_representation(push: TenantSync | None) -> dict[str, Any] | None:
    if push is None:
        return None
    return {
        "state": push.state,
        "observed_generation": push.applied_generation,
        "applied_generation": push.applied_generation,  # deprecated alias
        "attempts": push.attempts,
        "message": push.message,
        "last_attempt_at": _time(push.last_attempt_at),
        "last_applied_at": _time(push.last_applied_at),
    }


class InClusterOutput(serializers.Serializer):
    reachable = serializers.BooleanField()
    message = serializers.CharField()
    resource_quotas = serializers.ListField(
        child=serializers.DictField(),
        help_text="Per namespace: name, hard and used (ResourceQuota status).",
    )
    cluster_queue = serializers.DictField(
        allow_null=True,
        help_text="pending_workloads, admitted_workloads, reserving_workloads, flavors_usage.",
    )


class TenantSyncOutput(serializers.Serializer):
    cluster = serializers.CharField()
    generation = serializers.IntegerField(help_text="The quota generation in force.")
    push = PushOutput(allow_null=True, help_text="Null before the first push.")
    in_cluster = InClusterOutput(
        allow_null=True, required=False, help_text="With ?live=true: what the cluster reports."
    )

    def to_representation(self, row: TenantSyncRow) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cluster": row.cluster.name,
            "generation": row.generation,
            "push": push_representation(row.sync),
        }
        if row.in_cluster is not None:
            ic = row.in_cluster
            out["in_cluster"] = {
                "reachable": ic.reachable,
                "message": ic.message,
                "resource_quotas": ic.resource_quotas,
                "cluster_queue": ic.cluster_queue,
            }
        return out


def _time(value: Any) -> str | None:
    return utc_iso(value) if value else None


class PoolPartOutput(serializers.Serializer):
    cluster = serializers.CharField()
    guaranteed = serializers.CharField(
        allow_null=True, help_text="A Kubernetes quantity; null: no quota on that cluster."
    )
    limit = serializers.CharField(allow_null=True)


class PoolDifferenceOutput(serializers.Serializer):
    tenant = serializers.CharField()
    what = serializers.CharField(help_text="The kind of resource, in words.")
    resource = serializers.CharField()
    clusters = PoolPartOutput(many=True)
    message = serializers.CharField()


class ClusterPoolOutput(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    clusters = serializers.ListField(child=serializers.CharField())
    consistent = serializers.BooleanField(
        help_text="Every tenant has the same quotas on every cluster of the pool."
    )
    differences = PoolDifferenceOutput(many=True)


def pool_representation(
    pool: Any, clusters: list[str], differences: list[selectors.PoolDifference]
) -> dict[str, Any]:
    def quantity(amount: Decimal | None, resource: str) -> str | None:
        return None if amount is None else format_quantity(amount, resource)

    return {
        "name": pool.name,
        "description": pool.description,
        "clusters": clusters,
        "consistent": not differences,
        "differences": [
            {
                "tenant": d.tenant,
                "what": d.what,
                "resource": d.resource,
                "clusters": [
                    {
                        "cluster": p.cluster,
                        "guaranteed": quantity(p.guaranteed, d.resource),
                        "limit": quantity(p.limit, d.resource),
                    }
                    for p in d.parts
                ],
                "message": d.message,
            }
            for d in differences
        ],
    }
