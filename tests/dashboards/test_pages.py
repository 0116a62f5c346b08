"""The dashboards' pages: who may open them, what they show, bad input, CSV, query counts."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from html import unescape

import pytest
from django.test import Client

from tenants.models import Tenant
from tests.conftest import seed_quota
from tests.dashboards.data import MIG_UUID, WHOLE_UUID, rollup_values, rollups_insert
from tests.factories import ClusterFactory, gpu_flavor

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def figures(response) -> dict:  # type: ignore[no-untyped-def]
    """The page's figures: the JSON plotly.js draws from, or, on the tenant usage page, whose
    charts come drawn as SVG, the figures it drew (each one on the page, named by its title)."""
    if "dashboard-charts" not in response.content.decode():
        drawn = response.context["figures"]
        body = response.content.decode()
        for key, figure in drawn.items():
            title = unescape(figure["layout"]["title"]["text"])
            assert f'<title id="chart-{key}-title">' in body, key
            assert title in unescape(body), title
        return drawn
    match = re.search(
        r'<script id="dashboard-charts" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page embeds no chart data"
    return json.loads(match[1])


def kpi(response, name: str) -> str:  # type: ignore[no-untyped-def]
    match = re.search(
        rf'data-kpi="{name}"><span class="kpi-value">([^<]*)</span>', response.content.decode()
    )
    assert match, name
    return match[1]


# --- tenant dashboard ------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["alice", "carol", "victor", "admin"])
def test_members_and_admins_see_the_tenant_dashboard_with_its_indicators(usage_data, persona):
    response = client_for(getattr(usage_data.world, persona)).get("/tenants/team-a/usage/")
    assert response.status_code == 200
    # The four rollout indicators (R21) from the data: (50 + 80) / 2, waits 60..600 s,
    # 1 eviction and 2 preemptions, 2 borrowed of 8 + 2 x 2 units used.
    assert kpi(response, "utilization") == "65 %"
    assert kpi(response, "queue-wait") == "3 min / 8 min"  # p95: 240 + 0.8 x 360 s
    assert kpi(response, "evictions") == "1 / 2"
    assert kpi(response, "borrowing") == "16.7 %"
    assert kpi(response, "peak-units") == "12"
    charts = figures(response)
    assert {"units", "utilization", "flavor-0", "flavor-1"} <= set(charts)
    a100 = charts["flavor-0"]
    names = [t["name"] for t in a100["data"]]
    assert names[:4] == ["used within guarantee (GPUs)", "borrowed (GPUs)", "guaranteed", "limit"]
    # Borrowing is visible: stacked on the use within the guarantee, 6 + 2 = 8.
    assert set(a100["data"][0]["y"]) == {6} and set(a100["data"][1]["y"]) == {2}
    assert set(a100["data"][2]["y"]) == {6} and set(a100["data"][3]["y"]) == {10}
    assert a100["layout"]["title"]["text"] == "demo-a100 · a100-80gb"
    # Normalised units: the H100's 2 GPUs weigh 2 each.
    assert set(charts["units"]["data"][2]["y"]) == {6 + 4 * 2}
    assert "team-b" not in response.content.decode()


def test_an_outsider_and_an_unknown_tenant_get_the_same_404(usage_data):
    bob = client_for(usage_data.world.bob)
    theirs = bob.get("/tenants/team-a/usage/")
    missing = bob.get("/tenants/no-such-team/usage/")
    assert theirs.status_code == missing.status_code == 404
    assert "team-a" not in theirs.content.decode()


def test_anonymous_visitors_are_sent_to_log_in():
    response = Client().get("/tenants/team-a/usage/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.parametrize(
    ("range_name", "step_s", "points"), [("24h", 300, 288), ("7d", 3600, 168), ("30d", 3600, 720)]
)
def test_the_range_picker_chooses_range_and_step(usage_data, range_name, step_s, points):
    response = client_for(usage_data.world.alice).get(f"/tenants/team-a/usage/?range={range_name}")
    assert response.status_code == 200
    x = figures(response)["flavor-0"]["data"][0]["x"]
    assert len(x) in (points - 1, points)  # the current step may not be rolled up yet
    assert response.context["period"].step.total_seconds() == step_s


def test_a_custom_range_and_a_flavor_filter(usage_data):
    now = usage_data.now
    start, end = now - timedelta(hours=20), now - timedelta(hours=10)
    query = f"?start={start:%Y-%m-%dT%H:%M}&end={end:%Y-%m-%dT%H:%M}&flavor=a100-80gb"
    response = client_for(usage_data.world.alice).get("/tenants/team-a/usage/" + query)
    assert response.status_code == 200
    charts = figures(response)
    assert "flavor-1" not in charts  # only the A100 flavor
    times = charts["flavor-0"]["data"][0]["x"]
    assert times[0] >= f"{start:%Y-%m-%dT%H}" and times[-1] < f"{end:%Y-%m-%dT%H:%M}"
    assert len(times) in (120, 121)  # 5-minute steps, widened to whole steps
    assert response.context["period"].name == "custom"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?start=2026-01-02T00:00&end=2026-01-01T00:00", "start must be before end"),
        ("?start=2020-01-01T00:00&end=2020-01-02T00:00", "kept for 30 days"),
        ("?start=yesterday", "Enter a valid date/time"),
        ("?range=1y", "Select a valid choice"),
    ],
)
def test_bad_ranges_are_explained_on_the_page(usage_data, query, message):
    response = client_for(usage_data.world.alice).get("/tenants/team-a/usage/" + query)
    assert response.status_code == 400
    error = re.search(r'class="error range-error"[^>]*>([^<]*)<', response.content.decode())
    assert error and message in error[1], response.content.decode()[:2000]


def range_error(response) -> str:  # type: ignore[no-untyped-def]
    error = re.search(r'class="error range-error"[^>]*>([^<]*)<', response.content.decode())
    assert error, response.content.decode()[:3000]
    return unescape(error[1])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?cluster=no-such-cluster",
         "cluster: no-such-cluster is not one of team-a's clusters: demo-a100, demo-h100."),
        ("?flavor=no-such-flavor",
         "flavor: no-such-flavor is not one of team-a's GPU flavors: a100-80gb, h100-80gb, "
         "h100-mig-1g-10gb."),
        ("?cluster=demo-h100&flavor=a100-80gb",
         "flavor: a100-80gb is not on demo-h100; its GPU flavors there: h100-80gb, h100-mig-1g-10gb."),
    ],
)  # fmt: skip
def test_an_unknown_cluster_or_flavor_is_named_on_the_page_with_the_choices(
    usage_data, query, message
):
    response = client_for(usage_data.world.alice).get("/tenants/team-a/usage/" + query)

    assert response.status_code == 400
    assert range_error(response) == message
    body = response.content.decode()
    assert '<select name="cluster"' in body and '<select name="flavor"' in body
    assert '<option value="demo-h100"' in body and '<option value="h100-mig-1g-10gb"' in body
    assert "dashboard-charts" not in body  # no charts for a filter that matches nothing


def test_the_filter_offers_only_the_tenants_clusters(usage_data):
    world = usage_data.world
    l40 = ClusterFactory(name="demo-l40")
    gpu_flavor(l40, "l40s", gpus=8)
    seed_quota(world.team_b, l40, l40.flavors.get(), 2, 4)

    response = client_for(world.alice).get("/tenants/team-a/usage/")
    assert response.status_code == 200
    assert '<option value="demo-a100"' in response.content.decode()
    assert "demo-l40" not in response.content.decode()  # team-b's, not team-a's
    refused = client_for(world.alice).get("/tenants/team-a/usage/?cluster=demo-l40")
    assert refused.status_code == 400
    assert range_error(refused).startswith("cluster: demo-l40 is not one of team-a's clusters")
    # A choice made is kept selected.
    chosen = client_for(world.alice).get("/tenants/team-a/usage/?cluster=demo-h100")
    assert '<option value="demo-h100" selected>' in chosen.content.decode()


def test_the_csv_is_exactly_what_the_page_shows(usage_data):
    alice = client_for(usage_data.world.alice)
    page = alice.get("/tenants/team-a/usage/?range=24h&flavor=a100-80gb")
    response = alice.get("/tenants/team-a/usage/?range=24h&flavor=a100-80gb&download=csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    shown = figures(page)["flavor-0"]["data"]
    assert [r["time"] for r in rows] == shown[0]["x"]
    assert {(r["cluster"], r["flavor"]) for r in rows} == {("demo-a100", "a100-80gb")}
    assert {(r["used"], r["guaranteed"], r["limit"], r["borrowed"]) for r in rows} == {
        ("8", "6", "10", "2")
    }
    assert {r["used_max"] for r in rows} == {"9"}
    assert {r["gpu_utilization"] for r in rows} == {"50"}
    assert 'href="?range=24h&amp;flavor=a100-80gb&amp;download=csv"' in page.content.decode()


def test_the_tenant_dashboard_queries_do_not_grow_with_the_data(
    usage_data, django_assert_max_num_queries
):
    alice = client_for(usage_data.world.alice)
    alice.get("/tenants/team-a/usage/?range=30d")  # warm the session
    # 12, and who used what: rollups, workloads, flavors, utilisation (usage.breakdown), and
    # the tenant's vGPU shares (its GPU memory and compute lines; their use only where it has).
    with django_assert_max_num_queries(17):
        small = alice.get("/tenants/team-a/usage/?range=30d")
    # Ten times the series: more tenants' and a second copy of the flavors' rows.
    more = Tenant.objects.bulk_create(
        [Tenant(slug=f"extra-{i}", display_name=f"Extra {i}") for i in range(10)]
    )
    world = usage_data.world
    for tenant in more:
        world.team_c = tenant
        series = {("team_c", "a100_gpu"): {1: (50, 60), 5: (1, 2)}}
        rollups_insert(rollup_values(world, now=usage_data.now, series=series))
    with django_assert_max_num_queries(17):
        large = alice.get("/tenants/team-a/usage/?range=30d")
    assert small.status_code == large.status_code == 200


# --- admin dashboard -------------------------------------------------------------------------


def test_the_admin_dashboard_shows_shares_capacity_heatmap_mig_and_idle(usage_data):
    response = client_for(usage_data.world.admin).get("/usage/?range=7d")
    assert response.status_code == 200
    dashboard = response.context["dashboard"]
    a100 = next(c for c in dashboard.clusters if c.cluster.name == "demo-a100")
    h100 = next(c for c in dashboard.clusters if c.cluster.name == "demo-h100")
    flavor = a100.flavors[0]
    assert (flavor.capacity, flavor.guaranteed, flavor.limit) == (16, 12, 20)
    assert flavor.used_mean == pytest.approx(8 + 3)
    assert a100.shares[usage_data.world.a100_gpu.pk] == {"team-a": 8, "team-b": 3}
    # Across clusters in units: team-a 8 x 1 + 2 x 2, team-b 3.
    assert dashboard.tenant_units == {
        "team-a": {"demo-a100": 8, "demo-h100": 4},
        "team-b": {"demo-a100": 3},
    }
    # The heatmap: the whole GPU's recent samples (30 and 40 %), not the agent's 20 %.
    cells = {g.uuid: g for g in h100.gpus}
    assert cells[WHOLE_UUID].utilization == pytest.approx(35)
    mig = cells[MIG_UUID]
    assert (mig.instances, mig.free_slices, mig.largest_free_profile, mig.fragmented) == (
        2,
        3,
        "2g.20gb",
        True,
    )
    # team-b holds 3 GPUs at 10 %: idle; team-a's 50 % and 80 % are not.
    assert [(a.tenant, a.flavor) for a in dashboard.idle] == [("team-b", "a100-80gb")]
    assert dashboard.idle[0].idle_gpu_hours == pytest.approx(
        3 * 0.9 * response.context["period"].hours
    )
    charts = figures(response)
    assert {"across", "share-0", "capacity-0", "heatmap-1"} <= set(charts)
    heatmap = charts["heatmap-1"]["data"][0]
    assert heatmap["type"] == "heatmap" and heatmap["y"] == ["gpu-node-1"]
    assert heatmap["z"] == [[35.0, None]]
    share = charts["share-0"]
    assert [t["name"] for t in share["data"] if t["type"] == "bar"] == ["team-a", "team-b"]
    assert 'data-gpu="' + MIG_UUID + '"' in response.content.decode()


@pytest.mark.parametrize("persona", ["alice", "carol", "bob"])
def test_leads_and_members_are_refused_the_admin_pages(world, persona):
    client = client_for(getattr(world, persona))
    assert client.get("/usage/").status_code == 403
    assert client.get("/showback/").status_code == 403


def test_the_admin_dashboard_for_one_cluster_and_an_unknown_one(usage_data):
    admin = client_for(usage_data.world.admin)
    response = admin.get("/usage/?cluster=demo-h100")
    assert [c.cluster.name for c in response.context["dashboard"].clusters] == ["demo-h100"]
    refused = admin.get("/usage/?cluster=nowhere")  # inline, with the choices, not a 404 page
    assert refused.status_code == 400
    assert range_error(refused) == (
        "cluster: nowhere is not one of the clusters: demo-a100, demo-h100."
    )


def test_the_admin_dashboard_queries_are_bounded_with_many_tenants(
    usage_data, django_assert_max_num_queries
):
    admin = client_for(usage_data.world.admin)
    admin.get("/usage/")
    # 18: the MIG flavors' capacity is the fleet's count (what the approval check reads),
    # a few queries per cluster with MIG flavors, and the GPUs only Prometheus has seen for
    # the heatmap (one query); none per tenant.
    with django_assert_max_num_queries(18):
        assert admin.get("/usage/?range=7d").status_code == 200
    world = usage_data.world
    for tenant in Tenant.objects.bulk_create(
        [Tenant(slug=f"many-{i}", display_name=f"Many {i}") for i in range(30)]
    ):
        world.team_c = tenant
        rollups_insert(
            rollup_values(
                world, now=usage_data.now, days=8, series={("team_c", "h100_gpu"): {5: (1, 1)}}
            )
        )
    with django_assert_max_num_queries(18):
        response = admin.get("/usage/?range=7d")
    share = figures(response)["share-1"]
    # 31 tenants on the H100 flavor: the top ones by use, the rest as "others".
    assert any(t["name"].endswith("others") for t in share["data"])


def test_the_profile_and_showback_pages_queries_are_bounded(
    usage_data, django_assert_max_num_queries
):
    alice = client_for(usage_data.world.alice)
    alice.get("/tenants/team-a/profile/")
    # Each page also reads who used what (usage.breakdown): four queries more.
    with django_assert_max_num_queries(14):
        assert alice.get("/tenants/team-a/profile/?range=30d").status_code == 200
    with django_assert_max_num_queries(16):
        assert alice.get("/tenants/team-a/showback/").status_code == 200
