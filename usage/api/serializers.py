"""Input and output serializers of the usage API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils.dateparse import parse_duration
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.serializers import BoundedDateTimeField, StrictInputSerializer
from core.numbers import ascii_whole
from tenants.validators import DNS1123_LABEL_MAX
from usage.choices import PrometheusFigure
from usage.models import (
    PROMETHEUS_STEP_MAX_S,
    PROMETHEUS_STEP_MIN_S,
    PROMETHEUS_TIMEOUT_MAX_S,
    PrometheusSource,
)


@extend_schema_field(OpenApiTypes.STR)
class StepField(serializers.Field):
    """Seconds (``3600``) or an ISO 8601 duration (``PT1H``, ``P1D``)."""

    default_error_messages = {
        "invalid": "a number of seconds or an ISO 8601 duration (PT5M, PT1H, P1D) is required.",
        "too_large": "a whole number of seconds of at most 9 digits (a step is at most 1 year).",
    }

    def to_internal_value(self, data: Any) -> timedelta:
        text = str(data).strip()
        if text.isascii() and text.isdigit():
            seconds = ascii_whole(text, max_digits=9)
            if seconds is None:
                self.fail("too_large")
            return timedelta(seconds=seconds)
        try:
            parsed = parse_duration(text) if text.upper().startswith("P") else None
        except (OverflowError, ValueError):  # P999999999999D: past what a timedelta holds
            self.fail("too_large")
        if parsed is None:
            self.fail("invalid")
        return parsed

    def to_representation(self, value: timedelta) -> int:
        return int(value.total_seconds())


class UsageQueryInput(StrictInputSerializer):
    cluster = serializers.CharField(required=False, max_length=DNS1123_LABEL_MAX)
    flavor = serializers.CharField(required=False, max_length=DNS1123_LABEL_MAX)
    start = BoundedDateTimeField(required=False, help_text="ISO 8601; default end - 24 h.")
    end = BoundedDateTimeField(required=False, help_text="ISO 8601; default now.")
    step = StepField(
        required=False,
        help_text="Seconds or ISO 8601 duration; default: 5 min up to a day, 1 h up to 60 days, "
        "then 1 day. Steps that are multiples of 1 day, 1 h or 5 min read those rollups.",
    )


class UsagePointOutput(serializers.Serializer):
    time = serializers.DateTimeField(help_text="Start of the step.")
    used = serializers.FloatField(allow_null=True, help_text="Mean GPUs in use (Kueue).")
    used_max = serializers.FloatField(allow_null=True, help_text="Peak GPUs in use.")
    guaranteed = serializers.FloatField(allow_null=True)
    limit = serializers.FloatField(allow_null=True)
    borrowed = serializers.FloatField(allow_null=True, help_text="Mean GPUs borrowed.")
    reserved = serializers.FloatField(allow_null=True)
    allocated = serializers.FloatField(allow_null=True, help_text="GPUs requested by pods.")
    gpu_utilization = serializers.FloatField(allow_null=True, help_text="Mean GPU utilisation %.")
    used_units = serializers.FloatField(allow_null=True, help_text="used x the flavor's weight.")
    used_max_units = serializers.FloatField(allow_null=True)
    guaranteed_units = serializers.FloatField(allow_null=True)
    limit_units = serializers.FloatField(allow_null=True)
    borrowed_units = serializers.FloatField(allow_null=True)


class UsageSeriesOutput(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    gpu_weight = serializers.FloatField(help_text="Normalised GPU units per GPU of the flavor.")
    points = UsagePointOutput(many=True)


class UsageOutput(serializers.Serializer):
    tenant = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    step_s = serializers.IntegerField()
    source = serializers.CharField(  # type: ignore[assignment]  # a field named like Field.source
        help_text='What the points were computed from: "raw", "5m", "1h" or "1d" rollups.'
    )
    series = UsageSeriesOutput(many=True)


class SamplesInput(serializers.Serializer):
    samples = serializers.ListField(
        child=serializers.DictField(),
        help_text='[{"time": ISO 8601, "metric": "quota_used", "value": 3, "cluster_id", '
        '"tenant_id", "flavor_id", "node_id", "gpu_uuid", "gi_id", "mig_profile"}]',
    )


class SamplesOutput(serializers.Serializer):
    written = serializers.IntegerField()


class PrometheusSourceInput(StrictInputSerializer):
    """A cluster's Prometheus (PUT replaces it whole; settings left out take their defaults)."""

    url = serializers.CharField(
        max_length=500,
        help_text="Base URL of the HTTP API, e.g. http://prometheus.monitoring:9090.",
    )
    enabled = serializers.BooleanField(required=False)
    bearer_token_file = serializers.CharField(max_length=500, required=False, allow_blank=True)
    basic_auth_user = serializers.CharField(max_length=200, required=False, allow_blank=True)
    basic_auth_password_file = serializers.CharField(
        max_length=500, required=False, allow_blank=True
    )
    ca_bundle = serializers.CharField(max_length=500, required=False, allow_blank=True)
    label_matchers = serializers.CharField(max_length=500, required=False, allow_blank=True)
    query_timeout_s = serializers.IntegerField(
        required=False, min_value=1, max_value=PROMETHEUS_TIMEOUT_MAX_S
    )
    step_s = serializers.IntegerField(
        required=False, min_value=PROMETHEUS_STEP_MIN_S, max_value=PROMETHEUS_STEP_MAX_S
    )
    figures = serializers.ListField(
        child=serializers.ChoiceField(choices=PrometheusFigure.choices), required=False
    )
    node_agent_samples = serializers.BooleanField(required=False)


class PrometheusSourceOutput(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    figures = serializers.ListField(child=serializers.ChoiceField(choices=PrometheusFigure.choices))
    last_warnings = serializers.ListField(child=serializers.CharField())
    last_unknown_namespaces = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = PrometheusSource
        fields = [
            "cluster", "url", "enabled", "bearer_token_file", "basic_auth_user",
            "basic_auth_password_file", "ca_bundle", "label_matchers", "query_timeout_s",
            "step_s", "figures", "node_agent_samples", "last_attempt_at", "last_success_at",
            "last_error", "last_warnings", "last_samples", "last_unknown_series",
            "last_unknown_namespaces", "read_until",
        ]  # fmt: skip
        read_only_fields = fields


class WorkloadResourceOutput(serializers.Serializer):
    flavor = serializers.CharField(help_text="The flavor Kueue admitted it on ('' while pending).")
    resource = serializers.CharField()
    amount = serializers.FloatField(help_text="In base units (GPUs, cores, bytes).")
    words = serializers.CharField()


class WorkloadNeedOutput(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    resource = serializers.CharField()
    guaranteed_before = serializers.DecimalField(max_digits=20, decimal_places=3)
    limit_before = serializers.DecimalField(max_digits=20, decimal_places=3)
    guaranteed = serializers.DecimalField(max_digits=20, decimal_places=3)
    limit = serializers.DecimalField(max_digits=20, decimal_places=3)


class WorkloadOutput(serializers.Serializer):
    """One Kueue Workload of the tenant, as last read from its cluster."""

    id = serializers.IntegerField(source="workload.pk")
    cluster = serializers.CharField()
    namespace = serializers.CharField(source="workload.namespace")
    name = serializers.CharField(source="workload.name")
    kind = serializers.CharField(source="workload.job_kind", help_text="Its job's kind.")
    job = serializers.CharField(source="workload.job_name")
    submitter = serializers.CharField(source="workload.submitter")
    submitter_source = serializers.CharField(
        source="workload.submitter_source",
        help_text="annotation (stamped by the portal's admission policy) or service-account.",
    )
    queue = serializers.CharField(source="workload.queue_name")
    priority = serializers.IntegerField(source="workload.priority", allow_null=True)
    gpus = serializers.FloatField(source="workload.gpus")
    resources = WorkloadResourceOutput(many=True, source="gpus_by_flavor")
    state = serializers.ChoiceField(choices=["pending", "admitted", "running", "suspended",
                                             "finished", "evicted"])  # fmt: skip
    duration = serializers.CharField(help_text="How long it has run or waited, in words.")
    created_at = serializers.DateTimeField(source="workload.created_at")
    admitted_at = serializers.DateTimeField(source="workload.admitted_at", allow_null=True)
    finished_at = serializers.DateTimeField(source="workload.finished_at", allow_null=True)
    evictions = serializers.IntegerField(source="workload.evictions")
    reason = serializers.CharField(help_text="Why it waits, in words ('' unless it waits).")
    kueue_message = serializers.CharField(source="workload.pending_message")
    need = WorkloadNeedOutput(allow_null=True, help_text="What a quota request would ask for.")
    stale = serializers.BooleanField(help_text="Its cluster could not be read lately.")
    read_at = serializers.DateTimeField(source="workload.updated_at")


class ClusterReadingOutput(serializers.Serializer):
    name = serializers.CharField()
    stale = serializers.BooleanField()
    failing_since = serializers.DateTimeField(allow_null=True)
    last_success_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()
