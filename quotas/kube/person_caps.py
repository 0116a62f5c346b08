"""Per-person caps inside a tenant (R14, the user level), enforced by Kueue and the API server.

Kueue has no cap per submitter (its documentation keeps per-user quotas out of scope), but it
has everything to build one: ClusterQueues, Cohorts that nest (v1beta2 ``parentName``, with
their own ``resourceGroups``) and LocalQueues. For a tenant with capped people:

* the tenant gets a Cohort of its own, ``<slug>.people``, under the cohort its ClusterQueue
  was in. Its resource groups hold nominalQuota 0 and the tenant's borrowing limit
  (``limit - guaranteed``) per flavor and resource, so the subtree (the team's ClusterQueue
  with its guarantee, and every person's queue) never uses more than the tenant's limit. The
  team's lending limit and fair-sharing weight move to this Cohort: it is what now meets the
  other tenants.
* the team's ClusterQueue moves into that Cohort, unchanged otherwise: uncapped members keep
  submitting to the ``default`` LocalQueue.
* each capped person gets a ClusterQueue ``<slug>.<person>`` in the Cohort: nominalQuota 0
  everywhere, ``borrowingLimit`` = their cap where they have one (none elsewhere: the Cohort
  bounds it), selecting the tenant's namespaces; and a LocalQueue ``<person>`` in each
  namespace. A person's work beyond their cap waits in their queue (Kueue: "insufficient
  unused quota"); the team's queue reclaims its guarantee from them (``reclaimWithinCohort``),
  so the other members still get theirs.
* a ValidatingAdmissionPolicy binds ``request.userInfo.username`` to the person's queue: the
  tenant's namespaces carry one annotation per person queue
  (``person-queue.portal.gpu-quota.io/<LocalQueue>: <username>``); a capped person may submit
  only to their own queue, and nobody may submit to another person's. Controllers (kube-system
  loops, Kueue, the cluster's trusted operators) are not judged: what they create was judged
  when the person created its owner. On update only a changed queue name is judged.

Removing a person prunes their queues: Kueue's ``kueue.x-k8s.io/resource-in-use`` finalizer
keeps the ClusterQueue (admitting nothing new) until their admitted workloads end; nothing is
evicted.

Pure, like the compiler that calls it: dicts in, dicts out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from copy import deepcopy
from decimal import Decimal
from typing import Any, Final

from quotas.kube import names, vgpu
from quotas.kube.enforcement import QUEUE_NAME_LABEL, cel_quoted, policy_pair, resource_rules
from quotas.kube.spec import (
    PersonSpec,
    TenantSpec,
)
from quotas.quantity import format_quantity, parse_resource_amount

API_KUEUE: Final = "kueue.x-k8s.io/v1beta2"
LABEL_PERSON: Final = "portal.gpu-quota.io/person"
# One annotation per person queue on each of the tenant's namespaces: the LocalQueue's name
# after the slash, the Kubernetes username it belongs to as the value.
ANNOTATION_PREFIX: Final = "person-queue.portal.gpu-quota.io/"
POLICY_NAME: Final = "gpu-quota-portal-person-queues"
COHORT_SUFFIX: Final = "people"
PIPELINE_KEY: Final = "pipeline.team"  # a dot: no member's key can be it
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
_KEY_MAX: Final = 40
_RESERVED: Final = frozenset({names.LOCAL_QUEUE, COHORT_SUFFIX})
# Depth of the tenant's Cohort: below every cohort of the tree (applied after them).
_LEAF_DEPTH: Final = "99"

Metadata = Callable[..., dict[str, Any]]


def person_key(person: PersonSpec) -> str:
    """The person's part of their queues' names: the username in lower case with anything
    but letters, digits and '-' made '-', and a short hash of the username where that changed
    it (or it is too long, or a name the portal uses), so two people never share one."""
    if person.pipeline:
        return PIPELINE_KEY
    base = re.sub(r"[^a-z0-9-]+", "-", person.username.lower()).strip("-")[:_KEY_MAX]
    base = base.strip("-") or "user"
    if base != person.username or base in _RESERVED:
        digest = hashlib.sha256(person.username.encode()).hexdigest()[:6]
        base = f"{base}-{digest}"
    return base


def tenant_cohort(slug: str) -> str:
    return f"{slug}.{COHORT_SUFFIX}"


def cluster_queue_name(slug: str, person: PersonSpec) -> str:
    return f"{slug}.{person_key(person)}"


def username_in(person: PersonSpec, namespace: str, slug: str) -> str:
    """The Kubernetes username the person submits as in ``namespace``."""
    if person.pipeline:
        return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{names.service_account(slug)}"
    return person.username


def _check(tenant: TenantSpec) -> None:
    seen: set[str] = set()
    for person in tenant.people:
        key = person_key(person)
        if key in seen:
            raise ValueError(f"tenant {tenant.slug!r}: person {person.username!r} is listed twice")
        seen.add(key)
        for cap in person.caps:
            # Refuses negative and fractional amounts where Kubernetes would round them.
            format_quantity(parse_resource_amount(cap.resource, cap.amount), cap.resource)
            vgpu.pushed_amount(cap.amount, cap.resource)  # GPU memory: whole MiB


def compile_people(
    *,
    tenant: TenantSpec,
    cohort: str,
    objects: list[dict[str, Any]],
    metadata: Metadata,
) -> list[dict[str, Any]]:
    """``objects`` (a tenant's, from ``compiler.compile_tenant``) with the tenant's people
    added: its Cohort, the team's ClusterQueue moved into it, a ClusterQueue per person and
    their LocalQueue in each namespace, and the namespaces annotated with who owns which
    queue. Unchanged when the tenant has nobody capped or no ClusterQueue."""
    team = next(
        (
            o
            for o in objects
            if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == tenant.slug
        ),
        None,
    )
    if not tenant.people or team is None:
        return objects
    _check(tenant)
    people = sorted(tenant.people, key=person_key)
    out = [o for o in objects if o is not team]
    team = deepcopy(team)
    own_cohort = tenant_cohort(tenant.slug)
    out.append(_tenant_cohort(tenant, cohort, team, metadata))
    team["spec"]["cohortName"] = own_cohort
    team["spec"].pop("fairSharing", None)
    for group in team["spec"].get("resourceGroups") or []:
        for flavor in group["flavors"]:
            for resource in flavor["resources"]:
                resource.pop("lendingLimit", None)
    out.append(team)
    namespaces = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    for person in people:
        out.append(_person_queue(tenant, person, team, metadata))
        out.extend(
            {
                "apiVersion": API_KUEUE,
                "kind": "LocalQueue",
                "metadata": metadata(
                    person_key(person), namespace, labels={LABEL_PERSON: person_key(person)}
                ),
                "spec": {"clusterQueue": cluster_queue_name(tenant.slug, person)},
            }
            for namespace in namespaces
        )
    for index, obj in enumerate(out):
        if obj["kind"] == "Namespace":
            out[index] = _annotated(obj, tenant, people)
    return out


def _annotated(
    namespace: dict[str, Any], tenant: TenantSpec, people: Sequence[PersonSpec]
) -> dict[str, Any]:
    namespace = deepcopy(namespace)
    name = namespace["metadata"]["name"]
    annotations = dict(namespace["metadata"].get("annotations") or {})
    for person in people:
        annotations[ANNOTATION_PREFIX + person_key(person)] = username_in(person, name, tenant.slug)
    namespace["metadata"]["annotations"] = dict(sorted(annotations.items()))
    return namespace


def _tenant_cohort(
    tenant: TenantSpec, parent: str, team: dict[str, Any], metadata: Metadata
) -> dict[str, Any]:
    """The tenant's own Cohort: nothing of its own (nominalQuota 0), borrowing at most what the
    tenant may borrow, so the team's queue and its people's together stay within its limit."""
    groups = []
    for group in team["spec"].get("resourceGroups") or []:
        flavors = []
        for flavor in group["flavors"]:
            resources = []
            for resource in flavor["resources"]:
                line = {"name": resource["name"], "nominalQuota": "0"}
                if "borrowingLimit" in resource:
                    line["borrowingLimit"] = resource["borrowingLimit"]
                if "lendingLimit" in resource:
                    line["lendingLimit"] = resource["lendingLimit"]
                resources.append(line)
            flavors.append({"name": flavor["name"], "resources": resources})
        groups.append({"coveredResources": list(group["coveredResources"]), "flavors": flavors})
    spec: dict[str, Any] = {"parentName": parent}
    if groups:
        spec["resourceGroups"] = groups
    if tenant.fair_share_weight is not None:
        spec["fairSharing"] = {"weight": str(tenant.fair_share_weight)}
    meta = metadata(
        tenant_cohort(tenant.slug),
        annotations={"portal.gpu-quota.io/hierarchy-depth": _LEAF_DEPTH},
    )
    return {"apiVersion": API_KUEUE, "kind": "Cohort", "metadata": meta, "spec": spec}


def _person_queue(
    tenant: TenantSpec, person: PersonSpec, team: dict[str, Any], metadata: Metadata
) -> dict[str, Any]:
    """A person's ClusterQueue: no quota of their own, borrowing within the tenant's Cohort at
    most their cap; the team's resource groups (flavors in the same order)."""
    # The team's queue names a vGPU flavor's memory and compute as Kueue counts them.
    caps = {(cap.flavor, vgpu.kueue_name(cap.resource)): cap for cap in person.caps}
    groups = []
    for group in team["spec"].get("resourceGroups") or []:
        flavors = []
        for flavor in group["flavors"]:
            resources = []
            for resource in flavor["resources"]:
                line = {"name": resource["name"], "nominalQuota": "0"}
                cap = caps.get((flavor["name"], resource["name"]))
                if cap is not None:
                    amount = vgpu.pushed_amount(cap.amount, cap.resource)
                    line["borrowingLimit"] = _quantity(amount, resource["name"])
                elif resource.get("borrowingLimit") == "0" and resource["nominalQuota"] == "0":
                    line["borrowingLimit"] = "0"  # the tenant has none of it
                resources.append(line)
            flavors.append({"name": flavor["name"], "resources": resources})
        groups.append({"coveredResources": list(group["coveredResources"]), "flavors": flavors})
    spec: dict[str, Any] = {
        "cohortName": tenant_cohort(tenant.slug),
        "namespaceSelector": deepcopy(team["spec"]["namespaceSelector"]),
        "queueingStrategy": "BestEffortFIFO",
        # Nothing of its own to reclaim; inside the person's queue, priority wins.
        "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "LowerPriority"},
        "stopPolicy": team["spec"].get("stopPolicy", "None"),
    }
    if groups:
        spec["resourceGroups"] = groups
    key = person_key(person)
    return {
        "apiVersion": API_KUEUE,
        "kind": "ClusterQueue",
        "metadata": metadata(cluster_queue_name(tenant.slug, person), labels={LABEL_PERSON: key}),
        "spec": spec,
    }


def _quantity(amount: Decimal, resource: str) -> str:
    return format_quantity(parse_resource_amount(resource, amount), resource)


# --- the admission policy ---------------------------------------------------------------------


def _cel_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(cel_quoted(v) for v in values) + "]"


# The kinds Kueue manages that a person submits (the pods of a Job, JobSet... are made by
# controllers, which the policy does not judge).
_RULES: Final = (
    ("", "v1", ("pods",)),
    ("batch", "v1", ("jobs", "cronjobs")),
    ("apps", "v1", ("deployments", "statefulsets")),
    ("jobset.x-k8s.io", "*", ("jobsets",)),
    ("kubeflow.org", "*", ("pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs")),
    ("ray.io", "*", ("rayjobs", "rayclusters")),
)
_LABELS_CEL: Final = (
    "object.kind == 'CronJob' ? "
    "(has(object.spec.jobTemplate.metadata) && has(object.spec.jobTemplate.metadata.labels) ? "
    "object.spec.jobTemplate.metadata.labels : {}) : "
    "(has(object.metadata.labels) ? object.metadata.labels : {})"
)
_OLD_LABELS_CEL: Final = _LABELS_CEL.replace("object.", "oldObject.")


def admission_policy(
    *, cluster: str, kueue_account: str, trusted_controllers: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The cluster-wide ValidatingAdmissionPolicy and its Deny binding that keep each capped
    person to their own queue in the tenants' namespaces (read from the namespace's
    annotations, so one policy serves every tenant)."""
    exact = sorted(
        {
            "system:kube-controller-manager",
            kueue_account,
            *(e for e in trusted_controllers if not e.endswith("*")),
        }
    )
    prefixes = sorted(
        {
            f"{SERVICE_ACCOUNT_PREFIX}kube-system:",
            *(e[:-1] for e in trusted_controllers if e.endswith("*")),
        }
    )
    label = cel_quoted(QUEUE_NAME_LABEL)
    prefix = cel_quoted(ANNOTATION_PREFIX)
    variables = [
        {
            "name": "user",
            "expression": "has(request.userInfo.username) ? request.userInfo.username : ''",
        },
        {"name": "labels", "expression": _LABELS_CEL},
        {
            "name": "queue",
            "expression": f"{label} in variables.labels ? variables.labels[{label}] : "
            f"{cel_quoted(names.LOCAL_QUEUE)}",
        },
        {
            "name": "owners",
            "expression": "has(namespaceObject.metadata.annotations) ? "
            "namespaceObject.metadata.annotations : {}",
        },
        {"name": "ownerKey", "expression": f"{prefix} + variables.queue"},
        {
            "name": "mine",
            "expression": f"variables.owners.filter(k, k.startsWith({prefix}) && "
            "variables.owners[k] == variables.user)"
            f".map(k, k.substring({len(ANNOTATION_PREFIX)}))",
        },
    ]
    controller = (
        f"variables_user in {_cel_list(exact)} || "
        f"{_cel_list(prefixes)}.exists(p, variables_user.startsWith(p))"
    )
    match_conditions = [
        {
            "name": "not-a-controller",
            "expression": "!("
            + controller.replace(
                "variables_user",
                "(has(request.userInfo.username) ? request.userInfo.username : '')",
            )
            + ")",
        },
        {
            # On update, only a queue name that changes is judged (a lead may edit a
            # person's job; Kueue may relabel what it manages).
            "name": "queue-chosen",
            "expression": "request.operation == 'CREATE' || oldObject == null || "
            f"({label} in ({_LABELS_CEL}) ? ({_LABELS_CEL})[{label}] : '') != "
            f"({label} in ({_OLD_LABELS_CEL}) ? ({_OLD_LABELS_CEL})[{label}] : '')",
        },
    ]
    validations = [
        {
            "expression": "size(variables.mine) == 0 || variables.queue in variables.mine",
            "messageExpression": "variables.user + ' has a cap in this team: submit to your "
            f"own queue (label {QUEUE_NAME_LABEL}: ' + variables.mine[0] + '), not to ' + "
            "variables.queue",
            "reason": "Forbidden",
        },
        {
            "expression": "!(variables.ownerKey in variables.owners) || "
            "variables.owners[variables.ownerKey] == variables.user",
            "messageExpression": "'the queue ' + variables.queue + ' holds the capped work of ' "
            "+ variables.owners[variables.ownerKey] + '; ' + variables.user + ' may not submit "
            f"to it (use your own queue, or {names.LOCAL_QUEUE})'",
            "reason": "Forbidden",
        },
    ]
    return policy_pair(
        name=POLICY_NAME,
        cluster=cluster,
        resource_rules=resource_rules(_RULES),
        variables=variables,
        validations=validations,
        match_conditions=match_conditions,
    )


__all__ = [
    "ANNOTATION_PREFIX",
    "LABEL_PERSON",
    "POLICY_NAME",
    "admission_policy",
    "cluster_queue_name",
    "compile_people",
    "person_key",
    "tenant_cohort",
    "username_in",
]
