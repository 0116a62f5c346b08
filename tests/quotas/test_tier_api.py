"""Tier templates through the API: admins add and change them; every bad amount is a 400 that
names the field and changes nothing."""

from __future__ import annotations

import pytest

from quotas.models import QuotaSet, TierTemplate
from tenants.models import AuditEvent

XL = {
    "name": "xlarge",
    "display_name": "Extra large",
    "gpus_guaranteed": 128,
    "gpus_limit": "192",
    "cpu_guaranteed": "256",
    "cpu_limit": 384,
    "memory_guaranteed": "2Ti",
    "memory_limit": "3Ti",
    "max_running_jobs": 100,
    "max_queued_jobs": 500,
    "max_pods": 800,
    "storage": "40Ti",
    "max_pvcs": 400,
}


def _state() -> tuple:
    return (
        list(TierTemplate.objects.order_by("name").values()),
        AuditEvent.objects.count(),
    )


def test_an_admin_adds_a_tier_with_kubernetes_quantities(world, api_as):
    response = api_as(world.admin).post("/api/v1/tier-templates/", XL, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["memory_guaranteed"] == "2Ti" and body["cpu_limit"] == "384"
    assert body["gpus_limit"] == 192 and body["storage"] == "40Ti"
    tier = TierTemplate.objects.get(name="xlarge")
    assert tier.memory_limit == 3 * 1024**4
    event = AuditEvent.objects.get(action="tier_template.created")
    assert event.actor == world.admin and event.after["memory_limit"] == "3Ti"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("memory_limit", "12GB", "unknown suffix"),
        ("cpu_limit", "1.5.3", "more than one decimal point"),
        ("cpu_guaranteed", "-1", "negative"),
        ("gpus_guaranteed", -2, "negative"),
        ("gpus_guaranteed", "1.5", "whole number"),
        ("memory_guaranteed", "lots", "not a Kubernetes quantity"),
        ("cpu_guaranteed", "100u", "multiple of 1m"),
        ("storage", [], "Kubernetes quantity"),
        ("gpus_guaranteed", 500, "above the limit"),
        ("cpu_guaranteed", "1000", "above the limit"),
        ("max_pods", -1, "greater than or equal to 0"),
        ("max_pods", "many", "valid integer"),
        ("name", "Extra_Large", "DNS-1123"),
        ("name", "large", "already exists"),
        ("surprise", 1, "Unknown field"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(
    world, api_as, field, value, reason
):
    before = _state()
    body = {**XL, field: value}
    response = api_as(world.admin).post("/api/v1/tier-templates/", body, format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()["fields"]
    field_name = (
        "storage_bytes" if field == "storage" and reason != "Kubernetes quantity" else field
    )
    assert field_name in errors, errors
    assert reason.lower() in " ".join(errors[field_name]).lower(), errors
    assert _state() == before


def test_a_patch_changes_the_tier_but_not_quota_sets_made_from_it(world, api_as):
    small_sets = list(QuotaSet.objects.filter(tier=world.small).values("id", "generation"))
    response = api_as(world.admin).patch(
        "/api/v1/tier-templates/small/", {"gpus_limit": 8, "description": "roomier"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["gpus_limit"] == 8
    world.small.refresh_from_db()
    assert world.small.gpus_limit == 8 and world.small.gpus_guaranteed == 4
    assert list(QuotaSet.objects.filter(tier=world.small).values("id", "generation")) == small_sets
    event = AuditEvent.objects.get(action="tier_template.updated")
    assert event.before["gpus_limit"] == "6" and event.after["gpus_limit"] == "8"


def test_a_patch_cannot_put_guaranteed_above_limit(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tier-templates/small/", {"gpus_limit": 2}, format="json"
    )
    assert response.status_code == 400
    assert "above the limit" in response.json()["fields"]["gpus_guaranteed"][0]
    world.small.refresh_from_db()
    assert world.small.gpus_limit == 6


@pytest.mark.parametrize("persona", ["alice", "carol", "bob"])
def test_only_platform_admins_change_tiers(world, api_as, persona):
    client = api_as(getattr(world, persona))
    assert client.post("/api/v1/tier-templates/", XL, format="json").status_code == 403
    assert (
        client.patch("/api/v1/tier-templates/small/", {"gpus_limit": 8}, format="json").status_code
        == 403
    )
    assert client.get("/api/v1/tier-templates/small/").status_code == 200
    assert not TierTemplate.objects.filter(name="xlarge").exists()


def test_anonymous_callers_cannot_read_or_write_tiers(world, api_as):
    client = api_as(None)
    assert client.get("/api/v1/tier-templates/").status_code in (401, 403)
    assert client.post("/api/v1/tier-templates/", XL, format="json").status_code in (401, 403)
