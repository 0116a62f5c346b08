"""Input and output serializers of the dashboards API (profile, showback, prices)."""

from __future__ import annotations

from rest_framework import serializers

from core.api.serializers import BoundedDateTimeField, StrictInputSerializer
from dashboards.models import CURRENCY_MAX
from tenants.validators import DNS1123_LABEL_MAX


class ProfileQueryInput(StrictInputSerializer):
    start = BoundedDateTimeField(required=False, help_text="ISO 8601; default end - 7 days.")
    end = BoundedDateTimeField(required=False, help_text="ISO 8601; default now.")


class HourOfWeekOutput(serializers.Serializer):
    weekday = serializers.CharField(help_text="Mon..Sun (UTC).")
    hour = serializers.IntegerField(help_text="0..23 (UTC).")
    count = serializers.IntegerField()


class GpusPerJobOutput(serializers.Serializer):
    gpus = serializers.FloatField()
    jobs = serializers.IntegerField()


class DurationBucketOutput(serializers.Serializer):
    label = serializers.CharField()  # type: ignore[assignment]  # a field named like Field.label
    jobs = serializers.IntegerField()


class DurationsOutput(serializers.Serializer):
    buckets = DurationBucketOutput(many=True)
    p50_s = serializers.FloatField(allow_null=True)
    p95_s = serializers.FloatField(allow_null=True)
    max_s = serializers.FloatField(allow_null=True)


class FlavorProfileOutput(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    peak_used = serializers.FloatField(allow_null=True, help_text="Peak GPUs in use (Kueue).")
    peak_memory_mib = serializers.FloatField(allow_null=True, help_text="On one GPU or instance.")
    mean_utilization = serializers.FloatField(allow_null=True, help_text="%")


class ProfileOutput(serializers.Serializer):
    tenant = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    submissions = serializers.IntegerField(help_text="Workloads created in the period.")
    submissions_by_hour_of_week = HourOfWeekOutput(many=True, help_text="Non-zero cells only.")
    gpus_per_job = GpusPerJobOutput(many=True)
    durations = DurationsOutput(help_text="Run time (finished - admitted) of finished jobs.")
    queue_wait_p50_s = serializers.FloatField(allow_null=True)
    queue_wait_p95_s = serializers.FloatField(allow_null=True)
    peak_concurrent_gpus = serializers.FloatField(help_text="GPUs of admitted jobs at once.")
    mean_gpu_utilization = serializers.FloatField(allow_null=True)
    peak_memory_mib = serializers.FloatField(allow_null=True)
    flavors = FlavorProfileOutput(many=True)


class ShowbackQueryInput(StrictInputSerializer):
    month = serializers.RegexField(
        r"^[0-9]{4}-[0-9]{2}$", required=False, help_text="YYYY-MM; default the current month."
    )
    tenant = serializers.CharField(
        required=False, max_length=DNS1123_LABEL_MAX, help_text="One tenant's slug."
    )
    by = serializers.ChoiceField(
        choices=["person", "namespace"],
        required=False,
        help_text="With tenant: also that tenant's GPU-hours and cost per person or namespace.",
    )

    def validate(self, attrs: dict[str, object]) -> dict[str, object]:
        if "by" in attrs and "tenant" not in attrs:
            raise serializers.ValidationError({"by": ["give a tenant to break down."]})
        return attrs


class BreakdownQueryInput(StrictInputSerializer):
    range = serializers.ChoiceField(
        choices=["24h", "7d", "30d"], required=False, help_text="A range ending now; default 7d."
    )
    start = BoundedDateTimeField(required=False, help_text="ISO 8601 (a custom range).")
    end = BoundedDateTimeField(required=False, help_text="ISO 8601; default now.")
    month = serializers.RegexField(
        r"^[0-9]{4}-[0-9]{2}$",
        required=False,
        help_text="YYYY-MM: showback's month (hourly), instead of a range.",
    )
    cluster = serializers.CharField(required=False, max_length=DNS1123_LABEL_MAX)
    flavor = serializers.CharField(required=False, max_length=DNS1123_LABEL_MAX)
    person = serializers.CharField(
        required=False, max_length=253, help_text="A submitter: adds that person's workloads."
    )

    def validate(self, attrs: dict[str, object]) -> dict[str, object]:
        if "month" in attrs:
            for name in ("range", "start", "end"):
                if name in attrs:
                    raise serializers.ValidationError(
                        {name: [f"give either month or {name}, not both."]}
                    )
        return attrs


class BreakdownFlavorOutput(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    gpu_hours = serializers.FloatField()
    unit_hours = serializers.FloatField(help_text="GPU-hours x the flavor's weight.")


class BreakdownPartOutput(serializers.Serializer):
    key = serializers.CharField(
        allow_blank=True, help_text="The person or namespace; empty for the unattributed rest."
    )
    unattributed = serializers.BooleanField()
    gpu_hours = serializers.FloatField()
    unit_hours = serializers.FloatField()
    utilization = serializers.FloatField(
        allow_null=True, help_text="%: each hour's busiest GPU, mean (null: not reported)."
    )
    workloads = serializers.IntegerField()
    flavors = BreakdownFlavorOutput(many=True)


class BreakdownWorkloadOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    cluster = serializers.CharField()
    submitter = serializers.CharField(allow_blank=True)
    state = serializers.CharField()
    gpu_hours = serializers.FloatField()
    unit_hours = serializers.FloatField()
    utilization = serializers.FloatField(allow_null=True)
    flavors = BreakdownFlavorOutput(many=True)


class BreakdownOutput(serializers.Serializer):
    tenant = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    resolution_s = serializers.IntegerField(help_text="The buckets the GPU-hours are read from.")
    gpu_hours = serializers.FloatField(help_text="The tenant's figure: the parts add up to it.")
    unit_hours = serializers.FloatField()
    totals = BreakdownFlavorOutput(many=True)
    people = BreakdownPartOutput(many=True)
    namespaces = BreakdownPartOutput(many=True)
    workloads = BreakdownWorkloadOutput(
        many=True, help_text="The person's workloads, with ``person`` only."
    )


class ShowbackPartOutput(serializers.Serializer):
    key = serializers.CharField(allow_blank=True, help_text="Empty: the unattributed rest.")
    unattributed = serializers.BooleanField()
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    gpu_hours = serializers.FloatField()
    unit_hours = serializers.FloatField()
    price = serializers.DecimalField(max_digits=12, decimal_places=4, allow_null=True)
    currency = serializers.CharField(allow_blank=True)
    cost = serializers.DecimalField(
        max_digits=18,
        decimal_places=2,
        allow_null=True,
        help_text="The row's cost shared out to the cent: the parts add up to it.",
    )


class ShowbackRowOutput(serializers.Serializer):
    tenant = serializers.CharField()
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    gpu_hours = serializers.FloatField()
    unit_hours = serializers.FloatField(help_text="GPU-hours x the flavor's weight.")
    price = serializers.DecimalField(
        max_digits=12, decimal_places=4, allow_null=True, help_text="Per flavor-hour; null: none."
    )
    currency = serializers.CharField(allow_blank=True)
    cost = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True)


class ShowbackTotalOutput(serializers.Serializer):
    tenant = serializers.CharField()
    currency = serializers.CharField(allow_blank=True)
    gpu_hours = serializers.FloatField()
    unit_hours = serializers.FloatField()
    cost = serializers.DecimalField(max_digits=18, decimal_places=2)


class ShowbackOutput(serializers.Serializer):
    month = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    rows = ShowbackRowOutput(many=True)
    totals = ShowbackTotalOutput(many=True)
    parts = ShowbackPartOutput(
        many=True, required=False, help_text="With by: per person or namespace and flavor."
    )


class FlavorPriceInput(StrictInputSerializer):
    cluster = serializers.CharField(max_length=DNS1123_LABEL_MAX)
    flavor = serializers.CharField(max_length=DNS1123_LABEL_MAX)
    price = serializers.DecimalField(max_digits=12, decimal_places=4, min_value=0)
    currency = serializers.RegexField(r"^[A-Z]{3}$", max_length=CURRENCY_MAX, default="EUR")
    valid_from = serializers.DateField()


class FlavorPriceOutput(serializers.Serializer):
    id = serializers.IntegerField()
    cluster = serializers.CharField(source="flavor.cluster.name")
    flavor = serializers.CharField(source="flavor.name")
    price = serializers.DecimalField(max_digits=12, decimal_places=4)
    currency = serializers.CharField()
    valid_from = serializers.DateField()


class ConsoleQueryInput(serializers.Serializer):
    """The admins' tenants table's query (documentation: ``selectors.console_table`` checks
    it, naming the parameter and its choices)."""

    range = serializers.ChoiceField(
        required=False,
        choices=["7d", "30d"],
        help_text="Utilisation period: the whole days (UTC) before today; 7d.",
    )
    department = serializers.CharField(required=False, help_text="A department's slug.")
    cluster = serializers.CharField(required=False, help_text="A cluster's name.")
    flavor = serializers.CharField(required=False, help_text="A GPU flavor's name.")
    q = serializers.CharField(required=False, help_text="Text in the slug or the name.")
    sort = serializers.CharField(
        required=False,
        help_text="name, slug, department, guaranteed, limit, allocated, borrowed, lent, "
        "utilization, pending or requests; '-' first for descending. Default name.",
    )
    page = serializers.IntegerField(required=False, min_value=1)
    page_size = serializers.ChoiceField(required=False, choices=[25, 50, 100, 200])
    download = serializers.ChoiceField(
        required=False, choices=["csv"], help_text="csv: every matching row as a CSV file."
    )


class ConsoleFlavorOutput(serializers.Serializer):
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    resource = serializers.CharField()
    weight = serializers.FloatField(help_text="Normalised GPU units per GPU of the flavor.")
    guaranteed = serializers.FloatField(help_text="GPUs (or MIG instances) of the flavor.")
    limit = serializers.FloatField()
    lending_limit = serializers.FloatField(allow_null=True)
    allocated = serializers.FloatField(allow_null=True, help_text="Kueue's use now.")
    borrowed = serializers.FloatField(allow_null=True)
    lent = serializers.FloatField()


class ConsoleRowOutput(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["department", "team", "tenant"])
    department = serializers.CharField(help_text="Its department's slug; empty for none.")
    teams = serializers.IntegerField(help_text="A department's teams.")
    guaranteed_gpus = serializers.FloatField()
    limit_gpus = serializers.FloatField()
    allocated_gpus = serializers.FloatField(allow_null=True)
    borrowed_gpus = serializers.FloatField(allow_null=True)
    lent_gpus = serializers.FloatField()
    gpu_utilization_pct = serializers.FloatField(allow_null=True)
    pending_workloads = serializers.IntegerField()
    open_requests = serializers.IntegerField()
    flavors = ConsoleFlavorOutput(many=True)


class ConsoleTotalsOutput(serializers.Serializer):
    guaranteed = serializers.FloatField()
    limit = serializers.FloatField()
    allocated = serializers.FloatField(allow_null=True)
    borrowed = serializers.FloatField(allow_null=True)
    lent = serializers.FloatField()
    utilization = serializers.FloatField(allow_null=True)
    pending = serializers.IntegerField()
    requests = serializers.IntegerField()


class ConsoleTableOutput(serializers.Serializer):
    start = serializers.DateTimeField(help_text="The utilisation's period.")
    end = serializers.DateTimeField()
    count = serializers.IntegerField(help_text="Tenants matching the filters.")
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    page_size = serializers.IntegerField()
    sort = serializers.CharField()
    totals = ConsoleTotalsOutput(help_text="Over every matching tenant, not only this page.")
    results = ConsoleRowOutput(many=True)
