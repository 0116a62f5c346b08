"""The demo's simulated Kueue (``devcluster.kueue_sim``): what it writes into ClusterQueue
status is read by the portal's collector, so the demo's team-a warning fires and stays, and a
user's ``kubectl annotate ... load=1.0`` ends in the ClusterQueue held (stopPolicy: Hold)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from alerts import services
from alerts.choices import ActionState, AlertState, RuleKind
from alerts.models import Alert, AlertRule
from devcluster.kueue_sim import (
    IDLE_NAME,
    LOAD_ANNOTATION,
    Endpoint,
    queue_load,
    queue_status,
    simulate_once,
)
from quotas.models import QuotaSet, SyncOutbox
from quotas.sync import cluster_reconcile, outbox_deliver
from tests.alerts.conftest import NOW, rollups
from tests.standin import kubectl, kubectl_json
from usage import collector
from usage import services as usage_services
from usage.choices import Metric
from usage.models import Sample, Workload

QUEUE = {
    "metadata": {"name": "team-a"},
    "spec": {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
                "flavors": [
                    {
                        "name": "a100-80gb",
                        "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": "6", "borrowingLimit": "4"},
                            {"name": "cpu", "nominalQuota": "1500m"},
                            {"name": "memory", "nominalQuota": "64Gi"},
                        ],
                    }
                ],
            }
        ]
    },
}


def test_the_status_uses_the_load_of_each_limit_and_borrows_above_the_nominal_quota() -> None:
    status = queue_status(QUEUE, 0.9)
    (flavor,) = status["flavorsUsage"]
    resources = {r["name"]: r for r in flavor["resources"]}
    assert resources["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "total": "9", "borrowed": "3"}
    assert resources["cpu"] == {"name": "cpu", "total": "1", "borrowed": "0"}  # floored
    assert Decimal(resources["memory"]["total"]) == (64 * 2**30 * Decimal("0.9")) // 1
    assert resources["memory"]["borrowed"] == "0"
    assert status["flavorsReservation"] == status["flavorsUsage"]
    assert status["admittedWorkloads"] == 5  # 9 GPUs, two a workload
    assert status["pendingWorkloads"] == 1
    idle = queue_status(QUEUE, 0.0)
    assert idle["flavorsUsage"][0]["resources"][0]["total"] == "0"
    assert (idle["admittedWorkloads"], idle["pendingWorkloads"]) == (0, 0)


def test_the_load_is_hot_near_the_limit_rhythmic_otherwise_and_the_annotation_wins() -> None:
    noon, night = NOW, NOW.replace(hour=3)
    assert (
        0.88
        <= queue_load("team-a", {}, night, ["team-a"])
        < queue_load("team-a", {}, noon, ["team-a"])
        <= 0.93
    )
    assert queue_load("team-b", {}, night, ["team-a"]) < queue_load("team-b", {}, noon) <= 0.4
    assert queue_load("team-b", {LOAD_ANNOTATION: "1.0"}, night) == 1.0
    assert queue_load("team-b", {LOAD_ANNOTATION: "7"}, night) == 1.5  # capped
    assert queue_load("team-b", {LOAD_ANNOTATION: "-1"}, night) == 0.0
    # Not a number: the model's own value, not a crash of the demo loop.
    assert queue_load("team-b", {LOAD_ANNOTATION: "lots"}, noon) == queue_load("team-b", {}, noon)
    assert queue_load("team-b", {LOAD_ANNOTATION: "nan"}, noon) == queue_load("team-b", {}, noon)


def _collect(world, now):  # type: ignore[no-untyped-def]
    outcome = collector.cluster_collect(cluster=world.a100, now=now)
    assert outcome.reachable, outcome.message
    usage_services.rollups_run_all(now=now + timedelta(minutes=1))
    return services.evaluate(now=now + timedelta(minutes=1))


def _open(world, kind: str) -> list[Alert]:  # type: ignore[no-untyped-def]
    return list(
        Alert.objects.filter(
            rule__kind=kind, tenant=world.team_a, state=AlertState.FIRING, cluster=world.a100
        )
    )


@pytest.mark.django_db
def test_simulated_use_fires_the_warning_and_the_annotation_holds_new_work(world, standin):  # type: ignore[no-untyped-def]
    assert cluster_reconcile(cluster=world.a100).ok
    endpoint = Endpoint.from_kubeconfig(standin.kubeconfig_path)
    assert simulate_once(endpoint, NOW, ["team-a"]) == 3  # team-a, team-b, team-c
    status = kubectl_json(standin, "get", "clusterqueue", "team-a")["status"]
    assert status["flavorsUsage"][0]["name"] == "a100-80gb"

    _collect(world, NOW)

    used = Sample.objects.get(
        time=NOW, metric=Metric.QUOTA_USED, tenant_id=world.team_a.pk, flavor_id=world.a100_gpu.pk
    ).value
    assert used == 9  # of a limit of 10: 90%
    assert (
        Sample.objects.get(
            time=NOW,
            metric=Metric.QUOTA_BORROWED,
            tenant_id=world.team_a.pk,
            flavor_id=world.a100_gpu.pk,
        ).value
        == 3
    )  # above the guarantee of 6
    (warning,) = _open(world, RuleKind.QUOTA_WARNING)
    assert "9 of 10 GPUs (90% of its limit" in warning.message
    assert _open(world, RuleKind.QUOTA_BLOCK) == []
    assert not Alert.objects.filter(tenant=world.team_b, state=AlertState.FIRING).exists()

    # A user pushes team-a to its limit the way the README shows.
    kubectl(standin, "annotate", "clusterqueue", "team-a", f"{LOAD_ANNOTATION}=1.0", "--overwrite")
    later = NOW + timedelta(minutes=5)
    simulate_once(endpoint, later, ["team-a"])
    summary = _collect(world, later)
    assert summary.blocked == 1
    (block,) = _open(world, RuleKind.QUOTA_BLOCK)
    assert block.action_state == ActionState.BLOCKED
    generation = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).generation
    row = SyncOutbox.objects.get(tenant=world.team_a, cluster=world.a100, generation=generation)
    outbox_deliver(outbox_id=row.pk)
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a")
    assert queue["spec"]["stopPolicy"] == "Hold"
    # The portal's push kept the user's annotation and Kueue's status: it owns neither.
    assert queue["metadata"]["annotations"][LOAD_ANNOTATION] == "1.0"
    usage = {
        (f["name"], r["name"]): r["total"]
        for f in queue["status"]["flavorsUsage"]
        for r in f["resources"]
    }
    assert usage[("a100-80gb", "nvidia.com/gpu")] == "10"


@pytest.mark.django_db
def test_the_idle_notebook_is_collected_found_idle_and_suspended_in_the_cluster(world, standin):  # type: ignore[no-untyped-def]
    assert cluster_reconcile(cluster=world.a100).ok
    endpoint = Endpoint.from_kubeconfig(standin.kubeconfig_path)
    simulate_once(endpoint, NOW, idle="team-b", started=NOW)
    simulate_once(endpoint, NOW, idle="team-b", started=NOW)  # made once, not twice
    listed = kubectl_json(standin, "get", "workloads", "-n", "team-b-training")["items"]
    assert [w["metadata"]["name"] for w in listed] == [IDLE_NAME]

    assert collector.cluster_collect(cluster=world.a100, now=NOW).workloads == 1
    notebook = Workload.objects.get(name=IDLE_NAME)
    assert (notebook.tenant, notebook.flavors, notebook.gpus) == (world.team_b, ["a100-80gb"], 1)
    assert notebook.admitted_at == NOW - timedelta(days=4)
    assert notebook.queue_wait_s == 0  # admitted "before" the stand-in stamped its creation
    # What the demo month records for team-b there: no GPU activity for four days.
    rollups(
        cluster=world.a100, tenant=world.team_b, flavor=world.a100_gpu,
        metric=Metric.GPU_UTILIZATION, value=0.0, start=NOW - timedelta(days=4), end=NOW,
    )  # fmt: skip
    AlertRule.objects.filter(kind=RuleKind.IDLE_WORKLOAD).update(grace=timedelta(minutes=10))

    services.evaluate(now=NOW)
    (notice,) = _open_idle()
    assert notice.action_state == ActionState.NOTIFIED and notice.tenant == world.team_b
    assert kubectl_json(standin, "get", "workload", "-n", "team-b-training", IDLE_NAME)["spec"].get(
        "active", True
    )

    later = NOW + timedelta(minutes=11)
    collector.cluster_collect(cluster=world.a100, now=later)  # still there, still admitted
    summary = services.evaluate(now=later)

    assert summary.suspended == 1
    workload = kubectl_json(standin, "get", "workload", "-n", "team-b-training", IDLE_NAME)
    assert workload["spec"]["active"] is False


def _open_idle() -> list[Alert]:
    return list(Alert.objects.filter(rule__kind=RuleKind.IDLE_WORKLOAD, state=AlertState.FIRING))
