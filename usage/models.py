"""The usage store.

``Sample``: raw samples, one row per measurement (time, metric, value and who it is about).
On PostgreSQL the table is partitioned by day on ``time`` (declarative range partitions
``usage_sample_pYYYYMMDD``, created ahead and on demand, dropped by retention; a BRIN index on
``time``) and has no primary-key index: rows are written with ``COPY`` and read by time range
only. On SQLite (the embedded demo) it is a plain table. Ids are plain integers (no foreign
keys): a sample outlives nothing it names and ``COPY`` checks no constraint.

``Rollup``: per (resolution, bucket, metric, cluster, tenant, flavor): count, sum, min, max
(avg = sum / count); 0 stands for "none" in the key so the unique constraint holds.
``PendingBucket``: buckets to roll again (written with every sample batch, so late samples
re-roll their window). ``RollupState``: the watermark of each resolution.
``PrometheusSource``: a cluster's Prometheus (or Thanos, Mimir, VictoriaMetrics) as a usage
source: where it is, how to authenticate (secrets in files on the worker, never in the
database), what to read from it, and how the last reading went. ``VolumeRoom``: free space of
the tenants' volumes as the kubelet reports it (through that Prometheus).
``Pod`` (pod uid -> namespace -> tenant, from the collector) and ``Workload`` (one row per Kueue
Workload, updated: created, admitted, finished, evictions) come from the cluster.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from usage.choices import Metric, PrometheusFigure, Resolution, Source, WorkloadState

MIG_PROFILE_MAX = 32
GPU_UUID_MAX = 100


class Sample(models.Model):
    time = models.DateTimeField()
    metric = models.PositiveSmallIntegerField(choices=Metric.choices)
    value = models.FloatField()
    cluster_id = models.IntegerField(null=True, blank=True)
    tenant_id = models.BigIntegerField(null=True, blank=True)
    flavor_id = models.BigIntegerField(null=True, blank=True)
    node_id = models.BigIntegerField(null=True, blank=True)
    # NULL, not "": COPY writes \N for "no GPU", and the column stays compact.
    gpu_uuid = models.CharField(max_length=GPU_UUID_MAX, null=True, blank=True)  # noqa: DJ001
    gi_id = models.SmallIntegerField(null=True, blank=True, help_text="MIG GPU instance id.")
    mig_profile = models.CharField(max_length=MIG_PROFILE_MAX, null=True, blank=True)  # noqa: DJ001
    # A database default, so that a COPY naming no source column still fills it.
    source = models.PositiveSmallIntegerField(choices=Source.choices, db_default=Source.UNKNOWN)

    class Meta:
        db_table = "usage_sample"
        # The PostgreSQL DDL (partitions, BRIN) is in the migration; this index is SQLite's.
        indexes = [models.Index(fields=["time"], name="usage_sample_time_idx")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%dT%H:%M:%SZ} {Metric(self.metric).name}={self.value}"


class Rollup(models.Model):
    resolution = models.PositiveIntegerField(choices=Resolution.choices)
    bucket = models.DateTimeField(help_text="Start of the bucket (UTC).")
    metric = models.PositiveSmallIntegerField(choices=Metric.choices)
    cluster_id = models.IntegerField(default=0)
    tenant_id = models.BigIntegerField(default=0)
    flavor_id = models.BigIntegerField(default=0)
    samples = models.PositiveIntegerField()
    sum = models.FloatField()
    min = models.FloatField()
    max = models.FloatField()
    source = models.PositiveSmallIntegerField(
        choices=Source.choices,
        db_default=Source.UNKNOWN,
        help_text="Where the bucket's samples came from (the highest code where they mix).",
    )

    class Meta:
        db_table = "usage_rollup"
        constraints = [
            models.UniqueConstraint(
                fields=["resolution", "bucket", "metric", "cluster_id", "tenant_id", "flavor_id"],
                name="usage_rollup_unique_series_bucket",
            ),
            models.CheckConstraint(condition=Q(samples__gte=1), name="usage_rollup_samples_gte_1"),
        ]
        indexes = [
            models.Index(fields=["tenant_id", "resolution", "bucket"], name="usage_rollup_tenant"),
            models.Index(fields=["resolution", "bucket"], name="usage_rollup_time"),
        ]

    def __str__(self) -> str:
        return f"{self.resolution}s {self.bucket:%Y-%m-%dT%H:%M:%SZ} {Metric(self.metric).name}"

    @property
    def avg(self) -> float:
        return self.sum / self.samples


class PendingBucket(models.Model):
    """A bucket of ``resolution`` whose source changed since it was last rolled up."""

    resolution = models.PositiveIntegerField(choices=Resolution.choices)
    bucket = models.DateTimeField()

    class Meta:
        db_table = "usage_pending_bucket"
        constraints = [
            models.UniqueConstraint(fields=["resolution", "bucket"], name="usage_pending_unique")
        ]

    def __str__(self) -> str:
        return f"{self.resolution}s {self.bucket:%Y-%m-%dT%H:%M:%SZ}"


class RollupState(models.Model):
    """The watermark of a resolution: every bucket before ``rolled_until`` has been rolled up
    at least once (a late sample marks its bucket pending again)."""

    resolution = models.PositiveIntegerField(choices=Resolution.choices, unique=True)
    rolled_until = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    buckets_rolled = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.resolution}s rolled until {self.rolled_until}"


class Pod(models.Model):
    """A pod the collector saw in a cluster: how agents' processes (``pod_uid``) find their
    tenant, and what GPUs each tenant's running pods request."""

    cluster_id = models.IntegerField()
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    tenant_id = models.BigIntegerField(null=True, blank=True)
    phase = models.CharField(max_length=20, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    gpus = models.FloatField(default=0, help_text="GPUs and MIG instances requested.")
    workload_uid = models.CharField(
        max_length=64,
        blank=True,
        help_text="The Kueue Workload the pod runs for (both owned by one Job), if any.",
    )
    seen_at = models.DateTimeField()

    class Meta:
        db_table = "usage_pod"
        constraints = [models.UniqueConstraint(fields=["uid"], name="usage_pod_unique_uid")]
        indexes = [models.Index(fields=["cluster_id", "seen_at"], name="usage_pod_seen")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Workload(models.Model):
    """One Kueue Workload's lifecycle, updated by the collector: when it was created,
    admitted, finished; how often it was evicted and preempted (Kueue's schedulingStats)."""

    cluster = models.ForeignKey("quotas.Cluster", on_delete=models.CASCADE, related_name="+")
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64)
    queue_name = models.CharField(max_length=253, blank=True)
    cluster_queue = models.CharField(max_length=253, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    gpus = models.FloatField(default=0, help_text="GPUs and MIG instances it asks for.")
    flavors = models.JSONField(default=list, blank=True, help_text="Flavors it was admitted on.")
    state = models.CharField(
        max_length=20, choices=WorkloadState.choices, default=WorkloadState.PENDING
    )
    created_at = models.DateTimeField()
    admitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    evicted_at = models.DateTimeField(null=True, blank=True, help_text="Last eviction.")
    evictions = models.PositiveIntegerField(default=0)
    preemptions = models.PositiveIntegerField(default=0)
    queue_wait_s = models.FloatField(
        null=True, blank=True, help_text="Admitted minus created (first admission)."
    )
    # What the workloads page shows (read from the Workload on every collection).
    job_kind = models.CharField(
        max_length=63, blank=True, db_default="", help_text="Its owner's kind: Job, JobSet, ..."
    )
    job_name = models.CharField(max_length=253, blank=True, db_default="")
    submitter = models.CharField(
        max_length=253,
        blank=True,
        db_default="",
        help_text="Who submitted it: the gpu-quota-portal.io/submitter annotation the portal's "
        "admission policy stamps on the pod template, else the pods' service account.",
    )
    submitter_source = models.CharField(
        max_length=20, blank=True, db_default="", help_text="annotation or service-account."
    )
    resources = models.JSONField(
        default=list,
        blank=True,
        db_default=[],
        help_text="[{flavor, resource, amount}]: admitted per flavor, else asked (flavor '').",
    )
    active = models.BooleanField(default=True, db_default=True, help_text="Kueue spec.active.")
    running = models.BooleanField(
        default=False, db_default=False, help_text="One of its pods was running when read."
    )
    pending_message = models.CharField(
        max_length=1000,
        blank=True,
        db_default="",
        help_text="Kueue's own words on why it is not admitted (QuotaReserved False).",
    )
    pending_reason = models.CharField(max_length=63, blank=True, db_default="")
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "usage_workload"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="usage_workload_unique_uid"),
            models.CheckConstraint(
                condition=Q(state__in=WorkloadState.values), name="usage_workload_state_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "created_at"], name="usage_workload_tenant"),
            models.Index(fields=["cluster", "created_at"], name="usage_workload_cluster"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class WorkloadReading(models.Model):
    """How the last readings of one cluster's Kueue Workloads went: the workloads page shows
    the last known list, marked stale with the cluster and since when, while it fails."""

    cluster = models.OneToOneField("quotas.Cluster", on_delete=models.CASCADE, related_name="+")
    last_attempt_at = models.DateTimeField()
    last_success_at = models.DateTimeField(null=True, blank=True)
    failing_since = models.DateTimeField(
        null=True, blank=True, help_text="First failed reading since the last success."
    )
    last_error = models.CharField(max_length=1000, blank=True)

    class Meta:
        db_table = "usage_workload_reading"

    def __str__(self) -> str:
        return f"workloads of cluster {self.cluster_id}: last read {self.last_success_at}"


class WorkloadActivity(models.Model):
    """How busy one workload's own GPUs were, per hour: the highest utilisation the node
    agents reported for a GPU or MIG instance running one of its pods. What the idle rule
    judges a workload by (its tenant's other workloads on the same flavor do not count).
    Keyed by the Workload's uid like the samples (no foreign key): written on every agent
    sample, dropped by retention."""

    cluster_id = models.IntegerField()
    workload_uid = models.CharField(max_length=64)
    bucket = models.DateTimeField(help_text="Start of the hour (UTC).")
    peak_utilization = models.FloatField()
    samples = models.PositiveIntegerField(default=1)

    class Meta:
        db_table = "usage_workload_activity"
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_id", "workload_uid", "bucket"],
                name="usage_workload_activity_unique",
            )
        ]
        indexes = [models.Index(fields=["bucket"], name="usage_workload_activity_time")]

    def __str__(self) -> str:
        return f"{self.workload_uid} {self.bucket:%Y-%m-%dT%H:%M:%SZ} peak {self.peak_utilization}%"


PROMETHEUS_TIMEOUT_MAX_S = 120
PROMETHEUS_STEP_MIN_S = 15
PROMETHEUS_STEP_MAX_S = 3600


def default_figures() -> list[str]:
    return [PrometheusFigure.GPU_USAGE, PrometheusFigure.GPU_REQUESTS]


class PrometheusSource(models.Model):
    """A cluster's Prometheus, read by the usage collector on its schedule (PromQL over the
    HTTP API). One per cluster; the collector reads it alongside the cluster's API."""

    cluster = models.OneToOneField(
        "quotas.Cluster", on_delete=models.CASCADE, related_name="prometheus_source"
    )
    # Not a URLField: in-cluster service names have no dot (http://prometheus:9090).
    url = models.CharField(
        max_length=500,
        help_text="Base URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090 "
        "(the part before /api/v1/).",
    )
    enabled = models.BooleanField(default=True)
    bearer_token_file = models.CharField(
        max_length=500, blank=True, help_text="Path on the worker of a file holding a bearer token."
    )
    basic_auth_user = models.CharField(max_length=200, blank=True)
    basic_auth_password_file = models.CharField(
        max_length=500, blank=True, help_text="Path on the worker of a file holding the password."
    )
    ca_bundle = models.CharField(
        max_length=500, blank=True, help_text="Path on the worker of a PEM CA bundle for https."
    )
    label_matchers = models.CharField(
        max_length=500,
        blank=True,
        help_text='Added to every selector, for a store holding several clusters: cluster="gpu-a".',
    )
    query_timeout_s = models.PositiveIntegerField(
        default=10, help_text="Seconds one query may take (the server is told the same)."
    )
    step_s = models.PositiveIntegerField(
        default=60, help_text="Resolution of the ranges read, in seconds."
    )
    figures = models.JSONField(
        default=default_figures, blank=True, help_text="What to read from this Prometheus."
    )
    node_agent_samples = models.BooleanField(
        default=True,
        help_text="Keep the node agents' usage samples too. Off: where this Prometheus gives GPU "
        "utilisation and memory, the agents only drive MIG.",
    )
    # How the last reading went.
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=1000, blank=True)
    last_warnings = models.JSONField(default=list, blank=True)
    last_samples = models.PositiveIntegerField(default=0)
    last_unknown_namespaces = models.JSONField(
        default=list, blank=True, help_text="Namespaces in the series that no tenant owns."
    )
    last_unknown_series = models.PositiveIntegerField(default=0)
    read_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The end of the last range read (the next one starts here).",
    )

    class Meta:
        db_table = "usage_prometheus_source"
        constraints = [
            models.CheckConstraint(
                condition=Q(query_timeout_s__gte=1, query_timeout_s__lte=PROMETHEUS_TIMEOUT_MAX_S),
                name="usage_prometheus_timeout_range",
            ),
            models.CheckConstraint(
                condition=Q(step_s__gte=PROMETHEUS_STEP_MIN_S, step_s__lte=PROMETHEUS_STEP_MAX_S),
                name="usage_prometheus_step_range",
            ),
        ]

    def __str__(self) -> str:
        return f"Prometheus of cluster {self.cluster_id}: {self.url}"


class VolumeRoom(models.Model):
    """Free space of one PersistentVolumeClaim, as the kubelet last reported it."""

    cluster = models.ForeignKey("quotas.Cluster", on_delete=models.CASCADE, related_name="+")
    tenant = models.ForeignKey(
        "tenants.Tenant", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    namespace = models.CharField(max_length=63)
    claim = models.CharField(max_length=253)
    available_bytes = models.BigIntegerField()
    capacity_bytes = models.BigIntegerField(null=True, blank=True)
    read_at = models.DateTimeField()

    class Meta:
        db_table = "usage_volume_room"
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "claim"], name="usage_volume_room_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.claim}: {self.available_bytes} bytes free"


class PrometheusGpu(models.Model):
    """A GPU as the DCGM exporter last showed it through the cluster's Prometheus: which node
    it is on, its index and model, whether it is split into MIG instances. The admin heatmap
    draws the GPUs no node agent reports from these (an agent's own report wins)."""

    cluster = models.ForeignKey("quotas.Cluster", on_delete=models.CASCADE, related_name="+")
    uuid = models.CharField(max_length=GPU_UUID_MAX)
    node = models.CharField(max_length=253, help_text="The node's name (DCGM's Hostname).")
    index = models.PositiveSmallIntegerField()
    model = models.CharField(max_length=100, blank=True)
    mig = models.BooleanField(default=False)
    seen_at = models.DateTimeField()

    class Meta:
        db_table = "usage_prometheus_gpu"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uuid"], name="usage_prometheus_gpu_unique")
        ]

    def __str__(self) -> str:
        return f"{self.uuid} on {self.node}"
