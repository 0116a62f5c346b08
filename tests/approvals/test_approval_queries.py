"""An approval over the API runs at most 20 SQL queries, however many lines the request has
(issue 36: approvals were the heaviest request, 57 queries each, the cluster's row locked for
all of them), and still writes everything it wrote before: the quota lines, the generation, the
lines' "before" values, the notice, the audit rows and the outbox row."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from approvals.services import approval_policy, quota_request_approve
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE
from quotas.models import FlavorResource, Quota, SyncOutbox
from tenants.models import AuditEvent, Notification
from tenants.services import api_token_create
from tests.approvals.conftest import URL, database_state, file, generation, item
from tests.approvals.test_concurrency import run_together
from tests.factories import gpu_flavor

MAX_QUERIES = 20
GI = 1024**3


def approve_counted(world, request: QuotaChangeRequest) -> int:  # type: ignore[no-untyped-def]
    """Approve ``request`` as the platform admin with an API token (as the benchmark does)
    and return the SQL queries it ran."""
    token = api_token_create(user=world.admin, name="approvals")[1]
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/me/").status_code == 200  # the token's first use, a write
    with CaptureQueriesContext(connection) as context:
        response = client.post(f"{URL}{request.pk}/approve/", {}, content_type="application/json")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == RequestStatus.APPROVED
    # Counted as the benchmark counts them: the service's transaction is a savepoint here
    # (the test's own is open), its BEGIN and COMMIT outside a test.
    return len(context.captured_queries)


def lines(world) -> dict[tuple[str, str], tuple[Decimal, Decimal]]:  # type: ignore[no-untyped-def]
    return {
        (q.flavor.name, q.resource): (q.guaranteed, q.limit)
        for q in Quota.objects.filter(
            quota_set__tenant=world.team_a, quota_set__cluster=world.a100
        ).select_related("flavor")
    }


def test_an_approval_runs_at_most_20_queries_whatever_its_lines(world):
    approval_policy()
    extra = gpu_flavor(world.a100, "a100-extra", gpus=16)
    one = file(world, items=[item(guaranteed=7, limit=10)])
    one_line = approve_counted(world, one)
    before = generation(world.team_a, world.a100)
    outbox = SyncOutbox.objects.count()
    notices = Notification.objects.filter(user=world.alice).count()
    four = file(
        world,
        items=[
            item(guaranteed=8, limit=10),
            item(resource=CPU_RESOURCE, guaranteed=56, limit=80),
            item(resource=MEMORY_RESOURCE, guaranteed="448Gi", limit="640Gi"),
            item(flavor="a100-extra", guaranteed=1, limit=2),
        ],
    )
    audit = AuditEvent.objects.count()
    four_lines = approve_counted(world, four)

    assert one_line <= MAX_QUERIES
    assert four_lines == one_line
    # Everything an approval writes is still written.
    assert lines(world) == {
        ("a100-80gb", GPU_RESOURCE): (Decimal(8), Decimal(10)),
        ("a100-80gb", CPU_RESOURCE): (Decimal(56), Decimal(80)),
        ("a100-80gb", MEMORY_RESOURCE): (Decimal(448 * GI), Decimal(640 * GI)),
        (extra.name, GPU_RESOURCE): (Decimal(1), Decimal(2)),
    }
    four.refresh_from_db()
    assert (four.status, four.approved_generation) == (RequestStatus.APPROVED, before + 1)
    assert generation(world.team_a, world.a100) == before + 1
    assert sorted(
        (i.flavor.name, i.resource, i.guaranteed_before, i.limit_before) for i in four.items.all()
    ) == [
        ("a100-80gb", CPU_RESOURCE, Decimal(48), Decimal(80)),
        ("a100-80gb", MEMORY_RESOURCE, Decimal(384 * GI), Decimal(640 * GI)),
        ("a100-80gb", GPU_RESOURCE, Decimal(7), Decimal(10)),
        ("a100-extra", GPU_RESOURCE, Decimal(0), Decimal(0)),
    ]
    assert SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.a100, generation=before + 1
    ).exists()
    assert SyncOutbox.objects.count() == outbox + 1
    actions = [
        action
        for action in AuditEvent.objects.order_by("pk").values_list("action", flat=True)[audit:]
        if action != "api_token.created"
    ]  # the quota set's row first, then the request's, as before
    assert actions == ["quota_set.written", "quota_request.approved"]
    assert Notification.objects.filter(user=world.alice).count() == notices + 1


@pytest.mark.django_db(transaction=True)
def test_two_approvals_for_one_tenant_at_once_both_keep_their_lines(on_postgres, world, admin2):
    # Two requests of team-a on demo-a100, on different lines, approved at the same moment:
    # the second waits for the first's quota set lock and reads its lines after it, so the
    # quota set keeps both changes (no lost update) at two generations.
    approval_policy()
    gpus = file(world, items=[item(guaranteed=7, limit=10)])
    cpus = file(world, items=[item(resource=CPU_RESOURCE, guaranteed=56, limit=80)])
    before = generation(world.team_a, world.a100)

    def approve(request: QuotaChangeRequest, approver):  # type: ignore[no-untyped-def]
        return lambda: quota_request_approve(
            request=QuotaChangeRequest.objects.get(pk=request.pk), approver=approver
        )

    results = run_together(approve(gpus, world.admin), approve(cpus, admin2))

    assert [kind for kind, _ in results] == ["ok", "ok"], results
    assert generation(world.team_a, world.a100) == before + 2
    found = lines(world)
    assert found[("a100-80gb", GPU_RESOURCE)] == (Decimal(7), Decimal(10))
    assert found[("a100-80gb", CPU_RESOURCE)] == (Decimal(56), Decimal(80))
    assert sorted(
        QuotaChangeRequest.objects.filter(pk__in=[gpus.pk, cpus.pk]).values_list(
            "approved_generation", flat=True
        )
    ) == [before + 1, before + 2]


def test_a_line_in_force_on_a_resource_the_cluster_dropped_is_named_at_approval(world, api_as):
    # team-a holds CPUs on a100-80gb; the flavor no longer lists CPUs. The lines are then not
    # all found beside the capacities: read on their own, and the check names that line.
    approval_policy()
    request = file(world, items=[item(guaranteed=7, limit=10)])
    FlavorResource.objects.filter(flavor=world.a100_gpu, resource=CPU_RESOURCE).delete()
    before = database_state()

    refused = api_as(world.admin).post(f"{URL}{request.pk}/approve/", {}, format="json")

    assert refused.status_code == 409, refused.content
    assert refused.json()["fields"] == {"quota_set": ["flavor 'a100-80gb' does not cover 'cpu'"]}
    assert database_state() == before
