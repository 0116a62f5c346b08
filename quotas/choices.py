"""Choices of quotas: flavor kinds, sync backends, MIG drivers, push states, and the names of
the resources quotas count (whole GPUs, MIG slices, CPU, memory, storage)."""

from django.db import models


class FlavorKind(models.TextChoices):
    GPU = "gpu", "Whole GPUs"
    MIG = "mig", "MIG instances"
    # GPUs shared through HAMi (``quotas.vgpu``): quotas in GPU memory and compute, each
    # capped inside the container by HAMi-core, beside the number of vGPUs.
    VGPU = "vgpu", "vGPU shares (HAMi)"
    CPU = "cpu", "CPU nodes"
    STORAGE = "storage", "Storage class"


class SyncBackend(models.TextChoices):
    KUBERNETES = "kubernetes", "Kubernetes API (kubeconfig or in-cluster)"
    MANIFESTS = "manifests", "GitOps directory of YAML"
    NONE = "none", "None (quotas are kept in the portal only)"


class Enforcement(models.TextChoices):
    """How a cluster keeps each tenant within its limit (``quotas.kube.enforcement``)."""

    KUEUE = "kueue", "Kueue manages everything"
    SPLIT = "split", "Namespace split"


class FairSharing(models.TextChoices):
    """What fair sharing the portal asks of a cluster's Kueue (``quotas.kube.fair_sharing``)."""

    NONE = "none", "None: first come, first served"
    WEIGHTS = "weights", "By weight: unused GPUs to the team borrowing least for its weight"
    USAGE = "usage", "By weight and recent use: Kueue remembers what each queue used"


class MigDriver(models.TextChoices):
    """Who repartitions a cluster's MIG GPUs: the portal's node agent, or NVIDIA's GPU Operator
    (its MIG manager, driven by a node label and a mig-parted ConfigMap)."""

    AGENT = "agent", "Portal node agent"
    GPU_OPERATOR = "gpu-operator", "NVIDIA GPU Operator MIG manager"


class SyncState(models.TextChoices):
    PENDING = "pending", "Not pushed yet"
    APPLYING = "applying", "Applying"
    IN_SYNC = "in_sync", "In sync"
    FAILED = "failed", "Failed"
    DRIFTED = "drifted", "Drifted and repaired"


# Resource names as Kubernetes spells them.
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
CPU_RESOURCE = "cpu"
MEMORY_RESOURCE = "memory"
STORAGE_RESOURCE = "storage"
# HAMi's vGPU resources (``quotas.vgpu``): on a vGPU flavor ``nvidia.com/gpu`` counts vGPUs;
# a pod asks per vGPU for GPU memory (HAMi counts MiB; the portal stores bytes, like memory)
# and compute (percent of one GPU; the portal stores the percent points).
GPUMEM_RESOURCE = "nvidia.com/gpumem"
GPUCORES_RESOURCE = "nvidia.com/gpucores"
VGPU_RESOURCES = (GPU_RESOURCE, GPUMEM_RESOURCE, GPUCORES_RESOURCE)


def mig_resource(profile: str) -> str:
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def is_gpu_resource(resource: str) -> bool:
    """Resources that count towards normalised GPU units."""
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


class GrantState(models.TextChoices):
    """Where a grant for a time stands (``quotas.services.grants``): promised, in force (its
    lines added to the standing quota and pushed), withdrawn but not yet confirmed by the
    cluster, or over."""

    SCHEDULED = "scheduled", "Scheduled"
    ACTIVE = "active", "In force"
    ENDING = "ending", "Ending"
    ENDED = "ended", "Ended"


# The states in which a grant holds capacity: what a capacity check counts.
GRANT_HOLDING_STATES = ("scheduled", "active", "ending")


class CapSubject(models.TextChoices):
    """Whom a per-person cap (``PersonCap``) holds: one member, the team's pipeline account (its
    ServiceAccount in each namespace), or every member without a cap of their own."""

    MEMBER = "member", "A member"
    PIPELINE = "pipeline", "The team's pipeline account"
    DEFAULT = "default", "Every member without a cap of their own"
