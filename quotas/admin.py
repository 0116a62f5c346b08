"""Django admin for clusters, flavors and tiers. Quotas are read-only here: they change only
through services (approved change requests)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from quotas.models import Cluster, FlavorResource, Quota, QuotaSet, ResourceFlavor, TierTemplate


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "display_name",
        "has_kueue",
        "has_volcano",
        "elastic_cap_fraction",
        "allow_guarantee_overcommit",
    ]
    search_fields = ["name", "display_name"]


class FlavorResourceInline(admin.TabularInline):
    model = FlavorResource
    extra = 1


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "kind", "gpu_model", "mig_profile", "gpu_weight"]
    list_filter = ["cluster", "kind"]
    search_fields = ["name", "gpu_model"]
    inlines = [FlavorResourceInline]


@admin.register(TierTemplate)
class TierTemplateAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "gpus_guaranteed", "gpus_limit", "max_running_jobs"]


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0
    fields = ["flavor", "resource", "guaranteed", "limit", "lending_limit"]
    readonly_fields = fields
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
