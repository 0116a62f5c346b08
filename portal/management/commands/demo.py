"""Seed the demo: two clusters, flavors, three tenants with the seed's quotas, four users.

Safe to run twice: what exists is left as it is. The demo users are created only here.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from advice.selectors import admission_times
from advice.services import suggestions_compute
from alerts.choices import RuleKind
from alerts.models import AlertRule
from approvals.services import (
    quota_request_approve,
    quota_request_create,
    quota_request_grant,
    request_items_parse,
    tenant_onboard,
)
from gpu_agent.models import Node
from gpu_agent.services.nodes import join_token_create
from gpu_spec import demo_load
from gpu_spec.mig.catalogue import load_catalogue
from gpu_spec.simulated import DEMO_METRICS_PLAN_FILE as PLAN_FILE
from gpu_spec.simulated import parse_fake_gpus
from identity.choices import GroupRole
from identity.models import GroupMapping
from identity.services import group_mapping_create
from quotas.choices import (
    CPU_RESOURCE,
    GPU_RESOURCE,
    GPUCORES_RESOURCE,
    GPUMEM_RESOURCE,
    MEMORY_RESOURCE,
    STORAGE_RESOURCE,
    CapSubject,
    Enforcement,
    FairSharing,
    FlavorKind,
    SyncBackend,
    mig_resource,
)
from quotas.models import Cluster, FlavorResource, Quota, ResourceFlavor, TierTemplate
from quotas.services import QuotaItem, person_caps_set
from tenants.choices import IsolationLevel, MembershipRole
from tenants.models import Membership, Namespace, Tenant, User
from tenants.services import membership_set, namespace_shares_set, tenant_create
from usage.choices import PrometheusFigure
from usage.demo import DAYS as DEMO_DAYS
from usage.demo import demo_month_fill, tenant_recent_utilisation
from usage.models import PrometheusSource
from usage.services import PROMETHEUS_SETTINGS, prometheus_source_set

GI = 1024**3
MI = 1024**2
TI = 1024**4
DEMO_PASSWORD = "demo"  # noqa: S105 - the demo's documented password, printed at start
DEMO_SPAN = timedelta(days=DEMO_DAYS)  # the simulated usage month
DEMO_IDLE_GRACE = timedelta(minutes=10)  # notice to suspension, for the demo's idle notebook

# (profile, weight = compute slices / 7) of demo-h100's MIG flavors; their capacity is what the
# MIG nodes' layouts below hold (the fleet counts it once their agents report and the cluster's
# Node objects, put in the stand-ins by ``_standin_nodes``, confirm it).
H100_MIG = [("1g.10gb", Decimal("0.143")), ("3g.40gb", Decimal("0.429"))]
# Each MIG node's H100s start partitioned: two with one 3g.40gb and four 1g.10gb, two with
# seven 1g.10gb (the agents report these instances from their first report).
H100_MIG_NODE = (
    "NVIDIA H100 80GB HBM3:2:mig:3g.40gb/4x1g.10gb,NVIDIA H100 80GB HBM3:2:mig:7x1g.10gb"
)

USERS = [
    ("admin", "admin@example.com", True),
    ("alice", "alice@example.com", False),
    ("bob", "bob@example.com", False),
    ("carol", "carol@example.com", False),
]

# The department (R14) over team-a and team-b on demo-h100: a pool of 2 H100s, a cap of 12.
DEPARTMENT_TEAMS = ("team-a", "team-b")

# The seed's T4 split: one T4 shared through HAMi as vGPUs, 30% / 30% / 40% of its memory
# and compute to three labs, each capped inside its containers (a time-sliced share caps
# neither; clusters without HAMi keep time-slicing, ``quotas.timeslicing``).
T4_FLAVOR = "t4-vgpu"
T4_GPUS = 1
T4_MEMORY_MIB = 15360  # a Tesla T4's memory as NVML reports it
T4_VGPUS_PER_GPU = 10  # HAMi's deviceSplitCount (its default)
# The HAMi the demo's stand-in reports on demo-h100 (newer than quotas.vgpu.HAMI_MIN_VERSION).
DEMO_HAMI_VERSION = "2.10.0"
T4_LABS = [
    ("lab-nlp", "NLP lab (shared T4)", 30),
    ("lab-vision", "Vision lab (shared T4)", 30),
    ("lab-speech", "Speech lab (shared T4)", 40),
]

# The seed's 16-A100 example (R19): guaranteed / limit per team.
TEAMS = [
    ("team-a", "Team A (vision)", 6, 10, "alice", "small"),
    ("team-b", "Team B (speech)", 4, 6, "bob", "small"),
    ("team-c", "Team C (recsys)", 2, 4, None, "small"),
]


def _isolation_level_by_request(tenant: Tenant, cluster: Cluster, lead: User, admin: User) -> None:
    """Tenants at different isolation levels (R23), each set as a lead would: team-b's lead
    asks for namespace and cgroup sharing (development and tests), an admin approves. team-a
    and team-c stay at whole GPUs."""
    request = quota_request_create(
        tenant=tenant,
        cluster=cluster,
        requester=lead,
        reason="Speech experiments in development: namespace sharing is enough",
        items=[],
        isolation_level=IsolationLevel.NAMESPACE,
        submit=True,
    )
    quota_request_approve(request=request, approver=admin, comment="Fine for dev and test")


def _pod_bandwidth_by_request(tenant: Tenant, cluster: Cluster, lead: User, admin: User) -> None:
    """team-b's pods share a 10 Gbit/s link with the other teams' on demo-h100: its lead asks
    for a cap of 1 Gbit/s each way per pod (R27), an admin approves. Its page shows the cap,
    its namespaces carry it as a label, and the cluster's admission policy refuses a pod
    there without the bandwidth annotations or above 1G."""
    request = quota_request_create(
        tenant=tenant,
        cluster=cluster,
        requester=lead,
        reason="Our data loaders flood the shared link: hold each pod to 1 Gbit/s",
        items=[],
        tenant_changes={"pod_bandwidth_max": "1G"},
        submit=True,
    )
    quota_request_approve(request=request, approver=admin, comment="Agreed")


def _serving_by_request(tenant: Tenant, cluster: Cluster, lead: User, admin: User) -> None:
    """team-a serves a model beside its training on demo-a100: its lead asks for the
    production priority, 3 of its 10 A100s for inference (the other 7 for batch) and at most 4
    GPUs per pod; an admin approves. The tenant page shows the grant, the split and the caps,
    and the cluster holds the priority-scoped quotas and the LimitRange."""
    request = quota_request_create(
        tenant=tenant,
        cluster=cluster,
        requester=lead,
        reason="Serve the vision model beside training; no single job takes the whole quota",
        items=[],
        scheduling={"inference_gpus": 3, "max_gpus_per_pod": 4},
        production_priority=True,
        submit=True,
    )
    quota_request_approve(request=request, approver=admin, comment="Serving is production")


def _team_limits_by_request(tenant: Tenant, cluster: Cluster, lead: User, admin: User) -> None:
    """team-a's own maximum run time and its cap over every cluster (R12, R22), asked for by
    its lead and approved as any request: its page then names them."""
    request = quota_request_create(
        tenant=tenant,
        cluster=cluster,
        requester=lead,
        reason="Runs past three days are stuck in our pipeline; and we share the budget of 32 "
        "GPU units over both clusters",
        items=[],
        tenant_changes={"max_run_time_hours": 72, "gpu_unit_cap": Decimal(32)},
        submit=True,
    )
    quota_request_approve(request=request, approver=admin, comment="Agreed")


# team-a's grant for a time on demo-h100: 2 extra H100s for two weeks from the seeding, or
# for DEMO_GRANT_MINUTES minutes (a shortened window: the beat withdraws it while you watch).
GRANT_EXTRA_H100S = 2
GRANT_DAYS = 14


def _grant_by_request(tenant: Tenant, cluster: Cluster, lead: User, admin: User) -> None:
    """team-a asks for 2 more H100s for the two weeks before its model release (a grant for a
    time on top of its standing quota); an admin approves and it is pushed at once. With
    DEMO_GRANT_MINUTES set it ends that many minutes from now instead: the beat withdraws it
    then (``kubectl get clusterqueue team-a`` shows the nominal quota go back) and the audit
    trail has both steps."""
    gpu = ResourceFlavor.objects.get(cluster=cluster, name="h100-80gb")
    now = timezone.now()
    minutes = int(os.environ.get("DEMO_GRANT_MINUTES", "0") or 0)
    ends_at = now + (timedelta(minutes=minutes) if minutes > 0 else timedelta(days=GRANT_DAYS))
    extra = Decimal(GRANT_EXTRA_H100S)
    request = quota_request_create(
        tenant=tenant,
        cluster=cluster,
        requester=lead,
        reason="Two weeks of extra H100s before the vision model's release",
        items=[QuotaItem(gpu, GPU_RESOURCE, extra, extra)],
        starts_at=now,
        ends_at=ends_at,
        submit=True,
    )
    quota_request_approve(request=request, approver=admin, comment="For the release only")


def _admit(cluster: Cluster, jobs: list[Any], horizon: float) -> dict[str, float | None]:
    return admission_times(cluster=cluster, jobs=jobs, horizon=horizon)


def _flavor(
    cluster: Cluster, name: str, capacity: dict[str, Decimal], **fields: Any
) -> ResourceFlavor:
    flavor, _ = ResourceFlavor.objects.get_or_create(cluster=cluster, name=name, defaults=fields)
    for resource, amount in capacity.items():
        FlavorResource.objects.get_or_create(
            flavor=flavor, resource=resource, defaults={"capacity": amount}
        )
    return flavor


def _connect(cluster: Cluster, kube_dir: str) -> None:
    """Point a demo cluster at its stand-in's kubeconfig, or keep its quotas in the portal."""
    if kube_dir:
        cluster.backend = SyncBackend.KUBERNETES
        cluster.kubeconfig_path = str(Path(kube_dir) / f"{cluster.name}.kubeconfig")
    else:
        cluster.backend = SyncBackend.NONE
        cluster.kubeconfig_path = ""
    cluster.save(update_fields=["backend", "kubeconfig_path"])


# Simulated GPU nodes (fake backend) per demo cluster: (node, cluster, --fake-gpus spec).
DEMO_NODES = [
    ("a100-node-1", "demo-a100", "NVIDIA A100-SXM4-80GB:8:nomig"),
    ("a100-node-2", "demo-a100", "NVIDIA A100-SXM4-80GB:8:nomig"),
    ("h100-node-1", "demo-h100", "NVIDIA H100 80GB HBM3:8:nomig"),
    ("h100-node-2", "demo-h100", "NVIDIA H100 80GB HBM3:8:nomig"),
    ("h100-mig-1", "demo-h100", H100_MIG_NODE),
    ("h100-mig-2", "demo-h100", H100_MIG_NODE),
    # The labs' time-sliced T4 (t4-shared): no MIG, outside the catalogue.
    ("t4-node-1", "demo-h100", "Tesla T4:1:nomig"),
]


def seeded_mig_instances(cluster: str) -> Counter[str]:
    """Instances per MIG profile the cluster's demo nodes start with."""
    counts: Counter[str] = Counter()
    for _name, cluster_name, spec in DEMO_NODES:
        if cluster_name == cluster:
            for gpu in parse_fake_gpus(spec):
                counts.update(gpu.instances)
    return counts


def standin_node(name: str, spec: str) -> dict[str, Any] | None:
    """The Node a real cluster would hold for demo node ``name`` (its ``--fake-gpus`` spec):
    GPU Feature Discovery's labels and what the device plugin advertises with the ``mixed`` MIG
    strategy (whole GPUs as ``nvidia.com/gpu``, each MIG profile as ``nvidia.com/mig-<p>``).
    The portal counts a node's GPUs and instances only as far as its cluster's Node confirms
    them (``gpu_agent.services.cluster_nodes``). None for nodes without a MIG-capable model
    (the labs' T4, which ``devcluster.demo`` puts in the stand-in itself)."""
    gpus = parse_fake_gpus(spec)
    catalogue = load_catalogue()
    if not gpus or any(catalogue.find_model(g.name) is None for g in gpus):
        return None
    mig: Counter[str] = Counter()
    for gpu in gpus:
        if gpu.mig:
            mig.update(gpu.instances)
    whole = sum(1 for g in gpus if not g.mig)
    labels = {
        "kubernetes.io/hostname": name,
        "nvidia.com/gpu.product": gpus[0].name.replace(" ", "-"),
        "nvidia.com/gpu.count": str(len(gpus)),
    }
    if any(g.mig for g in gpus):
        labels["nvidia.com/mig.strategy"] = "mixed"
        labels.update({f"nvidia.com/mig-{p}.count": str(n) for p, n in sorted(mig.items())})
    resources = {"nvidia.com/gpu": str(whole)}
    resources.update({f"nvidia.com/mig-{p}": str(n) for p, n in sorted(mig.items())})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


def _standin_nodes(kube_dir: str) -> str:
    """Put each demo cluster's GPU nodes in its stand-in, where missing, as the kubelet, the
    device plugin and GPU Feature Discovery would (``standin_node``): the portal reads them
    every minute and counts the agents' GPUs only as far as they confirm them. A node already
    there is left as it is (a restart keeps the state directory)."""
    from kubernetes import config
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import NotFoundError

    made = 0
    for cluster_name in dict.fromkeys(c for _n, c, _s in DEMO_NODES):
        path = Path(kube_dir) / f"{cluster_name}.kubeconfig"
        try:
            api = config.new_client_from_config(config_file=str(path))
        except Exception as exc:  # no stand-in for it: nothing to seed
            return f"Stand-in nodes of {cluster_name} not seeded: {exc}"
        try:
            nodes = DynamicClient(api).resources.get(api_version="v1", kind="Node")
            for name, node_cluster, spec in DEMO_NODES:
                body = standin_node(name, spec) if node_cluster == cluster_name else None
                if body is None:
                    continue
                try:
                    nodes.get(name=name)
                except NotFoundError:
                    nodes.create(body=body)
                    made += 1
        except Exception as exc:  # the stand-in is not answering: the demo goes on without
            return f"Stand-in nodes of {cluster_name} not seeded: {exc}"
        finally:
            api.close()
    return f"Stand-in GPU nodes: {made} new Node object(s) with their GPUs advertised"


def _agent_join_tokens(agent_dir: Path, admin: User) -> int:
    """A one-time join token and a spec file per demo node not registered yet, for
    ``gpu_node_agent.testing.demo`` to start its simulated agent with."""
    agent_dir.mkdir(parents=True, exist_ok=True)
    made = 0
    for name, cluster_name, gpus in DEMO_NODES:
        (agent_dir / f"{name}.json").write_text(json.dumps({"node": name, "gpus": gpus}))
        if Node.objects.filter(name=name).exists():
            continue  # registered: its agent uses the node token kept in its state dir
        _token, secret = join_token_create(
            node_name=name,
            actor=admin,
            ttl=timedelta(days=7),
            cluster=Cluster.objects.get(name=cluster_name),
        )
        join = agent_dir / f"{name}.join"
        join.write_text(secret)
        join.chmod(0o600)
        made += 1
    return made


def demo_load_plan() -> demo_load.LoadPlan:
    """Which tenants hold the demo clusters' whole GPUs (``gpu_spec.demo_load``), for the
    simulated agents: per cluster, the nodes whose GPUs are its whole-GPU flavor's model, and
    the tenants with a GPU limit on that flavor and namespaces to run in (a department runs
    nothing itself), in the month's order, each with the utilisation its GPUs had in the last
    week of the simulated month (``usage.demo``: what its usage page shows). team-a is the
    simulated Kueue's hot queue, and team-b's GPUs on the first cluster stay idle, as in the
    simulated month."""
    clusters = []
    names = list(dict.fromkeys(c for _n, c, _s in DEMO_NODES))
    first = min(names, default="")
    for cluster_name in names:
        flavor = (
            ResourceFlavor.objects.filter(
                cluster__name=cluster_name, kind=FlavorKind.GPU, time_slicing_replicas__isnull=True
            )
            .order_by("name")
            .first()
        )
        if flavor is None:
            continue
        nodes = []
        for name, node_cluster, spec in DEMO_NODES:
            gpus = parse_fake_gpus(spec) if node_cluster == cluster_name else []
            if gpus and all(g.name == flavor.gpu_model and not g.mig for g in gpus):
                nodes.append((name, len(gpus)))
        quotas = Quota.objects.filter(
            quota_set__cluster=flavor.cluster, flavor=flavor, resource=GPU_RESOURCE, limit__gt=0
        ).select_related("quota_set__tenant")
        tenants = sorted(
            (
                demo_load.PlanTenant(
                    name=q.quota_set.tenant.slug,
                    namespace=f"{q.quota_set.tenant.slug}-training",
                    limit=int(q.limit),
                    hot=q.quota_set.tenant.slug in demo_load.HOT_TENANTS,
                    idle=q.quota_set.tenant.slug == "team-b" and cluster_name == first,
                    utilisation_pct=tenant_recent_utilisation(
                        cluster_id=flavor.cluster_id,
                        tenant_id=q.quota_set.tenant_id,
                        flavor_id=flavor.pk,
                    ),
                )
                for q in quotas
                if q.quota_set.tenant.namespaces.exists()
            ),
            key=lambda t: t.name,
        )
        clusters.append(demo_load.PlanCluster(cluster_name, tuple(nodes), tuple(tenants)))
    return demo_load.LoadPlan(tuple(clusters))


# The demo cluster whose usage comes from a Prometheus (when `make run` started one): its node
# agents' simulated devices are served as DCGM-exporter series (gpu_node_agent.testing.demo_metrics).
PROMETHEUS_CLUSTER = "demo-h100"
PROMETHEUS_PLAN = PLAN_FILE  # which nodes and namespaces the demo exporter simulates


def _prometheus_source(url: str, agent_dir: str, admin: User) -> str:
    """Read demo-h100's usage from the Prometheus at ``url`` (DCGM exporter and
    kube-state-metrics series of its simulated nodes; the node agents then only drive MIG), and
    tell the demo exporter which nodes and namespaces to simulate. Without ``url``, a source
    left from an earlier run is switched off. Returns what it did, for the start-up output."""
    cluster = Cluster.objects.get(name=PROMETHEUS_CLUSTER)
    existing = PrometheusSource.objects.filter(cluster=cluster).first()
    plan = Path(agent_dir) / PROMETHEUS_PLAN if agent_dir else None
    if not url:
        if plan is not None:
            plan.unlink(missing_ok=True)
        if existing is None or not existing.enabled:
            return ""
        settings_ = {name: getattr(existing, name) for name in PROMETHEUS_SETTINGS}
        prometheus_source_set(
            cluster=cluster, actor=admin, settings_=settings_ | {"enabled": False}
        )
        return f"Prometheus: not running, {cluster.name} reads its node agents again"
    if plan is not None:
        nodes = [name for name, cluster_name, _gpus in DEMO_NODES if cluster_name == cluster.name]
        namespaces = sorted(
            Namespace.objects.filter(tenant__slug__in=[t[0] for t in TEAMS]).values_list(
                "name", flat=True
            )
        )
        plan.parent.mkdir(parents=True, exist_ok=True)
        plan.write_text(
            json.dumps({"cluster": cluster.name, "nodes": nodes, "namespaces": namespaces})
        )
    wanted = {
        "url": url,
        "enabled": True,
        "step_s": 15,
        "query_timeout_s": 10,
        "figures": sorted([PrometheusFigure.GPU_USAGE, PrometheusFigure.GPU_REQUESTS]),
        "node_agent_samples": False,
    }
    if existing is None or any(getattr(existing, k) != v for k, v in wanted.items()):
        prometheus_source_set(cluster=cluster, actor=admin, settings_=wanted)
    return f"Prometheus: {cluster.name}'s GPU usage is read from {url}"


class Command(BaseCommand):
    help = "Seed demo clusters, flavors, tenants and users (password 'demo'). Idempotent."

    @staticmethod
    def _department(
        users: dict[str, User],
    ) -> Tenant:
        """The Research department, led by alice (who also leads team-a). Its quota on
        demo-h100 is granted once its teams are in: a cap is checked against what they hold."""
        existing = Tenant.objects.filter(slug="research").first()
        if existing is not None:
            return existing
        research = tenant_create(
            slug="research",
            display_name="Research (department)",
            cohort="demo",
            description="A department over team A and team B: a shared pool and a cap.",
            namespaces=[],  # its quota is a pool for its teams, not a place to run work
            actor=users["admin"],
        )
        membership_set(
            tenant=research, user=users["alice"], role=MembershipRole.LEAD, actor=users["admin"]
        )
        return research

    @staticmethod
    def _t4_labs(cluster: Cluster, t4: ResourceFlavor, users: dict[str, User]) -> None:
        """The seed's T4 split: three labs at the shared-GPU level, each set as a lead would
        (bob asks, an admin approves), then 30%, 30% and 40% of the T4's memory and compute
        granted by an admin as bob asks: 4.5, 4.5 and 6 GiB of its 15 GiB, 30%, 30% and
        40% of its compute, 3, 3 and 4 of its 10 vGPUs, with CPU and memory of the T4 node in
        proportion."""
        for slug, name, percent in T4_LABS:
            if Tenant.objects.filter(slug=slug).exists():
                continue
            lab = tenant_create(
                slug=slug,
                display_name=name,
                cohort="demo",
                description="Notebooks and small inference on a vGPU share of a T4 (HAMi).",
                actor=users["admin"],
            )
            membership_set(
                tenant=lab, user=users["bob"], role=MembershipRole.LEAD, actor=users["admin"]
            )
            level = quota_request_create(
                tenant=lab,
                cluster=cluster,
                requester=users["bob"],
                reason="Notebooks share a T4: a share of its memory and compute is enough",
                items=[],
                isolation_level=IsolationLevel.TIME_SLICED,
                submit=True,
            )
            quota_request_approve(request=level, approver=users["admin"], comment="Fine")
            lab.refresh_from_db()  # its level, as the approval set it
            vgpus = percent * T4_VGPUS_PER_GPU // 100
            memory = f"{percent * T4_MEMORY_MIB // 100}Mi"
            lines = {
                GPU_RESOURCE: str(vgpus),
                GPUMEM_RESOURCE: memory,
                GPUCORES_RESOURCE: f"{percent}%",
                CPU_RESOURCE: str(vgpus * 2),
                MEMORY_RESOURCE: f"{vgpus * 8}Gi",
            }
            if t4.time_slicing_replicas:  # a cluster without HAMi: shares of the T4's time
                lines = {
                    GPU_RESOURCE: f"{percent}%",
                    CPU_RESOURCE: str(vgpus * 2),
                    MEMORY_RESOURCE: f"{vgpus * 8}Gi",
                }
            # 30% of a flavor's capacity needs two approvals by the policy; the demo has one
            # admin, who grants what bob asks for (as requests are decided, audited, pushed).
            quota_request_grant(
                tenant=lab,
                cluster=cluster,
                actor=users["admin"],
                items=request_items_parse(
                    cluster=cluster,
                    raw_items=[
                        {"flavor": t4.name, "resource": r, "guaranteed": v, "limit": v}
                        for r, v in lines.items()
                    ],
                ),
                scheduling={},
                reason=f"The seed's T4 split 30/30/40: {percent}% of the T4's memory and compute",
            )

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        users = {}
        for username, email, is_admin in USERS:
            user, created = User.objects.get_or_create(
                username=username,
                defaults={
                    "email": email,
                    "is_platform_admin": is_admin,
                    "is_staff": is_admin,
                    "is_superuser": is_admin,
                },
            )
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            users[username] = user

        # Each demo cluster is a local API stand-in (devcluster/) when `make run` started them.
        kube_dir = os.environ.get("DEMO_KUBECONFIG_DIR", "")

        # 16 A100-80GB; the seed's own example gives team A a limit of 10 (62.5% of 16), so this
        # cluster's elastic cap is 0.625 instead of the default 0.5 (R19: a per-cluster policy).
        a100, _ = Cluster.objects.get_or_create(
            name="demo-a100",
            defaults={
                "display_name": "Demo A100 cluster (2 nodes x 8 A100-80GB)",
                "api_server": "http://127.0.0.1:8001",
                "elastic_cap_fraction": Decimal("0.625"),
                # Each tenant's namespaces hold shares of its limit (team-a: 70% training, 30%
                # inference); demo-h100 shows the other mode, Kueue manages everything.
                "enforcement": Enforcement.SPLIT,
            },
        )
        _connect(a100, kube_dir)
        a100_gpu = _flavor(
            a100,
            "a100-80gb",
            {
                GPU_RESOURCE: Decimal(16),
                CPU_RESOURCE: Decimal(256),
                MEMORY_RESOURCE: Decimal(2 * TI),
            },
            kind=FlavorKind.GPU,
            gpu_model="NVIDIA A100-SXM4-80GB",
            gpu_weight=Decimal("1"),
            node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        )
        _flavor(
            a100,
            "cpu-general",
            {CPU_RESOURCE: Decimal(128), MEMORY_RESOURCE: Decimal(512 * GI)},
            kind=FlavorKind.CPU,
            node_labels={"node-role.example.com/cpu": "true"},
        )
        # Two storage classes (R3, devcluster.demo.STORAGE_CLASSES): NVMe volumes provisioned
        # with IOPS and throughput, and the default class. Every team may use standard; only
        # team-b fast-nvme, so team-a's claim of fast-nvme is refused by its namespace quota.
        fast_nvme = _flavor(
            a100,
            "fast-nvme",
            {STORAGE_RESOURCE: Decimal(100 * TI)},
            kind=FlavorKind.STORAGE,
            storage_class="fast-nvme",
            storage_driver="ebs.csi.aws.com",
            storage_iops=16000,
            storage_throughput_mib=1000,
        )
        standard = _flavor(
            a100,
            "standard",
            {STORAGE_RESOURCE: Decimal(400 * TI)},
            kind=FlavorKind.STORAGE,
            storage_class="standard",
            storage_driver="ebs.csi.aws.com",
        )

        # 4 H100-80GB nodes: two with whole GPUs, two partitioned with MIG.
        h100, _ = Cluster.objects.get_or_create(
            name="demo-h100",
            defaults={
                "display_name": "Demo H100 cluster (MIG)",
                "api_server": "http://127.0.0.1:8001",
                "has_volcano": True,
                # Kueue there remembers recent use (devcluster.demo's configuration for it).
                "fair_sharing": FairSharing.USAGE,
            },
        )
        _connect(h100, kube_dir)
        h100_gpu = _flavor(
            h100,
            "h100-80gb",
            {
                GPU_RESOURCE: Decimal(16),
                CPU_RESOURCE: Decimal(384),
                MEMORY_RESOURCE: Decimal(3 * TI),
            },
            kind=FlavorKind.GPU,
            gpu_model="NVIDIA H100 80GB HBM3",
            gpu_weight=Decimal("2"),
            node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        )
        mig_flavors = {}
        seeded = seeded_mig_instances(h100.name)
        for profile, weight in H100_MIG:
            mig_flavors[profile] = _flavor(
                h100,
                f"h100-mig-{profile.replace('.', '-')}",
                # What the seeded layouts hold; the fleet's count replaces it once they report.
                {mig_resource(profile): Decimal(seeded[profile])},
                kind=FlavorKind.MIG,
                gpu_model="NVIDIA H100 80GB HBM3",
                mig_profile=profile,
                gpu_weight=weight * 2,  # a share of an H100, which weighs 2
                node_labels={
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/mig.config": "all-balanced",
                },
            )

        # One T4 shared through HAMi: 10 vGPUs, its 15 GiB of memory and 100% of its compute
        # counted as quotas; HAMi-core caps each container's memory and compute.
        if not h100.hami_version:
            h100.hami_version = DEMO_HAMI_VERSION
            h100.save(update_fields=["hami_version"])
        t4_vgpu = _flavor(
            h100,
            T4_FLAVOR,
            {
                GPU_RESOURCE: Decimal(T4_GPUS * T4_VGPUS_PER_GPU),
                GPUMEM_RESOURCE: Decimal(T4_GPUS * T4_MEMORY_MIB * MI),
                GPUCORES_RESOURCE: Decimal(T4_GPUS * 100),
                CPU_RESOURCE: Decimal(32),
                MEMORY_RESOURCE: Decimal(128 * GI),
            },
            kind=FlavorKind.VGPU,
            gpu_model="Tesla T4",
            gpu_weight=Decimal("0.025"),  # a vGPU: a tenth of a T4, which weighs a quarter
            gpu_memory_mib=T4_MEMORY_MIB,
            vgpu_split=T4_VGPUS_PER_GPU,
            node_labels={"nvidia.com/gpu.product": "Tesla-T4"},
        )

        tiers = {t.name: t for t in TierTemplate.objects.all()}
        research = self._department(users)
        onboarded: list[Tenant] = []
        for slug, name, guaranteed, limit, lead, tier in TEAMS:
            if Tenant.objects.filter(slug=slug).exists():
                continue
            tenant = tenant_onboard(
                slug=slug,
                display_name=name,
                tier=tiers[tier],
                cluster=h100,
                gpu_flavor=h100_gpu,
                cohort="demo",
                parent=research if slug in DEPARTMENT_TEAMS else None,
                actor=users["admin"],
                leads=[users[lead]] if lead else [],
            )
            tier_t = tiers[tier]
            quota_request_grant(
                tenant=tenant,
                cluster=a100,
                actor=users["admin"],
                items=[
                    QuotaItem(a100_gpu, GPU_RESOURCE, Decimal(guaranteed), Decimal(limit)),
                    QuotaItem(a100_gpu, CPU_RESOURCE, Decimal(guaranteed * 8), Decimal(limit * 8)),
                    QuotaItem(
                        a100_gpu,
                        MEMORY_RESOURCE,
                        Decimal(guaranteed * 64 * GI),
                        Decimal(limit * 64 * GI),
                    ),
                    QuotaItem(standard, STORAGE_RESOURCE, Decimal(512 * GI), Decimal(TI)),
                    *(
                        [
                            QuotaItem(
                                fast_nvme, STORAGE_RESOURCE, Decimal(256 * GI), Decimal(512 * GI)
                            )
                        ]
                        if slug == "team-b"
                        else []
                    ),
                ],
                scheduling={
                    "max_running_jobs": tier_t.max_running_jobs,
                    "max_queued_jobs": tier_t.max_queued_jobs,
                    "max_pods": tier_t.max_pods,
                    "storage_bytes": tier_t.storage_bytes,
                    "max_pvcs": tier_t.max_pvcs,
                },
                reason="The seed example: 16 A100s, team A 6/10, B 4/6, C 2/4",
            )
            onboarded.append(tenant)
        if not research.quota_sets.filter(cluster=h100).exists():
            # The department's pool and cap on demo-h100, once its teams are in (R14).
            quota_request_grant(
                tenant=research,
                cluster=h100,
                actor=users["admin"],
                items=[
                    QuotaItem(h100_gpu, GPU_RESOURCE, Decimal(2), Decimal(12)),
                    QuotaItem(h100_gpu, CPU_RESOURCE, Decimal(0), Decimal(96)),
                    QuotaItem(h100_gpu, MEMORY_RESOURCE, Decimal(0), Decimal(768 * GI)),
                ],
                scheduling={"fair_share_weight": 2},
                reason="Research caps team A and team B at 12 H100s together, with a pool of 2",
            )
        for tenant in onboarded:
            if tenant.slug == "team-a":
                namespace_shares_set(
                    tenant=tenant,
                    shares={"team-a-training": Decimal(70), "team-a-inference": Decimal(30)},
                    actor=users["admin"],
                )
        for tenant in onboarded:
            if tenant.slug == "team-a":
                _serving_by_request(tenant, a100, users["alice"], users["admin"])
        for tenant in onboarded:
            if tenant.slug == "team-b":
                _isolation_level_by_request(tenant, h100, users["bob"], users["admin"])
                _pod_bandwidth_by_request(tenant, h100, users["bob"], users["admin"])
            if tenant.slug == "team-a":
                _team_limits_by_request(tenant, a100, users["alice"], users["admin"])
                _grant_by_request(tenant, h100, users["alice"], users["admin"])
        if kube_dir:
            self.stdout.write(_standin_nodes(kube_dir))
        if agent_dir := os.environ.get("DEMO_AGENT_DIR", ""):
            made = _agent_join_tokens(Path(agent_dir), users["admin"])
            self.stdout.write(f"Simulated GPU nodes: {made} new join token(s) in {agent_dir}")
        said = _prometheus_source(
            os.environ.get("DEMO_PROMETHEUS_URL", ""),
            os.environ.get("DEMO_AGENT_DIR", ""),
            users["admin"],
        )
        if said:
            self.stdout.write(said)
        team_a = Tenant.objects.get(slug="team-a")
        membership_set(
            tenant=team_a, user=users["carol"], role=MembershipRole.MEMBER, actor=users["admin"]
        )
        # R14: alice caps carol at 2 H100s of team-a's quota on demo-h100 (her own Kueue queue;
        # `kubectl --as carol` asking for more is held there while alice's work runs).
        person_caps_set(
            tenant=team_a,
            subject=CapSubject.MEMBER,
            membership=Membership.objects.get(tenant=team_a, user=users["carol"]),
            caps=[
                {"cluster": "demo-h100", "flavor": "h100-80gb", "resource": GPU_RESOURCE,
                 "amount": "2"}
            ],
            actor=users["alice"],
        )  # fmt: skip
        # Identity-provider groups that make roles: with OIDC or LDAP configured, a user in
        # gpu-team-a-leads signs in as lead of team-a (and kubectl users in these groups get
        # the same access in team-a's namespaces).
        mappings: list[tuple[str, str, Tenant | None]] = [
            ("gpu-team-a-leads", GroupRole.LEAD, team_a),
            ("gpu-team-a", GroupRole.MEMBER, team_a),
            ("gpu-platform-admins", GroupRole.PLATFORM_ADMIN, None),
        ]
        for group, group_role, mapped_tenant in mappings:
            if not GroupMapping.objects.filter(group=group).exists():
                group_mapping_create(
                    group=group, role=group_role, tenant=mapped_tenant, actor=users["admin"]
                )
        # The labs of the shared T4 before the simulated month, which gives them a month of
        # GPU memory and compute use on their vGPU shares (after every other team's figures,
        # so those stay as they were): lab-nlp's memory nearly full at a third of its
        # compute, which bob finds as a memory-first suggestion.
        self._t4_labs(h100, t4_vgpu, users)
        # A simulated month of usage, once; its workloads admitted as the what-if replays them.
        if samples := demo_month_fill(admit=_admit):
            self.stdout.write(f"Usage: a simulated month, {samples} samples, rolled up")
            # alice finds a suggested change from it, whatever the day of the month.
            now = timezone.now()
            drafts = suggestions_compute(tenant=team_a, now=now, period=(now - DEMO_SPAN, now))
            self.stdout.write(f"Suggestions for team-a: {len(drafts)}")
            lab_nlp = Tenant.objects.get(slug="lab-nlp")
            suggestions_compute(tenant=lab_nlp, now=now, period=(now - DEMO_SPAN, now))
            # team-b's idle notebook (devcluster.kueue_sim) is suspended while you watch.
            AlertRule.objects.filter(kind=RuleKind.IDLE_WORKLOAD).update(grace=DEMO_IDLE_GRACE)
        if agent_dir := os.environ.get("DEMO_AGENT_DIR", ""):
            # The simulated GPUs carry the tenants' load as their usage history tells it.
            demo_load.write_load_plan(
                Path(agent_dir) / demo_load.DEMO_LOAD_PLAN_FILE, demo_load_plan()
            )

        self.stdout.write(
            self.style.SUCCESS("Demo ready. Log in at /login/ with any of these (password 'demo'):")
        )
        for username, _email, is_admin in USERS:
            role = (
                "platform admin"
                if is_admin
                else {
                    "alice": "lead of team-a and of the Research department",
                    "bob": "lead of team-b and of the three T4 labs (30/30/40 of a T4's memory and compute)",
                    "carol": "member of team-a",
                }[username]
            )
            self.stdout.write(f"  {username:<6} / {DEMO_PASSWORD}   {role}")
        self.stdout.write(
            "Group mappings (single sign-on / LDAP): gpu-team-a-leads -> lead of team-a, "
            "gpu-team-a -> member of team-a, gpu-platform-admins -> platform admin"
        )
