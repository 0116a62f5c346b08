"""Output serializers of the advice API (the inputs are a tenant slug, a request id and
``days``, checked by the selectors)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from advice.watch import WATCH_DAYS, ChangeWatch
from core.api.serializers import utc_iso


class SuggestionLineOutput(serializers.Serializer):
    flavor = serializers.CharField()
    resource = serializers.CharField()
    daily_peaks = serializers.ListField(
        child=serializers.ListField(child=serializers.JSONField(), min_length=2, max_length=2),
        help_text="[day (ISO date), most GPUs in use that day] for each day of the period.",
    )
    peak = serializers.FloatField(help_text="The highest daily peak.")
    days_with_usage = serializers.IntegerField()
    p80 = serializers.FloatField(help_text="80% of the highest daily peak.")
    guarantee_floor = serializers.FloatField(help_text="p80 rounded up to whole GPUs.")
    elastic_cap = serializers.FloatField()
    capacity = serializers.FloatField()
    utilization_pct = serializers.FloatField(allow_null=True, help_text="Mean GPU utilisation.")
    memory_peak_mib = serializers.FloatField(allow_null=True, help_text="Peak memory on a GPU.")
    guaranteed_before = serializers.FloatField()
    limit_before = serializers.FloatField()
    guaranteed_after = serializers.FloatField()
    limit_after = serializers.FloatField()
    memory_first = serializers.DictField(
        allow_null=True, help_text="Where the guarantee moves when memory-first applies."
    )
    notes = serializers.ListField(child=serializers.CharField())
    rule = serializers.CharField()


class SuggestionOutput(serializers.Serializer):
    id = serializers.IntegerField()
    tenant = serializers.CharField(source="tenant.slug")
    cluster = serializers.CharField(source="cluster.name")
    period_start = serializers.DateTimeField()
    period_end = serializers.DateTimeField()
    request = serializers.IntegerField(source="request_id", allow_null=True)
    request_status = serializers.CharField(source="request.status", allow_null=True, default=None)
    note = serializers.CharField()
    lines = SuggestionLineOutput(many=True, source="numbers")
    created_at = serializers.DateTimeField()


class ReplayStatsOutput(serializers.Serializer):
    workloads = serializers.IntegerField()
    admitted = serializers.IntegerField()
    waiting_at_end = serializers.IntegerField()
    never_fits = serializers.IntegerField(help_text="Bigger than the queue could ever get.")
    wait_p50_s = serializers.FloatField(allow_null=True)
    wait_p95_s = serializers.FloatField(allow_null=True)
    utilisation_of_guarantee = serializers.FloatField(allow_null=True, help_text="0..1.")
    guaranteed_gpu_hours = serializers.FloatField()
    used_gpu_hours = serializers.FloatField()
    borrowed_gpu_hours = serializers.FloatField()
    borrowing_ratio = serializers.FloatField(allow_null=True, help_text="Borrowed / used.")
    preemptions = serializers.IntegerField()


class CalibrationFigureOutput(serializers.Serializer):
    figure = serializers.ChoiceField(choices=["wait_p50", "wait_p95", "gpu_hours"])
    name = serializers.CharField(help_text="The figure in words.")
    unit = serializers.ChoiceField(
        choices=["s", "GPU-h"], help_text="The values' unit: s, seconds; GPU-h, GPU-hours."
    )
    recorded = serializers.FloatField(allow_null=True, help_text="What was recorded.")
    replayed = serializers.FloatField(
        allow_null=True, help_text="The replay of the quotas in force (before)."
    )
    difference_pct = serializers.FloatField(
        allow_null=True, help_text="(replayed - recorded) / recorded, in percent."
    )
    within_tolerance = serializers.BooleanField(
        allow_null=True, help_text="null where one side has no value to compare."
    )


class TenantWhatIfOutput(serializers.Serializer):
    tenant = serializers.CharField()
    is_requester = serializers.BooleanField()
    recorded_wait_p50_s = serializers.FloatField(allow_null=True)
    recorded_wait_p95_s = serializers.FloatField(allow_null=True)
    recorded_gpu_hours = serializers.FloatField(
        help_text="GPU-hours the tenant's workloads were recorded to use within the window."
    )
    before = ReplayStatsOutput()
    after = ReplayStatsOutput()
    calibration = CalibrationFigureOutput(
        many=True, help_text="Recorded and replayed-before figures side by side."
    )
    calibrated = serializers.BooleanField(
        help_text="Every figure of the replay of the quotas in force is within tolerance of "
        "the record: its 'after' can be trusted as far as the model goes."
    )
    calibration_note = serializers.CharField(
        help_text="In words, the figures that differ by more than the tolerance (empty when "
        "none does)."
    )


class WhatIfChangeOutput(serializers.Serializer):
    flavor = serializers.CharField()
    guaranteed_before = serializers.FloatField()
    limit_before = serializers.FloatField()
    guaranteed_after = serializers.FloatField()
    limit_after = serializers.FloatField()


class WhatIfOutput(serializers.Serializer):
    request_id = serializers.IntegerField()
    cluster = serializers.CharField()
    days = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    workloads = serializers.IntegerField(
        help_text="Recorded workloads replayed: the cohort's for platform admins, the caller's "
        "tenants' for everyone else."
    )
    skipped_workloads = serializers.IntegerField(
        help_text="Workloads of tenants without quotas here (platform admins; 0 for others)."
    )
    replay_ms = serializers.FloatField(help_text="Time the two replays took.")
    tolerance_pct = serializers.IntegerField(
        help_text="How far (percent of the recorded value) the replay of the quotas in force "
        "may be from the record (WHAT_IF_TOLERANCE_PCT); waits a minute apart and GPU-hours "
        "one apart always agree."
    )
    changes = WhatIfChangeOutput(many=True)
    tenants = TenantWhatIfOutput(many=True)


def change_watch_representation(seen: ChangeWatch, *, revert_offered: bool) -> dict[str, Any]:
    """The request detail's ``watch`` (declared by ``approvals.api.serializers.ChangeWatchOutput``)."""
    return {
        "applied_at": utc_iso(seen.applied_at),
        "before_start": utc_iso(seen.before_start),
        "after_end": utc_iso(seen.after_end),
        "days_after": seen.days_after,
        "days_total": WATCH_DAYS,
        "complete": seen.complete,
        "any_data": seen.any_data,
        "summary": seen.summary,
        "indicators": [
            {
                "key": i.key,
                "name": i.name,
                "unit": i.unit,
                "before": i.before,
                "after": i.after,
                "words": i.words,
            }
            for i in seen.indicators
        ],
        "previous_items": [
            {
                "flavor": line.flavor,
                "resource": line.resource,
                "guaranteed": line.guaranteed_text,
                "limit": line.limit_text,
            }
            for line in seen.revert_lines
        ],
        "revert_offered": revert_offered,
    }
