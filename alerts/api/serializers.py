"""Input and output serializers of the alerts API."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from alerts.models import Alert, AlertEvent
from core.api.serializers import StrictInputSerializer
from quotas.quantity import QuantityError, parse_quantity


class AlertEventOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_username")

    class Meta:
        model = AlertEvent
        fields = ["kind", "at", "actor", "detail"]


class AlertOutput(serializers.ModelSerializer):
    rule = serializers.CharField(source="rule.name")
    kind = serializers.CharField(source="rule.kind")
    cluster = serializers.CharField(source="cluster.name", allow_null=True, default=None)
    tenant = serializers.CharField(source="tenant.slug", allow_null=True, default=None)
    flavor = serializers.CharField(source="flavor.name", allow_null=True, default=None)
    acknowledged_by = serializers.CharField(
        source="acknowledged_by.username", allow_null=True, default=None
    )

    class Meta:
        model = Alert
        fields = ["id", "rule", "kind", "severity", "state", "subject", "cluster", "tenant",
                  "flavor", "workload_namespace", "workload_name", "message", "value",
                  "threshold", "fired_at", "last_seen_at", "acknowledged_at", "acknowledged_by",
                  "resolved_at", "action_state", "action_due_at", "action_error"]  # fmt: skip


class AlertDetailOutput(AlertOutput):
    events = AlertEventOutput(many=True, read_only=True)

    class Meta(AlertOutput.Meta):
        fields = [*AlertOutput.Meta.fields, "events"]


@extend_schema_field(
    {"oneOf": [{"type": "string", "example": "64Gi"}, {"type": "integer", "minimum": 0}]}
)
class QuantityField(serializers.Field):
    """A Kubernetes quantity ("2", "500m", "64Gi") or a whole number; never negative."""

    default_error_messages = {
        "invalid": "not a Kubernetes quantity: {why}",
        "negative": "must not be negative (got {value}).",
    }

    def to_internal_value(self, data: Any) -> Decimal:
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid", why="give a string such as '64Gi' or a whole number")
        try:
            amount = parse_quantity(data)
        except QuantityError as exc:
            self.fail("invalid", why=str(exc))
        if amount < 0:
            self.fail("negative", value=data)
        return amount

    def to_representation(self, value: Any) -> str:
        return str(value)


class AdmissionCheckInput(StrictInputSerializer):
    cluster = serializers.CharField(
        required=False, max_length=63,
        help_text="The cluster the job goes to; optional when the tenant has quota on one only.",
    )  # fmt: skip
    gpus = serializers.DictField(
        child=QuantityField(), required=False,
        help_text='GPUs (or MIG instances) by flavor name, e.g. {"a100-80gb": 2}.',
    )  # fmt: skip
    cpu = QuantityField(required=False, help_text='Cores, e.g. "8" or "500m".')
    memory = QuantityField(required=False, help_text='Bytes, e.g. "64Gi".')
    storage = QuantityField(required=False, help_text='Bytes of new PVCs, e.g. "500Gi".')
    volumes = serializers.DictField(
        child=QuantityField(), required=False,
        help_text="Bytes the job writes to existing volumes, by namespace/claim, e.g. "
        '{"team-a/datasets": "200Gi"}: checked against the free space the kubelet reports '
        "(through the cluster's Prometheus).",
    )  # fmt: skip


class ResourceVerdictOutput(serializers.Serializer):
    resource = serializers.CharField()
    requested = serializers.DecimalField(max_digits=30, decimal_places=9, coerce_to_string=False)
    fits = serializers.BooleanField()
    reason = serializers.CharField()
    used = serializers.DecimalField(
        max_digits=30, decimal_places=9, allow_null=True, coerce_to_string=False
    )
    guaranteed = serializers.DecimalField(
        max_digits=30, decimal_places=9, allow_null=True, coerce_to_string=False
    )
    limit = serializers.DecimalField(
        max_digits=30, decimal_places=9, allow_null=True, coerce_to_string=False
    )
    headroom = serializers.DecimalField(
        max_digits=30, decimal_places=9, allow_null=True, coerce_to_string=False
    )
    borrowable = serializers.DecimalField(
        max_digits=30, decimal_places=9, allow_null=True, coerce_to_string=False
    )


class AdmissionCheckOutput(serializers.Serializer):
    tenant = serializers.CharField()
    cluster = serializers.CharField()
    fits = serializers.BooleanField()
    measured_at = serializers.DateTimeField()
    resources = ResourceVerdictOutput(many=True)
