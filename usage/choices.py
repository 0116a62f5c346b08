"""What a usage sample measures, and the rollup resolutions."""

from __future__ import annotations

from django.db import models


class Metric(models.IntegerChoices):
    """Stored as a small integer in every sample and rollup row (compact). GPU amounts are in
    GPUs (or MIG instances) of the sample's flavor; multiply by the flavor's weight for
    normalised GPU units."""

    # From the node agents, per GPU or MIG instance.
    GPU_UTILIZATION = 1, "GPU utilisation %"
    GPU_MEMORY_USED = 2, "GPU memory used (MiB)"
    GPU_PROCESSES = 3, "processes on the GPU"
    # From the cluster, per tenant and flavor.
    GPUS_ALLOCATED = 4, "GPUs requested by running pods"
    QUOTA_USED = 5, "quota used (Kueue flavorsUsage)"
    QUOTA_RESERVED = 6, "quota reserved (Kueue flavorsReservation)"
    QUOTA_BORROWED = 7, "quota borrowed from the cohort"
    QUOTA_GUARANTEED = 8, "guaranteed (nominalQuota)"
    QUOTA_LIMIT = 9, "limit (nominal + borrowingLimit)"
    WORKLOADS_PENDING = 10, "pending workloads"
    WORKLOADS_ADMITTED = 11, "admitted workloads"
    RESOURCEQUOTA_USED = 12, "GPUs used in the namespaces' ResourceQuotas"
    # From Kueue's admission wait histogram (kueue_admission_wait_time_seconds), per tenant and
    # step: how many workloads were admitted, and their waits summed (mean = wait / count).
    ADMISSIONS = 13, "workloads admitted (Kueue)"
    ADMISSION_WAIT = 14, "seconds waited for admission, summed (Kueue)"
    # On vGPU flavors (HAMi), per tenant: what its containers use of the shared GPUs, summed
    # over its containers at each reading (HAMi's per-container metrics, or the node agents'
    # per-process memory mapped to pods). Compared with the tenant's nvidia.com/gpumem and
    # nvidia.com/gpucores quotas on the pages.
    VGPU_MEMORY_USED = 15, "GPU memory used by the tenant's containers (MiB)"
    VGPU_CORES_USED = 16, "compute used by the tenant's containers (% of a GPU)"


class Resolution(models.IntegerChoices):
    """Rollup bucket widths in seconds."""

    FIVE_MINUTES = 300, "5 minutes"
    HOUR = 3600, "1 hour"
    DAY = 86400, "1 day"


# What each resolution is rolled up from (None: raw samples).
ROLLUP_SOURCE: dict[int, int | None] = {
    Resolution.FIVE_MINUTES: None,
    Resolution.HOUR: Resolution.FIVE_MINUTES,
    Resolution.DAY: Resolution.HOUR,
}
RAW = 0  # the raw samples, where a resolution is named (retention, series)


class WorkloadState(models.TextChoices):
    PENDING = "pending", "Pending"
    ADMITTED = "admitted", "Admitted"
    FINISHED = "finished", "Finished"
    EVICTED = "evicted", "Evicted (waiting again)"
    INACTIVE = "inactive", "Inactive"


class Source(models.IntegerChoices):
    """Where a sample's figure came from, stored with it (and, for a rollup bucket, the
    highest code among its samples: a bucket rarely mixes sources, since a cluster whose
    Prometheus gives GPU figures can turn its node agents' samples off)."""

    UNKNOWN = 0, "not recorded"
    NODE_AGENT = 1, "the node agent"
    CLUSTER_API = 2, "the Kubernetes and Kueue APIs"
    API = 3, "sent through the portal's API"
    DEMO = 4, "the demo's simulation"
    PROMETHEUS = 5, "Prometheus"


class PrometheusFigure(models.TextChoices):
    """What a cluster's Prometheus may be read for."""

    GPU_USAGE = "gpu_usage", "GPU utilisation and memory (DCGM exporter)"
    GPU_REQUESTS = "gpu_requests", "GPUs requested by pods (kube-state-metrics)"
    KUEUE = "kueue", "Kueue queue use and pending workloads (Kueue's metrics)"
    VOLUMES = "volumes", "free space of volumes (kubelet)"
    VGPU_USAGE = "vgpu_usage", "GPU memory and compute per container on vGPU flavors (HAMi)"
