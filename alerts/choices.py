"""Alert rule kinds, alert states, what the portal did about an alert, webhook formats."""

from __future__ import annotations

from django.db import models


class RuleKind(models.TextChoices):
    QUOTA_WARNING = "quota_warning", "Quota use at or above a share of the limit (warn)"
    QUOTA_BLOCK = "quota_block", "Quota use at or above a share of the limit (hold new work)"
    IDLE_WORKLOAD = "idle_workload", "Workload without GPU activity or progress (suspend)"
    MAX_RUNTIME = "max_runtime", "Workload running longer than a maximum run time"
    LOW_UTILIZATION = "low_utilization", "Allocation with low GPU utilisation for a long time"


# What a rule of each kind is called on pages and in the inbox (a rule's name is a slug for
# filters and the API).
RULE_TITLES: dict[str, str] = {
    RuleKind.QUOTA_WARNING: "Quota nearly used",
    RuleKind.QUOTA_BLOCK: "Quota limit reached",
    RuleKind.IDLE_WORKLOAD: "Idle workload",
    RuleKind.MAX_RUNTIME: "Workload past its maximum run time",
    RuleKind.LOW_UTILIZATION: "Low GPU utilisation",
}

# Kinds about a (cluster, tenant, flavor) series; the others are about one workload.
QUOTA_KINDS = (RuleKind.QUOTA_WARNING, RuleKind.QUOTA_BLOCK)


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class AlertState(models.TextChoices):
    FIRING = "firing", "Firing"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    RESOLVED = "resolved", "Resolved"


OPEN_STATES = (AlertState.FIRING, AlertState.ACKNOWLEDGED)


class ActionState(models.TextChoices):
    """What the portal did about the alert (blocking at 100%, suspending an idle workload)."""

    NONE = "", "No action taken"
    BLOCKED = "blocked", "New work held; running work continues"
    NOTIFIED = "notified", "Lead told; suspension due at the deadline"
    SUSPENDED = "suspended", "Workload suspended (taken off its GPUs), quota released"
    UNDONE = "undone", "Suspension undone; not suspended again while this alert is open"


class EventKind(models.TextChoices):
    FIRED = "fired", "Fired"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    RESOLVED = "resolved", "Resolved"
    BLOCKED = "blocked", "New work held"
    UNBLOCKED = "unblocked", "New work allowed again"
    SUSPENSION_NOTICE = "suspension_notice", "Lead told of the coming suspension"
    SUSPENDED = "suspended", "Workload suspended"
    SUSPEND_FAILED = "suspend_failed", "Suspension failed (retried)"
    REACTIVATED = "reactivated", "Suspension undone"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (the alert as an object)"
    SLACK = "slack", "Slack-compatible (text and blocks)"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed (gave up)"
