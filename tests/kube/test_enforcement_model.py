"""No hostile tenant gets more GPUs than its limit, per GPU model, where the portal says no
work can get around the limits, in either enforcement mode.

A model of the cluster's admission, with hostile submitters:

* The admission policies the compiler writes, run as the stand-in API server runs them
  (``devcluster.policies.admit`` with the CEL engine the validator uses), each request with
  the ``request.userInfo`` of whoever makes it: a tenant's user, a tenant's ServiceAccount,
  a trusted operator that spawns bare pods for tenants (a notebook spawner), or Kubernetes'
  own controllers (each loop under its ServiceAccount, or kube-controller-manager) creating
  the objects a workload owns once it is admitted.
* Kueue: manages what its real configuration says (which may differ from what the portal
  read); admits a workload while the tenant's ClusterQueue has room on a flavor.
* ResourceQuota admission: each pod against every quota of its namespace whose scope matches
  (a PriorityClass scope compares the pod's class name, "" when it has none, as the API
  server's quota evaluator does).
* The nodes: the worst case, where the device plugin passes devices as an environment
  variable and the container toolkit honours it in unprivileged containers. A container
  whose environment names devices (NVIDIA_VISIBLE_DEVICES=all, a legacy CUDA_VERSION, or such
  a key loaded with envFrom from a ConfigMap) uses every GPU of its node, counted by no quota.

Hostile submissions: bare pods and every workload kind, labelled or not, with forged
controller owner references of every kind (ServiceAccount, ConfigMap, Job, ReplicaSet,
Deployment, StatefulSet), no PriorityClass or any class, GPUs asked for in an init container
only, GPU device variables (direct, through envFrom with or without a prefix, and the keys in
ConfigMaps), on clusters with several GPU models, MIG profiles and time-sliced shares that
share or do not share a resource name. Where the portal claims ``bypass: no``, a tenant never
uses more of a GPU resource on a GPU model than its limit there; and in every namespace with
the batch / inference split, the pods that are not production never hold more GPUs than the
batch quota.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.policies import Request, admit
from quotas.kube import compiler, enforcement
from quotas.kube.cel import evaluate
from quotas.kube.spec import (
    LABEL_TENANT,
    ClusterSpec,
    FlavorSpec,
    NamespaceSpec,
    QuotaSpec,
    TenantSpec,
)

QUEUE = enforcement.QUEUE_NAME_LABEL
PRODUCTION = "gpu-portal-production"
NODE_GPUS = 8  # what a container that names every device of its node gets
WORKLOAD_KINDS = [
    "Pod",
    "Job",
    "CronJob",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "DaemonSet",
    "ReplicationController",
]
# (group, version, resource) of each kind the model submits.
RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "ReplicationController": ("", "v1", "replicationcontrollers"),
    "ConfigMap": ("", "v1", "configmaps"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
}
API_VERSION = {kind: f"{g}/{v}" if g else v for kind, (g, v, _) in RESOURCES.items()}
API_VERSION["ServiceAccount"] = "v1"
# The loop of kube-controller-manager that creates the objects each kind owns.
CONTROLLER_OF = {
    "Job": "job-controller",
    "CronJob": "cronjob-controller",
    "Deployment": "deployment-controller",
    "ReplicaSet": "replicaset-controller",
    "StatefulSet": "statefulset-controller",
    "DaemonSet": "daemon-set-controller",
    "ReplicationController": "replication-controller",
}
SPAWNER = "system:serviceaccount:notebooks:spawner"
FORGED_OWNERS = ["ServiceAccount", "ConfigMap", "Job", "ReplicaSet", "Deployment", "StatefulSet"]
# What a hostile container puts in its environment.
ENVS = ["", "", "", "visible-all", "visible-void", "driver-caps", "cuda-version", "envfrom"]
ENVFROM_PREFIXES = ["", "", "NVIDIA_", "APP_"]
CONFIG_KEYS = ["NVIDIA_VISIBLE_DEVICES", "VISIBLE_DEVICES", "APP_MODE", "CUDA_VERSION"]
# The admission policies' answers: (policies and namespaces, object, namespace, user) ->
# the denial, or None.
DECISIONS: dict[tuple[str, str, str, str], str | None] = {}


# --- the model's cluster --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Submission:
    kind: str  # a workload kind, "ConfigMap", or "Spawned" (a pod the spawner makes for it)
    namespace: str
    creator: str  # "user", "sa" (the tenant's ServiceAccount) or "spawner"
    labelled: bool
    owner: str | None  # the kind of a forged controller owner reference
    resource: str
    flavor: str  # the flavor whose nodes a pod outside Kueue picks (its nodeSelector)
    count: int
    init_only: bool  # GPUs asked for in an init container only
    replicas: int
    priority: str | None
    env: str
    prefix: str  # envFrom's prefix
    key: str  # a ConfigMap's key


def model_key(flavor: FlavorSpec) -> tuple[str, bool]:
    """What a tenant's limit is for: a GPU model's whole devices (or slices), or its
    time-sliced shares."""
    return (flavor.gpu_model or flavor.name, flavor.time_slicing_replicas is not None)


def pod_requests(spec: Mapping[str, Any]) -> Counter[str]:
    """A pod's requests as Kubernetes counts them: the containers' sum, or the largest init
    container where larger; an extended resource given only as a limit is requested at it."""

    def of(container: Mapping[str, Any]) -> Counter[str]:
        resources = container.get("resources", {})
        merged = {**resources.get("limits", {}), **resources.get("requests", {})}
        return Counter({key: int(value) for key, value in merged.items()})

    total: Counter[str] = Counter()
    for container in spec["containers"]:
        total.update(of(container))
    for container in spec.get("initContainers", []):
        for key, value in of(container).items():
            total[key] = max(total[key], value)
    return total


def pod_template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    if obj["kind"] == "Pod":
        return obj
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]
    return obj["spec"]["template"]


class Cluster:
    """Admission as the cluster would do it, for one compiled cluster."""

    def __init__(self, spec: ClusterSpec, tenants: list[TenantSpec], true_config):
        self.spec = spec
        self.objects = compiler.compile_cluster(spec, tenants)
        self.policies = [o for o in self.objects if o["kind"] == "ValidatingAdmissionPolicy"]
        self.bindings = [o for o in self.objects if o["kind"] == "ValidatingAdmissionPolicyBinding"]
        self.namespaces = {
            o["metadata"]["name"]: o for o in self.objects if o["kind"] == "Namespace"
        }
        self.policy_key = json.dumps(
            [self.policies, self.bindings, sorted(self.namespaces.items())], sort_keys=True
        )
        self.flavors = {f.name: f for f in spec.flavors}
        # Each namespace's quotas: (name, PriorityClass scope or None, hard).
        self.quotas: dict[str, list[tuple[str, tuple[str, list[str]] | None, dict]]] = defaultdict(
            list
        )
        for o in self.objects:
            if o["kind"] != "ResourceQuota":
                continue
            expressions = o["spec"].get("scopeSelector", {}).get("matchExpressions", [])
            scope = None
            if expressions:
                (expression,) = expressions
                assert expression["scopeName"] == "PriorityClass"
                scope = (expression["operator"], list(expression["values"]))
            hard = {key: int(value) for key, value in o["spec"]["hard"].items() if "/" in key}
            self.quotas[o["metadata"]["namespace"]].append((o["metadata"]["name"], scope, hard))
        self.config = true_config  # what Kueue on the cluster really does
        self.has_kueue = spec.has_kueue
        self.tenant_of = {ns.name: t.slug for t in tenants for ns in t.namespaces}
        self.room: dict[tuple[str, str, str], int] = {}  # (tenant, flavor, resource) -> limit
        for t in tenants:
            for q in t.quotas:
                self.room[(t.slug, q.flavor, q.resource)] = int(q.limit)
        self.used_queue: Counter[tuple[str, str, str]] = Counter()
        self.used_quota: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
        # What each tenant's pods really hold: (tenant, resource, model key) -> devices.
        self.running: Counter[tuple[str, str, tuple[str, bool]]] = Counter()
        # Per namespace, the GPUs that pods other than production hold (requests).
        self.not_production: Counter[str] = Counter()
        self.configmaps: dict[str, dict[str, str]] = defaultdict(dict)  # namespace -> data
        self.stats: Counter[str] = Counter()

    # admission ---------------------------------------------------------------------------

    def namespace_object(self, name: str) -> dict[str, Any]:
        labels = dict(self.namespaces[name]["metadata"].get("labels", {}))
        labels["kubernetes.io/metadata.name"] = name
        return {"metadata": {"name": name, "labels": labels}}

    def admitted(self, obj: dict[str, Any], namespace: str, user: str) -> bool:
        """The policies' answer, remembered across cases: the CEL engine takes milliseconds
        an expression, and the same policies meet the same objects again and again."""
        key = (self.policy_key, json.dumps(obj, sort_keys=True), namespace, user)
        if key not in DECISIONS:
            DECISIONS[key] = self._admitted(obj, namespace, user)
        denial = DECISIONS[key]
        if denial is None:
            return True
        assert self.tenant_of[namespace] in denial, denial  # the message names the tenant
        self.stats["refused by an admission policy"] += 1
        return False

    def _admitted(self, obj: dict[str, Any], namespace: str, user: str) -> str | None:
        group, version, resource = RESOURCES[obj["kind"]]
        request = Request(
            operation="CREATE",
            group=group,
            version=version,
            versions=(version,),
            kind=obj["kind"],
            resource=resource,
            subresource="",
            namespace=namespace,
            name=obj["metadata"]["name"],
            obj=obj,
            old=None,
            namespace_object=self.namespace_object(namespace),
            username=user,
            groups=("system:authenticated",),
        )
        outcome = admit(self.policies, self.bindings, request, evaluate)
        return None if outcome.denial is None else outcome.denial[0]

    def kueue_manages(self, obj: Mapping[str, Any], namespace: str) -> bool:
        if not self.has_kueue or self.config is None:
            return False
        labels = obj["metadata"].get("labels", {})
        if obj["kind"] == "CronJob":
            labels = obj["spec"]["jobTemplate"].get("metadata", {}).get("labels", {})
        ns_labels = self.namespace_object(namespace)["metadata"]["labels"]
        selector = self.config.namespace_selector
        if selector is None:
            selector = {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", "kueue-system"],
                    }
                ]
            }
        return self.config.manages(
            obj["kind"],
            labelled=QUEUE in labels,
            namespace_selected=enforcement.selector_matches(selector, ns_labels),
        )

    def kueue_admits(self, tenant: str, requests: Counter[str]) -> str | None:
        """The flavor Kueue admits the whole workload on (every resource on one flavor, the
        first with room, as a flavor fungibility of 'try the next flavor' does), or None."""
        for name in self.flavors:
            keys = [(tenant, name, resource) for resource in requests if requests[resource]]
            if all(key in self.room for key in keys) and all(
                self.used_queue[key] + requests[key[2]] <= self.room[key] for key in keys
            ):
                for key in keys:
                    self.used_queue[key] += requests[key[2]]
                self.stats["admitted by Kueue"] += 1
                return name
        self.stats["held by the ClusterQueue"] += 1
        return None

    def quota_admits(self, namespace: str, requests: Counter[str], priority: str) -> bool:
        matching = []
        for name, scope, hard in self.quotas.get(namespace, []):
            if scope is not None:
                operator, values = scope
                if (priority in values) != (operator == "In"):
                    continue
            for resource, amount in requests.items():
                key = f"requests.{resource}"
                if (
                    key in hard
                    and self.used_quota[(namespace, name)][resource] + amount > hard[key]
                ):
                    self.stats["refused by a ResourceQuota"] += 1
                    return False
            matching.append(name)
        for name in matching:
            self.used_quota[(namespace, name)].update(requests)
        return True

    # what runs ---------------------------------------------------------------------------

    def exposes_devices(self, pod: Mapping[str, Any], namespace: str) -> bool:
        """Does a container's environment name GPUs the device plugin did not give?"""
        spec = pod["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            # The container's environment as the kubelet makes it: the device plugin's
            # variable for the devices it allocated, then envFrom, then env, later ones winning.
            env: dict[str, str] = {}
            if +pod_requests({"containers": [container]}):
                env["NVIDIA_VISIBLE_DEVICES"] = "allocated"
            for source in container.get("envFrom", []):
                for key, value in self.configmaps[namespace].items():
                    env[source.get("prefix", "") + key] = value
            env.update({e["name"]: e.get("value", "") for e in container.get("env", [])})
            if env.get("NVIDIA_VISIBLE_DEVICES", "") not in ("", "void", "none", "allocated"):
                return True
            if "CUDA_VERSION" in env and "NVIDIA_VISIBLE_DEVICES" not in env:
                return True  # a legacy CUDA image: every device
        return False

    def node_flavor(self, flavor: str, resource: str) -> str:
        if resource in self.flavors[flavor].capacity:
            return flavor
        return next(name for name, f in self.flavors.items() if resource in f.capacity)

    def run_pod(self, pod: Mapping[str, Any], namespace: str, flavor: str) -> None:
        spec = pod["spec"]
        requests = pod_requests(spec)
        priority = spec.get("priorityClassName", "")
        if not self.quota_admits(namespace, requests, priority):
            return
        self.stats["pods running"] += 1
        tenant = self.tenant_of[namespace]
        for resource, amount in requests.items():
            if amount:
                key = model_key(self.flavors[self.node_flavor(flavor, resource)])
                self.running[(tenant, resource, key)] += amount
                if priority != PRODUCTION and resource == "nvidia.com/gpu":
                    self.not_production[namespace] += amount
        if self.exposes_devices(pod, namespace):
            self.stats["pods using GPUs through the environment"] += 1
            node = self.flavors[flavor]
            resource = next(iter(node.capacity))
            self.running[(tenant, resource, model_key(node))] += NODE_GPUS

    def pod_created(self, pod: dict[str, Any], namespace: str, user: str, flavor: str) -> None:
        """A pod created by ``user`` (a controller's pods arrive here too)."""
        if not self.admitted(pod, namespace, user):
            return
        owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("kind")
        if owner != "Job" and self.kueue_manages(pod, namespace):
            admitted = self.kueue_admits(self.tenant_of[namespace], pod_requests(pod["spec"]))
            if admitted is None:
                return
            flavor = admitted
        elif owner != "Job" and +pod_requests(pod["spec"]):
            self.stats["GPU pods outside Kueue"] += 1
        self.run_pod(pod, namespace, flavor)

    def create(self, obj: dict[str, Any], namespace: str, user: str, flavor: str) -> None:
        """Any object, by ``user``: the policies, then Kueue, then the controllers."""
        kind = obj["kind"]
        if kind == "Pod":
            self.pod_created(obj, namespace, user, flavor)
            return
        if not self.admitted(obj, namespace, user):
            return
        if kind == "ConfigMap":
            self.configmaps[namespace].update(obj["data"])
            return
        replicas = obj["spec"].get("replicas", 1)
        if kind == "Job" and self.kueue_manages(obj, namespace):
            each = pod_requests(pod_template(obj)["spec"])
            total = Counter({r: a * replicas for r, a in each.items()})
            flavor = self.kueue_admits(self.tenant_of[namespace], total) or ""
            if not flavor:
                return
        controller = f"system:serviceaccount:kube-system:{CONTROLLER_OF[kind]}"
        if replicas and kind in ("Deployment", "CronJob"):
            # Each leaves its pods to an object of another kind: a ReplicaSet, a Job.
            child_kind = "ReplicaSet" if kind == "Deployment" else "Job"
            template = pod_template(obj)
            child = {
                "apiVersion": API_VERSION[child_kind],
                "kind": child_kind,
                "metadata": {
                    "name": f"{obj['metadata']['name']}-1",
                    "labels": dict(
                        (
                            obj["spec"]["jobTemplate"].get("metadata", {})
                            if kind == "CronJob"
                            else template["metadata"]
                        ).get("labels", {})
                    ),
                    "ownerReferences": [owner_reference(kind)],
                },
                "spec": {"replicas": replicas, "template": template},
            }
            self.create(child, namespace, controller, flavor)
            return
        for i in range(replicas):
            template = pod_template(obj)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{obj['metadata']['name']}-{i}",
                    "labels": dict(template["metadata"].get("labels", {})),
                    "ownerReferences": [owner_reference(kind)],
                },
                "spec": template["spec"],
            }
            self.pod_created(pod, namespace, controller, flavor)


def owner_reference(kind: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION[kind],
        "kind": kind,
        "name": "owner",
        "uid": "u",
        "controller": True,
    }


def build(sub: Submission) -> dict[str, Any]:
    """The object a hostile tenant submits."""
    if sub.kind == "ConfigMap":
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": sub.namespace},
            "data": {sub.key: "all"},
        }
    gpus = {sub.resource: str(sub.count)} if sub.count else {}
    which = "limits" if sub.count % 2 else "requests"
    main: dict[str, Any] = {"name": "main", "image": "trainer"}
    spec: dict[str, Any] = {"containers": [main]}
    if sub.init_only and gpus:
        spec["initContainers"] = [{"name": "warm", "image": "w", "resources": {which: gpus}}]
    elif gpus:
        main["resources"] = {which: gpus}
    if sub.env == "visible-all":
        main["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    elif sub.env == "visible-void":
        main["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    elif sub.env == "driver-caps":
        main["env"] = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]
    elif sub.env == "cuda-version":
        main["env"] = [{"name": "CUDA_VERSION", "value": "12.4.1"}]
    elif sub.env == "envfrom":
        source: dict[str, Any] = {"configMapRef": {"name": "settings"}}
        if sub.prefix:
            source["prefix"] = sub.prefix
        main["envFrom"] = [source]
    if sub.priority:
        spec["priorityClassName"] = sub.priority
    labels = {QUEUE: "default"} if sub.labelled else {}
    metadata: dict[str, Any] = {"name": "w", "namespace": sub.namespace, "labels": labels}
    if sub.owner and sub.kind != "Spawned":  # the spawner makes bare pods
        metadata["ownerReferences"] = [owner_reference(sub.owner)]
    template = {"metadata": {"labels": dict(labels)}, "spec": spec}
    kind = "Pod" if sub.kind == "Spawned" else sub.kind
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if kind == "CronJob":
        body = {
            "schedule": "* * * * *",
            "jobTemplate": {"metadata": {"labels": labels}, "spec": {"template": template}},
        }
    else:
        body = {"replicas": sub.replicas, "template": template}
    return {"apiVersion": API_VERSION[kind], "kind": kind, "metadata": metadata, "spec": body}


# --- random cases -----------------------------------------------------------------------------

# Flavors a cluster may have: whole GPUs of two models, a model's time-sliced shares, MIG
# slices of one profile on two models. ``renamed``: the device plugin advertises the model (or
# the shares) under a resource name of its own.
FLAVORS = {
    "a100": lambda renamed: FlavorSpec(
        "a100", "gpu", {"nvidia.com/gpu": Decimal(64)}, gpu_model="A100"
    ),
    "h100": lambda renamed: FlavorSpec(
        "h100",
        "gpu",
        {"nvidia.com/h100" if renamed else "nvidia.com/gpu": Decimal(64)},
        gpu_model="H100",
    ),
    "t4-shared": lambda renamed: FlavorSpec(
        "t4-shared",
        "gpu",
        {"nvidia.com/gpu.shared" if renamed else "nvidia.com/gpu": Decimal(64)},
        gpu_model="T4",
        time_slicing_replicas=4,
    ),
    "a100-mig": lambda renamed: FlavorSpec(
        "a100-mig",
        "mig",
        {"nvidia.com/mig-1g.10gb": Decimal(64)},
        gpu_model="A100",
        mig_profile="1g.10gb",
    ),
    "h100-mig": lambda renamed: FlavorSpec(
        "h100-mig",
        "mig",
        {"nvidia.com/mig-1g.10gb": Decimal(64)},
        gpu_model="H100",
        mig_profile="1g.10gb",
    ),
}
TRUSTED = [(), (SPAWNER,), ("system:serviceaccount:notebooks:*",), ("system:serviceaccount:*",)]


@st.composite
def cases(draw):
    renamed = draw(st.booleans())
    names = draw(st.lists(st.sampled_from(sorted(FLAVORS)), min_size=1, max_size=3, unique=True))
    flavors = tuple(FLAVORS[name](renamed) for name in sorted(names))
    resources = sorted({r for f in flavors for r in f.capacity})
    mode = draw(st.sampled_from([enforcement.ENFORCEMENT_KUEUE, enforcement.ENFORCEMENT_SPLIT]))
    has_kueue = mode == enforcement.ENFORCEMENT_KUEUE or draw(st.booleans())
    true_config = enforcement.KueueConfig(
        frameworks=frozenset(
            draw(
                st.lists(
                    st.sampled_from(["batch/job", "pod", "deployment", "statefulset"]),
                    unique=True,
                )
            )
        ),
        manage_without_queue_name=draw(st.booleans()),
        namespace_selector=draw(
            st.sampled_from(
                [None, {}, {"matchLabels": {LABEL_TENANT: "t0"}}, {"matchLabels": {"x": "y"}}]
            )
        ),
    )
    known = draw(st.integers(0, 5)) > 0 if mode == enforcement.ENFORCEMENT_KUEUE else True
    version = "1.33"
    if mode == enforcement.ENFORCEMENT_SPLIT and draw(st.integers(0, 2)) == 0:
        version = "1.29"
    cluster = ClusterSpec(
        "c",
        flavors,
        kubernetes_version=version,
        has_kueue=has_kueue,
        enforcement=mode,
        kueue_config=true_config if known else None,
        trusted_controllers=draw(st.sampled_from(TRUSTED)),
    )
    tenants = []
    for t in range(draw(st.integers(1, 2))):
        count = 2  # the attacks of the issue need two namespaces
        shares = None
        if draw(st.booleans()):
            cut = draw(st.integers(1, 99))
            shares = [Decimal(cut), Decimal(100 - cut)]
        namespaces = tuple(
            NamespaceSpec(f"t{t}-ns{i}", share=None if shares is None else shares[i])
            for i in range(count)
        )
        quotas = tuple(
            QuotaSpec(f.name, r, Decimal(0), Decimal(draw(st.integers(0, 9))))
            for f in flavors
            for r in f.capacity
        )
        inference = None
        if "nvidia.com/gpu" in resources and draw(st.integers(0, 2)) == 0:
            inference = draw(st.integers(0, 4))
        tenants.append(TenantSpec(f"t{t}", 1, namespaces, quotas, inference_gpus=inference))
    namespaces = [ns.name for t in tenants for ns in t.namespaces]
    submission = st.builds(
        Submission,
        kind=st.sampled_from([*WORKLOAD_KINDS, "Pod", "Pod", "ConfigMap", "Spawned"]),
        namespace=st.sampled_from(namespaces),
        creator=st.sampled_from(["user", "sa"]),
        labelled=st.booleans(),
        owner=st.sampled_from([None, None, *FORGED_OWNERS]),
        resource=st.sampled_from(resources),
        flavor=st.sampled_from([f.name for f in flavors]),
        count=st.integers(0, 9),
        init_only=st.integers(0, 2).map(lambda n: n == 0),
        replicas=st.integers(1, 3),
        priority=st.sampled_from(
            [None, None, "gpu-portal-default", "gpu-portal-experiment", PRODUCTION]
        ),
        env=st.sampled_from(ENVS),
        prefix=st.sampled_from(ENVFROM_PREFIXES),
        key=st.sampled_from(CONFIG_KEYS),
    )
    subs = draw(st.lists(submission, min_size=1, max_size=10))
    # The tenant first plants a ConfigMap for its containers' envFrom, in each namespace.
    planted = draw(st.sampled_from(CONFIG_KEYS))
    plants = [
        Submission(
            "ConfigMap",
            namespace,
            "user",
            False,
            None,
            resources[0],
            flavors[0].name,
            0,
            False,
            1,
            None,
            "",
            "",
            planted,
        )
        for namespace in namespaces
    ]
    return cluster, tenants, true_config, plants + subs


def user_of(sub: Submission) -> str:
    if sub.kind == "Spawned":
        return SPAWNER  # the operator creates the tenant's pod, as itself
    if sub.creator == "sa":
        return f"system:serviceaccount:{sub.namespace}:default"
    return "alice"


def limits(tenant: TenantSpec, flavors: Mapping[str, FlavorSpec]) -> Counter:
    total: Counter[tuple[str, tuple[str, bool]]] = Counter()
    for q in tenant.quotas:
        total[(q.resource, model_key(flavors[q.flavor]))] += int(q.limit)
    return total


def said(spec: ClusterSpec, tenants: list[TenantSpec]) -> enforcement.Verdict:
    return enforcement.verdict(
        mode=spec.enforcement,
        has_kueue=spec.has_kueue,
        config=spec.kueue_config,
        kubernetes_version=spec.kubernetes_version,
        flavors=spec.flavors,
        trusted_controllers=spec.trusted_controllers,
        tenant_namespaces=[ns.name for t in tenants for ns in t.namespaces],
    )


def attack(sub: Submission) -> list[str]:
    """The kinds of attack a submission tries, for the figures."""
    found = []
    if sub.owner:
        found.append(f"forged {sub.owner} owner")
    if sub.kind == "Spawned":
        found.append("a bare pod spawned by a trusted operator")
    if sub.count and sub.init_only:
        found.append("GPUs in an init container only")
    if sub.priority is None and sub.count:
        found.append("GPU pods without a PriorityClass")
    if sub.env and sub.env != "visible-void":
        found.append(f"device variable ({sub.env})")
    if sub.kind == "ConfigMap" and sub.key in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VERSION"):
        found.append("device variable as a ConfigMap key")
    return found


def test_no_hostile_tenant_exceeds_its_limit_per_gpu_model_where_the_portal_says_so():
    totals: Counter[str] = Counter()
    attacks: Counter[str] = Counter()

    @settings(
        max_examples=100,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(cases())
    def check(case):
        spec, tenants, true_config, subs = case
        verdict = said(spec, tenants)
        cluster = Cluster(spec, tenants, true_config)
        for sub in subs:
            # A hostile tenant repeats what gets through in each of its namespaces.
            tenant = cluster.tenant_of[sub.namespace]
            for namespace in sorted(n for n, t in cluster.tenant_of.items() if t == tenant):
                again = dataclasses.replace(sub, namespace=namespace)
                cluster.create(build(again), namespace, user_of(again), again.flavor)
            attacks.update(attack(sub))
        totals["clusters"] += 1
        totals[f"mode {verdict.mode}, bypass {verdict.bypass}"] += 1
        totals["objects submitted"] += len(subs)
        totals.update(cluster.stats)
        # The batch / inference split: work that is not production stays within batch.
        for namespace, used in cluster.not_production.items():
            for name, _scope, hard in cluster.quotas[namespace]:
                if name == "gpu-portal-batch" and "requests.nvidia.com/gpu" in hard:
                    assert used <= hard["requests.nvidia.com/gpu"], (
                        f"{namespace}: {used} GPUs outside production, batch holds "
                        f"{hard['requests.nvidia.com/gpu']}"
                    )
        if verdict.bypass != "no":
            return
        for tenant in tenants:
            limit = limits(tenant, cluster.flavors)
            for (slug, resource, key), amount in cluster.running.items():
                if slug == tenant.slug:
                    assert amount <= limit[(resource, key)], (
                        f"{slug} holds {amount} {resource} on {key[0]}"
                        f"{' shares' if key[1] else ''}, over its limit {limit[(resource, key)]}"
                        f" ({verdict.mode})"
                    )

    check()
    print(dict(totals), dict(attacks))  # the figures, with -s
    # The cases reached every way in and every refusal: the bound was tested, not dodged.
    for figure in (
        "refused by an admission policy",
        "refused by a ResourceQuota",
        "admitted by Kueue",
        "held by the ClusterQueue",
        "GPU pods outside Kueue",
        "pods using GPUs through the environment",
        "mode kueue, bypass no",
        "mode kueue, bypass unknown",
        "mode kueue, bypass yes",
        "mode split, bypass no",
        "mode split, bypass yes",
        "mode split, bypass unknown",
    ):
        assert totals[figure] > 0, figure
    for kind in FORGED_OWNERS:
        assert attacks[f"forged {kind} owner"] > 0, kind
    for hostile in (
        "a bare pod spawned by a trusted operator",
        "GPUs in an init container only",
        "GPU pods without a PriorityClass",
        "device variable (visible-all)",
        "device variable (envfrom)",
        "device variable as a ConfigMap key",
    ):
        assert attacks[hostile] > 0, hostile


# --- the attacks of the issue, one by one ------------------------------------------------------


def two_namespaces(mode: str, **changes: Any) -> tuple[ClusterSpec, list[TenantSpec]]:
    flavors = (FlavorSpec("h100", "gpu", {"nvidia.com/gpu": Decimal(64)}, gpu_model="H100"),)
    config = enforcement.KueueConfig(frozenset({"batch/job", "pod"}))
    cluster = ClusterSpec("c", flavors, enforcement=mode, kueue_config=config, **changes)
    tenant = TenantSpec(
        "team-a",
        1,
        (NamespaceSpec("team-a-training"), NamespaceSpec("team-a-inference")),
        (QuotaSpec("h100", "nvidia.com/gpu", Decimal(4), Decimal(6)),),
    )
    return cluster, [tenant]


def hostile(namespace: str, gpus: int, **changes: Any) -> Submission:
    base = Submission(
        "Pod", namespace, "user", False, None, "nvidia.com/gpu", "h100", gpus, False, 1, None,
        "", "", "",
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def held(mode: str, subs: list[Submission], **changes: Any) -> int:
    spec, tenants = two_namespaces(mode, **changes)
    cluster = Cluster(spec, tenants, spec.kueue_config)
    for sub in subs:
        cluster.create(build(sub), sub.namespace, user_of(sub), sub.flavor)
    return sum(amount for (_t, _r, _k), amount in cluster.running.items())


BOTH = ("team-a-training", "team-a-inference")


@pytest.mark.parametrize("mode", [enforcement.ENFORCEMENT_KUEUE, enforcement.ENFORCEMENT_SPLIT])
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"owner": "ServiceAccount"},
        {"owner": "ConfigMap"},
        {"owner": "Job"},
        {"kind": "Deployment", "owner": "ConfigMap"},
        {"kind": "ReplicaSet", "owner": "Deployment"},
        {"init_only": True},
        {"creator": "sa", "owner": "ReplicaSet"},
        {"kind": "Spawned"},
    ],
)
def test_six_gpus_in_each_of_two_namespaces_stop_at_the_limit_of_six(mode, changes):
    """The issue's attack: 12 H100s against a limit of 6 across two namespaces."""
    subs = [hostile(ns, 6, **changes) for ns in BOTH]
    assert held(mode, subs, trusted_controllers=(SPAWNER,)) <= 6


@pytest.mark.parametrize("mode", [enforcement.ENFORCEMENT_KUEUE, enforcement.ENFORCEMENT_SPLIT])
@pytest.mark.parametrize("env", ["visible-all", "cuda-version", "envfrom"])
def test_a_pod_without_gpus_gets_none_through_its_environment(mode, env):
    config = hostile("team-a-training", 0, kind="ConfigMap", key="VISIBLE_DEVICES")
    pod = hostile("team-a-training", 0, env=env, prefix="NVIDIA_")
    assert held(mode, [config, pod]) == 0


def test_without_the_policy_two_namespaces_hold_twice_the_limit():
    """What the policy is for: each namespace's quota holds the whole limit in this mode, so
    bare pods alone would reach twice it."""
    spec, tenants = two_namespaces(enforcement.ENFORCEMENT_KUEUE)
    cluster = Cluster(spec, tenants, spec.kueue_config)
    cluster.policies = []
    for namespace in BOTH:
        sub = hostile(namespace, 6, owner="ConfigMap")
        cluster.create(build(sub), namespace, "alice", "h100")
    assert sum(cluster.running.values()) == 12


def test_split_quotas_add_up_to_the_limit_exactly():
    spec, tenants = two_namespaces(enforcement.ENFORCEMENT_SPLIT)
    tenants = [
        dataclasses.replace(
            tenants[0],
            namespaces=(
                NamespaceSpec("team-a-inference", share=Decimal("33.33")),
                NamespaceSpec("team-a-training", share=Decimal("66.67")),
            ),
        )
    ]
    cluster = Cluster(spec, tenants, None)
    hards = {
        ns: hard["requests.nvidia.com/gpu"]
        for ns, quotas in cluster.quotas.items()
        for _name, _scope, hard in quotas
    }
    assert hards == {"team-a-inference": 2, "team-a-training": 4}


def test_a_split_on_shared_names_is_said_to_be_open_and_is():
    """Two models behind nvidia.com/gpu: the namespace quota bounds their sum, and the portal
    says a pod can spend it on the better model."""
    flavors = (FLAVORS["a100"](False), FLAVORS["h100"](False))
    spec = ClusterSpec("c", flavors, enforcement="split", has_kueue=False)
    tenant = TenantSpec(
        "team-a",
        1,
        (NamespaceSpec("team-a-training"),),
        (
            QuotaSpec("a100", "nvidia.com/gpu", Decimal(0), Decimal(6)),
            QuotaSpec("h100", "nvidia.com/gpu", Decimal(0), Decimal(2)),
        ),
    )
    verdict = said(spec, [tenant])
    assert verdict.bypass == "yes"
    assert (
        "2 GPU models (A100, H100) share nvidia.com/gpu: a pod may spend the tenant's whole "
        "nvidia.com/gpu limit on either."
    ) in verdict.lines
    cluster = Cluster(spec, [tenant], None)
    sub = hostile("team-a-training", 8)
    cluster.create(build(sub), "team-a-training", "alice", "h100")
    assert cluster.running[("team-a", "nvidia.com/gpu", ("H100", False))] == 8  # limit 2
    # Renamed, each model has a resource name (and so a quota line) of its own.
    renamed = dataclasses.replace(spec, flavors=(FLAVORS["a100"](True), FLAVORS["h100"](True)))
    assert said(renamed, [tenant]).bypass == "no"
