"""Per-pod caps (R16), the batch / inference split (R17) and the production priority grant
(R15), each set through a request: checked at submit and again at approval, refused naming the
field and the rule with nothing stored, and applied with the quota set (and the tenant, for the
grant) when approved."""

from __future__ import annotations

from decimal import Decimal

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve, quota_request_create
from core.errors import Conflict, PermissionDenied, ValidationFailed
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE
from quotas.models import QuotaSet, SyncOutbox
from quotas.services import QuotaItem, inference_split_check, pod_caps_check
from tenants.models import AuditEvent, Tenant
from tests.approvals.conftest import URL, database_state

pytestmark = pytest.mark.django_db

GI = 1024**3


def ask(world, *, tenant=None, cluster=None, requester=None, production_priority=None, **sched):
    """File and submit a request of team-a on demo-a100 that changes only ``sched`` (and the
    production grant)."""
    return quota_request_create(
        tenant=tenant or world.team_a,
        cluster=cluster or world.a100,
        requester=requester or world.alice,
        reason="serving and training apart",
        items=[],
        scheduling=sched,
        production_priority=production_priority,
        submit=True,
    )


def team_a_set(world) -> QuotaSet:
    return QuotaSet.objects.get(tenant=world.team_a, cluster=world.a100)


# --- the rules, as plain functions ------------------------------------------------------------


def test_pod_caps_check_names_field_cap_and_limit(world):
    items = [
        QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(6), Decimal(10)),
        QuotaItem(world.a100_gpu, CPU_RESOURCE, Decimal(48), Decimal(80)),
    ]
    fine = pod_caps_check(
        tenant="team-a",
        items=items,
        caps={"max_gpus_per_pod": 10, "max_cpu_per_pod": Decimal(80)},
        requested={"max_gpus_per_pod", "max_cpu_per_pod"},
    )
    assert fine.errors == {} and fine.warnings == []
    over = pod_caps_check(
        tenant="team-a",
        items=items,
        caps={"max_gpus_per_pod": 12, "max_cpu_per_pod": Decimal(96)},
        requested={"max_gpus_per_pod", "max_cpu_per_pod"},
    )
    assert over.errors["max_gpus_per_pod"] == [
        "a cap of 12 GPUs per pod is above team-a's largest GPU limit of 10 GPUs "
        "(on a100-80gb): no pod could get that much; ask for at most 10 GPUs"
    ]
    assert "96 cores per pod" in over.errors["max_cpu_per_pod"][0]
    assert "80 cores" in over.errors["max_cpu_per_pod"][0]
    # A cap in force that a lower limit leaves behind is a warning, not a refusal.
    stale = pod_caps_check(tenant="team-a", items=items, caps={"max_gpus_per_pod": 12})
    assert stale.errors == {}
    assert "the cap in force should come down" in stale.warnings[0]


def test_a_zero_cap_is_refused(world):
    check = pod_caps_check(
        tenant="team-a",
        items=[],
        caps={"max_cpu_per_pod": Decimal(0)},
        requested={"max_cpu_per_pod"},
    )
    assert check.errors["max_cpu_per_pod"] == ["a per-pod cap must be above zero; got 0 cores"]


def test_inference_split_fits_the_gpu_limit_and_needs_the_grant(world):
    items = [QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(6), Decimal(10))]
    assert (
        inference_split_check(
            tenant="team-a", items=items, inference_gpus=4, production_allowed=True
        ).errors
        == {}
    )
    over = inference_split_check(
        tenant="team-a", items=items, inference_gpus=11, production_allowed=True
    )
    assert over.errors["inference_gpus"] == [
        "11 GPUs for inference is above team-a's whole-GPU limit of 10 GPUs: "
        "the split must fit the limit"
    ]
    ungranted = inference_split_check(
        tenant="team-a", items=items, inference_gpus=4, production_allowed=False
    )
    assert "may not use" in ungranted.errors["inference_gpus"][0]
    borrowed = inference_split_check(
        tenant="team-a", items=items, inference_gpus=8, production_allowed=True
    )
    assert borrowed.errors == {} and "more than the 6 GPUs guaranteed" in borrowed.warnings[0]


# --- through the request flow -----------------------------------------------------------------


def test_per_pod_caps_are_requested_approved_and_kept(world):
    request = ask(
        world, max_gpus_per_pod=4, max_cpu_per_pod=Decimal(32), max_memory_per_pod=Decimal(256 * GI)
    )
    assert team_a_set(world).max_gpus_per_pod is None  # nothing until approved
    quota_request_approve(request=request, approver=world.admin)
    quota_set = team_a_set(world)
    assert (
        quota_set.max_gpus_per_pod,
        quota_set.max_cpu_per_pod,
        quota_set.max_memory_per_pod,
    ) == (
        4,
        Decimal(32),
        Decimal(256 * GI),
    )
    assert SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.a100, generation=quota_set.generation
    ).exists()
    # A later change of something else keeps the caps: nothing approved is lost.
    later = ask(world, max_pods=40)
    quota_request_approve(request=later, approver=world.admin)
    assert team_a_set(world).max_gpus_per_pod == 4


def test_a_cap_above_the_limit_is_refused_at_submit_and_nothing_is_stored(world):
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        ask(world, max_gpus_per_pod=12)
    assert "12 GPUs per pod" in refused.value.fields["max_gpus_per_pod"][0]
    assert "10 GPUs" in refused.value.fields["max_gpus_per_pod"][0]
    assert database_state() == before


def test_a_cap_checked_again_at_approval(world):
    request = ask(world, max_gpus_per_pod=10)
    # Meanwhile the team's limit came down to 8 (another approved request).
    lower = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="give back",
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(6), Decimal(8))],
        submit=True,
    )
    quota_request_approve(request=lower, approver=world.admin)
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=request, approver=world.admin)
    assert "max_gpus_per_pod" in refused.value.fields
    assert team_a_set(world).max_gpus_per_pod is None


def test_the_split_needs_the_production_grant_in_force_or_in_the_same_request(world):
    with pytest.raises(ValidationFailed) as refused:
        ask(world, inference_gpus=4)
    assert "production priority" in refused.value.fields["inference_gpus"][0]
    request = ask(world, inference_gpus=4, production_priority=True)
    quota_request_approve(request=request, approver=world.admin)
    world.team_a.refresh_from_db()
    assert world.team_a.production_priority_allowed
    assert team_a_set(world).inference_gpus == 4
    event = AuditEvent.objects.get(action="tenant.production_priority_granted")
    assert event.after["production_priority_allowed"] is True


def test_a_split_above_the_gpu_limit_is_refused(world, api_as):
    Tenant.objects.filter(pk=world.team_a.pk).update(production_priority_allowed=True)
    before = database_state()
    response = api_as(world.alice).post(
        URL,
        {"tenant": "team-a", "cluster": "demo-a100", "reason": "serving", "inference_gpus": 11},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert (
        "above team-a's whole-GPU limit of 10 GPUs"
        in response.json()["fields"]["inference_gpus"][0]
    )
    assert database_state() == before


def test_the_api_refuses_a_cap_above_the_limit_naming_the_field(world, api_as):
    before = database_state()
    response = api_as(world.alice).post(
        URL,
        {
            "tenant": "team-a",
            "cluster": "demo-a100",
            "reason": "big pods",
            "max_memory_per_pod": "1Ti",
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    message = response.json()["fields"]["max_memory_per_pod"][0]
    assert "1 TiB per pod" in message and "640 GiB" in message
    assert database_state() == before


def test_the_api_files_caps_split_and_grant_and_shows_them(world, api_as):
    response = api_as(world.alice).post(
        URL,
        {
            "tenant": "team-a",
            "cluster": "demo-a100",
            "reason": "serve beside training",
            "max_gpus_per_pod": 2,
            "max_cpu_per_pod": "16",
            "max_memory_per_pod": "128Gi",
            "inference_gpus": 3,
            "production_priority": True,
            "submit": True,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    shown = response.json()
    assert shown["max_gpus_per_pod"] == 2
    assert shown["max_cpu_per_pod"] == "16"
    assert shown["max_memory_per_pod"] == "128Gi"
    assert shown["inference_gpus"] == 3
    assert shown["production_priority"] is True
    approved = api_as(world.admin).post(f"{URL}{shown['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.content
    quota_sets = api_as(world.alice).get("/api/v1/tenants/team-a/quotas/").json()
    a100 = next(q for q in quota_sets["results"] if q["cluster"] == "demo-a100")
    assert (a100["max_gpus_per_pod"], a100["max_memory_per_pod"], a100["inference_gpus"]) == (
        2,
        "128Gi",
        3,
    )
    tenant = api_as(world.alice).get("/api/v1/tenants/team-a/").json()
    assert tenant["production_priority_allowed"] is True


def test_a_bad_cap_shape_is_a_400_naming_the_field(world, api_as):
    response = api_as(world.alice).post(
        URL,
        {"tenant": "team-a", "cluster": "demo-a100", "reason": "x", "max_cpu_per_pod": "lots"},
        format="json",
    )
    assert response.status_code == 400
    assert "max_cpu_per_pod" in response.json()["fields"]


def test_asking_for_the_grant_already_held_is_refused(world):
    Tenant.objects.filter(pk=world.team_a.pk).update(production_priority_allowed=True)
    world.team_a.refresh_from_db()
    with pytest.raises(ValidationFailed) as refused:
        ask(world, production_priority=True)
    assert (
        "may already use the production priority" in refused.value.fields["production_priority"][0]
    )


def test_withdrawing_the_grant_while_a_split_is_in_force_is_refused(world):
    quota_request_approve(
        request=ask(world, inference_gpus=2, production_priority=True), approver=world.admin
    )
    world.team_a.refresh_from_db()
    with pytest.raises(ValidationFailed) as refused:
        ask(world, production_priority=False)
    assert "set that split to 0" in refused.value.fields["production_priority"][0]
    withdrawn = ask(world, production_priority=False, inference_gpus=0)
    quota_request_approve(request=withdrawn, approver=world.admin)
    world.team_a.refresh_from_db()
    assert not world.team_a.production_priority_allowed


def test_the_grant_pushes_the_tenants_other_clusters(world):
    h100_set = QuotaSet.objects.get(tenant=world.team_a, cluster=world.h100)
    generation = h100_set.generation
    quota_request_approve(request=ask(world, production_priority=True), approver=world.admin)
    h100_set.refresh_from_db()
    assert h100_set.generation == generation + 1
    assert SyncOutbox.objects.filter(
        tenant=world.team_a, cluster=world.h100, generation=h100_set.generation
    ).exists()


def test_a_lead_may_ask_for_the_grant_and_only_an_admin_approves_it(world):
    request = ask(world, production_priority=True)
    stored = QuotaChangeRequest.objects.get(pk=request.pk)
    assert (stored.status, stored.production_priority) == ("pending", True)
    with pytest.raises(PermissionDenied) as refused:
        quota_request_approve(request=request, approver=world.alice)
    assert "Only platform admins" in str(refused.value)
    world.team_a.refresh_from_db()
    assert not world.team_a.production_priority_allowed


def test_onboarding_on_a_tier_with_a_split_grants_the_production_priority(world):
    from approvals.services import tenant_onboard
    from quotas.services import tier_template_save

    tier = tier_template_save(
        actor=world.admin, tier=world.small, inference_gpus=2, max_gpus_per_pod=4
    )
    tenant = tenant_onboard(
        slug="serving", display_name="Serving", tier=tier, cluster=world.a100, actor=world.admin
    )
    assert Tenant.objects.get(pk=tenant.pk).production_priority_allowed
    quota_set = QuotaSet.objects.get(tenant=tenant, cluster=world.a100)
    assert (quota_set.inference_gpus, quota_set.max_gpus_per_pod) == (2, 4)


def test_a_tier_refuses_a_cap_or_split_above_its_own_limit(world):
    from quotas.services import tier_template_save

    with pytest.raises(ValidationFailed) as refused:
        tier_template_save(
            actor=world.admin, tier=world.medium, inference_gpus=30, max_cpu_per_pod="64"
        )
    assert refused.value.fields["inference_gpus"] == [
        "30 GPUs for inference is above the tier's limit of 24 GPUs"
    ]
    assert refused.value.fields["max_cpu_per_pod"] == [
        "64 cores per pod is above the tier's limit of 48 cores"
    ]


def test_the_default_priority_becomes_production_only_with_the_grant(world, api_as):
    refused = api_as(world.admin).patch(
        "/api/v1/tenants/team-a/", {"default_priority": "production"}, format="json"
    )
    assert refused.status_code == 400, refused.content
    assert "may not use the production priority" in refused.json()["fields"]["default_priority"][0]
    assert Tenant.objects.get(pk=world.team_a.pk).default_priority == "default"
    quota_request_approve(request=ask(world, production_priority=True), approver=world.admin)
    taken = api_as(world.admin).patch(
        "/api/v1/tenants/team-a/", {"default_priority": "production"}, format="json"
    )
    assert taken.status_code == 200, taken.content
    assert Tenant.objects.get(pk=world.team_a.pk).default_priority == "production"


def test_the_api_dry_check_weighs_the_grant_asked_for_in_the_same_body(world, api_as):
    body = {"tenant": "team-a", "cluster": "demo-a100", "reason": "serving", "inference_gpus": 2}
    alone = api_as(world.alice).post(f"{URL}validate/", body, format="json")
    assert alone.status_code == 200, alone.content
    assert "production priority" in alone.json()["errors"]["inference_gpus"][0]
    both = api_as(world.alice).post(
        f"{URL}validate/", {**body, "production_priority": True}, format="json"
    )
    assert both.status_code == 200 and both.json()["errors"] == {}
    assert not QuotaChangeRequest.objects.filter(requester=world.alice).exists()


def test_django_admin_shows_the_grant_but_does_not_edit_it(world, client):
    client.force_login(world.admin)
    page = client.get(f"/admin/tenants/tenant/{world.team_a.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "production priority" in html.lower()
    assert 'name="production_priority_allowed"' not in html
