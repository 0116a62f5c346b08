"""The namespaces clusters keep for themselves move into tenants
(``tenants.NamespaceReservation``): every cluster gets its rows (source ``cluster:<id>``), as
``quotas.services.cluster_namespaces_reserve`` writes them, so an upgrade refuses the same
namespace names to tenants as before. The rules are those of
``quotas.services.cluster_namespace_rules``, copied here as they are today (a migration reads
the models as they were, never today's code)."""

from django.db import migrations


def cluster_rules(cluster):
    rules = []
    kueue_namespace = (cluster.kueue_config or {}).get("namespace")
    if kueue_namespace:
        rules.append((str(kueue_namespace), f"Kueue runs there on {cluster.name}"))
    if cluster.mig_operator_namespace:
        rules.append(
            (cluster.mig_operator_namespace, f"the GPU Operator runs there on {cluster.name}")
        )
    reserved = cluster.reserved_namespaces if isinstance(cluster.reserved_namespaces, list) else []
    for pattern in reserved:
        if isinstance(pattern, str) and pattern.strip():
            rules.append(
                (pattern.strip(), f"cluster {cluster.name} reserves it ({pattern.strip()})")
            )
    return rules


def reservations_from_clusters(apps, schema_editor):
    Cluster = apps.get_model("quotas", "Cluster")
    NamespaceReservation = apps.get_model("tenants", "NamespaceReservation")
    rows = []
    for cluster in Cluster.objects.order_by("pk"):
        source = f"cluster:{cluster.pk}"
        seen = set()
        for pattern, why in cluster_rules(cluster):
            if pattern in seen:
                continue
            seen.add(pattern)
            rows.append(
                NamespaceReservation(
                    source=source, pattern=pattern, reason=why[:500], position=len(seen) - 1
                )
            )
    NamespaceReservation.objects.bulk_create(rows, ignore_conflicts=True)


def reservations_back(apps, schema_editor):
    NamespaceReservation = apps.get_model("tenants", "NamespaceReservation")
    NamespaceReservation.objects.filter(source__startswith="cluster:").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0017_fleet_node_capacity"),
        ("tenants", "0012_namespace_reservation"),
    ]

    operations = [migrations.RunPython(reservations_from_clusters, reservations_back)]
