"""Input and output of /api/v1/quota-requests/.

Inputs check shape only; the services check the rules. Outputs are written out by hand
(``to_representation``), like the tenants' and quotas': the declared fields describe the same
shape for the OpenAPI document, and a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from rest_framework import serializers

from approvals.choices import DecisionKind, RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.selectors import approvals_counted
from approvals.services import DiffLine, RequestCheck
from core.api.serializers import DeprecatedIntegerField, StrictInputSerializer, utc_iso
from quotas.api.serializers import PushOutput, QuantityInput, UnitsField, push_representation
from quotas.choices import CPU_RESOURCE, MEMORY_RESOURCE, STORAGE_RESOURCE, GrantState
from quotas.kube import job_caps
from quotas.models import Grant, TenantSync
from quotas.quantity import QuantityError, format_quantity, parse_resource_amount
from quotas.sync import DryRun
from tenants.choices import AuditSource, IsolationLevel
from tenants.models import AuditEvent

MAX_ITEMS = 100
MAX_TEXT = 4000
MAX_COUNT = 2**31 - 1  # the database's positive integer columns
UNITS_PLACES = Decimal("0.001")

# --- input ------------------------------------------------------------------------------------


class QuotaRequestItemInput(StrictInputSerializer):
    flavor = serializers.CharField(max_length=100, help_text="Flavor name on the cluster.")
    resource = serializers.CharField(
        max_length=100, help_text='As Kubernetes spells it: "nvidia.com/gpu", "cpu", "memory".'
    )
    guaranteed = QuantityInput(help_text="New guaranteed amount (Kueue nominalQuota).")
    limit = QuantityInput(help_text="New limit (nominal + borrowingLimit).")
    lending_limit = QuantityInput(required=False, allow_null=True)


class EgressRuleInput(StrictInputSerializer):
    """One egress exception: checked in full by the request's rules (``quotas.kube.egress``)."""

    namespace = serializers.CharField(
        required=False, allow_blank=True, max_length=63, help_text="Pods of this namespace, or"
    )
    cidr = serializers.CharField(
        required=False, allow_blank=True, max_length=50, help_text="this network (10.1.0.0/16)."
    )
    port = serializers.IntegerField(min_value=1, max_value=65535)
    protocol = serializers.ChoiceField(choices=["TCP", "UDP", "SCTP"], default="TCP")
    tenant = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=63,
        help_text="The tenant that owns ``namespace``, where it is another tenant's.",
    )


class QuotaRequestInput(StrictInputSerializer):
    """A change request. Listed items replace the same (flavor, resource) lines of the quota
    set in force; scheduling and storage fields left out or null stay as they are."""

    tenant = serializers.CharField(max_length=200, help_text="Tenant slug.")
    cluster = serializers.CharField(max_length=200, help_text="Cluster name.")
    reason = serializers.CharField(
        max_length=MAX_TEXT, allow_blank=True, trim_whitespace=False, help_text="Required."
    )
    # many=True passes max_length on to the ListSerializer; the stubs do not know it.
    items = QuotaRequestItemInput(many=True, required=False, max_length=MAX_ITEMS)  # type: ignore[call-arg]
    max_running_jobs = serializers.IntegerField(
        min_value=0,
        max_value=MAX_COUNT,
        required=False,
        allow_null=True,
        help_text=job_caps.RUNNING_CAP_WORDS,
    )
    max_queued_jobs = serializers.IntegerField(
        min_value=0,
        max_value=MAX_COUNT,
        required=False,
        allow_null=True,
        help_text=job_caps.QUEUED_CAP_WORDS,
    )
    max_pods = serializers.IntegerField(
        min_value=0, max_value=MAX_COUNT, required=False, allow_null=True
    )
    storage = QuantityInput(
        source="storage_bytes", required=False, allow_null=True, help_text='e.g. "2Ti".'
    )
    max_pvcs = serializers.IntegerField(
        min_value=0, max_value=MAX_COUNT, required=False, allow_null=True
    )
    fair_share_weight = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="Kueue fair-sharing weight, 1 to 1000 (a department's applies to its cohort).",
    )
    max_gpus_per_pod = serializers.IntegerField(
        min_value=1,
        max_value=MAX_COUNT,
        required=False,
        allow_null=True,
        help_text="Most GPUs one pod may take (the namespaces' LimitRange); at most the largest "
        "GPU limit on one flavor.",
    )
    max_cpu_per_pod = QuantityInput(
        required=False,
        allow_null=True,
        help_text='Most CPU one container may take, e.g. "16" or "500m"; at most the largest '
        "CPU limit on one flavor.",
    )
    max_memory_per_pod = QuantityInput(
        required=False,
        allow_null=True,
        help_text='Most memory one container may take, e.g. "128Gi"; at most the largest memory '
        "limit on one flavor.",
    )
    inference_gpus = serializers.IntegerField(
        min_value=0,
        max_value=MAX_COUNT,
        required=False,
        allow_null=True,
        help_text="Whole GPUs set apart for inference (pods at the production priority class); "
        "batch (every other class, or none) gets the rest of the GPU limit. 0 puts every "
        "GPU on batch. Needs the production priority.",
    )
    production_priority = serializers.BooleanField(
        required=False,
        allow_null=True,
        help_text="true: ask that the tenant's pods may use the production priority class "
        "(which preempts other work); false: withdraw it. A platform admin decides, as for "
        "every request. Left out or null: unchanged.",
    )
    submit = serializers.BooleanField(
        default=False, help_text="File it as pending at once instead of as a draft."
    )
    tier = serializers.CharField(
        max_length=100,
        required=False,
        allow_null=True,
        help_text="A tier change (small -> medium): the quota set takes this tier when the "
        "request is applied. With no `items`, the items and the scheduling and storage quotas "
        "are the tier template's, on the cluster's first whole-GPU flavor.",
    )
    isolation_level = serializers.ChoiceField(
        choices=IsolationLevel.choices,
        required=False,
        allow_null=True,
        help_text="A new isolation level for the tenant (on every cluster): it decides which "
        "flavors its quotas may be on. Left out or null: unchanged.",
    )
    max_run_time_hours = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="The tenant's own maximum run time in hours (on every cluster): a workload "
        "running longer is suspended after the rule's grace. 0 goes back to the platform's "
        "rule; left out or null: unchanged.",
    )
    gpu_unit_cap = serializers.DecimalField(
        max_digits=12,
        decimal_places=3,
        required=False,
        allow_null=True,
        help_text="A cap on the tenant's GPU limits summed over every cluster, in normalised GPU "
        "units (each limit times its GPU model's weight). 0 removes it; left out or null: "
        "unchanged.",
    )
    pod_bandwidth_max = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=40,
        trim_whitespace=True,
        help_text="The most bits per second each of the tenant's pods may send and receive, "
        "a Kubernetes quantity from 1k to 400G (e.g. 1G), on every cluster; pods must then carry "
        "the kubernetes.io/ingress-bandwidth and egress-bandwidth annotations at most that. "
        '"" removes the cap; left out or null: unchanged.',
    )
    egress_rules = EgressRuleInput(
        many=True,
        required=False,
        allow_null=True,
        help_text="Egress exceptions on this cluster once approved, replacing those in force "
        "([] removes them all; left out or null: unchanged): each a namespace or a cidr, a "
        "port and a protocol. A namespace of another tenant must name that tenant.",
    )
    starts_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="A grant for a time: when its items are added on top of the standing quota "
        "(left out, null or past: when approved). The items are then what it adds, not the "
        "lines in place of the standing ones, and nothing else may change with it.",
    )
    ends_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="A grant for a time: when its items are withdrawn again (after the start, in "
        "the future, within the policy's longest window).",
    )
    replaces = serializers.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        required=False,
        allow_null=True,
        help_text="The id of a draft of the same tenant and cluster (a suggested change, say) "
        "that this request supersedes: it is cancelled when this one is filed (409 when it was "
        "submitted or cancelled meanwhile).",
    )

    def validate_max_cpu_per_pod(self, value: str | None) -> Decimal | None:
        return _parsed(CPU_RESOURCE, value)

    def validate_max_memory_per_pod(self, value: str | None) -> Decimal | None:
        return _parsed(MEMORY_RESOURCE, value)

    def validate_storage(self, value: str | None) -> Decimal | None:
        if value is None:
            return None
        try:
            return parse_resource_amount(STORAGE_RESOURCE, value)
        except QuantityError as exc:
            raise serializers.ValidationError(str(exc)) from exc


def _parsed(resource: str, value: str | None) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_resource_amount(resource, value)
    except QuantityError as exc:
        raise serializers.ValidationError(str(exc)) from exc


class DecisionInput(StrictInputSerializer):
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=MAX_TEXT
    )


class NoInput(StrictInputSerializer):
    """A transition that takes no fields (``{}`` or no body); anything else is refused."""


# --- output -----------------------------------------------------------------------------------


def _quantity(value: Decimal | None, resource: str) -> str | None:
    return None if value is None else format_quantity(value, resource)


def _units(value: Decimal) -> float:
    return float(value.quantize(UNITS_PLACES))


def _time(value: Any) -> str | None:
    return None if value is None else utc_iso(value)


class QuotaRequestItemOutput(serializers.Serializer):
    flavor = serializers.CharField()
    resource = serializers.CharField()
    guaranteed = serializers.CharField(help_text="A Kubernetes quantity.")
    limit = serializers.CharField(help_text="A Kubernetes quantity.")
    lending_limit = serializers.CharField(allow_null=True)


class DecisionOutput(serializers.Serializer):
    approver = serializers.CharField(help_text="Username.")
    decision = serializers.ChoiceField(choices=DecisionKind.choices)
    comment = serializers.CharField()
    created_at = serializers.DateTimeField()


class QuotaRequestOutput(serializers.Serializer):
    """A change request, as lists show it."""

    id = serializers.IntegerField()
    tenant = serializers.CharField(help_text="Tenant slug.")
    cluster = serializers.CharField(help_text="Cluster name.")
    status = serializers.ChoiceField(choices=RequestStatus.choices)
    requester = serializers.CharField(
        allow_null=True, help_text="Username; null for requests the system filed."
    )
    # "source" shadows Field.source for mypy only: DRF's metaclass pops declared fields.
    source = serializers.ChoiceField(choices=AuditSource.choices)  # type: ignore[assignment]
    reason = serializers.CharField()
    required_approvals = serializers.IntegerField()
    approvals = serializers.IntegerField(help_text="Approvals recorded so far.")
    needs_revalidation = serializers.BooleanField(
        help_text="A newer approved change to the tenant's quotas on this cluster came after "
        "this request was checked: read its diff again before approving."
    )
    base_generation = serializers.IntegerField(
        help_text="The quota set generation it was last checked against."
    )
    approved_generation = serializers.IntegerField(
        allow_null=True,
        help_text="The quota set generation its approval wrote (null until approved). Whether "
        "the cluster has it: the detail's push.observed_generation >= this.",
    )
    # API v1's first name for approved_generation (what the approval wrote, not what the
    # cluster has, which is push.observed_generation): kept, same value, deprecated.
    applied_generation = DeprecatedIntegerField(
        allow_null=True,
        help_text="Deprecated alias of approved_generation (the same value), kept for API v1 "
        "clients: it is what the approval wrote, not what the cluster applied.",
    )
    failure_message = serializers.CharField()
    tier = serializers.CharField(allow_null=True, help_text="The tier it moves the tenant to.")
    isolation_level = serializers.ChoiceField(
        choices=IsolationLevel.choices,
        allow_null=True,
        help_text="The isolation level it moves the tenant to; null: unchanged.",
    )
    max_run_time_hours = serializers.IntegerField(
        allow_null=True, help_text="The tenant's new maximum run time; 0: removed; null: unchanged."
    )
    gpu_unit_cap = serializers.CharField(
        allow_null=True,
        help_text="The tenant's new cap in normalised GPU units; 0: removed; null: unchanged.",
    )
    pod_bandwidth_max = serializers.CharField(
        allow_null=True,
        help_text='The tenant\'s new per-pod bandwidth cap (bits per second, e.g. "1G"); "": '
        "removed; null: unchanged.",
    )
    max_running_jobs = serializers.IntegerField(allow_null=True)
    max_queued_jobs = serializers.IntegerField(allow_null=True)
    max_pods = serializers.IntegerField(allow_null=True)
    storage = serializers.CharField(allow_null=True, help_text="A Kubernetes quantity.")
    max_pvcs = serializers.IntegerField(allow_null=True)
    fair_share_weight = serializers.IntegerField(allow_null=True)
    max_gpus_per_pod = serializers.IntegerField(allow_null=True)
    max_cpu_per_pod = serializers.CharField(allow_null=True, help_text="A Kubernetes quantity.")
    max_memory_per_pod = serializers.CharField(allow_null=True, help_text="A Kubernetes quantity.")
    inference_gpus = serializers.IntegerField(allow_null=True)
    production_priority = serializers.BooleanField(
        allow_null=True,
        help_text="Grants (true) or withdraws (false) the production priority; null: unchanged.",
    )
    egress_rules = serializers.ListField(
        child=serializers.DictField(),
        allow_null=True,
        help_text="The egress exceptions it sets on the cluster (namespace or cidr, port, "
        "protocol, and the tenant owning a namespace of another tenant); null: unchanged.",
    )
    starts_at = serializers.DateTimeField(
        allow_null=True, help_text="A grant for a time: when its items are added; else null."
    )
    ends_at = serializers.DateTimeField(
        allow_null=True, help_text="A grant for a time: when its items are withdrawn; else null."
    )
    items = QuotaRequestItemOutput(many=True)
    decisions = DecisionOutput(many=True)
    created_at = serializers.DateTimeField()
    submitted_at = serializers.DateTimeField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, request: QuotaChangeRequest) -> dict[str, Any]:
        decisions = list(request.decisions.all())  # prefetched by the selector
        approvals = getattr(request, "approvals", None)
        if approvals is None:
            approvals = approvals_counted(request)
        return {
            "id": request.pk,
            "tenant": request.tenant.slug,
            "cluster": request.cluster.name,
            "status": request.status,
            "requester": request.requester.get_username() if request.requester else None,
            "source": request.source,
            "reason": request.reason,
            "required_approvals": request.required_approvals,
            "approvals": approvals,
            "needs_revalidation": request.needs_revalidation,
            "base_generation": request.base_generation,
            "approved_generation": request.approved_generation,
            "applied_generation": request.approved_generation,  # deprecated alias
            "failure_message": request.failure_message,
            "tier": request.tier.name if request.tier else None,
            "isolation_level": request.isolation_level or None,
            "max_run_time_hours": request.max_run_time_hours,
            "gpu_unit_cap": _decimal(request.gpu_unit_cap),
            "pod_bandwidth_max": request.pod_bandwidth_max,
            "max_running_jobs": request.max_running_jobs,
            "max_queued_jobs": request.max_queued_jobs,
            "max_pods": request.max_pods,
            "storage": _quantity(request.storage_bytes, STORAGE_RESOURCE),
            "max_pvcs": request.max_pvcs,
            "fair_share_weight": request.fair_share_weight,
            "max_gpus_per_pod": request.max_gpus_per_pod,
            "max_cpu_per_pod": _quantity(request.max_cpu_per_pod, CPU_RESOURCE),
            "max_memory_per_pod": _quantity(request.max_memory_per_pod, MEMORY_RESOURCE),
            "inference_gpus": request.inference_gpus,
            "production_priority": request.production_priority,
            "egress_rules": request.egress_rules,
            "starts_at": _time(request.starts_at),
            "ends_at": _time(request.ends_at),
            "items": [
                {
                    "flavor": item.flavor.name,
                    "resource": item.resource,
                    "guaranteed": format_quantity(item.guaranteed, item.resource),
                    "limit": format_quantity(item.limit, item.resource),
                    "lending_limit": _quantity(item.lending_limit, item.resource),
                }
                for item in request.items.all()  # prefetched by the selector
            ],
            "decisions": [
                {
                    "approver": d.approver.get_username(),
                    "decision": d.decision,
                    "comment": d.comment,
                    "created_at": utc_iso(d.created_at),
                }
                for d in decisions
            ],
            "created_at": utc_iso(request.created_at),
            "submitted_at": _time(request.submitted_at),
            "decided_at": _time(request.decided_at),
        }


class DiffLineOutput(serializers.Serializer):
    """One item: the quota in force (before) and what the request asks (after)."""

    flavor = serializers.CharField()
    resource = serializers.CharField()
    guaranteed_before = serializers.CharField()
    guaranteed_after = serializers.CharField()
    limit_before = serializers.CharField()
    limit_after = serializers.CharField()
    gpu_units_before = UnitsField(help_text="Normalised GPU units of the limit in force.")
    gpu_units_after = UnitsField(help_text="Normalised GPU units of the requested limit.")
    changed = serializers.BooleanField()


def diff_representation(lines: Iterable[DiffLine]) -> list[dict[str, Any]]:
    return [
        {
            "flavor": d.flavor,
            "resource": d.resource,
            "guaranteed_before": format_quantity(d.guaranteed_before, d.resource),
            "guaranteed_after": format_quantity(d.guaranteed_after, d.resource),
            "limit_before": format_quantity(d.limit_before, d.resource),
            "limit_after": format_quantity(d.limit_after, d.resource),
            "gpu_units_before": _units(d.gpu_units_before),
            "gpu_units_after": _units(d.gpu_units_after),
            "changed": d.changed,
        }
        for d in lines
    ]


class TimelineEventOutput(serializers.Serializer):
    time = serializers.DateTimeField()
    actor = serializers.CharField(help_text='Username, or "system".')
    action = serializers.CharField(help_text='e.g. "quota_request.approved".')
    # "source" shadows Field.source for mypy only: DRF's metaclass pops declared fields.
    source = serializers.ChoiceField(choices=AuditSource.choices)  # type: ignore[assignment]
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class FieldChangeOutput(serializers.Serializer):
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)
    description = serializers.CharField(
        help_text='The change in words, e.g. "nvidia.com/gpu on a100-80gb: guaranteed 6 → 7".'
    )


class ObjectDiffOutput(serializers.Serializer):
    object = serializers.CharField(help_text='"Kind namespace/name".')
    change = serializers.ChoiceField(choices=["created", "changed", "deleted"])
    # "fields" shadows Serializer.fields for mypy only: DRF's metaclass pops declared fields.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=FieldChangeOutput(),
        help_text="Field path -> before and after, as Kubernetes names and writes them, and "
        "the change in words.",
    )
    descriptions = serializers.ListField(
        child=serializers.CharField(),
        help_text="What changes in the object, in words (each line once; empty when the "
        "object is created or deleted).",
    )


class DryRunOutput(serializers.Serializer):
    """What approving the request would change in the cluster."""

    objects = ObjectDiffOutput(many=True, help_text="Computed offline from the compiler.")
    server_checked = serializers.BooleanField(
        help_text="Whether the cluster's API server dry-ran the writes (dryRun=All)."
    )
    server_errors = serializers.ListField(
        child=serializers.CharField(), help_text="What the cluster would refuse."
    )
    server_message = serializers.CharField(help_text="Why the server was not asked, if not.")

    def to_representation(self, dry_run: DryRun) -> dict[str, Any]:
        return {
            "objects": [
                {
                    "object": o.object,
                    "change": o.change,
                    "fields": o.fields,
                    "descriptions": o.descriptions,
                }
                for o in dry_run.objects
            ],
            "server_checked": dry_run.server_checked,
            "server_errors": dry_run.server_errors,
            "server_message": dry_run.server_message,
        }


class WatchIndicatorOutput(serializers.Serializer):
    key = serializers.ChoiceField(
        choices=["gpu_utilization", "queue_wait", "evictions", "preemptions", "borrowing"]
    )
    name = serializers.CharField(help_text='In words, e.g. "mean GPU utilisation".')
    unit = serializers.ChoiceField(choices=["percent", "seconds", "count"])
    before = serializers.FloatField(
        allow_null=True, help_text="The week before it applied; null: nothing recorded."
    )
    after = serializers.FloatField(
        allow_null=True, help_text="Since it applied (a week at most); null: nothing recorded."
    )
    words = serializers.CharField(help_text='e.g. "mean GPU utilisation 41% → 63%".')


class WatchLineOutput(serializers.Serializer):
    flavor = serializers.CharField()
    resource = serializers.CharField()
    guaranteed = serializers.CharField(help_text="Before the change; a Kubernetes quantity.")
    limit = serializers.CharField(help_text="Before the change; a Kubernetes quantity.")


class ChangeWatchOutput(serializers.Serializer):
    """An applied change watched: the tenant's rollout indicators on the request's cluster
    over the week before it applied and the week after (as it accrues)."""

    applied_at = serializers.DateTimeField()
    before_start = serializers.DateTimeField(help_text="applied_at minus 7 days.")
    after_end = serializers.DateTimeField(
        help_text="applied_at plus 7 days, or now while that week accrues."
    )
    days_after = serializers.IntegerField(help_text="Whole days since it applied, 0 to 7.")
    days_total = serializers.IntegerField(help_text="The length of each week compared (7).")
    complete = serializers.BooleanField(help_text="The week after is over.")
    any_data = serializers.BooleanField(help_text="Anything was recorded in either week.")
    summary = serializers.CharField(help_text="The differences in words, or why there are none.")
    indicators = WatchIndicatorOutput(many=True)
    previous_items = WatchLineOutput(
        many=True,
        help_text="The quota lines the change replaced, as they were when it was approved "
        "(empty where they were not kept): what a request to go back files.",
    )
    revert_offered = serializers.BooleanField(
        help_text="Whether the caller may file that request (the tenant's leads and platform "
        "admins): POST the items to /api/v1/quota-requests/."
    )


class QuotaRequestDetailOutput(QuotaRequestOutput):
    """A change request with what it would do to the quotas in force now, and its history.
    Context: ``check`` (a ``RequestCheck`` of the stored request) and ``timeline`` (its
    audit events, oldest first)."""

    diff = DiffLineOutput(many=True)
    # "errors" shadows Serializer.errors for mypy only: DRF's metaclass pops declared fields.
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Rules it breaks against the quotas in force now (field -> reasons).",
    )
    warnings = serializers.ListField(child=serializers.CharField())
    timeline = TimelineEventOutput(many=True)
    push = PushOutput(
        allow_null=True,
        help_text="Where the tenant's quotas on the cluster stand (null before any push).",
    )
    watch = ChangeWatchOutput(
        allow_null=True,
        help_text="Once applied: mean GPU utilisation, queue wait, evictions, preemptions and "
        "borrowing before and after; null until then.",
    )

    def to_representation(self, request: QuotaChangeRequest) -> dict[str, Any]:
        check: RequestCheck = self.context["check"]
        timeline: Iterable[AuditEvent] = self.context["timeline"]
        push: TenantSync | None = self.context.get("push")
        return {
            **super().to_representation(request),
            "push": push_representation(push),
            "watch": self.context.get("watch"),
            "diff": diff_representation(check.diff),
            "errors": check.errors,
            "warnings": check.warnings,
            "timeline": [
                {
                    "time": utc_iso(event.created_at),
                    "actor": event.actor_username,
                    "action": event.action,
                    "source": event.source,
                    "before": event.before,
                    "after": event.after,
                }
                for event in timeline
            ],
        }


class QuotaRequestValidationOutput(serializers.Serializer):
    """What filing the request would answer, without storing it."""

    valid = serializers.BooleanField()
    # "errors" shadows Serializer.errors for mypy only: DRF's metaclass pops declared fields.
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text='Field -> reasons, e.g. {"items[0].limit": ["limit 12 exceeds ..."]}.',
    )
    warnings = serializers.ListField(child=serializers.CharField())
    diff = DiffLineOutput(many=True)
    required_approvals = serializers.IntegerField()

    def to_representation(self, check: RequestCheck) -> dict[str, Any]:
        return {
            "valid": not check.errors,
            "errors": check.errors,
            "warnings": check.warnings,
            "diff": diff_representation(check.diff),
            "required_approvals": check.required_approvals,
        }


def _decimal(value: Decimal | None) -> str | None:
    """A decimal as people write it (8, 2.5), or None."""
    if value is None:
        return None
    return format(value.normalize(), "f") if value else "0"


# --- grants for a time -----------------------------------------------------------------------


class GrantLineOutput(serializers.Serializer):
    flavor = serializers.CharField()
    resource = serializers.CharField()
    guaranteed = serializers.CharField(help_text="What it adds to the standing guarantee.")
    limit = serializers.CharField(help_text="What it adds to the standing limit.")


class GrantOutput(serializers.Serializer):
    """A grant for a time: lines added on top of the standing quota from ``starts_at`` to
    ``ends_at``."""

    id = serializers.IntegerField()
    tenant = serializers.CharField(help_text="Tenant slug.")
    cluster = serializers.CharField(help_text="Cluster name.")
    request = serializers.IntegerField(allow_null=True, help_text="The request that made it.")
    state = serializers.ChoiceField(
        choices=GrantState.choices,
        help_text="scheduled; active (pushed at started_generation); ending (withdrawn at "
        "ending_generation, the push not yet landed: retried); ended.",
    )
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    started_generation = serializers.IntegerField(allow_null=True)
    ending_generation = serializers.IntegerField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    lines = GrantLineOutput(many=True)

    def to_representation(self, grant: Grant) -> dict[str, Any]:
        return {
            "id": grant.pk,
            "tenant": grant.tenant.slug,
            "cluster": grant.cluster.name,
            "request": grant.request_number,
            "state": grant.state,
            "starts_at": utc_iso(grant.starts_at),
            "ends_at": utc_iso(grant.ends_at),
            "started_generation": grant.started_generation,
            "ending_generation": grant.ending_generation,
            "ended_at": _time(grant.ended_at),
            "lines": [
                {
                    "flavor": line.flavor.name,
                    "resource": line.resource,
                    "guaranteed": format_quantity(line.guaranteed, line.resource),
                    "limit": format_quantity(line.limit, line.resource),
                }
                for line in grant.lines.all()  # prefetched
            ],
        }


class GrantExtendInput(StrictInputSerializer):
    ends_at = serializers.DateTimeField(help_text="Until when the grant should last.")
    reason = serializers.CharField(
        max_length=MAX_TEXT, allow_blank=True, required=False, default="", trim_whitespace=False
    )
    submit = serializers.BooleanField(required=False, default=True)
