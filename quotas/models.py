"""How much: clusters, resource flavors and their capacity, tier templates, quota sets."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from quotas.choices import (
    CapSubject,
    Enforcement,
    FairSharing,
    FlavorKind,
    GrantState,
    MigDriver,
    SyncBackend,
    SyncState,
)
from quotas.kube.storage import performance_words
from tenants.models import Membership, Tenant
from tenants.validators import DNS1123_LABEL_MAX, DNS1123_LABEL_REGEX, dns1123_label

# Quantities are stored in base units (cores, bytes, counts) with millicore precision.
QUANTITY_DIGITS = 30
QUANTITY_PLACES = 3


def _quantity_field(**kwargs: object) -> models.DecimalField:
    return models.DecimalField(
        max_digits=QUANTITY_DIGITS,
        decimal_places=QUANTITY_PLACES,
        **kwargs,  # type: ignore[arg-type]
    )


class ClusterPool(models.Model):
    """Clusters a platform admin treats as one pool (R22): a tenant's quotas should be the
    same on each (the admin console and the API flag those that differ). Edited in Django
    admin; a cluster belongs to at most one."""

    name = models.CharField(max_length=DNS1123_LABEL_MAX, unique=True, validators=[dns1123_label])
    description = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Cluster(models.Model):
    """A Kubernetes cluster the portal manages, with its quota policy knobs."""

    name = models.CharField(max_length=DNS1123_LABEL_MAX, unique=True, validators=[dns1123_label])
    display_name = models.CharField(max_length=200, blank=True)
    api_server = models.URLField(
        blank=True, help_text="Shown to users; the applier reads kubeconfig."
    )
    kubeconfig_path = models.CharField(
        max_length=500,
        blank=True,
        help_text="Path on the worker; credentials never in the database.",
    )
    in_cluster = models.BooleanField(default=False)
    backend = models.CharField(
        max_length=20,
        choices=SyncBackend.choices,
        default=SyncBackend.KUBERNETES,
        help_text="Where approved quotas go: the Kubernetes API, a GitOps directory, or nowhere.",
    )
    manifests_dir = models.CharField(
        max_length=500, blank=True, help_text="GitOps backend: the directory the YAML goes to."
    )
    kubernetes_version = models.CharField(
        max_length=10, default="1.33", help_text="Compiled objects are validated for it."
    )
    has_kueue = models.BooleanField(default=True)
    pool = models.ForeignKey(
        ClusterPool,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="clusters",
        help_text="Clusters of one pool should give each tenant the same quotas.",
    )
    enforcement = models.CharField(
        max_length=10,
        choices=Enforcement.choices,
        default=Enforcement.KUEUE,
        help_text="Kueue manages everything: an admission policy refuses GPU work Kueue would "
        "not manage. Namespace split: each tenant's namespace quotas add up to its limit.",
    )
    # Kueue's manager configuration as last read from the cluster
    # (``quotas.kube.enforcement.KueueConfig.as_json``); None when it could not be read, with
    # the reason in ``kueue_config_error``.
    # Who may create a GPU pod (or pod-owning object) that names a controller owner in
    # ``kueue`` mode, beside the built-in controllers and Kueue's own account: operators an
    # admin trusts on this cluster, as Kubernetes usernames
    # ("system:serviceaccount:kubeflow:training-operator"; a trailing "*" matches a prefix).
    trusted_controllers = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="Operators trusted to create owned GPU pods (Kubernetes usernames, one per "
        "line; a trailing * matches a prefix), beside the built-in controllers and Kueue.",
    )
    # Namespaces the portal never gives a tenant nor writes into on this cluster, beside the
    # built-in list (kube-*, default, Kueue's, Volcano's, the GPU Operator's, the portal's).
    reserved_namespaces = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="Namespaces no tenant may have on this cluster, beside the built-in system "
        "ones (a trailing * matches a prefix).",
    )
    # Namespaces whose pods may reach every tenant's pods on this cluster (any port), compiled
    # into each tenant namespace's NetworkPolicy: the ingress controller's (inference behind
    # an Ingress) and monitoring's (a Prometheus scraping tenants' metrics). DNS-1123 labels,
    # never a tenant's namespace (they are reserved); empty: tenants take traffic only from
    # their own namespaces.
    tenant_ingress_namespaces = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="Namespaces of the ingress controller whose traffic may reach tenants' pods "
        "(e.g. ingress-nginx).",
    )
    tenant_monitoring_namespaces = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="Namespaces of the monitoring that may scrape tenants' pods (e.g. monitoring).",
    )
    # The storage classes the cluster serves, as last read from it (``quotas.storage``):
    # StorageClass names and VolumeAttributesClass names. A tenant's namespaces get a quota of
    # 0 on every one its quota does not name; empty: not read (only the classes of the
    # cluster's storage flavors are known then).
    storage_classes = models.JSONField(default=list, db_default=[], blank=True)
    volume_attributes_classes = models.JSONField(default=list, db_default=[], blank=True)
    storage_classes_read_at = models.DateTimeField(null=True, blank=True)
    # The StorageClass the cluster marks default (is-default-class), as last read: a tenant
    # whose quota names no storage class at all keeps that one (under its storage total), so
    # an upgrade does not cut existing tenants off their claims.
    default_storage_class = models.CharField(max_length=253, blank=True, db_default="")
    # HAMi (``quotas.vgpu``) as last read from the cluster: its version ("" : not found) and
    # when. A vGPU flavor is usable only where HAMi is new enough (``vgpu.hami_problem``).
    hami_version = models.CharField(max_length=60, blank=True, db_default="")
    hami_read_at = models.DateTimeField(null=True, blank=True)
    kueue_config = models.JSONField(null=True, blank=True)
    kueue_config_error = models.CharField(max_length=500, blank=True)
    kueue_config_read_at = models.DateTimeField(null=True, blank=True)
    # Fair sharing the portal asks of Kueue here (``quotas.kube.fair_sharing``): compiled into
    # the tenants' ClusterQueues; Kueue's own configuration is the cluster operators' to apply.
    fair_sharing = models.CharField(
        max_length=10,
        choices=FairSharing.choices,
        default=FairSharing.NONE,
        db_default=FairSharing.NONE,
        help_text="How Kueue shares unused GPUs between teams here.",
    )
    usage_half_life_hours = models.PositiveIntegerField(
        default=168,
        db_default=168,
        validators=[MinValueValidator(1), MaxValueValidator(90 * 24)],
        help_text="With fair sharing by recent use: after how many hours a team's past use "
        "counts half.",
    )
    usage_sampling_minutes = models.PositiveIntegerField(
        default=5,
        db_default=5,
        validators=[MinValueValidator(1), MaxValueValidator(60)],
        help_text="How often Kueue adds what each queue uses to its record, in minutes.",
    )
    has_volcano = models.BooleanField(default=False)
    volcano_hierarchy = models.BooleanField(
        default=False, help_text="Volcano's capacity plugin runs with enableHierarchy."
    )
    elastic_cap_fraction = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        default=Decimal("0.5"),
        help_text="A tenant's limit may be at most this fraction of a flavor's capacity.",
    )
    allow_guarantee_overcommit = models.BooleanField(
        default=False, help_text="May the sum of guarantees exceed a flavor's capacity?"
    )
    # MIG through NVIDIA's GPU Operator (``gpu_agent/operator.py``). The operator's MIG manager
    # reads a mig-parted config file mounted from the ConfigMap that ClusterPolicy
    # ``spec.migManager.config.name`` (helm ``migManager.config.name``) names, under the key
    # ``config.yaml``, in the operator's namespace (``gpu-operator`` in NVIDIA's install
    # guide); each node applies the config its ``nvidia.com/mig.config`` label names and
    # reports ``nvidia.com/mig.config.state`` (pending, rebooting, success, failed).
    # References: NVIDIA GPU Operator docs "GPU Operator with MIG" (custom MIG configuration);
    # gpu-operator ``deployments/gpu-operator/values.yaml`` (migManager.config),
    # ``assets/state-mig-manager/0400_configmap.yaml`` (default-mig-parted-config, key
    # config.yaml); mig-parted ``pkg/mig/reconfigure/reconfigure.go`` (the state label);
    # ../shared/reference/notes-mig.md sections 2 and 3.1.
    mig_driver = models.CharField(
        max_length=20,
        choices=MigDriver.choices,
        default=MigDriver.AGENT,
        help_text="Who repartitions MIG GPUs: the portal's node agent, or the GPU Operator's "
        "MIG manager (node label nvidia.com/mig.config + a mig-parted ConfigMap).",
    )
    mig_operator_namespace = models.CharField(
        max_length=DNS1123_LABEL_MAX,
        default="gpu-operator",
        validators=[dns1123_label],
        help_text="GPU Operator: the namespace it runs in (where the MIG ConfigMap goes).",
    )
    mig_operator_configmap = models.CharField(
        max_length=DNS1123_LABEL_MAX,
        default="gpu-portal-mig-parted-config",
        validators=[dns1123_label],
        help_text="GPU Operator: the mig-parted ConfigMap the portal writes; set ClusterPolicy "
        "spec.migManager.config.name to it (not default-mig-parted-config, which the operator "
        "owns).",
    )
    mig_operator_config_key = models.CharField(
        max_length=253,
        default="config.yaml",
        help_text="GPU Operator: the ConfigMap key the MIG manager reads (config.yaml).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(elastic_cap_fraction__gt=0) & Q(elastic_cap_fraction__lte=1),
                name="cluster_elastic_cap_fraction_range",
            ),
            models.CheckConstraint(
                condition=Q(mig_driver__in=MigDriver.values), name="cluster_mig_driver_valid"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_LABEL_REGEX), name="cluster_name_dns1123"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ResourceFlavor(models.Model):
    """A kind of resource within a cluster: a GPU model, a MIG profile, CPU nodes, a storage class."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="flavors")
    name = models.CharField(max_length=DNS1123_LABEL_MAX, validators=[dns1123_label])
    kind = models.CharField(max_length=20, choices=FlavorKind.choices)
    gpu_model = models.CharField(
        max_length=100, blank=True, help_text='As NVML names it: "NVIDIA A100-SXM4-80GB".'
    )
    mig_profile = models.CharField(max_length=30, blank=True, help_text='e.g. "1g.10gb".')
    storage_class = models.CharField(max_length=DNS1123_LABEL_MAX, blank=True)
    # Storage performance (R3), set by a platform admin on a storage flavor: what each volume
    # of the class is provisioned with, the CSI driver's parameters
    # (``quotas.kube.storage.DRIVER_PARAMETERS``); empty: the driver's default.
    storage_driver = models.CharField(
        max_length=253,
        blank=True,
        db_default="",
        help_text="The CSI driver of the storage class (its provisioner), e.g. ebs.csi.aws.com.",
    )
    storage_iops = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="IOPS each volume is provisioned with; empty: the driver's default.",
    )
    storage_throughput_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Throughput each volume is provisioned with, in MiB/s; empty: the driver's "
        "default.",
    )
    volume_attributes_class = models.CharField(
        max_length=DNS1123_LABEL_MAX,
        blank=True,
        db_default="",
        validators=[dns1123_label],
        help_text="The VolumeAttributesClass that carries the IOPS and throughput (Kubernetes "
        "1.34, or beta before); empty: the StorageClass carries them.",
    )
    node_labels = models.JSONField(default=dict, blank=True)
    node_taints = models.JSONField(default=list, blank=True)
    # Time-sliced sharing (R25): the device plugin advertises each GPU this many times; empty:
    # not shared. A time-sliced flavor is what tenants at the time-sliced isolation level get.
    time_slicing_replicas = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Shares per GPU when the device plugin time-slices this flavor's GPUs.",
    )
    # vGPU sharing through HAMi (``quotas.vgpu``): the memory of one of the flavor's GPUs as
    # NVML reports it, and the vGPUs HAMi advertises per GPU (its deviceSplitCount).
    gpu_memory_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="GPU memory of one of this flavor's GPUs, in MiB (a T4: 15360).",
    )
    vgpu_split = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="vGPUs HAMi advertises per GPU (its deviceSplitCount; HAMi's default is 10).",
    )
    gpu_weight = models.DecimalField(
        max_digits=7,
        decimal_places=3,
        default=Decimal("1"),
        help_text="Normalised GPU units per unit of this flavor's GPU resource.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="flavor_unique_per_cluster"),
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_LABEL_REGEX), name="flavor_name_dns1123"
            ),
            models.CheckConstraint(
                condition=Q(gpu_weight__gte=0), name="flavor_weight_nonnegative"
            ),
            models.CheckConstraint(
                condition=~Q(kind=FlavorKind.MIG) | ~Q(mig_profile=""),
                name="flavor_mig_has_profile",
            ),
            models.CheckConstraint(
                condition=~Q(kind__in=[FlavorKind.GPU, FlavorKind.MIG, FlavorKind.VGPU])
                | ~Q(gpu_model=""),
                name="flavor_gpu_has_model",
            ),
            models.CheckConstraint(
                condition=~Q(kind=FlavorKind.STORAGE) | ~Q(storage_class=""),
                name="flavor_storage_has_class",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=FlavorKind.values), name="flavor_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind=FlavorKind.STORAGE)
                | (
                    Q(storage_iops__isnull=True)
                    & Q(storage_throughput_mib__isnull=True)
                    & Q(volume_attributes_class="")
                ),
                name="flavor_performance_only_on_storage",
            ),
            models.CheckConstraint(
                condition=Q(time_slicing_replicas__isnull=True) | Q(time_slicing_replicas__gte=2),
                name="flavor_time_slicing_replicas_at_least_two",
            ),
            models.CheckConstraint(
                condition=~Q(kind=FlavorKind.VGPU)
                | (Q(gpu_memory_mib__gte=1) & Q(time_slicing_replicas__isnull=True)),
                name="flavor_vgpu_has_memory_not_time_sliced",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"

    def clean(self) -> None:
        """IOPS, throughput and a VolumeAttributesClass describe a storage class: refused,
        by field, on any other kind (the admin's form says so before the database would)."""
        super().clean()
        if self.kind != FlavorKind.STORAGE:
            errors = {
                name: "Only a storage flavor has this: leave it empty."
                for name in ("storage_iops", "storage_throughput_mib", "volume_attributes_class")
                if getattr(self, name) not in (None, "")
            }
            if errors:
                raise ValidationError(errors)

    @property
    def performance(self) -> str:
        """A storage flavor's performance in words ("16,000 IOPS, 1,000 MiB/s per volume");
        "" when it sets none."""
        return performance_words(self.storage_iops, self.storage_throughput_mib)


class FlavorResource(models.Model):
    """A resource a flavor covers (Kueue coveredResources) and how much of it the cluster has."""

    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="resources")
    resource = models.CharField(max_length=100)
    capacity = _quantity_field(help_text="Total in base units: GPUs, cores, bytes.")

    class Meta:
        ordering = ["flavor", "resource"]
        constraints = [
            models.UniqueConstraint(fields=["flavor", "resource"], name="flavor_resource_unique"),
            models.CheckConstraint(
                condition=Q(capacity__gte=0), name="flavor_resource_capacity_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor} {self.resource}"


class TierTemplate(models.Model):
    """A named bundle of quota (R9). Applied to a GPU flavor when a tenant is created."""

    name = models.CharField(max_length=DNS1123_LABEL_MAX, unique=True, validators=[dns1123_label])
    display_name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    gpus_guaranteed = models.PositiveIntegerField()
    gpus_limit = models.PositiveIntegerField()
    cpu_guaranteed = _quantity_field()
    cpu_limit = _quantity_field()
    memory_guaranteed = _quantity_field(help_text="Bytes.")
    memory_limit = _quantity_field(help_text="Bytes.")
    max_running_jobs = models.PositiveIntegerField()
    max_queued_jobs = models.PositiveIntegerField()
    max_pods = models.PositiveIntegerField()
    storage_bytes = _quantity_field()
    max_pvcs = models.PositiveIntegerField()
    # Per-pod caps for the namespaces' LimitRange (R16); empty: derived from the limits.
    max_gpus_per_pod = models.PositiveIntegerField(null=True, blank=True)
    max_cpu_per_pod = _quantity_field(null=True, blank=True, help_text="Cores.")
    max_memory_per_pod = _quantity_field(null=True, blank=True, help_text="Bytes.")
    # GPUs set apart for inference (the production priority class) out of the GPU limit (R17);
    # empty: no split.
    inference_gpus = models.PositiveIntegerField(null=True, blank=True)
    sort_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_LABEL_REGEX), name="tier_name_dns1123"
            ),
            models.CheckConstraint(
                condition=Q(gpus_guaranteed__lte=F("gpus_limit")),
                name="tier_gpus_guaranteed_lte_limit",
            ),
            models.CheckConstraint(
                condition=Q(cpu_guaranteed__gte=0) & Q(cpu_guaranteed__lte=F("cpu_limit")),
                name="tier_cpu_guaranteed_lte_limit",
            ),
            models.CheckConstraint(
                condition=Q(memory_guaranteed__gte=0) & Q(memory_guaranteed__lte=F("memory_limit")),
                name="tier_memory_guaranteed_lte_limit",
            ),
            models.CheckConstraint(
                condition=Q(storage_bytes__gte=0), name="tier_storage_nonnegative"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class QuotaSet(models.Model):
    """A tenant's quotas on one cluster. ``generation`` increases on every change; the cluster
    side records the generation it applied (observedGeneration)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quota_sets")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="quota_sets")
    generation = models.PositiveBigIntegerField(default=1)
    tier = models.ForeignKey(
        TierTemplate, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Scheduling quotas (R4); null means no limit is set.
    max_running_jobs = models.PositiveIntegerField(null=True, blank=True)
    max_queued_jobs = models.PositiveIntegerField(null=True, blank=True)
    max_pods = models.PositiveIntegerField(null=True, blank=True)
    # Storage quotas (R3, R28).
    storage_bytes = _quantity_field(null=True, blank=True)
    max_pvcs = models.PositiveIntegerField(null=True, blank=True)
    # Kueue fairSharing.weight (R14): the tenant's (a department's: its cohort's) advantage
    # when competing for unused quota; empty: Kueue's default of 1.
    fair_share_weight = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(1000)]
    )
    # Per-pod caps (R16) for the LimitRange of every namespace; empty: derived from the limits
    # (at most 8 GPUs, a flavor's CPU and memory limit).
    max_gpus_per_pod = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)]
    )
    max_cpu_per_pod = _quantity_field(null=True, blank=True, help_text="Cores.")
    max_memory_per_pod = _quantity_field(null=True, blank=True, help_text="Bytes.")
    # R17: whole GPUs (nvidia.com/gpu) set apart for inference, the production priority class;
    # batch (every other class, or none) gets the rest of the limit. Empty: no split.
    inference_gpus = models.PositiveIntegerField(null=True, blank=True)
    # Egress exceptions approved for the tenant on this cluster (``quotas.kube.egress``: each
    # {"namespace" or "cidr", "port", "protocol"[, "tenant"]}), extra rules of its
    # NetworkPolicy; written only by an approved request.
    egress_rules = models.JSONField(default=list, db_default=[], blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant__slug", "cluster__name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "cluster"], name="quota_set_unique"),
            models.CheckConstraint(
                condition=Q(generation__gte=1), name="quota_set_generation_positive"
            ),
            models.CheckConstraint(
                condition=Q(storage_bytes__isnull=True) | Q(storage_bytes__gte=0),
                name="quota_set_storage_nonnegative",
            ),
            models.CheckConstraint(
                condition=(Q(max_cpu_per_pod__isnull=True) | Q(max_cpu_per_pod__gt=0))
                & (Q(max_memory_per_pod__isnull=True) | Q(max_memory_per_pod__gt=0)),
                name="quota_set_pod_caps_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}@{self.cluster.name} gen {self.generation}"


class Quota(models.Model):
    """Per tenant x cluster x flavor x resource: guaranteed (Kueue nominalQuota), limit
    (nominal + borrowingLimit) and an optional lending limit."""

    quota_set = models.ForeignKey(QuotaSet, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="quotas")
    resource = models.CharField(max_length=100)
    guaranteed = _quantity_field()
    limit = _quantity_field()
    lending_limit = _quantity_field(null=True, blank=True)

    class Meta:
        ordering = ["flavor__name", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["quota_set", "flavor", "resource"], name="quota_unique_item"
            ),
            models.CheckConstraint(
                condition=Q(guaranteed__gte=0), name="quota_guaranteed_nonnegative"
            ),
            models.CheckConstraint(
                condition=Q(limit__gte=F("guaranteed")), name="quota_guaranteed_lte_limit"
            ),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True)
                | (Q(lending_limit__gte=0) & Q(lending_limit__lte=F("guaranteed"))),
                name="quota_lending_limit_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quota_set} {self.flavor.name} {self.resource}"


class GuaranteeTotal(models.Model):
    """Every tenant's guarantees summed per flavor and resource: what a capacity check and the
    "free" columns subtract from a flavor's capacity, read in one indexed query whatever the
    number of tenants (the sum over every quota row was 15-30 ms at 10,000 tenants, on every
    approvals queue and request check).

    Kept by database triggers on ``quotas_quota`` (migration 0014), in the transaction of the
    row's own insert, update or delete: a bulk insert, a cascade or a restore keeps it too, and
    a reader sees exactly the rows its transaction sees. Nothing in Python writes it. A
    migration that renames ``quotas_quota`` or its ``flavor_id``, ``resource`` or
    ``guaranteed`` columns must create the triggers again (0014 holds both backends' SQL)."""

    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(max_length=100)
    guaranteed = _quantity_field()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["flavor", "resource"], name="guarantee_total_unique")
        ]

    def __str__(self) -> str:
        return f"{self.flavor.name} {self.resource}: {self.guaranteed}"


class SyncOutbox(models.Model):
    """ "Sync tenant T on cluster C up to generation G": written in the same transaction as the
    quota change, so an approved change cannot be lost between the database and the broker.
    A Celery task takes it (enqueued on commit); a periodic sweep re-sends rows that no worker
    has taken. The cluster push (cluster-sync issue) completes it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="+")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    generation = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    dispatched_at = models.DateTimeField(
        null=True, blank=True, help_text="When a worker last took it."
    )
    attempts = models.PositiveIntegerField(default=0)
    completed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "cluster", "generation"], name="outbox_unique_generation"
            ),
        ]
        indexes = [
            models.Index(
                fields=["created_at"],
                condition=Q(completed_at__isnull=True),
                name="outbox_open_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"sync {self.tenant.slug}@{self.cluster.name} to gen {self.generation}"


class TenantSync(models.Model):
    """Where a tenant's quotas stand in one cluster: the generation applied there (observed),
    the last pass's outcome, and drift repaired."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="syncs")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="tenant_syncs")
    state = models.CharField(max_length=20, choices=SyncState.choices, default=SyncState.PENDING)
    desired_generation = models.PositiveBigIntegerField(default=0)
    applied_generation = models.PositiveBigIntegerField(default=0)
    attempts = models.PositiveIntegerField(default=0, help_text="Failed attempts in a row.")
    message = models.TextField(blank=True)
    last_result = models.JSONField(default=dict, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_applied_at = models.DateTimeField(null=True, blank=True)
    drift_repaired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["tenant__slug", "cluster__name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "cluster"], name="tenant_sync_unique"),
            models.CheckConstraint(
                condition=Q(state__in=SyncState.values), name="tenant_sync_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}@{self.cluster.name}: {self.state}"


class QuotaHold(models.Model):
    """New work of a tenant on a cluster held (its ClusterQueue's ``stopPolicy: Hold``, R11):
    one row per source that holds it (``alert:<id>`` for an alert's 100% hold), so sources
    are independent and the tenant is held while any row is left. Written only by
    ``quotas.services.quota_set_hold``; the loader reads it (quotas' own data: it asks no app
    above)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quota_holds")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="quota_holds")
    source = models.CharField(
        max_length=100, help_text="Who holds it, e.g. alert:42 (an alert's 100% hold)."
    )
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["cluster__name", "tenant__slug", "source"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "cluster", "source"], name="quota_hold_unique"
            ),
            models.CheckConstraint(condition=~Q(source=""), name="quota_hold_source_named"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}@{self.cluster.name} held by {self.source}"


class FleetNodeCapacity(models.Model):
    """What one GPU node holds of a MIG flavor (R24), as the fleet app last pushed it through
    ``quotas.services.fleet_node_capacity_set`` (on each report that writes, on a layout's
    change, on a reading of the cluster's Nodes, when a node goes stale or changes cluster).
    The capacity of a MIG flavor is the sum over its nodes (``quotas.selectors``), so quota
    checks read quotas' own data and never ask the fleet.

    A row is counted only while the cluster confirms the node (``confirmed_until``: its last
    reading of the node's Node object plus how long a reading holds) and its agent reports
    (not ``stale``); ``gpu_model`` and ``mig_profile`` are the flavor's when it was counted,
    so a flavor an admin changes since is not counted from rows of its old model."""

    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="fleet_nodes")
    node = models.CharField(max_length=DNS1123_LABEL_MAX, help_text="The GPU node's name.")
    gpu_model = models.CharField(max_length=100)
    mig_profile = models.CharField(max_length=30)
    observed = models.PositiveIntegerField(default=0)
    planned = models.PositiveIntegerField(default=0)
    gpus = models.PositiveIntegerField(default=0)
    unconfirmed_gpus = models.PositiveIntegerField(default=0)
    unconfirmed_instances = models.PositiveIntegerField(default=0)
    confirmed_until = models.DateTimeField(
        null=True, blank=True, help_text="Empty: the cluster does not confirm the node."
    )
    stale = models.BooleanField(default=False, help_text="Its agent stopped reporting.")
    plan_link = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["flavor_id", "node"]
        constraints = [
            models.UniqueConstraint(fields=["flavor", "node"], name="fleet_node_capacity_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.node}: {self.observed} + {self.planned} of flavor {self.flavor_id}"


class FairShareReading(models.Model):
    """A tenant's fair-sharing standing on a cluster as Kueue last reported it
    (written by ``usage.collector``): the weighted share of its ClusterQueue
    (``status.fairSharing.weightedShare``; null where Kueue reports none) and the sum over its
    LocalQueues of the decayed use admission fair sharing keeps
    (``status.fairSharing.admissionFairSharingStatus.consumedResources``, resource -> amount;
    empty where Kueue keeps none)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    weighted_share = models.BigIntegerField(null=True, blank=True)
    consumed = models.JSONField(default=dict, blank=True)
    # Kueue's own time of its last update of ``consumed`` (the latest of the LocalQueues').
    consumed_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField()

    class Meta:
        db_table = "quotas_fair_share_reading"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "cluster"], name="quotas_fair_share_reading_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id} on {self.cluster_id}: share {self.weighted_share}"


class Grant(models.Model):
    """A temporary change on top of a tenant's standing quota on one cluster, from
    ``starts_at`` to ``ends_at``: its lines (``GrantLine``) are added to the standing lines
    while it is active, so a standing change made meanwhile stays when it ends. Written by an
    approved request (``request_number``: its id; no foreign key, the approvals app sits above
    this one); started, withdrawn and ended by ``quotas.services.grants`` (a beat task), each
    step a new quota set generation pushed through the outbox and audited."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="grants")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="grants")
    request_number = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The approved request that made it."
    )
    reason = models.TextField(blank=True)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    state = models.CharField(
        max_length=20, choices=GrantState.choices, default=GrantState.SCHEDULED
    )
    # The quota set generations that added and withdrew it (pushed like an approval's).
    started_generation = models.PositiveBigIntegerField(null=True, blank=True)
    ending_generation = models.PositiveBigIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="When it was pushed.")
    ended_at = models.DateTimeField(
        null=True, blank=True, help_text="When the cluster confirmed its withdrawal."
    )
    end_notice_sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["starts_at", "id"]
        indexes = [
            models.Index(fields=["state", "starts_at"], name="grant_state_start_idx"),
            models.Index(fields=["cluster", "ends_at"], name="grant_cluster_end_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=F("starts_at")), name="grant_window"),
            models.CheckConstraint(
                condition=Q(state__in=GrantState.values), name="grant_state_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"grant {self.tenant.slug}@{self.cluster.name} {self.starts_at:%Y-%m-%d}..{self.ends_at:%Y-%m-%d}"


class GrantLine(models.Model):
    """What a grant adds to one (flavor, resource) line: guaranteed and limit on top of the
    standing line (0 where the tenant has none)."""

    grant = models.ForeignKey(Grant, on_delete=models.CASCADE, related_name="lines")
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="+")
    resource = models.CharField(max_length=100)
    guaranteed = _quantity_field()
    limit = _quantity_field()

    class Meta:
        ordering = ["flavor__name", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["grant", "flavor", "resource"], name="grant_line_unique"
            ),
            models.CheckConstraint(
                condition=Q(guaranteed__gte=0) & Q(limit__gte=F("guaranteed")),
                name="grant_line_amounts",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.grant} {self.flavor.name} {self.resource}"


class PersonCap(models.Model):
    """The most one person may use of their tenant's quota on one flavor and resource (R14,
    the user level): a member (``membership``), the team's pipeline account, or the tenant's
    default for every member without a cap of their own (set by a platform admin). Enforced
    by Kueue: each capped person has a ClusterQueue of their own under the tenant's Cohort
    (``quotas.kube.person_caps``). Removing the membership removes its caps (and so, after its
    running work ends, its queue)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="person_caps")
    subject = models.CharField(max_length=20, choices=CapSubject.choices)
    membership = models.ForeignKey(
        Membership, null=True, blank=True, on_delete=models.CASCADE, related_name="caps"
    )
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(max_length=100)
    amount = _quantity_field(help_text="Base units: GPUs, cores, bytes.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant", "subject", "membership", "flavor", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["membership", "flavor", "resource"],
                condition=Q(membership__isnull=False),
                name="person_cap_unique_member",
            ),
            models.UniqueConstraint(
                fields=["tenant", "subject", "flavor", "resource"],
                condition=Q(membership__isnull=True),
                name="person_cap_unique_account",
            ),
            models.CheckConstraint(
                condition=(Q(subject=CapSubject.MEMBER) & Q(membership__isnull=False))
                | (
                    Q(subject__in=[CapSubject.PIPELINE, CapSubject.DEFAULT])
                    & Q(membership__isnull=True)
                ),
                name="person_cap_subject_matches",
            ),
            models.CheckConstraint(condition=Q(amount__gte=0), name="person_cap_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug} {self.subject} {self.flavor.name} {self.resource}"
