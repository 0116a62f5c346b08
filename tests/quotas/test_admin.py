"""Django admin: every model has a page; tier templates go through the same service as the API."""

from __future__ import annotations

import pytest
from django.contrib import admin

from quotas.models import TierTemplate
from tenants.models import AuditEvent

FORM = {
    "name": "xlarge", "display_name": "Extra large", "description": "", "gpus_guaranteed": "128",
    "gpus_limit": "192", "cpu_guaranteed": "256", "cpu_limit": "384", "memory_guaranteed": "2Ti",
    "memory_limit": "3Ti", "max_running_jobs": "100", "max_queued_jobs": "500", "max_pods": "800",
    "storage_bytes": "40Ti", "max_pvcs": "400", "sort_order": "9",
}  # fmt: skip


def test_every_model_of_the_project_has_an_admin_page_that_loads(world, client):
    client.force_login(world.admin)
    registered = [m for m in admin.site._registry if m._meta.app_label in {"tenants", "quotas"}]
    assert {m.__name__ for m in registered} >= {
        "User", "Tenant", "Namespace", "Membership", "ApiToken", "AuditEvent", "Cluster",
        "ResourceFlavor", "TierTemplate", "QuotaSet",
    }  # fmt: skip
    for model in registered:
        url = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert client.get(url).status_code == 200, url


def test_a_lead_cannot_open_django_admin(world, client):
    client.force_login(world.alice)
    response = client.get("/admin/tenants/tenant/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_admin_adds_a_tier_typed_as_kubernetes_quantities(world, client):
    client.force_login(world.admin)
    response = client.post("/admin/quotas/tiertemplate/add/", FORM)
    assert response.status_code == 302, response.content[:2000]
    tier = TierTemplate.objects.get(name="xlarge")
    assert tier.memory_guaranteed == 2 * 1024**4 and tier.gpus_limit == 192
    assert AuditEvent.objects.filter(action="tier_template.created", actor=world.admin).exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("memory_limit", "12GB", "unknown suffix"), ("gpus_guaranteed", "500", "above the limit")],
)
def test_the_admin_form_refuses_what_the_api_refuses(world, client, field, value, message):
    client.force_login(world.admin)
    response = client.post("/admin/quotas/tiertemplate/add/", {**FORM, field: value})
    assert response.status_code == 200  # the form again, with the error
    assert message in response.content.decode()
    assert not TierTemplate.objects.filter(name="xlarge").exists()


def test_the_admin_edits_a_tier_and_the_change_is_audited(world, client):
    client.force_login(world.admin)
    url = f"/admin/quotas/tiertemplate/{world.small.pk}/change/"
    form = client.get(url).context["adminform"].form
    assert form.initial["memory_guaranteed"] == "64Gi"
    data = {**FORM, "gpus_limit": "8", "gpus_guaranteed": "4", "cpu_guaranteed": "8",
            "cpu_limit": "12", "memory_guaranteed": "64Gi", "memory_limit": "96Gi"}  # fmt: skip
    data.pop("name")
    response = client.post(url, data)
    assert response.status_code == 302, response.content[:3000]
    world.small.refresh_from_db()
    assert world.small.gpus_limit == 8 and world.small.name == "small"
    event = AuditEvent.objects.get(action="tier_template.updated")
    assert event.before["gpus_limit"] == "6" and event.after["gpus_limit"] == "8"
