"""Holding new work at 100% and suspending an idle workload reach the cluster (the local
Kubernetes API stand-in, read back with kubectl); the undo makes the workload active again."""

from __future__ import annotations

from datetime import timedelta

from alerts import services
from alerts.choices import ActionState, AlertState, EventKind
from alerts.models import Alert
from quotas.kube.applier import KubernetesBackend
from quotas.models import QuotaSet, SyncOutbox
from quotas.sync import cluster_reconcile, outbox_deliver
from tenants.models import AuditEvent, Notification
from tests.alerts.conftest import NOW, gpu_utilization, running_workload, use_now
from tests.alerts.kueue import kueue_workload
from tests.standin import kubectl_json

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def _deliver_latest(world) -> None:  # type: ignore[no-untyped-def]
    generation = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).generation
    row = SyncOutbox.objects.get(tenant=world.team_a, cluster=world.a100, generation=generation)
    outbox_deliver(outbox_id=row.pk)


def test_100_percent_puts_the_cluster_queue_on_hold_and_lifts_it(world, standin):
    assert cluster_reconcile(cluster=world.a100).ok
    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "None"

    use_now(world, world.team_a, 10)  # of 10
    services.evaluate(now=NOW)
    _deliver_latest(world)

    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "Hold"
    assert kubectl_json(standin, "get", "clusterqueue", "team-b")["spec"]["stopPolicy"] == "None"
    # The periodic reconcile keeps the hold: it is desired state, not drift.
    assert cluster_reconcile(cluster=world.a100).ok
    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "Hold"

    use_now(world, world.team_a, 7, now=NOW + timedelta(minutes=20))
    services.evaluate(now=NOW + timedelta(minutes=20))
    _deliver_latest(world)

    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "None"


def test_an_idle_workload_is_suspended_after_the_grace_and_the_undo_restores_it(
    world, standin, api_as
):
    assert cluster_reconcile(cluster=world.a100).ok
    api = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path))
    try:
        created = api._call(
            "POST", f"{KUEUE}/namespaces/team-a-training/workloads",
            body=kueue_workload("team-a-training", "idle-job"),
        )  # fmt: skip
    finally:
        api.close()
    running_workload(
        world, name="idle-job", uid=created["metadata"]["uid"], admitted_ago=timedelta(days=4)
    )
    due = NOW + timedelta(days=1)
    gpu_utilization(
        world, 0.0, start=NOW - timedelta(days=3, hours=1), end=due + timedelta(minutes=5)
    )

    services.evaluate(now=NOW)  # the notice: nothing happens in the cluster yet

    workload = ["get", "workload", "idle-job", "-n", "team-a-training"]
    assert kubectl_json(standin, *workload)["spec"].get("active", True) is True
    [alert] = Alert.objects.filter(rule__name="idle-workload")
    assert alert.action_state == ActionState.NOTIFIED

    summary = services.evaluate(now=due + timedelta(minutes=1))

    assert summary.suspended == 1
    assert kubectl_json(standin, *workload)["spec"]["active"] is False
    alert.refresh_from_db()
    assert alert.action_state == ActionState.SUSPENDED and alert.state == AlertState.FIRING
    assert AuditEvent.objects.filter(action="workload.suspended", tenant=world.team_a).exists()
    assert Notification.objects.filter(user=world.alice, subject__contains="was suspended").exists()
    # Kueue evicts it: no longer admitted; the alert stays open with its undo.
    alert.workload.state = "inactive"
    alert.workload.save()
    services.evaluate(now=due + timedelta(minutes=2))
    alert.refresh_from_db()
    assert alert.state == AlertState.FIRING

    assert api_as(world.bob).post(f"/api/v1/alerts/{alert.pk}/reactivate/").status_code == 404
    response = api_as(world.alice).post(f"/api/v1/alerts/{alert.pk}/reactivate/")

    assert response.status_code == 200, response.json()
    assert response.json()["action_state"] == ActionState.UNDONE
    assert kubectl_json(standin, *workload)["spec"]["active"] is True
    kinds = [e["kind"] for e in response.json()["events"]]
    assert kinds == [EventKind.FIRED, EventKind.SUSPENSION_NOTICE, EventKind.SUSPENDED,
                     EventKind.REACTIVATED]  # fmt: skip
    assert response.json()["events"][-1]["actor"] == "alice"
    assert AuditEvent.objects.filter(action="workload.reactivated", actor=world.alice).exists()
    # Undone: not suspended again while the alert is open, and a second undo is a conflict.
    assert api_as(world.alice).post(f"/api/v1/alerts/{alert.pk}/reactivate/").status_code == 409


def test_a_cluster_that_cannot_be_reached_is_retried_and_recorded(world):
    running_workload(world, name="idle-job", uid="uid-x", admitted_ago=timedelta(days=4))
    due = NOW + timedelta(days=1)
    gpu_utilization(
        world, 0.0, start=NOW - timedelta(days=3, hours=1), end=due + timedelta(minutes=5)
    )
    services.evaluate(now=NOW)
    summary = services.evaluate(now=due + timedelta(minutes=1))  # demo-a100: backend none
    assert summary.suspended == 0 and summary.suspend_failed == 1
    [alert] = Alert.objects.filter(rule__name="idle-workload")
    assert alert.action_state == ActionState.NOTIFIED
    assert "cannot be suspended from the portal" in alert.action_error
    services.evaluate(now=due + timedelta(minutes=2))  # the same error: one event
    assert alert.events.filter(kind=EventKind.SUSPEND_FAILED).count() == 1
