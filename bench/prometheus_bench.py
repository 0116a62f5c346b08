"""Usage collection benchmark (issue 18): 1,000 tenants' GPU use for one 5-minute window, read
from a real Prometheus (PromQL ``query_range``) and, in the same run, from the cluster's objects
(one LIST of Pods through the Kubernetes API stand-in), on PostgreSQL, in a database of its own
(``prometheus_bench``, dropped and created, migrated; dropped at the end).

Each tenant has one namespace and one running pod on one A100. The simulated exporters
(``prometheus_client``, the DCGM exporter's and kube-state-metrics' names and labels) are
scraped every second by ``/usr/bin/prometheus``; the stand-in holds the same 1,000 pods. A
Prometheus pass stores utilisation, memory and GPU requests for every step of the window; a
LIST pass stores the requests (and the pod -> tenant map) for now. Each is run ``--passes``
times; the best wall time counts. Prints time and requests per pass for both.

    .venv/bin/python bench/prometheus_bench.py [--tenants 1000] [--passes 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import benchdb  # noqa: E402
from figures import emit, figure  # noqa: E402 - the line bench/run.py reads

DB_NAME = "prometheus_bench"
MODEL = "NVIDIA A100-SXM4-80GB"


def world(tenants: int, kubeconfig: Path) -> tuple[Any, list[tuple[str, str]]]:
    from decimal import Decimal

    from quotas.choices import SyncBackend
    from quotas.models import Cluster, FlavorResource, ResourceFlavor
    from tenants.models import Namespace, Tenant

    cluster = Cluster.objects.create(
        name="bench", backend=SyncBackend.KUBERNETES, kubeconfig_path=str(kubeconfig),
        has_kueue=False,
    )  # fmt: skip
    flavor = ResourceFlavor.objects.create(
        cluster=cluster, name="a100-80gb", kind="gpu", gpu_model=MODEL, gpu_weight=Decimal(1)
    )
    FlavorResource.objects.create(
        flavor=flavor, resource="nvidia.com/gpu", capacity=Decimal(tenants)
    )
    made = Tenant.objects.bulk_create(
        [Tenant(slug=f"team-{i:04d}", display_name=f"Team {i}") for i in range(tenants)]
    )
    Namespace.objects.bulk_create([Namespace(tenant=t, name=f"{t.slug}-ns") for t in made])
    return cluster, [(f"{t.slug}-ns", f"train-{i}") for i, t in enumerate(made)]


def pod(namespace: str, name: str) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": "gpu-node-1",
                 "containers": [{"name": "main", "image": "trainer:1",
                                 "resources": {"limits": gpus, "requests": gpus}}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args(argv)
    if not shutil.which("prometheus") and not Path("/usr/bin/prometheus").exists():
        print("prometheus is not installed (Debian package prometheus): nothing to compare")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        benchdb.setup(args.database_url, DB_NAME, tmp)
        benchdb.django_setup()
        try:
            return run(args, Path(tmp))
        finally:
            benchdb.teardown(args.database_url, DB_NAME)


def run(args: argparse.Namespace, tmp: Path) -> int:
    from datetime import timedelta

    from django.utils import timezone

    from devcluster.runner import start_in_subprocess
    from quotas.kube.applier import KubernetesBackend
    from tests.prometheus.server import Exporters, serve, start_prometheus, stop_prometheus
    from usage import collector
    from usage.choices import Metric
    from usage.models import PrometheusSource, Sample
    from usage.prometheus import client_for, prometheus_collect

    kubeconfig = tmp / "kubeconfig"
    cluster, pods = world(args.tenants, kubeconfig)
    exporters = Exporters()
    for i, (namespace, name) in enumerate(pods):
        exporters.gpu("bench", gpu=i, namespace=namespace, pod=name, util=50 + i % 50,
                      memory_mib=1024 + i, engine_active=0.25 + (i % 50) / 100)  # fmt: skip
        exporters.pod_requests("bench", namespace=namespace, pod=name, gpus=1)
    dcgm, dcgm_port = serve(exporters.dcgm)
    kube, kube_port = serve(exporters.kube)
    folder = tmp / "prometheus"
    folder.mkdir()
    prometheus = start_prometheus(
        folder, exporters,
        {"dcgm-exporter": [f"127.0.0.1:{dcgm_port}"],
         "kube-state-metrics": [f"127.0.0.1:{kube_port}"]},
    )  # fmt: skip
    standin = start_in_subprocess(kubeconfig_path=kubeconfig, state_dir=tmp / "standin",
                                  crds_dir=None)  # fmt: skip
    try:
        # Five minutes of scrapes would take five minutes to make: the window read ends four
        # minutes ahead instead, so each of its steps finds a scrape within Prometheus' 5-minute
        # lookback (the series exist a minute and more before it starts), as a full window would.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = prometheus.query('count(DCGM_FI_DEV_FB_USED{cluster="bench"})')
            if got and int(float(got[0]["value"][1])) >= args.tenants:
                break
            time.sleep(0.5)
        api = KubernetesBackend.from_kubeconfig(str(kubeconfig))
        for namespace, name in pods:
            api._call(
                "POST",
                "/api/v1/namespaces",
                body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
            api._call("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod(namespace, name))
        source = PrometheusSource.objects.create(
            cluster=cluster, url=prometheus.url, label_matchers='cluster="bench"', step_s=60,
            query_timeout_s=60, figures=["gpu_usage", "gpu_requests"],
        )  # fmt: skip

        prom_times, prom_requests, prom_samples = [], 0, 0
        for _ in range(args.passes):
            PrometheusSource.objects.filter(pk=source.pk).update(read_until=None)
            Sample.objects.all().delete()
            client = client_for(source)
            now = timezone.now() + timedelta(minutes=4)
            started = time.perf_counter()
            outcome = prometheus_collect(cluster=cluster, now=now, client=client)
            prom_times.append(time.perf_counter() - started)
            assert outcome is not None and outcome.ok, outcome
            prom_requests, prom_samples = client.requests, outcome.samples
            by_metric = Counter(
                Metric(m).name for m in Sample.objects.values_list("metric", flat=True)
            )
            print(f"  Prometheus pass: {dict(by_metric)}, warnings {outcome.warnings}")
            client.close()
        PrometheusSource.objects.filter(pk=source.pk).update(enabled=False)
        list_times, list_requests, list_samples = [], 0, 0
        for _ in range(args.passes):
            Sample.objects.all().delete()
            standin.reset_stats()
            started = time.perf_counter()
            result = collector.cluster_collect(cluster=cluster)
            list_times.append(time.perf_counter() - started)
            assert result.reachable and result.pods == args.tenants, result
            stats = standin.stats()
            list_requests = int(stats["total"]) - int(stats.get("discovery", 0) or 0)
            list_samples = result.samples
    finally:
        standin.stop()
        stop_prometheus(prometheus)
        dcgm.shutdown()
        kube.shutdown()
    best_prom, best_list = min(prom_times), min(list_times)
    print(f"{args.tenants} tenants, one 5-minute window (6 steps of 60 s)")
    print(f"  Prometheus (query_range): {best_prom:.3f} s, {prom_requests} requests, "
          f"{prom_samples} samples (utilisation, memory, requests per step)")  # fmt: skip
    print(f"  object LIST (stand-in):   {best_list:.3f} s, {list_requests} requests, "
          f"{list_samples} samples (requests, guarantee, limit now)")  # fmt: skip
    emit(
        "prometheus",
        [
            figure("Prometheus pass, 1,000 tenants x 5 minutes", round(best_prom, 3), "s",
                   baseline=round(best_list, 3), better="lower"),
            figure("Prometheus requests per pass", prom_requests, "requests",
                   baseline=list_requests, better="lower"),
            figure("samples per Prometheus pass", prom_samples, "samples"),
        ],
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
