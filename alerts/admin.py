"""Django admin: rules and webhooks are edited here by platform admins; alerts are read (their
history inline) and acknowledged through the portal or the API."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from alerts.models import Alert, AlertEvent, AlertRule, Webhook, WebhookDelivery


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "enabled", "act", "severity", "threshold_pct", "duration",
                    "grace", "cluster"]  # fmt: skip
    list_filter = ["kind", "enabled", "severity"]
    list_editable = ["enabled", "act", "threshold_pct", "duration"]


class AlertEventInline(admin.TabularInline):
    model = AlertEvent
    extra = 0
    can_delete = False
    readonly_fields = ("kind", "at", "actor_username", "detail")
    fields = ("kind", "at", "actor_username", "detail")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["pk", "rule", "state", "severity", "tenant", "cluster", "subject", "fired_at",
                    "action_state"]  # fmt: skip
    list_filter = ["state", "severity", "rule", "action_state"]
    search_fields = ["subject", "message", "tenant__slug"]
    readonly_fields = [f.name for f in Alert._meta.fields]
    inlines = [AlertEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "format", "enabled", "min_severity"]
    list_editable = ["enabled"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["pk", "webhook", "event", "state", "attempts", "last_status", "created_at",
                    "sent_at"]  # fmt: skip
    list_filter = ["state", "webhook"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
