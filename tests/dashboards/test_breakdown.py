"""Who used what: a tenant's GPU-hours per person, per namespace and per workload, on the
usage page, showback (page, CSV, API), the workload profile and the breakdown API. What a lead
relies on: the parts add up to the tenant's figure everywhere both are shown, the rest is an
explicit unattributed row, and nobody outside the tenant sees its people."""

from __future__ import annotations

import csv
import io
import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from dashboards import selectors
from dashboards.models import FlavorPrice
from quotas.choices import GPU_RESOURCE
from usage import selectors as usage_selectors
from usage.breakdown import apportion, usage_breakdown
from usage.choices import Resolution, WorkloadState
from usage.models import Workload, WorkloadActivity

pytestmark = pytest.mark.django_db


def page_client(user) -> Client:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def people(usage_data):  # type: ignore[no-untyped-def]
    """On top of the dashboards' data (team-a: 8 A100s and 2 H100s used every hour, five
    workloads with no submitter a day ago): alice's 4 A100s for the last 10 hours (running),
    alice's 8-A100 job for 3 hours two days ago (with the others' jobs it claims more than the
    8 used: scaled down), carol's 2 H100s for 4 hours in another namespace, and bob's job in
    team-b (never team-a's)."""
    world, now = usage_data.world, usage_data.now
    hour = now.replace(minute=0, second=0, microsecond=0)

    def workload(name, tenant, cluster, flavor, gpus, start, end, submitter, namespace, **kw):  # type: ignore[no-untyped-def]
        return Workload.objects.create(
            cluster=cluster,
            tenant=tenant,
            namespace=namespace,
            name=name,
            uid=f"uid-{name}",
            gpus=gpus,
            flavors=[flavor.name],
            resources=[{"flavor": flavor.name, "resource": GPU_RESOURCE, "amount": gpus}],
            state=WorkloadState.FINISHED if end else WorkloadState.ADMITTED,
            created_at=start - timedelta(minutes=1),
            admitted_at=start,
            finished_at=end,
            updated_at=now,
            submitter=submitter,
            submitter_source="annotation",
            **kw,
        )

    running = workload("train-alice", world.team_a, world.a100, world.a100_gpu, 4,
                       hour - timedelta(hours=10), None, "alice", "team-a-training")  # fmt: skip
    workload("big-alice", world.team_a, world.a100, world.a100_gpu, 8,
             hour - timedelta(days=2), hour - timedelta(days=2) + timedelta(hours=3), "alice",
             "team-a-training")  # fmt: skip
    workload("notebook-carol", world.team_a, world.h100, world.h100_gpu, 2,
             hour - timedelta(hours=6), hour - timedelta(hours=2), "carol", "team-a-notebooks")  # fmt: skip
    workload("bob-job", world.team_b, world.a100, world.a100_gpu, 3,
             hour - timedelta(hours=6), None, "bob", "team-b-training")  # fmt: skip
    WorkloadActivity.objects.create(
        cluster_id=world.a100.pk,
        workload_uid=running.uid,
        bucket=hour - timedelta(hours=3),
        peak_utilization=70.0,
    )
    return usage_data


def _figures(html: str, by: str) -> tuple[list[Decimal], Decimal]:
    """The GPU-hours of a breakdown table's rows and of its total row."""
    table = html.split(f'data-breakdown="{by}"', 1)[1].split("</table>", 1)[0]
    body, foot = table.split("<tfoot>", 1)
    rows = [Decimal(v) for v in re.findall(r'data-gpu-hours="([0-9.]+)"', body)]
    (total,) = re.findall(r'data-gpu-hours="([0-9.]+)"', foot)
    return rows, Decimal(total)


def _adds_up(html: str, by: str) -> Decimal:
    rows, total = _figures(html, by)
    assert rows, f"no {by} rows"
    assert sum(rows, Decimal(0)) == total
    return total


# --- the selector --------------------------------------------------------------------------


def test_people_and_namespaces_add_up_to_the_tenant_figure_per_flavor(people):
    world, now = people.world, people.now
    start, end = now - timedelta(days=7), now
    breakdown = usage_breakdown(
        tenant_id=world.team_a.pk, start=start, end=end, resolution=Resolution.HOUR, now=now
    )
    # The tenant's figure is the one showback reads: each hour's mean use summed.
    figure = {
        (h.cluster_id, h.flavor_id): h.gpu_hours
        for h in usage_selectors.gpu_hours(start=start, end=end, tenant_ids=[world.team_a.pk])
    }
    assert breakdown.total == pytest.approx(figure)
    for by in ("person", "namespace"):
        parts = breakdown.parts(by)
        assert parts[-1].key == ""  # the unattributed rest, always last
        for place, total in breakdown.total.items():
            assert sum(p.hours.get(place, 0.0) for p in parts) == pytest.approx(total)
    keys = {p.key: p for p in breakdown.parts("person")}
    assert set(keys) == {"alice", "carol", ""}  # bob's work is team-b's
    # carol's notebook held 2 H100s for 4 hours, all of team-a's H100 use then.
    assert keys["carol"].hours == {(world.h100.pk, world.h100_gpu.pk): pytest.approx(8.0)}
    # alice's 4 A100s for 10 hours, and her 8-A100 job scaled down to what was used (8 an
    # hour, shared with nobody then): 40 + 24.
    assert keys["alice"].gpu_hours == pytest.approx(64.0)
    assert keys["alice"].utilization == pytest.approx(70.0)
    namespaces = {p.key for p in breakdown.parts("namespace")}
    assert namespaces == {"team-a-training", "team-a-notebooks", ""}
    workloads = {w.key: w.gpu_hours for w in breakdown.workloads}
    assert workloads["big-alice"] == pytest.approx(24.0)  # never more than the tenant used
    assert "bob-job" not in workloads


def test_a_bucket_whose_workloads_claim_more_than_was_used_is_shared_out_not_exceeded(people):
    world, now = people.world, people.now
    # Three hours where alice's 8 GPUs and the unnamed jobs overlap would claim more than 8.
    Workload.objects.filter(name="big-alice").update(
        admitted_at=now - timedelta(days=1, hours=3), finished_at=now - timedelta(hours=20)
    )
    breakdown = usage_breakdown(
        tenant_id=world.team_a.pk,
        start=now - timedelta(days=2),
        end=now,
        resolution=Resolution.HOUR,
        now=now,
    )
    place = (world.a100.pk, world.a100_gpu.pk)
    named = sum(p.hours.get(place, 0.0) for p in breakdown.parts("person"))
    assert named == pytest.approx(breakdown.total[place])
    assert all(w.gpu_hours <= breakdown.total[place] for w in breakdown.workloads)


def test_apportioned_figures_add_up_to_the_last_cent():
    values = [1 / 3, 1 / 3, 1 / 3]
    assert apportion(values) == [Decimal("0.34"), Decimal("0.33"), Decimal("0.33")]
    assert sum(apportion([0.005] * 7)) == Decimal("0.04")
    shares = apportion([Decimal("10.004"), Decimal("5.003")], total=Decimal("15.01"))
    assert sum(shares) == Decimal("15.01")


# --- pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query", [{}, {"range": "24h"}, {"range": "30d"}, {"cluster": "demo-h100"}]
)
def test_the_usage_page_rows_add_up_to_the_tenant_total(people, query):
    response = page_client(people.world.carol).get("/tenants/team-a/usage/", query)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Who used what" in html
    total = _adds_up(html, "person")
    assert _adds_up(html, "namespace") == total
    assert 'data-part="alice"' in html or query.get("cluster") == "demo-h100"
    assert 'data-part="carol"' in html
    assert "data-unattributed" in html


def test_the_usage_page_total_is_the_tenant_figure_of_the_range(people):
    response = page_client(people.world.alice).get("/tenants/team-a/usage/", {"range": "7d"})
    period = response.context["period"]
    figure = sum(
        h.gpu_hours
        for h in usage_selectors.gpu_hours(
            start=period.start, end=period.end, tenant_ids=[people.world.team_a.pk]
        )
    )
    _, total = _figures(response.content.decode(), "person")
    assert total == Decimal(repr(figure)).quantize(Decimal("0.01"))


def test_the_usage_csv_per_person_adds_up(people):
    client = page_client(people.world.alice)
    response = client.get(
        "/tenants/team-a/usage/", {"range": "7d", "download": "csv", "by": "person"}
    )
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["person"] for r in rows} == {"alice", "carol", ""}
    api = client.get("/api/v1/tenants/team-a/usage/breakdown/", {"range": "7d"}).json()
    assert sum(float(r["gpu_hours"]) for r in rows) == pytest.approx(api["gpu_hours"], abs=0.01)


def test_a_bad_breakdown_on_the_usage_page_is_a_400_naming_it(people):
    response = page_client(people.world.alice).get("/tenants/team-a/usage/", {"by": "planet"})
    assert response.status_code == 400
    assert "by" in response.context["error"] and "person, namespace" in response.context["error"]


def test_showback_rows_and_costs_add_up_to_the_tenant_line(people):
    world = people.world
    month = date(people.now.year, people.now.month, 1)
    FlavorPrice.objects.create(
        flavor=world.a100_gpu, price=Decimal("1.3333"), currency="EUR", valid_from=date(2020, 1, 1)
    )
    response = page_client(world.alice).get(
        "/tenants/team-a/showback/", {"month": f"{month:%Y-%m}"}
    )
    assert response.status_code == 200
    html = response.content.decode()
    total = _adds_up(html, "person")
    assert _adds_up(html, "namespace") == total
    report = response.context["report"]
    lines = [t for t in report.totals() if t["tenant"] == "team-a"]  # EUR, and unpriced
    hours = sum(t["gpu_hours"] for t in lines)
    assert total == Decimal(repr(hours)).quantize(Decimal("0.01"))
    (line,) = [t for t in lines if t["currency"] == "EUR"]
    parts = response.context["people"]
    euros = [dict(r.costs).get("EUR", Decimal(0)) for r in parts.table.rows]
    assert sum(euros) == line["cost"]  # to the cent
    assert dict(parts.table.cost_totals)["EUR"] == line["cost"]


def test_showback_csv_per_namespace_adds_up(people):
    month = f"{people.now:%Y-%m}"
    response = page_client(people.world.carol).get(
        "/tenants/team-a/showback/", {"month": month, "download": "csv", "by": "namespace"}
    )
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["namespace"] for r in rows} == {"team-a-training", "team-a-notebooks", ""}
    report = selectors.showback(
        month=selectors.parse_month(month), tenant_ids=[people.world.team_a.pk]
    )
    assert sum(float(r["gpu_hours"]) for r in rows) == pytest.approx(
        sum(r.gpu_hours for r in report.rows), abs=1e-6
    )


def test_the_profile_lists_a_person_s_workloads_adding_up_to_their_figure(people):
    client = page_client(people.world.alice)
    response = client.get("/tenants/team-a/profile/", {"range": "7d", "person": "alice"})
    assert response.status_code == 200
    html = response.content.decode()
    _adds_up(html, "person")
    table = html.split("breakdown-workloads", 1)[1].split("</table>", 1)[0]
    body, foot = table.split("<tfoot>", 1)
    lines = [Decimal(v) for v in re.findall(r'data-gpu-hours="([0-9.]+)"', body)]
    (total,) = re.findall(r'data-gpu-hours="([0-9.]+)"', foot)
    assert 'data-workload="train-alice"' in body and "notebook-carol" not in body
    assert sum(lines) == Decimal(total)
    (alice,) = [r for r in response.context["by_person"].rows if r.key == "alice"]
    assert Decimal(total) == alice.gpu_hours


def test_an_unknown_person_on_the_profile_is_a_400_naming_the_field(people):
    response = page_client(people.world.alice).get("/tenants/team-a/profile/", {"person": "bob"})
    assert response.status_code == 400
    assert "person" in response.context["error"] and "alice, carol" in response.context["error"]


def test_bob_sees_none_of_team_a_s_people(people):
    client = page_client(people.world.bob)
    for url in ("/tenants/team-a/usage/", "/tenants/team-a/showback/", "/tenants/team-a/profile/"):
        response = client.get(url)
        assert response.status_code == 404
        assert b"carol" not in response.content
    own = client.get("/tenants/team-b/usage/").content.decode()
    assert 'data-part="bob"' in own and 'data-part="alice"' not in own


# --- API -----------------------------------------------------------------------------------


def test_the_breakdown_api_adds_up_and_lists_a_person_s_workloads(people, api_as):
    body = (
        api_as(people.world.carol)
        .get("/api/v1/tenants/team-a/usage/breakdown/", {"range": "7d", "person": "alice"})
        .json()
    )
    assert sum(p["gpu_hours"] for p in body["people"]) == pytest.approx(body["gpu_hours"])
    assert sum(p["gpu_hours"] for p in body["namespaces"]) == pytest.approx(body["gpu_hours"])
    assert sum(t["gpu_hours"] for t in body["totals"]) == pytest.approx(body["gpu_hours"])
    assert body["people"][-1]["unattributed"] is True
    alice = next(p for p in body["people"] if p["key"] == "alice")
    assert {w["name"] for w in body["workloads"]} == {"train-alice", "big-alice"}
    assert sum(w["gpu_hours"] for w in body["workloads"]) == pytest.approx(alice["gpu_hours"])


def test_the_breakdown_api_for_a_month_is_showback_s_figure(people, api_as):
    month = f"{people.now:%Y-%m}"
    body = (
        api_as(people.world.alice)
        .get("/api/v1/tenants/team-a/usage/breakdown/", {"month": month})
        .json()
    )
    report = selectors.showback(
        month=selectors.parse_month(month), tenant_ids=[people.world.team_a.pk]
    )
    assert body["gpu_hours"] == pytest.approx(sum(r.gpu_hours for r in report.rows))
    assert sum(p["gpu_hours"] for p in body["people"]) == pytest.approx(body["gpu_hours"])


def test_the_breakdown_api_is_for_members_and_admins_only(people, api_as):
    world = people.world
    url = "/api/v1/tenants/team-a/usage/breakdown/"
    assert api_as(world.bob).get(url).status_code == 404
    assert api_as(None).get(url).status_code in (401, 403)
    assert api_as(world.admin).get(url).status_code == 200
    assert api_as(world.victor).get(url).status_code == 200


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"range": "1y"}, "range"),
        ({"person": "bob"}, "person"),
        ({"month": "2026-13x"}, "month"),
        ({"month": "2026-01", "range": "7d"}, "range"),
        ({"month": "2026-01", "cluster": "demo-a100"}, "cluster"),
        ({"by": "person"}, "by"),
    ],
)
def test_bad_breakdown_queries_are_400_naming_the_field(people, api_as, query, field):
    response = api_as(people.world.alice).get("/api/v1/tenants/team-a/usage/breakdown/", query)
    assert response.status_code == 400, response.content
    assert field in str(response.json()), response.json()


def test_the_showback_api_per_person_adds_up_to_the_tenant_line(people, api_as):
    world = people.world
    FlavorPrice.objects.create(
        flavor=world.h100_gpu, price=Decimal("2.7777"), currency="EUR", valid_from=date(2020, 1, 1)
    )
    body = api_as(world.alice).get("/api/v1/showback/", {"tenant": "team-a", "by": "person"}).json()
    (line,) = [t for t in body["totals"] if t["tenant"] == "team-a" and t["currency"] == "EUR"]
    parts = body["parts"]
    assert {p["key"] for p in parts} == {"alice", "carol", ""}
    assert sum(p["gpu_hours"] for p in parts) == pytest.approx(
        sum(t["gpu_hours"] for t in body["totals"] if t["tenant"] == "team-a")
    )
    costs = sum(Decimal(p["cost"]) for p in parts if p["currency"] == "EUR")
    assert costs == Decimal(line["cost"])


def test_the_showback_api_breakdown_needs_a_tenant_and_a_known_kind(people, api_as):
    client = api_as(people.world.admin)
    for query in ({"by": "person"}, {"tenant": "team-a", "by": "planet"}):
        response = client.get("/api/v1/showback/", query)
        assert response.status_code == 400
        assert "by" in str(response.json())
    assert (
        api_as(people.world.bob)
        .get("/api/v1/showback/", {"tenant": "team-a", "by": "person"})
        .status_code
        == 404
    )


def test_the_breakdown_reads_a_fixed_number_of_queries_whatever_the_workloads(
    people, api_as, django_assert_max_num_queries
):
    world, now = people.world, people.now
    client = api_as(world.alice)
    url = "/api/v1/tenants/team-a/usage/breakdown/"
    client.get(url, {"range": "30d"})
    with django_assert_max_num_queries(10) as few:
        assert client.get(url, {"range": "30d"}).status_code == 200
    Workload.objects.bulk_create(
        Workload(
            cluster=world.a100,
            tenant=world.team_a,
            namespace=f"team-a-ns{i % 7}",
            name=f"many-{i}",
            uid=f"uid-many-{i}",
            gpus=1,
            flavors=["a100-80gb"],
            state=WorkloadState.FINISHED,
            created_at=now - timedelta(hours=i + 2),
            admitted_at=now - timedelta(hours=i + 1),
            finished_at=now - timedelta(hours=i),
            updated_at=now,
            submitter=f"person-{i % 13}",
        )
        for i in range(300)
    )
    with django_assert_max_num_queries(len(few.captured_queries)):
        body = client.get(url, {"range": "30d"}).json()
    assert len(body["people"]) == 13 + 3  # the 13, alice, carol and the rest
    assert sum(p["gpu_hours"] for p in body["people"]) == pytest.approx(body["gpu_hours"])


def test_a_person_on_the_usage_page_leads_to_their_workloads_with_the_same_figure(people):
    client = page_client(people.world.carol)
    response = client.get("/tenants/team-a/usage/", {"range": "7d"})
    html = response.content.decode()
    row = html.split('data-part="alice"', 1)[1].split("</tr>", 1)[0]
    href = re.search(r'href="([^"]+)"', row)[1].replace("&amp;", "&")  # type: ignore[index]
    assert href.startswith("/tenants/team-a/profile/?")
    (alice,) = [r for r in response.context["by_person"].rows if r.key == "alice"]
    profile = client.get(href.split("#")[0])
    assert profile.status_code == 200
    assert profile.context["workload_table"].gpu_hours == alice.gpu_hours
