"""The tenant NetworkPolicy and what the cluster lets in: the ingress controller's and
monitoring's namespaces, compiled into every tenant namespace's policy and valid for the API
server. Pure: specs built by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quotas.kube.compiler import compile_tenant
from quotas.kube.spec import NamespaceSpec
from quotas.kube.validate import validate_object
from tests.kube.test_compiler import find, medium_tenant, seed_cluster

NAME = "kubernetes.io/metadata.name"


def _policy(cluster, tenant, namespace):  # type: ignore[no-untyped-def]
    return find(compile_tenant(cluster, tenant), "NetworkPolicy", "deny-cross-tenant", namespace)


def test_the_cluster_s_ingress_and_monitoring_namespaces_reach_every_tenant_namespace():
    cluster = seed_cluster(
        ingress_namespaces=("ingress-nginx",),
        monitoring_namespaces=("monitoring", "ingress-nginx"),  # named twice: one peer
    )
    tenant = medium_tenant(
        namespaces=(NamespaceSpec("tenant-a"), NamespaceSpec("tenant-a-serve", "inference"))
    )
    for namespace in ("tenant-a", "tenant-a-serve"):
        policy = _policy(cluster, tenant, namespace)
        assert validate_object(policy, kubernetes_version=cluster.kubernetes_version) == []
        ingress = policy["spec"]["ingress"]
        assert ingress[-1] == {
            "from": [
                {"namespaceSelector": {"matchLabels": {NAME: "ingress-nginx"}}},
                {"namespaceSelector": {"matchLabels": {NAME: "monitoring"}}},
            ]
        }
        # Nothing else opened: egress stays the tenant's own namespaces and DNS.
        before = _policy(seed_cluster(), tenant, namespace)
        assert policy["spec"]["egress"] == before["spec"]["egress"]
        assert ingress[:-1] == before["spec"]["ingress"]


def test_without_cluster_namespaces_the_tenant_takes_traffic_only_from_its_own():
    policy = _policy(seed_cluster(), medium_tenant(), "tenant-a")
    assert len(policy["spec"]["ingress"]) == 2
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            assert NAME not in peer.get("namespaceSelector", {}).get("matchLabels", {})


@pytest.mark.parametrize("field", ["ingress_namespaces", "monitoring_namespaces"])
@pytest.mark.parametrize("bad", ["Ingress_Nginx", "", "a" * 64, "-x"])
def test_a_namespace_that_is_no_dns_label_is_refused_by_the_compiler(field: str, bad: str):
    cluster = replace(seed_cluster(), **{field: (bad,)})
    with pytest.raises(ValueError, match="DNS-1123"):
        compile_tenant(cluster, medium_tenant())
