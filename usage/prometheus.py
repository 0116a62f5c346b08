"""A cluster's Prometheus as a usage source: PromQL over the HTTP API (``/api/v1/query_range``).

What is read (the exporters' own metric and label names):

- NVIDIA's DCGM exporter: ``DCGM_FI_DEV_GPU_UTIL`` (percent), ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``
  (a ratio; preferred where present, the only one MIG instances report), ``DCGM_FI_DEV_FB_USED``
  (MiB), labelled ``gpu``, ``UUID``, ``modelName``, ``Hostname`` (``hostname`` from the
  exporter's next release on: both are read), ``GPU_I_PROFILE`` /
  ``GPU_I_ID`` for MIG instances and ``namespace`` / ``pod`` / ``container`` of the pod using
  the device (``exported_namespace`` / ``exported_pod`` where Prometheus renamed them because
  the scrape target had its own: a ServiceMonitor without ``honorLabels``);
- kube-state-metrics: ``kube_pod_container_resource_requests`` with ``resource`` =
  ``nvidia_com_gpu`` or a MIG resource (``nvidia_com_mig_1g_10gb``), counted for running pods
  (``kube_pod_status_phase{phase="Running"}``), by the pod's ``node``; where a cluster has
  several whole-GPU flavors, ``kube_node_labels`` (the ``label_*`` kube-state-metrics exports
  for the labels its ``--metric-labels-allowlist`` names, in snake_case: ``kube_label_name``)
  tells which flavor's node labels
  each node carries, so a whole GPU's request gets its flavor;
- Kueue: ``kueue_cluster_queue_resource_usage`` and ``..._resource_reservation`` (per
  ``cluster_queue``, ``flavor``, ``resource``; Kueue exports them only where its configuration
  sets ``metrics.enableClusterQueueResources: true``, and their absence is a warning on the
  source), ``kueue_pending_workloads`` and
  ``kueue_admitted_active_workloads`` (per ``cluster_queue``), and the admission wait
  histogram ``kueue_admission_wait_time_seconds`` (per ``cluster_queue``): its ``_count`` and
  ``_sum`` counters, differenced here into admissions and seconds waited per step;
- HAMi's vGPU monitor (``hami-device-plugin``'s ``:31992/metrics``; HAMi's "Real-time device
  usage" page), for vGPU flavors: per container ``hami_vgpu_memory_used_bytes`` (bytes) and
  ``hami_container_device_utilization_ratio`` (SM use, percent of the GPU), labelled
  ``namespace``, ``pod``, ``container``, ``vdevice_index``, ``device_uuid``, and per GPU
  ``hami_host_gpu_memory_used_bytes`` (its ``device_type``, ``NVIDIA-`` and the model, tells
  the flavor where a cluster has several vGPU flavors); before HAMi 2.10 (and in 2.10 with
  ``--legacy-metrics``) ``vGPU_device_memory_usage_in_bytes``,
  ``Device_utilization_desc_of_container`` and ``HostGPUMemoryUsage``, labelled
  ``podnamespace``, ``podname``, ``ctrname``, ``vdeviceid``, ``deviceuuid``, ``devicetype``:
  the new names are read where they give any series, else the old ones. Summed per tenant at
  each step: the GPU memory and compute its containers use of its vGPU shares;
- the kubelet: ``kubelet_volume_stats_available_bytes`` / ``_capacity_bytes`` (per
  ``namespace``, ``persistentvolumeclaim``).

Series map to tenants by namespace (``tenants.Namespace``; Kueue's by ClusterQueue, which the
portal names after the tenant), and DCGM's to nodes by ``node`` (where the scrape relabels it
in) or ``Hostname``: the samples carry the node's id where its agent registered it, and each
GPU seen is kept (``PrometheusGpu``) for the admin heatmap. A series in a namespace no tenant owns is ignored and counted,
and logged once (when the set of such namespaces changes). Every query has a timeout (told to
the server too), retries with backoff on connection errors and 429 / 502 / 503 / 504, and a
bounded number of points; a failure is recorded on the cluster's ``PrometheusSource`` and stops
nothing else (each cluster is collected by its own task).

``PrometheusClient`` and the parsing helpers know no Django model; ``prometheus_collect`` does
the reading and storing for one cluster.
"""

from __future__ import annotations

import logging
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import requests
from django.db import transaction
from django.utils import timezone
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpu_agent.models import Node
from quotas.choices import MIG_RESOURCE_PREFIX
from quotas.models import Cluster, ResourceFlavor
from tenants.models import Namespace, Tenant
from usage.choices import Metric, PrometheusFigure, Resolution, Source
from usage.models import Pod, PrometheusGpu, PrometheusSource, VolumeRoom
from usage.promql import kube_resource_name, parse_label_matchers, queries
from usage.services import (
    SampleRow,
    bucket_start,
    prometheus_secrets_dir_holds,
    prometheus_secrets_dir_refusal,
    quota_readings_judge,
    samples_write,
    workload_activity_record,
)

logger = logging.getLogger(__name__)

MAX_POINTS_PER_SERIES = 500  # far under Prometheus' own 11,000
MAX_WINDOW = timedelta(hours=1)  # the most one pass reads back after a gap
FIRST_WINDOW = timedelta(minutes=5)
UNKNOWN_KEPT = 20  # namespaces listed on the status (the count is whole)
WHOLE_GPU_KSM = kube_resource_name("nvidia.com/gpu")


class PrometheusError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Series:
    labels: dict[str, str]
    values: list[tuple[datetime, float]]


@dataclass
class RangeResult:
    series: list[Series]
    warnings: list[str] = field(default_factory=list)


class PrometheusClient:
    """The HTTP API of one Prometheus-compatible server (requests + urllib3's Retry)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10,
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        ca_bundle: str | None = None,
        retries: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        self.base = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        retry = Retry(
            total=retries,
            connect=retries,
            read=0,  # a slow server stays slow: one timeout is enough
            status=retries,
            backoff_factor=backoff_s,
            status_forcelist=(429, 502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),
            raise_on_status=False,
        )
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        if bearer_token:
            self.session.headers["Authorization"] = f"Bearer {bearer_token}"
        if basic_auth:
            self.session.auth = basic_auth
        self.session.verify = ca_bundle or True
        self.requests = 0

    def close(self) -> None:
        self.session.close()

    def query_range(
        self, query: str, *, start: datetime, end: datetime, step: timedelta
    ) -> RangeResult:
        step_s = step.total_seconds()
        if (end - start).total_seconds() / step_s > MAX_POINTS_PER_SERIES:
            raise PrometheusError(
                f"the range asks for more than {MAX_POINTS_PER_SERIES} points a series."
            )
        form = {
            "query": query,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{step_s:g}",
            "timeout": f"{self.timeout_s:g}s",
        }
        self.requests += 1
        try:
            response = self.session.post(
                f"{self.base}/api/v1/query_range", data=form, timeout=self.timeout_s
            )
        except requests.RequestException as exc:
            # urllib3 wraps a read timeout it will not retry in a MaxRetryError.
            if isinstance(exc, requests.Timeout) or "Read timed out" in str(exc):
                unit = "second" if self.timeout_s == 1 else "seconds"
                raise PrometheusError(
                    f"{self.base} did not answer within {self.timeout_s:g} {unit}."
                ) from None
            raise PrometheusError(f"{self.base} could not be reached: {_reason(exc)}") from None
        try:
            body = response.json()
        except ValueError:
            raise PrometheusError(
                f"{self.base} answered {response.status_code} without a JSON body."
            ) from None
        if response.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(
                f"{self.base} answered {response.status_code}: "
                f"{body.get('errorType', 'error')}: {body.get('error', 'no reason given')}"
            )
        data = body.get("data") or {}
        if data.get("resultType") != "matrix":
            raise PrometheusError(f"a range query answered {data.get('resultType')!r}.")
        series = []
        for item in data.get("result") or []:
            values = []
            for ts, text in item.get("values") or []:
                value = float(text)
                if math.isfinite(value):
                    values.append((datetime.fromtimestamp(float(ts), tz=UTC), value))
            series.append(Series(dict(item.get("metric") or {}), values))
        return RangeResult(series, [str(w) for w in body.get("warnings") or []])


def _reason(exc: Exception) -> str:
    if isinstance(exc, requests.exceptions.InvalidHeader):
        return "a header could not be sent."  # its text quotes the header: a credential
    text = str(exc)
    if "Connection refused" in text or "ConnectionRefused" in text:
        return "connection refused."
    if "Max retries exceeded" in text:
        return (
            "no connection after retries (" + text.rsplit("(Caused by ", 1)[-1].rstrip(")") + ")."
        )
    return text[:300]


# RFC 6750's b64token: what a bearer token is made of (a Kubernetes token, a JWT, fit it).
BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def _read_secret(path: str, what: str) -> str:
    """The file's contents, stripped; only from PROMETHEUS_SECRETS_DIR (links followed). No
    error says what the file holds: what is read goes to the URL, what is said to last_error."""
    if not prometheus_secrets_dir_holds(path, resolve=True):
        raise PrometheusError(f"the {what} file: {prometheus_secrets_dir_refusal(path)}")
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "it is not text"
        raise PrometheusError(f"the {what} file {path} could not be read: {reason}.") from None


def client_for(source: PrometheusSource) -> PrometheusClient:
    token = None
    if source.bearer_token_file:
        token = _read_secret(source.bearer_token_file, "bearer token")
        if not BEARER_TOKEN.fullmatch(token):
            raise PrometheusError(
                f"the bearer token file {source.bearer_token_file} does not hold a bearer token "
                "(one line of letters, digits and -._~+/, then any =)."
            )
    auth = None
    if source.basic_auth_user:
        password = (
            _read_secret(source.basic_auth_password_file, "password")
            if source.basic_auth_password_file
            else ""
        )
        auth = (source.basic_auth_user, password)
    return PrometheusClient(
        source.url,
        timeout_s=source.query_timeout_s,
        bearer_token=token,
        basic_auth=auth,
        ca_bundle=source.ca_bundle or None,
    )


# --- what the series say ---------------------------------------------------------------------


def _namespace(labels: Mapping[str, str]) -> str:
    return labels.get("exported_namespace") or labels.get("namespace") or ""


def _pod(labels: Mapping[str, str]) -> str:
    return labels.get("exported_pod") or labels.get("pod") or ""


def _node(labels: Mapping[str, str]) -> str:
    """The node a DCGM series is from: a ``node`` label where the scrape added one (relabelled
    from the pod's node name), else the exporter's ``Hostname`` (the node's name where the
    exporter is given ``NODE_NAME``, as NVIDIA's Helm chart does), which its next release
    spells ``hostname``: both are read."""
    return labels.get("node") or labels.get("Hostname") or labels.get("hostname") or ""


@dataclass
class SeriesOwners:
    """Who a series belongs to: namespaces and ClusterQueues to tenants, GPU models and
    resources to the cluster's flavors."""

    ns_tenant: dict[str, int]
    cq_tenant: dict[str, int]
    flavor_by_model: dict[tuple[str, str], int]  # (modelName, MIG profile or "")
    flavor_by_resource: dict[str, int]  # kube-state-metrics resource -> flavor
    flavor_by_name: dict[str, int]
    node_by_name: dict[str, int] = field(default_factory=dict)  # registered agents' nodes
    # Where the cluster has several whole-GPU flavors: each one's node labels (Kueue's
    # ResourceFlavor nodeLabels), to tell by a pod's node which flavor its GPUs are.
    gpu_flavor_labels: dict[int, dict[str, str]] = field(default_factory=dict)
    node_flavor: dict[str, int | None] = field(default_factory=dict)  # node -> flavor, read
    unknown: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def tenant_of(self, labels: Mapping[str, str]) -> tuple[bool, int | None]:
        """(known, tenant id). A series with no namespace (an idle GPU) is known, no tenant."""
        namespace = _namespace(labels)
        if not namespace:
            return True, None
        tenant_id = self.ns_tenant.get(namespace)
        if tenant_id is None:
            self.unknown[namespace] += 1
            return False, None
        return True, tenant_id


def mapping_for(cluster: Cluster) -> SeriesOwners:
    flavors = list(ResourceFlavor.objects.filter(cluster=cluster, kind__in=["gpu", "mig"]))
    by_model: dict[tuple[str, str], int] = {}
    by_resource: dict[str, int] = {}
    gpus = []
    for f in flavors:
        profile = f.mig_profile if f.kind == "mig" else ""
        by_model.setdefault((f.gpu_model, profile), f.pk)
        if f.kind == "mig" and f.mig_profile:
            by_resource.setdefault(
                kube_resource_name(f"{MIG_RESOURCE_PREFIX}{f.mig_profile}"), f.pk
            )
        elif f.kind == "gpu":
            gpus.append(f.pk)
    if len(gpus) == 1:  # whole GPUs: one flavor, so the resource name says it
        by_resource[kube_resource_name("nvidia.com/gpu")] = gpus[0]
    # Several: by the labels of the pod's node (kube_node_labels), where flavors name labels.
    gpu_labels = {
        f.pk: {str(k): str(v) for k, v in (f.node_labels or {}).items()}
        for f in flavors
        if len(gpus) > 1 and f.kind == "gpu" and f.node_labels
    }
    return SeriesOwners(
        ns_tenant=dict(Namespace.objects.values_list("name", "tenant_id")),
        cq_tenant=dict(Tenant.objects.values_list("slug", "pk")),
        flavor_by_model=by_model,
        flavor_by_resource=by_resource,
        flavor_by_name={f.name: f.pk for f in flavors},
        node_by_name=_nodes_by_name(cluster),
        gpu_flavor_labels=gpu_labels,
    )


_KSM_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_KSM_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def kube_label_name(label: str) -> str:
    """kube-state-metrics' spelling of a Kubernetes label in ``kube_node_labels``
    (``internal/store/utils.go``: ``prefix + "_" + toSnakeCase(sanitizeLabelName(key))``):
    every character outside ``[a-zA-Z0-9_]`` becomes ``_``, then ``_`` goes before an
    upper-case letter that follows a lower-case letter or a digit, and all is lower-cased:
    ``nvidia.com/gpu.product`` -> ``label_nvidia_com_gpu_product``, ``camelCase`` ->
    ``label_camel_case``. (Two allowed labels of one node that come out the same get
    ``_conflict1``, ``_conflict2`` there: not followed here, a flavor names distinct labels.)"""
    snake = _KSM_CAMEL.sub(r"\1_\2", _KSM_INVALID.sub("_", label))
    return "label_" + snake.lower()


def node_flavors(
    *, node_labels: Iterable[Series], flavor_labels: Mapping[int, Mapping[str, str]]
) -> dict[str, int | None]:
    """Node name -> the one whole-GPU flavor whose node labels the node carries (None where
    none or several do), from ``kube_node_labels`` (the labels kube-state-metrics was allowed
    to export: ``--metric-labels-allowlist=nodes=[nvidia.com/gpu.product,...]``)."""
    out: dict[str, int | None] = {}
    for series in node_labels:
        node = series.labels.get("node", "")
        if not node:
            continue
        matching = [
            flavor_id
            for flavor_id, wanted in flavor_labels.items()
            if all(series.labels.get(kube_label_name(k)) == v for k, v in wanted.items())
        ]
        out[node] = matching[0] if len(matching) == 1 else None
    return out


def _nodes_by_name(cluster: Cluster) -> dict[str, int]:
    """The cluster's registered nodes by name, and by hostname where that differs."""
    found: dict[str, int] = {}
    for pk, name, hostname in Node.objects.filter(cluster=cluster).values_list(
        "pk", "name", "hostname"
    ):
        found[name] = pk
        if hostname:
            found.setdefault(hostname, pk)
    return found


def _flavor_of_device(mapping: SeriesOwners, labels: Mapping[str, str]) -> int | None:
    model = labels.get("modelName", "")
    profile = labels.get("GPU_I_PROFILE", "")
    found = mapping.flavor_by_model.get((model, profile))
    if found is None and not model.startswith("NVIDIA "):
        found = mapping.flavor_by_model.get((f"NVIDIA {model}", profile))
    return found


def _device_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return (labels.get("UUID", ""), labels.get("GPU_I_ID", ""), _pod(labels))


def _gi_id(labels: Mapping[str, str]) -> int | None:
    text = labels.get("GPU_I_ID", "")
    return int(text) if text.isdigit() else None


def device_rows(
    *,
    util: Iterable[Series],
    engine: Iterable[Series],
    memory: Iterable[Series],
    mapping: SeriesOwners,
    cluster_id: int,
) -> list[SampleRow]:
    """DCGM series as samples per device (GPU or MIG instance) and pod: utilisation in percent
    (graphics engine activity x 100 where the exporter has it, else ``DCGM_FI_DEV_GPU_UTIL``)
    and framebuffer memory used in MiB; on the node's id where its agent registered it."""
    rows: list[SampleRow] = []
    chosen = _utilisation_series(util, engine)
    for metric, pairs in (
        (Metric.GPU_UTILIZATION, chosen),
        (Metric.GPU_MEMORY_USED, [(s, 1.0) for s in memory]),
    ):
        for series, scale in pairs:
            known, tenant_id = mapping.tenant_of(series.labels)
            if not known:
                continue
            labels = series.labels
            flavor_id = _flavor_of_device(mapping, labels)
            uuid = labels.get("UUID") or None
            profile = labels.get("GPU_I_PROFILE") or None
            node_id = mapping.node_by_name.get(_node(labels))
            for when, value in series.values:
                rows.append(
                    (when, int(metric), max(value * scale, 0.0), cluster_id, tenant_id, flavor_id,
                     node_id, uuid, _gi_id(labels), profile)
                )  # fmt: skip
    return rows


# HAMi's labels before 2.10 -> its labels since (``cmd/vGPUmonitor/metrics.go``).
HAMI_LEGACY_LABELS = {
    "podnamespace": "namespace",
    "podname": "pod",
    "ctrname": "container",
    "vdeviceid": "vdevice_index",
    "deviceuuid": "device_uuid",
    "devicetype": "device_type",
}


def hami_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """A HAMi series' labels under the names HAMi 2.10 gives them (older ones renamed)."""
    out = dict(labels)
    for old, new in HAMI_LEGACY_LABELS.items():
        if old in labels and not out.get(new):
            out[new] = labels[old]
    return out


def vgpu_flavors_of(cluster: Cluster) -> dict[str, int]:
    """The cluster's vGPU flavors: GPU model -> flavor id."""
    return dict(
        ResourceFlavor.objects.filter(cluster=cluster, kind="vgpu").values_list("gpu_model", "pk")
    )


def hami_rows(
    *,
    memory: Iterable[Series],
    cores: Iterable[Series],
    devices: Iterable[Series],
    mapping: SeriesOwners,
    vgpu_flavors: Mapping[str, int],
    cluster_id: int,
) -> list[SampleRow]:
    """HAMi's per-container series summed per tenant, vGPU flavor and step: GPU memory used
    (MiB, from bytes) and compute used (percent points of a GPU). A device's flavor follows
    from its model (``device_type``, ``NVIDIA-`` and NVML's name, on the per-GPU series), or
    is the cluster's one vGPU flavor; a container in a namespace no tenant owns is ignored
    (and counted), as every other series is."""
    models: dict[str, str] = {}
    for series in devices:
        labels = hami_labels(series.labels)
        kind = labels.get("device_type", "")
        models[labels.get("device_uuid", "")] = kind.removeprefix("NVIDIA-")
    only = next(iter(vgpu_flavors.values())) if len(vgpu_flavors) == 1 else None
    totals: dict[tuple[int, int, int, datetime], float] = defaultdict(float)
    for metric, scale, group in (
        (Metric.VGPU_MEMORY_USED, 1 / 1024**2, memory),
        (Metric.VGPU_CORES_USED, 1.0, cores),
    ):
        for series in group:
            labels = hami_labels(series.labels)
            known, tenant_id = mapping.tenant_of(labels)
            if not known or tenant_id is None:
                continue
            model = models.get(labels.get("device_uuid", ""), "")
            flavor_id = vgpu_flavors.get(model, only)
            if flavor_id is None:
                continue
            for when, value in series.values:
                if math.isfinite(value):
                    totals[(int(metric), tenant_id, flavor_id, when)] += max(value, 0.0) * scale
    return [
        (when, metric, round(value, 3), cluster_id, tenant_id, flavor_id, None, None, None, None)
        for (metric, tenant_id, flavor_id, when), value in sorted(totals.items())
    ]


def gpus_store(*, cluster: Cluster, series: Iterable[Series], now: datetime) -> int:
    """Each GPU the DCGM series show (by UUID): its node, index and model, and whether any of
    its series is a MIG instance's; one row per GPU, updated in place."""
    seen: dict[str, PrometheusGpu] = {}
    for s in series:
        labels = s.labels
        uuid, node, index = labels.get("UUID", ""), _node(labels), labels.get("gpu", "")
        if not uuid or not node or not index.isdigit():
            continue
        gpu = seen.setdefault(
            uuid,
            PrometheusGpu(
                cluster=cluster, uuid=uuid, node=node[:253], index=int(index),
                model=labels.get("modelName", "")[:100], seen_at=now,
            ),
        )  # fmt: skip
        gpu.mig = gpu.mig or bool(labels.get("GPU_I_PROFILE"))
    if seen:
        PrometheusGpu.objects.bulk_create(
            list(seen.values()),
            update_conflicts=True,
            unique_fields=["cluster", "uuid"],
            update_fields=["node", "index", "model", "mig", "seen_at"],
        )
    return len(seen)


def _utilisation_series(
    util: Iterable[Series], engine: Iterable[Series]
) -> list[tuple[Series, float]]:
    """Per device and pod, the series its utilisation is read from, with the scale to percent:
    graphics engine activity where the exporter has it, else ``DCGM_FI_DEV_GPU_UTIL``."""
    engine_by_device = {_device_key(s.labels): s for s in engine}
    util_by_device = {_device_key(s.labels): s for s in util}
    chosen: list[tuple[Series, float]] = [(s, 100.0) for s in engine_by_device.values()]
    chosen += [(s, 1.0) for k, s in util_by_device.items() if k not in engine_by_device]
    return chosen


def workload_activity_store(
    *, util: Iterable[Series], engine: Iterable[Series], cluster_id: int
) -> int:
    """Each Workload's hourly peak from the DCGM series of its pods (``namespace`` / ``pod``
    labels -> the collector's pods -> their Workload): what the idle rule judges a workload
    by where the cluster's Prometheus, not the node agents, gives GPU utilisation."""
    by_pod = {
        (namespace, name): uid
        for namespace, name, uid in Pod.objects.filter(cluster_id=cluster_id)
        .exclude(workload_uid="")
        .values_list("namespace", "name", "workload_uid")
    }
    if not by_pod:
        return 0
    hours: dict[datetime, dict[str, float]] = defaultdict(dict)
    for series, scale in _utilisation_series(util, engine):
        uid = by_pod.get((_namespace(series.labels), _pod(series.labels)))
        if uid is None:
            continue
        for when, value in series.values:
            peaks = hours[bucket_start(when, Resolution.HOUR)]
            peaks[uid] = max(peaks.get(uid, 0.0), max(value * scale, 0.0))
    return sum(
        workload_activity_record(cluster_id=cluster_id, at=hour, peaks=peaks)
        for hour, peaks in sorted(hours.items())
    )


def request_rows(
    *, requests_: Iterable[Series], mapping: SeriesOwners, cluster_id: int
) -> list[SampleRow]:
    """kube-state-metrics' GPU requests of running pods, summed per namespace and resource;
    on a cluster with several whole-GPU flavors, a whole GPU's flavor is the one its pod's node
    carries the labels of (``mapping.node_flavor``), else none."""
    totals: dict[tuple[int, int | None, datetime], float] = defaultdict(float)
    for series in requests_:
        known, tenant_id = mapping.tenant_of(series.labels)
        if not known or tenant_id is None:
            continue
        resource = series.labels.get("resource", "")
        flavor_id = mapping.flavor_by_resource.get(resource)
        if flavor_id is None and resource == WHOLE_GPU_KSM:
            flavor_id = mapping.node_flavor.get(series.labels.get("node", ""))
        for when, value in series.values:
            totals[(tenant_id, flavor_id, when)] += value
    return [
        (when, int(Metric.GPUS_ALLOCATED), value, cluster_id, tenant_id, flavor_id,
         None, None, None, None)
        for (tenant_id, flavor_id, when), value in sorted(
            totals.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1] or 0)
        )
    ]  # fmt: skip


def kueue_rows(
    *,
    usage: Iterable[Series],
    reservation: Iterable[Series],
    pending: Iterable[Series],
    admitted: Iterable[Series],
    mapping: SeriesOwners,
    cluster_id: int,
    admissions: Iterable[Series] = (),
    admission_wait: Iterable[Series] = (),
    since: datetime | None = None,
) -> list[SampleRow]:
    """Kueue's ClusterQueue metrics (the portal names a tenant's ClusterQueue after it); from
    the admission wait histogram, per step where workloads were admitted, how many and their
    waits summed (its ``_count`` and ``_sum``: means over any period add up exactly, which
    quantiles of each step would not). ``since``: the time of the counters' base point."""
    rows: list[SampleRow] = []
    per_flavor: dict[tuple[int, int, int, datetime], float] = defaultdict(float)
    for metric, series_list in ((Metric.QUOTA_USED, usage), (Metric.QUOTA_RESERVED, reservation)):
        for series in series_list:
            queue = series.labels.get("cluster_queue", "")
            tenant_id = mapping.cq_tenant.get(queue)
            flavor_id = mapping.flavor_by_name.get(series.labels.get("flavor", ""))
            if tenant_id is None:
                mapping.unknown[f"ClusterQueue {queue}"] += 1
                continue
            if flavor_id is None:
                continue
            for when, value in series.values:
                per_flavor[(int(metric), tenant_id, flavor_id, when)] += value
    for (code, tenant_id, flavor_id, when), value in sorted(per_flavor.items()):
        rows.append((when, code, value, cluster_id, tenant_id, flavor_id, None, None, None, None))
    for counted, series_list in (
        (Metric.WORKLOADS_PENDING, pending),
        (Metric.WORKLOADS_ADMITTED, admitted),
    ):
        for series in series_list:
            queue = series.labels.get("cluster_queue", "")
            tenant_id = mapping.cq_tenant.get(queue)
            if tenant_id is None:
                mapping.unknown[f"ClusterQueue {queue}"] += 1
                continue
            for when, value in series.values:
                rows.append(
                    (when, int(counted), value, cluster_id, tenant_id, None, None, None, None, None)
                )
    wait_series = list(admission_wait)
    if not wait_series:
        return rows  # counts without their sums (a partial answer): neither is stored
    counts = _counter_increases(admissions, mapping, since)
    waits = _counter_increases(wait_series, mapping, since)
    for (tenant_id, when), count in sorted(counts.items()):
        for metric, value in (
            (Metric.ADMISSIONS, count),
            (Metric.ADMISSION_WAIT, waits.get((tenant_id, when), 0.0)),  # 0: admitted at once
        ):
            rows.append(
                (when, int(metric), value, cluster_id, tenant_id, None, None, None, None, None)
            )
    return rows


def _counter_increases(
    series_list: Iterable[Series], mapping: SeriesOwners, since: datetime | None
) -> dict[tuple[int, datetime], float]:
    """``{(tenant id, time): what the counters of the tenant's ClusterQueue grew by in the step
    ending then}``, from the raw counter values: a point at ``since`` is only the base of the
    next; a series that first shows later (the ClusterQueue's first admission since Kueue
    started) counts from zero, and so does a value below the one before (Kueue restarted)."""
    out: dict[tuple[int, datetime], float] = defaultdict(float)
    for series in series_list:
        queue = series.labels.get("cluster_queue", "")
        tenant_id = mapping.cq_tenant.get(queue)
        if tenant_id is None:
            mapping.unknown[f"ClusterQueue {queue}"] += 1
            continue
        before: float | None = None
        for when, value in series.values:
            if not math.isfinite(value):
                continue
            if before is None and since is not None and when <= since:
                before = value
                continue
            grown = value if before is None or value < before else value - before
            before = value
            if grown > 0:
                out[(tenant_id, when)] += grown
    return dict(out)


# --- one pass over a cluster -----------------------------------------------------------------

FIGURE_QUERIES = {
    PrometheusFigure.GPU_USAGE: ("util", "engine", "memory"),
    PrometheusFigure.GPU_REQUESTS: ("requests",),
    PrometheusFigure.KUEUE: (
        "kueue_usage",
        "kueue_reservation",
        "kueue_pending",
        "kueue_admitted",
        "kueue_admissions",
        "kueue_admission_wait",
    ),
    PrometheusFigure.VOLUMES: ("volume_available", "volume_capacity"),
    PrometheusFigure.VGPU_USAGE: (
        "hami_memory",
        "hami_memory_legacy",
        "hami_cores",
        "hami_cores_legacy",
        "hami_devices",
        "hami_devices_legacy",
    ),
}
COUNTERS = {"kueue_admissions", "kueue_admission_wait"}
# A figure is "missing" when none of these gave a series (the others are optional).
REQUIRED = {
    PrometheusFigure.GPU_USAGE: ("util", "engine"),
    PrometheusFigure.GPU_REQUESTS: ("requests",),
    PrometheusFigure.KUEUE: ("kueue_usage", "kueue_pending"),
    PrometheusFigure.VOLUMES: ("volume_available",),
    PrometheusFigure.VGPU_USAGE: ("hami_memory", "hami_memory_legacy"),
}


KUEUE_RESOURCES_MISSING = (
    "no series for kueue_cluster_queue_resource_usage: Kueue exports its ClusterQueue resource "
    "metrics only with metrics.enableClusterQueueResources: true in its Configuration "
    "(the kueue-manager-config ConfigMap): the ClusterQueues' GPU use is not read from here."
)


@dataclass
class PrometheusOutcome:
    ok: bool
    samples: int = 0
    figures: list[str] = field(default_factory=list)  # the figures it delivered
    warnings: list[str] = field(default_factory=list)
    unknown_series: int = 0
    unknown_namespaces: list[str] = field(default_factory=list)
    requests: int = 0
    message: str = ""


def window(source: PrometheusSource, now: datetime) -> tuple[datetime, datetime, timedelta]:
    """The range one pass reads: from the step after the last range read (at most
    ``MAX_WINDOW`` back; ``FIRST_WINDOW`` the first time) to now, on step boundaries."""
    step = timedelta(seconds=source.step_s)
    step_s = source.step_s
    end_ts = int(now.timestamp()) // step_s * step_s
    end = datetime.fromtimestamp(end_ts, tz=UTC)
    earliest = end - min(MAX_WINDOW, step * (MAX_POINTS_PER_SERIES - 1))
    start = end - FIRST_WINDOW if source.read_until is None else source.read_until + step
    return max(start, earliest), end, step


def prometheus_collect(
    *, cluster: Cluster, now: datetime | None = None, client: PrometheusClient | None = None
) -> PrometheusOutcome | None:
    """Read the cluster's Prometheus once (None where it has none, or it is off) and store
    what it says; the status on the source says how it went."""
    now = now or timezone.now()
    source = PrometheusSource.objects.filter(cluster=cluster, enabled=True).first()
    if source is None:
        return None
    start, end, step = window(source, now)
    if start > end:  # read already up to now
        return PrometheusOutcome(ok=True, message="nothing new to read")
    own_client = client is None
    try:
        client = client or client_for(source)
        outcome = _read(
            source=source, cluster=cluster, client=client, start=start, end=end, step=step, now=now
        )
    except PrometheusError as exc:
        logger.warning("Prometheus of cluster %s: %s", cluster.name, exc.message)
        outcome = PrometheusOutcome(ok=False, message=exc.message)
    finally:
        if own_client and client is not None:
            client.close()
    fields: dict[str, Any] = {"last_attempt_at": now}
    if outcome.ok:
        previous = set(source.last_unknown_namespaces)
        if outcome.unknown_namespaces and set(outcome.unknown_namespaces) != previous:
            logger.warning(
                "Prometheus of cluster %s: %d series in namespaces no tenant owns, ignored: %s",
                cluster.name, outcome.unknown_series, ", ".join(outcome.unknown_namespaces),
            )  # fmt: skip
        fields.update(
            last_success_at=now,
            last_error="",
            last_warnings=outcome.warnings[:20],
            last_samples=outcome.samples,
            last_unknown_series=outcome.unknown_series,
            last_unknown_namespaces=outcome.unknown_namespaces,
            read_until=end,
        )
    else:
        fields["last_error"] = outcome.message[:1000]
    PrometheusSource.objects.filter(pk=source.pk).update(**fields)
    return outcome


def _read(
    *,
    source: PrometheusSource,
    cluster: Cluster,
    client: PrometheusClient,
    start: datetime,
    end: datetime,
    step: timedelta,
    now: datetime,
) -> PrometheusOutcome:
    try:
        matchers = parse_label_matchers(source.label_matchers)
    except ValueError as exc:
        raise PrometheusError(f"label matchers: {exc}") from None
    wanted = [f for f in PrometheusFigure.values if f in (source.figures or [])]
    texts = queries(matchers)
    results: dict[str, RangeResult] = {}
    warnings: list[str] = []
    for figure in wanted:
        for name in FIGURE_QUERIES[PrometheusFigure(figure)]:
            # Counters are read from a step earlier: that point is the base of the first step.
            since = start - step if name in COUNTERS else start
            result = client.query_range(texts[name], start=since, end=end, step=step)
            results[name] = result
            warnings.extend(result.warnings)
    mapping = mapping_for(cluster)
    if PrometheusFigure.GPU_REQUESTS in wanted and mapping.gpu_flavor_labels:
        # Several whole-GPU flavors: which one a pod's GPUs are follows from its node's labels.
        result = client.query_range(texts["node_labels"], start=end, end=end, step=step)
        warnings.extend(result.warnings)
        mapping.node_flavor = node_flavors(
            node_labels=result.series, flavor_labels=mapping.gpu_flavor_labels
        )
    delivered = []
    for figure in wanted:
        required = REQUIRED[PrometheusFigure(figure)]
        if any(results[name].series for name in required):
            delivered.append(figure)
        else:
            warnings.append(
                f"no series for {PrometheusFigure(figure).label}: nothing read from "
                f"{' or '.join(texts[name].split('{')[0].split('(')[-1] for name in required)}."
            )
    if PrometheusFigure.KUEUE in wanted and not results["kueue_usage"].series:
        warnings.append(KUEUE_RESOURCES_MISSING)
    rows: list[SampleRow] = []
    series = {name: result.series for name, result in results.items()}
    if PrometheusFigure.GPU_USAGE in delivered:
        devices = [*series["util"], *series["engine"], *series["memory"]]
        rows += device_rows(
            util=series["util"], engine=series["engine"], memory=series["memory"],
            mapping=mapping, cluster_id=cluster.pk,
        )  # fmt: skip
    if PrometheusFigure.GPU_REQUESTS in delivered:
        requested = request_rows(
            requests_=series["requests"], mapping=mapping, cluster_id=cluster.pk
        )
        rows += requested
        if mapping.gpu_flavor_labels and any(r[5] is None for r in requested):
            warnings.append(
                "GPU requests on nodes whose labels match no single GPU flavor are counted "
                "without a flavor: give each GPU flavor node labels, and let kube-state-metrics "
                "export them (--metric-labels-allowlist=nodes=[...])."
            )
    if PrometheusFigure.VGPU_USAGE in delivered:
        rows += hami_rows(
            memory=series["hami_memory"] or series["hami_memory_legacy"],
            cores=series["hami_cores"] or series["hami_cores_legacy"],
            devices=[*series["hami_devices"], *series["hami_devices_legacy"]],
            mapping=mapping, vgpu_flavors=vgpu_flavors_of(cluster), cluster_id=cluster.pk,
        )  # fmt: skip
    if PrometheusFigure.KUEUE in delivered:
        rows += kueue_rows(
            usage=series["kueue_usage"], reservation=series["kueue_reservation"],
            pending=series["kueue_pending"], admitted=series["kueue_admitted"],
            admissions=series["kueue_admissions"], admission_wait=series["kueue_admission_wait"],
            since=start - step, mapping=mapping, cluster_id=cluster.pk,
        )  # fmt: skip
    with transaction.atomic():
        written = samples_write(rows=rows, source=Source.PROMETHEUS)
        quota_readings_judge(cluster_id=cluster.pk, rows=rows)
        if PrometheusFigure.GPU_USAGE in delivered:
            gpus_store(cluster=cluster, series=devices, now=now)
            workload_activity_store(
                util=series["util"], engine=series["engine"], cluster_id=cluster.pk
            )
        if PrometheusFigure.VOLUMES in delivered:
            volumes_store(
                cluster=cluster, available=series["volume_available"],
                capacity=series["volume_capacity"], mapping=mapping, now=now,
            )  # fmt: skip
    unknown = sorted(mapping.unknown)
    return PrometheusOutcome(
        ok=True,
        samples=written,
        figures=delivered,
        warnings=warnings,
        unknown_series=sum(mapping.unknown.values()),
        unknown_namespaces=unknown[:UNKNOWN_KEPT],
        requests=client.requests,
    )


def volumes_store(
    *,
    cluster: Cluster,
    available: Sequence[Series],
    capacity: Sequence[Series],
    mapping: SeriesOwners,
    now: datetime,
) -> int:
    """The latest free space of each claim in a tenant's namespace (one row per claim)."""
    sizes = {
        (_namespace(s.labels), s.labels.get("persistentvolumeclaim", "")): s.values[-1][1]
        for s in capacity
        if s.values
    }
    rooms = []
    for s in available:
        known, tenant_id = mapping.tenant_of(s.labels)
        claim = s.labels.get("persistentvolumeclaim", "")
        if not known or tenant_id is None or not claim or not s.values:
            continue
        namespace = _namespace(s.labels)
        capacity_bytes = sizes.get((namespace, claim))
        rooms.append(
            VolumeRoom(
                cluster=cluster, tenant_id=tenant_id, namespace=namespace, claim=claim,
                available_bytes=int(s.values[-1][1]),
                capacity_bytes=None if capacity_bytes is None else int(capacity_bytes),
                read_at=now,
            )
        )  # fmt: skip
    if rooms:
        VolumeRoom.objects.bulk_create(
            rooms,
            update_conflicts=True,
            unique_fields=["cluster", "namespace", "claim"],
            update_fields=["tenant", "available_bytes", "capacity_bytes", "read_at"],
        )
    VolumeRoom.objects.filter(cluster=cluster, read_at__lt=now).delete()
    return len(rooms)
