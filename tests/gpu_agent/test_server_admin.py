"""Django admin for the GPU fleet: every page loads, observed data is read-only, tokens show
their prefix only and are revoked through the service."""

from __future__ import annotations

import pytest
from django.contrib import admin

from gpu_agent.models import Gpu, MigInstance, MigLayout, Node, NodeJoinToken, NodeToken
from gpu_agent.services import layouts, nodes, reports
from tenants.models import AuditEvent

A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def fleet(world):
    _, join_secret = nodes.join_token_create(node_name="gpu-node-1", actor=world.admin)
    node, node_secret = nodes.agent_register(
        join_secret=join_secret, hostname="gpu-node-1", agent_version="1.0"
    )
    gpu = {
        "uuid": "GPU-1",
        "index": 0,
        "name": A100,
        "memory_total_mib": 81920,
        "memory_used_mib": 0,
        "utilization_pct": None,
        "mig_mode_current": True,
        "mig_mode_pending": True,
        "instances": [
            {"gi_id": 1, "profile": "3g.40gb", "start": 0, "size": 4, "processes": []},
        ],
        "processes": [],
    }
    body = {"node": node.name, "sent_at": "2026-12-03T08:00:00Z", "gpus": [gpu]}
    reports.agent_report_ingest(node=node, report=body)
    layouts.layout_set(
        gpu=Gpu.objects.get(), instances=[{"profile": "7g.80gb", "start": 0}], actor=world.admin
    )
    return node, join_secret, node_secret


def test_every_fleet_model_has_a_page_that_loads_without_secrets(world, client, fleet):
    _, join_secret, node_secret = fleet
    client.force_login(world.admin)
    models = [Node, Gpu, MigInstance, MigLayout, NodeJoinToken, NodeToken]
    assert set(models) <= set(admin.site._registry)
    for model in models:
        listing = f"/admin/gpu_agent/{model._meta.model_name}/"
        response = client.get(listing)
        assert response.status_code == 200, listing
        change = client.get(f"{listing}{model.objects.first().pk}/change/")
        assert change.status_code == 200, listing
        for page in (response, change):
            text = page.content.decode()
            for secret in (join_secret, node_secret):
                assert secret not in text
            for token in (*NodeToken.objects.all(), *NodeJoinToken.objects.all()):
                assert token.digest not in text


def test_observed_data_cannot_be_added_or_changed_by_hand(world, client, fleet):
    client.force_login(world.admin)
    for model in (Node, Gpu, MigInstance, MigLayout, NodeJoinToken, NodeToken):
        assert client.get(f"/admin/gpu_agent/{model._meta.model_name}/add/").status_code == 403
    gpu = Gpu.objects.get()
    response = client.post(f"/admin/gpu_agent/gpu/{gpu.pk}/change/", {"name": "Forged"})
    assert response.status_code == 403
    assert Gpu.objects.get().name == A100


def test_the_admin_revokes_a_nodes_tokens_through_the_service(world, client, fleet):
    node, _, node_secret = fleet
    client.force_login(world.admin)
    response = client.post(
        "/admin/gpu_agent/node/",
        {"action": "revoke_tokens", "_selected_action": [node.pk]},
    )
    assert response.status_code == 302
    assert nodes.node_token_authenticate(secret=node_secret) is None
    assert AuditEvent.objects.filter(action="node_token.revoked", source="admin").exists()


def test_the_admin_sets_a_nodes_cluster_audited(world, client, fleet):
    node, _, _ = fleet
    client.force_login(world.admin)
    response = client.post(
        f"/admin/gpu_agent/node/{node.pk}/change/",
        {
            "cluster": world.h100.pk,
            "gpus-TOTAL_FORMS": "1",
            "gpus-INITIAL_FORMS": "1",
            "gpus-0-id": Gpu.objects.get().pk,
            "gpus-0-node": node.pk,
            "tokens-TOTAL_FORMS": "1",
            "tokens-INITIAL_FORMS": "1",
            "tokens-0-id": NodeToken.objects.get().pk,
            "tokens-0-node": node.pk,
        },
    )
    assert response.status_code == 302, response.content[:3000]
    node.refresh_from_db()
    assert node.cluster == world.h100
    event = AuditEvent.objects.get(action="node.updated")
    assert event.after == {"cluster": "demo-h100"} and event.source == "admin"
