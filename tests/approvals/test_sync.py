"""An approved change reaches the cluster (the local API stand-in, over HTTP): the request
goes approved -> applying -> applied, or failed with the server's message; faults are
retried; a duplicate delivery does nothing; drift is repaired and audited."""

from __future__ import annotations

import json

import pytest

from approvals.choices import RequestStatus
from approvals.services import quota_request_retry
from devcluster.runner import start_in_thread
from quotas.choices import SyncBackend, SyncState
from quotas.kube.applier import RetryableError
from quotas.models import Cluster, SyncOutbox, TenantSync
from quotas.sync import cluster_reconcile_by_id, outbox_deliver
from tenants.models import AuditEvent, Notification
from tests.approvals.conftest import file, item
from tests.cluster_access import hold_cluster_access
from tests.standin import (
    a100_gpu_quota,
    approved,
    kubectl,
    kubectl_json,
    point_at,
    refuse_cluster_queues,
)


def test_an_approved_change_lands_in_the_cluster_and_the_request_is_applied(world, standin):
    request, row = approved(world)

    outbox_deliver(outbox_id=row.pk)

    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED
    sync = TenantSync.objects.get(tenant=world.team_a, cluster=world.a100)
    assert (sync.state, sync.applied_generation) == (SyncState.IN_SYNC, request.approved_generation)
    row.refresh_from_db()
    assert row.completed_at is not None
    cq = kubectl_json(standin, "get", "clusterqueue", "team-a")
    assert a100_gpu_quota(cq) == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "8",
        "borrowingLimit": "2",
    }
    rq = kubectl_json(standin, "get", "resourcequota", "gpu-portal-quota", "-n", "team-a-training")
    assert rq["spec"]["hard"]["requests.nvidia.com/gpu"] == "10"
    actions = list(
        AuditEvent.objects.filter(object_id=f"#{request.pk}").values_list("action", flat=True)
    )
    assert "quota_request.applying" in actions and "quota_request.applied" in actions


def test_a_duplicate_delivery_writes_nothing(world, standin):
    _, row = approved(world)
    outbox_deliver(outbox_id=row.pk)
    standin.reset_stats()

    assert outbox_deliver(outbox_id=row.pk) is None
    assert standin.stats()["total"] == 0


def test_an_unreachable_cluster_is_retried_and_converges(world, standin):
    request, row = approved(world)
    standin.fail_next(None, 503)  # every request fails until cleared

    with pytest.raises(RetryableError):
        outbox_deliver(outbox_id=row.pk)

    request.refresh_from_db()
    assert request.status == RequestStatus.APPLYING
    sync = TenantSync.objects.get(tenant=world.team_a, cluster=world.a100)
    assert (sync.state, sync.attempts) == (SyncState.APPLYING, 1)
    row.refresh_from_db()
    assert row.completed_at is None and "unable to handle" in row.last_error

    standin.clear_faults()
    outbox_deliver(outbox_id=row.pk)  # the task's retry
    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED
    assert (
        a100_gpu_quota(kubectl_json(standin, "get", "clusterqueue", "team-a"))["nominalQuota"]
        == "8"
    )


def test_an_object_the_server_refuses_fails_the_request_with_its_message(world, tmp_path, settings):
    with start_in_thread(kubeconfig_path=tmp_path / "kc", validator=refuse_cluster_queues) as h:
        hold_cluster_access(h)
        point_at(world.a100, h.kubeconfig_path)
        request, row = approved(world)

        outbox_deliver(outbox_id=row.pk)

        request.refresh_from_db()
        assert request.status == RequestStatus.FAILED
        assert "refused by policy" in request.failure_message
        sync = TenantSync.objects.get(tenant=world.team_a, cluster=world.a100)
        assert sync.state == SyncState.FAILED
        # The other objects went in; the last good ClusterQueue (none here) is untouched.
        assert kubectl_json(h, "get", "resourcequota", "-n", "team-a-training")["items"]

    # Fixed (here: a cluster that accepts it), an admin retries.
    with start_in_thread(kubeconfig_path=tmp_path / "kc2") as fixed:
        hold_cluster_access(fixed)
        point_at(world.a100, fixed.kubeconfig_path)
        quota_request_retry(request=request, actor=world.admin)
        row.refresh_from_db()
        assert row.completed_at is None
        outbox_deliver(outbox_id=row.pk)
        request.refresh_from_db()
        assert request.status == RequestStatus.APPLIED


def test_a_hand_edit_is_repaired_by_the_reconcile_and_audited(world, standin):
    _, row = approved(world)
    outbox_deliver(outbox_id=row.pk)
    kubectl(
        standin, "patch", "clusterqueue", "team-a", "--type", "json", "-p",
        json.dumps([{"op": "replace", "path": "/spec/stopPolicy", "value": "HoldAndDrain"}]),
    )  # fmt: skip

    outcome = cluster_reconcile_by_id(cluster_id=world.a100.pk)

    assert outcome is not None and not outcome.error
    assert [d["object"] for d in outcome.drifted] == ["ClusterQueue team-a"]
    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "None"
    event = AuditEvent.objects.get(action="cluster.drift_repaired")
    assert event.before == {".spec.stopPolicy": "HoldAndDrain"}
    assert event.after == {".spec.stopPolicy": "None"}
    assert event.tenant == world.team_a
    sync = TenantSync.objects.get(tenant=world.team_a, cluster=world.a100)
    assert sync.state == SyncState.DRIFTED


def test_one_unreachable_cluster_does_not_hold_up_the_others(world, standin):
    Cluster.objects.filter(pk=world.h100.pk).update(
        backend=SyncBackend.KUBERNETES, kubeconfig_path="/nonexistent/kubeconfig"
    )
    broken = cluster_reconcile_by_id(cluster_id=world.h100.pk)
    fine = cluster_reconcile_by_id(cluster_id=world.a100.pk)
    assert broken is not None and "kubeconfig" in broken.error
    assert fine is not None and not fine.error and fine.result is not None
    assert fine.result.created  # every tenant's objects on demo-a100


def test_the_dry_run_shows_the_object_diff_and_the_servers_verdict(world, standin, api_as):
    _, row = approved(world)
    outbox_deliver(outbox_id=row.pk)  # team-a at 8 / 10 in the cluster
    pending = file(world, items=[item(guaranteed=9, limit=10)])

    response = api_as(world.alice).get(f"/api/v1/quota-requests/{pending.pk}/dry-run/")

    assert response.status_code == 200, response.json()
    data = response.json()
    assert data["server_checked"] is True and data["server_errors"] == []
    changed = {o["object"]: o for o in data["objects"]}
    cq = changed["ClusterQueue team-a"]
    assert cq["change"] == "changed"
    guaranteed = "nvidia.com/gpu on a100-80gb: guaranteed 8 → 9"
    assert any(
        f == {"before": "8", "after": "9", "description": guaranteed} for f in cq["fields"].values()
    )
    assert cq["descriptions"] == [guaranteed]
    # A dry run writes nothing.
    assert (
        a100_gpu_quota(kubectl_json(standin, "get", "clusterqueue", "team-a"))["nominalQuota"]
        == "8"
    )
    assert api_as(world.bob).get(f"/api/v1/quota-requests/{pending.pk}/dry-run/").status_code == 404


def test_the_tenant_sync_api_shows_state_cluster_usage_and_the_yaml(world, standin, api_as):
    _, row = approved(world)
    outbox_deliver(outbox_id=row.pk)
    alice = api_as(world.alice)

    rows = alice.get("/api/v1/tenants/team-a/sync/?live=true").json()

    a100 = next(r for r in rows if r["cluster"] == "demo-a100")
    assert a100["push"]["state"] == "in_sync"
    assert a100["push"]["applied_generation"] == a100["generation"]
    assert a100["in_cluster"]["reachable"] is True
    assert {q["namespace"] for q in a100["in_cluster"]["resource_quotas"]} == {
        "team-a-inference",
        "team-a-training",
    }
    yaml_text = alice.get("/api/v1/tenants/team-a/sync/demo-a100/manifests/")
    assert yaml_text.status_code == 200
    assert yaml_text["Content-Type"].startswith("application/yaml")
    assert "kind: ClusterQueue" in yaml_text.content.decode()
    assert "team-b" not in yaml_text.content.decode()
    bob = api_as(world.bob)
    assert bob.get("/api/v1/tenants/team-a/sync/").status_code == 404
    assert bob.get("/api/v1/tenants/team-a/sync/demo-a100/manifests/").status_code == 404


def test_only_admins_retry_and_only_failed_pushes(world, standin, api_as):
    request, row = approved(world)
    outbox_deliver(outbox_id=row.pk)
    url = f"/api/v1/quota-requests/{request.pk}/retry/"
    assert api_as(world.alice).post(url, {}, format="json").status_code == 403
    refused = api_as(world.admin).post(url, {}, format="json")
    assert refused.status_code == 409
    assert "only a failed push is retried" in refused.json()["detail"]


def test_a_tenant_change_is_pushed_like_an_approval_and_not_taken_for_drift(world, standin):
    from tenants.services import membership_set, tenant_update

    _, row = approved(world)
    outbox_deliver(outbox_id=row.pk)
    tenant_update(tenant=world.team_a, actor=world.admin, state="suspended")
    membership_set(tenant=world.team_a, user=world.bob, role="viewer", actor=world.admin)

    for open_row in SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.a100, completed_at__isnull=True
    ):
        outbox_deliver(outbox_id=open_row.pk)

    assert kubectl_json(standin, "get", "clusterqueue", "team-a")["spec"]["stopPolicy"] == "Hold"
    view = kubectl_json(standin, "get", "rolebinding", "gpu-portal-view", "-n", "team-a-training")
    assert {"kind": "User", "name": "bob", "apiGroup": "rbac.authorization.k8s.io"} in view[
        "subjects"
    ]
    outcome = cluster_reconcile_by_id(cluster_id=world.a100.pk)
    assert outcome is not None and outcome.drifted == []
    assert not AuditEvent.objects.filter(action="cluster.drift_repaired").exists()


def test_a_dry_run_before_the_first_push_does_not_report_missing_namespaces(world, standin):
    from approvals.services import quota_request_dry_run

    pending = file(world, items=[item(guaranteed=7, limit=10)])  # nothing pushed yet

    dry_run = quota_request_dry_run(request=pending)

    assert dry_run.server_checked and dry_run.server_errors == []
    assert "namespace does not exist yet" in dry_run.server_message
    namespaces = {
        ns["metadata"]["name"] for ns in kubectl_json(standin, "get", "namespaces")["items"]
    }
    assert not {n for n in namespaces if n.startswith("team-a")}  # a dry run created nothing


def test_a_delivery_queued_under_the_old_task_name_is_still_pushed(world, standin):
    from celery import current_app

    request, row = approved(world)
    current_app.loader.import_default_modules()  # what a worker does at start

    current_app.tasks["approvals.tasks.deliver_outbox"].apply(args=[row.pk])

    request.refresh_from_db()
    assert request.status == RequestStatus.APPLIED
    row.refresh_from_db()
    assert row.completed_at is not None


def test_the_requester_is_told_when_the_change_is_applied_in_the_cluster(world, standin):
    request, row = approved(world)
    told = Notification.objects.filter(user=world.alice, url=f"/requests/{request.pk}/")
    assert [n.subject for n in told] == [f"Request #{request.pk} for team-a was approved"]

    outbox_deliver(outbox_id=row.pk)

    assert [n.subject for n in told.order_by("pk")][1:] == [
        f"Request #{request.pk} for team-a was applied in demo-a100"
    ]


def test_the_requester_is_told_when_the_cluster_refused_the_change(world, tmp_path):
    with start_in_thread(kubeconfig_path=tmp_path / "kc", validator=refuse_cluster_queues) as h:
        hold_cluster_access(h)
        point_at(world.a100, h.kubeconfig_path)
        request, row = approved(world)
        outbox_deliver(outbox_id=row.pk)

    notice = Notification.objects.filter(user=world.alice).order_by("pk").last()
    assert notice is not None
    assert notice.subject == f"Request #{request.pk} for team-a could not be applied in demo-a100"
    assert "refused by policy" in notice.body
