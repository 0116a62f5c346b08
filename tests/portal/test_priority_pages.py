"""Pages for per-pod caps, the batch / inference split and the production priority: the
request form takes them and puts a refusal next to the field, the request page and the tenant
page show them, and the preemption help page is there, linked from the tenant page."""

from __future__ import annotations

import re

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve, quota_request_create
from quotas.models import QuotaSet
from quotas.selectors import priority_class_use
from tests.approvals.test_pages import NEW, VALIDATE, a100_form, slot
from tests.pages import logged_in, main

pytestmark = pytest.mark.django_db


def words(response) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", main(response)))


def approved(world, production_priority=None, **scheduling) -> None:
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="serving beside training",
        items=[],
        scheduling=scheduling,
        production_priority=production_priority,
        submit=True,
    )
    quota_request_approve(request=request, approver=world.admin)


def test_the_form_refuses_a_cap_above_the_limit_next_to_the_field(world):
    client = logged_in(world.alice)
    form = client.get(NEW)
    html = form.content.decode()
    for name in ("max_gpus_per_pod", "max_cpu_per_pod", "max_memory_per_pod", "inference_gpus"):
        assert f'name="{name}"' in html
    assert 'name="production_priority"' in html
    refused = client.post(NEW, a100_form(reason="big pods", max_gpus_per_pod="12"))
    assert refused.status_code == 200
    message = slot(refused, "max_gpus_per_pod")
    assert "a cap of 12 GPUs per pod is above team-a's largest GPU limit of 10 GPUs" in message
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_a_split_without_the_grant_is_refused_on_the_form_and_taken_with_it(world):
    client = logged_in(world.alice)
    refused = client.post(NEW, a100_form(reason="serving", inference_gpus="4"))
    assert refused.status_code == 200
    assert "production priority" in slot(refused, "inference_gpus")
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()
    taken = client.post(
        NEW,
        a100_form(
            reason="serving",
            inference_gpus="4",
            production_priority="grant",
            max_memory_per_pod="128Gi",
            action="submit",
        ),
    )
    assert taken.status_code == 302
    request = QuotaChangeRequest.objects.get(requester=world.alice)
    assert (request.inference_gpus, request.production_priority) == (4, True)
    assert request.max_memory_per_pod == 128 * 1024**3
    detail = words(client.get(taken["Location"]))
    assert "GPUs for inference 4 GPUs; batch gets the rest of the GPU limit" in detail
    assert "Production priority grant it" in detail
    assert "Memory per container at most 128 GiB" in detail


def test_the_live_check_names_the_cap_and_the_split_as_the_form_does(world):
    answer = logged_in(world.alice).post(
        VALIDATE, a100_form(reason="x", max_gpus_per_pod="12", inference_gpus="2")
    )
    assert answer.status_code == 200
    errors = answer.json()["errors"]
    assert "above team-a's largest GPU limit of 10 GPUs" in errors["max_gpus_per_pod"][0]
    assert "production priority" in errors["inference_gpus"][0]
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_a_quantity_the_form_cannot_read_is_named(world):
    refused = logged_in(world.alice).post(NEW, a100_form(reason="x", max_cpu_per_pod="lots"))
    assert refused.status_code == 200
    assert slot(refused, "max_cpu_per_pod")


def test_the_tenant_page_shows_caps_split_and_grant(world):
    client = logged_in(world.carol)  # a member reads it
    before = words(client.get("/tenants/team-a/"))
    assert "Production priority: not granted" in before
    assert "GPUs per pod at most 8 GPUs (from the limits)" in before
    assert "No split: batch and inference share the GPU limit of 10 GPUs" in before
    assert 'href="/help/preemption/"' in main(client.get("/tenants/team-a/"))

    approved(world, production_priority=True, inference_gpus=3, max_gpus_per_pod=2)
    after = words(client.get("/tenants/team-a/"))
    assert "Production priority: granted" in after
    assert "GPUs per pod at most 2 GPUs (requested)" in after
    assert (
        "3 GPUs for inference (production priority), 7 GPUs for batch (any other priority, "
        "or none), of a GPU limit of 10 GPUs"
    ) in after
    assert QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100).inference_gpus == 3


def test_the_preemption_help_page(world):
    page = logged_in(world.carol).get("/help/preemption/")
    assert page.status_code == 200
    html = main(page)
    assert "<h1>Preemption and checkpoints</h1>" in html
    assert "<table>" in html
    for phrase in ("PodDisruptionBudget", "restartPolicy: Never", "gpu-portal-no-production"):
        assert phrase in html
    assert "<script" not in html
    anonymous = logged_in(None).get("/help/preemption/")
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]


def test_priority_use_reads_the_scoped_quotas_per_namespace():
    gpu = "requests.nvidia.com/gpu"
    quotas = [
        {"namespace": "b", "name": "gpu-portal-batch", "hard": {gpu: "7"}, "used": {gpu: "5"}},
        {"namespace": "b", "name": "gpu-portal-inference", "hard": {gpu: "3"}, "used": {gpu: "2"}},
        {"namespace": "a", "name": "gpu-portal-inference", "hard": {gpu: "3"}, "used": {}},
        {"namespace": "a", "name": "gpu-portal-quota", "hard": {gpu: "10"}, "used": {gpu: "7"}},
    ]
    use = priority_class_use(resource_quotas=quotas)
    assert [(u.namespace, u.quota, int(u.hard), int(u.used)) for u in use] == [
        ("a", "gpu-portal-inference", 3, 0),
        ("b", "gpu-portal-inference", 3, 2),
        ("b", "gpu-portal-batch", 7, 5),
    ]
    assert priority_class_use(resource_quotas=quotas[3:]) == []
