"""GPU memory and compute on vGPU flavors (issue 34): the node agents' per-pod memory (NVML's
usedGpuMemory mapped to pods) in their reports, held to what a node can know; HAMi's
per-container metrics (names since 2.10, and the older ones) through a real Prometheus; the
usage page and showback in GiB and percent of each lab's share; the memory-first suggestion;
the isolation check under HAMi's limits, labelled simulated."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from advice.services import suggestions_compute
from gpu_agent.models import Gpu, IsolationProbe, Node
from gpu_agent.services.probes import agent_probe_result, probe_request
from gpu_agent.services.reports import DeviceReading, ReportReadings, report_readings
from gpu_node_agent import delta
from gpu_node_agent.probe import (
    ProbeRequest,
    ProbeRequestError,
    SimulatedProber,
    VgpuLimits,
    vgpu_slowdown,
)
from gpu_node_agent.testing.portal import fake_node
from gpu_spec.report import validate_report
from quotas.choices import GPUCORES_RESOURCE, GPUMEM_RESOURCE
from tenants.choices import MembershipRole
from tenants.models import Membership
from tests.factories import UserFactory
from tests.prometheus.server import Handle, new_cluster_label
from tests.usage.vgpu_world import VgpuWorld, vgpu_world
from usage import demo, services
from usage.choices import Metric, PrometheusFigure, Source
from usage.models import Pod, Sample
from usage.prometheus import prometheus_collect

T4 = "Tesla T4"
GIB = 1024**3


@pytest.fixture
def labs(db: None) -> VgpuWorld:
    return vgpu_world()


def _pod(world: VgpuWorld, uid: str, lab: str, node: str = "t4-node") -> None:
    Pod.objects.create(
        cluster_id=world.cluster.pk, uid=uid, namespace=f"{lab}-research", name=uid,
        tenant_id=world.labs[lab].pk, phase="Running", node_name=node, seen_at=timezone.now(),
    )  # fmt: skip


def _memory(world: VgpuWorld, lab: str) -> list[float]:
    return sorted(
        Sample.objects.filter(
            tenant_id=world.labs[lab].pk, metric=Metric.VGPU_MEMORY_USED, flavor_id=world.flavor.pk
        ).values_list("value", flat=True)
    )


def _cores(world: VgpuWorld, lab: str) -> list[float]:
    return sorted(
        Sample.objects.filter(
            tenant_id=world.labs[lab].pk, metric=Metric.VGPU_CORES_USED, flavor_id=world.flavor.pk
        ).values_list("value", flat=True)
    )


# --- the node agent's report ---------------------------------------------------------------


def _full_gpu(processes: list[dict[str, object]], used: int = 12000) -> dict[str, object]:
    return {
        "uuid": "GPU-t4-0000", "index": 0, "name": T4, "memory_total_mib": 15360,
        "memory_used_mib": used, "utilization_pct": 97, "mig_mode_current": False,
        "mig_mode_pending": False, "processes": processes,
    }  # fmt: skip


def test_the_agent_sums_each_pods_processes_memory_into_its_readings() -> None:
    gpu = _full_gpu(
        [
            {"pid": 10, "used_memory_mib": 3000, "pod_uid": "pod-nlp", "sm_util_pct": 7},
            {"pid": 11, "used_memory_mib": 1200, "pod_uid": "pod-nlp", "sm_util_pct": 5},
            {"pid": 12, "used_memory_mib": 4000, "pod_uid": "pod-speech"},
            {"pid": 13, "used_memory_mib": None, "pod_uid": "pod-vision"},  # no figure: left out
            {"pid": 14, "used_memory_mib": 500, "pod_uid": None},  # not in a pod
        ]
    )
    (reading,) = delta.readings([gpu])
    assert reading["pod_memory"] == [
        {"pod_uid": "pod-nlp", "used_memory_mib": 4200, "sm_util_pct": 12},
        {"pod_uid": "pod-speech", "used_memory_mib": 4000, "sm_util_pct": None},  # no sample
    ]
    report = {"node": "t4-node", "sent_at": "2026-12-08T00:00:00+00:00", "gpus": [gpu],
              "protocol": 2, "session": "ab", "seq": 2, "full": False, "base": 1,
              "base_digest": "cd", "digest": "ef", "readings": [reading]}  # fmt: skip
    assert validate_report(report) == []


@pytest.mark.parametrize(
    ("entry", "path", "says"),
    [
        ({"pod_uid": "p", "used_memory_mib": -1}, "readings[0].pod_memory[0].used_memory_mib",
         "at least 0"),
        ({"pod_uid": "p", "used_memory_mib": 2**31}, "readings[0].pod_memory[0].used_memory_mib",
         "at most"),
        ({"pod_uid": "", "used_memory_mib": 1}, "readings[0].pod_memory[0].pod_uid", "blank"),
        ({"pod_uid": "p", "used_memory_mib": 1, "cores": 9}, "readings[0].pod_memory[0].cores",
         "Unknown field"),
        ({"pod_uid": "p", "used_memory_mib": 1, "sm_util_pct": 101},
         "readings[0].pod_memory[0].sm_util_pct", "at most 100"),
    ],
)  # fmt: skip
def test_the_schema_refuses_a_hostile_pod_memory_entry(
    entry: dict[str, object], path: str, says: str
) -> None:
    reading = {"uuid": "GPU-t4-0000", "model": T4, "gi_id": None, "profile": None,
               "utilization_pct": 50, "memory_used_mib": 100, "processes": 1,
               "pod_uids": ["p"], "pod_memory": [entry]}  # fmt: skip
    report = {"node": "t4-node", "sent_at": "2026-12-08T00:00:00+00:00", "gpus": [],
              "readings": [reading]}  # fmt: skip
    problems = {p.path: p.message for p in validate_report(report)}
    assert path in problems and says in problems[path], problems


@pytest.mark.django_db
def test_a_full_report_gives_the_portal_each_pods_memory(labs: VgpuWorld) -> None:
    node = Node.objects.create(name="t4-node", cluster=labs.cluster)
    gpu = _full_gpu(
        [{"pid": 1, "used_memory_mib": 700, "pod_uid": "a"},
         {"pid": 2, "used_memory_mib": 300, "pod_uid": "a"}]
    )  # fmt: skip
    readings = report_readings(node=node, report={"gpus": [gpu]}, now=timezone.now())
    assert readings.node_name == "t4-node"
    assert readings.devices[0].pod_memory == (("a", 1000, None),)


def _reading(
    pod_memory: tuple[tuple[str, int, int | None], ...], used: int = 12000
) -> DeviceReading:
    return DeviceReading(
        gpu_uuid="GPU-t4-0000", model=T4, gi_id=None, mig_profile=None, utilization_pct=97,
        memory_used_mib=used, processes=len(pod_memory),
        pod_uids=tuple(uid for uid, _, _ in pod_memory), pod_memory=pod_memory,
    )  # fmt: skip


@pytest.mark.django_db
def test_each_labs_memory_on_the_shared_t4_becomes_its_sample_on_the_vgpu_flavor(
    labs: VgpuWorld,
) -> None:
    node = Node.objects.create(name="t4-node", cluster=labs.cluster)
    _pod(labs, "nlp-0", "lab-nlp")
    _pod(labs, "nlp-1", "lab-nlp")
    _pod(labs, "speech-0", "lab-speech")
    device = _reading((("nlp-0", 2000, 10), ("nlp-1", 2300, 5), ("speech-0", 5000, None)))
    services.agent_readings_record(
        readings=ReportReadings(node.pk, labs.cluster.pk, timezone.now(), (device,), "t4-node")
    )
    assert _memory(labs, "lab-nlp") == [4300.0]
    assert _memory(labs, "lab-speech") == [5000.0]
    assert _memory(labs, "lab-vision") == []
    assert _cores(labs, "lab-nlp") == [15.0]  # its two pods' SM use, percent of the GPU
    assert _cores(labs, "lab-speech") == []  # no sample: not a 0


@pytest.mark.django_db
def test_a_node_cannot_report_memory_for_pods_elsewhere_and_absurd_figures_are_clamped(
    labs: VgpuWorld,
) -> None:
    """A hostile (or confused) node: a pod the collector places on another node is not
    counted, nor one no tenant owns; figures past the device's memory in use are held to it."""
    node = Node.objects.create(name="t4-node", cluster=labs.cluster)
    _pod(labs, "vision-elsewhere", "lab-vision", node="other-node")
    _pod(labs, "nlp-0", "lab-nlp")
    _pod(labs, "speech-0", "lab-speech")
    device = _reading(
        (("vision-elsewhere", 9000, 100), ("unknown-pod", 9000, 100),
         ("nlp-0", 2_000_000_000, 90), ("speech-0", 2_000_000_000, 90)),
        used=10000,
    )  # fmt: skip
    services.agent_readings_record(
        readings=ReportReadings(node.pk, labs.cluster.pk, timezone.now(), (device,), "t4-node")
    )
    assert _memory(labs, "lab-vision") == []
    # Each held to the 10,000 MiB in use, then the two scaled down to add up to it.
    assert _memory(labs, "lab-nlp") == [5000.0]
    assert _memory(labs, "lab-speech") == [5000.0]
    assert _cores(labs, "lab-nlp") == _cores(labs, "lab-speech") == [50.0]  # 180% held to 100


# --- Prometheus: HAMi's metrics ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("legacy", [False, True], ids=["hami-2.10-names", "legacy-names"])
def test_hamis_per_container_metrics_become_each_labs_memory_and_compute(
    prometheus_server: Handle, legacy: bool
) -> None:
    labs = vgpu_world()
    label = new_cluster_label()
    exporters = prometheus_server.exporters
    device = f"GPU-{label}"
    for pod, ns, gib, util in (
        ("nlp-0", "lab-nlp-research", 2.0, 12.0),
        ("nlp-1", "lab-nlp-research", 2.25, 15.0),
        ("speech-0", "lab-speech-research", 3.0, 35.0),
        ("stray-0", "kube-system", 1.0, 5.0),  # no tenant's namespace: ignored
    ):
        exporters.hami_container(
            label, namespace=ns, pod=pod, memory_bytes=gib * GIB, util=util, device_uuid=device,
            legacy=legacy,
        )  # fmt: skip
    metric = "vGPU_device_memory_usage_in_bytes" if legacy else "hami_vgpu_memory_used_bytes"
    prometheus_server.wait_for(f'{metric}{{cluster="{label}"}}', count=4)
    services.prometheus_source_set(
        cluster=labs.cluster, actor=UserFactory(username="admin", is_platform_admin=True),
        settings_={"url": prometheus_server.url, "label_matchers": f'cluster="{label}"',
                   "step_s": 15, "query_timeout_s": 5,
                   "figures": [PrometheusFigure.VGPU_USAGE]},
    )  # fmt: skip

    outcome = prometheus_collect(cluster=labs.cluster, now=timezone.now() + timedelta(seconds=15))

    assert outcome is not None and outcome.ok, outcome
    assert outcome.figures == [PrometheusFigure.VGPU_USAGE]
    assert "kube-system" in outcome.unknown_namespaces
    nlp = Sample.objects.filter(tenant_id=labs.labs["lab-nlp"].pk, source=Source.PROMETHEUS)
    memory = set(nlp.filter(metric=Metric.VGPU_MEMORY_USED).values_list("value", flat=True))
    cores = set(nlp.filter(metric=Metric.VGPU_CORES_USED).values_list("value", flat=True))
    assert memory == {4.25 * 1024}  # 2 GiB + 2.25 GiB, in MiB
    assert cores == {27.0}  # 12% + 15% of the GPU
    assert set(nlp.values_list("flavor_id", flat=True)) == {labs.flavor.pk}
    speech = Sample.objects.filter(
        tenant_id=labs.labs["lab-speech"].pk, metric=Metric.VGPU_MEMORY_USED
    )
    assert set(speech.values_list("value", flat=True)) == {3 * 1024.0}


# --- pages -------------------------------------------------------------------------------------


def _month_of_use(labs: VgpuWorld, days: int = 20) -> None:
    """Hourly readings over ``days``: lab-nlp at 9% of a GPU (30% of its 30% share) with its
    GPU memory near full (4.2 of 4.5 GiB); lab-speech at 30% of a GPU, 3 GiB."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    rows: list[services.SampleRow] = []
    for hour in range(days * 24):
        t = now - timedelta(hours=hour + 1)
        for lab, mib, cores in (("lab-nlp", 4300.8, 9.0), ("lab-speech", 3072.0, 30.0)):
            base = (labs.cluster.pk, labs.labs[lab].pk, labs.flavor.pk, None, None, None, None)
            rows.append((t, Metric.VGPU_MEMORY_USED, mib, *base))
            rows.append((t, Metric.VGPU_CORES_USED, cores, *base))
    services.samples_write(rows=rows, source=Source.DEMO)
    services.rollups_run_all(now=now)


@pytest.mark.django_db
def test_the_usage_page_and_showback_show_each_share_and_its_use_in_gib_and_percent(
    labs: VgpuWorld, client: Client
) -> None:
    _month_of_use(labs, days=3)
    admin = UserFactory(username="admin", is_platform_admin=True, is_staff=True)
    client.force_login(admin)
    page = client.get("/tenants/lab-nlp/usage/?range=7d").content.decode()
    assert 'id="vgpu-shares"' in page
    assert "4.5 GiB" in page  # its GPU memory share
    assert "4.2 GiB (93% of the share)" in page  # 4,300.8 MiB of 4,608
    assert "30% of a GPU" in page and "9% of a GPU (30% of the share)" in page
    showback = client.get("/showback/").content.decode()
    assert 'data-tenant="lab-speech"' in showback and "6 GiB" in showback
    assert "3 GiB (50% of the share)" in showback
    assert "30% of a GPU (75% of the share)" in showback  # 30 of its 40


# --- suggestions -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_lab_at_30_percent_of_its_compute_with_its_memory_full_gets_a_memory_first_draft(
    labs: VgpuWorld,
) -> None:
    _month_of_use(labs, days=20)
    lead = UserFactory(username="bob")
    Membership.objects.create(tenant=labs.labs["lab-nlp"], user=lead, role=MembershipRole.LEAD)
    now = timezone.now()
    (suggestion,) = suggestions_compute(
        tenant=labs.labs["lab-nlp"], actor=lead, now=now, period=(now - timedelta(days=30), now)
    )
    line = next(n for n in suggestion.numbers if n.get("vgpu"))
    assert line["vgpu"]["memory_first"] is True
    assert line["vgpu"]["cores_share_used_pct"] == pytest.approx(30.0)
    # 4,300.8 MiB peak at 75% of the new limit: 5,734 MiB -> 6 GiB; compute guaranteed
    # down to the 9% used with 10% headroom (10%), its limit kept at 30%.
    assert (line["vgpu"]["memory_before"], line["vgpu"]["memory_after"]) == ("4.5 GiB", "6 GiB")
    assert line["vgpu"]["cores_guaranteed_after"] == "10% of a GPU"
    assert any("memory-first" in note for note in line["notes"])
    assert suggestion.request is not None, (
        suggestion.note
    )  # filed as bob's draft, its lines the same
    items = {i.resource: i for i in suggestion.request.items.all()}
    assert items[GPUMEM_RESOURCE].limit == 6 * GIB
    assert items[GPUCORES_RESOURCE].guaranteed == 10
    assert items[GPUCORES_RESOURCE].limit == 30
    speech = suggestions_compute(
        tenant=labs.labs["lab-speech"], now=now, period=(now - timedelta(days=30), now)
    )
    speech_line = next(n for s in speech for n in s.numbers if n.get("vgpu"))
    assert speech_line["vgpu"]["memory_first"] is False  # 75% of its compute, memory at half


# --- the isolation check -----------------------------------------------------------------------


def test_hami_holds_the_neighbour_to_its_share_so_the_probed_lab_keeps_its_own() -> None:
    rng = random.Random(1)  # noqa: S311 - the simulation's noise
    within, _ = vgpu_slowdown(VgpuLimits(30, 4608, 40, 6144), rng)
    assert within < 5.0  # 30% beside 40%: the two fit in the GPU
    squeezed, what = vgpu_slowdown(VgpuLimits(80, None, 60, None), rng)
    assert squeezed > 5.0  # 80% beside 60%: it gets the 40% left, half again as slow
    assert squeezed == pytest.approx(100.0, abs=5.0) and "HAMi" in what


@pytest.mark.django_db
def test_a_probe_of_the_shared_t4_runs_under_the_labs_limits_and_says_simulated(
    labs: VgpuWorld, client: Client, tmp_path: Path
) -> None:
    admin = UserFactory(username="admin", is_platform_admin=True, is_staff=True)
    node = Node.objects.create(name="t4-node", cluster=labs.cluster, last_report_at=timezone.now())
    gpu = Gpu.objects.create(
        node=node, uuid="GPU-t4-0000", index=0, name=T4, memory_total_mib=15360,
        mig_mode_current=False, last_seen_at=timezone.now(),
    )  # fmt: skip
    probe = probe_request(
        gpu=gpu, actor=admin, target_tenant=labs.labs["lab-nlp"],
        neighbour_tenant=labs.labs["lab-speech"],
    )  # fmt: skip
    assert probe.vgpu_limits == {
        "target_cores_pct": 30, "target_memory_mib": 4608,
        "neighbour_cores_pct": 40, "neighbour_memory_mib": 6144,
    }  # fmt: skip
    request = ProbeRequest.from_json(
        {"id": probe.pk, "uuid": gpu.uuid, "mig": False, "target_gi_id": None,
         "neighbour_gi_id": None, "vgpu": probe.vgpu_limits}
    )  # fmt: skip
    fake = fake_node(tmp_path, f"{T4}:1:nomig")  # the fake backend's T4
    request = ProbeRequest(probe.pk, fake.nvml.gpu_uuids()[0], False, None, None, request.vgpu)
    outcome = SimulatedProber().run(fake.backend, request)
    assert outcome.simulated and outcome.slowdown_pct is not None
    assert outcome.slowdown_pct < 5.0  # the time-sliced T4 measured 80.9%
    assert "HAMi" in outcome.message
    agent_probe_result(
        node=node, probe_id=probe.pk, state=outcome.state, t_alone_s=outcome.t_alone_s,
        t_together_s=outcome.t_together_s, simulated=True, library="simulated",
        message=outcome.message,
    )  # fmt: skip
    stored = IsolationProbe.objects.get(pk=probe.pk)
    assert stored.slowdown_pct is not None and stored.slowdown_pct < 5.0
    client.force_login(admin)
    page = client.get(f"/fleet/gpus/{gpu.uuid}/").content.decode()
    assert "shared as vGPUs" in page and "simulated" in page
    assert "40% of the compute for the saturating one, 30% for the probed one" in page


def test_a_hostile_vgpu_limit_in_a_probe_is_refused() -> None:
    with pytest.raises(ProbeRequestError, match="target_cores_pct"):
        ProbeRequest.from_json(
            {"id": 1, "uuid": "GPU-x", "mig": False, "vgpu": {"target_cores_pct": 101}}
        )


# --- the demo ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_demo_simulates_each_labs_memory_and_compute_within_its_share(
    labs: VgpuWorld,
) -> None:
    start = timezone.now() - timedelta(days=2)
    rows = demo._vgpu_rows(random.Random(7), start, 288, {})  # noqa: S311 - the demo's noise
    by_lab: dict[tuple[int, int], list[float]] = {}
    for row in rows:
        by_lab.setdefault((row[4], row[1]), []).append(row[2])
    nlp, speech = labs.labs["lab-nlp"].pk, labs.labs["lab-speech"].pk
    nlp_memory = by_lab[(nlp, Metric.VGPU_MEMORY_USED)]
    nlp_cores = by_lab[(nlp, Metric.VGPU_CORES_USED)]
    assert len(nlp_memory) == 288 and max(nlp_memory) <= 4608  # within its 4.5 GiB
    assert sum(nlp_memory) / 288 == pytest.approx(0.9 * 4608, rel=0.03)  # memory nearly full
    assert sum(nlp_cores) / 288 == pytest.approx(0.3 * 30, rel=0.1)  # 30% of its compute share
    assert max(by_lab[(speech, Metric.VGPU_CORES_USED)]) <= 40
