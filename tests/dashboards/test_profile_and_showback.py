"""The workload profile report and showback: pages and API, numbers, scoping, bad input."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from dashboards import selectors
from dashboards.models import FlavorPrice
from tenants.models import AuditEvent
from usage.choices import Metric, Resolution
from usage.models import Rollup

pytestmark = pytest.mark.django_db


def page_client(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


# --- workload profile ------------------------------------------------------------------------


def test_the_profile_api_describes_team_a_workloads(usage_data, api_as):
    response = api_as(usage_data.world.alice).get("/api/v1/tenants/team-a/profile/")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["tenant"] == "team-a"
    assert body["submissions"] == 5
    assert body["gpus_per_job"] == [
        {"gpus": 1.0, "jobs": 1},
        {"gpus": 2.0, "jobs": 2},
        {"gpus": 4.0, "jobs": 1},
        {"gpus": 8.0, "jobs": 1},
    ]
    # Every job ran 2 hours.
    assert {b["label"]: b["jobs"] for b in body["durations"]["buckets"]}["1-4 h"] == 5
    assert body["durations"]["p50_s"] == 7200
    # The 8-, 4- and 2-GPU jobs overlapped for two minutes.
    assert body["peak_concurrent_gpus"] == 14
    assert body["queue_wait_p50_s"] == 180
    assert body["mean_gpu_utilization"] == pytest.approx(65)  # 50 % and 80 %, as many samples
    assert body["peak_memory_mib"] == 60000
    cells = body["submissions_by_hour_of_week"]
    assert sum(c["count"] for c in cells) == 5
    created = usage_data.workloads[0].created_at
    assert {
        "weekday": selectors.WEEKDAYS[created.weekday()],
        "hour": created.hour,
        "count": 1,
    } in cells
    flavors = {(f["cluster"], f["flavor"]): f for f in body["flavors"]}
    assert flavors[("demo-a100", "a100-80gb")]["peak_used"] == 9
    assert flavors[("demo-h100", "h100-80gb")]["mean_utilization"] == 80


def test_the_profile_for_a_period_without_work_is_empty_not_an_error(usage_data, api_as):
    now = usage_data.now
    start, end = now - timedelta(hours=6), now
    response = api_as(usage_data.world.alice).get(
        "/api/v1/tenants/team-a/profile/", {"start": start.isoformat(), "end": end.isoformat()}
    )
    assert response.status_code == 200
    assert response.json()["submissions"] == 0
    assert response.json()["peak_concurrent_gpus"] == 0


@pytest.mark.parametrize(
    ("query", "field", "why"),
    [
        ({"start": "2026-02-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start", "before end"),
        ({"start": "2001-01-01T00:00:00Z", "end": "2001-02-01T00:00:00Z"}, "start", "kept for"),
        ({"start": "last tuesday"}, "start", "Datetime has wrong format"),
        ({"since": "2026-01-01"}, "since", "Unknown field"),
    ],
)
def test_bad_profile_ranges_are_400_with_the_field(usage_data, api_as, query, field, why):
    response = api_as(usage_data.world.alice).get("/api/v1/tenants/team-a/profile/", query)
    assert response.status_code == 400
    assert why in " ".join(response.json()["fields"][field])


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"start": "9999-12-31T00:00:00Z"}, "start"),
        ({"start": "9999-12-30T00:00:00Z", "end": "9999-12-31T23:59:59Z"}, "end"),
        ({"end": "9999-12-31T23:59:59Z"}, "end"),
        ({"end": "0001-01-01T00:00:00Z"}, "end"),
        ({"start": "0001-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start"),
    ],
)
def test_profile_dates_out_of_range_are_400_naming_the_parameter(usage_data, api_as, query, field):
    """Year 9999 (or 1) must not reach the date arithmetic: a 400 naming the parameter."""
    response = api_as(usage_data.world.carol).get("/api/v1/tenants/team-a/profile/", query)
    assert response.status_code == 400, response.content
    assert "from 1970 to 2999" in " ".join(response.json()["fields"][field])
    page = page_client(usage_data.world.carol).get(
        "/tenants/team-a/profile/", {k: v.rstrip("Z") for k, v in query.items()}
    )
    assert page.status_code == 400
    assert "from 1970 to 2999" in page.content.decode()


@pytest.mark.parametrize("query", [{"end": "9999-12-31T23:59:59Z"}, {"end": "0001-01-01T00:00Z"}])
def test_usage_dates_out_of_range_are_400_naming_the_parameter(usage_data, api_as, query):
    response = api_as(usage_data.world.carol).get("/api/v1/tenants/team-a/usage/", query)
    assert response.status_code == 400, response.content
    assert "from 1970 to 2999" in " ".join(response.json()["fields"]["end"])


def test_another_tenants_profile_is_404(usage_data, api_as):
    assert api_as(usage_data.world.bob).get("/api/v1/tenants/team-a/profile/").status_code == 404
    assert page_client(usage_data.world.bob).get("/tenants/team-a/profile/").status_code == 404


def test_the_profile_page_is_printable_and_linked_from_the_request_form(usage_data):
    alice = page_client(usage_data.world.alice)
    response = alice.get("/tenants/team-a/profile/?range=30d")
    assert response.status_code == 200
    text = response.content.decode()
    assert "data-print" in text and 'class="print-only"' in text
    assert response.context["profile"].submissions == 5
    form = alice.get("/tenants/team-a/requests/new/?cluster=demo-a100").content.decode()
    assert 'href="/tenants/team-a/profile/"' in form
    detail = alice.get("/tenants/team-a/").content.decode()
    for path in ("usage", "profile", "showback"):
        assert f'href="/tenants/team-a/{path}/"' in detail


def test_the_profile_page_explains_a_bad_range(usage_data):
    response = page_client(usage_data.world.carol).get(
        "/tenants/team-a/profile/?start=2026-03-01T00:00&end=2026-02-01T00:00"
    )
    assert response.status_code == 400
    assert "start must be before end" in response.content.decode()


# --- showback --------------------------------------------------------------------------------


@pytest.fixture
def month(usage_data) -> date:
    """The previous month: the fixture's 30 days of hourly rollups cover most of it."""
    return selectors.parse_month(selectors.month_options(now=usage_data.now)[1])


def hours_in(month: date, world, tenant, flavor) -> int:  # type: ignore[no-untyped-def]
    start, end = selectors._month_bounds(month)
    return Rollup.objects.filter(
        resolution=Resolution.HOUR, metric=Metric.QUOTA_USED, tenant_id=tenant.pk,
        flavor_id=flavor.pk, bucket__gte=start, bucket__lt=end,
    ).count()  # fmt: skip


@pytest.fixture
def prices(usage_data, month) -> None:
    a100 = usage_data.world.a100_gpu
    FlavorPrice.objects.create(flavor=a100, price=Decimal("2"), valid_from=date(2020, 1, 1))
    FlavorPrice.objects.create(flavor=a100, price=Decimal("3"), valid_from=month)
    # Set in the middle of the month: the month keeps the price of its first day.
    FlavorPrice.objects.create(
        flavor=a100, price=Decimal("5"), valid_from=month + timedelta(days=14)
    )


def test_showback_prices_gpu_hours_per_tenant_and_flavor(usage_data, month, prices, api_as):
    world = usage_data.world
    response = api_as(world.admin).get("/api/v1/showback/", {"month": f"{month:%Y-%m}"})
    assert response.status_code == 200, response.content
    body = response.json()
    rows = {(r["tenant"], r["flavor"]): r for r in body["rows"]}
    assert set(rows) == {("team-a", "a100-80gb"), ("team-a", "h100-80gb"), ("team-b", "a100-80gb")}
    hours = hours_in(month, world, world.team_a, world.a100_gpu)
    assert hours > 24 * 20
    a = rows[("team-a", "a100-80gb")]
    assert a["gpu_hours"] == pytest.approx(8 * hours)
    assert (a["price"], a["currency"]) == ("3.0000", "EUR")
    assert Decimal(a["cost"]) == Decimal(8 * hours * 3).quantize(Decimal("0.01"))
    h100 = rows[("team-a", "h100-80gb")]
    assert h100["unit_hours"] == pytest.approx(2 * 2 * hours)  # weight 2
    assert h100["price"] is None and h100["cost"] is None
    totals = {t["tenant"]: t for t in body["totals"]}
    assert Decimal(totals["team-b"]["cost"]) == Decimal(3 * hours * 3).quantize(Decimal("0.01"))


@pytest.mark.parametrize(("persona", "tenants"), [("alice", {"team-a"}), ("bob", {"team-b"})])
def test_showback_shows_leads_their_own_tenants(usage_data, month, persona, tenants, api_as):
    client = api_as(getattr(usage_data.world, persona))
    body = client.get("/api/v1/showback/", {"month": f"{month:%Y-%m}"}).json()
    assert {r["tenant"] for r in body["rows"]} == tenants
    assert client.get("/api/v1/showback/", {"tenant": "team-c"}).status_code == 404


@pytest.mark.parametrize(
    ("month", "why"),
    [("2001-01", "kept for 400 days"), ("2999-01", "not begun"), ("2026-13", "YYYY-MM"),
     ("December", "does not match"), ("9999-12", "from 1970 to 2999"),
     ("0001-01", "from 1970 to 2999"), ("\u0662\u0660\u0662\u0666-\u0660\u0661", "does not match")],
)  # fmt: skip
def test_showback_refuses_bad_months_with_400(usage_data, api_as, month, why):
    response = api_as(usage_data.world.admin).get("/api/v1/showback/", {"month": month})
    assert response.status_code == 400
    assert why in " ".join(response.json()["fields"]["month"])


def test_the_showback_pages_table_chart_and_csv(usage_data, month, prices):
    world = usage_data.world
    admin = page_client(world.admin)
    response = admin.get(f"/showback/?month={month:%Y-%m}")
    assert response.status_code == 200
    assert [r.tenant for r in response.context["report"].rows] == ["team-a", "team-a", "team-b"]
    assert 'data-chart="gpu-hours"' in response.content.decode()
    csv_text = admin.get(f"/showback/?month={month:%Y-%m}&download=csv").content.decode()
    lines = csv_text.strip().splitlines()
    assert (
        lines[0] == "month,tenant,cluster,flavor,gpu_hours,unit_hours,price_per_hour,currency,cost"
    )
    assert len(lines) == 4
    hours = hours_in(month, world, world.team_b, world.a100_gpu)
    assert lines[3].startswith(f"{month:%Y-%m},team-b,demo-a100,a100-80gb,{3 * hours},")
    lead = page_client(world.alice)
    own = lead.get(f"/tenants/team-a/showback/?month={month:%Y-%m}")
    assert {r.tenant for r in own.context["report"].rows} == {"team-a"}
    assert lead.get("/tenants/team-b/showback/").status_code == 404
    bad = lead.get("/tenants/team-a/showback/?month=1999-01")
    assert bad.status_code == 400 and "kept for" in bad.content.decode()
    far = lead.get("/tenants/team-a/showback/?month=9999-12")
    assert far.status_code == 400 and "from 1970 to 2999" in far.content.decode()


# --- prices ----------------------------------------------------------------------------------


def test_admins_set_prices_and_leads_read_them(world, api_as):
    body = {"cluster": "demo-a100", "flavor": "a100-80gb", "price": "2.5", "currency": "EUR",
            "valid_from": "2026-01-01"}  # fmt: skip
    assert (
        api_as(world.alice).post("/api/v1/flavor-prices/", body, format="json").status_code == 403
    )
    admin = api_as(world.admin)
    response = admin.post("/api/v1/flavor-prices/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["price"] == "2.5000"
    assert AuditEvent.objects.filter(action="flavor_price.created").count() == 1
    again = admin.post("/api/v1/flavor-prices/", body, format="json")
    assert again.status_code == 409
    listed = api_as(world.alice).get("/api/v1/flavor-prices/").json()["results"]
    assert [(p["flavor"], p["price"]) for p in listed] == [("a100-80gb", "2.5000")]


@pytest.mark.parametrize(
    ("change", "field"),
    [({"price": "-1"}, "price"), ({"currency": "euro"}, "currency"),
     ({"flavor": "no-such-flavor"}, "flavor"), ({"valid_from": "soon"}, "valid_from"),
     ({"discount": "5"}, "discount")],
)  # fmt: skip
def test_bad_prices_are_refused_and_nothing_is_stored(world, api_as, change, field):
    body = {"cluster": "demo-a100", "flavor": "a100-80gb", "price": "2.5",
            "valid_from": "2026-01-01"} | change  # fmt: skip
    response = api_as(world.admin).post("/api/v1/flavor-prices/", body, format="json")
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert not FlavorPrice.objects.exists()
