"""The admins' tenants table (issue 33, item 3): ``/console/tenants/`` and
``GET /api/v1/console/tenants/``: every tenant and department with quota, use, borrowing,
lending, utilisation, pending work and open requests; sorted, filtered, paged, downloaded as
CSV; platform admins only; its totals agree with the admin pages; its queries do not grow
with tenants."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from approvals.choices import RequestStatus
from approvals.models import QuotaChangeRequest
from tenants.services import tenant_create
from tests.conftest import seed_quota
from tests.dashboards.data import rollup_values, rollups_insert
from usage.buckets import bucket_start
from usage.choices import Metric, Resolution, WorkloadState
from usage.models import Workload

pytestmark = pytest.mark.django_db

PAGE = "/console/tenants/"
API = "/api/v1/console/tenants/"
M = Metric


def page_client(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


def api_client(user) -> APIClient:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client


def rows_by_slug(body: dict) -> dict[str, dict]:
    return {r["slug"]: r for r in body["results"]}


def waiting(world, tenant, n: int, state: str = WorkloadState.PENDING) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    Workload.objects.bulk_create(
        Workload(
            cluster=world.a100, tenant=tenant, namespace=f"{tenant.slug}-training",
            name=f"wait-{tenant.slug}-{state}-{i}", uid=f"uid-{tenant.slug}-{state}-{i}", gpus=1,
            state=state, created_at=now - timedelta(minutes=10), updated_at=now,
        )
        for i in range(n)
    )  # fmt: skip


# --- who may see it -----------------------------------------------------------------------------


def test_only_platform_admins_see_the_table(world):
    anonymous = Client().get(PAGE)
    assert anonymous.status_code == 302
    assert "/login/" in anonymous["Location"]
    for user in (world.alice, world.carol, world.victor):  # a lead, a member, a viewer
        assert page_client(user).get(PAGE).status_code == 403
        assert page_client(user).get(PAGE, {"download": "csv"}).status_code == 403
        assert api_client(user).get(API).status_code == 403
        assert api_client(user).get(API, {"download": "csv"}).status_code == 403
    assert APIClient().get(API).status_code in (401, 403)
    assert page_client(world.admin).get(PAGE).status_code == 200
    assert api_client(world.admin).get(API).status_code == 200


def test_the_admin_navigation_links_to_it(world):
    html = page_client(world.admin).get("/console/").content.decode()
    assert f'href="{PAGE}"' in html
    assert f'href="{PAGE}"' not in page_client(world.alice).get("/").content.decode()


# --- the figures ---------------------------------------------------------------------------------


def test_rows_carry_quota_use_borrowing_utilisation_and_work(world, usage_data):
    waiting(world, world.team_a, 2)
    waiting(world, world.team_a, 1, WorkloadState.EVICTED)
    waiting(world, world.team_b, 1, WorkloadState.ADMITTED)  # running: not pending
    QuotaChangeRequest.objects.create(
        tenant=world.team_b, cluster=world.a100, reason="more", status=RequestStatus.PENDING
    )
    QuotaChangeRequest.objects.create(
        tenant=world.team_b, cluster=world.a100, reason="old", status=RequestStatus.REJECTED
    )
    body = api_client(world.admin).get(API, {"range": "7d"}).json()
    rows = rows_by_slug(body)
    assert set(rows) == {"team-a", "team-b", "team-c"}
    a, b, c = rows["team-a"], rows["team-b"], rows["team-c"]
    # team-a: 8 A100s (weight 1) and 2 H100s (weight 2) in use now, 2 A100s borrowed.
    assert a["allocated_gpus"] == pytest.approx(12)
    assert a["borrowed_gpus"] == pytest.approx(2)
    assert a["gpu_utilization_pct"] == pytest.approx(65)  # (50 + 80) / 2, as many samples
    assert a["pending_workloads"] == 3
    assert b["allocated_gpus"] == pytest.approx(3)
    assert b["gpu_utilization_pct"] == pytest.approx(10)
    assert b["open_requests"] == 1
    assert b["pending_workloads"] == 0
    assert c["allocated_gpus"] is None  # nothing reported: unknown, not 0
    assert c["gpu_utilization_pct"] is None
    a100 = next(f for f in a["flavors"] if f["flavor"] == "a100-80gb")
    assert (a100["guaranteed"], a100["limit"], a100["allocated"]) == (6, 10, 8)
    # team-a borrows 2 A100s; team-b has 4 - 3 = 1 unused and team-c 2: they lend 2 of 3.
    lent = {s: next(f for f in r["flavors"] if f["flavor"] == "a100-80gb")["lent"]
            for s, r in rows.items()}  # fmt: skip
    assert lent == pytest.approx({"team-a": 0, "team-b": 2 / 3, "team-c": 4 / 3})
    assert body["totals"]["lent"] == pytest.approx(2)
    assert body["totals"]["pending"] == 3
    assert body["totals"]["requests"] == 1


def test_use_now_is_each_series_latest_reading_even_when_others_are_newer(world, usage_data):
    """The newest 5-minute bucket holds only team-b's A100 use: team-b reads it, and team-a
    (whose last reading is a bucket older) still reads its own latest, not nothing."""
    newest = bucket_start(timezone.now(), Resolution.FIVE_MINUTES)
    key = (int(Resolution.FIVE_MINUTES), newest, int(M.QUOTA_USED), world.a100_gpu.cluster_id)
    rollups_insert([(*key, world.team_b.pk, world.a100_gpu.pk, 5, 25.0, 5.0, 5.0)])
    rows = rows_by_slug(api_client(world.admin).get(API).json())
    b100 = next(f for f in rows["team-b"]["flavors"] if f["flavor"] == "a100-80gb")
    assert b100["allocated"] == pytest.approx(5)
    assert rows["team-a"]["allocated_gpus"] == pytest.approx(12)
    assert rows["team-a"]["borrowed_gpus"] == pytest.approx(2)


def test_totals_agree_with_the_admin_pages(world, usage_data):
    """The table's guaranteed, limit and allocated totals are the "My tenants" cards' (an
    admin's cards show every tenant), per flavor its guarantees those of /usage/, and a
    tenant's utilisation that of its profile over the same range."""
    admin = page_client(world.admin)
    table = admin.get(PAGE, {"range": "7d"}).context["table"]
    cards = admin.get("/").context["cards"]
    guaranteed = sum(qs["quota_set"].guaranteed_gpu_units for c in cards for qs in c["quota_sets"])
    limit = sum(qs["quota_set"].limit_gpu_units for c in cards for qs in c["quota_sets"])
    used = sum(
        line.used * line.item.gpu_weight
        for c in cards
        for qs in c["quota_sets"]
        for line in qs["lines"]
        if line.used is not None
    )
    assert table.totals["guaranteed"] == pytest.approx(float(guaranteed))
    assert table.totals["limit"] == pytest.approx(float(limit))
    assert table.totals["allocated"] == pytest.approx(float(used))
    assert table.count == len(cards)
    usage = admin.get("/usage/", {"range": "7d"}).context["dashboard"]
    for view in usage.clusters:
        for flavor in view.flavors:
            narrowed = admin.get(
                PAGE, {"cluster": view.cluster.name, "flavor": flavor.flavor.name}
            ).context["table"]
            assert narrowed.totals["guaranteed"] == pytest.approx(flavor.guaranteed * flavor.weight)
            assert narrowed.totals["limit"] == pytest.approx(flavor.limit * flavor.weight)
    days = {k: f"{getattr(table.period, k):%Y-%m-%dT%H:%M}" for k in ("start", "end")}
    profile = page_client(world.alice).get("/tenants/team-a/profile/", days)
    row = next(r for r in table.rows if r.slug == "team-a")
    assert row.utilization == pytest.approx(profile.context["profile"].mean_utilization)


# --- sorting, filtering, paging ----------------------------------------------------------------


def test_sorted_by_any_column_both_ways_unknowns_last(world, usage_data):
    client = api_client(world.admin)

    def order(sort: str) -> list[str]:
        return [r["slug"] for r in client.get(API, {"sort": sort}).json()["results"]]

    assert order("name") == ["team-a", "team-b", "team-c"]
    assert order("-name") == ["team-c", "team-b", "team-a"]
    assert order("-slug") == ["team-c", "team-b", "team-a"]
    assert order("-allocated") == ["team-a", "team-b", "team-c"]
    assert order("allocated") == ["team-b", "team-a", "team-c"]  # team-c: not reported, last
    assert order("utilization") == ["team-b", "team-a", "team-c"]
    assert order("-guaranteed")[0] == "team-a"
    for key in ("department", "limit", "borrowed", "lent", "pending", "requests"):
        for sort in (key, f"-{key}"):
            assert sorted(order(sort)) == ["team-a", "team-b", "team-c"], sort


def test_filters_narrow_rows_and_figures(world, usage_data):
    department = tenant_create(slug="research", display_name="Research", actor=world.admin)
    team = tenant_create(
        slug="vision", display_name="Vision lab", actor=world.admin, parent=department
    )
    seed_quota(team, world.a100, world.a100_gpu, 1, 2, actor=world.admin)
    client = api_client(world.admin)
    body = client.get(API, {"department": "research"}).json()
    rows = rows_by_slug(body)
    assert set(rows) == {"research", "vision"}
    assert rows["research"]["kind"] == "department"
    assert rows["research"]["teams"] == 1
    assert (rows["vision"]["kind"], rows["vision"]["department"]) == ("team", "research")
    assert body["totals"]["guaranteed"] == pytest.approx(1)
    h100 = client.get(API, {"cluster": "demo-h100"}).json()
    assert all(f["cluster"] == "demo-h100" for r in h100["results"] for f in r["flavors"])
    assert "vision" not in rows_by_slug(h100)  # no quota there
    assert rows_by_slug(h100)["team-a"]["allocated_gpus"] == pytest.approx(4)  # 2 H100s x 2
    a100 = client.get(API, {"flavor": "a100-80gb"}).json()
    assert rows_by_slug(a100)["team-a"]["allocated_gpus"] == pytest.approx(8)
    found = client.get(API, {"q": "LAB"}).json()
    assert [r["slug"] for r in found["results"]] == ["vision"]
    assert client.get(API, {"q": "team-b"}).json()["count"] == 1


def test_paged_in_order_with_totals_over_every_page(world):
    for i in range(30):
        tenant_create(slug=f"extra-{i:02d}", display_name=f"Extra {i:02d}", actor=world.admin)
    client = api_client(world.admin)
    first = client.get(API, {"sort": "slug", "page_size": 25}).json()
    second = client.get(API, {"sort": "slug", "page_size": 25, "page": 2}).json()
    assert (first["count"], first["pages"], len(first["results"])) == (33, 2, 25)
    slugs = [r["slug"] for r in first["results"] + second["results"]]
    assert slugs == sorted(slugs) and len(set(slugs)) == 33
    assert first["totals"] == second["totals"]
    by_figure = client.get(API, {"sort": "-limit", "page_size": 25, "page": 2}).json()
    assert len(by_figure["results"]) == 8
    assert all(r["limit_gpus"] == 0 for r in by_figure["results"])
    page = page_client(world.admin).get(PAGE, {"page_size": 25}).content.decode()
    assert "Page 1 of 2" in page
    assert "33 tenants" in page


@pytest.mark.parametrize(
    ("query", "field", "names"),
    [
        ({"sort": "size"}, "sort", ["name", "-allocated", "utilization"]),
        ({"cluster": "nowhere"}, "cluster", ["demo-a100", "demo-h100"]),
        ({"flavor": "v100"}, "flavor", ["a100-80gb", "h100-80gb", "h100-mig-1g-10gb"]),
        ({"department": "team-a"}, "department", ["there are none yet"]),
        ({"range": "24h"}, "range", ["7d", "30d"]),
        ({"page_size": "7"}, "page_size", ["25", "50", "100", "200"]),
        ({"page": "x"}, "page", ["whole number"]),
        ({"page": "9"}, "page", ["1 to 1"]),
        ({"colour": "red"}, "colour", ["department", "cluster", "flavor", "sort"]),
    ],
)
def test_a_value_not_offered_is_a_400_naming_the_parameter_and_choices(world, query, field, names):
    response = api_client(world.admin).get(API, query)
    assert response.status_code == 400, response.content
    message = " ".join(response.json()["fields"][field])
    for name in names:
        assert name in message
    page = page_client(world.admin).get(PAGE, query)
    assert page.status_code == 400
    html = page.content.decode()
    assert field in html
    assert names[0] in html
    if field != "page":  # a download has every page
        csv_response = page_client(world.admin).get(PAGE, {**query, "download": "csv"})
        assert csv_response.status_code == 400


# --- CSV ---------------------------------------------------------------------------------------


def test_csv_has_every_matching_row_with_units(world, usage_data):
    for i in range(30):
        tenant_create(slug=f"extra-{i:02d}", display_name=f"Extra {i:02d}", actor=world.admin)
    for url in (PAGE, API):
        client = page_client(world.admin) if url == PAGE else api_client(world.admin)
        response = client.get(url, {"download": "csv", "page_size": 25, "sort": "-allocated"})
        assert response.status_code == 200
        assert response["Content-Disposition"].startswith('attachment; filename="tenants-')
        assert response["Content-Type"].startswith("text/csv")
        table = list(csv.reader(io.StringIO(response.content.decode())))
        header, rows = table[0], table[1:]
        assert "guaranteed (GPUs)" in header
        assert "mean GPU utilisation (%)" in header
        assert len(rows) == 33  # every page
        first = dict(zip(header, rows[0], strict=True))
        assert first["tenant"] == "team-a"
        assert first["allocated now (GPUs)"] == "12.0"
        assert first["mean GPU utilisation (%)"] == "65.0"
        assert (
            "demo-a100/a100-80gb: 8 / 6 / 10"
            in first["flavors (GPUs allocated / guaranteed / limit)"]
        )
    narrowed = page_client(world.admin).get(PAGE, {"download": "csv", "q": "team"})
    assert len(list(csv.reader(io.StringIO(narrowed.content.decode())))) == 4


def test_the_page_says_its_units_and_period(world, usage_data):
    response = page_client(world.admin).get(PAGE, {"range": "30d"})
    html = response.content.decode()
    table = response.context["table"]
    assert (table.period.end - table.period.start).days == 30
    assert table.period.end.hour == 0
    assert "Guaranteed GPUs" in html
    assert f"over {table.period_words}" in html
    assert "the 30 days from " in html
    assert "3 tenants" in html
    assert "65%" in html
    assert "not reported" in html  # team-c
    assert "?download=csv" in html or "download=csv" in html


# --- speed -------------------------------------------------------------------------------------


def grow(world, count: int, start: int = 0) -> None:  # type: ignore[no-untyped-def]
    """``count`` more tenants with A100 quota, use now and utilisation over the week, a
    pending workload and an open request each."""
    now = timezone.now()
    series = {}
    for i in range(start, start + count):
        tenant = tenant_create(slug=f"grown-{i:03d}", display_name=f"Grown {i}", actor=None)
        seed_quota(tenant, world.a100, world.a100_gpu, 0, 1)
        setattr(world, f"grown_{i}", tenant)
        series[(f"grown_{i}", "a100_gpu")] = {M.QUOTA_USED: (1, 1), M.GPU_UTILIZATION: (40, 60)}
        waiting(world, tenant, 1)
        QuotaChangeRequest.objects.create(
            tenant=tenant, cluster=world.a100, reason="r", status=RequestStatus.PENDING
        )
    rollups_insert(rollup_values(world, now=now, days=2, series=series))


def count_queries(client, url: str, query: dict) -> int:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as context:
        response = client.get(url, query)
    assert response.status_code == 200, response.content
    return len(context.captured_queries)


def test_queries_do_not_grow_with_tenants(world, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    grow(world, 5)
    page, api = page_client(world.admin), api_client(world.admin)
    queries = [(PAGE, {"sort": s}) for s in ("name", "-allocated", "utilization")]
    queries += [(API, {"sort": s}) for s in ("slug", "-pending")]
    queries += [(PAGE, {"download": "csv"}), (API, {"q": "grown", "cluster": "demo-a100"})]
    small = [count_queries(page if u == PAGE else api, u, q) for u, q in queries]
    grow(world, 45, start=5)
    large = [count_queries(page if u == PAGE else api, u, q) for u, q in queries]
    assert small == large
    assert api.get(API).json()["count"] == 53
