"""The quotas app's wiring: its hooks into tenants (a tenant change pushes its quota sets
again; the namespaces clusters reserve; what adopting a namespace would write)."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from quotas.services import namespace_reserved_on_clusters, quota_sets_resync
        from quotas.sync import namespace_adoption_preview
        from tenants.services import (
            NAMESPACE_ADOPTION_PREVIEW,
            NAMESPACE_RESERVED,
            TENANT_CHANGED,
        )

        if quota_sets_resync not in TENANT_CHANGED:
            TENANT_CHANGED.append(quota_sets_resync)
        # Which namespaces a cluster keeps for itself, and what adopting one would write.
        if namespace_reserved_on_clusters not in NAMESPACE_RESERVED:
            NAMESPACE_RESERVED.append(namespace_reserved_on_clusters)
        if namespace_adoption_preview not in NAMESPACE_ADOPTION_PREVIEW:
            NAMESPACE_ADOPTION_PREVIEW.append(namespace_adoption_preview)
