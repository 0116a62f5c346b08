"""A cluster's ingress controller and monitoring namespaces: set by a platform admin (API and
Django admin), checked (a namespace name, never a tenant's), pushed into every tenant's
NetworkPolicy, and reserved so no tenant is given one later."""

from __future__ import annotations

import json

import pytest

from quotas.kube.compiler import compile_tenant
from quotas.loader import cluster_spec, tenant_specs
from quotas.models import Cluster, QuotaSet, SyncOutbox
from tenants.models import AuditEvent, Namespace
from tenants.services import namespace_reserved_reason

pytestmark = pytest.mark.django_db
URL = "/api/v1/clusters/demo-a100/"
NAME = "kubernetes.io/metadata.name"


def _generations() -> list[int]:
    return list(QuotaSet.objects.order_by("pk").values_list("generation", flat=True))


def test_an_admin_lets_the_ingress_controller_and_monitoring_into_every_tenant(world, api_as):
    before = dict(
        QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation")
    )
    response = api_as(world.admin).patch(
        URL,
        {
            "tenant_ingress_namespaces": ["ingress-nginx"],
            "tenant_monitoring_namespaces": ["monitoring"],
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["tenant_ingress_namespaces"] == ["ingress-nginx"]
    assert response.json()["tenant_monitoring_namespaces"] == ["monitoring"]
    # Every tenant on the cluster is pushed again, with the namespaces in its policy.
    after = dict(QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation"))
    assert after == {tenant: generation + 1 for tenant, generation in before.items()}
    for tenant, generation in after.items():
        assert SyncOutbox.objects.filter(
            tenant_id=tenant, cluster=world.a100, generation=generation
        ).exists()
    cluster = Cluster.objects.get(pk=world.a100.pk)
    spec = cluster_spec(cluster)
    [tenant] = [t for t in tenant_specs(cluster) if t.slug == "team-a"]
    policies = [o for o in compile_tenant(spec, tenant) if o["kind"] == "NetworkPolicy"]
    assert policies
    for policy in policies:
        assert {
            "from": [
                {"namespaceSelector": {"matchLabels": {NAME: "ingress-nginx"}}},
                {"namespaceSelector": {"matchLabels": {NAME: "monitoring"}}},
            ]
        } in policy["spec"]["ingress"]
    event = AuditEvent.objects.get(action="cluster.tenant_traffic_set")
    assert event.after == {
        "tenant_ingress_namespaces": ["ingress-nginx"],
        "tenant_monitoring_namespaces": ["monitoring"],
    }
    # No tenant may be given one of them from now on: it would reach every other tenant.
    assert "reaches every tenant" in namespace_reserved_reason("ingress-nginx")


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"tenant_ingress_namespaces": ["Ingress_NGINX"]}, "tenant_ingress_namespaces", "not a"),
        ({"tenant_monitoring_namespaces": ["a" * 64]}, "tenant_monitoring_namespaces", "63"),
        ({"tenant_monitoring_namespaces": "monitoring"}, "tenant_monitoring_namespaces", ""),
        # Bad input in one field changes nothing, the enforcement mode in the same body neither.
        (
            {"enforcement": "split", "tenant_ingress_namespaces": ["bad name"]},
            "tenant_ingress_namespaces",
            "bad name",
        ),
    ],
)
def test_a_bad_namespace_is_refused_naming_the_field_and_changes_nothing(
    world, api_as, body, field, words
):
    generations = _generations()
    response = api_as(world.admin).patch(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"]
    assert words in json.dumps(response.json())
    cluster = Cluster.objects.get(pk=world.a100.pk)
    assert (cluster.tenant_ingress_namespaces, cluster.tenant_monitoring_namespaces) == ([], [])
    assert cluster.enforcement == "kueue"
    assert _generations() == generations


def test_a_tenant_s_namespace_cannot_be_let_into_every_tenant(world, api_as):
    """Naming team-b's namespace as the ingress controller's would let team-b reach team-a."""
    namespace = Namespace.objects.filter(tenant=world.team_b).first()
    assert namespace is not None
    generations = _generations()
    response = api_as(world.admin).patch(
        URL, {"tenant_ingress_namespaces": [namespace.name]}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "tenant_ingress_namespaces" in response.json()["fields"]
    assert "team-b" in json.dumps(response.json())
    assert Cluster.objects.get(pk=world.a100.pk).tenant_ingress_namespaces == []
    assert _generations() == generations


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_only_platform_admins_set_them(world, api_as, persona):
    response = api_as(getattr(world, persona)).patch(
        URL, {"tenant_ingress_namespaces": ["ingress-nginx"]}, format="json"
    )
    assert response.status_code == 403
    assert Cluster.objects.get(pk=world.a100.pk).tenant_ingress_namespaces == []


def test_an_empty_change_is_refused(world, api_as):
    response = api_as(world.admin).patch(URL, {}, format="json")
    assert response.status_code == 400


def test_django_admin_sets_them_one_per_line_and_pushes_again(world, client):
    from quotas.admin import ClusterAdminForm

    cluster = Cluster.objects.get(pk=world.a100.pk)
    form = ClusterAdminForm(instance=cluster)
    data = {
        name: form.initial.get(name, field.initial)
        for name, field in form.fields.items()
        if form.initial.get(name, field.initial) is not None
    }
    data["pool"] = ""
    data["tenant_ingress_namespaces"] = "ingress-nginx\n\ntraefik\n"
    bad = ClusterAdminForm(
        instance=cluster, data={**data, "tenant_monitoring_namespaces": "Monitoring"}
    )
    assert not bad.is_valid()
    assert "tenant_monitoring_namespaces" in bad.errors

    generations = _generations()
    client.force_login(world.admin)
    response = client.post(f"/admin/quotas/cluster/{cluster.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Cluster.objects.get(pk=cluster.pk).tenant_ingress_namespaces == [
        "ingress-nginx",
        "traefik",
    ]
    assert _generations() != generations
