"""A tenant's own maximum run time (R12, 003): set through a request, it suspends a workload
that runs past it after the rule's grace (on the cluster: the stand-in, read back with
kubectl), and the lead can undo it; tenants without one keep the platform's rule."""

from __future__ import annotations

from datetime import timedelta
from html import unescape

from alerts import services
from alerts.choices import ActionState, AlertState, EventKind
from alerts.models import Alert
from approvals.services import quota_request_approve, quota_request_create
from quotas.kube.applier import KubernetesBackend
from quotas.sync import cluster_reconcile
from tenants.models import AuditEvent, Notification, Tenant
from tests.alerts.conftest import NOW, running_workload
from tests.alerts.kueue import kueue_workload
from tests.pages import logged_in
from tests.standin import kubectl_json

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def _own_maximum(world, hours: int) -> None:  # type: ignore[no-untyped-def]
    """team-a's lead asks for a maximum run time; a platform admin approves it."""
    request = quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice,
        reason="runs over a day are stuck in our pipeline", items=[],
        tenant_changes={"max_run_time_hours": hours}, submit=True,
    )  # fmt: skip
    quota_request_approve(request=request, approver=world.admin)


def _max_runtime_alerts() -> list[Alert]:
    return list(Alert.objects.filter(rule__name="max-runtime").order_by("workload_name"))


def test_without_an_own_maximum_the_platform_rule_only_alerts_after_seven_days(world):
    running_workload(world, name="two-days", uid="uid-2d", admitted_ago=timedelta(days=2))
    services.evaluate(now=NOW)
    assert not _max_runtime_alerts()


def test_an_own_maximum_warns_first_then_counts_from_the_first_admission(world):
    _own_maximum(world, 24)
    assert Tenant.objects.get(pk=world.team_a.pk).max_run_time_hours == 24
    running_workload(world, name="two-days", uid="uid-2d", admitted_ago=timedelta(days=2))
    running_workload(world, name="fresh", uid="uid-fresh", admitted_ago=timedelta(hours=23))

    services.evaluate(now=NOW)

    [alert] = _max_runtime_alerts()
    assert alert.workload_name == "two-days"
    assert "past its team's maximum run time of 24 hours" in alert.message
    assert alert.action_state == ActionState.NOTIFIED
    assert alert.action_due_at == NOW + timedelta(days=1)  # the rule's grace
    notice = Notification.objects.get(user=world.alice, subject__contains="will be suspended")
    assert "unless it finishes first" in notice.subject


def test_past_the_grace_the_workload_is_suspended_on_the_cluster_and_the_undo_holds(
    world, standin, api_as
):
    assert cluster_reconcile(cluster=world.a100).ok
    _own_maximum(world, 12)
    api = KubernetesBackend.from_kubeconfig(str(standin.kubeconfig_path))
    try:
        created = api._call(
            "POST", f"{KUEUE}/namespaces/team-a-training/workloads",
            body=kueue_workload("team-a-training", "marathon"),
        )  # fmt: skip
    finally:
        api.close()
    running_workload(
        world, name="marathon", uid=created["metadata"]["uid"], admitted_ago=timedelta(hours=13)
    )
    workload = ["get", "workload", "marathon", "-n", "team-a-training"]

    services.evaluate(now=NOW)
    assert kubectl_json(standin, *workload)["spec"].get("active", True) is True

    due = NOW + timedelta(days=1, minutes=1)
    summary = services.evaluate(now=due)

    assert summary.suspended == 1
    assert kubectl_json(standin, *workload)["spec"]["active"] is False
    [alert] = _max_runtime_alerts()
    assert alert.action_state == ActionState.SUSPENDED and alert.state == AlertState.FIRING
    assert Notification.objects.filter(
        user=world.alice, subject__contains="suspended (past its maximum run time)"
    ).exists()
    assert AuditEvent.objects.filter(action="workload.suspended", tenant=world.team_a).exists()

    page = unescape(logged_in(world.alice).get(f"/alerts/{alert.pk}/").content.decode())
    assert "Undo suspension" in page and "past its team's maximum run time of 12 hours" in page
    assert api_as(world.bob).post(f"/api/v1/alerts/{alert.pk}/reactivate/").status_code == 404
    response = api_as(world.alice).post(f"/api/v1/alerts/{alert.pk}/reactivate/")
    assert response.status_code == 200, response.json()
    assert kubectl_json(standin, *workload)["spec"]["active"] is True
    assert [e["kind"] for e in response.json()["events"]][-1] == EventKind.REACTIVATED

    # Still past its maximum (the run time counts from the first admission), but undone:
    # the alert stays open and the workload is not suspended again.
    again = services.evaluate(now=due + timedelta(days=2))
    assert again.suspended == 0
    alert.refresh_from_db()
    assert alert.is_open and alert.action_state == ActionState.UNDONE
    assert kubectl_json(standin, *workload)["spec"]["active"] is True


def test_removing_the_own_maximum_goes_back_to_the_platform_rule(world):
    _own_maximum(world, 24)
    request = quota_request_create(
        tenant=world.team_a, cluster=world.a100, requester=world.alice,
        reason="the pipeline is fixed", items=[], tenant_changes={"max_run_time_hours": 0},
        submit=True,
    )  # fmt: skip
    quota_request_approve(request=request, approver=world.admin)
    assert Tenant.objects.get(pk=world.team_a.pk).max_run_time_hours is None
    running_workload(world, name="two-days", uid="uid-2d", admitted_ago=timedelta(days=2))
    services.evaluate(now=NOW)
    assert not _max_runtime_alerts()
