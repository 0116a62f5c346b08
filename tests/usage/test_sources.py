"""Where samples come from: the agents' reports (hook) and the cluster collector, against the
local Kubernetes API stand-in (Kueue status written as Kueue would, through ``/status``)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.cache import caches
from django.utils import timezone

from devcluster.runner import Handle
from gpu_agent.models import MigInstance
from gpu_agent.services.nodes import agent_register, join_token_create
from gpu_agent.services.reports import agent_report_ingest
from quotas.kube.applier import KubernetesBackend
from quotas.sync import cluster_reconcile
from tests.conftest import World
from usage import collector, selectors, services
from usage.choices import Metric, WorkloadState
from usage.models import Pod, Sample, Workload

H100 = "NVIDIA H100 80GB HBM3"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


def h100_report(node: str) -> dict[str, Any]:
    process = {"pid": 41, "used_memory_mib": 900, "pod_uid": "uid-train-1"}
    return {
        "node": node,
        "sent_at": timezone.now().isoformat(),
        "agent_version": "1.0",
        "driver_version": "580.65.06",
        "gpus": [
            {
                "uuid": "GPU-h100-0", "index": 0, "name": H100, "memory_total_mib": 81559,
                "memory_used_mib": 1200, "utilization_pct": None, "mig_mode_current": True,
                "mig_mode_pending": True, "applied_generation": 0, "processes": [],
                "instances": [
                    {"gi_id": 9, "profile": "1g.10gb", "start": 0, "size": 1, "ci_ids": [0],
                     "memory_used_mib": 900, "utilization_pct": 55, "processes": [process]},
                    {"gi_id": 10, "profile": "1g.10gb", "start": 1, "size": 1, "ci_ids": [0],
                     "memory_used_mib": 0, "utilization_pct": 0, "processes": []},
                ],
            },
            {
                "uuid": "GPU-h100-1", "index": 1, "name": H100, "memory_total_mib": 81559,
                "memory_used_mib": 30000, "utilization_pct": 88, "mig_mode_current": False,
                "mig_mode_pending": False, "applied_generation": 0, "instances": [],
                "processes": [{"pid": 7, "used_memory_mib": 30000, "pod_uid": "uid-other"}],
            },
        ],
    }  # fmt: skip


@pytest.mark.django_db
def test_an_agent_report_becomes_samples_per_gpu_and_mig_instance_with_tenants(
    world: World, django_capture_on_commit_callbacks: Any
) -> None:
    _, secret = join_token_create(node_name="h100-node-1", actor=world.admin, cluster=world.h100)
    node, _ = agent_register(join_secret=secret, hostname="h100-node-1", agent_version="1.0")
    # The collector has seen team-a's pod (its namespace is team-a's).
    Pod.objects.create(
        cluster_id=world.h100.pk, uid="uid-train-1", namespace="team-a-training", name="train-1",
        tenant_id=world.team_a.pk, phase="Running", gpus=1, seen_at=timezone.now(),
    )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        agent_report_ingest(node=node, report=h100_report("h100-node-1"))
    rows = {(s.gpu_uuid, s.gi_id, s.metric): s for s in Sample.objects.filter(node_id=node.pk)}
    busy = rows[("GPU-h100-0", 9, Metric.GPU_UTILIZATION)]
    assert (busy.value, busy.tenant_id, busy.flavor_id) == (55, world.team_a.pk, world.h100_mig.pk)
    assert busy.mig_profile == "1g.10gb" and busy.cluster_id == world.h100.pk
    assert rows[("GPU-h100-0", 9, Metric.GPU_MEMORY_USED)].value == 900
    idle = rows[("GPU-h100-0", 10, Metric.GPU_UTILIZATION)]
    assert (idle.value, idle.tenant_id) == (0, None)
    whole = rows[("GPU-h100-1", None, Metric.GPU_UTILIZATION)]
    # A pod the collector has not seen: no tenant; the whole-GPU flavor by model.
    assert (whole.value, whole.tenant_id, whole.flavor_id) == (88, None, world.h100_gpu.pk)
    assert rows[("GPU-h100-1", None, Metric.GPU_PROCESSES)].value == 1
    # Reports every 10 s, samples once a minute per node (USAGE_AGENT_SAMPLE_EVERY_S).
    count = Sample.objects.count()
    with django_capture_on_commit_callbacks(execute=True):
        agent_report_ingest(node=node, report=h100_report("h100-node-1"))
    assert Sample.objects.count() == count
    # The MIG instance carries its tenant too, after every report (they are stored anew).
    tenants = dict(MigInstance.objects.filter(gpu__node=node).values_list("gi_id", "tenant_id"))
    assert tenants == {9: world.team_a.pk, 10: None}


def test_two_processes_share_one_sample_budget_per_node(settings: Any) -> None:
    """Each gunicorn worker has its own throttle and its own cache client, as two throttles
    with two cache connections here: a node sampled by one is not sampled again by the other
    within USAGE_AGENT_SAMPLE_EVERY_S (N workers do not accept N times the rate)."""
    settings.USAGE_AGENT_SAMPLE_EVERY_S = 1
    prefix = f"test-shared-{uuid.uuid4().hex}"
    first = services.SampleThrottle(cache=caches.create_connection("default"), prefix=prefix)
    second = services.SampleThrottle(cache=caches.create_connection("default"), prefix=prefix)
    assert first.due(node_id=7)
    assert not second.due(node_id=7)  # the other process sampled node 7 in this window
    assert not first.due(node_id=7)
    assert second.due(node_id=8)  # another node has its own window
    assert not first.due(node_id=8)
    time.sleep(1.2)  # the window passes: the next report is sampled, once
    assert second.due(node_id=7)
    assert not first.due(node_id=7)


def _api(handle: Handle) -> KubernetesBackend:
    return KubernetesBackend.from_kubeconfig(str(handle.kubeconfig_path))


def _pod(namespace: str, name: str, gpus: dict[str, str], phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        # Queued through Kueue, as the cluster's admission policy asks of GPU pods.
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "default"},
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "trainer:1",
                    "resources": {"limits": gpus, "requests": gpus},
                }
            ]
        },
        "status": {"phase": phase},
    }


def _workload(namespace: str, name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": "default",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "trainer:1",
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }


def _condition(kind: str, when: datetime, reason: str = "Done") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": kind,
        "lastTransitionTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


@pytest.mark.django_db
def test_the_collector_reads_pods_queues_workloads_and_quotas(
    world: World, standin: Handle
) -> None:
    assert cluster_reconcile(cluster=world.a100).ok  # the portal's ClusterQueues, quotas, ...
    api = _api(standin)
    try:
        created = []
        for ns, name, gpus, phase in (
            ("team-a-training", "train-1", {"nvidia.com/gpu": "4"}, "Running"),
            ("team-a-training", "train-2", {"nvidia.com/gpu": "2"}, "Running"),
            ("team-a-inference", "waiting", {"nvidia.com/gpu": "1"}, "Pending"),
            ("team-b-training", "b-1", {"nvidia.com/gpu": "1"}, "Running"),
        ):
            created.append(
                api._call("POST", f"/api/v1/namespaces/{ns}/pods", body=_pod(ns, name, gpus, phase))
            )
        # Kueue's view of team-a: 7 A100s in use, 1 of them borrowed; 2 pending workloads.
        api._call(
            "PATCH",
            f"{KUEUE}/clusterqueues/team-a/status",
            body={
                "status": {
                    "pendingWorkloads": 2,
                    "admittedWorkloads": 3,
                    "flavorsUsage": [
                        {"name": "a100-80gb", "resources": [
                            {"name": "nvidia.com/gpu", "total": "7", "borrowed": "1"},
                            {"name": "cpu", "total": "56", "borrowed": "0"},
                        ]}
                    ],
                }
            },
            content_type="application/merge-patch+json",
        )  # fmt: skip
        t0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
        ns = "team-a-training"
        for name, conditions, stats in (
            ("wl-admitted", [_condition("QuotaReserved", t0 + timedelta(minutes=10)),
                             _condition("Admitted", t0 + timedelta(minutes=10))], []),
            ("wl-preempted", [_condition("Evicted", t0 + timedelta(minutes=30), "Preempted")],
             [{"reason": "Preempted", "underlyingCause": "", "count": 2},
              {"reason": "PodsReadyTimeout", "underlyingCause": "", "count": 1}]),
            ("wl-done", [_condition("Admitted", t0 + timedelta(minutes=2)),
                         _condition("Finished", t0 + timedelta(hours=2))], []),
        ):  # fmt: skip
            api._call("POST", f"{KUEUE}/namespaces/{ns}/workloads", body=_workload(ns, name, 2))
            status: dict[str, Any] = {"conditions": conditions}
            if stats:
                status["schedulingStats"] = {"evictions": stats}
            api._call(
                "PATCH", f"{KUEUE}/namespaces/{ns}/workloads/{name}/status",
                body={"status": status}, content_type="application/merge-patch+json",
            )  # fmt: skip
    finally:
        api.close()
    now = timezone.now()
    outcome = collector.cluster_collect(cluster=world.a100, now=now)
    assert outcome.reachable, outcome.message
    assert outcome.pods == 4 and outcome.workloads == 3

    def value(metric: int, tenant: Any, flavor: Any = world.a100_gpu) -> float:
        sample = Sample.objects.get(
            time=now, metric=metric, tenant_id=tenant.pk,
            flavor_id=flavor.pk if flavor is not None else None, cluster_id=world.a100.pk,
        )  # fmt: skip
        return sample.value

    assert value(Metric.GPUS_ALLOCATED, world.team_a) == 6  # running pods only
    assert value(Metric.GPUS_ALLOCATED, world.team_b) == 1
    assert value(Metric.GPUS_ALLOCATED, world.team_c) == 0  # a series even with nothing running
    assert value(Metric.QUOTA_USED, world.team_a) == 7
    assert value(Metric.QUOTA_BORROWED, world.team_a) == 1
    assert value(Metric.QUOTA_GUARANTEED, world.team_a) == 6
    assert value(Metric.QUOTA_LIMIT, world.team_a) == 10
    assert value(Metric.WORKLOADS_PENDING, world.team_a, None) == 2
    # pod uid -> tenant, for the agents' processes.
    uids = {p["metadata"]["uid"]: p["metadata"]["namespace"] for p in created}
    pods = dict(Pod.objects.values_list("uid", "tenant_id"))
    assert pods == {
        uid: (world.team_a.pk if ns.startswith("team-a") else world.team_b.pk)
        for uid, ns in uids.items()
    }
    # Workload lifecycles: queue wait from creation to admission; evictions and preemptions.
    rows = {w.name: w for w in Workload.objects.filter(cluster=world.a100)}
    assert rows["wl-admitted"].state == WorkloadState.ADMITTED
    assert rows["wl-admitted"].admitted_at == t0 + timedelta(minutes=10)
    assert rows["wl-admitted"].tenant_id == world.team_a.pk and rows["wl-admitted"].gpus == 2
    assert (rows["wl-preempted"].state, rows["wl-preempted"].evictions, rows["wl-preempted"].preemptions) == (
        WorkloadState.EVICTED, 3, 2,
    )  # fmt: skip
    assert rows["wl-done"].finished_at == t0 + timedelta(hours=2)
    # A second reading a minute later: idempotent for workloads, new samples.
    later = now + timedelta(minutes=1)
    again = collector.cluster_collect(cluster=world.a100, now=later)
    assert again.workloads == 3 and Workload.objects.count() == 3
    assert Workload.objects.get(name="wl-preempted").evictions == 3
    # The rollups and selectors see it.
    services.rollups_run_all(now=later)
    stats = selectors.workload_stats(
        start=now - timedelta(days=30),
        end=later + timedelta(minutes=1),
        tenant_ids=[world.team_a.pk],
    )[world.team_a.pk]
    assert (stats.evictions, stats.preemptions) == (3, 2)
    current = selectors.usage_now(tenant_ids=[world.team_a.pk], now=later)
    assert current[(world.a100.pk, world.team_a.pk, world.a100_gpu.pk)][Metric.QUOTA_USED] == 7


@pytest.mark.django_db
def test_an_unreachable_cluster_stores_nothing_and_says_why(world: World, standin: Handle) -> None:
    standin.fail_next(5, 503)
    outcome = collector.cluster_collect(cluster=world.a100)
    assert not outcome.reachable and "unable to handle the request" in outcome.message
    assert Sample.objects.count() == 0


def test_a_pod_in_a_scoped_quota_too_is_counted_once():
    from usage.collector import FlavorIndex, quota_gpu_used

    flavors = FlavorIndex(by_name={}, mig={}, gpu_by_product={}, only_gpu=7)
    used = {"status": {"used": {"requests.nvidia.com/gpu": "3", "requests.cpu": "2"}}}
    quotas = [
        {"metadata": {"namespace": "team-a-training", "name": "gpu-portal-quota"}, **used},
        {
            "metadata": {"namespace": "team-a-training", "name": "gpu-portal-batch"},
            "spec": {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass"}]}},
            **used,
        },
        {"metadata": {"namespace": "elsewhere", "name": "q"}, **used},
    ]
    assert quota_gpu_used(quotas, {"team-a-training": 1}, flavors) == {(1, 7): 3.0}
