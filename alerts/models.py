"""Alert rules (admins edit them), alerts deduplicated by (rule, subject) with their history,
and webhook targets with one delivery row per notification sent to them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from alerts.choices import (
    RULE_TITLES,
    ActionState,
    AlertState,
    DeliveryState,
    EventKind,
    RuleKind,
    Severity,
    WebhookFormat,
)
from alerts.webhooks import validate_webhook_url


class AlertRule(models.Model):
    """One rule. ``threshold_pct``: quota use as a percentage of the limit (quota kinds), the
    GPU utilisation at or below which a GPU counts as idle (idle workloads), or under which an
    allocation is flagged (low utilisation). ``duration``: how long the condition must hold
    (idle, low utilisation) or the maximum run time. ``grace``: between telling the lead and
    suspending an idle workload. ``act``: take the action (hold new work, suspend), not only
    alert."""

    name = models.SlugField(max_length=63, unique=True)
    kind = models.CharField(max_length=30, choices=RuleKind.choices)
    description = models.CharField(max_length=300, blank=True)
    severity = models.CharField(max_length=20, choices=Severity.choices, default=Severity.WARNING)
    enabled = models.BooleanField(default=True)
    act = models.BooleanField(
        default=False, help_text="Hold new work (quota) or suspend the workload (idle)."
    )
    threshold_pct = models.FloatField(null=True, blank=True)
    duration = models.DurationField(null=True, blank=True)
    grace = models.DurationField(null=True, blank=True)
    cluster = models.ForeignKey(
        "quotas.Cluster",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="Only this cluster; empty: every cluster.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=RuleKind.values), name="alert_rule_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(threshold_pct__isnull=True)
                | (Q(threshold_pct__gte=0) & Q(threshold_pct__lte=1000)),
                name="alert_rule_threshold_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def title(self) -> str:
        """The rule in words for pages and the inbox ("Quota limit reached"), not its slug."""
        return RULE_TITLES.get(self.kind, self.name)


class Alert(models.Model):
    """One condition of one rule about one subject (``subject``: ``quota:<cluster>:<tenant>:
    <flavor>`` or ``workload:<cluster>:<uid>``). At most one open (firing or acknowledged)
    alert per (rule, subject): re-evaluation updates it; once resolved, the next occurrence is a
    new alert, so resolved ones are the history."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    subject = models.CharField(max_length=300)
    state = models.CharField(max_length=20, choices=AlertState.choices, default=AlertState.FIRING)
    severity = models.CharField(max_length=20, choices=Severity.choices)
    cluster = models.ForeignKey(
        "quotas.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    flavor = models.ForeignKey(
        "quotas.ResourceFlavor", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    workload = models.ForeignKey(
        "usage.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    workload_namespace = models.CharField(max_length=63, blank=True)
    workload_name = models.CharField(max_length=253, blank=True)
    message = models.TextField()
    value = models.FloatField(null=True, blank=True, help_text="The measured value, last seen.")
    threshold = models.FloatField(null=True, blank=True)
    fired_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    action_state = models.CharField(
        max_length=20, choices=ActionState.choices, default=ActionState.NONE, blank=True
    )
    action_due_at = models.DateTimeField(
        null=True, blank=True, help_text="When the workload is suspended if still idle."
    )
    action_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-fired_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(state__in=["firing", "acknowledged"]),
                name="alert_one_open_per_rule_subject",
            ),
            models.CheckConstraint(
                condition=Q(state__in=AlertState.values), name="alert_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(action_state__in=ActionState.values), name="alert_action_state_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["state", "tenant"], name="alert_state_tenant"),
            models.Index(fields=["tenant", "-fired_at"], name="alert_tenant_fired"),
        ]

    def __str__(self) -> str:
        return f"{self.rule.name} {self.subject} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in (AlertState.FIRING, AlertState.ACKNOWLEDGED)


class AlertEvent(models.Model):
    """The alert's history: each transition and action, who did it and when."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=30, choices=EventKind.choices)
    at = models.DateTimeField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_username = models.CharField(max_length=150, default="system")
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["pk"]  # the order things happened in (one clock: the database's ids)

    def __str__(self) -> str:
        return f"{self.alert_id} {self.kind} {self.at:%Y-%m-%dT%H:%M:%SZ}"


class Webhook(models.Model):
    """A URL every alert notification is posted to (admins set them)."""

    name = models.CharField(max_length=100, unique=True)
    url = models.URLField(
        max_length=500,
        validators=[validate_webhook_url],
        help_text="http(s), to a public address (internal ones only when "
        "WEBHOOK_ALLOWED_HOSTS names them), without user:password@.",
    )
    format = models.CharField(
        max_length=10, choices=WebhookFormat.choices, default=WebhookFormat.JSON
    )
    enabled = models.BooleanField(default=True)
    min_severity = models.CharField(max_length=20, choices=Severity.choices, default=Severity.INFO)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class WebhookDelivery(models.Model):
    """One notification to one webhook: the body as sent, and how sending went. A Celery task
    sends it (retried with backoff); the evaluation only writes the row."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    alert = models.ForeignKey(
        Alert, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    event = models.CharField(max_length=30, choices=EventKind.choices)
    payload = models.JSONField()
    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="alert_delivery_due")]

    def __str__(self) -> str:
        return f"{self.webhook.name} {self.event} ({self.state})"
