"""Per-workload GPU activity from the cluster's Prometheus (the DCGM exporter's ``namespace``
and ``pod`` labels), for clusters where Prometheus, not the node agents, gives utilisation:
the idle rule then judges each workload by its own GPUs there too. A real Prometheus scrapes
simulated DCGM endpoints (tests/prometheus/server.py)."""

from __future__ import annotations

from django.utils import timezone

from tests.conftest import World
from tests.prometheus.server import Handle, new_cluster_label
from tests.usage.test_prometheus import _namespace, _soon, _source
from usage.models import Pod, WorkloadActivity
from usage.prometheus import prometheus_collect


def test_each_workloads_own_gpus_give_its_hourly_peak(
    world: World, prometheus_server: Handle
) -> None:
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    ns_a = _namespace(world.team_a)
    exporters.gpu(label, gpu=0, namespace=ns_a, pod="busy-0", util=85, memory_mib=40960)
    exporters.gpu(label, gpu=1, namespace=ns_a, pod="stuck-0", util=0, memory_mib=20480)
    exporters.gpu(label, gpu=2, namespace=ns_a, pod="no-workload", util=50, memory_mib=1024)
    prometheus_server.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{cluster="{label}"}}', count=3)
    _source(world, world.a100, prometheus_server.url, label)
    # What the collector stores from the cluster's API: each pod and its Kueue Workload.
    for name, workload in (("busy-0", "wl-busy"), ("stuck-0", "wl-stuck"), ("no-workload", "")):
        Pod.objects.create(
            cluster_id=world.a100.pk, uid=f"uid-{name}", namespace=ns_a, name=name,
            tenant_id=world.team_a.pk, phase="Running", gpus=1, workload_uid=workload,
            seen_at=timezone.now(),
        )  # fmt: skip

    outcome = prometheus_collect(cluster=world.a100, now=_soon())

    assert outcome is not None and outcome.ok, outcome
    peaks: dict[str, float] = {}
    for uid, peak in WorkloadActivity.objects.filter(cluster_id=world.a100.pk).values_list(
        "workload_uid", "peak_utilization"
    ):
        peaks[uid] = max(peaks.get(uid, 0.0), peak)
    assert peaks == {"wl-busy": 85.0, "wl-stuck": 0.0}
