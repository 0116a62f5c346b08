"""Django admin's bulk "Delete selected" goes through the services, as a platform admin sends it.

Django's own action deletes the queryset in one statement: no rule is asked and nothing is
audited. On memberships, namespaces and nodes the action calls the service per row (audited,
refusing what a rule refuses, with a message naming it); tenants are archived, never deleted.
"""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from gpu_agent.models import Node, NodeToken
from tenants.models import AuditEvent, Membership, Namespace, Tenant
from tenants.services import namespace_create


def _admin(world) -> Client:
    client = Client()
    client.force_login(world.admin)
    return client


def _bulk_delete(client: Client, url: str, pks: list[int]):
    """The confirmation page's answer: Django's form posts the action again with ``post``."""
    return client.post(
        url,
        {"action": "delete_selected", "_selected_action": [str(pk) for pk in pks], "post": "yes"},
        follow=True,
    )


def _messages(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def test_bulk_delete_of_memberships_refuses_the_only_lead_and_audits_the_rest(world):
    lead = Membership.objects.get(tenant=world.team_a, user=world.alice)
    member = Membership.objects.get(tenant=world.team_a, user=world.carol)
    response = _bulk_delete(_admin(world), "/admin/tenants/membership/", [lead.pk, member.pk])
    assert response.status_code == 200
    assert Membership.objects.filter(pk=lead.pk).exists()  # still team-a's lead
    assert not Membership.objects.filter(pk=member.pk).exists()
    removed = AuditEvent.objects.get(action="membership.removed", object_id="carol@team-a")
    assert removed.actor == world.admin
    assert not AuditEvent.objects.filter(
        action="membership.removed", object_id="alice@team-a"
    ).exists()
    said = " ".join(_messages(response))
    assert "alice" in said and "only lead" in said, said
    assert "carol" in said


def test_the_confirmation_page_still_comes_first(world):
    member = Membership.objects.get(tenant=world.team_a, user=world.carol)
    response = _admin(world).post(
        "/admin/tenants/membership/",
        {"action": "delete_selected", "_selected_action": [str(member.pk)]},
    )
    assert response.status_code == 200
    assert b"Are you sure" in response.content
    assert Membership.objects.filter(pk=member.pk).exists()


def test_bulk_delete_of_namespaces_keeps_a_tenants_last_one_and_audits_the_rest(world):
    extra = namespace_create(
        tenant=world.team_b, name="team-b-extra", purpose="training", actor=world.admin
    )
    team_b = list(Namespace.objects.filter(tenant=world.team_b).order_by("pk"))
    assert len(team_b) >= 2
    response = _bulk_delete(_admin(world), "/admin/tenants/namespace/", [n.pk for n in team_b])
    assert response.status_code == 200
    left = list(Namespace.objects.filter(tenant=world.team_b))
    assert len(left) == 1  # a tenant keeps at least one namespace
    gone = {n.name for n in team_b} - {n.name for n in left}
    assert AuditEvent.objects.filter(action="namespace.removed", actor=world.admin).count() == len(
        gone
    )
    assert extra.name in gone or left[0].name == extra.name
    said = " ".join(_messages(response))
    assert left[0].name in said and "only namespace" in said, said


def test_tenants_are_never_deleted_from_django_admin(world):
    client = _admin(world)
    page = client.get("/admin/tenants/tenant/")
    assert b'value="delete_selected"' not in page.content  # archive instead
    response = _bulk_delete(client, "/admin/tenants/tenant/", [world.team_c.pk])
    assert response.status_code == 200
    assert Tenant.objects.filter(pk=world.team_c.pk).exists()
    assert client.get(f"/admin/tenants/tenant/{world.team_c.pk}/delete/").status_code == 403


def test_bulk_delete_of_nodes_removes_stale_ones_audited_and_refuses_reporting_ones(world):
    now = timezone.now()
    live = Node.objects.create(name="gpu-live", cluster=world.a100, last_report_at=now)
    gone = Node.objects.create(
        name="gpu-gone", cluster=world.a100, last_report_at=now - timedelta(days=3), stale=True
    )
    NodeToken.objects.create(node=live, prefix="livetokn", digest="x" * 64)
    response = _bulk_delete(_admin(world), "/admin/gpu_agent/node/", [live.pk, gone.pk])
    assert response.status_code == 200
    assert Node.objects.filter(pk=live.pk).exists()
    assert not Node.objects.filter(pk=gone.pk).exists()
    event = AuditEvent.objects.get(action="node.removed", object_id="gpu-gone")
    assert event.actor == world.admin
    said = " ".join(_messages(response))
    assert "gpu-live" in said and "gpu-gone" in said, said


def test_one_node_deleted_from_its_page_goes_through_the_service_too(world):
    now = timezone.now()
    live = Node.objects.create(name="gpu-live", cluster=world.a100, last_report_at=now)
    client = _admin(world)
    response = client.post(f"/admin/gpu_agent/node/{live.pk}/delete/", {"post": "yes"})
    assert response.status_code == 409
    assert Node.objects.filter(pk=live.pk).exists()
