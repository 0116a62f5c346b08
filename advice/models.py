"""Quota suggestions (R19, R20): the numbers behind each suggested change, per tenant and
cluster, and the draft change request that carries it (the lead reviews and submits it)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from approvals.models import QuotaChangeRequest
from quotas.models import Cluster
from tenants.models import Tenant


class Suggestion(models.Model):
    """What last month's usage says about a tenant's quotas on one cluster. ``numbers`` holds,
    per GPU quota line, the daily peaks, the rule's floor, the elastic cap, utilisation and
    memory, the suggested amounts and why; ``request`` is the draft filed from it (None when
    nothing needs to change or it could not be filed, ``note`` says which)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="suggestions")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    request = models.OneToOneField(
        QuotaChangeRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    numbers = models.JSONField(default=list)
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
        related_name="+", help_text="Empty when the monthly run made it.",
    )  # fmt: skip
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="advice_sugg_tenant")]
        constraints = [
            models.CheckConstraint(
                condition=Q(period_start__lt=models.F("period_end")),
                name="advice_suggestion_period_ordered",
            ),
        ]

    def __str__(self) -> str:
        return f"suggestion for {self.tenant_id}@{self.cluster_id} ({self.period_start:%Y-%m})"
