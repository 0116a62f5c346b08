"""Idleness judged per workload, from its own pods' GPUs (R12).

The data arrives as it does in production: the collector reads the cluster's pods and Kueue
Workloads (a Job owns both), the node agents report each GPU with the pod uids of its
processes, the rollups run, then the rules are evaluated."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from alerts import services as alert_services
from alerts.choices import ActionState
from alerts.models import Alert
from gpu_agent.services.reports import DeviceReading, ReportReadings
from tests.alerts.conftest import NOW
from tests.conftest import World
from usage import collector
from usage import services as usage_services
from usage.models import Pod, Workload

A100 = "NVIDIA A100-SXM4-80GB"
NS = "team-a-training"


class _EveryReport:
    """Every report becomes samples (the test sends one an hour, not one a minute)."""

    def due(self, *, node_id: int) -> bool:
        return True


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    usage_services._FLAVOR_CACHE.clear()
    usage_services._POD_CACHE.clear()
    usage_services._AGENT_SAMPLES_CACHE.clear()
    monkeypatch.setattr(usage_services, "agent_sample_throttle", _EveryReport())
    yield
    usage_services._POD_CACHE.clear()
    usage_services._FLAVOR_CACHE.clear()


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _job_pod(name: str, job_uid: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{name}-0", "namespace": NS, "uid": f"pod-{name}",
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid,
                 "controller": True},
            ],
        },
        "spec": {
            "nodeName": "a100-node-1",
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }  # fmt: skip


def _job_workload(name: str, job_uid: str, gpus: int, admitted: datetime) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"job-{name}", "namespace": NS, "uid": f"wl-{name}",
            "creationTimestamp": _stamp(admitted - timedelta(minutes=5)),
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid,
                 "controller": True},
            ],
        },
        "spec": {
            "queueName": "default",
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "main", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}],
        },
        "status": {
            "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted",
                            "lastTransitionTime": _stamp(admitted)}],
            "admission": {"clusterQueue": "team-a", "podSetAssignments": [
                {"name": "main", "flavors": {"nvidia.com/gpu": "a100-80gb"}}]},
        },
    }  # fmt: skip


def _collect(world: World, now: datetime) -> None:
    admitted = NOW - timedelta(days=5)
    collector.collected_store(
        cluster=world.a100,
        pods=[_job_pod("busy", "job-uid-busy", 2), _job_pod("stuck", "job-uid-stuck", 2)],
        queues=[],
        workloads=[
            _job_workload("busy", "job-uid-busy", 2, admitted),
            _job_workload("stuck", "job-uid-stuck", 2, admitted),
        ],
        quotas=[],
        now=now,
    )


def _report(node_id: int, world: World, at: datetime, *, busy: int, stuck: int) -> None:
    """One agent report: two GPUs for each job, the busy job's at ``busy`` %, the stuck
    one's at ``stuck`` %."""
    devices = []
    for index, (pod, pct) in enumerate(
        (("pod-busy", busy), ("pod-busy", busy), ("pod-stuck", stuck), ("pod-stuck", stuck))
    ):
        devices.append(
            DeviceReading(
                gpu_uuid=f"GPU-a100-{index}", model=A100, gi_id=None, mig_profile=None,
                utilization_pct=pct, memory_used_mib=20000, processes=1, pod_uids=(pod,),
            )
        )  # fmt: skip
    usage_services.agent_readings_record(
        readings=ReportReadings(node_id, world.a100.pk, at, tuple(devices))
    )


def _four_days_of_reports(world: World, *, busy: int, stuck: int) -> None:
    _collect(world, NOW - timedelta(days=4, hours=1))
    start = NOW - timedelta(days=4)
    hours = int((NOW - start).total_seconds() // 3600)
    for hour in range(hours):
        at = start + timedelta(hours=hour, minutes=1)
        usage_services._POD_CACHE.clear()  # the collector reads pods every minute anyway
        _report(77, world, at, busy=busy, stuck=stuck)
    _collect(world, NOW - timedelta(minutes=1))
    usage_services.rollups_run_all(now=NOW)


def _idle_alerts() -> list[Alert]:
    return list(Alert.objects.filter(rule__name="idle-workload").order_by("workload_name"))


@pytest.mark.django_db
def test_a_busy_sibling_does_not_hide_an_idle_workload(world: World) -> None:
    """Two jobs of team-a on the same A100 flavor: one computes (90%), one has held its two
    GPUs at 0% for four days. The tenant's GPUs, taken together, were busy; the stuck job's
    own GPUs were not: it is the one the lead is told about, and the busy one is left alone."""
    _four_days_of_reports(world, busy=90, stuck=0)
    assert {w.name for w in Workload.objects.filter(state="admitted")} == {"job-busy", "job-stuck"}
    alert_services.evaluate(now=NOW)
    [alert] = _idle_alerts()
    assert alert.workload_name == "job-stuck"
    assert alert.action_state == ActionState.NOTIFIED
    assert "its own GPUs" in alert.message


@pytest.mark.django_db
def test_a_workload_whose_own_gpus_work_is_not_idle(world: World) -> None:
    _four_days_of_reports(world, busy=90, stuck=40)
    alert_services.evaluate(now=NOW)
    assert not _idle_alerts()


@pytest.mark.django_db
def test_the_collector_ties_each_pod_to_its_workload_through_the_job(world: World) -> None:
    _collect(world, NOW)
    assert dict(Pod.objects.values_list("uid", "workload_uid")) == {
        "pod-busy": "wl-busy",
        "pod-stuck": "wl-stuck",
    }


@pytest.mark.django_db
def test_a_workload_without_owner_references_is_found_by_its_job_uid_label(world: World) -> None:
    workload = _job_workload("stuck", "job-uid-stuck", 2, NOW - timedelta(days=1))
    workload["metadata"].pop("ownerReferences")
    workload["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "job-uid-stuck"}
    collector.collected_store(
        cluster=world.a100, pods=[_job_pod("stuck", "job-uid-stuck", 2)], queues=[],
        workloads=[workload], quotas=[], now=NOW,
    )  # fmt: skip
    assert Pod.objects.get(uid="pod-stuck").workload_uid == "wl-stuck"


@pytest.mark.django_db
def test_a_pod_whose_owner_has_no_workload_is_tied_to_none(world: World) -> None:
    collector.collected_store(
        cluster=world.a100, pods=[_job_pod("loose", "job-uid-loose", 1)], queues=[],
        workloads=[_job_workload("stuck", "job-uid-stuck", 2, NOW)], quotas=[], now=NOW,
    )  # fmt: skip
    assert Pod.objects.get(uid="pod-loose").workload_uid == ""
