"""The quotas app's wiring: its hooks into tenants (a tenant change pushes its quota sets
again; the namespaces clusters reserve). What adopting a namespace would write is handed to
tenants' page and API by the portal's URLs (``quotas.sync.namespace_adoption_preview``)."""

from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from quotas.services import namespace_reserved_on_clusters, quota_sets_resync
        from tenants.services import NAMESPACE_RESERVED, TENANT_CHANGED

        if quota_sets_resync not in TENANT_CHANGED:
            TENANT_CHANGED.append(quota_sets_resync)
        # Which namespaces a cluster keeps for itself.
        if namespace_reserved_on_clusters not in NAMESPACE_RESERVED:
            NAMESPACE_RESERVED.append(namespace_reserved_on_clusters)
