"""GET /api/v1/alerts/ (scoped, filtered), acknowledging through the API and the pages, and
the admission pre-check (R13) with its bad inputs."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from alerts import services
from alerts.models import Alert
from quotas.models import QuotaSet
from tests.alerts.conftest import use_now


def _fire_for_a_and_b(world) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    use_now(world, world.team_a, 9, now=now)  # 90% of 10
    use_now(world, world.team_b, 6, now=now)  # 100% of 6
    services.evaluate(now=now)


def test_alerts_are_scoped_and_filtered(world, api_as, django_assert_max_num_queries):
    _fire_for_a_and_b(world)

    def rows(user, query=""):  # type: ignore[no-untyped-def]
        response = api_as(user).get(f"/api/v1/alerts/{query}")
        assert response.status_code == 200, response.json()
        return {(r["rule"], r["tenant"]) for r in response.json()["results"]}

    everything = {("quota-warning", "team-a"), ("quota-warning", "team-b"),
                  ("quota-block", "team-b")}  # fmt: skip
    with django_assert_max_num_queries(6):
        assert rows(world.admin) == everything
    assert rows(world.alice) == {("quota-warning", "team-a")}
    assert rows(world.bob) == {("quota-warning", "team-b"), ("quota-block", "team-b")}
    # A member reads her tenants' alerts (only leads act on them).
    assert rows(world.carol) == {("quota-warning", "team-a")}
    assert rows(world.admin, "?tenant=team-b&rule=quota-block") == {("quota-block", "team-b")}
    assert rows(world.admin, "?cluster=demo-h100") == set()
    assert rows(world.admin, "?state=resolved") == set()
    bad = api_as(world.admin).get("/api/v1/alerts/?state=sleeping")
    assert bad.status_code == 400 and "state" in bad.json()["fields"]
    assert api_as(None).get("/api/v1/alerts/").status_code in (401, 403)


def test_acknowledge_records_who_and_when_and_refuses_twice(world, api_as):
    _fire_for_a_and_b(world)
    alert = Alert.objects.get(tenant=world.team_a)

    assert api_as(world.bob).post(f"/api/v1/alerts/{alert.pk}/acknowledge/").status_code == 404
    assert api_as(world.bob).get(f"/api/v1/alerts/{alert.pk}/").status_code == 404
    response = api_as(world.alice).post(f"/api/v1/alerts/{alert.pk}/acknowledge/")

    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "acknowledged" and body["acknowledged_by"] == "alice"
    assert [(e["kind"], e["actor"]) for e in body["events"]] == [
        ("fired", "system"), ("acknowledged", "alice"),
    ]  # fmt: skip
    again = api_as(world.alice).post(f"/api/v1/alerts/{alert.pk}/acknowledge/")
    assert again.status_code == 409
    # Still open: re-evaluation keeps it acknowledged, not firing anew.
    services.evaluate(now=timezone.now() + timedelta(seconds=1))
    assert Alert.objects.filter(tenant=world.team_a).count() == 1
    assert Alert.objects.get(pk=alert.pk).state == "acknowledged"


def test_the_alerts_pages(world):
    _fire_for_a_and_b(world)
    alert = Alert.objects.get(tenant=world.team_a)
    alice, bob = Client(), Client()
    alice.force_login(world.alice)
    bob.force_login(world.bob)

    page = alice.get("/alerts/")
    assert page.status_code == 200 and b"team-a on demo-a100" in page.content
    assert b"team-b on demo-a100" not in page.content
    assert bob.get(f"/alerts/{alert.pk}/").status_code == 404
    assert bob.post(f"/alerts/{alert.pk}/acknowledge/").status_code == 404
    response = alice.post(f"/alerts/{alert.pk}/acknowledge/")
    assert response.status_code == 302
    detail = alice.get(f"/alerts/{alert.pk}/")
    assert b"Acknowledged" in detail.content and b"alice" in detail.content
    assert Alert.objects.get(pk=alert.pk).acknowledged_by == world.alice


CHECK = "/api/v1/tenants/team-a/admission-check/"


def test_admission_check_answers_per_resource(world, api_as):
    now = timezone.now()
    use_now(world, world.team_a, 6, now=now)  # guaranteed 6, limit 10
    use_now(world, world.team_b, 1, now=now)  # team-b lends 3 of its 4 unused
    client = api_as(world.carol)  # members submit jobs

    fits = client.post(CHECK, {"cluster": "demo-a100", "gpus": {"a100-80gb": 2}, "cpu": "8",
                               "memory": "64Gi"}, format="json")  # fmt: skip

    assert fits.status_code == 200, fits.json()
    body = fits.json()
    assert body["fits"] is True
    gpu = body["resources"][0]
    assert gpu["resource"] == "gpu:a100-80gb" and gpu["used"] == 6 and gpu["headroom"] == 4
    assert gpu["borrowable"] == 5  # team-b 3 + team-c 2, within the 16 - 7 free
    assert "borrows 2 beyond the guarantee of 6" in gpu["reason"]

    over = client.post(CHECK, {"cluster": "demo-a100", "gpus": {"a100-80gb": 5},
                               "cpu": "1000"}, format="json").json()  # fmt: skip
    assert over["fits"] is False
    why = {r["resource"]: r for r in over["resources"]}
    assert why["gpu:a100-80gb"]["fits"] is False
    assert "6 in use + 5 asked = 11 > the limit 10 (4 left)" in why["gpu:a100-80gb"]["reason"]
    assert why["cpu"]["fits"] is False and "exceeds the limit of 80 cores" in why["cpu"]["reason"]


def test_admission_check_storage_left(world, api_as):
    QuotaSet.objects.filter(tenant=world.team_a, cluster=world.a100).update(
        storage_bytes=500 * 2**30
    )
    client = api_as(world.alice)
    body = client.post(CHECK, {"cluster": "demo-a100", "storage": "600Gi"}, format="json").json()
    assert body["fits"] is False
    [storage] = body["resources"]
    assert storage["resource"] == "storage" and storage["limit"] == 500 * 2**30
    # The reason is for people: binary units, not byte counts.
    assert storage["reason"].startswith("600 GiB exceeds the storage quota of 500 GiB"), storage
    assert "bytes" not in storage["reason"]
    ok = client.post(CHECK, {"cluster": "demo-a100", "storage": "100Gi"}, format="json").json()
    assert ok["fits"] is True
    big = client.post(CHECK, {"cluster": "demo-a100", "storage": "2Ti"}, format="json").json()
    assert "2 TiB" in big["resources"][0]["reason"]
    memory = client.post(CHECK, {"cluster": "demo-a100", "memory": "64Gi"}, format="json").json()
    assert memory["resources"][0]["reason"].startswith("64 GiB within the limit of 640 GiB")


def test_admission_check_bad_input_names_the_field(world, api_as):
    client = api_as(world.alice)
    cases = [
        ({"cluster": "demo-a100", "gpus": {"a100-80gb": -1}}, "gpus.a100-80gb"),
        ({"cluster": "demo-a100", "gpus": {"a100-80gb": "two"}}, "gpus.a100-80gb"),
        ({"cluster": "demo-a100", "memory": "-64Gi"}, "memory"),
        ({"cluster": "demo-a100", "cpu": "8 cores"}, "cpu"),
        ({"cluster": "demo-a100", "storage": 1.5}, "storage"),
        ({"cluster": "demo-a100", "gpus": {"h100-80gb": 1}}, "gpus.h100-80gb"),
        ({"cluster": "nowhere", "gpus": {"a100-80gb": 1}}, "cluster"),
        ({"gpus": {"a100-80gb": 1}}, "cluster"),  # team-a has quota on two clusters
        ({"cluster": "demo-a100", "gpu": 1}, "gpu"),
        ({"cluster": "demo-a100", "gpus": ["a100-80gb"]}, "gpus"),
    ]
    for body, field in cases:
        response = client.post(CHECK, body, format="json")
        assert response.status_code == 400, (body, response.json())
        assert field in response.json()["fields"], (body, response.json())
    other = api_as(world.bob).post(CHECK, {"cluster": "demo-a100"}, format="json")
    assert other.status_code == 404


def test_a_member_reads_her_tenants_alerts_and_only_leads_act_on_them(world, api_as, client):
    _fire_for_a_and_b(world)
    alert = Alert.objects.get(tenant=world.team_a)
    assert api_as(world.carol).get(f"/api/v1/alerts/{alert.pk}/").status_code == 200
    refused = api_as(world.carol).post(f"/api/v1/alerts/{alert.pk}/acknowledge/")
    assert refused.status_code == 403
    assert "Only a lead of team-a or a platform admin" in refused.json()["detail"]
    assert Alert.objects.get(pk=alert.pk).state == "firing"
    # The page shows her the alert, without the buttons she may not use.
    client.force_login(world.carol)
    page = client.get(f"/alerts/{alert.pk}/").content.decode()
    assert "Quota nearly used" in page and "Acknowledge</button>" not in page
    client.force_login(world.alice)
    assert "Acknowledge</button>" in client.get(f"/alerts/{alert.pk}/").content.decode()
    # Everyone finds the alerts from the navigation.
    client.force_login(world.carol)
    assert 'href="/alerts/"' in client.get("/").content.decode()
