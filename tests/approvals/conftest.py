"""Fixtures and helpers for the change-request tests: a second platform admin (two-approver
policy), a request body, and a snapshot of every row a request may touch."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from approvals.models import ApprovalDecision, QuotaChangeItem, QuotaChangeRequest
from approvals.services import quota_request_create, request_items_parse
from quotas.choices import GPU_RESOURCE
from quotas.models import Quota, QuotaSet, SyncOutbox
from tenants.models import AuditEvent, Notification, User
from tests.factories import UserFactory

URL = "/api/v1/quota-requests/"


def body(**changes: Any) -> dict[str, Any]:
    """A valid request: team-a's A100 guarantee 6 -> 8 (limit stays 10; one approval)."""
    data: dict[str, Any] = {
        "tenant": "team-a",
        "cluster": "demo-a100",
        "reason": "bigger training runs",
        "items": [item()],
    }
    data.update(changes)
    return data


def item(**changes: Any) -> dict[str, Any]:
    return {
        "flavor": "a100-80gb",
        "resource": GPU_RESOURCE,
        "guaranteed": 8,
        "limit": 10,
        **changes,
    }


def file(
    world: Any,
    *,
    requester: User | None = None,
    tenant: Any = None,
    cluster: Any = None,
    items: list[dict[str, Any]] | None = None,
    submit: bool = True,
    reason: str = "bigger training runs",
) -> QuotaChangeRequest:
    """File a request through the service (the API tests file through the API)."""
    cluster = cluster or world.a100
    return quota_request_create(
        tenant=tenant or world.team_a,
        cluster=cluster,
        requester=requester or world.alice,
        reason=reason,
        items=request_items_parse(cluster=cluster, raw_items=items or [item()]),
        submit=submit,
    )


def database_state() -> dict[str, Any]:
    """Every row filing, deciding or applying a request writes."""
    return {
        "requests": list(
            QuotaChangeRequest.objects.order_by("pk").values_list(
                "pk", "status", "needs_revalidation", "required_approvals", "approved_generation"
            )
        ),
        "items": QuotaChangeItem.objects.count(),
        "decisions": ApprovalDecision.objects.count(),
        "quotas": sorted(
            Quota.objects.values_list(
                "quota_set_id", "flavor_id", "resource", "guaranteed", "limit"
            )
        ),
        "generations": sorted(QuotaSet.objects.values_list("pk", "generation")),
        "audit": AuditEvent.objects.count(),
        "outbox": SyncOutbox.objects.count(),
        "notifications": Notification.objects.count(),
    }


def gpu_quota(world: Any, tenant: Any, cluster: Any = None) -> tuple[Decimal, Decimal]:
    quota = Quota.objects.get(
        quota_set__tenant=tenant, quota_set__cluster=cluster or world.a100, resource=GPU_RESOURCE
    )
    return quota.guaranteed, quota.limit


def generation(tenant: Any, cluster: Any) -> int:
    return QuotaSet.objects.get(tenant=tenant, cluster=cluster).generation


@pytest.fixture
def admin2(world: Any) -> User:
    """A second platform admin: two-approver requests need two distinct approvers."""
    return UserFactory(username="admin2", is_platform_admin=True, is_staff=True, is_superuser=True)
