"""The tenant NetworkPolicy and what the cluster lets in: the ingress controller's and
monitoring's namespaces, compiled into every tenant namespace's policy and valid for the API
server. Pure: specs built by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from quotas.kube.compiler import compile_tenant
from quotas.kube.spec import EgressSpec, NamespaceSpec
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


# --- egress exceptions ------------------------------------------------------------------------


def test_approved_egress_exceptions_become_one_egress_rule_each_in_every_namespace():
    tenant = medium_tenant(
        namespaces=(NamespaceSpec("tenant-a"), NamespaceSpec("tenant-a-serve", "inference")),
        egress=(
            EgressSpec(port=443, cidr="10.40.0.0/16"),
            EgressSpec(port=8080, namespace="model-cache"),
            EgressSpec(port=443, cidr="10.40.0.0/16"),  # twice: one rule
            EgressSpec(port=5000, protocol="UDP", namespace="team-b-serve", tenant="team-b"),
        ),
    )
    base = _policy(seed_cluster(), medium_tenant(), "tenant-a")["spec"]["egress"]
    for namespace in ("tenant-a", "tenant-a-serve"):
        policy = _policy(seed_cluster(), tenant, namespace)
        assert validate_object(policy) == []
        egress = policy["spec"]["egress"]
        assert egress[: len(base)] == base  # the default rules first, unchanged
        extra = egress[len(base) :]
        assert len(extra) == 3
        assert {
            "to": [{"ipBlock": {"cidr": "10.40.0.0/16"}}],
            "ports": [{"protocol": "TCP", "port": 443}],
        } in extra
        assert {
            "to": [{"namespaceSelector": {"matchLabels": {NAME: "model-cache"}}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        } in extra
        assert {
            "to": [{"namespaceSelector": {"matchLabels": {NAME: "team-b-serve"}}}],
            "ports": [{"protocol": "UDP", "port": 5000}],
        } in extra
        # Ingress is not widened by an egress exception.
        assert (
            policy["spec"]["ingress"]
            == _policy(seed_cluster(), medium_tenant(), "tenant-a")["spec"]["ingress"]
        )


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (EgressSpec(port=443, cidr="0.0.0.0/0"), "wider than a /8"),
        (EgressSpec(port=443, cidr="::/0"), "wider than a /32"),
        (EgressSpec(port=80, cidr="169.254.169.254/32"), "metadata"),
        (EgressSpec(port=0, cidr="10.0.0.0/8"), "1 to 65535"),
        (EgressSpec(port=80, protocol="ICMP", cidr="10.0.0.0/8"), "TCP, UDP or SCTP"),
        (EgressSpec(port=80, namespace="Bad_NS"), "DNS-1123"),
        (EgressSpec(port=80), "one destination"),
    ],
)
def test_the_compiler_refuses_an_exception_no_request_could_approve(spec, words):  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=words):
        compile_tenant(seed_cluster(), medium_tenant(egress=(spec,)))
