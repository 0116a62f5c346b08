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
  An owner reference counts only when the controller that makes such objects sends the
  request (``request.userInfo``): the built-in loop of the owner's kind, kube-controller-manager,
  Kueue, or an operator the cluster trusts.
* ``split`` ("namespace split"). The ResourceQuotas of a tenant's namespaces add up to its
  limit (an admin-set share per namespace, even by default), so Kubernetes alone bounds the
  total. Kueue, where present, still queues what carries a queue name; but a single namespace
  never holds more than its share. A quota counts a resource name, not a GPU model: where
  models (or a model and time-sliced shares) share a name, the verdict says work can get
  around the limit.

In both modes (from Kubernetes 1.30) two more policies refuse the NVIDIA container toolkit's
device variables in the tenants' pods and pod templates, and as keys of their ConfigMaps and
Secrets (``device_env_policies``): they would reach GPUs outside the device plugin and every
quota. What an image sets itself only the nodes' settings close (docs/operations.md).

Pure: data in, dicts out. The CEL the policy carries is checked by the same engine the
validator uses (``quotas.kube.cel``) in the tests, and by the API server on the cluster.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal
from fractions import Fraction
from typing import Any, Final

import yaml

from quotas.kube.spec import LABEL_CLUSTER, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY, FlavorSpec

__all__ = [
    "DEVICE_ENV_POLICY",
    "DEVICE_KEYS_POLICY",
    "DEVICE_VARIABLES",
    "ENFORCEMENT_KUEUE",
    "ENFORCEMENT_SPLIT",
    "KUEUE_CONFIG_KEY",
    "KUEUE_CONFIG_NAME",
    "KUEUE_CONFIG_NAMESPACE",
    "KueueConfig",
    "SharedResource",
    "Verdict",
    "admission_policy",
    "device_env_policies",
    "has_admission_policies",
    "kubernetes_minor",
    "kueue_account",
    "parse_kueue_config",
    "read_trusted_controllers",
    "selector_matches",
    "shared_resources",
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


def cel_quoted(text: str) -> str:
    """``text`` as a single-quoted CEL string literal (the other policies' style)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


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


def has_admission_policies(kubernetes_version: str) -> bool:
    """Does a cluster of this version run ValidatingAdmissionPolicies (GA in 1.30)?"""
    return kubernetes_minor(kubernetes_version) >= POLICY_MIN_VERSION


# Who creates an owned object where Kubernetes would make it. kube-controller-manager runs
# every built-in controller under its own credential, or, with
# ``--use-service-account-credentials``, each loop under a ServiceAccount of kube-system
# (the names of its bootstrap RBAC policy, controller_policy.go); each loop creates objects
# owned by the one kind it reconciles (owner apiVersion/kind).
KUBE_CONTROLLER_MANAGER: Final = "system:kube-controller-manager"
_SERVICE_ACCOUNT: Final = "system:serviceaccount:"
_CONTROLLER_OWNERS: Final = {
    f"{_SERVICE_ACCOUNT}kube-system:job-controller": ("batch/v1", "Job"),
    f"{_SERVICE_ACCOUNT}kube-system:cronjob-controller": ("batch/v1", "CronJob"),
    f"{_SERVICE_ACCOUNT}kube-system:deployment-controller": ("apps/v1", "Deployment"),
    f"{_SERVICE_ACCOUNT}kube-system:replicaset-controller": ("apps/v1", "ReplicaSet"),
    f"{_SERVICE_ACCOUNT}kube-system:statefulset-controller": ("apps/v1", "StatefulSet"),
    f"{_SERVICE_ACCOUNT}kube-system:daemon-set-controller": ("apps/v1", "DaemonSet"),
    f"{_SERVICE_ACCOUNT}kube-system:replication-controller": ("v1", "ReplicationController"),
}
KUEUE_CONTROLLER_ACCOUNT: Final = "kueue-controller-manager"


def kueue_account(config: KueueConfig | None) -> str:
    """Kueue's own identity: the ServiceAccount its manager runs as, in its namespace."""
    namespace = config.namespace if config is not None else KUEUE_CONFIG_NAMESPACE
    return f"{_SERVICE_ACCOUNT}{namespace}:{KUEUE_CONTROLLER_ACCOUNT}"


def read_trusted_controllers(value: Any) -> tuple[str, ...]:
    """The cluster's trusted operators (Kubernetes usernames, a trailing ``*`` for a prefix),
    checked; ValueError saying which entry cannot be read."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ValueError("the trusted controllers are not a list of Kubernetes usernames")
    entries: list[str] = []
    for entry in value:
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"the trusted controller {entry!r} is not a Kubernetes username")
        text = entry.strip()
        if any(ch.isspace() for ch in text) or "*" in text[:-1] or text == "*":
            raise ValueError(
                f"the trusted controller {text!r} is not a Kubernetes username (a single "
                "trailing * may end a prefix, after at least one character)"
            )
        entries.append(text)
    return tuple(dict.fromkeys(entries))


def _broad(entry: str) -> bool:
    """Does a trusted prefix reach beyond one namespace's ServiceAccounts (so possibly to
    people, or to a tenant's own accounts)?"""
    if not entry.endswith("*"):
        return False
    prefix = entry[:-1]
    if not prefix.startswith(_SERVICE_ACCOUNT):
        return True
    namespace, colon, _ = prefix.removeprefix(_SERVICE_ACCOUNT).partition(":")
    return not (namespace and colon)


def _entry_namespace(entry: str) -> str:
    """The namespace of a ServiceAccount entry ("" for other identities)."""
    if not entry.startswith(_SERVICE_ACCOUNT):
        return ""
    namespace, colon, _ = entry.removeprefix(_SERVICE_ACCOUNT).partition(":")
    return namespace if colon else ""


def _gpu_key_cel(accelerators: Sequence[str], amounts: str) -> str:
    """CEL: is the resource name ``k`` of the map ``amounts`` a GPU or MIG resource asked
    for in an amount other than zero?"""
    names = sorted(set(accelerators) | {"nvidia.com/gpu"})
    zero = _cel_list(["0", "0m"])
    return (
        f"((k in {_cel_list(names)} || k.startsWith('nvidia.com/mig-')) && "
        f"!(string({amounts}[k]) in {zero}))"
    )


def _container_gpu_cel(accelerators: Sequence[str], container: str) -> str:
    """CEL: does the container ``container`` ask for a GPU or MIG device (request or limit)?"""
    requested = _gpu_key_cel(accelerators, f"{container}.resources.requests")
    limited = _gpu_key_cel(accelerators, f"{container}.resources.limits")
    return (
        f"(has({container}.resources) && "
        f"((has({container}.resources.requests) && "
        f"{container}.resources.requests.exists(k, {requested})) || "
        f"(has({container}.resources.limits) && "
        f"{container}.resources.limits.exists(k, {limited}))))"
    )


# The pod spec of each kind the policies match: its own for a Pod, its job template's pod
# template for a CronJob, its pod template for the others.
_SPEC_CEL: Final = (
    "object.kind == 'Pod' ? object.spec : "
    "(object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec : "
    "object.spec.template.spec)"
)
_NS_LABELS_CEL: Final = (
    "has(namespaceObject.metadata.labels) ? namespaceObject.metadata.labels : {}"
)
_TENANT_CEL: Final = (
    f"{_cel_string(LABEL_TENANT)} in variables.nsLabels ? "
    f"variables.nsLabels[{_cel_string(LABEL_TENANT)}] : request.namespace"
)
_USER_CEL: Final = (
    "has(request.userInfo) && has(request.userInfo.username) ? request.userInfo.username : ''"
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


def _tenant_namespaces() -> dict[str, Any]:
    return {
        "matchExpressions": [
            {"key": LABEL_TENANT, "operator": "Exists"},
            {"key": LABEL_MANAGED_BY, "operator": "In", "values": [MANAGED_BY]},
        ]
    }


def policy_pair(
    *,
    name: str,
    cluster: str,
    resource_rules: list[dict[str, Any]],
    variables: list[dict[str, Any]],
    validations: list[dict[str, Any]],
    selector: dict[str, Any] | None = None,
    match_conditions: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its Deny binding, both on the namespaces ``selector``
    picks (default: every tenant namespace the portal manages)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_CLUSTER: cluster}
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "namespaceSelector": deepcopy(selector) if selector else _tenant_namespaces(),
            "resourceRules": resource_rules,
        },
    }
    if match_conditions:
        spec["matchConditions"] = match_conditions
    spec["variables"] = variables
    spec["validations"] = validations
    policy = {
        "apiVersion": API_ADMISSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }
    binding = {
        "apiVersion": API_ADMISSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": deepcopy(selector) if selector else _tenant_namespaces()
            },
        },
    }
    return [policy, binding]


def resource_rules(
    table: Sequence[tuple[str, str, Sequence[str]]], extra: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """A policy's resourceRules for creating and updating the kinds of ``table`` ((API group,
    version, resources) rows), ``extra`` resources added to the core group's row."""
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": ["CREATE", "UPDATE"],
            "resources": [*resources, *(extra if group == "" else ())],
        }
        for group, version, resources in table
    ]


def _workload_rules(extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    return resource_rules(_WORKLOAD_RULES, extra)


def _controller_cel(config: KueueConfig | None, trusted: Sequence[str]) -> str:
    """CEL: may the requesting identity create an object owned by the controller owner
    reference ``r``? Each built-in controller loop only for the kind it reconciles;
    kube-controller-manager (one credential for every loop) for any built-in kind; Kueue and
    the cluster's trusted operators for any owner."""
    exact = sorted({kueue_account(config), *(e for e in trusted if not e.endswith("*"))})
    prefixes = sorted({e[:-1] for e in trusted if e.endswith("*")})

    def owner_is(api_version: str, kind: str) -> str:
        # Compared field by field: the stand-in's CEL engine compares a concatenated string
        # unequal to a literal.
        return f"(r.apiVersion == {_cel_string(api_version)} && r.kind == {_cel_string(kind)})"

    per_loop = [
        f"(variables.user == {_cel_string(user)} && {owner_is(*owner)})"
        for user, owner in sorted(_CONTROLLER_OWNERS.items())
    ]
    any_built_in = " || ".join(owner_is(*owner) for owner in sorted(_CONTROLLER_OWNERS.values()))
    terms = [
        *per_loop,
        f"(variables.user == {_cel_string(KUBE_CONTROLLER_MANAGER)} && ({any_built_in}))",
        f"variables.user in {_cel_list(exact)}",
    ]
    if prefixes:
        terms.append(f"{_cel_list(prefixes)}.exists(p, variables.user.startsWith(p))")
    return " || ".join(terms)


def admission_policy(
    *,
    cluster: str,
    kubernetes_version: str,
    config: KueueConfig | None,
    accelerators: Sequence[str],
    trusted_controllers: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding for ``kueue`` mode: in every namespace a
    tenant owns on this cluster, refuse a GPU-requesting object that Kueue would not manage.

    An object with a controller owner reference passes only when a controller creates it
    where Kubernetes would: the built-in controller loop of its owner's kind (a Job's pods by
    the job controller, a Deployment's ReplicaSets by the deployment controller),
    kube-controller-manager, Kueue, or an operator the cluster trusts. The owner went through
    this policy when it was created. A person (or a tenant's ServiceAccount) naming an owner
    is judged like any other: an owner reference is only a claim."""
    if not has_admission_policies(kubernetes_version):
        raise ValueError(
            f"cluster {cluster!r}: 'Kueue manages everything' needs a ValidatingAdmissionPolicy "
            f"(admissionregistration.k8s.io/v1, Kubernetes 1.30 or later); the cluster runs "
            f"{kubernetes_version}: choose 'namespace split' for it"
        )
    trusted = read_trusted_controllers(list(trusted_controllers))
    managed, kinds = _managed_cel(config)
    containers = (
        "variables.spec.containers + "
        "(has(variables.spec.initContainers) ? variables.spec.initContainers : [])"
    )
    variables = [
        {"name": "spec", "expression": _SPEC_CEL},
        {
            "name": "gpu",
            "expression": f"({containers}).exists(c, {_container_gpu_cel(accelerators, 'c')})",
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
        {"name": "user", "expression": _USER_CEL},
        {
            "name": "claimsOwner",
            "expression": "has(object.metadata.ownerReferences) && "
            "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller)",
        },
        {
            # An owner reference the object already had was judged when it was created (or
            # at an earlier update): a person labelling a Job's pod is not refused for it.
            "name": "kept",
            "expression": "request.operation == 'UPDATE' && oldObject != null && "
            "has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences"
            ".filter(o, has(o.controller) && o.controller).map(o, o.uid) : []",
        },
        {
            "name": "owned",
            "expression": "variables.claimsOwner && "
            "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && "
            f"(r.uid in variables.kept || {_controller_cel(config, trusted)}))",
        },
        {"name": "nsLabels", "expression": _NS_LABELS_CEL},
        {"name": "tenant", "expression": _TENANT_CEL},
    ]
    managed_kinds = ", ".join(kinds) if kinds else "none"
    message = (
        "'tenant ' + variables.tenant + ': this ' + object.kind + ' requests GPUs but Kueue "
        "would not manage it, so it would run outside the tenant\\'s quota' + "
        "(variables.claimsOwner ? '. It names a controller owner, but ' + "
        "(variables.user == '' ? 'an unknown identity' : variables.user) + "
        "' is not a controller that creates such objects here: only Kubernetes\\' own "
        "controllers, Kueue and the operators this cluster trusts may create owned GPU "
        "objects' : '') + '. Create the workload itself (a Job, say) with the label "
        f"{QUEUE_NAME_LABEL}: default (the namespace\\'s LocalQueue), on a kind Kueue "
        f"manages on this cluster ({managed_kinds}).'"
    )
    return policy_pair(
        name=POLICY_NAME,
        cluster=cluster,
        resource_rules=_workload_rules(),
        variables=variables,
        validations=[
            {
                "expression": f"!variables.gpu || variables.owned || ({managed})",
                "messageExpression": message,
                "reason": "Forbidden",
            }
        ],
    )


# --- GPU device environment variables ---------------------------------------------------------

# The NVIDIA Container Toolkit's hook reads these from a container's environment (envvar
# device list strategy, and whenever it accepts the variable from unprivileged containers):
# they pick devices outside the device plugin, so a pod could use GPUs it never requested
# (and no quota counts). A container's own variable also overrides the one the device plugin
# sets, so they are refused in every container; "void", "none" and "" expose no device.
DEVICE_VARIABLES: Final = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
)
HARMLESS_DEVICE_VALUES: Final = ("void", "none", "")
# Harmless beside a GPU the device plugin gave, device-exposing without one: the driver's
# capabilities, and CUDA_VERSION, which makes the toolkit read an image without
# NVIDIA_VISIBLE_DEVICES as a legacy CUDA image and expose every GPU.
NO_GPU_VARIABLES: Final = ("NVIDIA_DRIVER_CAPABILITIES", "CUDA_VERSION")
GPU_VARIABLES: Final = DEVICE_VARIABLES + NO_GPU_VARIABLES
DEVICE_ENV_POLICY: Final = "gpu-quota-portal-device-env"
DEVICE_KEYS_POLICY: Final = "gpu-quota-portal-device-env-keys"


def _spelling_prefixes() -> list[str]:
    """Every envFrom prefix that, with some key, spells a refused variable."""
    return sorted({name[:i] for name in GPU_VARIABLES for i in range(1, len(name))})


def device_env_policies(
    *, cluster: str, kubernetes_version: str, accelerators: Sequence[str]
) -> list[dict[str, Any]]:
    """In every tenant namespace, in both modes: refuse pods and pod templates that name GPU
    devices through the container toolkit's variables, and ConfigMaps and Secrets holding such
    keys (a container may load them with envFrom, which no admission policy on the pod can
    read). [] where the cluster has no ValidatingAdmissionPolicy (before 1.30): the verdict
    says so."""
    if not has_admission_policies(kubernetes_version):
        return []
    device = _cel_list(DEVICE_VARIABLES)
    harmless = _cel_list(HARMLESS_DEVICE_VALUES)
    no_gpu = _cel_list(NO_GPU_VARIABLES)
    prefixes = _cel_list(_spelling_prefixes())
    bad_env = (
        f"(has(c.env) && c.env.exists(e, (e.name in {device} && "
        f"(has(e.valueFrom) || (has(e.value) && !(e.value in {harmless})))) || "
        f"(e.name in {no_gpu} && !{_container_gpu_cel(accelerators, 'c')})))"
    )
    bad_env_from = (
        f"(has(c.envFrom) && c.envFrom.exists(s, has(s.prefix) && s.prefix in {prefixes}))"
    )
    containers = (
        "variables.spec.containers + "
        "(has(variables.spec.initContainers) ? variables.spec.initContainers : []) + "
        "(has(variables.spec.ephemeralContainers) ? variables.spec.ephemeralContainers : [])"
    )
    env_variables = [
        {"name": "spec", "expression": _SPEC_CEL},
        {"name": "containers", "expression": containers},
        {
            "name": "exposing",
            "expression": f"variables.containers.filter(c, {bad_env} || {bad_env_from})"
            ".map(c, c.name)",
        },
        {"name": "nsLabels", "expression": _NS_LABELS_CEL},
        {"name": "tenant", "expression": _TENANT_CEL},
    ]
    env_message = (
        "'tenant ' + variables.tenant + ': in this ' + object.kind + ' the container(s) ' + "
        "variables.exposing.join(', ') + ' name GPU devices through the container toolkit\\'s "
        f"variables ({', '.join(DEVICE_VARIABLES)} other than void or none; "
        f"{' or '.join(NO_GPU_VARIABLES)} in a container that requests no GPU; or an envFrom "
        "prefix that could spell one), which would reach GPUs outside the device plugin and "
        "the tenant\\'s quota. Remove them and request GPUs as a resource "
        "(nvidia.com/gpu: 1) instead.'"
    )
    key_variables = [
        {
            "name": "exposing",
            "expression": " + ".join(
                f"(has(object.{field}) ? object.{field}.filter(k, k in {_cel_list(GPU_VARIABLES)})"
                " : [])"
                for field in ("data", "binaryData", "stringData")
            ),
        },
        {"name": "nsLabels", "expression": _NS_LABELS_CEL},
        {"name": "tenant", "expression": _TENANT_CEL},
    ]
    key_message = (
        "'tenant ' + variables.tenant + ': this ' + object.kind + ' holds the key(s) ' + "
        "variables.exposing.join(', ') + ', which a container loading it with envFrom would "
        "use to reach GPUs outside the device plugin and the tenant\\'s quota. Rename or "
        "remove them; a pod gets GPUs by requesting them as a resource (nvidia.com/gpu: 1).'"
    )
    return [
        *policy_pair(
            name=DEVICE_ENV_POLICY,
            cluster=cluster,
            resource_rules=_workload_rules(extra=("pods/ephemeralcontainers",)),
            variables=env_variables,
            validations=[
                {
                    "expression": "size(variables.exposing) == 0",
                    "messageExpression": env_message,
                    "reason": "Forbidden",
                }
            ],
        ),
        *policy_pair(
            name=DEVICE_KEYS_POLICY,
            cluster=cluster,
            resource_rules=[
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps", "secrets"],
                }
            ],
            variables=key_variables,
            validations=[
                {
                    "expression": "size(variables.exposing) == 0",
                    "messageExpression": key_message,
                    "reason": "Forbidden",
                }
            ],
        ),
    ]


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


@dataclass(frozen=True)
class SharedResource:
    """One accelerator resource name that several GPU models (or a model and time-sliced
    shares) advertise: a namespace quota on it bounds their sum, not each model."""

    resource: str
    models: tuple[str, ...]  # whole devices, by model (or flavor name where no model is set)
    shared: tuple[str, ...]  # models whose time-sliced shares use the same name

    def words(self) -> str:
        parts = []
        if self.models:
            parts.append(f"{_plural(len(self.models), 'GPU model')} ({', '.join(self.models)})")
        if self.shared:
            parts.append(f"time-sliced shares ({', '.join(self.shared)})")
        kinds = len(self.models) + len(self.shared)
        where = "either" if kinds == 2 else "any of them"
        return (
            f"{_and(parts)} share {self.resource}: a pod may spend the tenant's whole "
            f"{self.resource} limit on {where}"
        )


def shared_resources(flavors: Sequence[FlavorSpec]) -> list[SharedResource]:
    """The accelerator resource names (whole GPUs and MIG slices) that more than one GPU
    model, or a model's whole GPUs and time-sliced shares, advertise on this cluster."""
    by_resource: dict[str, set[tuple[bool, str]]] = {}
    for flavor in flavors:
        if flavor.kind not in ("gpu", "mig"):
            continue
        model = flavor.gpu_model or flavor.name
        sliced = flavor.time_slicing_replicas is not None
        for resource in flavor.capacity:
            if resource in ("cpu", "memory"):
                continue
            by_resource.setdefault(resource, set()).add((sliced, model))
    found = []
    for resource, kinds in sorted(by_resource.items()):
        if len(kinds) < 2:
            continue
        found.append(
            SharedResource(
                resource=resource,
                models=tuple(sorted(model for sliced, model in kinds if not sliced)),
                shared=tuple(sorted(model for sliced, model in kinds if sliced)),
            )
        )
    return found


def _device_env_lines(kubernetes_version: str) -> tuple[list[str], bool]:
    """What is said about GPU device variables, and whether the cluster can refuse them."""
    if has_admission_policies(kubernetes_version):
        return [
            "In every tenant namespace an admission policy refuses pods and pod templates that "
            "pick GPUs through the container toolkit's variables (NVIDIA_VISIBLE_DEVICES and "
            "the like) and ConfigMaps and Secrets holding them; a variable set inside a "
            "container image is stopped only by the nodes' device plugin and toolkit settings "
            "(see the operations guide)."
        ], True
    return [
        f"Kubernetes {kubernetes_version} has no ValidatingAdmissionPolicy (1.30 or later), so "
        "nothing refuses a pod that picks GPUs through NVIDIA_VISIBLE_DEVICES without "
        "requesting them: only the nodes' device plugin and container toolkit settings keep "
        "such a pod off GPUs, and the portal cannot read them."
    ], False


def verdict(
    *,
    mode: str,
    has_kueue: bool,
    config: KueueConfig | None,
    config_error: str = "",
    kubernetes_version: str = "1.33",
    flavors: Sequence[FlavorSpec] = (),
    trusted_controllers: Any = (),
    tenant_namespaces: Sequence[str] = (),
) -> Verdict:
    """What the cluster page and the API say about enforcement: "no" only where the portal's
    objects bound every tenant's GPU requests per GPU model, whatever the tenant submits."""
    env_lines, env_refused = _device_env_lines(kubernetes_version)
    if mode == ENFORCEMENT_SPLIT or not has_kueue:
        return _split_verdict(
            flavors=flavors, has_kueue=has_kueue, env_lines=env_lines, env_refused=env_refused
        )
    if config is None:
        why = f" ({config_error})" if config_error else ""
        return _kueue_unknown(
            f"Kueue's configuration could not be read{why}.",
            "The admission policy refuses GPU workloads that carry no queue name; whether "
            "Kueue manages the ones that do is not known, so nothing is claimed.",
        )
    try:
        trusted = read_trusted_controllers(trusted_controllers)
    except ValueError as error:
        return _kueue_unknown(
            f"The operators this cluster trusts to create owned GPU pods cannot be read: {error}.",
            "Who may create a pod that names a controller owner is not known, so nothing "
            "is claimed.",
        )
    lines = [*_kueue_lines(config, trusted), *env_lines]
    problems = _trust_problems(trusted, tenant_namespaces)
    if problems:
        return Verdict(mode=ENFORCEMENT_KUEUE, bypass="yes", lines=(*lines, *problems))
    return Verdict(mode=ENFORCEMENT_KUEUE, bypass="no", lines=tuple(lines))


def _split_verdict(
    *,
    flavors: Sequence[FlavorSpec],
    has_kueue: bool,
    env_lines: Sequence[str],
    env_refused: bool,
) -> Verdict:
    """The namespace split (or a cluster without Kueue): each namespace's ResourceQuota bounds
    it; a resource name several GPU models share is bounded only as a sum ("yes")."""
    lines = [
        "Each namespace's ResourceQuota holds its share of the tenant's limit, and the "
        "shares add up to the limit: Kubernetes refuses any pod beyond it, whatever "
        "submits it.",
    ]
    shared = shared_resources(flavors)
    for resource in shared:
        lines.append(f"{resource.words()}.")
    if shared:
        lines.append(
            "A namespace quota counts a resource name, not a GPU model. To bound each "
            "model, give each its own resource name (the device plugin's renamed "
            "resources), or choose 'Kueue manages everything', where Kueue counts each "
            "flavor."
        )
    lines.append(
        "Hold, idle suspension and dedicated pools act through Kueue: they reach work that "
        "carries a queue name, not bare pods and Deployments, which are bounded by the "
        "quota only."
    )
    if has_kueue:
        lines.append(
            "A namespace cannot use more than its share, even when the tenant's other "
            "namespaces are idle."
        )
    lines.extend(env_lines)
    bypass = "yes" if shared else ("no" if env_refused else "unknown")
    return Verdict(mode=ENFORCEMENT_SPLIT, bypass=bypass, lines=tuple(lines))


def _kueue_unknown(*lines: str) -> Verdict:
    """Kueue manages everything, but something the answer rests on cannot be read."""
    return Verdict(mode=ENFORCEMENT_KUEUE, bypass="unknown", lines=lines)


def _kueue_lines(config: KueueConfig, trusted: Sequence[str]) -> list[str]:
    """What Kueue manages here, what the admission policy refuses and who may create owned
    GPU objects."""
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
    others = ", ".join(trusted) if trusted else "none"
    return [
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
        "A GPU object that names a controller owner passes only when a controller creates it: "
        "Kubernetes' own controllers (each for the kind it runs), Kueue "
        f"({kueue_account(config)}) and the operators this cluster trusts ({others}). "
        "Anyone else naming an owner is refused like any other.",
        "Hold, idle suspension and dedicated pools reach every GPU workload the policy lets in.",
    ]


def _trust_problems(trusted: Sequence[str], tenant_namespaces: Sequence[str]) -> list[str]:
    """Trusted operators that would let someone create owned GPU pods outside Kueue: one
    reaching beyond one namespace's ServiceAccounts, or one in a tenant's namespace."""
    tenant_set = set(tenant_namespaces)
    broad = [entry for entry in trusted if _broad(entry)]
    tenants_own = [entry for entry in trusted if _entry_namespace(entry) in tenant_set]
    problems = []
    if broad:
        problems.append(
            f"The trusted operator {_and(broad)} reaches beyond one namespace's "
            "ServiceAccounts, so it may match people or a tenant's own accounts: they could "
            "create owned GPU pods outside Kueue."
        )
    if tenants_own:
        problems.append(
            f"The trusted operator {_and(tenants_own)} runs in a tenant's namespace: that "
            "tenant could create owned GPU pods outside Kueue."
        )
    return problems
