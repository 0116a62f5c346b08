"""The GPU fleet as the portal sees it.

Observed (written only from agents' reports): ``Node``, ``Gpu``, ``MigInstance`` (its
``tenant`` set by ``usage`` from the pods it runs). Observed from the cluster for a
``gpu-operator`` cluster: ``MigOperatorNode``, what the MIG manager's node labels said.
Desired (written by admins through services): ``MigLayout``, one row per generation per GPU;
the highest generation is the one in force. The planner's stored proposals: ``PlanProposal``.
Isolation checks (R30): ``IsolationProbe``. Credentials: ``NodeJoinToken`` (one-time, for the
first contact) and ``NodeToken`` (the agent's bearer token); only SHA-256 digests are stored.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.db import models
from django.db.models import Q

from tenants.validators import DNS1123_SUBDOMAIN_REGEX, NODE_NAME_MAX, kubernetes_node_name

GPU_UUID_MAX = 100
GPU_NAME_MAX = 100
MIG_PROFILE_MAX = 32
VERSION_MAX = 50
HOSTNAME_MAX = 253  # a DNS name
AGENT_KEY_MAX = 200  # the random key an agent registers with (gpu_node_agent.runner)
AGENT_KEY_MIN = 16  # shorter is guessable, not a secret
TOKEN_PREFIX_MAX = 12


class LayoutState(models.TextChoices):
    """Mirrors the GPU Operator's ``nvidia.com/mig.config.state`` label."""

    PENDING = "pending", "Pending"
    APPLYING = "applying", "Applying"
    SUCCESS = "success", "Success"
    FAILED = "failed", "Failed"
    REBOOT_REQUIRED = "reboot-required", "Reboot required"


# A layout in one of these is still to be done by the agent (and has a deadline).
OPEN_LAYOUT_STATES = (LayoutState.PENDING, LayoutState.APPLYING)


class DevicePlugin(models.TextChoices):
    """Whether the NVIDIA device plugin has re-advertised the node's devices after the agent
    changed MIG instances (it lists them only when it starts)."""

    NOT_NEEDED = "not-needed", "Not needed"
    RESTART_NEEDED = "restart-needed", "Restart needed"
    RESTARTED = "restarted", "Restarted"
    RESTART_FAILED = "restart-failed", "Restart failed"


REPORT_SESSION_MAX = 32
REPORT_DIGEST_MAX = 64  # a SHA-256 in hex


class Node(models.Model):
    """A GPU node running the agent. Created when the agent registers (a join token, or in a
    cluster its pod's ServiceAccount token). Named as its Kubernetes Node is: a DNS-1123
    subdomain (``ip-10-0-1-23.ec2.internal`` on EKS), not only a label."""

    name = models.CharField(
        max_length=NODE_NAME_MAX, unique=True, validators=[kubernetes_node_name]
    )
    cluster = models.ForeignKey(
        "quotas.Cluster",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="nodes",
        help_text="The Kubernetes cluster the node belongs to, if known.",
    )
    hostname = models.CharField(max_length=HOSTNAME_MAX, blank=True)
    agent_version = models.CharField(max_length=VERSION_MAX, blank=True)
    driver_version = models.CharField(max_length=VERSION_MAX, blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True)
    stale = models.BooleanField(
        default=False,
        help_text="Set by a periodic task when reports stop (AGENT_STALE_AFTER_S); "
        "cleared by the next report.",
    )
    # The report protocol the agent speaks (PROTOCOL.md): 1 sends every report whole, 2 sends
    # what changed since the report the portal last acknowledged. For protocol 2, that report:
    # the agent's session (a new one each start), its sequence number and the digest of the
    # node's state it described; a change report must name all three to be applied.
    report_protocol = models.PositiveSmallIntegerField(default=1)
    report_session = models.CharField(max_length=REPORT_SESSION_MAX, blank=True)
    report_seq = models.BigIntegerField(default=0)
    report_digest = models.CharField(max_length=REPORT_DIGEST_MAX, blank=True)
    # What the node's cluster says of it: its Node object of the same name, as the Kubernetes
    # API last showed it (``gpu_agent.services.cluster_nodes``, every minute). Fleet capacity
    # counts a node's GPUs only as far as this confirms them, never on its agent's word alone
    # (``gpu_agent.selectors.mig_capacity``); a reading older than
    # ``CLUSTER_NODES_STALE_AFTER_S`` (the cluster out of reach) confirms nothing.
    cluster_seen_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the cluster's API last showed a Node of this name (null: it did not, "
        "or it was never read).",
    )
    cluster_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="GPUs the cluster confirms on the node (GPU Feature Discovery's "
        "nvidia.com/gpu.count, else what the device plugin advertises).",
    )
    # db_default on the NOT NULL columns added after 0.1.0: that release's pods, still serving
    # while the migration runs (and after a rollback), create nodes without them
    # (docs/develop/migrations.md).
    cluster_gpu_product = models.CharField(
        max_length=253,
        blank=True,
        default="",
        db_default="",
        help_text="The node's nvidia.com/gpu.product label.",
    )
    cluster_mig = models.JSONField(
        default=dict,
        db_default={},
        blank=True,
        help_text='MIG instances the device plugin advertises, by profile: {"1g.10gb": 7}.',
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Not stored: (a layout open, open probes) when the report endpoint's token lookup read
    # them with the node (services.nodes.node_token_authenticate); None otherwise.
    open_work: tuple[bool, int] | None = None

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=DNS1123_SUBDOMAIN_REGEX), name="node_name_dns1123_subdomain"
            ),
        ]

    def __str__(self) -> str:
        return self.name


# An NVML UUID as agents report it: ``GPU-<hex and dashes>`` (a whole GPU) or ``MIG-...`` (a MIG
# device), letters and digits in the tail (test fleets name theirs ``GPU-node-1-0000``). It is a
# path segment of the fleet pages and of /api/v1/gpus/{uuid}/: never "/", "?", "#" or spaces.
GPU_UUID_RE = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z][0-9A-Za-z-]*\Z")
GPU_UUID_RULE = "an NVML UUID: GPU-<hex and dashes> or MIG-<hex and dashes>"


def is_gpu_uuid(value: object) -> bool:
    """Whether ``value`` is a UUID as NVML writes them (and so safe in a URL)."""
    return isinstance(value, str) and len(value) <= GPU_UUID_MAX and bool(GPU_UUID_RE.match(value))


class Gpu(models.Model):
    """A physical GPU, identified by its NVML UUID, as last reported."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    uuid = models.CharField(max_length=GPU_UUID_MAX, unique=True)
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=GPU_NAME_MAX, help_text="Model name as NVML reports it.")
    memory_total_mib = models.PositiveIntegerField()
    memory_used_mib = models.PositiveIntegerField(default=0)
    utilization_pct = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Null in MIG mode: NVML does not report it."
    )
    mig_mode_current = models.BooleanField(default=False)
    mig_mode_pending = models.BooleanField(default=False)
    applied_generation = models.PositiveIntegerField(
        default=0, help_text="The desired layout generation the agent last applied."
    )
    processes = models.JSONField(
        default=list, blank=True, help_text="Processes on the GPU outside MIG instances."
    )
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["node_id", "index"]
        verbose_name = "GPU"
        constraints = [
            models.CheckConstraint(
                condition=Q(utilization_pct__isnull=True)
                | Q(utilization_pct__gte=0, utilization_pct__lte=100),
                name="gpu_utilization_pct_range",
            ),
            models.CheckConstraint(condition=Q(index__gte=0), name="gpu_index_non_negative"),
        ]

    def __str__(self) -> str:
        return self.uuid

    @property
    def has_page(self) -> bool:
        """False for a UUID stored before they were checked that is no NVML UUID: shown as
        text, with no link (it may hold "/", which no URL takes)."""
        return is_gpu_uuid(self.uuid)


class MigInstance(models.Model):
    """A MIG GPU instance as last reported. Replaced wholesale by every report."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="instances")
    gi_id = models.PositiveSmallIntegerField(help_text="GPU instance id (NVML).")
    profile = models.CharField(max_length=MIG_PROFILE_MAX, help_text="e.g. 3g.40gb")
    start = models.PositiveSmallIntegerField(help_text="First memory slice of the placement.")
    size = models.PositiveSmallIntegerField(help_text="Memory slices of the placement.")
    ci_ids = models.JSONField(default=list, blank=True)
    memory_used_mib = models.PositiveIntegerField(default=0)
    utilization_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    busy = models.BooleanField(default=False, help_text="Has at least one process.")
    processes = models.JSONField(
        default=list, blank=True, help_text='[{"pid", "used_memory_mib", "pod_uid"}]'
    )
    tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The tenant whose pod runs on it (from the pod's namespace), when known.",
    )
    observed_at = models.DateTimeField()

    class Meta:
        ordering = ["gpu_id", "start"]
        verbose_name = "MIG instance"
        constraints = [
            models.UniqueConstraint(fields=["gpu", "gi_id"], name="mig_instance_unique_gi"),
            models.CheckConstraint(condition=Q(start__gte=0), name="mig_instance_start_gte_0"),
            models.CheckConstraint(condition=Q(size__gte=1), name="mig_instance_size_gte_1"),
            models.CheckConstraint(
                condition=Q(utilization_pct__isnull=True)
                | Q(utilization_pct__gte=0, utilization_pct__lte=100),
                name="mig_instance_utilization_pct_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.profile}@{self.start} (gi {self.gi_id})"


class MigLayout(models.Model):
    """A desired MIG layout of one GPU. Each change is a new row with the next generation;
    the highest generation is in force and older open ones are failed as superseded."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="layouts")
    generation = models.PositiveIntegerField()
    mig_enabled = models.BooleanField(default=True)
    instances = models.JSONField(default=list, blank=True, help_text='[{"profile", "start"}]')
    state = models.CharField(
        max_length=20, choices=LayoutState.choices, default=LayoutState.PENDING
    )
    message = models.TextField(blank=True)
    waiting_for = models.JSONField(
        default=list,
        blank=True,
        help_text="Drain: GPU instance ids (gi_id) that must go idle before the agent is told.",
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="Failed when still open after this (null: draining)."
    )
    device_plugin = models.CharField(
        max_length=20,
        choices=DevicePlugin.choices,
        blank=True,
        help_text="After the agent changed instances: has the device plugin re-advertised "
        "them (blank: not reported).",
    )
    device_plugin_message = models.TextField(blank=True)

    class Meta:
        ordering = ["gpu_id", "-generation"]
        verbose_name = "MIG layout"
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "generation"], name="mig_layout_unique_generation"
            ),
            models.CheckConstraint(
                condition=Q(state__in=LayoutState.values), name="mig_layout_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(generation__gte=1), name="mig_layout_generation_gte_1"
            ),
        ]
        indexes = [models.Index(fields=["state", "deadline"], name="mig_layout_open_idx")]

    def __str__(self) -> str:
        return f"{self.gpu_id} generation {self.generation} ({self.state})"


class ProbeState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    SKIPPED = "skipped", "Skipped"
    FAILED = "failed", "Failed"


OPEN_PROBE_STATES = (ProbeState.REQUESTED, ProbeState.RUNNING)

# R30: a neighbour slowing a tenant's work down by more than this is not isolation.
ISOLATION_SLOWDOWN_LIMIT_PCT = 5.0


class IsolationProbe(models.Model):
    """An isolation check (R30) of one GPU: a compute-bound kernel on ``target`` alone, then
    beside a saturating ``neighbour``; slowdown = (t_together / t_alone - 1) * 100. On a MIG
    GPU the two are GPU instances (``gi_id``), on a GPU without MIG two processes (null).

    About two tenants where known: ``neighbour_tenant`` (tenant A, whose share is saturated)
    and ``target_tenant`` (tenant B, whose share is probed): the owners of the two MIG
    instances, or two tenants holding time-sliced shares of the GPU's model."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="probes")
    mig = models.BooleanField(help_text="Probed two MIG instances (else two processes).")
    target_gi_id = models.PositiveSmallIntegerField(null=True, blank=True)
    neighbour_gi_id = models.PositiveSmallIntegerField(null=True, blank=True)
    target_profile = models.CharField(max_length=MIG_PROFILE_MAX, blank=True)
    neighbour_profile = models.CharField(max_length=MIG_PROFILE_MAX, blank=True)
    target_tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Tenant B: the tenant whose share is probed (null: not known).",
    )
    neighbour_tenant = models.ForeignKey(
        "tenants.Tenant",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Tenant A: the tenant whose share is saturated meanwhile (null: not known).",
    )
    vgpu_limits = models.JSONField(
        null=True,
        blank=True,
        help_text="On a GPU shared as vGPUs (HAMi): the two tenants' shares the probe runs "
        'under, {"target_cores_pct", "target_memory_mib", "neighbour_cores_pct", '
        '"neighbour_memory_mib"}; null on MIG and time-sliced GPUs.',
    )
    state = models.CharField(
        max_length=20, choices=ProbeState.choices, default=ProbeState.REQUESTED
    )
    t_alone_s = models.FloatField(null=True, blank=True)
    t_together_s = models.FloatField(null=True, blank=True)
    slowdown_pct = models.FloatField(null=True, blank=True)
    simulated = models.BooleanField(default=False)
    library = models.CharField(max_length=40, blank=True, help_text="cupy, torch or simulated.")
    message = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    requested_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["gpu_id", "-requested_at"]
        verbose_name = "isolation probe"
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=ProbeState.values), name="isolation_probe_state_valid"
            ),
            models.CheckConstraint(
                condition=~Q(state="done") | Q(slowdown_pct__isnull=False),
                name="isolation_probe_done_has_slowdown",
            ),
            models.CheckConstraint(
                condition=~Q(target_tenant=models.F("neighbour_tenant")),
                name="isolation_probe_two_tenants",
            ),
        ]
        indexes = [models.Index(fields=["gpu", "state"], name="isolation_probe_open_idx")]

    def __str__(self) -> str:
        return f"probe {self.pk} of {self.gpu_id} ({self.state})"

    @property
    def passed(self) -> bool | None:
        """Within the 5 % line (None until done)."""
        if self.slowdown_pct is None:
            return None
        return self.slowdown_pct <= ISOLATION_SLOWDOWN_LIMIT_PCT


class PlanProposal(models.Model):
    """The MIG planner's latest proposal for a cluster's GPUs (``cluster`` null: GPUs of nodes
    without a cluster), computed periodically from the tenants' MIG quotas. A new row only
    when the proposal changed (``digest``); ``state_digest`` is the GPUs' state it was made
    from: a proposal whose GPUs changed since is stale and is not applied."""

    cluster = models.ForeignKey(
        "quotas.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    checked_at = models.DateTimeField(help_text="Last time the planner found the same proposal.")
    digest = models.CharField(max_length=64)
    state_digest = models.CharField(max_length=64)
    gpus = models.JSONField(
        default=list,
        help_text='[{"uuid", "node", "model", "changed", "current": [{"profile", "start"}], '
        '"layout": [...], "destroy": [...], "create": [...], "kept_busy": [...]}]',
    )
    demand = models.JSONField(default=list, help_text='[{"profile", "count", "tenant", "model"}]')
    unmet = models.JSONField(default=list, help_text='[{"profile", "wanted", "placed", "why"}]')
    explanation = models.JSONField(default=list, help_text="The planner's lines, in order.")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["cluster", "-created_at"], name="plan_proposal_latest")]

    def __str__(self) -> str:
        return f"proposal {self.pk} ({self.cluster_id or 'no cluster'})"


class NodeJoinToken(models.Model):
    """A one-time secret an agent exchanges for its node token. Only the digest is stored."""

    node_name = models.CharField(max_length=NODE_NAME_MAX, validators=[kubernetes_node_name])
    cluster = models.ForeignKey(
        "quotas.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    prefix = models.CharField(max_length=TOKEN_PREFIX_MAX, help_text="First characters, shown.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    node = models.ForeignKey(
        Node,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The node that registered with it.",
    )
    # SHA-256 of the key the registering agent sent (a random secret it keeps in its state
    # directory): the same agent retrying a registration whose answer it never got is known
    # by it for AGENT_REGISTER_RETRY_S after the token was used.
    agent_key_digest = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(node_name__regex=DNS1123_SUBDOMAIN_REGEX),
                name="node_join_token_name_dns1123_subdomain",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.node_name})"


class NodeToken(models.Model):
    """The bearer token of one node's agent. Only the digest is stored."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="tokens")
    prefix = models.CharField(max_length=TOKEN_PREFIX_MAX, help_text="First characters, shown.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.node_id})"


class MigOperatorNode(models.Model):
    """What the GPU Operator's MIG manager says about one node of a ``gpu-operator`` cluster,
    as last read from the node's labels: the config the portal asked for, the config the
    node's ``nvidia.com/mig.config`` label names, and its ``nvidia.com/mig.config.state``."""

    cluster = models.ForeignKey(
        "quotas.Cluster", on_delete=models.CASCADE, related_name="mig_nodes"
    )
    node_name = models.CharField(max_length=NODE_NAME_MAX)
    desired_config = models.CharField(max_length=253, blank=True)
    label_config = models.CharField(
        max_length=253, blank=True, help_text="nvidia.com/mig.config as read."
    )
    label_state = models.CharField(
        max_length=63, blank=True, help_text="nvidia.com/mig.config.state as read."
    )
    present = models.BooleanField(
        default=True, help_text="The Node exists in the cluster (the portal never creates one)."
    )
    message = models.TextField(blank=True)
    label_set_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # Made by the quotas app before the model moved here: the table kept its name (the
        # move changed no data; see migrations gpu_agent 0003 and quotas 0006).
        db_table = "quotas_migoperatornode"
        ordering = ["cluster__name", "node_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "node_name"], name="mig_operator_node_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.node_name}: {self.label_state or '-'}"
