"""How a cluster keeps every tenant within its limit, whatever the tenant submits.

Kueue's ClusterQueue adds up a tenant's use across its namespaces, but only for the workloads
Kueue manages. A bare Pod, or a Deployment without a queue name, is invisible to it. The
portal therefore runs each cluster in one of two enforcement modes, chosen by an admin:

* ``kueue`` ("Kueue manages everything"). Every namespace of a tenant keeps a ResourceQuota
  holding the tenant's whole limit (a backstop), and a ValidatingAdmissionPolicy refuses, in
  the tenants' namespaces, any GPU-requesting object that Kueue would not manage. What Kueue
  manages is read from its own configuration (the ``kueue-manager-config`` ConfigMap):
  ``integrations.frameworks``, ``manageJobsWithoutQueueName`` and
  ``managedJobsNamespaceSelector``.
* ``split`` ("namespace split"). The ResourceQuotas of a tenant's namespaces add up to its
  limit (an admin-set share per namespace, even by default), so Kubernetes alone bounds the
  total. Kueue, where present, still queues what carries a queue name; but a single namespace
  never holds more than its share.

Pure: data in, dicts out. The CEL the policy carries is checked by the same engine the
validator uses (``quotas.kube.cel``) in the tests, and by the API server on the cluster.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any, Final

import yaml

from quotas.kube.spec import LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY

__all__ = [
    "ENFORCEMENT_KUEUE",
    "ENFORCEMENT_SPLIT",
    "KUEUE_CONFIG_KEY",
    "KUEUE_CONFIG_NAME",
    "KUEUE_CONFIG_NAMESPACE",
    "KueueConfig",
    "Verdict",
    "admission_policy",
    "kubernetes_minor",
    "parse_kueue_config",
    "selector_matches",
    "split_shares",
    "verdict",
]

ENFORCEMENT_KUEUE: Final = "kueue"
ENFORCEMENT_SPLIT: Final = "split"

# Where a Kueue install (its kustomize manifests and its Helm chart alike) keeps the manager's
# configuration: a ConfigMap mounted into the controller, one YAML document under this key.
KUEUE_CONFIG_NAMESPACE: Final = "kueue-system"
KUEUE_CONFIG_NAME: Final = "kueue-manager-config"
KUEUE_CONFIG_KEY: Final = "controller_manager_config.yaml"
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"

API_ADMISSION: Final = "admissionregistration.k8s.io/v1"
POLICY_NAME: Final = "gpu-quota-portal-kueue-only"
# ValidatingAdmissionPolicy is GA (admissionregistration.k8s.io/v1) from Kubernetes 1.30.
POLICY_MIN_VERSION: Final = (1, 30)

# Kueue's integration names for the built-in kinds, and the kinds whose pods come from a pod
# template. "Pod-based" integrations (plain pods, Deployments, StatefulSets) go through Kueue's
# pod webhook: they need the ``pod`` framework too, and managedJobsNamespaceSelector exempts
# namespaces from them entirely (with or without a queue name).
_FRAMEWORK: Final = {
    "Job": "batch/job",
    "CronJob": "batch/job",  # Kueue manages the Jobs a CronJob creates, from its jobTemplate
    "Pod": "pod",
    "Deployment": "deployment",
    "StatefulSet": "statefulset",
}
_POD_BASED: Final = frozenset({"Pod", "Deployment", "StatefulSet"})
# Kinds whose objects carry (or create) pods. ReplicaSet, DaemonSet and ReplicationController
# are never managed by Kueue: a bare one that requests GPUs is refused in ``kueue`` mode.
_WORKLOAD_RULES: Final = (
    ("", "v1", ("pods", "replicationcontrollers")),
    ("batch", "v1", ("jobs", "cronjobs")),
    ("apps", "v1", ("deployments", "statefulsets", "replicasets", "daemonsets")),
)
_ALL_KINDS: Final = (
    "Pod",
    "Job",
    "CronJob",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "DaemonSet",
    "ReplicationController",
)


@dataclass(frozen=True)
class KueueConfig:
    """What the portal needs of Kueue's manager configuration."""

    frameworks: frozenset[str]
    manage_without_queue_name: bool = False
    # None: Kueue's default (every namespace but kube-system and Kueue's own).
    namespace_selector: Mapping[str, Any] | None = None
    namespace: str = KUEUE_CONFIG_NAMESPACE

    def as_json(self) -> dict[str, Any]:
        return {
            "frameworks": sorted(self.frameworks),
            "manageJobsWithoutQueueName": self.manage_without_queue_name,
            "managedJobsNamespaceSelector": self.namespace_selector,
            "namespace": self.namespace,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KueueConfig:
        return cls(
            frameworks=frozenset(data.get("frameworks") or ()),
            manage_without_queue_name=bool(data.get("manageJobsWithoutQueueName")),
            namespace_selector=data.get("managedJobsNamespaceSelector"),
            namespace=str(data.get("namespace") or KUEUE_CONFIG_NAMESPACE),
        )

    def manages(self, kind: str, *, labelled: bool, namespace_selected: bool) -> bool:
        """Would Kueue manage an object of ``kind`` (with or without a queue-name label) in a
        namespace its managedJobsNamespaceSelector selects (or not)?"""
        framework = _FRAMEWORK.get(kind)
        if framework is None or framework not in self.frameworks:
            return False
        if kind in _POD_BASED:
            if "pod" not in self.frameworks or not namespace_selected:
                return False
            return labelled or self.manage_without_queue_name
        return labelled or (self.manage_without_queue_name and namespace_selected)


def parse_kueue_config(configmap: Mapping[str, Any]) -> KueueConfig:
    """Kueue's configuration from its ConfigMap; ValueError saying what is wrong with it."""
    data = configmap.get("data") or {}
    text = data.get(KUEUE_CONFIG_KEY)
    if not isinstance(text, str):
        raise ValueError(f"the ConfigMap has no {KUEUE_CONFIG_KEY!r} key")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{KUEUE_CONFIG_KEY} is not YAML: {exc}") from None
    if not isinstance(document, dict):
        raise ValueError(f"{KUEUE_CONFIG_KEY} is not a mapping")
    integrations = document.get("integrations") or {}
    frameworks = integrations.get("frameworks") if isinstance(integrations, dict) else None
    if frameworks is None:
        # Kueue's default: batch/job only.
        frameworks = ["batch/job"]
    if not isinstance(frameworks, list) or not all(isinstance(f, str) for f in frameworks):
        raise ValueError("integrations.frameworks is not a list of names")
    selector = document.get("managedJobsNamespaceSelector")
    if selector is not None and not isinstance(selector, dict):
        raise ValueError("managedJobsNamespaceSelector is not a label selector")
    manage = document.get("manageJobsWithoutQueueName", False)
    if not isinstance(manage, bool):
        raise ValueError("manageJobsWithoutQueueName is not true or false")
    return KueueConfig(
        frameworks=frozenset(frameworks),
        manage_without_queue_name=manage,
        namespace_selector=selector,
        namespace=str(document.get("namespace") or KUEUE_CONFIG_NAMESPACE),
    )


# --- label selectors ----------------------------------------------------------------------------


def _default_selector(config: KueueConfig) -> dict[str, Any]:
    return {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": sorted({"kube-system", config.namespace}),
            }
        ]
    }


def _effective_selector(config: KueueConfig) -> Mapping[str, Any]:
    return (
        config.namespace_selector
        if config.namespace_selector is not None
        else _default_selector(config)
    )


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector against labels (``{}`` matches everything)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _cel_string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a CEL string literal


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(_cel_string(v) for v in values) + "]"


def _selector_cel(selector: Mapping[str, Any], labels: str) -> str:
    """The selector as a CEL condition on the map expression ``labels``."""
    terms = [
        f"({_cel_string(k)} in {labels} && {labels}[{_cel_string(k)}] == {_cel_string(v)})"
        for k, v in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expression in selector.get("matchExpressions") or []:
        key = _cel_string(str(expression.get("key")))
        values = _cel_list([str(v) for v in expression.get("values") or []])
        operator = expression.get("operator")
        if operator == "In":
            terms.append(f"({key} in {labels} && {labels}[{key}] in {values})")
        elif operator == "NotIn":
            terms.append(f"!({key} in {labels} && {labels}[{key}] in {values})")
        elif operator == "Exists":
            terms.append(f"({key} in {labels})")
        elif operator == "DoesNotExist":
            terms.append(f"!({key} in {labels})")
        else:
            raise ValueError(f"managedJobsNamespaceSelector: unknown operator {operator!r}")
    return " && ".join(terms) if terms else "true"


# --- the admission policy -------------------------------------------------------------------


def kubernetes_minor(text: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version such as "1.33" or "1.30.2"; (0, 0) unreadable."""
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor.split(".")[0])
    except ValueError:
        return (0, 0)


def _gpu_key_cel(accelerators: Sequence[str], amounts: str) -> str:
    """CEL: is the resource name ``k`` of the map ``amounts`` a GPU or MIG resource asked
    for in an amount other than zero?"""
    names = sorted(set(accelerators) | {"nvidia.com/gpu"})
    zero = _cel_list(["0", "0m"])
    return (
        f"((k in {_cel_list(names)} || k.startsWith('nvidia.com/mig-')) && "
        f"!(string({amounts}[k]) in {zero}))"
    )


def _managed_cel(config: KueueConfig | None) -> tuple[str, list[str]]:
    """CEL deciding whether Kueue manages the object, and the kinds it manages (for the
    message). With the configuration unknown, the strict reading: a queue-name label on a
    kind Kueue can manage with the default integrations plus the pod-based ones."""
    if config is None:
        strict = ["Job", "CronJob", "Pod", "Deployment", "StatefulSet"]
        return f"object.kind in {_cel_list(strict)} && variables.queued", strict
    selected = _selector_cel(_effective_selector(config), "variables.nsLabels")
    terms: list[str] = []
    kinds: list[str] = []
    for kind in _ALL_KINDS:
        with_label_in = config.manages(kind, labelled=True, namespace_selected=True)
        with_label_out = config.manages(kind, labelled=True, namespace_selected=False)
        bare_in = config.manages(kind, labelled=False, namespace_selected=True)
        bare_out = config.manages(kind, labelled=False, namespace_selected=False)
        if not (with_label_in or with_label_out):
            continue
        kinds.append(kind)
        cases = []
        for labelled, in_selected, ok in (
            (True, True, with_label_in),
            (True, False, with_label_out),
            (False, True, bare_in),
            (False, False, bare_out),
        ):
            if ok:
                label = "variables.queued" if labelled else "!variables.queued"
                where = f"({selected})" if in_selected else f"!({selected})"
                cases.append(f"({label} && {where})")
        terms.append(f"(object.kind == {_cel_string(kind)} && ({' || '.join(cases)}))")
    return (" || ".join(terms) if terms else "false"), kinds


def admission_policy(
    *,
    cluster: str,
    kubernetes_version: str,
    config: KueueConfig | None,
    accelerators: Sequence[str],
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding for ``kueue`` mode: in every namespace a
    tenant owns on this cluster, refuse a GPU-requesting object that Kueue would not manage.

    A pod (or ReplicaSet, or Job) with a controller owner passes: its owner went through this
    policy when it was created (a Job's pods, a Deployment's ReplicaSet). Kueue's own pod
    webhook trusts owner references the same way."""
    if kubernetes_minor(kubernetes_version) < POLICY_MIN_VERSION:
        raise ValueError(
            f"cluster {cluster!r}: 'Kueue manages everything' needs a ValidatingAdmissionPolicy "
            f"(admissionregistration.k8s.io/v1, Kubernetes 1.30 or later); the cluster runs "
            f"{kubernetes_version}: choose 'namespace split' for it"
        )
    managed, kinds = _managed_cel(config)
    requested = _gpu_key_cel(accelerators, "c.resources.requests")
    limited = _gpu_key_cel(accelerators, "c.resources.limits")
    containers = (
        "variables.spec.containers + "
        "(has(variables.spec.initContainers) ? variables.spec.initContainers : [])"
    )
    variables = [
        {
            "name": "spec",
            "expression": "object.kind == 'Pod' ? object.spec : "
            "(object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec : "
            "object.spec.template.spec)",
        },
        {
            "name": "gpu",
            "expression": f"({containers}).exists(c, has(c.resources) && "
            f"((has(c.resources.requests) && c.resources.requests.exists(k, {requested})) || "
            f"(has(c.resources.limits) && c.resources.limits.exists(k, {limited}))))",
        },
        {
            "name": "labels",
            "expression": "object.kind == 'CronJob' ? "
            "(has(object.spec.jobTemplate.metadata) && "
            "has(object.spec.jobTemplate.metadata.labels) ? "
            "object.spec.jobTemplate.metadata.labels : {}) : "
            "(has(object.metadata.labels) ? object.metadata.labels : {})",
        },
        {"name": "queued", "expression": f"{_cel_string(QUEUE_NAME_LABEL)} in variables.labels"},
        {
            "name": "owned",
            "expression": "has(object.metadata.ownerReferences) && "
            "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)",
        },
        {
            "name": "nsLabels",
            "expression": "has(namespaceObject.metadata.labels) ? "
            "namespaceObject.metadata.labels : {}",
        },
        {
            "name": "tenant",
            "expression": f"{_cel_string(LABEL_TENANT)} in variables.nsLabels ? "
            f"variables.nsLabels[{_cel_string(LABEL_TENANT)}] : request.namespace",
        },
    ]
    managed_kinds = ", ".join(kinds) if kinds else "none"
    message = (
        "'tenant ' + variables.tenant + ': this ' + object.kind + ' requests GPUs but Kueue "
        "would not manage it, so it would run outside the tenant\\'s quota. Add the label "
        f"{QUEUE_NAME_LABEL}: default (the namespace\\'s LocalQueue) to it, on a kind Kueue "
        f"manages on this cluster ({managed_kinds}).'"
    )
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: cluster}
    tenant_namespaces = {
        "matchExpressions": [
            {"key": LABEL_TENANT, "operator": "Exists"},
            {"key": LABEL_MANAGED_BY, "operator": "In", "values": [MANAGED_BY]},
        ]
    }
    policy = {
        "apiVersion": API_ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": tenant_namespaces,
                "resourceRules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": list(resources),
                    }
                    for group, version, resources in _WORKLOAD_RULES
                ],
            },
            "variables": variables,
            "validations": [
                {
                    "expression": f"!variables.gpu || variables.owned || ({managed})",
                    "messageExpression": message,
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding = {
        "apiVersion": API_ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": labels},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": tenant_namespaces},
        },
    }
    return [policy, binding]


# --- namespace split ----------------------------------------------------------------------------


def split_shares(
    total: Decimal, weights: Sequence[Decimal], *, step: Decimal = Decimal(1)
) -> list[Decimal]:
    """``total`` divided in proportion to ``weights`` (percentages, or 1 each for an even
    split) in whole ``step`` units; what rounding leaves goes one step at a time to the
    largest remainders (the earlier namespace on a tie), so the parts add up to ``total``
    exactly and none is more than one step above its proportion."""
    whole = sum((Fraction(w) for w in weights), Fraction(0))
    if whole <= 0 or any(w < 0 for w in weights):
        raise ValueError("the shares must be positive")
    units = int((total / step).to_integral_value(rounding=ROUND_FLOOR))
    exact = [units * Fraction(w) / whole for w in weights]
    parts = [math.floor(value) for value in exact]
    left = units - sum(parts)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for index in order[:left]:
        parts[index] += 1
    return [Decimal(part) * step for part in parts]


# --- what the portal says about a cluster -----------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Can a tenant's workloads get around its limit on this cluster? ``bypass`` is "no",
    "yes" or "unknown"; ``lines`` say why, for people."""

    mode: str
    bypass: str
    lines: tuple[str, ...] = field(default_factory=tuple)


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def verdict(
    *, mode: str, has_kueue: bool, config: KueueConfig | None, config_error: str = ""
) -> Verdict:
    """What the cluster page and the API say about enforcement."""
    if mode == ENFORCEMENT_SPLIT or not has_kueue:
        lines = [
            "Each namespace's ResourceQuota holds its share of the tenant's limit, and the "
            "shares add up to the limit: Kubernetes refuses any pod beyond it, whatever "
            "submits it.",
            "Hold, idle suspension and dedicated pools act through Kueue: they reach work that "
            "carries a queue name, not bare pods and Deployments, which are bounded by the "
            "quota only.",
        ]
        if has_kueue:
            lines.append(
                "A namespace cannot use more than its share, even when the tenant's other "
                "namespaces are idle."
            )
        return Verdict(mode=ENFORCEMENT_SPLIT, bypass="no", lines=tuple(lines))
    if config is None:
        why = f" ({config_error})" if config_error else ""
        return Verdict(
            mode=ENFORCEMENT_KUEUE,
            bypass="unknown",
            lines=(
                f"Kueue's configuration could not be read{why}.",
                "The admission policy refuses GPU workloads that carry no queue name; whether "
                "Kueue manages the ones that do is not known, so nothing is claimed.",
            ),
        )
    managed = [
        kind for kind in _ALL_KINDS if config.manages(kind, labelled=True, namespace_selected=True)
    ]
    without_label = [
        kind for kind in _ALL_KINDS if config.manages(kind, labelled=False, namespace_selected=True)
    ]
    refused = [f"{kind}s" for kind in _ALL_KINDS if kind not in managed]
    refusals = [] if without_label else ["work without a queue name"]
    if refused:
        refusals.append(f"{_and(refused)} that no managed workload created")
    lines = [
        f"Kueue manages {_and([f'{k}s' for k in managed]) if managed else 'no workload kind'} "
        f"here ({_plural(len(config.frameworks), 'integration')} enabled).",
        (
            f"Without a queue name Kueue also takes {_and([f'{k}s' for k in without_label])} "
            "(manageJobsWithoutQueueName)."
            if without_label
            else "Work without a queue name is not managed by Kueue."
        ),
        "In every tenant namespace the admission policy refuses GPU work Kueue would not "
        f"manage{': ' + '; '.join(refusals) if refusals else ''}.",
        "Hold, idle suspension and dedicated pools reach every GPU workload the policy lets in.",
    ]
    return Verdict(mode=ENFORCEMENT_KUEUE, bypass="no", lines=tuple(lines))
