"""The isolation sweep's world: team-a (alice leads it) and team-b (bob leads it), each with
one of every kind of thing a tenant owns. Team-b's things carry distinctive strings, so that
"nothing of team-b appears in any body" can be checked by looking for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from advice.models import Suggestion
from alerts.choices import ActionState, RuleKind, Severity
from alerts.models import Alert, AlertRule
from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_create, tenant_onboard
from gpu_agent.models import Gpu, IsolationProbe, MigInstance, MigLayout, Node, PlanProposal
from identity.models import GroupMapping
from quotas.choices import GPU_RESOURCE
from quotas.models import Cluster, Grant, GrantLine, ResourceFlavor, TierTemplate
from quotas.services import QuotaItem
from tenants.choices import MembershipRole
from tenants.models import ApiToken, JoinRequest, Namespace, Notification, Tenant, User
from tenants.services import api_token_create, join_request_create, membership_set, notify
from tests.conftest import ensure_tier_templates, seed_quota
from tests.factories import ClusterFactory, UserFactory, gpu_flavor, mig_flavor
from usage.choices import WorkloadState
from usage.models import PrometheusSource, Workload

# What must never reach alice: team-b's slug, display name, description, namespace, the
# reasons of its requests, its lead's notifications, token and username, its workloads and
# alerts.
THEIR_SECRETS = (
    "team-b",
    "Zephyr Secret Lab",
    "zephyr-charter",
    "zephyr-vault",
    "Zephyr reason",
    "Zephyr notice",
    "zephyr-token",
    "zephyr-job",
    "Zephyr alert",
    "bob",
)
MISSING_PK = "987654321"
MISSING_SLUG = "no-such-team"


@dataclass
class Side:
    """One tenant's things: the ids and names the sweep puts in URLs and bodies."""

    tenant: Tenant
    lead: User
    requests: dict[str, QuotaChangeRequest] = field(default_factory=dict)  # by status
    notification: Notification | None = None
    token: ApiToken | None = None
    alert: Alert | None = None
    join_request: JoinRequest | None = None  # someone outside asking to join
    workload: Workload | None = None
    grant: Grant | None = None  # a grant for a time


@dataclass
class IsoWorld:
    admin: User
    alice: User
    carol: User
    bob: User
    a100: Cluster
    h100: Cluster
    a100_gpu: ResourceFlavor
    ours: Side
    theirs: Side
    node: Node
    gpu: Gpu
    probe: IsolationProbe
    proposal: PlanProposal
    group_mapping: GroupMapping


def _requests(side: Side, cluster: Cluster, flavor: ResourceFlavor, reason: str) -> None:
    items = [QuotaItem(flavor, GPU_RESOURCE, Decimal(3), Decimal(5))]
    for status in (RequestStatus.DRAFT, RequestStatus.PENDING, RequestStatus.FAILED):
        change = quota_request_create(
            tenant=side.tenant,
            cluster=cluster,
            requester=side.lead,
            reason=f"{reason} ({status})",
            items=items,
            submit=status != RequestStatus.DRAFT,
        )
        if status == RequestStatus.FAILED:  # what a refused push leaves (an admin retries it)
            QuotaChangeRequest.objects.filter(pk=change.pk).update(status=status)
            change.refresh_from_db()
        side.requests[status] = change


def build() -> IsoWorld:
    ensure_tier_templates()
    admin = UserFactory(username="admin", is_platform_admin=True, is_staff=True, is_superuser=True)
    alice, carol, bob = (UserFactory(username=n) for n in ("alice", "carol", "bob"))
    a100 = ClusterFactory(name="demo-a100", elastic_cap_fraction=Decimal("0.625"))
    h100 = ClusterFactory(name="demo-h100")
    a100_gpu = gpu_flavor(a100, "a100-80gb", gpus=16)
    h100_gpu = gpu_flavor(h100, "h100-80gb", gpus=16, weight="2", gpu_model="NVIDIA H100 80GB HBM3")
    mig_flavor(h100, "1g.10gb", count=14, weight="0.286")
    small = TierTemplate.objects.get(name="small")
    team_a = tenant_onboard(
        slug="team-a", display_name="Team A", tier=small, cluster=h100, gpu_flavor=h100_gpu,
        actor=admin, leads=[alice],
    )  # fmt: skip
    team_b = tenant_onboard(
        slug="team-b", display_name="Zephyr Secret Lab", description="zephyr-charter",
        tier=small, cluster=h100, gpu_flavor=h100_gpu, actor=admin, leads=[bob],
    )  # fmt: skip
    Namespace.objects.create(tenant=team_b, name="zephyr-vault")
    membership_set(tenant=team_a, user=carol, role=MembershipRole.MEMBER, actor=admin)
    seed_quota(team_a, a100, a100_gpu, 6, 10, actor=admin)
    seed_quota(team_b, a100, a100_gpu, 4, 6, actor=admin)
    ours, theirs = Side(team_a, alice), Side(team_b, bob)
    _requests(ours, a100, a100_gpu, "Alpha reason")
    _requests(theirs, a100, a100_gpu, "Zephyr reason")
    for side, word in ((ours, "Alpha"), (theirs, "Zephyr")):
        (side.notification,) = notify(users=[side.lead], subject=f"{word} notice", body=word)
        side.token, _ = api_token_create(user=side.lead, name=f"{word.lower()}-token")
    for side, asker in ((ours, "olga"), (theirs, "dana")):
        side.join_request = join_request_create(
            tenant=side.tenant, user=UserFactory(username=asker), message=f"{asker} asks"
        )
    now = timezone.now()
    for side, word in ((ours, "Alpha"), (theirs, "Zephyr")):
        side.grant = Grant.objects.create(
            tenant=side.tenant, cluster=a100, reason=f"{word} grant", starts_at=now + timedelta(days=1),
            ends_at=now + timedelta(days=8), request_number=side.requests[RequestStatus.PENDING].pk,
        )  # fmt: skip
        GrantLine.objects.create(
            grant=side.grant, flavor=a100_gpu, resource=GPU_RESOURCE, guaranteed=1, limit=1
        )
    rule = AlertRule.objects.create(
        name="idle-3-days", kind=RuleKind.IDLE_WORKLOAD, severity=Severity.WARNING,
        duration=timedelta(days=3),
    )  # fmt: skip
    for side, word in ((ours, "alpha"), (theirs, "zephyr")):
        Suggestion.objects.create(
            tenant=side.tenant, cluster=a100, period_start=now - timedelta(days=30),
            period_end=now, note=f"{word} suggestion", created_by=admin,
        )  # fmt: skip
        side.workload = Workload.objects.create(
            cluster=a100, tenant=side.tenant, namespace=f"{word}-vault", name=f"{word}-job",
            uid=f"uid-{word}", queue_name="default", cluster_queue=side.tenant.slug, gpus=2,
            flavors=["a100-80gb"], state=WorkloadState.FINISHED,
            created_at=now - timedelta(hours=5), admitted_at=now - timedelta(hours=4),
            finished_at=now - timedelta(hours=1), queue_wait_s=3600, updated_at=now,
        )  # fmt: skip
        # Suspended for idling: a lead acknowledges it, or undoes the suspension.
        side.alert = Alert.objects.create(
            rule=rule, subject=f"workload:demo-a100:uid-{word}", severity=Severity.WARNING,
            cluster=a100, tenant=side.tenant, workload_namespace=f"{word}-vault",
            workload_name=f"{word}-job", message=f"{word.title()} alert: idle for 3 days",
            fired_at=now - timedelta(hours=2), last_seen_at=now,
            action_state=ActionState.SUSPENDED,
        )  # fmt: skip
    # A GPU whose MIG instance runs team-b's pod: the fleet shows it to platform admins only.
    node = Node.objects.create(name="gpu-node-1", cluster=h100, last_report_at=now)
    gpu = Gpu.objects.create(
        node=node, uuid="GPU-11111111-2222-3333-4444-555555555555", index=0,
        name="NVIDIA H100 80GB HBM3", memory_total_mib=81559, mig_mode_current=True,
        last_seen_at=now,
    )  # fmt: skip
    MigInstance.objects.create(
        gpu=gpu, gi_id=1, profile="1g.10gb", start=0, size=1, busy=True, tenant=team_b,
        processes=[{"pid": 7, "used_memory_mib": 900, "pod_uid": "uid-zephyr"}], observed_at=now,
    )  # fmt: skip
    MigLayout.objects.create(
        gpu=gpu, generation=1, instances=[{"profile": "1g.10gb", "start": 0}], requested_by=admin
    )
    probe = IsolationProbe.objects.create(gpu=gpu, mig=True, target_gi_id=1, requested_by=admin)
    # The usage source of a cluster (platform admins only).
    PrometheusSource.objects.create(cluster=a100, url="http://prometheus.monitoring:9090")
    proposal = PlanProposal.objects.create(
        cluster=h100, checked_at=now, digest="d" * 64, state_digest="s" * 64,
        demand=[{"profile": "1g.10gb", "count": 1, "tenant": "team-b", "model": "H100"}],
    )  # fmt: skip
    group_mapping = GroupMapping.objects.create(
        group="team-b-leads", role="lead", tenant=theirs.tenant, tenant_slug=theirs.tenant.slug
    )
    return IsoWorld(
        admin, alice, carol, bob, a100, h100, a100_gpu, ours, theirs, node, gpu, probe, proposal,
        group_mapping,
    )  # fmt: skip
