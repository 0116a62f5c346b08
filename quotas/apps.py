"""The quotas app's wiring: its hook into tenants (a tenant change pushes its quota sets
again) and its receivers of Cluster saves and deletes (which namespaces a cluster keeps for
itself is written into tenants' ``NamespaceReservation``, ``quotas.receivers``). What adopting
a namespace would write is handed to tenants' page and API by the portal's URLs
(``quotas.sync.namespace_adoption_preview``)."""

from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class QuotasConfig(AppConfig):
    name = "quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from quotas.models import Cluster
        from quotas.receivers import cluster_deleted, cluster_saved
        from quotas.services import quota_sets_resync
        from quotas.services.grants import grants_on_push
        from quotas.sync import PUSHED
        from tenants.services import TENANT_CHANGED

        # A push that lands ends the grants for a time it withdrew.
        if grants_on_push not in PUSHED:
            PUSHED.append(grants_on_push)

        if quota_sets_resync not in TENANT_CHANGED:
            TENANT_CHANGED.append(quota_sets_resync)
        post_save.connect(cluster_saved, sender=Cluster, dispatch_uid="quotas.cluster_saved")
        post_delete.connect(cluster_deleted, sender=Cluster, dispatch_uid="quotas.cluster_deleted")
