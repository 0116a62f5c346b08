"""Forms of the portal's pages. They check the shape of what a browser sends (a number is a
number, a reason is there); the services check the rules (capacity, caps, guaranteed <= limit)
and name the fields that break them, which the views put back next to these forms' fields."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from django import forms

from quotas import timeslicing
from quotas.kube import job_caps
from quotas.quantity import QuantityError, format_quantity, parse_resource_amount, to_display
from quotas.selectors import EffectiveQuota, EffectiveQuotaSet, FlavorAllocation
from quotas.services import QuotaItem
from tenants.choices import IsolationLevel

AMOUNT_FIELDS = ("guaranteed", "limit", "lending_limit")
SCHEDULING_COUNT_FIELDS = (
    "max_running_jobs", "max_queued_jobs", "max_pods", "max_pvcs", "fair_share_weight",
)  # fmt: skip
STORAGE_RESOURCE_NAME = "storage"
# R16 per-pod caps (cores and bytes typed as quantities) and the R17 inference split.
POD_CAP_QUANTITIES = {"max_cpu_per_pod": "cpu", "max_memory_per_pod": "memory"}
POD_FIELDS = ("max_gpus_per_pod", *POD_CAP_QUANTITIES, "inference_gpus")
PRODUCTION_CHOICES = [("", "Unchanged"), ("grant", "Grant"), ("withdraw", "Withdraw")]
POSITIVE_INTEGER_MAX = 2**31 - 1  # PositiveIntegerField's range on every database
REASON_REQUIRED = "a reason is required: say why the team needs it"


@dataclass(frozen=True)
class QuotaRow:
    """One line of the request form: a flavor x resource the cluster has, its capacity and
    the most one tenant's limit may be, and the tenant's quota in force on it (if any)."""

    allocation: FlavorAllocation
    elastic_cap: Decimal
    current: EffectiveQuota | None

    @property
    def flavor_name(self) -> str:
        return self.allocation.flavor.name

    @property
    def resource(self) -> str:
        return self.allocation.resource

    def initial(self, item: QuotaItem | None = None) -> dict[str, str]:
        """Form values, as Kubernetes quantities, of ``item`` or else of the quota in force."""
        source: Any = item or self.current
        if source is None:
            return {}
        return {
            name: format_quantity(getattr(source, name), self.resource)
            for name in AMOUNT_FIELDS
            if getattr(source, name) is not None
        }


class QuotaRowForm(forms.Form):
    """Guaranteed, limit and lending limit of one row, as typed (Kubernetes quantities)."""

    guaranteed = forms.CharField(required=False, max_length=64)
    limit = forms.CharField(required=False, max_length=64)
    lending_limit = forms.CharField(required=False, max_length=64)

    def __init__(self, *args: Any, row: QuotaRow, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.row = row
        labels = {"guaranteed": "Guaranteed", "limit": "Limit", "lending_limit": "Lending limit"}
        for name in AMOUNT_FIELDS:
            self.fields[name].widget.attrs.update(
                {
                    "aria-label": f"{labels[name]}: {row.resource} on {row.flavor_name}",
                    "autocomplete": "off",
                    "spellcheck": "false",
                    "size": 8,
                }
            )

    def raw_item(self) -> dict[str, Any] | None:
        """The item this row asks for, as ``request_items_parse`` takes it, or None when the
        row leaves the quota in force as it is (or was empty and stays empty). Only changed
        rows go into a request: an unchanged line sent along would overwrite a newer approved
        change to it with stale numbers."""
        values = {name: self.cleaned_data.get(name) or "" for name in AMOUNT_FIELDS}
        if self.row.current is None and not any(values.values()):
            return None
        if self.row.current is not None and self._unchanged(values):
            return None
        return {
            "flavor": self.row.flavor_name,
            "resource": self.row.resource,
            **{name: value or None for name, value in values.items()},
        }

    def _amount(self, value: str) -> Decimal:
        """An amount as typed: a quantity, or for time-sliced shares a percentage of a GPU."""
        replicas = self.row.allocation.shares_per_gpu
        if replicas and timeslicing.is_percent(value):
            return timeslicing.shares_from_percent(
                value, replicas=replicas, flavor=self.row.flavor_name
            )
        return parse_resource_amount(self.row.resource, value)

    def _unchanged(self, values: dict[str, str]) -> bool:
        current = self.row.current
        if current is None:
            return False
        try:
            amounts = {
                name: self._amount(value) if value else None for name, value in values.items()
            }
        except (QuantityError, ValueError):
            return False  # a typo is a change: the service names it
        return (amounts["guaranteed"], amounts["limit"], amounts["lending_limit"]) == (
            current.guaranteed,
            current.limit,
            current.lending_limit,
        )


EGRESS_PROTOCOLS = [("TCP", "TCP"), ("UDP", "UDP"), ("SCTP", "SCTP")]
EGRESS_BLANK_ROWS = 3  # blank rows under a request's egress exceptions; "Add a row" adds one


class EgressRuleForm(forms.Form):
    """One egress exception as typed: a namespace (and its tenant, where it is another
    tenant's) or a network, a port and a protocol. The shape only: the request's rules
    (``approvals.services.rules.egress_rules_check``) check it, as they do for the API."""

    namespace = forms.CharField(required=False, max_length=63, label="Namespace")
    tenant = forms.CharField(required=False, max_length=63, label="Other tenant")
    cidr = forms.CharField(required=False, max_length=50, label="Network")
    port = forms.CharField(required=False, max_length=10, label="Port")
    protocol = forms.ChoiceField(required=False, choices=EGRESS_PROTOCOLS, label="Protocol")
    remove = forms.BooleanField(required=False, label="Remove")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("namespace", "cidr", "port", "tenant"):
            self.fields[name].widget.attrs.update(
                {"autocomplete": "off", "spellcheck": "false", "size": 14 if name != "port" else 5}
            )
        self.fields["cidr"].widget.attrs["placeholder"] = "10.1.0.0/16"
        for bound in self.fields.values():
            bound.widget.attrs["aria-label"] = str(bound.label)

    @staticmethod
    def initial_from(rule: dict[str, Any]) -> dict[str, Any]:
        return {name: rule.get(name, "") for name in ("namespace", "cidr", "port", "tenant")} | {
            "protocol": rule.get("protocol") or "TCP"
        }

    def rule(self) -> dict[str, Any] | None:
        """The rule this row asks for, as the API takes it, or None for a blank or removed
        row. A port that is not a number goes as typed, for the rules to name."""
        data = self.cleaned_data
        text = {name: (data.get(name) or "").strip() for name in ("namespace", "cidr", "tenant")}
        port_text = (data.get("port") or "").strip()
        if data.get("remove") or not (any(text.values()) or port_text):
            return None
        port: int | str = int(port_text) if port_text.isdigit() else port_text
        rule: dict[str, Any] = {"port": port, "protocol": data.get("protocol") or "TCP"}
        return rule | {name: value for name, value in text.items() if value}


class QuotaRequestForm(forms.Form):
    """The rest of a request: why, and the scheduling and storage quotas. A scheduling field
    left as it is (or emptied) keeps the value in force."""

    reason = forms.CharField(
        required=False,
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why does the team need it? Required to save or submit; the approvers read it.",
    )
    max_running_jobs = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=POSITIVE_INTEGER_MAX,
        label="Max running jobs",
        help_text=job_caps.RUNNING_CAP_WORDS,
    )
    max_queued_jobs = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=POSITIVE_INTEGER_MAX,
        label="Max queued jobs",
        help_text=job_caps.QUEUED_CAP_WORDS,
    )
    max_pods = forms.IntegerField(
        required=False, min_value=0, max_value=POSITIVE_INTEGER_MAX, label="Max pods"
    )
    storage_bytes = forms.CharField(
        required=False, max_length=64, label="Storage", help_text='A quantity such as "5Ti".'
    )
    max_pvcs = forms.IntegerField(
        required=False, min_value=0, max_value=POSITIVE_INTEGER_MAX, label="Max PVCs"
    )
    isolation_level = forms.ChoiceField(
        required=False,
        choices=[("", "Unchanged"), *IsolationLevel.choices],
        label="Isolation level",
        help_text="For the whole team, on every cluster: it decides which flavors the team's "
        "quotas may be on.",
    )
    # Ranges checked by the services (approvals.services.quota_request_check): one rule for
    # the form and the API, naming the cap and the limit.
    max_gpus_per_pod = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=POSITIVE_INTEGER_MAX,
        label="GPUs per pod",
        help_text="The most GPUs one pod may take, so one job cannot take the whole quota. "
        "Empty: up to 8, or the limit if lower.",
    )
    max_cpu_per_pod = forms.CharField(
        required=False,
        max_length=64,
        label="CPU per container",
        help_text='In cores, such as "16" or "500m". Empty: the largest CPU limit.',
    )
    max_memory_per_pod = forms.CharField(
        required=False,
        max_length=64,
        label="Memory per container",
        help_text='Such as "128Gi". Empty: the largest memory limit.',
    )
    inference_gpus = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=POSITIVE_INTEGER_MAX,
        label="GPUs for inference",
        help_text="Whole GPUs kept for serving (pods at the production priority); batch work "
        "(any other priority, or none) gets the rest of the GPU limit. 0 gives batch "
        "every GPU.",
    )
    production_priority = forms.ChoiceField(
        required=False,
        choices=PRODUCTION_CHOICES,
        label="Production priority",
        help_text="Pods at the production priority preempt other work; a platform admin "
        "decides who may use it.",
    )
    # Ranges checked by the service (approvals.services.quota_request_check), one rule for all.
    max_run_time_hours = forms.IntegerField(
        required=False,
        label="Maximum run time (hours)",
        help_text="For the whole team, on every cluster: a workload running longer is "
        "suspended after a day's notice (the lead can undo it). 0 goes back to the "
        "platform's maximum; empty leaves it as it is.",
    )
    gpu_unit_cap = forms.DecimalField(
        required=False,
        max_digits=12,
        decimal_places=3,
        label="Cap over every cluster (GPU units)",
        help_text="The team's GPU limits summed over every cluster, each GPU counted by its "
        "flavor's weight in GPU units, may not pass it. 0 removes the cap; empty leaves it as "
        "it is.",
    )
    # R27: checked by the service too (a quantity from 1k to 400G); "none" withdraws the cap.
    pod_bandwidth_max = forms.CharField(
        required=False,
        max_length=40,
        label="Pod bandwidth (bits per second)",
        help_text="The most bits per second each pod may send and receive, e.g. 1G (or 500M). "
        "Pods must then say what they need in the annotations kubernetes.io/ingress-bandwidth "
        "and kubernetes.io/egress-bandwidth. none removes the cap; empty leaves it as it is.",
    )
    fair_share_weight = forms.IntegerField(
        required=False,
        label="Fair-share weight",
        help_text="1 to 1000; a higher weight gets more of the unused quota. Default 1.",
    )

    def __init__(
        self,
        *args: Any,
        quota_set: EffectiveQuotaSet | None,
        reason_required: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.quota_set = quota_set
        self.reason_required = reason_required
        self.fields["storage_bytes"].widget.attrs.update({"size": 8, "spellcheck": "false"})
        for name in SCHEDULING_COUNT_FIELDS:
            self.fields[name].widget.attrs.update({"min": 0, "class": "count"})
        self.fields["fair_share_weight"].widget.attrs.update({"min": 1, "max": 1000})

    @staticmethod
    def initial_from(source: Any) -> dict[str, Any]:
        """Initial scheduling values of a quota set or a tier (storage as a quantity)."""
        if source is None:
            return {}
        initial: dict[str, Any] = {
            name: getattr(source, name, None) for name in SCHEDULING_COUNT_FIELDS
        }
        if source.storage_bytes is not None:
            initial["storage_bytes"] = format_quantity(source.storage_bytes, STORAGE_RESOURCE_NAME)
        for name in ("max_gpus_per_pod", "inference_gpus"):
            initial[name] = getattr(source, name, None)
        for name, resource in POD_CAP_QUANTITIES.items():
            value = getattr(source, name, None)
            if value is not None:
                initial[name] = format_quantity(value, resource)
        return initial

    def clean_reason(self) -> str:
        reason: str = self.cleaned_data["reason"]
        if self.reason_required and not reason:
            raise forms.ValidationError(REASON_REQUIRED, code="required")
        return reason

    def clean_storage_bytes(self) -> Decimal | None:
        text: str = self.cleaned_data["storage_bytes"]
        if not text:
            return None
        try:
            return parse_resource_amount(STORAGE_RESOURCE_NAME, text)
        except QuantityError as exc:
            raise forms.ValidationError(str(exc), code="quantity") from exc

    def _quantity(self, name: str) -> Decimal | None:
        text: str = self.cleaned_data[name]
        if not text:
            return None
        try:
            return parse_resource_amount(POD_CAP_QUANTITIES[name], text)
        except QuantityError as exc:
            raise forms.ValidationError(str(exc), code="quantity") from exc

    def clean_max_cpu_per_pod(self) -> Decimal | None:
        return self._quantity("max_cpu_per_pod")

    def clean_max_memory_per_pod(self) -> Decimal | None:
        return self._quantity("max_memory_per_pod")

    def production_priority_change(self) -> bool | None:
        """True to grant, False to withdraw, None: unchanged."""
        chosen = self.cleaned_data.get("production_priority") if self.is_bound else ""
        return {"grant": True, "withdraw": False}.get(chosen or "")

    def pod_fields(self) -> list[tuple[forms.BoundField, str]]:
        """The per-pod caps, each with the value in force as the page shows it."""
        shown = []
        for name in ("max_gpus_per_pod", *POD_CAP_QUANTITIES):
            value = getattr(self.quota_set, name, None)
            if value is None:
                text = "derived from the limits"
            elif name in POD_CAP_QUANTITIES:
                text = to_display(value, POD_CAP_QUANTITIES[name])
            else:
                text = f"{value} GPU{'' if value == 1 else 's'}"
            shown.append((self[name], text))
        return shown

    def inference_in_force(self) -> str:
        value = getattr(self.quota_set, "inference_gpus", None)
        if value is None:
            return "no split"
        return f"{value} GPU{'' if value == 1 else 's'}"

    def scheduling_fields(self) -> list[tuple[forms.BoundField, str]]:
        """Each scheduling field with the value in force, as the page shows it."""
        shown = []
        for name in (
            *SCHEDULING_COUNT_FIELDS[:3],
            "storage_bytes",
            "max_pvcs",
            "fair_share_weight",
        ):
            value = getattr(self.quota_set, name, None)
            if value is not None and name == "storage_bytes":
                value = format_quantity(value, STORAGE_RESOURCE_NAME)
            shown.append((self[name], "not set" if value is None else str(value)))
        return shown

    def tenant_changes(self) -> dict[str, Any]:
        """The tenant-wide limits the form asks to change (empty ones left out)."""
        changes = {
            name: value
            for name in ("max_run_time_hours", "gpu_unit_cap")
            if (value := self.cleaned_data.get(name)) is not None
        }
        bandwidth = (self.cleaned_data.get("pod_bandwidth_max") or "").strip()
        if bandwidth:
            changes["pod_bandwidth_max"] = "" if bandwidth.lower() == "none" else bandwidth
        return changes

    def scheduling_changes(self) -> dict[str, Any]:
        """The scheduling fields that differ from the quota set in force."""
        changes = {}
        for name in (*SCHEDULING_COUNT_FIELDS, "storage_bytes", *POD_FIELDS):
            value = self.cleaned_data.get(name)
            if value is not None and value != getattr(self.quota_set, name, None):
                changes[name] = value
        return changes


def _choices(form: forms.Form, name: str, choices: list[tuple[str, str]]) -> None:
    cast(forms.ChoiceField, form.fields[name]).choices = choices


class RequestListFilterForm(forms.Form):
    """Filters of the list of requests."""

    status = forms.ChoiceField(required=False)
    tenant = forms.CharField(required=False, max_length=63)
    mine = forms.BooleanField(required=False, label="Only mine")

    def __init__(self, *args: Any, statuses: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _choices(self, "status", [("", "Any status"), *statuses])


class ApprovalQueueFilterForm(forms.Form):
    """Filters of the approvals queue: cluster, tenant, and size (the increase in normalised
    GPU units)."""

    SIZE_NONE = "none"
    SIZE_SMALL = "small"
    SIZE_LARGE = "large"

    cluster = forms.ChoiceField(required=False)
    tenant = forms.ChoiceField(required=False)
    size = forms.ChoiceField(required=False)

    def __init__(
        self,
        *args: Any,
        clusters: list[str],
        tenants: list[str],
        threshold: Decimal,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.threshold = threshold
        shown = f"{threshold.normalize():f}"
        _choices(self, "cluster", [("", "All clusters"), *((c, c) for c in clusters)])
        _choices(self, "tenant", [("", "All tenants"), *((t, t) for t in tenants)])
        _choices(
            self,
            "size",
            [
                ("", "Any size"),
                (self.SIZE_NONE, "No GPU increase"),
                (self.SIZE_SMALL, f"Up to {shown} GPU units"),
                (self.SIZE_LARGE, f"More than {shown} GPU units"),
            ],
        )

    def size_matches(self, increase: Decimal) -> bool:
        self.is_valid()
        size = self.cleaned_data.get("size", "")
        if size == self.SIZE_NONE:
            return increase <= 0
        if size == self.SIZE_SMALL:
            return Decimal(0) < increase <= self.threshold
        if size == self.SIZE_LARGE:
            return increase > self.threshold
        return True


class DecisionForm(forms.Form):
    comment = forms.CharField(
        required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 2, "cols": 40})
    )
    next = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)


class GrantRequestForm(forms.Form):
    """A grant for a time, as a lead asks for it on the team's grants page: one line (a
    cluster's flavor and resource), what it adds, the window and why. The services check the
    rules (capacity over the window, the policy's longest window)."""

    line = forms.ChoiceField(label="Cluster, flavor and resource")
    guaranteed = forms.CharField(
        max_length=64, label="Guaranteed added", help_text='e.g. "2", or "64Gi" for memory.'
    )
    limit = forms.CharField(max_length=64, label="Limit added")
    starts_at = forms.DateTimeField(
        required=False,
        label="From (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        help_text="Empty: as soon as it is approved.",
    )
    ends_at = forms.DateTimeField(
        label="Until (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    reason = forms.CharField(
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 60}),
        help_text="Why does the team need it for this while? The approvers read it.",
    )

    def __init__(self, *args: Any, lines: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _choices(self, "line", lines)

    def chosen_line(self) -> tuple[str, str, str]:
        """(cluster, flavor, resource) of the chosen line."""
        cluster, flavor, resource = self.cleaned_data["line"].split("|", 2)
        return cluster, flavor, resource

    # Where a service's error on a field of the request belongs on this form.
    FIELDS = {
        "items[0].guaranteed": "guaranteed",
        "items[0].limit": "limit",
        "items[0].resource": "line",
        "items[0].flavor": "line",
        "items": "line",
        "ends_at": "ends_at",
        "starts_at": "starts_at",
        "reason": "reason",
    }

    def show_errors(self, fields: dict[str, list[str]]) -> None:
        for name, messages in fields.items():
            for message in messages:
                self.add_error(self.FIELDS.get(name), message)
