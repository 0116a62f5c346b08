"""Django admin for the clusters' Prometheus sources: the settings go through the same service
as the API (checked, audited); how the last reading went is shown, never edited."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from core.errors import ApplicationError
from usage.choices import PrometheusFigure
from usage.models import PrometheusSource
from usage.services import PROMETHEUS_SETTINGS, prometheus_settings_check, prometheus_source_set

STATUS_FIELDS: list[str | list[str] | tuple[str, ...] | tuple[()]] = [
    "last_attempt_at", "last_success_at", "last_error", "last_warnings", "last_samples",
    "last_unknown_series", "last_unknown_namespaces", "read_until",
]  # fmt: skip


class PrometheusSourceForm(forms.ModelForm):
    figures = forms.MultipleChoiceField(
        choices=PrometheusFigure.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="What to read from this Prometheus. Kueue: its queues' GPU use "
        "(kueue_cluster_queue_resource_usage and _reservation) is exported only where Kueue's "
        "Configuration sets metrics.enableClusterQueueResources: true; without it only the "
        "workload counts come, and the source's status warns.",
    )

    class Meta:
        model = PrometheusSource
        fields = ["cluster", *PROMETHEUS_SETTINGS]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            prometheus_settings_check(settings_=data)
        except ApplicationError as exc:
            for name, messages in exc.fields.items():
                self.add_error(name if name in self.fields else None, messages)
        return data


@admin.register(PrometheusSource)
class PrometheusSourceAdmin(admin.ModelAdmin):
    form = PrometheusSourceForm
    list_display = ["cluster", "url", "enabled", "last_success_at", "last_error"]
    readonly_fields = [str(name) for name in STATUS_FIELDS]
    fieldsets = [
        (None, {"fields": ["cluster", "url", "enabled", "figures", "node_agent_samples"]}),
        (
            "Authentication (files on the worker)",
            {
                "fields": [
                    "bearer_token_file",
                    "basic_auth_user",
                    "basic_auth_password_file",
                    "ca_bundle",
                ]
            },
        ),
        ("Queries", {"fields": ["label_matchers", "query_timeout_s", "step_s"]}),
        ("Last reading", {"fields": STATUS_FIELDS}),
    ]

    def save_model(
        self, request: HttpRequest, obj: PrometheusSource, form: Any, change: bool
    ) -> None:
        settings_ = {name: form.cleaned_data[name] for name in PROMETHEUS_SETTINGS}
        try:
            saved = prometheus_source_set(
                cluster=form.cleaned_data["cluster"], actor=request.user, settings_=settings_
            )
        except ApplicationError as exc:  # checked in clean(); a race shows the reason
            self.message_user(request, str(exc), level="error")
            return
        obj.pk = saved.pk
