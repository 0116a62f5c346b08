"""Django admin for clusters, flavors and tiers. Quotas are read-only here: they change only
through services (approved change requests)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from core.errors import ApplicationError
from quotas.choices import Enforcement
from quotas.kube.enforcement import read_trusted_controllers, shared_resources
from quotas.loader import cluster_spec
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
from quotas.selectors import cluster_enforcement
from quotas.services import (
    TENANT_TRAFFIC_FIELDS,
    TIER_AMOUNT_FIELDS,
    TIER_COUNT_FIELDS,
    TIER_OPTIONAL_FIELDS,
    cluster_tenants_repush,
    flavor_vgpu_convert,
    tenant_traffic_namespaces_read,
    tier_template_prepare,
    tier_template_save,
)
from tenants.namespaces import read_patterns


class ClusterAdminForm(forms.ModelForm):
    """The trusted operators typed one Kubernetes username per line, checked as the compiler
    reads them."""

    trusted_controllers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=Cluster._meta.get_field("trusted_controllers").help_text,
    )

    reserved_namespaces = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=Cluster._meta.get_field("reserved_namespaces").help_text + " One per line.",
    )

    tenant_ingress_namespaces = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=Cluster._meta.get_field("tenant_ingress_namespaces").help_text
        + " One per line; every tenant is pushed again.",
    )
    tenant_monitoring_namespaces = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=Cluster._meta.get_field("tenant_monitoring_namespaces").help_text
        + " One per line; every tenant is pushed again.",
    )

    class Meta:
        model = Cluster
        fields = "__all__"  # noqa: DJ007 - every field, as the admin's default form has

    # Declared here so the form (made at import) says which scheme a bare host gets.
    api_server = forms.URLField(
        required=False,
        assume_scheme="https",
        help_text=Cluster._meta.get_field("api_server").help_text,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and isinstance(self.instance.trusted_controllers, list):
            self.initial["trusted_controllers"] = "\n".join(
                str(entry) for entry in self.instance.trusted_controllers
            )
        for field in TENANT_TRAFFIC_FIELDS:
            value = getattr(self.instance, field)
            if self.instance.pk and isinstance(value, list):
                self.initial[field] = "\n".join(str(entry) for entry in value)
        if self.instance.pk and isinstance(self.instance.reserved_namespaces, list):
            self.initial["reserved_namespaces"] = "\n".join(
                str(entry) for entry in self.instance.reserved_namespaces
            )

    def clean_trusted_controllers(self) -> list[str]:
        text = self.cleaned_data.get("trusted_controllers") or ""
        entries = [line.strip() for line in text.splitlines() if line.strip()]
        try:
            return list(read_trusted_controllers(entries))
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def _traffic_namespaces(self, field: str) -> list[str]:
        lines = [line.strip() for line in (self.cleaned_data.get(field) or "").splitlines()]
        try:
            return tenant_traffic_namespaces_read([line for line in lines if line], field=field)
        except ApplicationError as error:
            raise forms.ValidationError(error.message) from None

    def clean_tenant_ingress_namespaces(self) -> list[str]:
        return self._traffic_namespaces("tenant_ingress_namespaces")

    def clean_tenant_monitoring_namespaces(self) -> list[str]:
        return self._traffic_namespaces("tenant_monitoring_namespaces")

    def clean_reserved_namespaces(self) -> list[str]:
        try:
            return read_patterns((self.cleaned_data.get("reserved_namespaces") or "").splitlines())
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None


def split_warning(cluster: Cluster) -> str:
    """What an admin is told when a cluster under namespace split cannot bound each GPU model
    ("" where it can)."""
    if cluster.enforcement != Enforcement.SPLIT:
        return ""
    shared = shared_resources(cluster_spec(cluster).flavors)
    if not shared:
        return ""
    return (
        f"Namespace split on {cluster.name}: "
        + "; ".join(resource.words() for resource in shared)
        + ". Its namespace quotas bound the sum, not each model, so the cluster page says work "
        "can get around the limits. Choose 'Kueue manages everything', or give each model its "
        "own resource name with the device plugin."
    )


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    form = ClusterAdminForm
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
    # What the portal reads from the cluster (quotas.storage) is shown, never typed in.
    readonly_fields = [
        "enforcement_verdict",
        "storage_classes",
        "default_storage_class",
        "volume_attributes_classes",
        "storage_classes_read_at",
    ]

    @admin.display(description="Can work get around the limits?")
    def enforcement_verdict(self, cluster: Cluster) -> str:
        if not cluster.pk:
            return "Said once the cluster is saved."
        found = cluster_enforcement(cluster=cluster)
        words = {"no": "No.", "yes": "Yes.", "unknown": "Unknown."}[found["bypass"]]
        return format_html(
            "<strong>{}</strong> {}",
            words,
            format_html_join(" ", "{}", ((line,) for line in found["explanation"])),
        )

    def save_model(self, request: HttpRequest, obj: Cluster, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and {*TENANT_TRAFFIC_FIELDS, "fair_sharing"} & set(form.changed_data):
            # The tenants' NetworkPolicies, or their ClusterQueues, change.
            cluster_tenants_repush(cluster=obj)
        warning = split_warning(obj)
        if warning:
            messages.warning(request, warning)


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
        "gpu_memory_mib", "vgpu_split", "gpu_weight", "storage_class", "performance",
    ]  # fmt: skip
    list_filter = ["cluster", "kind"]
    search_fields = ["name", "gpu_model"]
    inlines = [FlavorResourceInline]
    actions = ["move_to_vgpu"]

    @admin.action(description="Move selected time-sliced flavors to vGPU shares (HAMi)")
    def move_to_vgpu(self, request: HttpRequest, queryset: Any) -> None:
        """Each flavor's tenants keep the same fraction of a GPU, now as GPU memory and
        compute (``quotas.services.flavor_vgpu_convert``); the flavor's GPU memory
        (``gpu_memory_mib``) must be set on it first."""
        for flavor in queryset.select_related("cluster"):
            try:
                done = flavor_vgpu_convert(
                    flavor=flavor,
                    gpu_memory_mib=flavor.gpu_memory_mib,
                    vgpu_split=flavor.vgpu_split,
                    actor=request.user,  # type: ignore[arg-type]  # staff only: a User
                )
            except ApplicationError as exc:
                self.message_user(request, exc.message, level=messages.ERROR)
                continue
            rest = [f"{c.tenant}: {c.rest}" for c in done.shares if c.rest]
            self.message_user(
                request,
                f"{flavor.name} now gives vGPU shares; {len(done.shares)} "
                f"tenant{'s' if len(done.shares) != 1 else ''} moved"
                + (f" (rounded down: {'; '.join(rest)})" if rest else ""),
                level=messages.SUCCESS,
            )


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
