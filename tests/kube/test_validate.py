"""quotas.kube.validate: schema, CEL and webhook checks on compiled Kubernetes objects."""

from __future__ import annotations

import copy
import textwrap
from typing import Any

import pytest
import yaml

from quotas.kube import validate
from quotas.kube.validate import (
    core_schema_version,
    crd_versions,
    find_crd,
    is_namespaced,
    load_crds,
    shipped_kubernetes_versions,
    validate_object,
    validate_objects,
)
from tests.kube.test_kueue_rules import BASES

# notes-kueue-volcano.md §1.7, "Minimal valid YAML (validated against the copied v1beta2 schemas)".
MINIMAL_KUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100-80gb}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100-mig-mixed}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB, nvidia.com/mig.strategy: mixed}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: org-research}
spec:                       # parentName: root   (optional)
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h100-80gb
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]   # shared pool on top of member CQs
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohortName: org-research
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-a}}
  queueingStrategy: BestEffortFIFO
  stopPolicy: None
  fairSharing: {weight: "1"}
  preemption:
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
    flavors:
    - name: h100-80gb
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
      - {name: nvidia.com/gpu, nominalQuota: 4, borrowingLimit: 4, lendingLimit: 2}
      - {name: nvidia.com/mig-1g.10gb, nominalQuota: 0}
    - name: a100-mig-mixed
      resources:
      - {name: cpu, nominalQuota: 32}
      - {name: memory, nominalQuota: 256Gi}
      - {name: nvidia.com/gpu, nominalQuota: 0}
      - {name: nvidia.com/mig-1g.10gb, nominalQuota: 14}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {namespace: team-a, name: default}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: team-high}
value: 10000
description: "Production training for approved tenants"
"""

# notes-kueue-volcano.md §2.
VOLCANO_QUEUE = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: team-a}
spec:
  parent: org-research
  weight: 1
  reclaimable: true
  capability: {cpu: "128", memory: 1Ti, nvidia.com/gpu: "8"}
  deserved:   {cpu: "64",  memory: 512Gi, nvidia.com/gpu: "4"}
  guarantee:
    resource: {cpu: "32", memory: 256Gi, nvidia.com/gpu: "2"}
"""

CORE_OBJECTS = """
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels: {portal.gpu-quota.io/tenant: team-a, app.kubernetes.io/managed-by: gpu-quota-portal}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpu-quota, namespace: team-a}
spec:
  hard:
    requests.nvidia.com/gpu: "4"
    requests.nvidia.com/mig-1g.10gb: 14
    requests.cpu: "64"
    requests.memory: 512Gi
    count/jobs.batch: "50"
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: team-a}
spec:
  limits:
  - type: Container
    default: {cpu: "1", memory: 2Gi}
    defaultRequest: {cpu: 500m, memory: 1Gi}
    max: {nvidia.com/gpu: "4"}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: same-namespace, namespace: team-a}
spec:
  podSelector: {}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {}}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: runner, namespace: team-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: team-a-edit, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: Group, name: "oidc:team-a"}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: team-a-high}
value: 10000
preemptionPolicy: Never
description: team-a production
---
apiVersion: v1
kind: ConfigMap
metadata: {name: portal-info, namespace: team-a}
data: {tenant: team-a}
"""

# The seed article's ClusterQueue: borrowingLimit without a cohort, three covered resources and a
# quota for one of them.
SEED_CLUSTER_QUEUE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-a}}
  resourceGroups:
  - coveredResources: ["cpu", "memory", "nvidia.com/gpu"]
    flavors:
    - name: a100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 10
        borrowingLimit: 2
"""

FLAVOR_MISSING_RESOURCES = "flavors must have the same number of resources as the coveredResources"
BORROWING_NEEDS_COHORT = "borrowingLimit must be nil when cohort is empty"
CQ = "ClusterQueue team-a"
RG0 = "spec.resourceGroups[0]"


def load(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(textwrap.dedent(text)) if doc]


def one(text: str) -> dict[str, Any]:
    (obj,) = load(text)
    return obj


def cluster_queue(**spec: Any) -> dict[str, Any]:
    """A valid v1beta2 ClusterQueue with ``spec`` keys replaced (None removes a key)."""
    base = one(SEED_CLUSTER_QUEUE)
    base["spec"]["cohortName"] = "org-research"
    base["spec"]["resourceGroups"] = [
        {
            "coveredResources": ["cpu", "nvidia.com/gpu"],
            "flavors": [
                {
                    "name": "a100",
                    "resources": [
                        {"name": "cpu", "nominalQuota": 64},
                        {"name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 4},
                    ],
                }
            ],
        }
    ]
    for key, value in spec.items():
        if value is None:
            base["spec"].pop(key, None)
        else:
            base["spec"][key] = value
    return base


def gpu_flavor(name: str, *resources: tuple[str, Any]) -> dict[str, Any]:
    return {"name": name, "resources": [{"name": r, "nominalQuota": q} for r, q in resources]}


# --------------------------------------------------------------------------- valid objects


def test_minimal_kueue_objects_from_the_notes_are_valid() -> None:
    assert validate_objects(load(MINIMAL_KUEUE)) == []


def test_volcano_queue_from_the_notes_is_valid() -> None:
    assert validate_object(one(VOLCANO_QUEUE)) == []


def test_core_per_namespace_objects_are_valid() -> None:
    objects = load(CORE_OBJECTS)
    assert [obj["kind"] for obj in objects] == [
        "Namespace",
        "ResourceQuota",
        "LimitRange",
        "NetworkPolicy",
        "ServiceAccount",
        "RoleBinding",
        "PriorityClass",
        "ConfigMap",
    ]
    assert validate_objects(objects) == []


def test_validation_does_not_change_the_object() -> None:
    obj = cluster_queue(cohortName=None)
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = None
    before = copy.deepcopy(obj)
    validate_object(obj)
    assert obj == before


@pytest.mark.parametrize("quota", [16, "16", "500m", "64Gi", "1.5"])
def test_int_or_string_quantities_accept_numbers_and_strings(quota: Any) -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = quota
    assert validate_object(obj) == []


def test_null_in_a_non_nullable_field_is_dropped_like_the_api_server_does() -> None:
    obj = cluster_queue(cohortName=None)
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["borrowingLimit"] = None
    assert validate_object(obj) == []


def test_limits_prefix_for_extended_resources_is_left_to_the_compiler() -> None:
    # Kubernetes refuses limits.nvidia.com/gpu in a ResourceQuota, but not through its schema:
    # the compiler must not emit it. The schema layer accepts it.
    quota = load(CORE_OBJECTS)[1]
    quota["spec"]["hard"]["limits.nvidia.com/gpu"] = "4"
    assert validate_object(quota) == []


# --------------------------------------------------------------------------- every object


def test_missing_api_version_kind_and_name() -> None:
    assert validate_object({"metadata": {}}) == [
        "<no kind> <no name>: apiVersion: required field is missing",
        "<no kind> <no name>: kind: required field is missing",
        "<no kind> <no name>: metadata.name: required field is missing",
    ]
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {}}
    assert validate_object(flavor) == [
        "ResourceFlavor <no name>: metadata.name: required field is missing"
    ]


def test_namespaced_kind_without_namespace() -> None:
    queue = one("""
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: LocalQueue
        metadata: {name: default}
        spec: {clusterQueue: team-a}
    """)
    assert validate_object(queue) == [
        "LocalQueue default: metadata.namespace: required: LocalQueue is namespaced"
    ]
    quota = load(CORE_OBJECTS)[1]
    del quota["metadata"]["namespace"]
    assert validate_object(quota) == [
        "ResourceQuota gpu-quota: metadata.namespace: required: ResourceQuota is namespaced"
    ]


def test_cluster_scoped_kind_with_namespace() -> None:
    obj = cluster_queue()
    obj["metadata"]["namespace"] = "team-a"
    assert validate_object(obj) == [
        "ClusterQueue team-a/team-a: metadata.namespace: must not be set: "
        "ClusterQueue is cluster-scoped"
    ]
    priority = load(CORE_OBJECTS)[6]
    priority["metadata"]["namespace"] = "team-a"
    assert validate_object(priority) == [
        "PriorityClass team-a/team-a-high: metadata.namespace: must not be set: "
        "PriorityClass is cluster-scoped"
    ]


def test_names_labels_and_metadata_fields() -> None:
    obj = cluster_queue()
    obj["metadata"] = {"name": "Team_A", "labels": {"tenant": "a b"}, "lables": {}}
    errors = validate_object(obj)
    assert 'ClusterQueue Team_A: metadata.lables: unknown field "lables"' in errors[0]
    assert 'did you mean "labels"?' in errors[0]
    assert any(
        e.startswith('ClusterQueue Team_A: metadata.name: "Team_A" must be a DNS-1123 subdomain')
        for e in errors
    )
    assert any(
        e.startswith('ClusterQueue Team_A: metadata.labels[tenant]: invalid label value "a b"')
        for e in errors
    )
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team.a"}}
    assert validate_object(namespace) == [
        'Namespace team.a: metadata.name: "team.a" must be a DNS-1123 label '
        '(lowercase letters, digits and "-", at most 63)'
    ]


def test_unknown_kinds_and_groups() -> None:
    kueue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Queue", "metadata": {"name": "q"}}
    (error,) = validate_object(kueue)
    assert error.startswith("Queue q: kind: Queue is not a kueue.x-k8s.io kind (known: ")
    assert "ClusterQueue" in error
    other = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    (error,) = validate_object(other)
    assert error.startswith("Widget w: no schema for kind Widget in example.com/v1")


def test_duplicate_objects_in_a_batch() -> None:
    queue = cluster_queue()
    errors = validate_objects([queue, copy.deepcopy(queue)])
    assert errors == [
        f"{CQ}: duplicate object: objects 0 and 1 of this batch have the same kind and name; "
        "the second would overwrite the first"
    ]


# --------------------------------------------------------------------------- core schemas


def test_core_unknown_field_and_bad_quantity() -> None:
    quota = load(CORE_OBJECTS)[1]
    quota["spec"]["hard"]["requests.memory"] = "512GB"
    quota["spec"]["hardd"] = {}
    errors = validate_object(quota)
    assert (
        "ResourceQuota team-a/gpu-quota: spec.hard[requests.memory]: '512GB' is not a "
        "Kubernetes quantity: unknown suffix 'GB' (use Gi or G)"
    ) in errors
    assert (
        'ResourceQuota team-a/gpu-quota: spec.hardd: unknown field "hardd": the API server '
        'would drop it silently (did you mean "hard"?)'
    ) in errors


def test_priority_class_rules() -> None:
    priority = load(CORE_OBJECTS)[6]
    priority["metadata"]["name"] = "system-team-a"
    priority["value"] = 2_000_000_000
    assert validate_object(priority) == [
        'PriorityClass system-team-a: metadata.name: the "system-" prefix is reserved for '
        "Kubernetes' own PriorityClasses"
    ]
    priority["metadata"]["name"] = "team-a-top"
    assert validate_object(priority) == [
        "PriorityClass team-a-top: value: must be at most 1000000000 for a user-defined "
        "PriorityClass, got 2000000000"
    ]


# --------------------------------------------------------------------------- versions


def test_kubernetes_version_selection() -> None:
    shipped = shipped_kubernetes_versions()
    assert "1.33" in shipped
    newest, oldest = shipped[-1], shipped[0]
    assert core_schema_version("1.33") == "1.33"
    assert core_schema_version("v1.33.4-gke.1200") == "1.33"
    assert core_schema_version("1.99") == newest
    assert core_schema_version("1.10") == oldest
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        core_schema_version("latest")


def test_kubernetes_version_changes_which_kinds_exist() -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {},
    }
    (error,) = validate_object(device_class, kubernetes_version="1.33")
    assert error.startswith(
        "DeviceClass gpu.nvidia.com: no schema for kind DeviceClass in resource.k8s.io/v1 "
        "(Kubernetes 1.33)"
    )
    assert validate_object(device_class, kubernetes_version="1.34") == []
    # Newer than anything shipped: the newest schemas are used, and messages say so.
    assert validate_object(device_class, kubernetes_version="1.99") == []
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}, "x": 1}
    (error,) = validate_object(namespace, kubernetes_version="1.99")
    assert error.startswith('Namespace a: x: unknown field "x"')
    assert error.endswith(
        f"(checked against the Kubernetes {shipped_kubernetes_versions()[-1]} schemas, the "
        "closest that kubernetes-validate ships, for a 1.99 cluster)"
    )


# --------------------------------------------------------------------------- CRD versions


def test_unserved_api_version() -> None:
    obj = cluster_queue()
    obj["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    assert validate_object(obj) == [
        f"{CQ}: apiVersion: kueue.x-k8s.io/v1alpha1 is not served by the ClusterQueue CRD "
        "(served: v1beta1, v1beta2); the portal writes kueue.x-k8s.io/v1beta2"
    ]


def test_deprecated_api_version() -> None:
    queue = one("""
        apiVersion: kueue.x-k8s.io/v1beta1
        kind: LocalQueue
        metadata: {namespace: team-a, name: default}
        spec: {clusterQueue: team-a}
    """)
    assert validate_object(queue) == [
        "LocalQueue team-a/default: apiVersion: kueue.x-k8s.io/v1beta1 is deprecated "
        '("This version is deprecated. Use v1beta2 instead."); the portal writes '
        "kueue.x-k8s.io/v1beta2 only"
    ]


def test_v1beta1_cohort_field_on_v1beta2_is_unknown() -> None:
    obj = cluster_queue(cohortName=None, cohort="org-research")
    errors = validate_object(obj)
    assert errors[0] == (
        f'{CQ}: spec.cohort: unknown field "cohort": the API server would drop it silently '
        "(v1beta2 calls it spec.cohortName)"
    )
    # Without cohortName the borrowingLimit has nowhere to go either.
    assert any(BORROWING_NEEDS_COHORT in error for error in errors)


# --------------------------------------------------------------------------- CRD schemas


def test_bad_quantity_and_wrong_type() -> None:
    obj = cluster_queue()
    resources = obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    resources[0]["nominalQuota"] = "64 cores"
    resources[1]["nominalQuota"] = 1.5
    errors = validate_object(obj)
    assert (
        f"{CQ}: {RG0}.flavors[0].resources[0].nominalQuota: '64 cores' is not a Kubernetes "
        "quantity: it contains whitespace"
    ) in errors
    assert (
        f"{CQ}: {RG0}.flavors[0].resources[1].nominalQuota: must be an integer or a string "
        'such as "500m" or "64Gi", got 1.5'
    ) in errors


def test_enum_and_list_map_duplicates() -> None:
    obj = cluster_queue(queueingStrategy="FIFO")
    flavors = obj["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(copy.deepcopy(flavors[0]))
    errors = validate_object(obj)
    assert (
        f'{CQ}: spec.queueingStrategy: unsupported value "FIFO": must be one of StrictFIFO, '
        "BestEffortFIFO"
    ) in errors
    assert f'{CQ}: {RG0}.flavors[1]: duplicate entry name="a100": already at index 0' in errors


# --------------------------------------------------------------------------- Kueue CEL / webhook


def test_seed_article_cluster_queue_fails_both_cel_rules() -> None:
    # The CRD's two CEL rules, worded as the API server words them, and the webhook's check
    # that pairs resources with coveredResources by position.
    assert validate_object(one(SEED_CLUSTER_QUEUE)) == [
        f'{CQ}: spec: Invalid value: "object": {BORROWING_NEEDS_COHORT}',
        f'{CQ}: {RG0}: Invalid value: "object": {FLAVOR_MISSING_RESOURCES}',
        f"{CQ}: {RG0}.flavors[0].resources[0].name: must match the name in coveredResources: "
        'expected "cpu" (coveredResources[0]), got "nvidia.com/gpu"; Kueue pairs them by position',
    ]


def test_lending_limit_needs_a_cohort_and_fits_in_nominal_quota() -> None:
    obj = cluster_queue(cohortName=None)
    entry = obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    del entry["borrowingLimit"]
    entry["lendingLimit"] = 8
    path = f"{CQ}: {RG0}.flavors[0].resources[1].lendingLimit"
    assert validate_object(obj) == [
        f"{path}: lendingLimit must be nil when cohort is empty: spec.cohortName is not set, so "
        "there is no cohort to lend to",
        f"{path}: must be less than or equal to the nominalQuota (8 > 4)",
    ]


def test_flavor_resource_names_must_match_covered_resources() -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["name"] = "memory"
    assert validate_object(obj) == [
        f"{CQ}: {RG0}.flavors[0].resources[0].name: must match the name in coveredResources: "
        'expected "cpu" (coveredResources[0]), got "memory"; Kueue pairs them by position'
    ]


def test_resource_and_flavor_in_one_resource_group_only() -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"].append(
        {"coveredResources": ["cpu"], "flavors": [gpu_flavor("a100", ("cpu", 8))]}
    )
    group = f"{CQ}: spec.resourceGroups[1]"
    assert validate_object(obj) == [
        f'{group}.coveredResources[0]: duplicate resource "cpu", already covered in '
        "resourceGroups[0]: each resource may appear in only one resource group",
        f'{group}.flavors[0].name: flavor "a100" already appears in resourceGroups[0]: each '
        "flavor may appear in only one resource group",
    ]


def test_negative_quota() -> None:
    obj = cluster_queue()
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "-1"
    assert validate_object(obj) == [
        f"{CQ}: {RG0}.flavors[0].resources[0].nominalQuota: must be greater than or equal to 0, "
        "got -1"
    ]


@pytest.mark.parametrize(
    ("selector", "reason"),
    [
        (None, "must be set: a null namespaceSelector selects no namespace"),
        ({}, "{} selects every namespace, so any tenant could submit workloads"),
        ({"matchLabels": {}}, "{} selects every namespace"),
    ],
)
def test_namespace_selector_must_pick_namespaces(selector: Any, reason: str) -> None:
    obj = cluster_queue()
    obj["spec"]["namespaceSelector"] = selector
    if selector is None:
        del obj["spec"]["namespaceSelector"]
    (error,) = validate_object(obj)
    assert error.startswith(f"{CQ}: spec.namespaceSelector: {reason}")
    assert "kubernetes.io/metadata.name" in error


def test_namespace_selector_expressions() -> None:
    selector = {"matchExpressions": [{"key": "team", "operator": "In"}]}
    assert validate_object(cluster_queue(namespaceSelector=selector)) == [
        f"{CQ}: spec.namespaceSelector.matchExpressions[0].values: must be specified when "
        "operator is In"
    ]


def test_preemption_reclaim_never_with_borrow_within_cohort() -> None:
    obj = cluster_queue(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}})
    assert validate_object(obj) == [  # reclaimWithinCohort defaults to Never
        f'{CQ}: spec.preemption: Invalid value: "object": reclaimWithinCohort=Never and '
        "borrowWithinCohort.Policy!=Never"
    ]
    obj["spec"]["preemption"]["reclaimWithinCohort"] = "Any"
    assert validate_object(obj) == []


def test_flavor_fungibility_preference_needs_try_next_flavor() -> None:
    fungibility = {"whenCanPreempt": "TryNextFlavor", "preference": "BorrowingOverPreemption"}
    obj = cluster_queue(flavorFungibility=fungibility)
    assert validate_object(obj) == [  # whenCanBorrow defaults to MayStopSearch
        f'{CQ}: spec.flavorFungibility: Invalid value: "object": preference can only be set '
        "when both whenCanBorrow and whenCanPreempt are TryNextFlavor"
    ]
    fungibility["whenCanBorrow"] = "TryNextFlavor"
    assert validate_object(obj) == []


def test_fair_sharing_weight_and_admission_check_flavors() -> None:
    obj = cluster_queue(
        fairSharing={"weight": "1n"},
        admissionChecksStrategy={"admissionChecks": [{"name": "ok", "onFlavors": ["h100"]}]},
    )
    assert validate_object(obj) == [
        f"{CQ}: spec.fairSharing.weight: When not 0, weight must be > 10e-9",
        f'{CQ}: spec.admissionChecksStrategy.admissionChecks[0].onFlavors[0]: "h100" is not a '
        "flavor of this ClusterQueue",
    ]


def test_cohort_limits_need_a_parent() -> None:
    cohort = load(MINIMAL_KUEUE)[2]
    entry = cohort["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    entry["borrowingLimit"] = 2
    entry["lendingLimit"] = 4
    path = "Cohort org-research: spec.resourceGroups[0].flavors[0].resources[0]"
    assert validate_object(cohort) == [
        f"{path}.borrowingLimit: borrowingLimit must be nil when parent is empty: "
        "spec.parentName is not set, so there is no parent to borrow from",
        f"{path}.lendingLimit: lendingLimit must be nil when parent is empty: spec.parentName is "
        "not set, so there is no parent to lend to",
    ]
    cohort["spec"]["parentName"] = "root"
    assert validate_object(cohort) == []  # a Cohort may lend more than its own nominalQuota


def test_cohort_flavor_must_list_every_covered_resource() -> None:
    cohort = load(MINIMAL_KUEUE)[2]
    cohort["spec"]["resourceGroups"][0]["coveredResources"].append("cpu")
    assert validate_object(cohort) == [
        f'Cohort org-research: {RG0}: Invalid value: "object": {FLAVOR_MISSING_RESOURCES}'
    ]


def test_local_queue_needs_a_cluster_queue() -> None:
    queue = load(MINIMAL_KUEUE)[4]
    queue["spec"] = {}
    assert validate_object(queue) == [
        "LocalQueue team-a/default: spec.clusterQueue: must be set: a LocalQueue submits its "
        "workloads to this ClusterQueue, and the field cannot be changed later"
    ]


def test_resource_flavor_rules() -> None:
    flavor = load(MINIMAL_KUEUE)[1]
    del flavor["spec"]["nodeLabels"]
    flavor["spec"]["topologyName"] = "default"
    flavor["spec"]["tolerations"] = [{"operator": "Equal", "value": "x", "tolerationSeconds": 5}]
    flavor["spec"]["nodeTaints"] = [{"key": "gpu", "effect": "NoRun"}]
    # Worded as the API server words them, "no such key" included: the first rule reads
    # self.nodeLabels without has(), and the second reads x.effect, which this toleration lacks.
    flavor_ = "ResourceFlavor a100-mig-mixed"
    assert validate_object(flavor) == [
        f'{flavor_}: spec: Invalid value: "object": no such key: nodeLabels evaluating rule: at '
        "least one nodeLabel is required when topology is set",
        f'{flavor_}: spec.tolerations: Invalid value: "array": operator must be Exists when '
        "'key' is empty, which means 'match all values and all keys'",
        f'{flavor_}: spec.tolerations: Invalid value: "array": no such key: effect evaluating '
        "rule: effect must be 'NoExecute' when 'tolerationSeconds' is set",
        f'{flavor_}: spec.nodeTaints: Invalid value: "array": supported taint effect values: '
        "'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
    ]


# --------------------------------------------------------------------------- Volcano


def test_volcano_guarantee_deserved_capability_order() -> None:
    queue = one(VOLCANO_QUEUE)
    queue["spec"]["deserved"]["nvidia.com/gpu"] = "16"
    queue["spec"]["guarantee"]["resource"]["cpu"] = "96"
    errors = validate_object(queue)
    assert errors == [
        "Queue team-a: spec.deserved[nvidia.com/gpu]: deserved should less equal than "
        "capability: nvidia.com/gpu deserved is 16, capability is 8",
        "Queue team-a: spec.guarantee.resource[cpu]: guarantee should less equal than "
        "deserved: cpu guarantee is 96, deserved is 64",
    ]


def test_volcano_resource_missing_from_capability_is_unrestricted() -> None:
    """Volcano v1.15.1 (the CRDs' version, quotas/kube/crds/README.md): a resource
    ``capability`` does not list has no ceiling, and guarantee is compared with deserved only
    (v1.14 counted a resource missing from capability as 0 and checked guarantee against
    capability too)."""
    queue = one(VOLCANO_QUEUE)
    del queue["spec"]["capability"]["nvidia.com/gpu"]
    assert validate_object(queue) == []
    # A resource only in guarantee (in neither capability nor deserved) is allowed.
    queue = one(VOLCANO_QUEUE)
    queue["spec"]["guarantee"]["resource"]["example.com/fpga"] = "2"
    assert validate_object(queue) == []
    # Unlisted in capability, any deserved and guarantee (guarantee <= deserved) are allowed.
    queue = one(VOLCANO_QUEUE)
    del queue["spec"]["capability"]["nvidia.com/gpu"]
    queue["spec"]["deserved"]["nvidia.com/gpu"] = "64"
    queue["spec"]["guarantee"]["resource"]["nvidia.com/gpu"] = "64"
    assert validate_object(queue) == []


def test_volcano_guarantee_above_deserved_is_refused() -> None:
    queue = one(VOLCANO_QUEUE)
    del queue["spec"]["capability"]["nvidia.com/gpu"]
    queue["spec"]["guarantee"]["resource"]["nvidia.com/gpu"] = "6"
    assert validate_object(queue) == [
        "Queue team-a: spec.guarantee.resource[nvidia.com/gpu]: guarantee should less equal "
        "than deserved: nvidia.com/gpu guarantee is 6, deserved is 4",
    ]
    # Without capability at all, guarantee is still bounded by deserved.
    del queue["spec"]["capability"]
    assert validate_object(queue) == [
        "Queue team-a: spec.guarantee.resource[nvidia.com/gpu]: guarantee should less equal "
        "than deserved: nvidia.com/gpu guarantee is 6, deserved is 4",
    ]


@pytest.mark.parametrize(
    ("weight", "reason"),
    [(0, "0 is less than the minimum of 1"), (65536, "65536 is greater than the maximum of 65535")],
)
def test_volcano_weight_range(weight: int, reason: str) -> None:
    queue = one(VOLCANO_QUEUE)
    queue["spec"]["weight"] = weight
    assert validate_object(queue) == [f"Queue team-a: spec.weight: {reason}"]


def test_volcano_whole_gpus_and_self_parent() -> None:
    queue = one(VOLCANO_QUEUE)
    queue["spec"]["guarantee"]["resource"]["nvidia.com/gpu"] = "1.5"
    queue["spec"]["parent"] = "team-a"
    assert validate_object(queue) == [
        "Queue team-a: spec.guarantee.resource[nvidia.com/gpu]: must be an integer, got 1.5",
        "Queue team-a: spec.parent: a queue cannot use itself as parent",
    ]


# --------------------------------------------------------------------------- CRD loading


def test_crd_documents_and_served_versions() -> None:
    kinds = {crd["spec"]["names"]["kind"] for crd in load_crds()}
    assert {"ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "Queue"} <= kinds
    versions = crd_versions()
    assert ("kueue.x-k8s.io/v1beta2", "ClusterQueue") in versions
    assert ("kueue.x-k8s.io/v1beta1", "ClusterQueue") in versions  # served, deprecated
    assert ("scheduling.volcano.sh/v1beta1", "Queue") in versions
    assert (
        "cohortName"
        in versions[("kueue.x-k8s.io/v1beta2", "ClusterQueue")]["properties"]["spec"]["properties"]
    )


def test_validating_a_cluster_queue_parses_only_its_crd() -> None:
    validate._load_crd_file.cache_clear()
    assert validate_object(cluster_queue()) == []
    assert validate._load_crd_file.cache_info().currsize == 1
    assert find_crd("kueue.x-k8s.io", "Nope") is None


def test_scope_lookup() -> None:
    assert is_namespaced("kueue.x-k8s.io/v1beta2", "LocalQueue") is True
    assert is_namespaced("kueue.x-k8s.io/v1beta2", "ClusterQueue") is False
    assert is_namespaced("scheduling.volcano.sh/v1beta1", "Queue") is False
    assert is_namespaced("v1", "ResourceQuota") is True
    assert is_namespaced("scheduling.k8s.io/v1", "PriorityClass") is False
    assert is_namespaced("kueue.x-k8s.io/v1beta2", "Nope") is None


# --------------------------------------------------------------------------- ResourceFlavor webhook

RF = "ResourceFlavor h100-80gb"
NAME_PART = (
    "the name part must be 1-63 characters of letters, digits, '-', '_' or '.', starting and "
    "ending with a letter or digit"
)
LABEL_VALUE = (
    "must be at most 63 characters of letters, digits, '-', '_' or '.', starting and ending "
    "with a letter or digit"
)


def h100_flavor(**spec: Any) -> dict[str, Any]:
    flavor = load(MINIMAL_KUEUE)[0]
    flavor["spec"].update(spec)
    return flavor


def test_resource_flavor_node_labels_are_valid_labels() -> None:
    flavor = h100_flavor(nodeLabels={"@abc": "x", "example.com/zone": "-bad"})
    assert validate_object(flavor) == [
        f'{RF}: spec.nodeLabels[@abc]: invalid label key "@abc": {NAME_PART}',
        f'{RF}: spec.nodeLabels[example.com/zone]: invalid label value "-bad": {LABEL_VALUE}',
    ]
    prefix = h100_flavor(nodeLabels={"Example.COM/zone": "a"})
    assert validate_object(prefix) == [
        f'{RF}: spec.nodeLabels[Example.COM/zone]: invalid label key "Example.COM/zone": the '
        "prefix 'Example.COM' must be a lowercase RFC 1123 subdomain"
    ]


def test_resource_flavor_node_taints_keys_values_and_uniqueness() -> None:
    taints = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "other", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"},  # other effect: ok
        {"key": "bad key", "value": "a b", "effect": "NoSchedule"},
    ]
    assert validate_object(h100_flavor(nodeTaints=taints)) == [
        f"{RF}: spec.nodeTaints[1]: Duplicate value: taints must be unique by key and effect "
        'pair: key "nvidia.com/gpu" with effect "NoSchedule" is already nodeTaints[0]',
        f'{RF}: spec.nodeTaints[3].key: invalid taint key "bad key": {NAME_PART}',
        f'{RF}: spec.nodeTaints[3].value: invalid taint value "a b": {LABEL_VALUE}',
    ]


def test_resource_flavor_node_taint_effect_is_required() -> None:
    taints = [{"key": "nvidia.com/gpu", "effect": ""}]
    errors = validate_object(h100_flavor(nodeTaints=taints))
    assert (
        f"{RF}: spec.nodeTaints[0].effect: Required value: a taint needs an effect (NoSchedule, "
        "PreferNoSchedule or NoExecute)"
    ) in errors
    # The CRD's CEL rule refuses the empty effect too, in the API server's words.
    assert (
        f'{RF}: spec.nodeTaints: Invalid value: "array": supported taint effect values: '
        "'NoSchedule', 'PreferNoSchedule', 'NoExecute'"
    ) in errors


def test_resource_flavor_toleration_keys_are_qualified_names_when_set() -> None:
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"operator": "Exists"},  # no key: tolerates every taint
        {"key": "/gpu", "operator": "Exists"},
    ]
    assert validate_object(h100_flavor(tolerations=tolerations)) == [
        f"{RF}: spec.tolerations[2].key: invalid toleration key \"/gpu\": the prefix '' must be "
        "a lowercase RFC 1123 subdomain"
    ]


def test_update_checks_transition_rules_against_the_stored_object() -> None:
    stored = h100_flavor(topologyName="default")
    changed = h100_flavor(topologyName="default", nodeLabels={"nvidia.com/gpu.product": "B200"})
    assert validate_object(changed) == []  # a create
    assert validate_object(changed, old=stored) == [
        f'{RF}: spec: Invalid value: "object": nodeLabels are immutable when topologyName is set'
    ]
    assert validate.transition_issues(changed, stored) == validate_object(changed, old=stored)
    assert validate.transition_issues(stored, stored) == []
    assert validate.transition_issues(one(VOLCANO_QUEUE), one(VOLCANO_QUEUE)) == []


def test_a_local_queue_keeps_its_cluster_queue() -> None:
    queue = load(MINIMAL_KUEUE)[4]
    assert validate.transition_issues(queue, {**queue, "spec": {"clusterQueue": "other"}}) == [
        'LocalQueue team-a/default: spec.clusterQueue: Invalid value: "team-a": field is immutable'
    ]


def test_a_workload_update_cannot_change_status_so_rules_see_the_stored_status() -> None:
    stored = copy.deepcopy(BASES["Workload"])  # quota reserved and admitted
    desired = copy.deepcopy(stored)
    del desired["status"]  # what a client sends: the status subresource keeps the stored one
    desired["spec"]["queueName"] = "other"
    assert validate.transition_issues(desired, stored) == [
        'Workload team-a/job-train-1: Invalid value: "object": queueName is immutable while '
        "workload quota reserved"
    ]
    desired["spec"]["queueName"] = stored["spec"]["queueName"]
    desired["spec"]["active"] = False  # what idle suspension patches
    assert validate.transition_issues(desired, stored) == []
