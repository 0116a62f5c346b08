"""The ClusterRole in deploy/kubernetes/cluster-access is exactly what the portal uses in a
managed cluster: no verb less (a push, a collection or the MIG push would be refused) and no
verb more (a stolen token would do more than the portal ever does).

What it needs is derived twice and the union compared with the role:

- from the compiler: a cluster spec with every feature on (Kueue with its admission policy,
  Volcano, per-tenant RBAC, MIG flavors, storage) and the MIG operator's ConfigMap, each kind
  with the applier's verbs (list what it owns, server-side apply = patch, and create for what
  does not exist yet, delete to prune unless the kind is never pruned), and ``bind`` on the
  ClusterRoles the tenants' RoleBindings name;
- from the calls: the push, a prune, the usage collector, an idle workload's suspension and
  the MIG push through the GPU Operator run against the local stand-in, which counts every
  request by verb and kind.

Kinds become resource names through the stand-in's discovery documents, as kubectl does.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from kubernetes import config
from kubernetes.dynamic import DynamicClient

from devcluster.kueue_sim import IDLE_NAME, Endpoint, simulate_once
from devcluster.runner import Handle
from gpu_agent import operator
from gpu_agent.models import Gpu
from gpu_agent.services import layouts
from gpu_agent.services.time_slicing import time_slicing_push
from quotas.backends import workload_set_active
from quotas.choices import MigDriver
from quotas.kube import bandwidth, compiler, enforcement, names, portal_access, vgpu
from quotas.kube.resources import KINDS, NODE, POD, WORKLOAD, kind_of
from quotas.kube.spec import ClusterSpec, FlavorSpec, QuotaSpec, TenantSpec
from quotas.models import Cluster, ResourceFlavor
from quotas.sync import cluster_reconcile
from tests.conftest import World
from tests.deploy.manifests import discovery, find, overlay
from tests.gpu_agent.test_operator_services import BALANCED, k8s_node, portal_node, settled
from tests.gpu_agent.test_time_slicing import device_plugin_pod, t4_flavor
from tests.kube.test_compiler import demo_cluster, medium_tenant
from tests.standin import point_at
from usage import collector

T4_VGPU = FlavorSpec(
    "t4-vgpu",
    "vgpu",
    {
        "nvidia.com/gpu": Decimal(10),
        "nvidia.com/gpumem": Decimal(15360 * 2**20),
        "nvidia.com/gpucores": Decimal(100),
    },
    gpu_model="Tesla-T4",
    gpu_memory_mib=15360,
    vgpu_split=10,
)
Grant = tuple[str, str, str, str]  # API group, resource, verb, resource name ("*": any)
# The request verbs the stand-in counts, as RBAC verbs: a server-side apply is a patch, and a
# create where the object does not exist yet (the first push creates everything).
RBAC_VERBS = {
    "apply": ("patch", "create"),
    "patch": ("patch",),
    "get": ("get",),
    "list": ("list",),
    "watch": ("watch",),
    "create": ("create",),
    "update": ("update",),
    "delete": ("delete",),
    "deletecollection": ("deletecollection",),
}


def granted(role: dict[str, Any]) -> set[Grant]:
    return {
        (group, resource, verb, name)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or ["*"]
    }


def resource_of(served: dict[tuple[str, str], str], group: str, kind: str) -> tuple[str, str]:
    assert (group, kind) in served, f"the stand-in does not serve {kind} ({group or 'core'})"
    return group, served[(group, kind)]


def by_kind_name(served: dict[tuple[str, str], str]) -> dict[str, tuple[str, str]]:
    """Kind -> (group, resource): the stand-in's request counts name the kind only."""
    counts = Counter(kind for _, kind in served)
    return {kind: (group, plural) for (group, kind), plural in served.items() if counts[kind] == 1}


def every_feature_objects() -> list[dict[str, Any]]:
    """What the compiler emits for a cluster with everything on, plus the MIG push's ConfigMap."""
    spec, tenant = every_feature_tenant()
    objects = list(compiler.compile_cluster(spec, [tenant]))
    plan = operator.compile_operator([], now=timezone.now())
    objects.append(
        operator.configmap(
            plan,
            cluster=spec.name,
            namespace=MIG_NAMESPACE,
            name=MIG_CONFIGMAP,
            key="config.yaml",
        )
    )
    return objects


def every_feature_tenant() -> tuple[ClusterSpec, TenantSpec]:
    """A cluster with everything on (Kueue with its admission policy, Volcano) and a tenant
    with every kind of quota, scheduling and RBAC."""
    spec = demo_cluster(has_kueue=True, enforcement="kueue", has_volcano=True)
    # vGPU shares through HAMi: their admission policy.
    spec = dataclasses.replace(spec, flavors=(*spec.flavors, T4_VGPU), hami_version="v2.7.1")
    tenant = medium_tenant(
        "team-a",
        quotas=(
            QuotaSpec("h100-80gb", "nvidia.com/gpu", Decimal(4), Decimal(8)),
            QuotaSpec("h100-mig-1g-10gb", "nvidia.com/mig-1g.10gb", Decimal(2), Decimal(4)),
            QuotaSpec("fast-ssd", "storage", Decimal(2**40), Decimal(2**40)),
            QuotaSpec("t4-vgpu", "nvidia.com/gpumem", Decimal(2**30), Decimal(2**30)),
        ),
        split_by_priority=True,
        pod_bandwidth_max="1G",  # the bandwidth admission policy
        editors=("alice@example.org",),
        viewers=("bob@example.org",),
    )
    return spec, tenant


# Where a grant lives: the roles of the portal's account and the one it impersonates.
CLUSTER = "cluster"  # ClusterRole gpu-quota-portal, bound cluster-wide
NAMESPACE = "namespace"  # ClusterRole gpu-quota-portal-namespace, bound in each managed namespace
GPU_OPERATOR = "gpu-operator"  # Role gpu-quota-portal-gpu-operator
BINDER = "binder"  # ClusterRole gpu-quota-portal-binder, the account the portal impersonates
ROLES = {
    CLUSTER: ("ClusterRole", "gpu-quota-portal"),
    NAMESPACE: ("ClusterRole", portal_access.NAMESPACE_ROLE),
    GPU_OPERATOR: ("Role", "gpu-quota-portal-gpu-operator"),
    BINDER: ("ClusterRole", "gpu-quota-portal-binder"),
}
MIG_NAMESPACE = str(Cluster._meta.get_field("mig_operator_namespace").default)
MIG_CONFIGMAP = str(Cluster._meta.get_field("mig_operator_configmap").default)
# ConfigMaps the portal reads by name (get): Kueue's configuration and its own two.
READ_BY_NAME = {
    (enforcement.KUEUE_CONFIG_NAMESPACE, enforcement.KUEUE_CONFIG_NAME),
    (MIG_NAMESPACE, MIG_CONFIGMAP),
    (names.TIME_SLICING_NAMESPACE, names.TIME_SLICING_CONFIGMAP),
}
# A need: (group, resource, verb, name); name None where the stand-in's counts do not say which.
Need = tuple[str, str, str, str | None]
Needs = dict[str, set[Need]]
WRITES = ("create", "patch", "delete", "update", "deletecollection")
NAMED_VERBS = ("get", "patch", "delete", "update")  # RBAC can hold these to names


def _place(namespace: str | None) -> str:
    if not namespace:
        return CLUSTER
    return GPU_OPERATOR if namespace == MIG_NAMESPACE else NAMESPACE


def compiled_requirements(served: dict[tuple[str, str], str]) -> Needs:
    """Each compiled object's verbs, where it lives: listed cluster-wide (list, no name); written
    (server-side apply: patch, create where missing; delete to prune unless never pruned) in its
    namespace, by name where RBAC can say it; bind on the ClusterRoles the RoleBindings name.
    The portal's own RoleBinding of a namespace is written by the binder it impersonates."""
    needed: Needs = {place: set() for place in ROLES}
    for obj in every_feature_objects():
        kind = kind_of(obj)
        group, resource = resource_of(served, kind.group, kind.kind)
        name = str(obj["metadata"]["name"])
        needed[CLUSTER].add((group, resource, "list", "*"))
        place = _place(obj["metadata"].get("namespace"))
        verbs = ["patch", "create"] + ([] if kind.never_prune else ["delete"])
        role_ref = obj.get("roleRef") or {}
        if portal_access.is_namespace_role_binding(obj):
            assert portal_access.impersonation_for(obj) == {
                "Impersonate-User": portal_access.BINDER_USERNAME
            }
            place, verbs = BINDER, ["patch", "create"]  # never pruned: namespaces are not
        for verb in verbs:
            needed[place].add((group, resource, verb, name if verb in NAMED_VERBS else "*"))
        if role_ref.get("kind") == "ClusterRole":
            needed[place].add(
                ("rbac.authorization.k8s.io", "clusterroles", "bind", role_ref["name"])
            )
    return needed


def satisfied(need: Need, grants: set[Grant]) -> bool:
    return any(
        grant[:3] == need[:3] and (grant[3] == "*" or need[3] is None or grant[3] == need[3])
        for grant in grants
    )


def used(grant: Grant, needs: set[Need]) -> bool:
    return any(satisfied(need, {grant}) for need in needs)


def _counts(handle: Handle) -> Counter[str]:
    return Counter(handle.stats()["verb_kinds"])


class Recorder:
    """The requests the portal's own code makes, step by step (what the test itself sends to
    set the scene is left out)."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.seen: Counter[str] = Counter()

    def __enter__(self) -> Recorder:
        self.before = _counts(self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self.seen.update(_counts(self.handle) - self.before)


def observed_requirements(recorded: Counter[str], served: dict[tuple[str, str], str]) -> Needs:
    """The counted requests as grants, where they happen: reads cluster-wide (a get by the
    names in READ_BY_NAME), writes of namespaced kinds in the tenants' namespaces, but the
    ConfigMaps and Pods of the GPU Operator's namespace (the MIG and time-slicing ConfigMaps,
    the device plugin's pods)."""
    kinds = by_kind_name(served)
    namespaced = {k.plural for k in (*KINDS, NODE, POD, WORKLOAD) if k.namespaced}
    needed: Needs = {place: set() for place in ROLES}
    for verb_kind in recorded:
        verb, kind = verb_kind.split(" ", 1)
        group, resource = kinds[kind]
        for rbac in RBAC_VERBS[verb]:
            if rbac == "get" and resource == "configmaps":
                needed[CLUSTER] |= {(group, resource, "get", n) for _, n in READ_BY_NAME}
            elif rbac == "get" and resource == "deployments":  # HAMi's, for its version
                needed[CLUSTER].add((group, resource, "get", vgpu.HAMI_DEPLOYMENT))
            elif rbac not in WRITES or resource not in namespaced:
                needed[CLUSTER].add((group, resource, rbac, None))
            elif resource in {"configmaps", "pods"}:
                needed[GPU_OPERATOR].add((group, resource, rbac, None))
            else:
                needed[NAMESPACE].add((group, resource, rbac, None))
    return needed


@pytest.fixture
def dynamic(standin: Handle) -> DynamicClient:
    return DynamicClient(config.new_client_from_config(config_file=str(standin.kubeconfig_path)))


@pytest.mark.django_db
def test_the_cluster_role_holds_exactly_what_the_portal_uses(
    world: World, standin: Handle, dynamic: DynamicClient
) -> None:
    served = discovery(standin)
    record = Recorder(standin)

    # The push with every kind the demo cluster has (Kueue, its admission policy, Volcano),
    # then a prune: Volcano switched off, its queues go.
    Cluster.objects.filter(pk=world.a100.pk).update(has_volcano=True)
    world.a100.refresh_from_db()
    with record:
        assert cluster_reconcile(cluster=world.a100).ok
    Cluster.objects.filter(pk=world.a100.pk).update(has_volcano=False)
    world.a100.refresh_from_db()
    with record:
        outcome = cluster_reconcile(cluster=world.a100)
    assert outcome.ok
    assert "delete Queue" in record.seen

    # Usage: Kueue (the stand-in's simulation) admits an idle notebook; the collector reads
    # it, and its suspension patches the Workload.
    now = timezone.now()
    simulate_once(Endpoint.from_kubeconfig(standin.kubeconfig_path), now, idle="team-b")
    with record:
        assert collector.cluster_collect(cluster=world.a100, now=now).workloads == 1
        workload_set_active(
            cluster=world.a100, namespace="team-b-training", name=IDLE_NAME, active=False
        )

    # The MIG push through the GPU Operator: the ConfigMap, then the node's label.
    point_at(world.h100, standin.kubeconfig_path, mig_driver=MigDriver.GPU_OPERATOR)
    dynamic.resources.get(api_version="v1", kind="Namespace").create(
        body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}}
    )
    k8s_node(dynamic, "gpu-node-1", **{"nvidia.com/gpu.product": "H100"})
    node = portal_node(world.admin, world.h100, "gpu-node-1")
    gpu = Gpu.objects.filter(node=node).order_by("index").first()
    assert gpu is not None
    layouts.layout_set(gpu=gpu, instances=BALANCED, actor=world.admin)
    with record:
        settled(world.h100, seconds=0)
        pushed = settled(world.h100, seconds=120)
    assert pushed.problems == {} and "patch Node" in record.seen

    # Time-sliced GPUs: the node labelled with its sharing config, then, the content changed
    # under the same label, the device plugin's pod on it deleted.
    shared = t4_flavor(world.h100)
    k8s_node(dynamic, "t4-node-1", **{"nvidia.com/gpu.product": "Tesla-T4"})
    device_plugin_pod(dynamic, "t4-node-1")
    assert cluster_reconcile(cluster=world.h100).ok
    with record:
        assert time_slicing_push(cluster=world.h100).labelled == ["t4-node-1"]
    ResourceFlavor.objects.filter(pk=shared.pk).update(time_slicing_replicas=4)
    assert cluster_reconcile(cluster=world.h100).ok
    with record:
        assert time_slicing_push(cluster=world.h100).restarted
    assert "delete Pod" in record.seen

    compiled = compiled_requirements(served)
    observed = observed_requirements(record.seen, served)
    for overlay_name in ("in-cluster", "outside/managed-cluster"):
        objects = overlay(overlay_name)
        for place, (kind, name) in ROLES.items():
            needs = compiled[place] | observed[place]
            role = granted(find(objects, kind, name))
            lacking = sorted(str(n) for n in needs if not satisfied(n, role))
            unused = sorted(g for g in role if not used(g, needs))
            assert lacking == [], f"{overlay_name}: {kind} {name} lacks {lacking}"
            assert unused == [], f"{overlay_name}: {kind} {name} holds unused {unused}"


def test_the_role_reads_no_secret_watches_nothing_and_never_deletes_a_namespace() -> None:
    """What a reader of the roles wants to know at a glance, read from their rules as RBAC does."""
    objects = overlay("in-cluster")
    role = granted(find(objects, "ClusterRole", "gpu-quota-portal"))
    in_namespace = granted(find(objects, "ClusterRole", portal_access.NAMESPACE_ROLE))
    assert ("", "pods", "list", "*") in role
    assert ("", "pods", "watch", "*") not in role
    assert ("", "namespaces", "delete", "*") not in role  # namespaces are never pruned
    for grants in (role, in_namespace):
        assert not [g for g in grants if g[1] == "secrets"]
        assert not [g for g in grants if "*" in g[:3]]  # no wildcard group, resource or verb
    binds = {g[3] for g in in_namespace if g[2] == "bind"}
    assert binds == set(portal_access.TENANT_ROLES)


NAMESPACED = {k.plural for k in (*KINDS, NODE, POD, WORKLOAD) if k.namespaced}


def test_nothing_namespaced_is_written_or_bound_cluster_wide() -> None:
    """The cluster-wide role reads namespaced kinds and writes only cluster-scoped ones: no
    RoleBinding, ConfigMap, ServiceAccount or Pod anywhere (kube-system included) by it; no
    bind, escalate or impersonate."""
    role = granted(find(overlay("in-cluster"), "ClusterRole", "gpu-quota-portal"))
    writes = {(g[1], g[2]) for g in role if g[2] not in {"list", "get"}}
    assert writes
    assert not [w for w in writes if w[0] in NAMESPACED]
    assert not [g for g in role if g[2] in {"bind", "escalate", "impersonate"}]
    assert not [g for g in role if g[1] in {"clusterroles", "clusterrolebindings", "roles"}]
    # Reads by name only, where RBAC can: the ConfigMaps it gets, its own admission policies.
    assert {g[3] for g in role if g[:3] == ("", "configmaps", "get")} == {
        n for _, n in READ_BY_NAME
    }
    policies = {
        str(o["metadata"]["name"])
        for o in every_feature_objects()
        if o["apiVersion"].startswith("admissionregistration.k8s.io/")
    }
    assert {enforcement.POLICY_NAME, bandwidth.POLICY_NAME} <= policies
    for verb in ("patch", "delete"):
        named = {g[3] for g in role if g[2] == verb and g[0] == "admissionregistration.k8s.io"}
        assert named == policies
    # Never the policies that confine the portal itself.
    confining = {
        o["metadata"]["name"]
        for o in overlay("in-cluster")
        if o["apiVersion"].startswith("admissionregistration.k8s.io/")
    }
    assert confining and not confining & policies


@pytest.mark.parametrize("name", ["in-cluster", "outside/managed-cluster"])
def test_each_role_is_bound_where_the_design_says(name: str) -> None:
    objects = overlay(name)
    portal = {
        "kind": "ServiceAccount",
        "name": portal_access.PORTAL_SERVICE_ACCOUNT,
        "namespace": portal_access.PORTAL_NAMESPACE,
    }

    def bindings_of(role_kind: str, role_name: str) -> list[dict[str, Any]]:
        return [
            o
            for o in objects
            if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}
            and o["roleRef"]
            == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}
        ]

    [cluster_wide] = bindings_of("ClusterRole", "gpu-quota-portal")
    assert (cluster_wide["kind"], cluster_wide["subjects"]) == ("ClusterRoleBinding", [portal])
    # The namespace role is bound by the push, per namespace: never here, never cluster-wide.
    assert bindings_of("ClusterRole", portal_access.NAMESPACE_ROLE) == []
    [operator_binding] = bindings_of("Role", "gpu-quota-portal-gpu-operator")
    assert operator_binding["metadata"]["namespace"] == MIG_NAMESPACE
    assert operator_binding["subjects"] == [portal]
    # The binder: no token, bound to its own role, and the portal may impersonate it alone.
    binder = find(objects, "ServiceAccount", portal_access.BINDER_SERVICE_ACCOUNT)
    assert binder["automountServiceAccountToken"] is False
    assert not [
        o
        for o in objects
        if o["kind"] == "Secret"
        and (o["metadata"].get("annotations") or {}).get("kubernetes.io/service-account.name")
        == portal_access.BINDER_SERVICE_ACCOUNT
    ]
    [binder_binding] = bindings_of("ClusterRole", "gpu-quota-portal-binder")
    assert binder_binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": portal_access.BINDER_SERVICE_ACCOUNT,
            "namespace": portal_access.PORTAL_NAMESPACE,
        }
    ]
    impersonate = find(objects, "Role", "gpu-quota-portal-impersonate-binder")
    assert impersonate["metadata"]["namespace"] == portal_access.PORTAL_NAMESPACE
    assert granted(impersonate) == {
        ("", "serviceaccounts", "impersonate", portal_access.BINDER_SERVICE_ACCOUNT)
    }
    [impersonation] = bindings_of("Role", "gpu-quota-portal-impersonate-binder")
    assert impersonation["subjects"] == [portal]
    # Nothing else in the manifests may impersonate, escalate, or bind.
    for role in (o for o in objects if o["kind"] in {"Role", "ClusterRole"}):
        for grant in granted(role):
            if grant[2] == "impersonate":
                assert role is impersonate
            assert grant[2] != "escalate", role["metadata"]["name"]
            if grant[2] == "bind":
                assert grant[3] != "*", role["metadata"]["name"]


def test_the_web_reader_writes_nothing_it_cannot_dry_run() -> None:
    """The web pods' account cluster-wide: reads, and the server-side apply (patch, create) of
    the cluster-scoped kinds a tenant has, which the admission policy lets through as dry runs
    only. No delete, no Secret, no Pod, nothing namespaced written from this role (that is the
    portal's RoleBinding in each managed namespace), and bound to nothing else here."""
    objects = overlay("in-cluster")
    reader = granted(find(objects, "ClusterRole", "gpu-quota-portal-web"))
    writes = {(g[1], g[2]) for g in reader if g[2] not in {"get", "list"}}
    assert writes == {
        (resource, verb)
        for resource in ("namespaces", "clusterqueues", "queues")
        for verb in ("create", "patch")
    }
    assert not [g for g in reader if g[1] in {"secrets", "pods", "configmaps"}]
    assert not [g for g in reader if "*" in g[:3]]
    [binding] = [
        o
        for o in objects
        if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == "gpu-quota-portal-web"
    ]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": portal_access.WEB_SERVICE_ACCOUNT,
            "namespace": portal_access.PORTAL_NAMESPACE,
        }
    ]
    # Bound to nothing else in the manifests (the push binds it per namespace) but the node
    # join's reads and TokenReviews (node-join.yaml: nothing written, nothing namespaced written;
    # tests/gpu_agent/test_in_cluster_join.py checks it is what a join asks the cluster).
    [join] = [
        o
        for o in objects
        if o["kind"] == "ClusterRoleBinding"
        and o["roleRef"]["name"] == "gpu-quota-portal-node-join"
    ]
    assert join["subjects"] == binding["subjects"]
    assert granted(find(objects, "ClusterRole", "gpu-quota-portal-node-join")) == {
        ("authentication.k8s.io", "tokenreviews", "create", "*"),
        ("", "pods", "get", "*"),
        ("", "nodes", "get", "*"),
    }
    assert not [
        o
        for o in objects
        if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and o is not binding
        and o is not join
        and any(s.get("name") == portal_access.WEB_SERVICE_ACCOUNT for s in o["subjects"])
    ]


def web_compiled_requirements(served: dict[tuple[str, str], str]) -> Needs:
    """A tenant's dry run, from the compiler: each of its objects' kind listed, and written
    (server-side apply: patch, create where missing) in its place; bind on the roles its
    RoleBindings name. The portal's own RoleBinding is not dry run (the push writes it as the
    binder), and the guard reads a namespace the list did not find."""
    spec, tenant = every_feature_tenant()
    needed: Needs = {CLUSTER: {("", "namespaces", "get", "*")}, NAMESPACE: set()}
    for obj in compiler.compile_tenant(spec, tenant):
        if portal_access.is_namespace_role_binding(obj):
            continue
        kind = kind_of(obj)
        group, resource = resource_of(served, kind.group, kind.kind)
        needed[CLUSTER].add((group, resource, "list", "*"))
        place = NAMESPACE if kind.namespaced else CLUSTER
        needed[place] |= {(group, resource, verb, "*") for verb in ("patch", "create")}
        role_ref = obj.get("roleRef") or {}
        if role_ref.get("kind") == "ClusterRole":
            needed[NAMESPACE].add(
                ("rbac.authorization.k8s.io", "clusterroles", "bind", role_ref["name"])
            )
    return needed


def web_observed_requirements(recorded: Counter[str], served: dict[tuple[str, str], str]) -> Needs:
    """The counted requests of the web features: writes of namespaced kinds in the managed
    namespaces (the portal's RoleBinding there), everything else cluster-wide."""
    kinds = by_kind_name(served)
    needed: Needs = {CLUSTER: set(), NAMESPACE: set()}
    for verb_kind in recorded:
        verb, kind = verb_kind.split(" ", 1)
        group, resource = kinds[kind]
        for rbac in RBAC_VERBS[verb]:
            place = NAMESPACE if rbac in WRITES and resource in NAMESPACED else CLUSTER
            needed[place].add((group, resource, rbac, None))
    return needed


@pytest.mark.django_db
def test_the_web_reader_holds_exactly_what_the_web_features_use(
    world: World, standin: Handle
) -> None:
    """The web pods' account against the requests of every web feature that calls a cluster
    (docs/rbac.md): a tenant's live figures (quotas.sync.in_cluster), the storage left
    (alerts.selectors.storage_used), a quota request's server-side dry run (with Volcano on and
    a namespace the cluster does not have yet) and an alert's reactivation of a Workload. The
    ClusterRole gpu-quota-portal-web holds exactly the cluster-wide part; the namespaced writes
    are the portal's namespace role's, which binds the web account as its second subject."""
    from alerts.selectors import storage_used
    from approvals.services import quota_request_dry_run
    from quotas.sync import in_cluster
    from tenants.services import namespace_create
    from tests.approvals.conftest import file

    served = discovery(standin)
    Cluster.objects.filter(pk=world.a100.pk).update(has_volcano=True)
    world.a100.refresh_from_db()
    assert cluster_reconcile(cluster=world.a100).ok
    now = timezone.now()
    simulate_once(Endpoint.from_kubeconfig(standin.kubeconfig_path), now, idle="team-b")
    namespace_create(tenant=world.team_a, name="team-a-eval", purpose="general", actor=world.admin)
    record = Recorder(standin)
    with record:
        assert in_cluster(tenant=world.team_a, cluster=world.a100).reachable
        storage_used(tenant=world.team_a, cluster=world.a100)
        dry_run = quota_request_dry_run(request=file(world))
        workload_set_active(
            cluster=world.a100, namespace="team-b-training", name=IDLE_NAME, active=True
        )
    assert dry_run.server_checked, dry_run.server_message
    assert "apply Namespace" in record.seen and "get Namespace" in record.seen
    assert "apply Queue" in record.seen and "patch Workload" in record.seen

    compiled = web_compiled_requirements(served)
    observed = web_observed_requirements(record.seen, served)
    for overlay_name in ("in-cluster", "outside/managed-cluster"):
        objects = overlay(overlay_name)
        web = granted(find(objects, "ClusterRole", "gpu-quota-portal-web"))
        needs = compiled[CLUSTER] | observed[CLUSTER]
        assert sorted(str(n) for n in needs if not satisfied(n, web)) == [], overlay_name
        assert sorted(g for g in web if not used(g, needs)) == [], overlay_name
        in_namespace = granted(find(objects, "ClusterRole", portal_access.NAMESPACE_ROLE))
        needs = compiled[NAMESPACE] | observed[NAMESPACE]
        assert sorted(str(n) for n in needs if not satisfied(n, in_namespace)) == []
