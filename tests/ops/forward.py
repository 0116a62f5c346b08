"""Upgrade a database that holds a previous release's data, then use it with today's code.

Run by ``tests/ops/test_upgrade.py`` in a child process against a database of its own
(``DATABASE_URL``): migrate an empty database to the release's schema, fill it through that
schema's historical models, migrate forward to today's, and print what today's models and
services see as JSON. Usable by hand too::

    DATABASE_URL=postgres://postgres@127.0.0.1/upgrade_check python -m tests.ops.forward
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from datetime import timedelta
from decimal import Decimal
from typing import Any

import django

# Apps whose schema existed at every release (Django's own); project apps come from RELEASES.
BUILTIN_APPS = ("contenttypes", "auth", "admin", "sessions")


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def fill_2026_12_03(apps: Any) -> None:
    """What a running portal of that release held: users and memberships, a tenant with a
    namespace and quotas on a cluster, an applied, a pending and a rejected request, audit
    and inbox rows, an API token, a GPU node with a MIG layout and a node token."""
    from django.contrib.auth.hashers import make_password
    from django.utils import timezone

    now = timezone.now()
    User = apps.get_model("tenants", "User")
    Tenant = apps.get_model("tenants", "Tenant")
    Namespace = apps.get_model("tenants", "Namespace")
    Membership = apps.get_model("tenants", "Membership")
    ApiToken = apps.get_model("tenants", "ApiToken")
    AuditEvent = apps.get_model("tenants", "AuditEvent")
    Notification = apps.get_model("tenants", "Notification")
    Cluster = apps.get_model("quotas", "Cluster")
    ResourceFlavor = apps.get_model("quotas", "ResourceFlavor")
    FlavorResource = apps.get_model("quotas", "FlavorResource")
    QuotaSet = apps.get_model("quotas", "QuotaSet")
    Quota = apps.get_model("quotas", "Quota")
    TierTemplate = apps.get_model("quotas", "TierTemplate")
    SyncOutbox = apps.get_model("quotas", "SyncOutbox")
    Request = apps.get_model("approvals", "QuotaChangeRequest")
    Item = apps.get_model("approvals", "QuotaChangeItem")
    Decision = apps.get_model("approvals", "ApprovalDecision")
    Node = apps.get_model("gpu_agent", "Node")
    Gpu = apps.get_model("gpu_agent", "Gpu")
    MigInstance = apps.get_model("gpu_agent", "MigInstance")
    MigLayout = apps.get_model("gpu_agent", "MigLayout")
    NodeToken = apps.get_model("gpu_agent", "NodeToken")

    password = make_password("upgrade")
    admin = User.objects.create(
        username="admin", email="admin@example.com", password=password, is_staff=True, is_platform_admin=True,
        is_superuser=True,
    )  # fmt: skip
    alice = User.objects.create(username="alice", email="alice@example.com", password=password)
    bob = User.objects.create(username="bob", email="bob@example.com", password=password)
    team_a = Tenant.objects.create(slug="team-a", display_name="Team A")
    team_b = Tenant.objects.create(slug="team-b", display_name="Team B")
    Namespace.objects.create(tenant=team_a, name="team-a", purpose="default")
    Namespace.objects.create(tenant=team_b, name="team-b", purpose="default")
    Membership.objects.create(user=alice, tenant=team_a, role="lead")
    Membership.objects.create(user=bob, tenant=team_b, role="lead")
    ApiToken.objects.create(
        user=alice, name="ci", prefix="gq_upgr", digest=_digest("gq_upgrade-secret"),
        expires_at=now + timedelta(days=30),
    )  # fmt: skip

    cluster = Cluster.objects.create(
        name="prod-a100",
        display_name="Prod A100",
        backend="none",
        elastic_cap_fraction=Decimal("0.625"),
    )
    a100 = ResourceFlavor.objects.create(
        cluster=cluster, name="a100-80gb", kind="gpu", gpu_model="NVIDIA A100-SXM4-80GB",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, gpu_weight=Decimal(1),
    )  # fmt: skip
    cpu = ResourceFlavor.objects.create(cluster=cluster, name="cpu", kind="cpu")
    FlavorResource.objects.create(flavor=a100, resource="nvidia.com/gpu", capacity=16)
    FlavorResource.objects.create(flavor=cpu, resource="cpu", capacity=512)
    FlavorResource.objects.create(flavor=cpu, resource="memory", capacity=2 * 1024**4)

    small = TierTemplate.objects.get(name="small")  # seeded by a data migration
    for tenant, guaranteed, limit in ((team_a, 6, 10), (team_b, 4, 6)):
        quota_set = QuotaSet.objects.create(
            tenant=tenant, cluster=cluster, generation=2, tier=small, max_running_jobs=20,
            max_queued_jobs=100, max_pods=200, storage_bytes=10 * 1024**4, max_pvcs=20,
        )  # fmt: skip
        Quota.objects.create(
            quota_set=quota_set, flavor=a100, resource="nvidia.com/gpu",
            guaranteed=guaranteed, limit=limit,
        )  # fmt: skip
        Quota.objects.create(
            quota_set=quota_set, flavor=cpu, resource="cpu", guaranteed=32, limit=64
        )
        SyncOutbox.objects.create(
            tenant=tenant, cluster=cluster, generation=2, dispatched_at=now, completed_at=now,
            attempts=1,
        )  # fmt: skip

    applied = Request.objects.create(
        tenant=team_a, cluster=cluster, requester=alice, reason="paper deadline",
        status="applied", source="portal", base_generation=1, required_approvals=1,
        applied_generation=2, submitted_at=now, decided_at=now,
    )  # fmt: skip
    Item.objects.create(
        request=applied, flavor=a100, resource="nvidia.com/gpu", guaranteed=6, limit=10
    )
    Decision.objects.create(request=applied, approver=admin, decision="approve", comment="ok")
    pending = Request.objects.create(
        tenant=team_a, cluster=cluster, requester=alice, reason="new model family",
        status="pending", source="api", base_generation=2, required_approvals=1,
        submitted_at=now,
    )  # fmt: skip
    Item.objects.create(
        request=pending, flavor=a100, resource="nvidia.com/gpu", guaranteed=7, limit=10
    )
    rejected = Request.objects.create(
        tenant=team_b, cluster=cluster, requester=bob, reason="more", status="rejected",
        source="portal", base_generation=2, required_approvals=1, submitted_at=now,
        decided_at=now,
    )  # fmt: skip
    Item.objects.create(
        request=rejected, flavor=a100, resource="nvidia.com/gpu", guaranteed=12, limit=16
    )
    Decision.objects.create(request=rejected, approver=admin, decision="reject", comment="no")
    AuditEvent.objects.create(
        actor=admin, action="quota_request.approved", object_type="QuotaChangeRequest",
        object_id=f"#{applied.pk}", tenant=team_a, source="portal",
        before={}, after={"status": "approved"},
    )  # fmt: skip
    Notification.objects.create(user=alice, subject=f"Request #{applied.pk} approved")

    node = Node.objects.create(name="gpu-node-1", cluster=cluster, last_report_at=now)
    gpu = Gpu.objects.create(
        node=node, uuid="GPU-00000000-0000-0000-0000-000000000001", index=0,
        name="NVIDIA A100-SXM4-80GB", memory_total_mib=81920, mig_mode_current=True,
        mig_mode_pending=True, applied_generation=1, last_seen_at=now,
    )  # fmt: skip
    MigInstance.objects.create(
        gpu=gpu, gi_id=1, profile="3g.40gb", start=0, size=4, ci_ids=[0], observed_at=now
    )
    MigLayout.objects.create(
        gpu=gpu, generation=1, instances=[{"profile": "3g.40gb", "start": 0}], state="success",
        requested_by=admin, applied_at=now,
    )  # fmt: skip
    NodeToken.objects.create(node=node, prefix="gn_upgr", digest=_digest("gn_upgrade-secret"))


FILLERS = {"2026.12.03": fill_2026_12_03}


def upgrade(release: str) -> dict[str, Any]:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    from tests.ops.releases import RELEASES

    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    targets = [(app, name) for app, name in RELEASES[release].items()]
    targets += [node for node in graph.leaf_nodes() if node[0] in BUILTIN_APPS]
    executor.migrate(targets)
    executor.loader.build_graph()
    FILLERS[release](executor.loader.project_state(targets).apps)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    return inspect()


def inspect() -> dict[str, Any]:
    """What today's code makes of the upgraded data: reads through selectors and a write
    through the approval service, as a user of the portal would."""
    from approvals.models import QuotaChangeRequest
    from approvals.services import quota_request_approve
    from gpu_agent.models import MigLayout
    from gpu_agent.services.nodes import node_token_authenticate
    from quotas.models import Quota, QuotaSet
    from quotas.selectors import guarantees_by_flavor
    from tenants.models import User
    from tenants.services import api_token_authenticate

    admin = User.objects.get(username="admin")
    pending = QuotaChangeRequest.objects.get(status="pending")
    approved = quota_request_approve(request=pending, approver=admin, comment="after upgrade")
    team_a = QuotaSet.objects.get(tenant__slug="team-a")
    token = api_token_authenticate(secret="gq_upgrade-secret")
    node_token = node_token_authenticate(secret="gn_upgrade-secret")
    return {
        "users": sorted(User.objects.values_list("username", flat=True)),
        "requests": dict(
            sorted(QuotaChangeRequest.objects.values_list("reason", "status"))  # type: ignore[arg-type]
        ),
        "approved_status": approved.status,
        "team_a_generation": team_a.generation,
        "team_a_gpus": [
            f"{q.guaranteed:f}/{q.limit:f}"
            for q in Quota.objects.filter(quota_set=team_a, resource="nvidia.com/gpu")
        ],
        "api_token_user": token.user.username if token else None,
        "node_token_node": node_token.node.name if node_token else None,
        "layouts": list(MigLayout.objects.values_list("generation", "state")),
        # The running totals the upgrade filled from the rows, and kept through the approval.
        "guarantees": sorted(
            f"{resource} {total:f}"
            for (_flavor, resource), total in guarantees_by_flavor(cluster=team_a.cluster).items()
        ),
    }


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.demo")
    django.setup()
    from tests.ops.releases import PREVIOUS

    release = sys.argv[1] if len(sys.argv) > 1 else PREVIOUS
    print(json.dumps(upgrade(release), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
