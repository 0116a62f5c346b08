"""Choices of quotas: flavor kinds, sync backends, MIG drivers, push states, and the names of
the resources quotas count (whole GPUs, MIG slices, CPU, memory, storage)."""

from django.db import models


class FlavorKind(models.TextChoices):
    GPU = "gpu", "Whole GPUs"
    MIG = "mig", "MIG instances"
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


def mig_resource(profile: str) -> str:
    return f"{MIG_RESOURCE_PREFIX}{profile}"


def is_gpu_resource(resource: str) -> bool:
    """Resources that count towards normalised GPU units."""
    return resource == GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


class CapSubject(models.TextChoices):
    """Whom a per-person cap (``PersonCap``) holds: one member, the team's pipeline account (its
    ServiceAccount in each namespace), or every member without a cap of their own."""

    MEMBER = "member", "A member"
    PIPELINE = "pipeline", "The team's pipeline account"
    DEFAULT = "default", "Every member without a cap of their own"
