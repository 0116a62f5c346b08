"""R27 in the compiler: a capped tenant's namespaces carry its cap as a label, and one
cluster-wide ValidatingAdmissionPolicy (with its binding) refuses pods there without both
bandwidth annotations or above the cap. The policy's CEL is run here by the stand-in's
admission code (devcluster.policies with quotas.kube.cel), in process; the cluster test is
tests/quotas/test_bandwidth_enforcement.py."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from devcluster.policies import Request, admit
from quotas.kube import bandwidth, cel
from quotas.kube.compiler import compile_cluster, compile_cluster_wide, compile_tenant
from quotas.kube.spec import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)
from quotas.kube.validate import validate_object

LABEL = "portal.gpu-quota.io/pod-bandwidth-max"
INGRESS = "kubernetes.io/ingress-bandwidth"
EGRESS = "kubernetes.io/egress-bandwidth"
ADMISSION = "admissionregistration.k8s.io/v1"

CLUSTER = ClusterSpec(
    name="demo",
    flavors=(FlavorSpec("a100", "gpu", {"nvidia.com/gpu": Decimal(8)}),),
)


def tenant(slug: str, cap: str = "") -> TenantSpec:
    return TenantSpec(
        slug=slug,
        generation=1,
        namespaces=(NamespaceSpec(f"{slug}-train"), NamespaceSpec(f"{slug}-serve")),
        quotas=(QuotaSpec("a100", "nvidia.com/gpu", Decimal(2), Decimal(4)),),
        pod_bandwidth_max=cap,
    )


def kinds(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def bandwidth_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["metadata"]["name"] == "gpu-quota-portal-pod-bandwidth"]


def test_a_capped_tenants_namespaces_carry_the_cap_and_others_do_not():
    objects = compile_cluster(CLUSTER, [tenant("team-a"), tenant("team-b", "1G")])
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kinds(objects, "Namespace")}
    assert labels["team-b-train"][LABEL] == "1G" and labels["team-b-serve"][LABEL] == "1G"
    assert LABEL not in labels["team-a-train"] and LABEL not in labels["team-a-serve"]


def test_one_policy_and_binding_when_a_tenant_is_capped_none_otherwise():
    assert bandwidth_objects(compile_cluster(CLUSTER, [tenant("team-a")])) == []
    objects = compile_cluster_wide(
        CLUSTER, [tenant("team-a"), tenant("b", "1G"), tenant("c", "5M")]
    )
    policy, binding = bandwidth_objects(objects)
    assert (policy["apiVersion"], policy["kind"]) == (ADMISSION, "ValidatingAdmissionPolicy")
    assert (binding["apiVersion"], binding["kind"]) == (
        ADMISSION,
        "ValidatingAdmissionPolicyBinding",
    )
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = {"key": LABEL, "operator": "Exists"}
    constraints = policy["spec"]["matchConstraints"]
    assert selector in constraints["namespaceSelector"]["matchExpressions"]
    assert selector in binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert constraints["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    assert policy["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY
    # Cluster-wide: a tenant's own compile does not carry it.
    assert bandwidth_objects(compile_tenant(CLUSTER, tenant("b", "1G"))) == []
    for obj in (policy, binding):
        assert [str(p) for p in validate_object(obj, kubernetes_version="1.33")] == []


def test_every_expression_compiles_in_the_cel_engine():
    policy, _ = bandwidth.admission_policy(cluster="demo", kubernetes_version="1.30")
    spec = policy["spec"]
    expressions = [v["expression"] for v in spec["variables"]]
    for validation in spec["validations"]:
        expressions += [validation["expression"], validation["messageExpression"]]
    for expression in expressions:
        cel.compile_check(expression)
    assert any("quantity(" in e and "isGreaterThan" in e for e in expressions)
    assert any("namespaceObject.metadata.labels[" in e for e in expressions)


def test_a_cluster_older_than_1_30_cannot_hold_a_cap():
    old = ClusterSpec(
        name="old", flavors=CLUSTER.flavors, kubernetes_version="1.29", enforcement="split"
    )
    compile_cluster(old, [tenant("team-a")])  # no cap: nothing needs the policy
    with pytest.raises(ValueError, match=r"Kubernetes 1.30 or later.*runs 1.29"):
        compile_cluster(old, [tenant("team-b", "1G")])


# --- the policy, run as the stand-in runs it ------------------------------------------------


def _admit(cap: str | None, annotations: dict[str, str] | None) -> str | None:
    """The denial (None: admitted) of a pod created in a namespace labelled with ``cap``."""
    policy, binding = bandwidth.admission_policy(cluster="demo", kubernetes_version="1.33")
    labels = {LABEL_MANAGED_BY: MANAGED_BY} | ({LABEL: cap} if cap else {})
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns"}
    if annotations is not None:
        metadata["annotations"] = annotations
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": []}}
    request = Request(
        operation="CREATE", group="", version="v1", versions=("v1",), kind="Pod",
        resource="pods", subresource="", namespace="ns", name="p", obj=pod, old=None,
        namespace_object={"metadata": {"name": "ns", "labels": labels}},
    )  # fmt: skip
    outcome = admit([policy], [binding], request, cel.evaluate)
    return outcome.denial[0] if outcome.denial else None


def test_a_pod_without_both_annotations_is_refused_saying_what_to_add():
    for given in (None, {}, {INGRESS: "10M"}, {EGRESS: "10M"}):
        denial = _admit("1G", given)
        assert denial is not None and "gpu-quota-portal-pod-bandwidth" in denial
        assert f"set the annotations {INGRESS} and {EGRESS} (each at most 1G)" in denial


@pytest.mark.parametrize(
    ("ingress", "egress", "refused"),
    [
        ("1G", "1G", None),
        ("1000M", "500M", None),
        ("10k", "999999k", None),
        ("1001M", "1G", f"{INGRESS} 1001M is above this namespace's cap of 1G"),
        ("1G", "2G", f"{EGRESS} 2G is above this namespace's cap of 1G"),
        ("1Gi", "1G", f"{INGRESS} 1Gi is above"),  # 1073741824 > 10^9
        ("fast", "1G", f"{INGRESS} fast is not a quantity"),
        ("-1G", "1G", f"{INGRESS} -1G is below 1k (1,000 bits per second)"),
        ("1G", "-500M", f"{EGRESS} -500M is below 1k (1,000 bits per second)"),
        ("0", "1G", f"{INGRESS} 0 is below 1k"),
        ("1G", "999", f"{EGRESS} 999 is below 1k"),
        ("1k", "1k", None),
    ],
)
def test_each_annotation_is_held_to_the_namespace_cap(ingress, egress, refused):
    denial = _admit("1G", {INGRESS: ingress, EGRESS: egress})
    if refused is None:
        assert denial is None
    else:
        assert denial is not None and refused in denial


def test_a_namespace_without_the_label_is_not_matched():
    assert _admit(None, None) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1000M", "1G"), ("1G", "1G"), ("1500000k", "1500M"), ("1Gi", "1Gi"), (" 10M ", "10M")],
)
def test_a_cap_is_kept_in_its_canonical_form(value, expected):
    assert bandwidth.pod_bandwidth_text(value) == expected


def test_a_cap_in_words():
    assert bandwidth.bandwidth_words("1G") == "1 Gbit/s"
    assert bandwidth.bandwidth_words("1500M") == "1.5 Gbit/s"
    assert bandwidth.bandwidth_words("10k") == "10 kbit/s"
    assert bandwidth.bandwidth_words("400G") == "400 Gbit/s"
