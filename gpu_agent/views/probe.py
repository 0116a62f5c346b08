"""The GPU page's isolation section (R30): the probe history with the 5 % line, drawn as a small
SVG chart here (plain numbers the template lays out; no script), the button that asks the
node's agent for a probe, and the device plugin's state after the last layout change.

Writes go through ``gpu_agent.services.probes.probe_request`` (400 for a MIG GPU with fewer
than two instances, 409 for a stale node or an open probe); the view shows its refusal and
changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core import errors
from core.pages import error_text
from gpu_agent.models import (
    ISOLATION_SLOWDOWN_LIMIT_PCT,
    OPEN_PROBE_STATES,
    DevicePlugin,
    Gpu,
    IsolationProbe,
    MigLayout,
    ProbeState,
)
from gpu_agent.services.probes import (
    isolation_pairs,
    probe_list,
    probe_request,
    probe_tenant_named,
    probe_tenants,
    shared_gpus,
    vgpu_limits,
)
from gpu_agent.views.common import admin_user, gpu_for

CHART_WIDTH = 420
CHART_HEIGHT = 130
CHART_LEFT = 34  # room for the axis labels
CHART_BOTTOM = 18
CHART_TOP = 8
MIN_SCALE_PCT = 10.0


@dataclass(frozen=True)
class ChartBar:
    x: float
    y: float
    width: float
    height: float
    passed: bool
    title: str


@dataclass(frozen=True)
class ProbeChart:
    """Done probes, oldest left, as bars of their slowdown; the 5 % line across."""

    width: int
    height: int
    left: int
    bottom: float  # y of the 0 % axis
    scale_pct: float  # the top of the chart
    limit_y: float  # y of the 5 % line
    bars: tuple[ChartBar, ...]

    @property
    def right(self) -> int:
        return self.width - 4

    @property
    def top_label(self) -> str:
        return f"{self.scale_pct:g} %"


def probe_chart(probes: Sequence[IsolationProbe]) -> ProbeChart | None:
    """``probes`` newest first (as listed); None when none is done."""
    done = [
        p for p in reversed(probes) if p.state == ProbeState.DONE and p.slowdown_pct is not None
    ]
    if not done:
        return None
    worst = max(max(p.slowdown_pct or 0.0 for p in done), MIN_SCALE_PCT)
    scale = float(int(worst * 1.1) + 1)
    bottom = CHART_HEIGHT - CHART_BOTTOM
    span = bottom - CHART_TOP
    slot = (CHART_WIDTH - 4 - CHART_LEFT) / max(len(done), 8)

    def y_of(pct: float) -> float:
        return round(bottom - span * min(max(pct, 0.0), scale) / scale, 1)

    bars = []
    for position, probe in enumerate(done):
        slowdown = probe.slowdown_pct or 0.0
        y = y_of(slowdown)
        bars.append(
            ChartBar(
                x=round(CHART_LEFT + position * slot + slot * 0.15, 1),
                y=min(y, bottom - 1),
                width=round(slot * 0.7, 1),
                height=max(round(bottom - y, 1), 1),
                passed=slowdown <= ISOLATION_SLOWDOWN_LIMIT_PCT,
                title=f"probe {probe.pk}: {slowdown:+.1f} %"
                + (" (simulated)" if probe.simulated else ""),
            )
        )
    return ProbeChart(
        CHART_WIDTH,
        CHART_HEIGHT,
        CHART_LEFT,
        bottom,
        scale,
        y_of(ISOLATION_SLOWDOWN_LIMIT_PCT),
        tuple(bars),
    )


def _probe_blocker(gpu: Gpu, probes: Sequence[IsolationProbe]) -> str:
    """Why the button would be refused now ("" when it would not); the service decides."""
    if any(p.state in OPEN_PROBE_STATES for p in probes):
        return "A probe is still open: its result comes with the agent's next reports."
    if gpu.mig_mode_current and gpu.instances.count() < 2:
        return (
            "MIG is on with fewer than two instances: a probe needs one probed and one neighbour."
        )
    return ""


DEVICE_PLUGIN_TEXT: dict[str, str] = {
    DevicePlugin.RESTART_NEEDED: "device plugin restart needed",
    DevicePlugin.RESTARTED: "device plugin restarted",
    DevicePlugin.RESTART_FAILED: "device plugin restart failed",
    DevicePlugin.NOT_NEEDED: "device plugin restart not needed",
}


def isolation_context(gpu: Gpu, layout: MigLayout | None) -> dict[str, Any]:
    """What ``gpu_agent/_gpu_isolation.html`` needs (three queries)."""
    probes = probe_list(gpu=gpu)
    return {
        "probe_vgpu": vgpu_limits(gpu=gpu, target=None, neighbour=None) is not None,
        "probes": probes,
        "probe_chart": probe_chart(probes),
        "probe_limit_pct": ISOLATION_SLOWDOWN_LIMIT_PCT,
        "probe_blocker": _probe_blocker(gpu, probes),
        "probe_url": reverse("portal:fleet-gpu-probes", args=[gpu.uuid]),
        "probe_tenants": probe_tenants(gpu=gpu),
        "device_plugin": DEVICE_PLUGIN_TEXT.get(layout.device_plugin, "") if layout else "",
        "device_plugin_layout": layout,
    }


@login_required
def isolation(request: HttpRequest) -> HttpResponse:
    """The isolation check per pair of tenants: each pair's latest probe (one query). Only
    read (405 to an admin's POST; 403 to anyone else first, whatever the method)."""
    admin_user(request)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET"])
    return render(
        request,
        "gpu_agent/isolation.html",
        {
            "pairs": isolation_pairs(),
            "shared": shared_gpus(),
            "probe_limit_pct": ISOLATION_SLOWDOWN_LIMIT_PCT,
        },
    )


@login_required
@require_POST
def gpu_probe(request: HttpRequest, uuid: str) -> HttpResponse:
    """Ask the GPU's agent for an isolation probe (the button on the GPU page)."""
    user = admin_user(request)
    gpu = gpu_for(user, uuid)
    try:
        named = {
            name: probe_tenant_named(field=name, slug=request.POST.get(name, "").strip())
            for name in ("target_tenant", "neighbour_tenant")
        }
        probe = probe_request(
            gpu=gpu,
            actor=user,
            target_tenant=named["target_tenant"],
            neighbour_tenant=named["neighbour_tenant"],
        )
    except errors.ApplicationError as exc:
        messages.error(request, f"No probe requested ({exc.status_code}): {error_text(exc)}")
    else:
        what = (
            f"GPU instance {probe.target_gi_id} beside {probe.neighbour_gi_id}"
            if probe.mig
            else "two processes on the whole GPU"
        )
        if probe.target_tenant and probe.neighbour_tenant:
            what += (
                f": {probe.neighbour_tenant.slug}'s share saturated while "
                f"{probe.target_tenant.slug}'s is probed"
            )
        messages.success(
            request,
            f"Probe {probe.pk} requested ({what}); the agent on {gpu.node.name} runs it after "
            "its next report.",
        )
    return redirect(reverse("portal:fleet-gpu", args=[gpu.uuid]) + "#isolation")
