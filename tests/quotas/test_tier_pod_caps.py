"""Tier templates carry per-pod caps and the batch / inference split: through the API and
Django admin, refused above the tier's own limits, and handed on to a tier change."""

from __future__ import annotations

from decimal import Decimal

import pytest

from approvals.services import quota_request_approve, quota_request_create, request_changes
from core.errors import ValidationFailed
from quotas.models import QuotaSet, TierTemplate
from tests.quotas.test_admin import FORM

pytestmark = pytest.mark.django_db


def test_the_api_sets_a_tiers_caps_and_split(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tier-templates/medium/",
        {"max_gpus_per_pod": 8, "max_memory_per_pod": "128Gi", "inference_gpus": 4},
        format="json",
    )
    assert response.status_code == 200, response.json()
    shown = response.json()
    assert (shown["max_gpus_per_pod"], shown["max_memory_per_pod"], shown["inference_gpus"]) == (
        8,
        "128Gi",
        4,
    )
    assert shown["max_cpu_per_pod"] is None
    world.medium.refresh_from_db()
    assert world.medium.max_memory_per_pod == 128 * 1024**3


def test_the_api_refuses_a_split_above_the_tiers_gpu_limit(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tier-templates/small/", {"inference_gpus": 7}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["fields"]["inference_gpus"] == [
        "7 GPUs for inference is above the tier's limit of 6 GPUs"
    ]
    world.small.refresh_from_db()
    assert world.small.inference_gpus is None


def test_django_admin_adds_a_tier_with_caps(world, client):
    client.force_login(world.admin)
    response = client.post(
        "/admin/quotas/tiertemplate/add/",
        {**FORM, "max_gpus_per_pod": "4", "max_cpu_per_pod": "500m", "inference_gpus": "0"},
    )
    assert response.status_code == 302, response.content[:2000]
    tier = TierTemplate.objects.get(name="xlarge")
    assert (tier.max_gpus_per_pod, tier.max_cpu_per_pod, tier.inference_gpus) == (
        4,
        Decimal("0.5"),
        0,
    )
    assert tier.max_memory_per_pod is None


def test_a_tier_change_brings_the_tiers_caps_and_needs_the_grant_for_its_split(world):
    TierTemplate.objects.filter(pk=world.small.pk).update(inference_gpus=2, max_gpus_per_pod=2)
    world.small.refresh_from_db()
    changes = request_changes(cluster=world.a100, raw_items=[], scheduling={}, tier=world.small)
    assert changes["scheduling"]["inference_gpus"] == 2
    kwargs = dict(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="back to the small tier",
        items=changes["items"],
        scheduling=changes["scheduling"],
        tier=world.small,
        submit=True,
    )
    with pytest.raises(ValidationFailed) as refused:
        quota_request_create(**kwargs)
    assert "production priority" in refused.value.fields["inference_gpus"][0]
    request = quota_request_create(**kwargs, production_priority=True)
    quota_request_approve(request=request, approver=world.admin)
    quota_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)
    assert (quota_set.inference_gpus, quota_set.max_gpus_per_pod) == (2, 2)
