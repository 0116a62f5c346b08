"""The kinds the portal writes, where they live in the Kubernetes API, and in which order.

A static table instead of discovery: the applier knows exactly what it owns, so a pass costs
no discovery requests, and a cluster without Kueue answers 404 on its LIST (said plainly).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool
    # Deleting one of these would delete what users put in it: never pruned.
    never_prune: bool = False

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/api/{self.api_version}" if not self.group else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


KUEUE = "kueue.x-k8s.io/v1beta2"
VOLCANO = "scheduling.volcano.sh/v1beta1"
ADMISSION = "admissionregistration.k8s.io/v1"

# In apply order: what others refer to comes first (deletes go in reverse).
KINDS: tuple[Kind, ...] = (
    Kind("v1", "Namespace", "namespaces", False, never_prune=True),
    Kind("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False),
    Kind(ADMISSION, "ValidatingAdmissionPolicy", "validatingadmissionpolicies", False),
    Kind(ADMISSION, "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", False),
    Kind(KUEUE, "WorkloadPriorityClass", "workloadpriorityclasses", False),
    Kind(KUEUE, "ResourceFlavor", "resourceflavors", False),
    Kind(KUEUE, "Cohort", "cohorts", False),
    Kind(VOLCANO, "Queue", "queues", False),
    Kind("v1", "ConfigMap", "configmaps", True),
    Kind("v1", "ResourceQuota", "resourcequotas", True),
    Kind("v1", "LimitRange", "limitranges", True),
    Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", True),
    Kind("v1", "ServiceAccount", "serviceaccounts", True),
    Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", True),
    Kind(KUEUE, "ClusterQueue", "clusterqueues", False),
    Kind(KUEUE, "LocalQueue", "localqueues", True),
)
BY_TYPE: dict[tuple[str, str], Kind] = {(k.api_version, k.kind): k for k in KINDS}
CONFIG_MAP: Kind = BY_TYPE[("v1", "ConfigMap")]
CLUSTER_QUEUE: Kind = BY_TYPE[(KUEUE, "ClusterQueue")]
LOCAL_QUEUE: Kind = BY_TYPE[(KUEUE, "LocalQueue")]
RESOURCE_QUOTA: Kind = BY_TYPE[("v1", "ResourceQuota")]
# Kinds the portal reads (and patches), never applies, creates or prunes: not in KINDS on
# purpose. Nodes are label-patched for MIG through the GPU Operator; Pods and Kueue Workloads
# are read by the usage collector, and a Workload's ``spec.active`` is set to suspend an idle
# one (R12) and to undo that.
NODE = Kind("v1", "Node", "nodes", False, never_prune=True)
POD = Kind("v1", "Pod", "pods", True)
WORKLOAD = Kind(KUEUE, "Workload", "workloads", True)
# HAMi's scheduler, read by name to learn HAMi's version (``quotas.kube.vgpu``).
DEPLOYMENT = Kind("apps/v1", "Deployment", "deployments", True, never_prune=True)
ORDER: dict[tuple[str, str], int] = {(k.api_version, k.kind): i for i, k in enumerate(KINDS)}


def kind_of(obj: dict) -> Kind:
    try:
        return BY_TYPE[(obj["apiVersion"], obj["kind"])]
    except KeyError:
        raise ValueError(
            f"the portal does not write {obj.get('kind')} {obj.get('apiVersion')}"
        ) from None


def key_of(obj: dict) -> tuple[str, str, str, str]:
    meta = obj.get("metadata", {})
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])
