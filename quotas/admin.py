"""Django admin for clusters, flavors and tiers. Quotas are read-only here: they change only
through services (approved change requests)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin

from core.errors import ApplicationError
from quotas.models import (
    Cluster,
    ClusterPool,
    FlavorResource,
    Quota,
    QuotaSet,
    ResourceFlavor,
    TierTemplate,
)
from quotas.quantity import format_quantity
from quotas.services import (
    TIER_AMOUNT_FIELDS,
    TIER_COUNT_FIELDS,
    TIER_OPTIONAL_FIELDS,
    tier_template_prepare,
    tier_template_save,
)


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "display_name",
        "has_kueue",
        "has_volcano",
        "elastic_cap_fraction",
        "allow_guarantee_overcommit",
        "pool",
    ]
    list_filter = ["pool"]
    search_fields = ["name", "display_name"]


@admin.register(ClusterPool)
class ClusterPoolAdmin(admin.ModelAdmin):
    """Which clusters count as one pool: set each cluster's pool on the cluster's page."""

    list_display = ["name", "description", "cluster_names"]
    search_fields = ["name"]

    @admin.display(description="Clusters")
    def cluster_names(self, pool: ClusterPool) -> str:
        return ", ".join(c.name for c in pool.clusters.order_by("name")) or "none yet"


class FlavorResourceInline(admin.TabularInline):
    model = FlavorResource
    extra = 1


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(admin.ModelAdmin):
    list_display = [
        "name", "cluster", "kind", "gpu_model", "mig_profile", "time_slicing_replicas",
        "gpu_weight",
    ]  # fmt: skip
    list_filter = ["cluster", "kind"]
    search_fields = ["name", "gpu_model"]
    inlines = [FlavorResourceInline]


class TierTemplateForm(forms.ModelForm):
    """Amounts typed as Kubernetes quantities ("64Gi", "500m"), checked by the same service
    the API uses, so the admin and the API refuse the same things with the same words."""

    class Meta:
        model = TierTemplate
        fields = ["name", "display_name", "description", *TIER_AMOUNT_FIELDS, *TIER_COUNT_FIELDS,
                  *TIER_OPTIONAL_FIELDS, "sort_order"]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, resource in TIER_AMOUNT_FIELDS.items():
            self.fields[name] = forms.CharField(
                label=self.fields[name].label, help_text=f"A Kubernetes quantity ({resource})."
            )
            if self.instance.pk:
                self.initial[name] = format_quantity(getattr(self.instance, name), resource)
        # Per-pod caps and the inference split: optional, empty for "derived" / "no split".
        for name, resource in TIER_OPTIONAL_FIELDS.items():
            self.fields[name] = forms.CharField(
                required=False,
                label=self.fields[name].label,
                help_text=f"Optional; a Kubernetes quantity ({resource}). Empty: "
                + ("no split." if name == "inference_gpus" else "derived from the limits."),
            )
            value = getattr(self.instance, name) if self.instance.pk else None
            if value is not None:
                self.initial[name] = format_quantity(Decimal(value), resource)

    def _post_clean(self) -> None:
        data = {k: v for k, v in self.cleaned_data.items() if k in self.Meta.fields}
        if self.instance.pk:
            data.pop("name", None)
        try:
            self.instance = tier_template_prepare(
                tier=self.instance if self.instance.pk else None, **data
            )
        except ApplicationError as exc:
            if not exc.fields:
                self.add_error(None, exc.message)
            for field, messages in exc.fields.items():
                for message in messages:
                    self.add_error(field if field in self.fields else None, message)


@admin.register(TierTemplate)
class TierTemplateAdmin(admin.ModelAdmin):
    form = TierTemplateForm
    list_display = ["name", "display_name", "gpus_guaranteed", "gpus_limit", "max_running_jobs"]

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return ["name"] if obj else []

    def save_model(self, request: Any, obj: TierTemplate, form: Any, change: bool) -> None:
        data = {k: v for k, v in form.cleaned_data.items() if k in form.Meta.fields}
        if change:
            data.pop("name", None)
        saved = tier_template_save(actor=request.user, tier=obj if change else None, **data)
        obj.pk = saved.pk


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0
    fields = readonly_fields = ("flavor", "resource", "guaranteed", "limit", "lending_limit")
    can_delete = False

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(QuotaSet)
class QuotaSetAdmin(admin.ModelAdmin):
    list_display = ["tenant", "cluster", "generation", "tier", "updated_at"]
    list_filter = ["cluster"]
    search_fields = ["tenant__slug"]
    inlines = [QuotaInline]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
