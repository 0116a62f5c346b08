"""What a cluster keeps for itself (its reserved namespaces, the namespace Kueue's
configuration names, its GPU Operator's) is tenants data: ``tenants.NamespaceReservation``,
one set of rows per cluster (``cluster:<id>``), written by quotas whenever the cluster changes
(Django admin, a save anywhere, Kueue's configuration read at a push) and dropped with the
cluster. Tenants reads its own rows and asks no app."""

from __future__ import annotations

import importlib

from django.apps import apps as django_apps
from rest_framework.test import APIClient

from quotas.models import Cluster
from quotas.services import cluster_namespace_rules
from quotas.sync import tenant_push
from tenants.models import NamespaceReservation
from tests.factories import ClusterFactory
from tests.quotas.test_enforcement import kueue_configmap
from tests.quotas.test_enforcement_verdict import change_form

URL = "/api/v1/tenants/team-a/namespaces/"


def add_namespace(world, name: str):
    api = APIClient()
    api.force_authenticate(world.admin)
    return api.post(URL, {"name": name}, format="json")


def rows(cluster: Cluster) -> list[tuple[str, str]]:
    return list(
        NamespaceReservation.objects.filter(source=f"cluster:{cluster.pk}").values_list(
            "pattern", "reason"
        )
    )


def test_reserving_in_django_admin_refuses_the_name_and_removing_it_allows_it_again(world, client):
    client.force_login(world.admin)
    url = f"/admin/quotas/cluster/{world.h100.pk}/change/"
    saved = client.post(url, change_form(world.h100, reserved_namespaces="monitoring\nistio-*"))
    assert saved.status_code == 302, saved.content.decode()[:3000]

    refused = add_namespace(world, "monitoring")
    assert refused.status_code == 400, refused.content
    assert (
        "monitoring is reserved: cluster demo-h100 reserves it (monitoring)"
        in (refused.json()["fields"]["name"][0])
    )
    refused = add_namespace(world, "istio-system")
    assert refused.status_code == 400, refused.content
    assert "(istio-*)" in refused.json()["fields"]["name"][0]

    world.h100.refresh_from_db()
    removed = client.post(url, change_form(world.h100, reserved_namespaces="istio-*"))
    assert removed.status_code == 302, removed.content.decode()[:3000]
    allowed = add_namespace(world, "monitoring")
    assert allowed.status_code == 201, allowed.content
    assert add_namespace(world, "istio-gateway").status_code == 400


def test_a_renamed_cluster_gives_its_new_name_in_the_reason(world):
    world.h100.reserved_namespaces = ["monitoring"]
    world.h100.save()
    world.h100.name = "big-h100"
    world.h100.save(update_fields=["name"])
    assert ("monitoring", "cluster big-h100 reserves it (monitoring)") in rows(world.h100)


def test_deleting_a_cluster_drops_its_reservations(world):
    spare = ClusterFactory(name="spare", reserved_namespaces=["monitoring"])
    assert ("monitoring", "cluster spare reserves it (monitoring)") in rows(spare)
    assert add_namespace(world, "monitoring").status_code == 400

    pk = spare.pk
    spare.delete()

    assert not NamespaceReservation.objects.filter(source=f"cluster:{pk}").exists()
    assert add_namespace(world, "monitoring").status_code == 201


def test_the_namespace_kueue_runs_in_read_at_a_push_is_reserved(world, standin):
    kueue_configmap(standin, "kind: Configuration\nnamespace: kueue-main\n")
    assert tenant_push(tenant=world.team_a, cluster=world.a100).ok
    world.a100.refresh_from_db()
    assert world.a100.kueue_config["namespace"] == "kueue-main"
    assert ("kueue-main", "Kueue runs there on demo-a100") in rows(world.a100)
    refused = add_namespace(world, "kueue-main")
    assert refused.status_code == 400, refused.content
    assert "Kueue runs there on demo-a100" in refused.json()["fields"]["name"][0]


def test_the_upgrade_fills_the_reservations_from_the_clusters(world):
    Cluster.objects.filter(pk=world.h100.pk).update(
        reserved_namespaces=["monitoring", "istio-*", "monitoring"],
        mig_operator_namespace="nvidia-gpu",
    )
    Cluster.objects.filter(pk=world.a100.pk).update(kueue_config={"namespace": "kueue-main"})
    NamespaceReservation.objects.all().delete()  # as before the upgrade: no rows
    assert add_namespace(world, "monitoring").status_code == 201
    migration = importlib.import_module(
        "quotas.migrations.0018_namespace_reservations_from_clusters"
    )

    migration.reservations_from_clusters(django_apps, None)
    migration.reservations_from_clusters(django_apps, None)  # twice: the same rows

    for cluster in Cluster.objects.all():
        expected = list(dict(cluster_namespace_rules(cluster)).items())
        assert rows(cluster) == expected, cluster.name
    assert ("istio-*", "cluster demo-h100 reserves it (istio-*)") in rows(world.h100)
    assert ("kueue-main", "Kueue runs there on demo-a100") in rows(world.a100)
    refused = add_namespace(world, "istio-ingress")
    assert refused.status_code == 400, refused.content
    assert "cluster demo-h100 reserves it (istio-*)" in refused.json()["fields"]["name"][0]
