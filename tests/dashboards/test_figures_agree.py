"""Figures on the usage pages that describe the same thing agree (issue 35, item 2)."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from tests.dashboards.data import rollup_values, rollups_insert
from usage.choices import Metric

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
    middle = now - timezone.timedelta(days=3, hours=12)
    rows += [b if b[1] < middle else q for b, q in zip(busy, quiet, strict=True)]
    rollups_insert(rows)
    dashboard = client_for(world.admin).get("/usage/?range=7d").context["dashboard"]
    flavor = next(c for c in dashboard.clusters if c.cluster.name == "demo-a100").flavors[0]
    assert flavor.used_peak == pytest.approx(8)
    assert 2 < flavor.used_mean < 8
    assert flavor.used_mean <= flavor.used_peak
