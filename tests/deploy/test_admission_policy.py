"""deploy/kubernetes/cluster-access/admission-policy.yaml: what RBAC cannot say about the
portal's writes (where, and which), refused at admission.

The policies are valid objects for the project's validator, their CEL compiles with the
portal's engine (``quotas.kube.cel``), and they are run as the API server runs them
(``devcluster.policies.admit``, the stand-in's admission) on requests made as the portal's
ServiceAccount, as the binder it impersonates and as anyone else: everything the compiler and
the GPU Operator passes write is admitted, and the ways a stolen token would take the cluster
are refused.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devcluster import policies
from quotas.kube import cel, portal_access
from quotas.kube.resources import kind_of
from quotas.kube.spec import LABEL_MANAGED_BY, MANAGED_BY
from quotas.kube.validate import validate_object
from tenants.namespaces import PORTAL_NAMESPACE_DEFAULT, SYSTEM_NAMESPACES
from tests.deploy.manifests import overlay

PORTAL = portal_access.PORTAL_USERNAME
BINDER = portal_access.BINDER_USERNAME
WEB = portal_access.WEB_USERNAME
AGENT = "system:serviceaccount:gpu-agent:gpu-agent"  # deploy/kubernetes/node-agent
ADMIN = "kubernetes-admin"
Obj = dict[str, Any]


def _policies() -> tuple[list[Obj], list[Obj]]:
    objects = overlay("in-cluster")
    return (
        [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"],
        [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"],
    )


POLICIES, BINDINGS = _policies()
PLURALS = {
    ("", "Namespace"): "namespaces",
    ("", "Node"): "nodes",
    ("", "Pod"): "pods",
    ("", "ConfigMap"): "configmaps",
    ("", "ResourceQuota"): "resourcequotas",
    ("", "LimitRange"): "limitranges",
    ("", "ServiceAccount"): "serviceaccounts",
    ("networking.k8s.io", "NetworkPolicy"): "networkpolicies",
    ("rbac.authorization.k8s.io", "RoleBinding"): "rolebindings",
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): "clusterrolebindings",
    ("scheduling.k8s.io", "PriorityClass"): "priorityclasses",
    ("kueue.x-k8s.io", "ClusterQueue"): "clusterqueues",
    ("kueue.x-k8s.io", "Cohort"): "cohorts",
    ("kueue.x-k8s.io", "ResourceFlavor"): "resourceflavors",
    ("kueue.x-k8s.io", "WorkloadPriorityClass"): "workloadpriorityclasses",
    ("kueue.x-k8s.io", "LocalQueue"): "localqueues",
    ("kueue.x-k8s.io", "Workload"): "workloads",
    ("scheduling.volcano.sh", "Queue"): "queues",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): "validatingadmissionpolicies",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): (
        "validatingadmissionpolicybindings"
    ),
}


def namespace(name: str, *, managed: bool) -> Obj:
    labels = {"kubernetes.io/metadata.name": name}
    if managed:
        labels[LABEL_MANAGED_BY] = MANAGED_BY
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


NAMESPACES = {
    "team-a-training": namespace("team-a-training", managed=True),
    "team-b-training": namespace("team-b-training", managed=True),
    "research": namespace("research", managed=False),
    "kube-system": namespace("kube-system", managed=False),
    "gpu-operator": namespace("gpu-operator", managed=False),
}


def admit(
    user: str,
    operation: str,
    obj: Obj | None,
    old: Obj | None = None,
    *,
    subresource: str = "",
    extra: dict[str, list[str]] | None = None,
    dry_run: bool = False,
) -> str | None:
    """The denial (its message) of a request by ``user``, or None when it is admitted."""
    shown = obj if obj is not None else old
    assert shown is not None
    group, _, version = str(shown["apiVersion"]).rpartition("/")
    metadata = shown["metadata"]
    ns = str(metadata.get("namespace") or "")
    request = policies.Request(
        operation=operation,
        group=group,
        version=version,
        versions=(version,),
        kind=shown["kind"],
        resource=PLURALS[(group, shown["kind"])],
        subresource=subresource,
        namespace=ns,
        name=str(metadata["name"]),
        obj=obj,
        old=old,
        namespace_object=NAMESPACES.get(ns) if ns else None,
        username=user,
        groups=("system:serviceaccounts", "system:authenticated"),
        extra=extra or {},
        dry_run=dry_run,
    )
    outcome = policies.admit(POLICIES, BINDINGS, request, cel.evaluate)
    return outcome.denial[0] if outcome.denial else None


def obj(kind: str, name: str, namespace: str = "", api: str = "v1", **fields: Any) -> Obj:
    metadata: Obj = {"name": name, "labels": fields.pop("labels", {})}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": metadata, **fields}


OWNED = {LABEL_MANAGED_BY: MANAGED_BY}
RBAC = "rbac.authorization.k8s.io/v1"


def role_binding(namespace: str, role: str, *subjects: Obj, name: str = "b") -> Obj:
    return obj(
        "RoleBinding",
        name,
        namespace,
        RBAC,
        labels=dict(OWNED),
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        subjects=list(subjects),
    )


def user(name: str) -> Obj:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


def account(name: str, namespace: str) -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": namespace}


def node(labels: dict[str, str], annotations: dict[str, str] | None = None, **spec: Any) -> Obj:
    found = obj("Node", "gpu-node-1", labels=labels)
    found["metadata"]["annotations"] = annotations or {}
    found["spec"] = {"podCIDR": "10.0.1.0/24", **spec}
    return found


# --- the objects themselves -----------------------------------------------------------------


def test_the_policies_are_valid_and_their_cel_compiles() -> None:
    assert {p["metadata"]["name"] for p in POLICIES} == {
        "gpu-quota-portal-confinement",
        "gpu-quota-portal-binder",
        "gpu-quota-portal-web",
        "gpu-agent-device-plugin-only",
    }
    assert {b["spec"]["policyName"] for b in BINDINGS} >= {p["metadata"]["name"] for p in POLICIES}
    for found in [*POLICIES, *BINDINGS]:
        assert validate_object(found, kubernetes_version="1.33") == []
    for policy in POLICIES:
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail"
        for part in ("matchConditions", "variables", "validations"):
            for entry in spec.get(part, []):
                cel.compile_check(entry["expression"])
                if "messageExpression" in entry:
                    cel.compile_check(entry["messageExpression"])
    for binding in BINDINGS:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]  # every request the policy matches


def test_the_policies_match_the_portal_and_the_binder_by_username() -> None:
    conditions = {
        p["metadata"]["name"]: [c["expression"] for c in p["spec"]["matchConditions"]]
        for p in POLICIES
    }
    assert conditions == {
        "gpu-quota-portal-confinement": [f"request.userInfo.username == '{PORTAL}'"],
        "gpu-quota-portal-binder": [f"request.userInfo.username == '{BINDER}'"],
        "gpu-quota-portal-web": [f"request.userInfo.username == '{WEB}'"],
        "gpu-agent-device-plugin-only": [f"request.userInfo.username == '{AGENT}'"],
    }


def test_the_system_namespaces_are_those_the_portal_refuses_tenants() -> None:
    """The policy's list is tenants.namespaces' (a tenant can never have one), plus the portal's
    namespace and the node agent's."""
    confinement = next(p for p in POLICIES if p["metadata"]["name"].endswith("confinement"))
    [expression] = [
        v["expression"] for v in confinement["spec"]["variables"] if v["name"] == "systemNamespace"
    ]
    for pattern, _ in SYSTEM_NAMESPACES:
        if pattern.endswith("*"):
            assert f"request.name.startsWith('{pattern[:-1]}')" in expression, pattern
        else:
            assert f"'{pattern}'" in expression, pattern
    assert f"'{PORTAL_NAMESPACE_DEFAULT}'" in expression
    assert "'gpu-agent'" in expression
    for name in ("kube-system", "kube-public", "default", "gpu-operator", "gpu-agent"):
        labelled = namespace(name, managed=True)
        assert admit(PORTAL, "UPDATE", labelled, namespace(name, managed=False)), name


# --- what the portal does is admitted ---------------------------------------------------------


def every_write_of_the_portal() -> list[Obj]:
    from tests.deploy.test_rbac import every_feature_objects

    return every_feature_objects()


@pytest.mark.django_db
def test_every_object_the_portal_compiles_is_admitted_as_the_portal() -> None:
    objects = every_write_of_the_portal()
    tenant_namespaces = {
        o["metadata"]["name"]: copy.deepcopy(o) for o in objects if o["kind"] == "Namespace"
    }
    assert tenant_namespaces
    NAMESPACES.update(tenant_namespaces)
    try:
        kinds = set()
        for found in objects:
            kinds.add(found["kind"])
            if kind_of(found).group == "admissionregistration.k8s.io":
                continue  # never admitted by a policy; RBAC names them (test_rbac)
            for operation, new, old in (
                ("CREATE", found, None),
                ("UPDATE", found, found),
                ("DELETE", None, found),
            ):
                if operation == "DELETE" and found["kind"] == "Namespace":
                    continue  # never pruned
                denial = admit(PORTAL, operation, new, old)
                assert denial is None, f"{operation} {found['kind']} {found['metadata']}: {denial}"
        assert {"Namespace", "RoleBinding", "ConfigMap", "ClusterQueue"} <= kinds
        # Its own namespace binding, written by the binder and re-applied by the portal.
        [binding] = [o for o in objects if portal_access.is_namespace_role_binding(o)]
        assert admit(BINDER, "CREATE", binding) is None
        assert admit(BINDER, "UPDATE", binding, binding) is None
        assert admit(PORTAL, "UPDATE", binding, binding) is None
    finally:
        for name in tenant_namespaces:
            NAMESPACES.pop(name, None)
        NAMESPACES.update(
            {n: namespace(n, managed=n.startswith("team-")) for n in NAMESPACES}
        )  # as they were


def test_the_gpu_operator_passes_and_suspensions_are_admitted() -> None:
    # The MIG push: its ConfigMap, then the node's labels and annotation.
    mig = obj(
        "ConfigMap",
        "gpu-portal-mig-parted-config",
        "gpu-operator",
        labels={LABEL_MANAGED_BY: "gpu-quota-portal-mig"},
        data={"config.yaml": "version: v1\n"},
    )
    assert admit(PORTAL, "CREATE", mig) is None
    assert admit(PORTAL, "UPDATE", mig, mig) is None
    before = node({"nvidia.com/gpu.product": "H100", "nvidia.com/mig.config": "all-disabled"})
    after = node(
        {
            "nvidia.com/gpu.product": "H100",
            "nvidia.com/mig.config": "portal-abc",
            "nvidia.com/mig.config.state": "pending",
        },
        {"portal.gpu-quota.io/mig-config": "portal-abc"},
    )
    assert admit(PORTAL, "UPDATE", after, before) is None
    # Time slicing: the label and its annotation, removed again; the plugin pod deleted.
    shared = node(
        {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/device-plugin.config": "t4-shared"},
        {"portal.gpu-quota.io/device-plugin-config": "t4-shared@1234"},
    )
    plain = node({"nvidia.com/gpu.product": "Tesla-T4"})
    assert admit(PORTAL, "UPDATE", shared, plain) is None
    assert admit(PORTAL, "UPDATE", plain, shared) is None
    plugin = obj(
        "Pod", "plugin-t4", "gpu-operator", labels={"app": "nvidia-device-plugin-daemonset"}
    )
    assert admit(PORTAL, "DELETE", None, plugin) is None
    # An idle workload suspended in a tenant's namespace.
    workload = obj("Workload", "idle", "team-b-training", "kueue.x-k8s.io/v1beta2", spec={})
    suspended = copy.deepcopy(workload)
    suspended["spec"]["active"] = False
    assert admit(PORTAL, "UPDATE", suspended, workload) is None


# --- what a stolen token would do is refused --------------------------------------------------


def test_the_portal_cannot_write_outside_its_namespaces() -> None:
    aws_auth = obj("ConfigMap", "aws-auth", "kube-system", data={"mapRoles": "- rolearn: x"})
    changed = copy.deepcopy(aws_auth)
    changed["data"]["mapRoles"] += "\n- rolearn: attacker"
    assert "only in namespaces labelled" in (admit(PORTAL, "UPDATE", changed, aws_auth) or "")
    for ns in ("kube-system", "research", "gpu-operator"):
        quota = obj("ResourceQuota", "q", ns, labels=dict(OWNED), spec={"hard": {}})
        assert admit(PORTAL, "CREATE", quota), ns
        account_ = obj("ServiceAccount", "x", ns, labels=dict(OWNED))
        assert admit(PORTAL, "CREATE", account_), ns
    # In gpu-operator: another ConfigMap, or a pod that is not the device plugin's.
    other = obj("ConfigMap", "default-mig-parted-config", "gpu-operator", data={})
    assert admit(PORTAL, "UPDATE", other, other)
    assert admit(PORTAL, "CREATE", other)
    for app in ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset", None):
        pod = obj("Pod", "p", "gpu-operator", labels={"app": app} if app else {})
        assert admit(PORTAL, "DELETE", None, pod), app
    # The same write in a namespace it manages is admitted.
    quota = obj("ResourceQuota", "q", "team-a-training", labels=dict(OWNED), spec={"hard": {}})
    assert admit(PORTAL, "CREATE", quota) is None


def test_the_portal_binds_only_the_tenant_roles_to_people_and_tenant_accounts() -> None:
    ns = "team-a-training"
    alice = user("alice@example.org")
    assert admit(PORTAL, "CREATE", role_binding(ns, "edit", alice)) is None
    assert (
        admit(PORTAL, "CREATE", role_binding(ns, "view", account("team-a-workloads", ns))) is None
    )
    assert admit(PORTAL, "CREATE", role_binding(ns, "admin", alice))
    assert admit(PORTAL, "CREATE", role_binding(ns, "cluster-admin", alice))
    # Itself, by its ServiceAccount or its username; every service account; system groups.
    for subject in (
        account("gpu-quota-portal", "gpu-quota-portal"),
        user(PORTAL),
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Group",
            "name": "system:serviceaccounts",
        },
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"},
    ):
        assert admit(PORTAL, "CREATE", role_binding(ns, "edit", subject)), subject
    # A Role of the namespace (one the portal could write) is not a tenant role either.
    local = role_binding(ns, "edit", alice)
    local["roleRef"]["kind"] = "Role"
    assert admit(PORTAL, "CREATE", local)
    # edit in kube-system, to anyone.
    assert admit(PORTAL, "CREATE", role_binding("kube-system", "edit", alice))
    # Its own namespace role: to itself only, under its own name.
    own = portal_access.namespace_role_binding({"namespace": ns, "labels": dict(OWNED)})
    assert admit(PORTAL, "CREATE", own) is None
    other = copy.deepcopy(own)
    other["subjects"] = [user("mallory@example.org")]
    assert admit(PORTAL, "CREATE", other)


def test_the_binder_writes_the_portal_binding_in_managed_namespaces_only() -> None:
    own = portal_access.namespace_role_binding({"namespace": "team-a-training", "labels": OWNED})
    assert admit(BINDER, "CREATE", own) is None
    for ns in ("kube-system", "research", "gpu-operator"):
        elsewhere = copy.deepcopy(own)
        elsewhere["metadata"]["namespace"] = ns
        assert admit(BINDER, "CREATE", elsewhere), ns
    assert admit(BINDER, "CREATE", role_binding("team-a-training", "edit", user("x@example.org")))
    widened = copy.deepcopy(own)
    widened["subjects"].append(user("mallory@example.org"))
    assert admit(BINDER, "CREATE", widened)
    assert admit(BINDER, "DELETE", None, own)
    assert admit(BINDER, "CREATE", obj("ConfigMap", "x", "team-a-training", data={}))


def test_the_portal_creates_and_adopts_namespaces_by_the_rules() -> None:
    assert admit(PORTAL, "CREATE", namespace("team-c", managed=True)) is None
    assert "namespaces labelled" in (
        admit(PORTAL, "CREATE", namespace("team-c", managed=False)) or ""
    )
    # Adoption: an existing namespace labelled, unless it is a system one.
    assert (
        admit(PORTAL, "UPDATE", namespace("research", managed=True), NAMESPACES["research"]) is None
    )
    for name in ("kube-system", "kube-node-lease", "default", "kueue-system", "openshift-x"):
        assert admit(
            PORTAL, "UPDATE", namespace(name, managed=True), namespace(name, managed=False)
        )
    # A change that leaves (or takes) the label off; a delete.
    assert admit(PORTAL, "UPDATE", namespace("research", managed=False), NAMESPACES["research"])
    assert admit(PORTAL, "DELETE", None, NAMESPACES["team-a-training"])


def test_the_portal_changes_only_its_own_node_labels() -> None:
    before = node({"nvidia.com/gpu.product": "H100", "node-role.kubernetes.io/worker": ""})
    for labels in (
        {"nvidia.com/gpu.product": "H100", "node-role.kubernetes.io/worker": "", "x": "1"},
        {"nvidia.com/gpu.product": "A100", "node-role.kubernetes.io/worker": ""},
        {"nvidia.com/gpu.product": "H100"},
        {
            "nvidia.com/gpu.product": "H100",
            "node-role.kubernetes.io/worker": "",
            "nvidia.com/gpu.deploy.driver": "false",  # the GPU Operator's driver switched off
        },
    ):
        assert "only the labels" in (admit(PORTAL, "UPDATE", node(labels), before) or ""), labels
    tainted = node(
        dict(before["metadata"]["labels"]),
        taints=[{"key": "x", "effect": "NoSchedule"}],
    )
    assert admit(PORTAL, "UPDATE", tainted, before)
    unschedulable = node(dict(before["metadata"]["labels"]), unschedulable=True)
    assert admit(PORTAL, "UPDATE", unschedulable, before)
    annotated = node(dict(before["metadata"]["labels"]), {"other.io/x": "1"})
    assert admit(PORTAL, "UPDATE", annotated, before)
    assert admit(PORTAL, "DELETE", None, before)
    assert admit(PORTAL, "UPDATE", before, before, subresource="status")


def test_the_portal_writes_only_its_own_cluster_scoped_objects() -> None:
    theirs = obj(
        "PriorityClass", "system-cluster-critical", api="scheduling.k8s.io/v1", value=2000000000
    )
    taken = copy.deepcopy(theirs)
    taken["metadata"]["labels"] = dict(OWNED)
    assert admit(PORTAL, "UPDATE", taken, theirs)  # taking over by adding the label
    assert admit(PORTAL, "DELETE", None, theirs)
    other_queue = obj("ClusterQueue", "ml-platform", api="kueue.x-k8s.io/v1beta2", spec={})
    assert admit(PORTAL, "DELETE", None, other_queue)
    # Kinds it never writes, labelled or not.
    grab = obj(
        "ClusterRoleBinding",
        "grab",
        api=RBAC,
        labels=dict(OWNED),
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        subjects=[account("gpu-quota-portal", "gpu-quota-portal")],
    )
    assert admit(PORTAL, "CREATE", grab)
    # A pod's eviction, a token for an account: subresources.
    assert admit(PORTAL, "CREATE", obj("Pod", "p", "team-a-training"), subresource="eviction")


def test_anyone_else_is_not_matched() -> None:
    aws_auth = obj("ConfigMap", "aws-auth", "kube-system", data={})
    assert admit(ADMIN, "UPDATE", aws_auth, aws_auth) is None
    assert admit(ADMIN, "CREATE", role_binding("kube-system", "admin", user("ops"))) is None
    other = "system:serviceaccount:gpu-quota-portal:default"
    assert admit(other, "CREATE", namespace("x", managed=False)) is None


def test_the_node_agent_deletes_only_device_plugin_pods_on_its_own_node() -> None:
    def pod(name: str, app: str, node_name: str) -> Obj:
        found = obj("Pod", name, "gpu-operator", labels={"app": app})
        found["spec"] = {"nodeName": node_name}
        return found

    plugin = pod("plugin-1", "nvidia-device-plugin-daemonset", "gpu-node-1")
    driver = pod("driver-1", "nvidia-driver-daemonset", "gpu-node-1")
    assert admit(AGENT, "DELETE", None, plugin) is None
    assert "device plugin" in (admit(AGENT, "DELETE", None, driver) or "")
    # A bound pod token names its node: the agent of gpu-node-2 cannot restart gpu-node-1's.
    on = {"authentication.kubernetes.io/node-name": ["gpu-node-1"]}
    off = {"authentication.kubernetes.io/node-name": ["gpu-node-2"]}
    assert admit(AGENT, "DELETE", None, plugin, extra=on) is None
    assert "own node gpu-node-2" in (admit(AGENT, "DELETE", None, plugin, extra=off) or "")
    elsewhere = copy.deepcopy(plugin)
    elsewhere["metadata"]["namespace"] = "kube-system"
    assert admit(AGENT, "DELETE", None, elsewhere)
    assert admit(AGENT, "CREATE", plugin)
    assert admit(AGENT, "UPDATE", plugin, plugin)


# --- the web pods' account ----------------------------------------------------------------------


def workload(namespace: str = "team-a-training", **spec: Any) -> Obj:
    """A Kueue Workload as Kueue's job integration makes it, suspended by the idle rule."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "notebook-idle",
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/job-uid": "1234"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "notebook", "uid": "1234"}
            ],
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {
            "active": False,
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}],
            **spec,
        },
    }


@pytest.mark.django_db
def test_the_web_pods_write_nothing_but_dry_runs() -> None:
    """Every object the portal compiles, as the web pods' dry run of it (admitted), and for
    real (refused): a create, an update, a delete."""
    objects = [
        o
        for o in every_write_of_the_portal()
        if kind_of(o).group != "admissionregistration.k8s.io"  # never admitted by a policy
    ]
    assert objects
    for found in objects:
        for operation, new, old in (
            ("CREATE", found, None),
            ("UPDATE", found, found),
            ("DELETE", None, found),
        ):
            assert admit(WEB, operation, new, old, dry_run=True) is None, found["metadata"]
            denial = admit(WEB, operation, new, old) or ""
            assert "the web pods write nothing but dry runs" in denial, found["metadata"]
    # Nor anything else: a binding in kube-system, a subresource, a Pod.
    assert admit(WEB, "CREATE", role_binding("kube-system", "edit", user("x@example.org")))
    assert admit(WEB, "UPDATE", workload(active=True), workload(), subresource="status")
    pod = obj("Pod", "x", "team-a-training", spec={"containers": []})
    assert admit(WEB, "CREATE", pod)
    assert admit(WEB, "CREATE", pod, dry_run=True) is None  # RBAC refuses that one


def test_the_web_pods_reactivate_a_workload_and_change_nothing_else() -> None:
    suspended = workload()
    assert admit(WEB, "UPDATE", workload(active=True), suspended) is None
    assert admit(WEB, "UPDATE", workload(active=False), workload(active=True)) is None
    # Anything else of the Workload, with or without spec.active.
    for change in (
        {"queueName": "other"},
        {"priority": 1000000},
        {"maximumExecutionTimeSeconds": 1},
        {"podSets": []},
        {"priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass"}},
    ):
        assert admit(WEB, "UPDATE", workload(active=True, **change), suspended), change
    dropped = workload(active=True)
    del dropped["spec"]["queueName"]
    assert admit(WEB, "UPDATE", dropped, suspended)
    for field, value in (
        ("labels", {"kueue.x-k8s.io/job-uid": "other"}),
        ("annotations", {"x": "y"}),
        ("ownerReferences", []),
        ("finalizers", []),
    ):
        changed = workload(active=True)
        changed["metadata"][field] = value
        assert admit(WEB, "UPDATE", changed, suspended), field
    # Only in the portal's namespaces; never created or deleted.
    assert admit(WEB, "UPDATE", workload("research", active=True), workload("research"))
    assert admit(WEB, "CREATE", workload(active=True))
    assert admit(WEB, "DELETE", None, suspended)


def test_the_portal_changes_only_a_workloads_spec_active() -> None:
    """Its namespace role may patch Workloads (suspend an idle one, reactivate it): the policy
    holds that patch to spec.active, as it does the web pods'."""
    suspended = workload()
    assert admit(PORTAL, "UPDATE", workload(active=True), suspended) is None
    assert admit(PORTAL, "UPDATE", suspended, workload(active=True)) is None
    for change in ({"queueName": "other"}, {"priority": 1000000}, {"podSets": []}):
        assert admit(PORTAL, "UPDATE", workload(active=True, **change), suspended), change
    relabelled = workload()
    relabelled["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "other"}
    assert admit(PORTAL, "UPDATE", relabelled, suspended)
    assert admit(PORTAL, "CREATE", suspended)
    assert admit(PORTAL, "DELETE", None, suspended)
