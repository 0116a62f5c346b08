"""Fair sharing that remembers (issue 37, item 4): a platform admin sets a cluster's fair
sharing (API and cluster page), bad input is refused naming the field and changes nothing,
every tenant's ClusterQueue is pushed again with it, and on the stand-in (Kueue's
configuration read back, the simulated Kueue's status collected) each tenant is told its
recent use and standing, while the page says plainly where the cluster's Kueue lacks it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devcluster.demo import install_kueue_config
from devcluster.kueue_sim import Endpoint, simulate_once
from quotas.models import Cluster, FairShareReading, QuotaSet
from quotas.sync import cluster_reconcile
from tenants.models import AuditEvent
from tests.standin import kubectl_json
from usage import collector

pytestmark = pytest.mark.django_db
URL = "/api/v1/clusters/demo-a100/"
NOW = datetime(2026, 12, 7, 14, 0, tzinfo=UTC)


def _state(world) -> tuple:  # type: ignore[no-untyped-def]
    cluster = Cluster.objects.get(pk=world.a100.pk)
    generations = list(QuotaSet.objects.order_by("pk").values_list("generation", flat=True))
    return (
        cluster.fair_sharing,
        cluster.usage_half_life_hours,
        cluster.usage_sampling_minutes,
        cluster.enforcement,
        generations,
        AuditEvent.objects.filter(action="cluster.fair_sharing_set").count(),
    )


def test_an_admin_turns_on_fair_sharing_by_recent_use(world, api_as):
    before = dict(
        QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation")
    )
    response = api_as(world.admin).patch(
        URL,
        {"fair_sharing": "usage", "usage_half_life_hours": 72, "usage_sampling_minutes": 10},
        format="json",
    )
    assert response.status_code == 200, response.content
    fair = response.json()["fair_sharing"]
    assert fair["mode"] == "usage"
    assert fair["usage_half_life_hours"] == 72
    assert "usageHalfLifeTime: 72h" in fair["kueue_configuration"]
    assert "usageSamplingInterval: 10m" in fair["kueue_configuration"]
    # Kueue's configuration has not been read from this cluster (it is kept in the portal
    # only): the page does not pretend Kueue does it.
    assert fair["state"] == "unknown"
    after = dict(QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation"))
    assert after == {tenant: generation + 1 for tenant, generation in before.items()}
    event = AuditEvent.objects.get(action="cluster.fair_sharing_set")
    assert event.after == {
        "fair_sharing": "usage",
        "usage_half_life_hours": 72,
        "usage_sampling_minutes": 10,
    }
    assert event.actor == world.admin
    # A new half-life alone changes no queue: nothing is pushed again.
    response = api_as(world.admin).patch(URL, {"usage_half_life_hours": 24}, format="json")
    assert response.status_code == 200, response.content
    assert (
        dict(QuotaSet.objects.filter(cluster=world.a100).values_list("tenant_id", "generation"))
        == after
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"fair_sharing": "memory"}, "fair_sharing"),
        ({"fair_sharing": "usage", "usage_half_life_hours": 0}, "usage_half_life_hours"),
        ({"fair_sharing": "usage", "usage_half_life_hours": 2161}, "usage_half_life_hours"),
        ({"fair_sharing": "usage", "usage_half_life_hours": 1.5}, "usage_half_life_hours"),
        ({"fair_sharing": "usage", "usage_half_life_hours": -24}, "usage_half_life_hours"),
        ({"fair_sharing": "usage", "usage_half_life_hours": "a week"}, "usage_half_life_hours"),
        ({"fair_sharing": "usage", "usage_sampling_minutes": 61}, "usage_sampling_minutes"),
        ({"fair_sharing": "usage", "usage_sampling_minutes": 0}, "usage_sampling_minutes"),
        # Bad input in one field changes nothing, the enforcement mode in the same body neither.
        ({"enforcement": "split", "usage_half_life_hours": 0}, "usage_half_life_hours"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(world, api_as, body, field):
    before = _state(world)
    response = api_as(world.admin).patch(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["fields"], response.json()
    assert _state(world) == before


def test_a_cluster_without_kueue_cannot_share_fairly(world, api_as):
    Cluster.objects.filter(pk=world.a100.pk).update(has_kueue=False, enforcement="split")
    response = api_as(world.admin).patch(URL, {"fair_sharing": "weights"}, format="json")
    assert response.status_code == 400, response.content
    assert "fair_sharing" in response.json()["fields"]
    assert "runs no Kueue" in json.dumps(response.json())
    assert Cluster.objects.get(pk=world.a100.pk).fair_sharing == "none"


@pytest.mark.parametrize("persona", ["alice", "carol", "victor"])
def test_only_platform_admins_set_it(world, api_as, client, persona):
    user = getattr(world, persona)
    response = api_as(user).patch(URL, {"fair_sharing": "weights"}, format="json")
    assert response.status_code == 403
    client.force_login(user)
    page = client.post(
        "/clusters/demo-a100/", {"fair_sharing": "weights", "usage_half_life_hours": "168"}
    )
    assert page.status_code == 403
    assert Cluster.objects.get(pk=world.a100.pk).fair_sharing == "none"


def test_the_cluster_page_form_sets_it_and_shows_a_bad_half_life(world, client):
    client.force_login(world.admin)
    page = client.post(
        "/clusters/demo-a100/",
        {"fair_sharing": "usage", "usage_half_life_hours": "0", "usage_sampling_minutes": "5"},
    )
    assert page.status_code == 400
    text = page.content.decode()
    assert "data-fair-sharing-error" in text and "half-life" in text
    assert Cluster.objects.get(pk=world.a100.pk).fair_sharing == "none"
    page = client.post(
        "/clusters/demo-a100/",
        {"fair_sharing": "weights", "usage_half_life_hours": "48", "usage_sampling_minutes": "5"},
    )
    assert page.status_code == 302
    cluster = Cluster.objects.get(pk=world.a100.pk)
    assert (cluster.fair_sharing, cluster.usage_half_life_hours) == ("weights", 48)
    text = client.get("/clusters/demo-a100/").content.decode()
    assert 'data-fair-sharing="weights"' in text
    assert "preemptionStrategies" in text  # the configuration the admin applies


def _usage_on_standin(world, standin, *, kueue_has_it: bool):  # type: ignore[no-untyped-def]
    endpoint = Endpoint.from_kubeconfig(Path(standin.kubeconfig_path))
    install_kueue_config(endpoint, "demo-h100" if kueue_has_it else "demo-a100")
    Cluster.objects.filter(pk=world.a100.pk).update(fair_sharing="usage")
    world.a100.refresh_from_db()
    assert cluster_reconcile(cluster=world.a100).ok
    return endpoint


def test_recent_use_and_standing_on_the_stand_in(world, standin, client, api_as):
    endpoint = _usage_on_standin(world, standin, kueue_has_it=True)
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a")
    assert queue["spec"]["admissionScope"] == {"admissionMode": "UsageBasedAdmissionFairSharing"}
    # Only Kueue's default is left (borrowing by preemption is classical preemption's).
    assert queue["spec"]["preemption"].get("borrowWithinCohort", {}).get("policy") in (
        None,
        "Never",
    )
    simulate_once(endpoint, NOW, ["team-a"])
    # Kueue's defaulting of the preemption left alone is no drift: a reconcile changes nothing.
    again = cluster_reconcile(cluster=world.a100)
    assert again.ok and again.drifted == [], again.drifted
    local_queues = kubectl_json(standin, "get", "localqueues", "-A")["items"]
    mine = [lq for lq in local_queues if lq["metadata"]["namespace"].startswith("team-a")]
    assert mine and all(
        "consumedResources" in lq["status"]["fairSharing"]["admissionFairSharingStatus"]
        for lq in mine
    )
    outcome = collector.cluster_collect(cluster=world.a100, now=NOW)
    assert outcome.reachable, outcome.message
    reading = FairShareReading.objects.get(tenant=world.team_a, cluster=world.a100)
    # team-a runs hot (about 90% of a limit of 10, 6 guaranteed): it borrows, and Kueue
    # remembers some 9 GPUs held.
    assert reading.weighted_share and reading.weighted_share > 0
    assert 8 < reading.consumed["nvidia.com/gpu"] <= 10
    team_b = FairShareReading.objects.get(tenant=world.team_b, cluster=world.a100)
    assert team_b.weighted_share == 0  # within its guarantee

    # The cluster's Kueue offers it: the page says so, and the lead reads where team-a stands.
    cluster = Cluster.objects.get(pk=world.a100.pk)
    assert cluster.kueue_config["fairSharing"]["admissionFairSharing"]["halfLifeSeconds"] == 604800
    client.force_login(world.alice)
    text = client.get(f"/tenants/{world.team_a.slug}/").content.decode()
    assert 'data-section="fair-sharing"' in text
    assert "Borrowing above its guarantee" in text
    assert "held on average, older use counting half after 7 days" in text
    # The cluster page shows alice her own team's standing, not team-b's.
    text = client.get("/clusters/demo-a100/").content.decode()
    assert 'data-state="on"' in text
    assert 'data-tenant="team-a"' in text and 'data-tenant="team-b"' not in text
    standings = api_as(world.alice).get(URL).json()["fair_sharing"]["standings"]
    assert [row["tenant"] for row in standings] == ["team-a"]
    # A platform admin sees every tenant's.
    standings = api_as(world.admin).get(URL).json()["fair_sharing"]["standings"]
    assert {row["tenant"] for row in standings} == {"team-a", "team-b", "team-c"}

    # Back to no fair sharing: the queues lose it and no standing is kept.
    api_as(world.admin).patch(URL, {"fair_sharing": "none"}, format="json")
    world.a100.refresh_from_db()
    assert cluster_reconcile(cluster=world.a100).ok
    queue = kubectl_json(standin, "get", "clusterqueue", "team-a")
    assert "admissionScope" not in queue["spec"]
    collector.cluster_collect(cluster=world.a100, now=NOW)
    assert not FairShareReading.objects.filter(cluster=world.a100).exists()


def test_where_the_cluster_s_kueue_lacks_it_the_pages_say_so(world, standin, client):
    endpoint = _usage_on_standin(world, standin, kueue_has_it=False)
    simulate_once(endpoint, NOW, ["team-a"])
    collector.cluster_collect(cluster=world.a100, now=NOW)
    client.force_login(world.admin)
    text = client.get("/clusters/demo-a100/").content.decode()
    assert 'data-state="missing"' in text
    assert "no fairSharing section" in text and "no admissionFairSharing section" in text
    client.force_login(world.alice)
    text = client.get(f"/tenants/{world.team_a.slug}/").content.decode()
    assert "does not offer the fair sharing the portal asks for" in text
    # Kueue reported nothing: the portal shows no made-up standing.
    reading = FairShareReading.objects.get(tenant=world.team_a, cluster=world.a100)
    assert reading.weighted_share is None and reading.consumed == {}


def test_fair_share_rows_from_queue_statuses() -> None:
    rows = collector.fair_share_rows(
        [
            {
                "metadata": {"labels": {"portal.gpu-quota.io/tenant": "team-a"}},
                "status": {"fairSharing": {"weightedShare": 250}},
            },
            {"metadata": {"labels": {"portal.gpu-quota.io/tenant": "stranger"}}},
        ],
        [
            {
                "metadata": {"namespace": "team-a-training"},
                "status": {
                    "fairSharing": {
                        "weightedShare": 0,
                        "admissionFairSharingStatus": {
                            "consumedResources": {"nvidia.com/gpu": "3500m", "cpu": "12"},
                            "lastUpdate": "2026-12-07T13:55:00Z",
                        },
                    }
                },
            },
            {
                "metadata": {"namespace": "team-a-inference"},
                "status": {
                    "fairSharing": {
                        "weightedShare": 0,
                        "admissionFairSharingStatus": {
                            "consumedResources": {"nvidia.com/gpu": "1"},
                            "lastUpdate": "2026-12-07T13:57:00Z",
                        },
                    }
                },
            },
        ],
        slug_tenant={"team-a": 1},
        ns_tenant={"team-a-training": 1, "team-a-inference": 1},
    )
    assert set(rows) == {1}
    assert rows[1].weighted_share == 250
    assert rows[1].consumed == {"nvidia.com/gpu": 4.5, "cpu": 12.0}
    assert rows[1].consumed_at == datetime(2026, 12, 7, 13, 57, tzinfo=UTC)
