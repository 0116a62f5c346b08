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
from quotas.kube import compiler
from quotas.kube.resources import kind_of
from quotas.kube.spec import QuotaSpec
from quotas.models import Cluster, ResourceFlavor
from quotas.sync import cluster_reconcile
from tests.conftest import World
from tests.deploy.manifests import discovery, find, overlay
from tests.gpu_agent.test_operator_services import BALANCED, k8s_node, portal_node, settled
from tests.gpu_agent.test_time_slicing import device_plugin_pod, t4_flavor
from tests.kube.test_compiler import demo_cluster, medium_tenant
from tests.standin import point_at
from usage import collector

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
    spec = demo_cluster(has_kueue=True, enforcement="kueue", has_volcano=True)
    tenant = medium_tenant(
        "team-a",
        quotas=(
            QuotaSpec("h100-80gb", "nvidia.com/gpu", Decimal(4), Decimal(8)),
            QuotaSpec("h100-mig-1g-10gb", "nvidia.com/mig-1g.10gb", Decimal(2), Decimal(4)),
            QuotaSpec("fast-ssd", "storage", Decimal(2**40), Decimal(2**40)),
        ),
        split_by_priority=True,
        editors=("alice@example.org",),
        viewers=("bob@example.org",),
    )
    objects = list(compiler.compile_cluster(spec, [tenant]))
    plan = operator.compile_operator([], now=timezone.now())
    objects.append(
        operator.configmap(
            plan, cluster=spec.name, namespace="gpu-operator", name="mig-parted", key="config.yaml"
        )
    )
    return objects


def compiled_requirements(served: dict[tuple[str, str], str]) -> set[Grant]:
    needed: set[Grant] = set()
    for obj in every_feature_objects():
        kind = kind_of(obj)
        group, resource = resource_of(served, kind.group, kind.kind)
        verbs = ["list", "patch", "create"] + ([] if kind.never_prune else ["delete"])
        needed |= {(group, resource, verb, "*") for verb in verbs}
        role_ref = obj.get("roleRef")
        if role_ref and role_ref["kind"] == "ClusterRole":
            needed.add(("rbac.authorization.k8s.io", "clusterroles", "bind", role_ref["name"]))
    return needed


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


def observed_requirements(recorded: Counter[str], served: dict[tuple[str, str], str]) -> set[Grant]:
    kinds = by_kind_name(served)
    needed: set[Grant] = set()
    for verb_kind in recorded:
        verb, kind = verb_kind.split(" ", 1)
        group, resource = kinds[kind]
        needed |= {(group, resource, rbac, "*") for rbac in RBAC_VERBS[verb]}
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

    needed = compiled_requirements(served) | observed_requirements(record.seen, served)
    # Deleting pods is granted in the GPU Operator's namespace only, by a Role of its own.
    namespaced = granted(
        find(overlay("in-cluster"), "Role", "gpu-quota-portal-device-plugin-restart")
    )
    assert namespaced == {("", "pods", "delete", "*")}
    assert namespaced <= needed, "the device plugin Role holds what the portal never uses"
    needed -= namespaced
    role = granted(find(overlay("in-cluster"), "ClusterRole", "gpu-quota-portal"))
    assert sorted(needed - role) == [], "the ClusterRole lacks what the portal uses"
    assert sorted(role - needed) == [], "the ClusterRole holds what the portal never uses"
    # The outside overlay's managed clusters get the same role.
    assert role == granted(
        find(overlay("outside/managed-cluster"), "ClusterRole", "gpu-quota-portal")
    )
    assert namespaced == granted(
        find(overlay("outside/managed-cluster"), "Role", "gpu-quota-portal-device-plugin-restart")
    )


def test_the_role_reads_no_secret_watches_nothing_and_never_deletes_a_namespace() -> None:
    """What a reader of the role wants to know at a glance, read from its rules as RBAC does."""
    role = find(overlay("in-cluster"), "ClusterRole", "gpu-quota-portal")
    grants = granted(role)
    assert ("", "pods", "list", "*") in grants
    assert ("", "pods", "watch", "*") not in grants
    assert ("rbac.authorization.k8s.io", "clusterroles", "bind", "edit") in grants
    assert ("rbac.authorization.k8s.io", "clusterroles", "bind", "admin") not in grants
    assert ("", "namespaces", "delete", "*") not in grants  # namespaces are never pruned
    assert ("", "secrets", "get", "*") not in grants
