"""Figures on the usage pages that describe the same thing agree (issue 35, item 2)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from gpu_agent.models import Gpu, Node
from tests.dashboards.data import rollup_values, rollups_insert
from usage import services as usage_services
from usage.choices import Metric, Source

pytestmark = pytest.mark.django_db

M = Metric


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def flavor_row(html: str, cluster: str, flavor: str) -> list[str]:
    section = html.split(f'<section class="cluster-usage" id="cluster-{cluster}"', 1)[1]
    row = re.search(rf'<tr data-flavor="{flavor}">(.*?)</tr>', section, re.S)
    assert row, flavor
    return re.findall(r"<td>([^<]*)</td>", row[1])


def test_a_flavors_mean_use_never_exceeds_its_peak(world):
    """Two tenants at 5 and 4 GPUs all week: the flavor's use is 9 at every step. The page
    said "mean 9, peak 5" (the tenants' means added up, but the highest one tenant reached
    alone); both now come from the flavor's total per step."""
    series = {
        ("team_a", "a100_gpu"): {M.QUOTA_USED: (5, 5)},
        ("team_b", "a100_gpu"): {M.QUOTA_USED: (4, 4)},
    }
    rollups_insert(rollup_values(world, now=timezone.now(), days=8, series=series))
    response = client_for(world.admin).get("/usage/?range=7d")
    dashboard = response.context["dashboard"]
    flavor = next(c for c in dashboard.clusters if c.cluster.name == "demo-a100").flavors[0]
    assert flavor.used_mean == pytest.approx(9)
    assert flavor.used_peak == pytest.approx(9)
    # Flavor, capacity, guaranteed, limits, tenants, mean use, peak, weight.
    cells = flavor_row(response.content.decode(), "demo-a100", "a100-80gb")
    assert (cells[5], cells[6]) == ("9", "9")


def test_the_peak_is_the_highest_step_of_the_flavors_total(world):
    """team-a uses 6 GPUs in the older half of the week and none after, team-b 2 all along:
    the flavor's steps read 8 then 2, so the peak is 8 (team-a's 6 alone before) and the
    mean the steps' mean, 5, never above it."""
    now = timezone.now()
    rows = rollup_values(
        world, now=now, days=8, series={("team_b", "a100_gpu"): {M.QUOTA_USED: (2, 2)}}
    )
    busy = rollup_values(
        world, now=now, days=8, series={("team_a", "a100_gpu"): {M.QUOTA_USED: (6, 6)}}
    )
    quiet = rollup_values(
        world, now=now, days=8, series={("team_a", "a100_gpu"): {M.QUOTA_USED: (0, 0)}}
    )
    middle = now - timedelta(days=3, hours=12)
    rows += [b if b[1] < middle else q for b, q in zip(busy, quiet, strict=True)]
    rollups_insert(rows)
    dashboard = client_for(world.admin).get("/usage/?range=7d").context["dashboard"]
    flavor = next(c for c in dashboard.clusters if c.cluster.name == "demo-a100").flavors[0]
    assert flavor.used_peak == pytest.approx(8)
    assert 2 < flavor.used_mean < 8
    assert flavor.used_mean <= flavor.used_peak


def test_the_heatmap_the_fleet_and_the_clusters_utilisation_agree_over_the_same_minutes(world):
    """As make run's agents report: three A100s on one node, two running team-a's pods (60 %
    and 40 %) and one no tenant holds (0 %), for the last few minutes only. The heatmap, the
    Fleet page and the cluster's figures on /usage/ read the same samples: 33 % everywhere
    (the cluster's mean used to count the tenants' GPUs only, 50 %, beside a heatmap that
    showed the idle GPU at 0). team-a's own page says 50 %: its GPUs only, as the page says."""
    now = timezone.now()
    node = Node.objects.create(name="a100-node-1", cluster=world.a100, last_report_at=now)
    held = {0: (world.team_a.pk, 60.0), 1: (world.team_a.pk, 40.0), 2: (None, 0.0)}
    rows = []
    for index, (tenant_id, util) in held.items():
        uuid = f"GPU-a100-node-1-{index:04d}"
        Gpu.objects.create(
            node=node, uuid=uuid, index=index, name="NVIDIA A100-SXM4-80GB",
            memory_total_mib=81920, utilization_pct=int(util), last_seen_at=now,
        )  # fmt: skip
        flavor_id = world.a100_gpu.pk
        rows += [
            (now - timedelta(minutes=m), int(M.GPU_UTILIZATION), util, world.a100.pk,
             tenant_id, flavor_id, node.pk, uuid, None, None)
            for m in (1, 2)
        ]  # fmt: skip
    usage_services.samples_write(rows=rows, source=Source.NODE_AGENT)
    usage_services.rollups_run_all(now=now)

    admin = client_for(world.admin)
    response = admin.get("/usage/?range=24h")
    a100 = next(c for c in response.context["dashboard"].clusters if c.cluster.name == "demo-a100")
    cells = [g.utilization for g in a100.gpus]
    assert cells == [pytest.approx(60), pytest.approx(40), pytest.approx(0)]
    assert a100.utilization_now == pytest.approx(100 / 3)
    assert a100.utilization == pytest.approx(100 / 3)
    html = response.content.decode()
    row = re.search(r'<tr data-cluster="demo-a100">(.*?)</tr>', html, re.S)
    assert row and "<td data-utilization>33 %</td><td data-utilization-now>33 %</td>" in row[1]
    fleet = admin.get("/fleet/").content.decode()
    shown = [float(v) for v in re.findall(r"<td data-utilization>(\d+) %</td>", fleet)]
    assert sum(shown) / len(shown) == pytest.approx(a100.utilization_now)
    team_a = admin.get("/tenants/team-a/usage/?range=24h&cluster=demo-a100")
    assert team_a.context["dashboard"].indicators.mean_gpu_utilization == pytest.approx(50)
