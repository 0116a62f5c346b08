"""Change: quota change requests, their items, approvers' decisions, the approval policy."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from approvals.choices import DecisionKind, RequestStatus
from quotas.models import (
    QUANTITY_DIGITS,
    QUANTITY_PLACES,
    Cluster,
    ResourceFlavor,
    TierTemplate,
)
from tenants.choices import AuditSource, IsolationLevel
from tenants.models import Tenant


def _quantity(**kwargs: object) -> models.DecimalField:
    return models.DecimalField(
        max_digits=QUANTITY_DIGITS,
        decimal_places=QUANTITY_PLACES,
        **kwargs,  # type: ignore[arg-type]
    )


class QuotaChangeRequest(models.Model):
    """A lead's (or an admin's) ask to change a tenant's quotas on one cluster. Listed items
    replace the same (flavor, resource) lines of the quota set; scheduling and storage fields
    left empty stay as they are."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quota_requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="quota_requests")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="quota_requests", help_text="Empty for requests the system files.",
    )  # fmt: skip
    reason = models.TextField()
    status = models.CharField(
        max_length=20, choices=RequestStatus.choices, default=RequestStatus.DRAFT, db_index=True
    )
    source = models.CharField(max_length=10, choices=AuditSource.choices, default=AuditSource.API)
    # The quota set's generation the request was last validated against; a newer approved
    # change to the tenant makes it stale (needs_revalidation).
    base_generation = models.PositiveBigIntegerField(default=0)
    needs_revalidation = models.BooleanField(default=False)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    # The quota set generation its approval wrote. Whether the cluster has it is the push's
    # record (``quotas.TenantSync.applied_generation``, the generation the cluster observed).
    approved_generation = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The quota set generation its approval wrote."
    )
    failure_message = models.TextField(blank=True)
    tier = models.ForeignKey(
        TierTemplate, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="A tier change (small -> medium): the quota set takes this tier when applied.",
    )  # fmt: skip
    # R23: the tenant's isolation level once applied; empty: unchanged. A tenant attribute,
    # so it holds for every cluster: the tenant's quotas everywhere must fit it.
    isolation_level = models.CharField(
        max_length=20,
        choices=IsolationLevel.choices,
        blank=True,
        help_text="The tenant's new isolation level; empty leaves it as it is.",
    )
    # Tenant-wide limits (on every cluster) once applied; null: unchanged, 0: removed (the
    # platform's rule applies again, or no cap).
    max_run_time_hours = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The tenant's new maximum run time in hours; 0 removes it; empty: unchanged.",
    )
    gpu_unit_cap = _quantity(
        null=True,
        blank=True,
        help_text="The tenant's new cap on normalised GPU units over every cluster; 0 removes "
        "it; empty: unchanged.",
    )
    # R27: the tenant's new per-pod bandwidth cap (a quantity of bits per second, canonical);
    # "" withdraws the cap; null: unchanged.
    pod_bandwidth_max = models.CharField(  # noqa: DJ001 -- null (unchanged) is not "" (no cap)
        max_length=20,
        null=True,
        blank=True,
        help_text="The tenant's new cap on each pod's bandwidth (bits per second, e.g. 1G); "
        "empty text removes it; null: unchanged.",
    )
    max_running_jobs = models.PositiveIntegerField(null=True, blank=True)
    max_queued_jobs = models.PositiveIntegerField(null=True, blank=True)
    max_pods = models.PositiveIntegerField(null=True, blank=True)
    storage_bytes = _quantity(null=True, blank=True)
    max_pvcs = models.PositiveIntegerField(null=True, blank=True)
    fair_share_weight = models.PositiveIntegerField(null=True, blank=True)
    # R16: per-pod caps; R17: GPUs set apart for inference. Empty: unchanged.
    max_gpus_per_pod = models.PositiveIntegerField(null=True, blank=True)
    max_cpu_per_pod = _quantity(null=True, blank=True)
    max_memory_per_pod = _quantity(null=True, blank=True)
    inference_gpus = models.PositiveIntegerField(null=True, blank=True)
    # R15: grant (True) or withdraw (False) the production priority; empty: unchanged. A
    # tenant attribute, so it holds on every cluster.
    production_priority = models.BooleanField(
        null=True,
        blank=True,
        help_text="Grant or withdraw the production priority class; empty leaves it as it is.",
    )
    # The tenant's egress exceptions on this cluster once applied (``quotas.kube.egress``: each
    # {"namespace" or "cidr", "port", "protocol"[, "tenant"]}), replacing those in force;
    # [] removes them all; null: unchanged.
    egress_rules = models.JSONField(
        null=True,
        blank=True,
        help_text="The tenant's egress exceptions on the cluster once applied; null: unchanged.",
    )
    # A grant for a time: its lines are added to the standing quota from ``starts_at`` to
    # ``ends_at`` (``quotas.Grant``), not written in its place. Both empty: a standing change.
    starts_at = models.DateTimeField(
        null=True, blank=True, help_text="A grant for a time: when its lines are added."
    )
    ends_at = models.DateTimeField(
        null=True, blank=True, help_text="A grant for a time: when its lines are withdrawn."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "submitted_at"]),
            models.Index(fields=["tenant", "-created_at"]),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RequestStatus.values), name="request_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(reason__regex=r"^\s*$"), name="request_reason_not_blank"
            ),
            models.CheckConstraint(
                condition=Q(required_approvals__gte=1) & Q(required_approvals__lte=2),
                name="request_required_approvals_range",
            ),
            models.CheckConstraint(
                condition=Q(storage_bytes__isnull=True) | Q(storage_bytes__gte=0),
                name="request_storage_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(gpu_unit_cap__isnull=True) | Q(gpu_unit_cap__gte=0),
                name="request_gpu_unit_cap_nonnegative",
            ),
            models.CheckConstraint(
                condition=Q(starts_at__isnull=True, ends_at__isnull=True)
                | Q(starts_at__isnull=False, ends_at__gt=F("starts_at")),
                name="request_grant_window",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.tenant.slug}@{self.cluster.name} ({self.status})"


class QuotaChangeItem(models.Model):
    request = models.ForeignKey(QuotaChangeRequest, on_delete=models.CASCADE, related_name="items")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="+")
    resource = models.CharField(max_length=100)
    guaranteed = _quantity()
    limit = _quantity()
    lending_limit = _quantity(null=True, blank=True)
    # The line in force when the request was approved (0 where the tenant had none), kept so
    # the request shows what it changed ("6 -> 8") after the quota in force moved on. Null
    # until approval, and for requests approved before these were kept.
    guaranteed_before = _quantity(null=True, blank=True)
    limit_before = _quantity(null=True, blank=True)

    class Meta:
        ordering = ["flavor__name", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "flavor", "resource"], name="request_item_unique"
            ),
            models.CheckConstraint(
                condition=Q(guaranteed__gte=0) & Q(limit__gte=F("guaranteed")),
                name="request_item_guaranteed_lte_limit",
            ),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True)
                | (Q(lending_limit__gte=0) & Q(lending_limit__lte=F("guaranteed"))),
                name="request_item_lending_limit_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor.name} {self.resource}"


class ApprovalDecision(models.Model):
    request = models.ForeignKey(
        QuotaChangeRequest, on_delete=models.CASCADE, related_name="decisions"
    )
    approver = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="approval_decisions"
    )
    decision = models.CharField(max_length=10, choices=DecisionKind.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "approver"], name="decision_one_per_approver"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.approver} {self.decision} #{self.request_id}"


class ApprovalPolicy(models.Model):
    """When one approval is enough and when two distinct approvers are needed; one row."""

    two_approvers_above_gpu_units = models.DecimalField(
        max_digits=10, decimal_places=3, default=Decimal("8"),
        help_text="An increase of more normalised GPU units than this needs two approvers.",
    )  # fmt: skip
    two_approvers_above_capacity_fraction = models.DecimalField(
        max_digits=4, decimal_places=3, default=Decimal("0.25"),
        help_text="An increase of more than this fraction of a flavor's capacity needs two.",
    )  # fmt: skip
    pending_expires_after_days = models.PositiveSmallIntegerField(
        default=14, help_text="A request pending longer than this expires."
    )
    grant_max_days = models.PositiveSmallIntegerField(
        default=90,
        db_default=90,
        validators=[MinValueValidator(1)],
        help_text="The longest window a grant for a time may ask for, in days.",
    )
    grant_end_notice_days = models.PositiveSmallIntegerField(
        default=3,
        db_default=3,
        help_text="The tenant's leads are told this many days before a grant ends.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "approval policy"
        constraints = [
            models.CheckConstraint(
                condition=Q(two_approvers_above_gpu_units__gte=0)
                & Q(two_approvers_above_capacity_fraction__gte=0)
                & Q(two_approvers_above_capacity_fraction__lte=1),
                name="policy_thresholds_range",
            ),
            models.CheckConstraint(
                condition=Q(pending_expires_after_days__gte=1), name="policy_expiry_positive"
            ),
        ]

    def __str__(self) -> str:
        return "Approval policy"
