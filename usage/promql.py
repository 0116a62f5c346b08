"""PromQL the usage collector sends to a cluster's Prometheus, and the label matchers an admin
adds for a store that holds several clusters. No I/O."""

from __future__ import annotations

import re
from collections.abc import Sequence

from quotas.choices import MIG_RESOURCE_PREFIX

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def parse_label_matchers(text: str) -> list[str]:
    """``cluster="a", region=~"eu-.*"`` -> the matchers, or ValueError saying what is wrong."""
    out: list[str] = []
    rest = text.strip()
    while rest:
        match = _MATCHER.match(rest)
        if match is None:
            raise ValueError(
                f'{rest[:40]!r} is not a label matcher: write name="value" (or !=, =~, !~), '
                "separated by commas."
            )
        out.append(f'{match[1]}{match[2]}"{match[3]}"')
        rest = rest[match.end() :]
        if rest.startswith(","):
            rest = rest[1:].lstrip()
            if not rest:
                raise ValueError("a comma must be followed by another matcher.")
        elif rest:
            raise ValueError(f"{rest[:40]!r}: matchers are separated by commas.")
    return out


def selector(metric: str, matchers: Sequence[str], *extra: str) -> str:
    inner = ", ".join([*extra, *matchers])
    return f"{metric}{{{inner}}}" if inner else metric


def kube_resource_name(resource: str) -> str:
    """kube-state-metrics' spelling of a resource name: ``nvidia.com/mig-1g.10gb`` ->
    ``nvidia_com_mig_1g_10gb``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", resource)


GPU_RESOURCES_RE = (
    f"{kube_resource_name('nvidia.com/gpu')}|{kube_resource_name(MIG_RESOURCE_PREFIX)}.+"
)
KUEUE_GPU_RE = "nvidia.com/gpu|nvidia.com/mig-.+"


def queries(matchers: Sequence[str]) -> dict[str, str]:
    """Every PromQL expression the collector sends, by name (also checked by the tests).
    Kueue's admission wait histogram is read as its raw ``_count`` and ``_sum`` counters: the
    collector takes the differences between points itself, so an admission scraped across a
    step boundary is not lost as it would be to ``increase(...[step])``."""
    m = list(matchers)
    wait = "kueue_admission_wait_time_seconds"
    running = selector("kube_pod_status_phase", m, 'phase="Running"')
    requests_q = selector(
        "kube_pod_container_resource_requests", m, f'resource=~"{GPU_RESOURCES_RE}"'
    )
    return {
        "util": selector("DCGM_FI_DEV_GPU_UTIL", m),
        "engine": selector("DCGM_FI_PROF_GR_ENGINE_ACTIVE", m),
        "memory": selector("DCGM_FI_DEV_FB_USED", m),
        "requests": (
            f"sum by (namespace, resource, node) ({requests_q} "
            f"* on (namespace, pod) group_left () ({running} == 1))"
        ),
        "kueue_usage": selector(
            "kueue_cluster_queue_resource_usage", m, f'resource=~"{KUEUE_GPU_RE}"'
        ),
        "kueue_reservation": selector(
            "kueue_cluster_queue_resource_reservation", m, f'resource=~"{KUEUE_GPU_RE}"'
        ),
        "kueue_pending": f"sum by (cluster_queue) ({selector('kueue_pending_workloads', m)})",
        "kueue_admitted": selector("kueue_admitted_active_workloads", m),
        "kueue_admissions": selector(f"{wait}_count", m),
        "kueue_admission_wait": selector(f"{wait}_sum", m),
        "node_labels": selector("kube_node_labels", m),
        # HAMi's vGPU monitor (per container: memory in bytes, SM use in percent of the GPU;
        # per device: its model), under the names of HAMi 2.10 on and the older ones (which
        # 2.10 still exports with --legacy-metrics).
        "hami_memory": selector("hami_vgpu_memory_used_bytes", m),
        "hami_memory_legacy": selector("vGPU_device_memory_usage_in_bytes", m),
        "hami_cores": selector("hami_container_device_utilization_ratio", m),
        "hami_cores_legacy": selector("Device_utilization_desc_of_container", m),
        "hami_devices": selector("hami_host_gpu_memory_used_bytes", m),
        "hami_devices_legacy": selector("HostGPUMemoryUsage", m),
        "volume_available": selector("kubelet_volume_stats_available_bytes", m),
        "volume_capacity": selector("kubelet_volume_stats_capacity_bytes", m),
    }
