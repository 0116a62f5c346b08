"""vGPU flavors (HAMi, ``quotas.vgpu``) in the compiled objects.

What a tenant with a quota on a vGPU flavor gets, and why:

* **ResourceQuota, two prefixes.** ``requests.nvidia.com/gpu``, ``requests.nvidia.com/gpumem``
  and ``requests.nvidia.com/gpucores`` are counted by Kubernetes' own quota admission: a pod
  over them is refused at creation with "exceeded quota". That count is per container value
  (a pod asking 2 vGPUs of 3000 MiB counts 3000), so it never refuses what HAMi admits.
  ``limits.nvidia.com/gpu``, ``limits.nvidia.com/gpumem`` and ``limits.nvidia.com/gpucores``
  are HAMi's extended quota (HAMi 2.7 and later, "Using Extended ResourceQuota for NVIDIA
  Devices"): HAMi's scheduler counts memory and compute per device (3000 MiB x 2 vGPUs = 6000)
  and leaves a pod over them Pending. Both carry the same amounts: GPU memory in MiB (the
  portal stores bytes), compute in percent points of one GPU. The ``limits.`` keys go on the
  unscoped quota only (HAMi reads a namespace's quotas without their PriorityClass scopes).
* **Division among namespaces** is the one ``nvidia.com/gpu`` has (``quotas.kube.enforcement``):
  under ``kueue`` every namespace holds the tenant's whole amount and Kueue adds them up;
  under ``split`` each namespace holds its share, in whole MiB and whole percent points (the
  parts add up to the tenant's amount exactly).
* **Kueue** counts what its ResourceTransformation makes of a pod (Kueue's "Using HAMi"):
  ``nvidia.com/gpumem`` and ``nvidia.com/gpucores`` multiplied by ``nvidia.com/gpu`` into
  ``nvidia.com/total-gpumem`` and ``nvidia.com/total-gpucores`` (``KUEUE_TRANSFORMATIONS``,
  which the cluster's Kueue configuration must hold). ClusterQueues, Cohorts and the per-person
  queues cover those two names, in MiB and percent points.
* **No LimitRange lines for GPU memory or compute.** The API server turns a LimitRange
  ``max`` into a ``default`` that LimitRanger writes into every container, CPU-only ones
  included, and HAMi's webhook gives any container that names ``nvidia.com/gpumem`` or
  ``nvidia.com/gpucores`` a vGPU; a Pod ``max`` refuses pods whose containers do not name the
  resource. So the per-container caps (memory at most one GPU's, compute 1..100 percent) are
  the admission policy's (``admission_policy``), with the other rules HAMi needs: the
  ``hami-scheduler`` scheduler for a pod asking vGPUs, memory and compute stated for every
  container asking vGPUs (HAMi would otherwise give it a whole GPU's memory), and no
  ``nvidia.com/gpumem-percentage`` (a percentage of whichever GPU HAMi picks would get
  around a quota counted in MiB).
* **A cluster whose HAMi is missing or too old** (``quotas.vgpu.hami_problem``) gets nothing
  for its vGPU flavors: ``usable`` drops them, and every tenant's lines on them, before
  anything is compiled.

Pure: data in, dicts out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

import yaml

from quotas.kube.enforcement import (
    cel_quoted,
    has_admission_policies,
    policy_pair,
    resource_rules,
)
from quotas.kube.spec import (
    LABEL_MANAGED_BY,
    MANAGED_BY,
    ClusterSpec,
    FlavorSpec,
    TenantSpec,
)
from quotas.vgpu import HAMI_SCHEDULER, MIB, hami_problem, whole_mib

__all__ = [
    "GPUCORES",
    "GPUMEM",
    "GPUMEM_PERCENTAGE",
    "KUEUE_NAMES",
    "KUEUE_TRANSFORMATIONS",
    "LABEL_GPU_MEMORY_MIB",
    "POLICY_NAME",
    "VGPU_KIND",
    "admission_policy",
    "gpu_memory_mib",
    "hami_keys",
    "hami_version_of",
    "kueue_amount",
    "kueue_name",
    "kueue_problem",
    "kueue_transformations_found",
    "pushed_amount",
    "shown",
    "unusable_flavors",
    "usable",
]

VGPU_KIND: Final = "vgpu"
GPU: Final = "nvidia.com/gpu"
GPUMEM: Final = "nvidia.com/gpumem"
GPUCORES: Final = "nvidia.com/gpucores"
GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
# Kueue's names for a pod's totals after its ResourceTransformation (Kueue's "Using HAMi").
KUEUE_NAMES: Final = {
    GPUMEM: "nvidia.com/total-gpumem",
    GPUCORES: "nvidia.com/total-gpucores",
}
_PORTAL_NAMES: Final = {kueue: portal for portal, kueue in KUEUE_NAMES.items()}
# What the cluster's Kueue configuration needs (``resources.transformations``).
KUEUE_TRANSFORMATIONS: Final = tuple(
    {
        "input": portal,
        "strategy": "Replace",
        "multiplyBy": GPU,
        "outputs": {kueue: "1"},
    }
    for portal, kueue in sorted(KUEUE_NAMES.items(), reverse=True)
)
# On each namespace of a tenant with a vGPU quota: the memory of the largest GPU among its
# vGPU flavors, in MiB, the most one container may ask per vGPU (the admission policy reads
# it; its presence is what selects the namespace).
LABEL_GPU_MEMORY_MIB: Final = "portal.gpu-quota.io/vgpu-memory-mib"
POLICY_NAME: Final = "gpu-quota-portal-vgpu"


# Where HAMi's Helm chart puts its scheduler (``helm install hami hami-charts/hami -n
# kube-system``: the Deployment ``<release>-scheduler``), and the label its chart sets to the
# chart's appVersion (HAMi's ``hami-vgpu.labels``).
HAMI_NAMESPACE: Final = "kube-system"
HAMI_DEPLOYMENT: Final = "hami-scheduler"
LABEL_VERSION: Final = "app.kubernetes.io/version"


def hami_version_of(deployment: dict[str, Any] | None) -> str:
    """HAMi's version as its scheduler Deployment says it: the chart's version label, else the
    tag of the image of its scheduler extender (``projecthami/hami:v2.7.1``); "" without a
    Deployment. A Deployment that says neither gives its first image, which
    ``quotas.vgpu.hami_problem`` words as a version it could not read."""
    if not deployment:
        return ""
    metadata = deployment.get("metadata") or {}
    labels = metadata.get("labels") or {}
    version = str(labels.get(LABEL_VERSION) or "").strip()
    if version:
        return version[:60]
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    images = [str(c.get("image") or "") for c in template.get("containers") or []]
    for image in images:
        name, _, tag = image.rpartition(":")
        if "hami" in name and tag:
            return tag[:60]
    return (images[0] if images and images[0] else "unknown")[:60]


def kueue_transformations_found(configmap: dict[str, Any], key: str) -> list[str]:
    """The inputs of ``KUEUE_TRANSFORMATIONS`` that Kueue's Configuration (the ConfigMap's
    ``key``) holds as the portal counts them: ``Replace``, multiplied by ``nvidia.com/gpu``,
    into the same output at 1. Missing ones mean Kueue counts no GPU memory or compute."""
    try:
        document = yaml.safe_load((configmap.get("data") or {}).get(key) or "")
    except yaml.YAMLError:
        return []
    resources = document.get("resources") if isinstance(document, dict) else None
    found = resources.get("transformations") if isinstance(resources, dict) else None
    if not isinstance(found, list):
        return []
    # input -> the output it must be multiplied into
    wanted = {portal: kueue for portal, kueue in KUEUE_NAMES.items()}
    matched = []
    for entry in found:
        if not isinstance(entry, dict) or str(entry.get("input")) not in wanted:
            continue
        outputs = entry.get("outputs")
        output = wanted[str(entry["input"])]
        if (
            entry.get("strategy", "Retain") == "Replace"
            and entry.get("multiplyBy") == GPU
            and isinstance(outputs, dict)
            and str(outputs.get(output)) == "1"
        ):
            matched.append(str(entry["input"]))
    return sorted(set(matched))


def kueue_problem(found: list[str] | None) -> str:
    """Why Kueue does not count vGPU memory and compute ('' when it does; '' when Kueue's
    configuration was not read: the cluster page says that already)."""
    if found is None:
        return ""
    missing = [portal for portal in (GPUMEM, GPUCORES) if portal not in found]
    if not missing:
        return ""
    return (
        f"Kueue's configuration has no ResourceTransformation for {' and '.join(missing)} "
        "(Replace, multiplyBy nvidia.com/gpu, into nvidia.com/total-gpumem and "
        "nvidia.com/total-gpucores): Kueue admits vGPU work on the vGPU count alone, and only "
        "the namespace quotas and HAMi hold GPU memory and compute"
    )


# --- which flavors count ------------------------------------------------------------------


def unusable_flavors(cluster: ClusterSpec) -> dict[str, str]:
    """The cluster's vGPU flavors that get nothing pushed, each with the reason in words
    (HAMi missing or too old): {} where HAMi is new enough or there are none."""
    problem = hami_problem(cluster.hami_version)
    if not problem:
        return {}
    return {flavor.name: problem for flavor in cluster.flavors if flavor.kind == VGPU_KIND}


def usable(
    cluster: ClusterSpec, tenants: Sequence[TenantSpec]
) -> tuple[ClusterSpec, list[TenantSpec]]:
    """The cluster and tenants as the compiler reads them: without the vGPU flavors HAMi
    cannot hold (``unusable_flavors``), and without every quota line and person cap on them,
    so no object names them or their resources. Unchanged (the same objects) otherwise."""
    dropped = unusable_flavors(cluster)
    if not dropped:
        return cluster, list(tenants)
    kept = tuple(flavor for flavor in cluster.flavors if flavor.name not in dropped)
    cluster = dataclasses.replace(cluster, flavors=kept)
    return cluster, [_without(tenant, dropped) for tenant in tenants]


def _without(tenant: TenantSpec, dropped: dict[str, str]) -> TenantSpec:
    quotas = tuple(item for item in tenant.quotas if item.flavor not in dropped)
    people = tuple(
        dataclasses.replace(
            person, caps=tuple(cap for cap in person.caps if cap.flavor not in dropped)
        )
        for person in tenant.people
    )
    return dataclasses.replace(tenant, quotas=quotas, people=people)


def gpu_memory_mib(flavors: Sequence[FlavorSpec]) -> int | None:
    """The largest one-GPU memory (MiB) among ``flavors``' vGPU flavors; None without one."""
    sizes = [f.gpu_memory_mib for f in flavors if f.kind == VGPU_KIND and f.gpu_memory_mib]
    return max(sizes) if sizes else None


# --- amounts ----------------------------------------------------------------------------------


def _base(resource: str) -> str:
    return resource.removeprefix("requests.").removeprefix("limits.")


def pushed_amount(amount: Decimal, resource: str) -> Decimal:
    """``amount`` (the portal's base units) as Kubernetes objects carry it for ``resource``
    (bare, ``requests.`` or ``limits.``): GPU memory in whole MiB (``NotWholeMiB``, a
    ValueError, otherwise), the rest unchanged."""
    if _base(resource) in (GPUMEM, KUEUE_NAMES[GPUMEM]):
        return Decimal(whole_mib(amount))
    return amount


def kueue_name(resource: str) -> str:
    """The name Kueue counts ``resource`` under (after the HAMi ResourceTransformation)."""
    return KUEUE_NAMES.get(resource, resource)


def portal_name(resource: str) -> str:
    """The portal's name of a resource Kueue counts (``kueue_name`` undone)."""
    return _PORTAL_NAMES.get(resource, resource)


def kueue_amount(amount: Decimal, resource: str) -> Decimal:
    """A portal amount of ``resource`` as Kueue counts it: GPU memory in MiB."""
    return pushed_amount(amount, portal_name(resource))


def shown(amount: Decimal, resource: str) -> tuple[Decimal, str]:
    """An amount as a compiled object carries it, with the resource name, turned back into
    what ``quotas.quantity.to_display`` reads: GPU memory keys (in MiB there) as bytes of
    ``nvidia.com/gpumem``, Kueue's compute total as ``nvidia.com/gpucores``."""
    base = portal_name(_base(resource))
    if base == GPUMEM:
        return amount * MIB, GPUMEM
    if base == GPUCORES:
        return amount, GPUCORES
    return amount, resource


def hami_keys(hard: dict[str, Decimal]) -> dict[str, Decimal]:
    """HAMi's extended quota (``limits.`` keys) for the vGPU resources of a ResourceQuota's
    ``requests.`` keys; {} where it has no GPU memory or compute key."""
    if not any(f"requests.{r}" in hard for r in (GPUMEM, GPUCORES)):
        return {}
    return {
        f"limits.{r}": hard[f"requests.{r}"]
        for r in (GPU, GPUMEM, GPUCORES)
        if f"requests.{r}" in hard
    }


# --- the admission policy -----------------------------------------------------------------


_SPEC: Final = (
    "object.kind == 'Pod' ? object.spec : "
    "(object.kind == 'CronJob' ? object.spec.jobTemplate.spec.template.spec : "
    "object.spec.template.spec)"
)
_WORKLOADS: Final = (
    ("", "v1", ("pods", "replicationcontrollers")),
    ("batch", "v1", ("jobs", "cronjobs")),
    ("apps", "v1", ("deployments", "statefulsets", "replicasets", "daemonsets")),
)


def _has(c: str, field: str, resource: str) -> str:
    """CEL: does container ``c`` name ``resource`` in its resources' ``field``? (No map
    literal: cel-python cannot word an error raised beside one.)"""
    return (
        f"(has({c}.resources) && has({c}.resources.{field}) && "
        f"{cel_quoted(resource)} in {c}.resources.{field})"
    )


def _value(c: str, resource: str) -> str:
    return f"string({c}.resources.limits[{cel_quoted(resource)}])"


def _positive(c: str, resource: str) -> str:
    value = _value(c, resource)
    return (
        f"({_has(c, 'limits', resource)} && isQuantity({value}) && "
        f"quantity({value}).isGreaterThan(quantity('0')))"
    )


def _above(c: str, resource: str, most: str) -> str:
    value = _value(c, resource)
    return (
        f"({_has(c, 'limits', resource)} && (!isQuantity({value}) || "
        f"quantity({value}).isGreaterThan(quantity({most}))))"
    )


def _names(filtered: str) -> str:
    return f"{filtered}.map(c, c.name).join(', ')"


def admission_policy(*, cluster: str, kubernetes_version: str) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its Deny binding for the namespaces of tenants with a
    vGPU quota (labelled ``LABEL_GPU_MEMORY_MIB``), in both enforcement modes: pods and pod
    templates there must ask GPU memory in MiB and compute in percent for every container
    asking vGPUs, each within one GPU, never ``nvidia.com/gpumem-percentage``; a pod asking
    vGPUs must be scheduled by ``hami-scheduler`` (HAMi's webhook sets it; a pod that skips
    the webhook would be placed without HAMi's quota). [] before Kubernetes 1.30 (no
    ValidatingAdmissionPolicy): the docs say the quotas then rest on HAMi alone."""
    if not has_admission_policies(kubernetes_version):
        return []
    selector = {
        "matchExpressions": [
            {"key": LABEL_GPU_MEMORY_MIB, "operator": "Exists"},
            {"key": LABEL_MANAGED_BY, "operator": "In", "values": [MANAGED_BY]},
        ]
    }
    asks_vgpu = f"variables.containers.filter(c, {_positive('c', GPU)})"
    variables = [
        {"name": "spec", "expression": _SPEC},
        {
            "name": "containers",
            "expression": "variables.spec.containers + (has(variables.spec.initContainers) ? "
            "variables.spec.initContainers : [])",
        },
        {"name": "vgpu", "expression": asks_vgpu},
        {
            "name": "maxMemory",
            "expression": f"namespaceObject.metadata.labels[{cel_quoted(LABEL_GPU_MEMORY_MIB)}]",
        },
        {
            "name": "percentage",
            "expression": "variables.containers.filter(c, "
            f"{_has('c', 'limits', GPUMEM_PERCENTAGE)} || "
            f"{_has('c', 'requests', GPUMEM_PERCENTAGE)})",
        },
        {
            "name": "noMemory",
            "expression": f"variables.vgpu.filter(c, !{_positive('c', GPUMEM)})",
        },
        {
            "name": "noCores",
            "expression": f"variables.vgpu.filter(c, !{_positive('c', GPUCORES)})",
        },
        {
            "name": "tooMuchMemory",
            "expression": "variables.containers.filter(c, "
            f"{_above('c', GPUMEM, 'variables.maxMemory')})",
        },
        {
            "name": "tooManyCores",
            "expression": f"variables.containers.filter(c, {_above('c', GPUCORES, cel_quoted('100'))})",
        },
    ]
    validations = [
        {
            "expression": "variables.percentage.size() == 0",
            "messageExpression": f"'container(s) ' + {_names('variables.percentage')} + ' ask "
            f"for {GPUMEM_PERCENTAGE}, which this namespace does not accept: its GPU memory "
            f"quota counts MiB. Ask for {GPUMEM} in MiB instead (at most ' + "
            "variables.maxMemory + ' MiB per vGPU).'",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.noMemory.size() == 0",
            "messageExpression": f"'container(s) ' + {_names('variables.noMemory')} + ' ask for "
            f"vGPUs ({GPU}) without GPU memory: state {GPUMEM} in MiB per vGPU (at most ' + "
            "variables.maxMemory + '), or HAMi gives each vGPU a whole GPU\\'s memory.'",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.noCores.size() == 0",
            "messageExpression": f"'container(s) ' + {_names('variables.noCores')} + ' ask for "
            f"vGPUs ({GPU}) without compute: state {GPUCORES}, the percent of a GPU per "
            "vGPU (1 to 100).'",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.tooMuchMemory.size() == 0",
            "messageExpression": f"'container(s) ' + {_names('variables.tooMuchMemory')} + ' "
            f"ask for more {GPUMEM} per vGPU than one GPU here has (' + variables.maxMemory + "
            "' MiB), or for an amount that is not a number of MiB.'",
            "reason": "Forbidden",
        },
        {
            "expression": "variables.tooManyCores.size() == 0",
            "messageExpression": f"'container(s) ' + {_names('variables.tooManyCores')} + ' "
            f"ask for more than 100 {GPUCORES} per vGPU: compute is a percent of one GPU, "
            "1 to 100.'",
            "reason": "Forbidden",
        },
        {
            # Only a Pod: HAMi's webhook sets the scheduler on the pods, not on templates.
            "expression": "object.kind != 'Pod' || variables.vgpu.size() == 0 || "
            f"(has(object.spec.schedulerName) && object.spec.schedulerName == "
            f"{cel_quoted(HAMI_SCHEDULER)})",
            "messageExpression": "'this pod asks for vGPUs but is scheduled by ' + "
            "(has(object.spec.schedulerName) ? object.spec.schedulerName : 'default-scheduler') "
            f"+ ': in this namespace vGPUs are placed by {HAMI_SCHEDULER}, which holds the GPU "
            "memory and compute quotas. Leave schedulerName out (HAMi\\'s webhook sets it) "
            f"or set it to {HAMI_SCHEDULER}.'",
            "reason": "Forbidden",
        },
    ]
    return policy_pair(
        name=POLICY_NAME,
        cluster=cluster,
        resource_rules=resource_rules(_WORKLOADS),
        variables=variables,
        validations=validations,
        selector=selector,
    )
