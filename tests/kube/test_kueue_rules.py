"""Every x-kubernetes-validations rule of the five Kueue v1beta2 CRDs, run by quotas.kube.cel
from the CRD files: each rule is broken by an object made from a valid one, and each
transition rule by an update (and kept by another)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from quotas.kube.cel import CelError, Rule, check_crd_rules, compile_check, crd_rules
from quotas.kube.validate import find_crd, load_crds, validate_object

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
KINDS = ("ClusterQueue", "Cohort", "LocalQueue", "ResourceFlavor", "Workload")
T0 = "2025-01-01T00:00:00Z"

Mutation = Callable[[dict[str, Any]], None]


def _condition(kind: str, status: str = "True") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": kind,
        "message": "",
        "lastTransitionTime": T0,
    }


BASES: dict[str, dict[str, Any]] = {
    "ClusterQueue": {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {
            "cohortName": "org-research",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
            "resourceGroups": [
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
            ],
        },
    },
    "Cohort": {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Cohort",
        "metadata": {"name": "org-research"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "a100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                        }
                    ],
                }
            ]
        },
    },
    "LocalQueue": {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": "team-a"},
        "spec": {"clusterQueue": "team-a"},
    },
    "ResourceFlavor": {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": "gpu-a100"},
        "spec": {
            "topologyName": "default",
            "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    },
    "Workload": {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workload",
        "metadata": {"name": "job-train-1", "namespace": "team-a"},
        "spec": {
            "queueName": "default",
            "priorityClassRef": {
                "group": GROUP,
                "kind": "WorkloadPriorityClass",
                "name": "team-high",
            },
            "priority": 10000,
            "maximumExecutionTimeSeconds": 3600,
            "podSets": [
                {
                    "name": "main",
                    "count": 2,
                    "minCount": 1,
                    "template": {"spec": {"containers": [{"name": "train", "image": "trainer:1"}]}},
                }
            ],
        },
        "status": {
            "conditions": [_condition("QuotaReserved"), _condition("Admitted")],
            "admission": {
                "clusterQueue": "team-a",
                "podSetAssignments": [
                    {
                        "name": "main",
                        "count": 2,
                        "flavors": {"nvidia.com/gpu": "a100"},
                        "resourceUsage": {"nvidia.com/gpu": "2"},
                        "topologyAssignment": {
                            "levels": ["kubernetes.io/hostname"],
                            "slices": [
                                {
                                    "domainCount": 2,
                                    "podCounts": {"universal": 1},
                                    "valuesPerLevel": [
                                        {"individual": {"roots": ["node-a", "node-b"]}}
                                    ],
                                }
                            ],
                        },
                    }
                ],
            },
            "admissionChecks": [
                {
                    "name": "provisioning",
                    "state": "Ready",
                    "message": "",
                    "lastTransitionTime": T0,
                    "podSetUpdates": [
                        {
                            "name": "main",
                            "tolerations": [
                                {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
                            ],
                        }
                    ],
                }
            ],
            "clusterName": "worker-1",
        },
    },
}


def _set(path: str, value: Any) -> Mutation:
    """A mutation setting a dotted path (``[0]`` indexes lists); None deletes it."""

    def mutate(obj: dict[str, Any]) -> None:
        parts = path.replace("[", ".[").split(".")
        node: Any = obj
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        last = parts[-1]
        if last.startswith("["):
            node[int(last[1:-1])] = value
        elif value is None:
            node.pop(last, None)
        else:
            node[last] = value

    return mutate


def _both(*mutations: Mutation) -> Mutation:
    def mutate(obj: dict[str, Any]) -> None:
        for mutation in mutations:
            mutation(obj)

    return mutate


def _keep(obj: dict[str, Any]) -> None:
    """No change."""


@dataclass(frozen=True)
class Probe:
    kind: str
    location: str  # where the rule sits in the schema ("" is the root)
    message: str
    breaks: Mutation  # applied to the valid base (the new object of an update)
    old: Mutation = _keep  # transition rules: the stored object, from the base
    keeps: Mutation | None = None  # transition rules: a new object that keeps the rule
    keeps_old: Mutation | None = None  # the stored object for ``keeps``, when not ``old``

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.location or '<root>'}:{self.message[:40]}"


TOLERATIONS_RF = "spec.tolerations"
TOLERATIONS_WL = "status.admissionChecks[*].podSetUpdates[*].tolerations"
WL_TOLERATION = "status.admissionChecks[0].podSetUpdates[0].tolerations[0]"
TOLERATION_PROBES = [
    (
        "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
        {"operator": "Equal", "value": "x", "effect": "NoSchedule"},
    ),
    (
        "effect must be 'NoExecute' when 'tolerationSeconds' is set",
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
    ),
    ("supported toleration values: 'Equal'(default), 'Exists'", {"key": "gpu", "operator": "In"}),
    (
        "a value must be empty when 'operator' is 'Exists'",
        {"key": "gpu", "operator": "Exists", "value": "x"},
    ),
    (
        "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        {"key": "gpu", "operator": "Exists", "effect": "NoRun"},
    ),
]
NOT_RESERVED = _set("status.conditions", [_condition("QuotaReserved", "False")])
NOT_ADMITTED = _set(
    "status.conditions", [_condition("QuotaReserved"), _condition("Admitted", "False")]
)
SCHEDULING_REF = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}
SECOND_POD_SET = {
    "name": "aux",
    "count": 1,
    "template": {"spec": {"containers": [{"name": "aux", "image": "aux:1"}]}},
}

PROBES = [
    # ClusterQueue
    Probe(
        "ClusterQueue",
        "spec",
        "borrowingLimit must be nil when cohort is empty",
        _set("spec.cohortName", None),
    ),
    Probe(
        "ClusterQueue",
        "spec.flavorFungibility",
        "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        _set("spec.flavorFungibility", {"preference": "BorrowingOverPreemption"}),
    ),
    Probe(
        "ClusterQueue",
        "spec.preemption",
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
        _set("spec.preemption", {"borrowWithinCohort": {"policy": "LowerPriority"}}),
    ),
    Probe(
        "ClusterQueue",
        "spec.resourceGroups[*]",
        "flavors must have the same number of resources as the coveredResources",
        _set("spec.resourceGroups[0].coveredResources", ["cpu", "nvidia.com/gpu", "memory"]),
    ),
    # Cohort
    Probe(
        "Cohort",
        "spec.resourceGroups[*]",
        "flavors must have the same number of resources as the coveredResources",
        _set("spec.resourceGroups[0].coveredResources", ["nvidia.com/gpu", "cpu"]),
    ),
    # LocalQueue
    Probe(
        "LocalQueue",
        "spec.clusterQueue",
        "field is immutable",
        _set("spec.clusterQueue", "team-b"),
        keeps=_set("spec.stopPolicy", "Hold"),
    ),
    # ResourceFlavor
    Probe(
        "ResourceFlavor",
        "spec",
        "at least one nodeLabel is required when topology is set",
        _set("spec.nodeLabels", {}),
    ),
    Probe(
        "ResourceFlavor",
        "spec",
        "nodeLabels are immutable when topologyName is set",
        _set("spec.nodeLabels", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}),
        keeps=_set("spec.nodeTaints", []),
    ),
    Probe(
        "ResourceFlavor",
        "spec",
        "tolerations are immutable when topologyName is set",
        _set("spec.tolerations", None),
        keeps=_set("spec.nodeTaints", []),
    ),
    Probe(
        "ResourceFlavor",
        "spec",
        "topologyName is immutable when topologyName is set",
        _set("spec.topologyName", "racks"),
        keeps=_keep,  # setting a topology on a flavor that had none is allowed
        keeps_old=_set("spec.topologyName", None),
    ),
    Probe(
        "ResourceFlavor",
        "spec.nodeTaints",
        "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        _set("spec.nodeTaints[0]", {"key": "gpu", "value": "x", "effect": "NoRun"}),
    ),
    *[
        Probe("ResourceFlavor", TOLERATIONS_RF, message, _set("spec.tolerations[0]", toleration))
        for message, toleration in TOLERATION_PROBES
    ],
    # Workload
    Probe(
        "Workload",
        "",
        "podSetAssignments must have the same number of podSets as the spec",
        _set("spec.podSets", [BASES["Workload"]["spec"]["podSets"][0], SECOND_POD_SET]),
    ),
    Probe(
        "Workload",
        "",
        "priorityClassRef is immutable while workload quota reserved",
        _both(_set("spec.priorityClassRef", None), _set("spec.priority", None)),
        keeps=_set("spec.priorityClassRef.name", "team-low"),
    ),
    Probe(
        "Workload",
        "",
        "priorityClassRef.group is immutable while workload quota reserved",
        _set("spec.priorityClassRef.group", "scheduling.k8s.io"),
        keeps=_set("spec.priorityClassRef.group", "scheduling.k8s.io"),
        keeps_old=NOT_RESERVED,
    ),
    Probe(
        "Workload",
        "",
        "priorityClassRef.kind is immutable while workload quota reserved",
        _set("spec.priorityClassRef.kind", "PriorityClass"),
        keeps=_set("spec.priorityClassRef.kind", "PriorityClass"),
        keeps_old=NOT_RESERVED,
    ),
    Probe(
        "Workload",
        "",
        "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while workload "
        "quota reserved",
        _set("spec.priorityClassRef", {**SCHEDULING_REF, "name": "low"}),
        old=_set("spec.priorityClassRef", SCHEDULING_REF),
        keeps=_set("spec.priorityClassRef", SCHEDULING_REF),
    ),
    Probe(
        "Workload",
        "",
        "queueName is immutable while workload quota reserved",
        _set("spec.queueName", "other"),
        keeps=_both(_set("spec.queueName", "other"), NOT_RESERVED),
    ),
    Probe(
        "Workload",
        "",
        "maximumExecutionTimeSeconds is immutable while workload quota reserved",
        _set("spec.maximumExecutionTimeSeconds", 7200),
        keeps=_both(_set("spec.maximumExecutionTimeSeconds", 7200), NOT_ADMITTED),
    ),
    Probe(
        "Workload",
        "spec",
        "priority should not be nil when priorityClassRef is set",
        _set("spec.priority", None),
    ),
    Probe(
        "Workload",
        "spec.podSets[*]",
        "minCount should be positive and less or equal to count",
        _set("spec.podSets[0].minCount", 3),
    ),
    Probe(
        "Workload",
        "spec.priorityClassRef",
        "only the PriorityClass kind is allowed for the scheduling.k8s.io group",
        _set("spec.priorityClassRef", {**SCHEDULING_REF, "kind": "WorkloadPriorityClass"}),
    ),
    Probe(
        "Workload",
        "spec.priorityClassRef",
        "only the WorkloadPriorityClass kind is allowed for the kueue.x-k8s.io group",
        _set("spec.priorityClassRef.kind", "PriorityClass"),
    ),
    Probe(
        "Workload",
        "status",
        "clusterName is immutable once set",
        _set("status.clusterName", "worker-2"),
        keeps=_set("status.clusterName", "worker-2"),
        keeps_old=_set("status.clusterName", None),
    ),
    Probe(
        "Workload",
        "status",
        "clusterName and nominatedClusterNames are mutually exclusive",
        _set("status.nominatedClusterNames", ["worker-2"]),
    ),
    Probe(
        "Workload",
        "status.admission.podSetAssignments[*].topologyAssignment",
        "valuesPerLevel must have the same length as the number of levels in this "
        "TopologyAssignment",
        _set(
            "status.admission.podSetAssignments[0].topologyAssignment.levels",
            ["topology.kubernetes.io/zone", "kubernetes.io/hostname"],
        ),
    ),
    Probe(
        "Workload",
        "status.admission.podSetAssignments[*].topologyAssignment.slices[*]",
        "podCounts.individual must have length equal to domainCount",
        _set(
            "status.admission.podSetAssignments[0].topologyAssignment.slices[0].podCounts",
            {"individual": [2]},
        ),
    ),
    Probe(
        "Workload",
        "status.admission.podSetAssignments[*].topologyAssignment.slices[*]",
        "valuesPerLevel.individual, if set, must have roots of length equal to domainCount of "
        "this TopologyAssignmentSlice",
        _set(
            "status.admission.podSetAssignments[0].topologyAssignment.slices[0].valuesPerLevel",
            [{"individual": {"roots": ["node-a"]}}],
        ),
    ),
    Probe(
        "Workload",
        "status.admission.podSetAssignments[*].topologyAssignment.slices[*].podCounts",
        "exactly one of the fields in [universal individual] must be set",
        _set(
            "status.admission.podSetAssignments[0].topologyAssignment.slices[0].podCounts",
            {"universal": 1, "individual": [1, 1]},
        ),
    ),
    Probe(
        "Workload",
        "status.admission.podSetAssignments[*].topologyAssignment.slices[*].valuesPerLevel[*]",
        "exactly one of the fields in [universal individual] must be set",
        _set(
            "status.admission.podSetAssignments[0].topologyAssignment.slices[0].valuesPerLevel",
            [{"universal": "rack-1", "individual": {"roots": ["node-a", "node-b"]}}],
        ),
    ),
    *[
        Probe("Workload", TOLERATIONS_WL, message, _set(WL_TOLERATION, toleration))
        for message, toleration in TOLERATION_PROBES
    ],
]
TRANSITION_PROBES = [p for p in PROBES if p.keeps is not None]


def _rules(kind: str) -> list[Rule]:
    crd = find_crd(GROUP, kind)
    assert crd is not None
    return crd_rules(crd, VERSION)


def _rule_of(probe: Probe) -> Rule:
    (rule,) = [
        r
        for r in _rules(probe.kind)
        if r.location == probe.location and r.default_message == probe.message
    ]
    return rule


def _made(probe: Probe, mutation: Mutation) -> dict[str, Any]:
    obj = copy.deepcopy(BASES[probe.kind])
    mutation(obj)
    return obj


def _described(obj: dict[str, Any]) -> str:
    metadata = obj["metadata"]
    where = f"{metadata['namespace']}/" if "namespace" in metadata else ""
    return f"{obj['kind']} {where}{metadata['name']}"


def _failing(
    kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None, **options: Any
) -> list[Rule]:
    crd = find_crd(GROUP, kind)
    assert crd is not None
    return [v.rule for v in check_crd_rules(crd, VERSION, obj, old, **options)]


def test_the_five_kueue_crds_carry_39_rules_11_of_them_transition_rules() -> None:
    # A Kueue upgrade that adds or drops rules changes these numbers: probe the new ones below.
    rules = [rule for kind in KINDS for rule in _rules(kind)]
    assert len(rules) == 39
    assert sum(rule.transition for rule in rules) == 11
    assert {kind: len(_rules(kind)) for kind in KINDS} == {
        "ClusterQueue": 4,
        "Cohort": 1,
        "LocalQueue": 1,
        "ResourceFlavor": 10,
        "Workload": 23,
    }


def test_every_rule_is_probed_once() -> None:
    probed = [(probe.kind, _rule_of(probe)) for probe in PROBES]
    every = [(kind, rule) for kind in KINDS for rule in _rules(kind)]
    assert len(probed) == len(set(probed)) == 39
    assert set(probed) == set(every)
    transition = {(p.kind, _rule_of(p)) for p in TRANSITION_PROBES}
    assert transition == {(kind, rule) for kind, rule in every if rule.transition}


def test_every_rule_of_every_crd_compiles_in_cel_python() -> None:
    failures = []
    for crd in load_crds():
        for version in crd["spec"]["versions"]:
            for rule in crd_rules(crd, version["name"]):
                for expression in filter(None, (rule.rule, rule.message_expression)):
                    try:
                        compile_check(expression)
                    except CelError as error:
                        failures.append(f"{crd['metadata']['name']} {version['name']}: {error}")
    assert failures == []


@pytest.mark.parametrize("kind", KINDS)
def test_the_valid_bases_pass(kind: str) -> None:
    assert validate_object(BASES[kind]) == []


@pytest.mark.parametrize("probe", [p for p in PROBES if p.keeps is None], ids=lambda p: p.id)
def test_each_rule_fails_on_an_object_that_breaks_it(probe: Probe) -> None:
    obj = _made(probe, probe.breaks)
    assert _failing(probe.kind, obj) == [_rule_of(probe)]  # that rule and no other
    lines = validate_object(obj)
    assert any(
        line.startswith(f"{_described(obj)}: ") and line.endswith(f": {probe.message}")
        for line in lines
    ), lines


@pytest.mark.parametrize("probe", TRANSITION_PROBES, ids=lambda p: p.id)
def test_each_transition_rule_refuses_an_update_that_breaks_it(probe: Probe) -> None:
    old, new = _made(probe, probe.old), _made(probe, probe.breaks)
    assert _failing(probe.kind, new, old, transition_only=True) == [_rule_of(probe)]
    assert any(line.endswith(f": {probe.message}") for line in validate_object(new, old=old))
    # A create of the same object does not run transition rules.
    assert _rule_of(probe) not in _failing(probe.kind, new)


@pytest.mark.parametrize("probe", TRANSITION_PROBES, ids=lambda p: p.id)
def test_each_transition_rule_allows_an_update_that_keeps_it(probe: Probe) -> None:
    assert probe.keeps is not None
    old, new = _made(probe, probe.keeps_old or probe.old), _made(probe, probe.keeps)
    assert _failing(probe.kind, new, old, transition_only=True) == []
    assert not any(probe.message in line for line in validate_object(new, old=old))
