"""No set of pods admitted in a tenant's namespaces exceeds its limit, in either enforcement
mode, whatever the tenant submits.

A model of the cluster's admission: the ValidatingAdmissionPolicy the compiler writes
(evaluated by the CEL engine the validator uses), Kueue (manages what its configuration says;
admits a workload while the tenant's ClusterQueue has room) and ResourceQuota admission (each
pod against its namespace's quotas). Random clusters, tenants, namespaces, shares, Kueue
configurations and submissions (bare pods, owned pods, Jobs, Deployments, ReplicaSets,
CronJobs, StatefulSets, DaemonSets; labelled or not) are tried; where the portal claims that no
work can get around the limits, the tenant's admitted GPU requests stay within its limit for
every GPU resource.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
POD_BASED = {"Pod", "Deployment", "StatefulSet"}
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


# --- the model's cluster --------------------------------------------------------------------


def policy_allows(policy: Mapping[str, Any] | None, obj: dict[str, Any], ns: dict[str, Any]):
    """(allowed, message) from the compiled ValidatingAdmissionPolicy, as the API server runs
    it: variables in order, then each validation."""
    if policy is None:
        return True, ""
    spec = policy["spec"]
    activation: dict[str, Any] = {
        "object": obj,
        "oldObject": None,
        "namespaceObject": ns,
        "request": {"operation": "CREATE", "namespace": ns["metadata"]["name"]},
    }
    values: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        values[variable["name"]] = evaluate(
            variable["expression"], {**activation, "variables": values}
        )
    activation["variables"] = values
    for validation in spec["validations"]:
        if not evaluate(validation["expression"], activation):
            return False, evaluate(validation["messageExpression"], activation)
    return True, ""


def pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Pod":
        return obj["spec"]
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def pod_requests(spec: dict[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    for container in spec["containers"]:
        resources = container.get("resources", {})
        # An extended resource given only as a limit is requested at the limit.
        for key, value in {**resources.get("limits", {}), **resources.get("requests", {})}.items():
            total[key] += int(value)
    return total


@dataclasses.dataclass(frozen=True)
class Submission:
    kind: str
    namespace: str
    labelled: bool
    owned: bool  # a pod with a controller owner (as a Job's pods have)
    resource: str
    count: int
    replicas: int


class Cluster:
    """Admission as the cluster would do it, for one compiled cluster."""

    def __init__(self, spec: ClusterSpec, tenants: list[TenantSpec], true_config):
        self.objects = compiler.compile_cluster(spec, tenants)
        self.policy = next(
            (o for o in self.objects if o["kind"] == "ValidatingAdmissionPolicy"), None
        )
        self.namespaces = {
            o["metadata"]["name"]: o for o in self.objects if o["kind"] == "Namespace"
        }
        self.hard: dict[str, dict[str, int]] = defaultdict(dict)
        for o in self.objects:
            if o["kind"] == "ResourceQuota" and "scopeSelector" not in o["spec"]:
                for key, value in o["spec"]["hard"].items():
                    self.hard[o["metadata"]["namespace"]][key] = int(value)
        self.config = true_config  # what Kueue on the cluster really does
        self.has_kueue = spec.has_kueue
        self.tenant_of = {ns.name: t.slug for t in tenants for ns in t.namespaces}
        self.queue_room: dict[str, Counter[str]] = {}
        for t in tenants:
            room: Counter[str] = Counter()
            for q in t.quotas:
                room[q.resource] += int(q.limit)
            self.queue_room[t.slug] = room
        self.used_ns: dict[str, Counter[str]] = defaultdict(Counter)
        self.used_queue: dict[str, Counter[str]] = defaultdict(Counter)
        self.running: dict[str, Counter[str]] = defaultdict(Counter)
        self.stats: Counter[str] = Counter()

    def namespace_object(self, name: str) -> dict[str, Any]:
        labels = dict(self.namespaces[name]["metadata"].get("labels", {}))
        labels["kubernetes.io/metadata.name"] = name
        return {"metadata": {"name": name, "labels": labels}}

    def kueue_manages(self, obj: dict[str, Any], namespace: str) -> bool:
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

    def quota_admits(self, namespace: str, requests: Counter[str]) -> bool:
        hard = self.hard.get(namespace, {})
        for resource, amount in requests.items():
            key = f"requests.{resource}"
            if key in hard and self.used_ns[namespace][resource] + amount > hard[key]:
                return False
        return True

    def run_pod(self, namespace: str, requests: Counter[str]) -> bool:
        if not self.quota_admits(namespace, requests):
            self.stats["refused by a ResourceQuota"] += 1
            return False
        self.used_ns[namespace].update(requests)
        self.running[self.tenant_of[namespace]].update(requests)
        return True

    def submit(self, obj: dict[str, Any], namespace: str, replicas: int) -> None:
        allowed, message = policy_allows(self.policy, obj, self.namespace_object(namespace))
        if not allowed:
            self.stats["refused by the admission policy"] += 1
            assert self.tenant_of[namespace] in message and obj["kind"] in message
            return
        requests = pod_requests(pod_template(obj))
        owned = bool(obj["metadata"].get("ownerReferences"))
        if owned and self.policy is not None:
            # A pod with a controller owner came from an object that passed the policy, so
            # from a workload Kueue admitted: it counts against the queue as that one would.
            # (A forged owner reference is the one way past; see README.)
            tenant = self.tenant_of[namespace]
            if not self._queue_admits(tenant, requests):
                return
            if self.run_pod(namespace, requests):
                self.used_queue[tenant].update(requests)
            return
        if self.kueue_manages(obj, namespace):
            tenant = self.tenant_of[namespace]
            total = Counter({r: a * replicas for r, a in requests.items()})
            if not self._queue_admits(tenant, total):
                return
            self.used_queue[tenant].update(total)
            self.stats["admitted by Kueue"] += 1
            for _ in range(replicas):
                self.run_pod(namespace, requests)
            return
        self.stats["outside Kueue"] += 1
        for _ in range(replicas):
            self.run_pod(namespace, requests)

    def _queue_admits(self, tenant: str, requests: Counter[str]) -> bool:
        room = self.queue_room[tenant]
        for resource, amount in requests.items():
            if resource in room and self.used_queue[tenant][resource] + amount > room[resource]:
                self.stats["held by the ClusterQueue"] += 1
                return False
        return True


def workload(sub: Submission) -> dict[str, Any]:
    container = {"name": "main", "resources": {}}
    if sub.count:
        which = "limits" if sub.count % 2 else "requests"
        container["resources"][which] = {sub.resource: str(sub.count)}
    pod_spec = {"containers": [container]}
    labels = {QUEUE: "default"} if sub.labelled else {}
    metadata: dict[str, Any] = {"name": "w", "namespace": sub.namespace}
    if sub.kind == "CronJob":
        spec = {
            "schedule": "* * * * *",
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {"template": {"spec": pod_spec}},
            },
        }
    elif sub.kind == "Pod":
        metadata["labels"] = labels
        if sub.owned:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "j",
                    "uid": "u",
                    "controller": True,
                }
            ]
        spec = pod_spec
    else:
        metadata["labels"] = labels
        spec = {"template": {"spec": pod_spec}}
    return {"kind": sub.kind, "metadata": metadata, "spec": spec}


# --- random cases -----------------------------------------------------------------------------

ACCELERATORS = ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]


@st.composite
def cases(draw):
    resources = draw(st.lists(st.sampled_from(ACCELERATORS), min_size=1, max_size=3, unique=True))
    flavors = tuple(
        FlavorSpec(f"f{i}", "mig" if "mig" in r else "gpu", {r: Decimal(64)})
        for i, r in enumerate(resources)
    )
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
    known = draw(st.integers(0, 3)) > 0 if mode == enforcement.ENFORCEMENT_KUEUE else True
    cluster = ClusterSpec(
        "c",
        flavors,
        has_kueue=has_kueue,
        enforcement=mode,
        kueue_config=true_config if known else None,
    )
    tenants = []
    for t in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 3))
        shares = None
        if count > 1 and draw(st.booleans()):
            cuts = sorted(
                draw(
                    st.lists(
                        st.integers(1, 9999), min_size=count - 1, max_size=count - 1, unique=True
                    )
                )
            )
            points = [0, *cuts, 10000]
            shares = [Decimal(b - a) / 100 for a, b in itertools.pairwise(points)]
        namespaces = tuple(
            NamespaceSpec(f"t{t}-ns{i}", share=None if shares is None else shares[i])
            for i in range(count)
        )
        quotas = tuple(
            QuotaSpec(f.name, r, Decimal(0), Decimal(draw(st.integers(0, 12))))
            for f in flavors
            for r in f.capacity
        )
        tenants.append(TenantSpec(f"t{t}", 1, namespaces, quotas))
    subs = draw(
        st.lists(
            st.builds(
                Submission,
                kind=st.sampled_from(WORKLOAD_KINDS),
                namespace=st.sampled_from([ns.name for t in tenants for ns in t.namespaces]),
                labelled=st.booleans(),
                owned=st.booleans(),
                resource=st.sampled_from(resources),
                count=st.integers(0, 11),
                replicas=st.integers(1, 3),
            ),
            min_size=1,
            max_size=25,
        )
    )
    return cluster, tenants, true_config, subs


def limits(tenant: TenantSpec) -> Counter[str]:
    total: Counter[str] = Counter()
    for q in tenant.quotas:
        total[q.resource] += int(q.limit)
    return total


def test_no_admitted_set_of_pods_exceeds_a_tenants_limit_where_the_portal_says_so():
    totals: Counter[str] = Counter()

    @settings(
        max_examples=300,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(cases())
    def check(case):
        spec, tenants, true_config, subs = case
        said = enforcement.verdict(
            mode=spec.enforcement, has_kueue=spec.has_kueue, config=spec.kueue_config
        )
        cluster = Cluster(spec, tenants, true_config)
        for sub in subs:
            cluster.submit(workload(sub), sub.namespace, sub.replicas)
        totals["clusters"] += 1
        totals[f"mode {said.mode}, bypass {said.bypass}"] += 1
        totals["tenants"] += len(tenants)
        totals["objects tried"] += len(subs)
        totals.update(cluster.stats)
        if said.bypass != "no":
            return
        for tenant in tenants:
            running, limit = cluster.running[tenant.slug], limits(tenant)
            for resource, amount in running.items():
                assert amount <= limit[resource], (
                    f"{tenant.slug} runs {amount} {resource} over its limit {limit[resource]} "
                    f"({said.mode})"
                )

    check()
    print(dict(totals))  # the figures, with -s
    # The cases reached every way in and every refusal: the bound was tested, not dodged.
    for figure in (
        "refused by the admission policy",
        "refused by a ResourceQuota",
        "admitted by Kueue",
        "held by the ClusterQueue",
        "outside Kueue",
        "mode kueue, bypass no",
        "mode kueue, bypass unknown",
        "mode split, bypass no",
    ):
        assert totals[figure] > 0, figure


def two_namespaces(mode: str) -> tuple[ClusterSpec, list[TenantSpec]]:
    flavors = (FlavorSpec("a100", "gpu", {"nvidia.com/gpu": Decimal(64)}),)
    config = enforcement.KueueConfig(frameworks=frozenset({"batch/job", "pod"}))
    cluster = ClusterSpec("c", flavors, enforcement=mode, kueue_config=config)
    tenant = TenantSpec(
        "team-a",
        1,
        (NamespaceSpec("team-a-training"), NamespaceSpec("team-a-inference")),
        (QuotaSpec("a100", "nvidia.com/gpu", Decimal(4), Decimal(10)),),
    )
    return cluster, [tenant]


def bare_pod(namespace: str, gpus: int) -> Submission:
    return Submission("Pod", namespace, False, False, "nvidia.com/gpu", gpus, 1)


@pytest.mark.parametrize("mode", [enforcement.ENFORCEMENT_KUEUE, enforcement.ENFORCEMENT_SPLIT])
def test_bare_pods_in_two_namespaces_stop_at_the_limit(mode):
    spec, tenants = two_namespaces(mode)
    cluster = Cluster(spec, tenants, spec.kueue_config)
    for namespace in ("team-a-training", "team-a-inference"):
        for _ in range(3):
            cluster.submit(workload(bare_pod(namespace, 4)), namespace, 1)
    assert cluster.running["team-a"]["nvidia.com/gpu"] <= 10


def test_without_the_policy_two_namespaces_hold_twice_the_limit():
    """What the policy is for: each namespace's quota holds the whole limit in this mode, so
    bare pods alone would reach twice it."""
    spec, tenants = two_namespaces(enforcement.ENFORCEMENT_KUEUE)
    cluster = Cluster(spec, tenants, spec.kueue_config)
    cluster.policy = None
    for namespace in ("team-a-training", "team-a-inference"):
        cluster.submit(workload(bare_pod(namespace, 10)), namespace, 1)
    assert cluster.running["team-a"]["nvidia.com/gpu"] == 20


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
    hards = {ns: hard["requests.nvidia.com/gpu"] for ns, hard in cluster.hard.items()}
    assert hards == {"team-a-inference": 3, "team-a-training": 7}
