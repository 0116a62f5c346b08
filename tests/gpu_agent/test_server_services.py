"""The portal side of the GPU fleet, through its services: node registration and tokens,
agents' reports (bulk, bounded queries), desired MIG layouts, results and the periodic tasks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.errors import ApplicationError, Conflict, PermissionDenied, ValidationFailed
from gpu_agent import selectors, tasks
from gpu_agent.models import Gpu, LayoutState, MigInstance, MigLayout, Node, NodeJoinToken
from gpu_agent.services import layouts, nodes, plans, reports
from tenants.models import AuditEvent, User
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

A100 = "NVIDIA A100-SXM4-80GB"


def process(pid: int) -> dict[str, Any]:
    return {"pid": pid, "used_memory_mib": 500, "pod_uid": f"pod-{pid}"}


def instance(gi_id: int, profile: str, start: int, size: int, *pids: int) -> dict[str, Any]:
    return {
        "gi_id": gi_id,
        "profile": profile,
        "start": start,
        "size": size,
        "ci_ids": [0],
        "memory_used_mib": 512 if pids else 0,
        "utilization_pct": None,
        "processes": [process(pid) for pid in pids],
    }


def seven_small(busy_pid_base: int = 0) -> list[dict[str, Any]]:
    """Seven 1g.10gb instances (the most a GPU has), each with a process when asked."""
    return [
        instance(7 + s, "1g.10gb", s, 1, *((busy_pid_base + s,) if busy_pid_base else ()))
        for s in range(7)
    ]


def gpu(
    node: str,
    index: int,
    *,
    mig: bool = True,
    instances: list[dict[str, Any]] | None = None,
    processes: list[dict[str, Any]] | None = None,
    applied_generation: int = 0,
) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index:04d}",
        "index": index,
        "name": A100,
        "memory_total_mib": 81920,
        "memory_used_mib": 1024,
        "utilization_pct": None if mig else 37,
        "mig_mode_current": mig,
        "mig_mode_pending": mig,
        "applied_generation": applied_generation,
        "instances": instances or [],
        "processes": processes or [],
    }


def report(node: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node": node,
        "sent_at": datetime(2026, 12, 3, 8, tzinfo=UTC).isoformat(),
        "agent_version": "1.0",
        "driver_version": "580.65.06",
        "gpus": gpus,
    }


@pytest.fixture
def admin() -> User:
    return UserFactory(username="fleet-admin", is_platform_admin=True)


def register(admin: User, name: str = "gpu-node-1") -> tuple[Node, str]:
    _, join = nodes.join_token_create(node_name=name, actor=admin)
    return nodes.agent_register(join_secret=join, hostname=f"{name}.lab", agent_version="1.0")


@pytest.fixture
def node(admin: User) -> Node:
    return register(admin)[0]


# --- registration and tokens -----------------------------------------------------------------


def test_a_join_token_registers_a_node_once(admin):
    token, secret = nodes.join_token_create(node_name="gpu-node-1", actor=admin)
    assert token.digest != secret and secret.startswith(token.prefix)
    assert not NodeJoinToken.objects.filter(digest=secret).exists()  # only the digest is stored
    node, node_secret = nodes.agent_register(
        join_secret=secret, hostname="gpu-node-1.lab", agent_version="1.0"
    )
    assert node.name == "gpu-node-1" and node.hostname == "gpu-node-1.lab"
    assert nodes.node_token_authenticate(secret=node_secret).node == node
    token.refresh_from_db()
    assert token.used_at is not None and token.node == node
    with pytest.raises(nodes.AuthenticationFailed) as used:
        nodes.agent_register(join_secret=secret, hostname="x", agent_version="1.0")
    assert used.value.status_code == 401
    assert Node.objects.count() == 1
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"node_join_token.created", "node.registered"} <= actions


def test_an_expired_or_unknown_join_token_is_refused(admin):
    token, secret = nodes.join_token_create(node_name="gpu-node-1", actor=admin)
    NodeJoinToken.objects.filter(pk=token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    with pytest.raises(nodes.AuthenticationFailed, match="expired"):
        nodes.agent_register(join_secret=secret, hostname="x", agent_version="1.0")
    with pytest.raises(nodes.AuthenticationFailed, match="Unknown"):
        nodes.agent_register(join_secret="not-a-token", hostname="x", agent_version="1.0")
    assert not Node.objects.exists()


def test_join_tokens_need_a_dns_name_and_a_sane_ttl(admin):
    with pytest.raises(ValidationFailed) as bad:
        nodes.join_token_create(node_name="GPU_Node", actor=admin)
    assert "node" in bad.value.fields
    with pytest.raises(ValidationFailed) as ttl:
        nodes.join_token_create(node_name="n1", actor=admin, ttl=timedelta(days=30))
    assert "ttl_s" in ttl.value.fields


def test_registering_again_revokes_the_earlier_token(admin):
    node, first = register(admin)
    again, second = register(admin)
    assert again == node
    assert nodes.node_token_authenticate(secret=first) is None
    assert nodes.node_token_authenticate(secret=second).node == node


AGENT_KEY = "k" * 43  # what AgentState.agent_key() makes: 32 random bytes, URL-safe


def test_the_same_agent_repeating_its_registration_gets_the_same_node(admin):
    """The portal used the token but the agent never got the answer (a client timeout): the
    same request again, with the agent's key, answers the same node with a new token."""
    token, join = nodes.join_token_create(node_name="gpu-node-1", actor=admin)
    body = {"join_secret": join, "hostname": "gpu-node-1.lab", "agent_version": "1.0"}
    node, lost = nodes.agent_register(**body, agent_key=AGENT_KEY)
    again, secret = nodes.agent_register(**body, agent_key=AGENT_KEY)
    assert again == node and secret != lost
    assert Node.objects.count() == 1
    assert nodes.node_token_authenticate(secret=lost) is None  # the answer nobody received
    assert nodes.node_token_authenticate(secret=secret).node == node
    event = AuditEvent.objects.get(action="node.registration_repeated")
    assert event.after["join_token"] == token.prefix
    # Another agent with the used token is refused, with or without a key of its own.
    with pytest.raises(nodes.AuthenticationFailed, match="already used"):
        nodes.agent_register(**body, agent_key="x" * 43)
    with pytest.raises(nodes.AuthenticationFailed, match="already used"):
        nodes.agent_register(**body)
    assert nodes.node_token_authenticate(secret=secret).node == node  # untouched by those


def test_a_repeated_registration_is_refused_after_the_window(admin, settings):
    settings.AGENT_REGISTER_RETRY_S = 60
    token, join = nodes.join_token_create(node_name="gpu-node-1", actor=admin)
    body = {"join_secret": join, "hostname": "gpu-node-1.lab", "agent_version": "1.0"}
    _, secret = nodes.agent_register(**body, agent_key=AGENT_KEY)
    NodeJoinToken.objects.filter(pk=token.pk).update(used_at=timezone.now() - timedelta(seconds=61))
    with pytest.raises(nodes.AuthenticationFailed, match="already used"):
        nodes.agent_register(**body, agent_key=AGENT_KEY)
    assert nodes.node_token_authenticate(secret=secret) is not None


def test_a_token_used_without_a_key_stays_one_time(admin):
    _, join = nodes.join_token_create(node_name="gpu-node-1", actor=admin)
    body = {"join_secret": join, "hostname": "gpu-node-1.lab", "agent_version": "1.0"}
    nodes.agent_register(**body)  # an agent that predates the key
    with pytest.raises(nodes.AuthenticationFailed, match="already used"):
        nodes.agent_register(**body, agent_key=AGENT_KEY)


def test_an_agent_key_too_short_to_be_a_secret_is_refused(admin):
    _, join = nodes.join_token_create(node_name="gpu-node-1", actor=admin)
    with pytest.raises(ValidationFailed) as short:
        nodes.agent_register(join_secret=join, hostname="h", agent_version="1.0", agent_key="abc")
    assert "at least 16" in short.value.fields["agent_key"][0]
    assert not Node.objects.exists()
    assert NodeJoinToken.objects.get().used_at is None  # the token still works


def test_revoking_a_nodes_tokens(admin, node):
    _, secret = register(admin)
    assert nodes.node_token_revoke(node=node, actor=admin) == 1
    assert nodes.node_token_authenticate(secret=secret) is None
    assert nodes.node_token_revoke(node=node, actor=admin) == 0  # idempotent
    assert AuditEvent.objects.filter(action="node_token.revoked").count() == 1


# --- reports ---------------------------------------------------------------------------------


def test_a_report_upserts_gpus_and_replaces_instances(node):
    big = [instance(1, "3g.40gb", 0, 4, 4242), instance(2, "1g.10gb", 4, 1)]
    generation = reports.agent_report_ingest(
        node=node, report=report(node.name, [gpu(node.name, 0, instances=big), gpu(node.name, 1)])
    )
    assert generation == 0
    assert Gpu.objects.filter(node=node).count() == 2
    busy = MigInstance.objects.get(gi_id=1)
    assert busy.busy and busy.processes == [process(4242)] and busy.tenant is None
    assert not MigInstance.objects.get(gi_id=2).busy
    node.refresh_from_db()
    assert node.last_report_at is not None and node.driver_version == "580.65.06"

    # The next report replaces what was observed: instance 2 is gone, the GPU's numbers change.
    second = gpu(node.name, 0, instances=[instance(1, "3g.40gb", 0, 4)])
    second["memory_used_mib"] = 2048
    reports.agent_report_ingest(node=node, report=report(node.name, [second]))
    assert list(MigInstance.objects.values_list("gi_id", "busy")) == [(1, False)]
    assert Gpu.objects.get(uuid=second["uuid"]).memory_used_mib == 2048
    assert Gpu.objects.count() == 2  # a GPU missing from a report is kept (last_seen_at says when)


def _ingest_queries(node: Node, gpus: list[dict[str, Any]]) -> int:
    with CaptureQueriesContext(connection) as captured:
        reports.agent_report_ingest(node=node, report=report(node.name, gpus))
    return len(captured.captured_queries)


def test_a_report_takes_the_same_few_queries_whatever_its_size(admin):
    small_node, _ = register(admin, "small-node")
    big_node, _ = register(admin, "big-node")
    one = [gpu("small-node", 0, instances=seven_small(1000))]
    eight = [gpu("big-node", i, instances=seven_small(1000 + 10 * i)) for i in range(8)]
    first_small = _ingest_queries(small_node, one)
    first_big = _ingest_queries(big_node, eight)
    assert first_small == first_big
    assert MigInstance.objects.filter(gpu__node=big_node).count() == 56
    # Again (every GPU exists now: the upsert path), still the same number.
    assert _ingest_queries(small_node, one) == _ingest_queries(big_node, eight) == first_big
    # PostgreSQL: 5 statements (node, GPU upsert, instances deleted and inserted, open layouts)
    # in a savepoint; other databases: the ORM path.
    assert first_big <= (7 if connection.vendor == "postgresql" else 12)
    print("ingest queries", first_big)


def test_a_report_for_another_node_is_refused_and_nothing_is_stored(admin, node):
    other, _ = register(admin, "gpu-node-2")
    with pytest.raises(PermissionDenied) as refused:
        reports.agent_report_ingest(node=node, report=report("gpu-node-2", [gpu("x", 0)]))
    assert refused.value.status_code == 403
    # A GPU already registered to another node is not taken over either.
    reports.agent_report_ingest(node=other, report=report(other.name, [gpu("shared", 0)]))
    stolen_gpu = gpu("shared", 0)
    stolen_gpu["index"] = 1
    with pytest.raises(PermissionDenied) as stolen:
        reports.agent_report_ingest(
            node=node, report=report(node.name, [gpu(node.name, 0), stolen_gpu])
        )
    assert "gpus[1].uuid" in stolen.value.fields
    assert not Gpu.objects.filter(node=node).exists()
    assert Gpu.objects.get(uuid="GPU-shared-0000").node == other


def test_a_malformed_report_names_every_problem_and_stores_nothing(node):
    twin = gpu(node.name, 0, instances=[instance(1, "1g.10gb", 0, 1), instance(1, "1g.10gb", 1, 1)])
    duplicate = gpu(node.name, 0)
    with pytest.raises(ValidationFailed) as bad:
        reports.agent_report_ingest(node=node, report=report(node.name, [twin, duplicate]))
    assert {"gpus[0].instances[1].gi_id", "gpus[1].uuid", "gpus[1].index"} <= set(bad.value.fields)
    too_many = [gpu(node.name, i) for i in range(65)]
    with pytest.raises(ValidationFailed) as big:
        reports.agent_report_ingest(node=node, report=report(node.name, too_many))
    assert "at most 64" in big.value.fields["gpus"][0]
    crowded = gpu(node.name, 0, instances=[*seven_small(), instance(30, "1g.10gb", 7, 1)])
    with pytest.raises(ValidationFailed) as eight:
        reports.agent_report_ingest(node=node, report=report(node.name, [crowded]))
    assert "gpus[0].instances" in eight.value.fields
    assert not Gpu.objects.exists() and not MigInstance.objects.exists()
    node.refresh_from_db()
    assert node.last_report_at is None


# --- desired layouts -------------------------------------------------------------------------


@pytest.fixture
def a100(node: Node) -> Gpu:
    busy = [instance(1, "3g.40gb", 0, 4, 4242), instance(2, "3g.40gb", 4, 4)]
    reports.agent_report_ingest(
        node=node, report=report(node.name, [gpu(node.name, 0, instances=busy)])
    )
    return Gpu.objects.get(node=node, index=0)


def test_a_valid_layout_gets_placements_a_generation_and_a_deadline(admin, a100):
    layout = layouts.layout_set(
        gpu=a100,
        instances=[{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb"}],
        actor=admin,
    )
    assert layout.generation == 1 and layout.state == LayoutState.PENDING
    assert layout.instances == [
        {"profile": "3g.40gb", "start": 0},
        {"profile": "1g.10gb", "start": 6},  # the validator's choice for a missing start
    ]
    assert timedelta(minutes=9) < layout.deadline - timezone.now() <= timedelta(minutes=10)
    second = layouts.layout_set(
        gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin
    )
    assert second.generation == 2
    layout.refresh_from_db()
    assert layout.state == LayoutState.FAILED and layout.message == "superseded by generation 2"
    assert AuditEvent.objects.filter(action="mig_layout.set").count() == 2


@pytest.mark.parametrize(
    ("instances", "fields"),
    [
        # The seed's own examples (R24): neither fits on one A100.
        (
            [{"profile": "4g.40gb"}, {"profile": "4g.40gb"}, {"profile": "4g.40gb"}],
            {"instances[1].profile", "instances", "instances[1].start", "instances[2].start"},
        ),
        (
            [{"profile": "2g.20gb"}, {"profile": "7g.79gb"}],
            {"instances[1].profile", "instances[1].start", "instances"},
        ),
        (
            [{"profile": "3g.40gb", "start": 1}, {"profile": "9g.10gb"}],
            {"instances[0].start", "instances[1].profile"},
        ),
    ],
)
def test_an_invalid_layout_names_every_broken_rule(admin, a100, instances, fields):
    with pytest.raises(ValidationFailed) as bad:
        layouts.layout_set(gpu=a100, instances=instances, actor=admin)
    assert set(bad.value.fields) == fields
    assert bad.value.status_code == 400
    assert "instances[" in bad.value.message
    assert not MigLayout.objects.exists()


def test_a_gpu_model_without_mig_is_refused(admin, node):
    t4 = gpu(node.name, 0, mig=False)
    t4["name"] = "Tesla T4"
    reports.agent_report_ingest(node=node, report=report(node.name, [t4]))
    with pytest.raises(ValidationFailed, match="no MIG profiles"):
        layouts.layout_set(
            gpu=Gpu.objects.get(uuid=t4["uuid"]), instances=[{"profile": "1g.10gb"}], actor=admin
        )


def test_a_layout_that_destroys_a_busy_instance_is_refused_or_drained(admin, node, a100):
    keeps_it = [{"profile": "3g.40gb", "start": 0}, {"profile": "2g.20gb", "start": 4}]
    assert layouts.layout_set(gpu=a100, instances=keeps_it, actor=admin).generation == 1
    replaces_it = [{"profile": "7g.80gb", "start": 0}]
    with pytest.raises(Conflict) as busy:
        layouts.layout_set(gpu=a100, instances=replaces_it, actor=admin)
    assert busy.value.status_code == 409
    assert "instance 1 (3g.40gb at slice 0) is busy: pid 4242 (pod pod-4242)" in busy.value.message
    assert MigLayout.objects.count() == 1

    drained = layouts.layout_set(gpu=a100, instances=replaces_it, actor=admin, drain=True)
    assert drained.state == LayoutState.PENDING and drained.generation == 2
    assert drained.message == "waiting for instance 1 to go idle"
    assert drained.waiting_for == [1] and drained.deadline is None
    assert layouts.agent_desired(node=node) == []  # not handed out while draining

    # Still busy: still waiting. Idle: handed to the agent, with a deadline from now.
    busy_again = [instance(1, "3g.40gb", 0, 4, 4242), instance(2, "3g.40gb", 4, 4)]
    still = [gpu(node.name, 0, instances=busy_again)]
    assert reports.agent_report_ingest(node=node, report=report(node.name, still)) == 0
    idle = [gpu(node.name, 0, instances=[instance(1, "3g.40gb", 0, 4)])]
    assert reports.agent_report_ingest(node=node, report=report(node.name, idle)) == 2
    drained.refresh_from_db()
    assert drained.waiting_for == [] and drained.deadline is not None
    assert [(d.uuid, d.generation) for d in layouts.agent_desired(node=node)] == [(a100.uuid, 2)]


def test_turning_mig_on_a_busy_whole_gpu_is_refused(admin, node):
    whole = gpu(node.name, 0, mig=False, processes=[process(77)])
    reports.agent_report_ingest(node=node, report=report(node.name, [whole]))
    target = Gpu.objects.get(uuid=whole["uuid"])
    with pytest.raises(Conflict, match="pid 77"):
        layouts.layout_set(gpu=target, instances=[{"profile": "7g.80gb"}], actor=admin)
    with pytest.raises(ValidationFailed):
        layouts.layout_set(
            gpu=target, instances=[{"profile": "7g.80gb"}], actor=admin, mig_enabled=False
        )


# --- desired and results ---------------------------------------------------------------------


def test_desired_and_result_round_trip(admin, node, a100):
    layout = layouts.layout_set(
        gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin
    )
    desired = layouts.agent_desired(node=node)
    assert [(d.uuid, d.generation, d.mig_enabled, d.instances) for d in desired] == [
        (a100.uuid, 1, True, [{"profile": "3g.40gb", "start": 0}])
    ]
    applying = layouts.agent_result(node=node, uuid=a100.uuid, generation=1, state="applying")
    assert applying.accepted and applying.state == "applying"
    assert len(layouts.agent_desired(node=node)) == 1  # still to be done
    done = layouts.agent_result(node=node, uuid=a100.uuid, generation=1, state="success")
    assert done.accepted
    layout.refresh_from_db()
    assert layout.state == LayoutState.SUCCESS and layout.applied_at is not None
    assert layouts.agent_desired(node=node) == []
    late = layouts.agent_result(
        node=node, uuid=a100.uuid, generation=1, state="failed", message="x"
    )
    assert not late.accepted and late.state == "success"

    # A newer generation makes results for the older one stale.
    layouts.layout_set(gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin)
    stale = layouts.agent_result(node=node, uuid=a100.uuid, generation=1, state="failed")
    assert not stale.accepted and "not the latest (2)" in stale.detail
    assert MigLayout.objects.get(generation=2).state == LayoutState.PENDING
    failed = layouts.agent_result(
        node=node, uuid=a100.uuid, generation=2, state="failed", message="busy: pid 4242"
    )
    assert failed.accepted
    assert MigLayout.objects.get(generation=2).message == "busy: pid 4242"
    assert AuditEvent.objects.filter(action="mig_layout.success").count() == 1


def test_a_result_for_another_nodes_gpu_is_forbidden(admin, node, a100):
    other, _ = register(admin, "gpu-node-2")
    layouts.layout_set(gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin)
    with pytest.raises(PermissionDenied):
        layouts.agent_result(node=other, uuid=a100.uuid, generation=1, state="success")
    with pytest.raises(ApplicationError) as missing:
        layouts.agent_result(node=other, uuid="GPU-nope", generation=1, state="success")
    assert missing.value.status_code == 404
    assert MigLayout.objects.get().state == LayoutState.PENDING


def test_a_mig_mode_change_waits_for_the_reboot(admin, node):
    whole = gpu(node.name, 0, mig=False)
    reports.agent_report_ingest(node=node, report=report(node.name, [whole]))
    target = Gpu.objects.get(uuid=whole["uuid"])
    layouts.layout_set(gpu=target, instances=[{"profile": "7g.80gb"}], actor=admin)
    layouts.agent_result(
        node=node, uuid=target.uuid, generation=1, state="reboot-required", message="reset"
    )
    assert layouts.agent_desired(node=node) == []
    # Same mode after a report: still waiting. MIG on after the reset: pending again.
    reports.agent_report_ingest(node=node, report=report(node.name, [whole]))
    assert MigLayout.objects.get().state == LayoutState.REBOOT_REQUIRED
    reports.agent_report_ingest(node=node, report=report(node.name, [gpu(node.name, 0)]))
    assert MigLayout.objects.get().state == LayoutState.PENDING
    assert [d.generation for d in layouts.agent_desired(node=node)] == [1]


# --- periodic tasks --------------------------------------------------------------------------


def test_nodes_that_stop_reporting_become_stale_and_come_back(admin, node, settings):
    settings.AGENT_STALE_AFTER_S = 60
    reports.agent_report_ingest(node=node, report=report(node.name, []))
    assert tasks.mark_stale_nodes() == 0
    Node.objects.filter(pk=node.pk).update(last_report_at=timezone.now() - timedelta(seconds=61))
    assert tasks.mark_stale_nodes() == 1
    assert tasks.mark_stale_nodes() == 0  # idempotent
    node.refresh_from_db()
    assert node.stale and selectors.node_is_stale(node)
    reports.agent_report_ingest(node=node, report=report(node.name, []))
    node.refresh_from_db()
    assert not node.stale
    assert list(
        AuditEvent.objects.filter(action__in=["node.stale", "node.reporting"])
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["node.stale", "node.reporting"]


def test_layouts_past_their_deadline_fail_with_the_reason(admin, node, a100):
    reports.agent_report_ingest(node=node, report=report(node.name, []))
    layout = layouts.layout_set(
        gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin
    )
    assert tasks.fail_overdue_layouts() == 0
    MigLayout.objects.filter(pk=layout.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    last = Node.objects.get(pk=node.pk).last_report_at
    assert tasks.fail_overdue_layouts() == 1
    layout.refresh_from_db()
    assert layout.state == LayoutState.FAILED
    assert layout.message == (
        f"not applied within 10 minutes by node gpu-node-1 "
        f"(last report at {last.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ})"
    )
    assert tasks.fail_overdue_layouts() == 0
    assert layouts.agent_desired(node=node) == []


# --- selectors -------------------------------------------------------------------------------


def test_the_fleet_is_for_platform_admins(admin, node, a100):
    layouts.layout_set(gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin)
    overview = selectors.fleet_overview(user=admin)
    assert (overview.nodes, overview.gpus, overview.gpus_mig_enabled) == (1, 1, 1)
    assert (overview.instances, overview.instances_busy, overview.layouts_open) == (2, 1, 1)
    listed = selectors.node_list(user=admin).get()
    assert (listed.gpu_count, listed.instance_count, listed.busy_instance_count) == (1, 2, 1)
    lead = UserFactory(username="just-a-lead")
    assert not selectors.node_list(user=lead).exists()
    with pytest.raises(ApplicationError):
        selectors.node_get(user=lead, name=node.name)
    with pytest.raises(ApplicationError):
        selectors.gpu_get(user=lead, uuid=a100.uuid)


def test_a_report_of_the_applied_generation_confirms_a_lost_result(admin, node, a100):
    layout = layouts.layout_set(
        gpu=a100, instances=[{"profile": "3g.40gb", "start": 0}], actor=admin
    )
    kept = [instance(1, "3g.40gb", 0, 4, 4242)]
    before = report(node.name, [gpu(node.name, 0, instances=kept, applied_generation=0)])
    assert reports.agent_report_ingest(node=node, report=before) == 1
    after = report(node.name, [gpu(node.name, 0, instances=kept, applied_generation=1)])
    assert reports.agent_report_ingest(node=node, report=after) == 0
    layout.refresh_from_db()
    assert layout.state == LayoutState.SUCCESS and layout.applied_at is not None
    assert AuditEvent.objects.filter(action="mig_layout.success").count() == 1


def test_a_plan_applies_each_gpu_on_its_own_and_is_audited_as_a_whole(admin, node, a100):
    reports.agent_report_ingest(
        node=node,
        report=report(
            node.name,
            [gpu(node.name, 0, instances=[instance(1, "3g.40gb", 0, 4, 4242)]), gpu(node.name, 1)],
        ),
    )
    idle = Gpu.objects.get(node=node, index=1)

    done, refused = plans.mig_plan_layouts_set(
        changes=[
            plans.GpuLayout(a100, [{"profile": "7g.80gb", "start": 0}]),  # destroys pid 4242's
            plans.GpuLayout(idle, [{"profile": "3g.40gb", "start": 4}]),
        ],
        actor=admin,
    )

    assert [layout.gpu for layout in done] == [idle]
    assert [(r.gpu, r.status) for r in refused] == [(a100, 409)]
    assert "pid 4242" in refused[0].message
    assert not MigLayout.objects.filter(gpu=a100).exists()  # the refused GPU kept its layout
    event = AuditEvent.objects.get(action="mig_plan.applied")
    assert event.after == {"applied": [idle.uuid], "refused": {a100.uuid: refused[0].message}}
