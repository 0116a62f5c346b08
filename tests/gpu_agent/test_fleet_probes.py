"""The GPU page's isolation section: the probe button (refusals shown, nothing stored), the
probe history with pass/fail against the 5 % line and its SVG chart, and the device plugin's
state after a layout change."""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from gpu_agent.models import IsolationProbe, MigLayout, Node, ProbeState
from gpu_agent.services import layouts, probes
from tests.gpu_agent.test_fleet_pages import GPU_PAGE, UUID, add_node, fleet, gpu, instance, words
from tests.pages import logged_in, main, text

__all__ = ["fleet"]  # the fixture, imported for pytest

PROBE = f"/fleet/gpus/{UUID}/probes/"
PLAIN_UUID = "GPU-gpu-node-1-0001"


def _finish(probe: IsolationProbe, alone: float, together: float, *, simulated: bool) -> None:
    probes.agent_probe_result(
        node=probe.gpu.node,
        probe_id=probe.pk,
        state="done",
        t_alone_s=alone,
        t_together_s=together,
        simulated=simulated,
        library="simulated" if simulated else "cupy",
    )


def test_the_button_asks_the_agent_and_the_history_shows_pass_and_fail(world, fleet):
    client = logged_in(world.admin)
    response = client.post(PROBE)
    assert response.status_code == 302 and response["Location"] == f"{GPU_PAGE}#isolation"
    probe = IsolationProbe.objects.get()
    assert (probe.target_gi_id, probe.neighbour_gi_id, probe.state) == (2, 1, "requested")
    page = client.get(GPU_PAGE)
    assert f"Probe {probe.pk} requested (GPU instance 2 beside 1)" in text(page)
    section = main(page).split('id="isolation"')[1]
    assert "data-probe-blocker" in section and "A probe is still open" in words(section)
    assert re.search(r"<button[^>]*disabled", section)

    _finish(probe, 2.0, 2.04, simulated=True)
    second = probes.probe_request(gpu=probe.gpu, actor=world.admin)
    _finish(second, 1.0, 1.5, simulated=False)
    page = main(client.get(GPU_PAGE))
    rows = re.findall(r'<tr data-probe="(\d+)" data-state="(\w+)">(.*?)</tr>', page, re.S)
    assert [(int(pk), state) for pk, state, _ in rows] == [(second.pk, "done"), (probe.pk, "done")]
    newest, oldest = (words(cells) for _, _, cells in rows)
    assert "50.0 %" in newest and "fail" in newest and "simulated" not in newest
    assert "2.0 %" in oldest and "pass" in oldest and "simulated" in oldest
    chart = re.search(r'<svg class="probe-chart".*?</svg>', page, re.S)
    assert chart, "no chart"
    bars = re.findall(r'<rect class="(probe-\w+)"', chart.group(0))
    assert bars == ["probe-pass", "probe-fail"]  # oldest first
    assert "data-limit" in chart.group(0) and "5 %" in words(chart.group(0))


def test_refusals_are_shown_and_store_nothing(world, fleet):
    client = logged_in(world.admin)
    add_node(
        world.admin,
        "gpu-node-1",
        [gpu("gpu-node-1", 0, instances=[instance(1, "3g.40gb", 0, 4)])],
    )
    response = client.post(PROBE, follow=True)
    assert "No probe requested (400)" in text(response)
    assert "a probe needs two GPU instances" in text(response)
    assert not IsolationProbe.objects.exists()

    Node.objects.filter(name="gpu-node-1").update(
        last_report_at=timezone.now() - timedelta(hours=2)
    )
    response = client.post(f"/fleet/gpus/{PLAIN_UUID}/probes/", follow=True)
    assert "No probe requested (409)" in text(response) and "is stale" in text(response)
    assert not IsolationProbe.objects.exists()
    assert client.post("/fleet/gpus/GPU-nope/probes/").status_code == 404
    assert client.get(PROBE).status_code == 405
    assert logged_in(world.alice).post(PROBE).status_code == 403


def test_a_gpu_without_mig_is_probed_with_two_processes(world, fleet):
    client = logged_in(world.admin)
    client.post(f"/fleet/gpus/{PLAIN_UUID}/probes/")
    probe = IsolationProbe.objects.get()
    assert probe.mig is False and probe.target_gi_id is None
    _finish(probe, 1.0, 1.9, simulated=True)
    page = words(main(client.get(f"/fleet/gpus/{PLAIN_UUID}/")))
    assert "two processes, whole GPU" in page and "90.0 %" in page and "fail" in page
    assert IsolationProbe.objects.get().state == ProbeState.DONE


def test_the_device_plugin_state_of_the_last_change_is_shown(world, fleet):
    layout = layouts.layout_set(
        gpu=fleet.gpus.get(uuid=UUID),
        instances=[{"profile": "3g.40gb", "start": 0}, {"profile": "1g.10gb", "start": 5}],
        actor=world.admin,
    )
    client = logged_in(world.admin)
    assert "data-device-plugin" not in main(client.get(GPU_PAGE))
    layouts.agent_result(
        node=fleet,
        uuid=UUID,
        generation=layout.generation,
        state="success",
        device_plugin="restart-needed",
        device_plugin_message="restart its pod",
    )
    page = main(client.get(GPU_PAGE))
    assert 'data-device-plugin="restart-needed"' in page
    assert "device plugin restart needed" in words(page)
    # Restarted later: recorded although the layout is already applied.
    outcome = layouts.agent_result(
        node=fleet,
        uuid=UUID,
        generation=layout.generation,
        state="success",
        device_plugin="restarted",
    )
    assert outcome.accepted
    assert MigLayout.objects.get(pk=layout.pk).device_plugin == "restarted"
    assert "device plugin restarted" in words(main(client.get(GPU_PAGE)))
