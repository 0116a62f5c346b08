"""vGPU quotas through HAMi (issue 34), on the portal side: GPU memory typed in GiB or as a
quantity and held to whole MiB, compute as a percent of a GPU; bad input refused with 400
naming the field and the rule, nothing changed; the fleet's GPU memory and compute checked at
submit and again at approval; a vGPU line refused on a cluster without a new enough HAMi; an
admin moving a time-sliced flavor to vGPU shares, each tenant's shares becoming the same
fraction of the GPU's memory and compute."""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape

import pytest

from approvals.services import (
    approval_policy_update,
    quota_request_approve,
    quota_request_create,
    request_items_parse,
)
from core.errors import Conflict, ValidationFailed
from quotas.choices import GPU_RESOURCE, GPUCORES_RESOURCE, GPUMEM_RESOURCE, FlavorKind
from quotas.models import FlavorResource, Quota, ResourceFlavor, SyncOutbox
from quotas.services import QuotaItem, flavor_vgpu_convert, quota_set_write
from tenants.models import AuditEvent
from tests.approvals.conftest import URL, database_state
from tests.approvals.test_timeslicing import t4_flavor, time_sliced

pytestmark = pytest.mark.django_db

MIB = 1024**2
GIB = 1024**3
T4_MIB = 15360


@pytest.fixture(autouse=True)
def one_approver(world):
    approval_policy_update(actor=None, two_approvers_above_capacity_fraction=Decimal(1))


@pytest.fixture
def t4v(world) -> ResourceFlavor:
    """Two T4s on demo-a100 shared through HAMi: 20 vGPUs, 30 GiB, 200% of a GPU; the teams
    at the shared-GPU level, which may hold vGPU shares."""
    time_sliced(world.team_a, world.team_b, world.team_c)
    world.a100.hami_version = "v2.10.0"
    world.a100.save(update_fields=["hami_version"])
    flavor = ResourceFlavor.objects.create(
        cluster=world.a100,
        name="t4-vgpu",
        kind=FlavorKind.VGPU,
        gpu_model="Tesla T4",
        gpu_memory_mib=T4_MIB,
        vgpu_split=10,
        gpu_weight=Decimal("0.025"),
    )
    for resource, capacity in (
        (GPU_RESOURCE, 20),
        (GPUMEM_RESOURCE, 2 * T4_MIB * MIB),
        (GPUCORES_RESOURCE, 200),
    ):
        FlavorResource.objects.create(flavor=flavor, resource=resource, capacity=capacity)
    return flavor


def lines(vgpus="3", memory="4.5", cores="30%", limits=None) -> list[dict]:
    limits = limits or {}
    return [
        {"flavor": "t4-vgpu", "resource": resource, "guaranteed": amount,
         "limit": limits.get(resource, amount)}
        for resource, amount in (
            (GPU_RESOURCE, vgpus), (GPUMEM_RESOURCE, memory), (GPUCORES_RESOURCE, cores),
        )
    ]  # fmt: skip


def body_for(tenant: str = "team-a", **kwargs) -> dict:
    return {
        "tenant": tenant,
        "cluster": "demo-a100",
        "reason": "notebooks on a share of a T4",
        "submit": True,
        "items": lines(**kwargs),
    }


def held(tenant, flavor) -> dict[str, tuple[Decimal, Decimal]]:
    return {
        q.resource: (q.guaranteed, q.limit)
        for q in Quota.objects.filter(quota_set__tenant=tenant, flavor=flavor)
    }


def file(world, tenant, requester, **kwargs):
    return quota_request_create(
        tenant=tenant,
        cluster=world.a100,
        requester=requester,
        reason="a share of a T4",
        items=request_items_parse(cluster=world.a100, raw_items=lines(**kwargs)),
        submit=True,
    )


# --- what people type -----------------------------------------------------------------------


def test_api_takes_gib_and_percent_and_stores_mib_and_points(world, t4v, api_as):
    response = api_as(world.alice).post(URL, body_for(), format="json")
    assert response.status_code == 201, response.json()
    request = response.json()
    quota_request_approve(
        request=world.team_a.quota_requests.get(pk=request["id"]),
        approver=world.admin,
        comment="",
    )
    assert held(world.team_a, t4v) == {
        GPU_RESOURCE: (3, 3),
        GPUMEM_RESOURCE: (4608 * MIB, 4608 * MIB),
        GPUCORES_RESOURCE: (30, 30),
    }


@pytest.mark.parametrize("memory", ["4608Mi", "4.5Gi", "4.5 GiB", "4.5"])
@pytest.mark.parametrize("cores", ["30%", "30", 30])
def test_memory_as_a_quantity_or_gib_and_compute_with_or_without_percent(world, t4v, memory, cores):
    items = request_items_parse(cluster=world.a100, raw_items=lines(memory=memory, cores=cores))
    assert [(i.resource, i.limit) for i in items] == [
        (GPU_RESOURCE, 3),
        (GPUMEM_RESOURCE, 4608 * MIB),
        (GPUCORES_RESOURCE, 30),
    ]


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"memory": "4.3"}, "items[1].guaranteed", "not a whole number of MiB"),
        ({"memory": "4500000k"}, "items[1].guaranteed", "not a whole number of MiB"),
        ({"cores": "30.5%"}, "items[2].guaranteed", "whole percent of a GPU"),
        ({"cores": "thirty"}, "items[2].guaranteed", "not a percent of a GPU"),
        # one vGPU sits on one GPU: no more memory than a T4 has, compute within 1..100%
        ({"vgpus": "1", "memory": "16"}, "items[1].limit", "each vGPU sits on one GPU of 15 GiB"),
        ({"vgpus": "1", "cores": "150"}, "items[2].limit", "outside 1..100% per vGPU"),
    ],
)
def test_api_refuses_bad_gpu_memory_and_compute_naming_field_and_rule(
    world, t4v, api_as, kwargs, field, words
):
    before = database_state()
    response = api_as(world.alice).post(URL, body_for(**kwargs), format="json")
    assert response.status_code == 400, response.json()
    fields = response.json()["fields"]
    assert field in fields, fields
    assert words in " ".join(fields[field])
    assert database_state() == before


def test_a_teams_compute_over_several_vgpus_may_pass_100_percent(world, t4v):
    request = file(world, world.team_a, world.alice, vgpus="2", memory="18", cores="120")
    quota_request_approve(request=request, approver=world.admin, comment="")
    assert held(world.team_a, t4v)[GPUCORES_RESOURCE] == (120, 120)
    assert held(world.team_a, t4v)[GPUMEM_RESOURCE] == (18 * GIB, 18 * GIB)


@pytest.mark.parametrize(
    ("version", "words"),
    [("", "HAMi was not found on the cluster"), ("v2.6.0", "HAMi 2.6.0 is older than 2.7.0")],
)
def test_a_vgpu_line_on_a_cluster_without_new_enough_hami_is_refused(
    world, t4v, api_as, version, words
):
    world.a100.hami_version = version
    world.a100.save(update_fields=["hami_version"])
    before = database_state()
    response = api_as(world.alice).post(URL, body_for(), format="json")
    assert response.status_code == 400
    message = " ".join(response.json()["fields"]["items[0].flavor"])
    assert "t4-vgpu is a vGPU flavor" in message and words in message
    assert database_state() == before


def test_approval_refuses_a_vgpu_line_once_hami_is_gone(world, t4v):
    request = file(world, world.team_a, world.alice)
    world.a100.hami_version = ""
    world.a100.save(update_fields=["hami_version"])
    with pytest.raises((Conflict, ValidationFailed), match="HAMi was not found"):
        quota_request_approve(request=request, approver=world.admin, comment="")
    assert held(world.team_a, t4v) == {}


# --- the fleet's GPU memory and compute -------------------------------------------------------


def test_guarantees_past_the_fleets_gpu_memory_are_refused_at_submit(world, t4v, api_as):
    quota_request_approve(
        request=file(world, world.team_b, world.bob, vgpus="8", memory="18", cores="110"),
        approver=world.admin,
        comment="",
    )
    before = database_state()
    response = api_as(world.alice).post(
        URL, body_for(vgpus="8", memory="15", cores="60"), format="json"
    )
    assert response.status_code == 400
    message = " ".join(response.json()["fields"]["items[1].guaranteed"])
    assert "nvidia.com/gpumem on t4-vgpu: guaranteed 15 GiB does not fit" in message
    assert "other tenants hold 18 GiB of 30 GiB" in message
    assert database_state() == before


def test_a_lead_asking_more_than_the_fleet_has_is_refused(world, t4v, api_as):
    """A limit past the elastic cap (62.5% of 30 GiB: 19,200 MiB, shown 18.8 GiB)."""
    response = api_as(world.alice).post(
        URL,
        body_for(vgpus="4", memory="4", cores="40", limits={GPUMEM_RESOURCE: "40"}),
        format="json",
    )
    assert response.status_code == 400
    message = " ".join(response.json()["fields"]["items[1].limit"])
    assert "exceeds the elastic cap of 18.8 GiB" in message
    assert "of 30 GiB nvidia.com/gpumem in t4-vgpu" in message


def test_approval_checks_gpu_memory_again(world, t4v):
    first = file(world, world.team_a, world.alice, vgpus="6", memory="16", cores="100")
    second = file(world, world.team_b, world.bob, vgpus="6", memory="16", cores="100")
    quota_request_approve(request=first, approver=world.admin, comment="")
    with pytest.raises((Conflict, ValidationFailed), match="does not fit"):
        quota_request_approve(request=second, approver=world.admin, comment="")
    assert held(world.team_b, t4v) == {}


def test_another_teams_lead_cannot_file_for_a_team_not_theirs(world, t4v, api_as):
    before = database_state()
    response = api_as(world.bob).post(URL, body_for("team-a"), format="json")
    assert response.status_code in (403, 404)
    assert database_state() == before


# --- pages ------------------------------------------------------------------------------------


def words_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_pages_show_gib_of_gpu_memory_percent_and_what_hami_caps(world, t4v, client):
    request = file(world, world.team_a, world.alice, memory="4.5", cores="30%")
    quota_request_approve(request=request, approver=world.admin, comment="")
    client.force_login(world.alice)
    page = words_of(client.get("/tenants/team-a/").content.decode())
    assert "4.5 GiB of GPU memory" in page and "30% of a GPU" in page
    assert "A vGPU share (HAMi) caps each container on the GPU" in page


FORM = "/tenants/team-a/requests/new/?cluster=demo-a100"


def form_rows(html: str) -> dict[str, str]:
    """The t4-vgpu rows of the request form, by resource: their field prefix."""
    rows = {}
    for resource in (GPU_RESOURCE, GPUMEM_RESOURCE, GPUCORES_RESOURCE):
        row = html.split(f'data-flavor="t4-vgpu" data-resource="{resource}"', 1)[1]
        rows[resource] = re.search(r'name="(items-\d+)-guaranteed"', row).group(1)
    return rows


def form_post(client, html: str, amounts: dict[str, str]):
    values = dict(re.findall(r'name="(items-\d+-\w+)"(?: value="([^"]*)")?', html))
    data = {k: v for k, v in values.items() if v}
    rows = form_rows(html)
    for resource, amount in amounts.items():
        data[f"{rows[resource]}-guaranteed"] = amount
        data[f"{rows[resource]}-limit"] = amount
    return client.post(FORM, {**data, "reason": "notebooks", "action": "submit"})


def test_the_request_form_takes_gib_and_percent(world, t4v, client):
    client.force_login(world.alice)
    page = client.get(FORM).content.decode()
    assert "type GiB (4.5) or a quantity (4608Mi)" in words_of(page)
    assert "A vGPU share (HAMi) caps each container on the GPU" in words_of(page)
    posted = form_post(
        client, page, {GPU_RESOURCE: "3", GPUMEM_RESOURCE: "4.5", GPUCORES_RESOURCE: "30%"}
    )
    assert posted.status_code == 302, words_of(posted.content.decode())[:2000]
    request = world.team_a.quota_requests.filter(items__flavor=t4v).distinct().get()
    assert {i.resource: i.limit for i in request.items.all()} == {
        GPU_RESOURCE: 3,
        GPUMEM_RESOURCE: 4608 * MIB,
        GPUCORES_RESOURCE: 30,
    }


def test_the_request_form_names_the_field_and_rule_of_bad_gpu_memory(world, t4v, client):
    client.force_login(world.alice)
    page = client.get(FORM).content.decode()
    refused = form_post(
        client, page, {GPU_RESOURCE: "3", GPUMEM_RESOURCE: "4.3", GPUCORES_RESOURCE: "30%"}
    )
    assert refused.status_code == 200
    assert "is not a whole number of MiB" in words_of(refused.content.decode())
    assert not world.team_a.quota_requests.filter(items__flavor=t4v).exists()


# --- time-sliced -> vGPU ------------------------------------------------------------------------


@pytest.fixture
def sliced(world):
    """team-a 3 shares, team-b 1..2 shares of a T4 time-sliced 7 ways (1/7 is no whole MiB)."""
    flavor = t4_flavor(world.a100, replicas=7)
    for tenant, (g, lim) in ((world.team_a, (3, 3)), (world.team_b, (1, 2))):
        current = [
            QuotaItem(q.flavor, q.resource, q.guaranteed, q.limit, q.lending_limit)
            for q in Quota.objects.filter(quota_set__tenant=tenant, quota_set__cluster=world.a100)
        ]
        quota_set_write(
            tenant=tenant,
            cluster=world.a100,
            items=[*current, QuotaItem(flavor, GPU_RESOURCE, Decimal(g), Decimal(lim))],
            scheduling=_scheduling(tenant, world.a100),
            actor=world.admin,
        )
    return flavor


def _scheduling(tenant, cluster):
    from quotas.services import SchedulingQuotas
    from quotas.services.vgpu import SCHEDULING_NAMES

    qs = tenant.quota_sets.get(cluster=cluster)
    return SchedulingQuotas(**{name: getattr(qs, name) for name in SCHEDULING_NAMES})


def test_moving_a_time_sliced_flavor_to_vgpu_keeps_each_tenants_fraction(world, sliced):
    world.a100.hami_version = "2.7.0"
    world.a100.save(update_fields=["hami_version"])
    a100_before = held(world.team_a, world.a100_gpu)
    outbox_before = SyncOutbox.objects.count()
    result = flavor_vgpu_convert(flavor=sliced, gpu_memory_mib=T4_MIB, actor=world.admin)
    sliced.refresh_from_db()
    assert (sliced.kind, sliced.time_slicing_replicas) == (FlavorKind.VGPU, None)
    assert (sliced.gpu_memory_mib, sliced.vgpu_split) == (T4_MIB, 7)
    capacity = dict(sliced.resources.values_list("resource", "capacity"))
    assert capacity == {GPU_RESOURCE: 7, GPUMEM_RESOURCE: T4_MIB * MIB, GPUCORES_RESOURCE: 100}
    # 3/7 of 15360 MiB is 6582.857 MiB: 6582 MiB, the rest noted; 3/7 of 100%: 42%
    assert held(world.team_a, sliced) == {
        GPU_RESOURCE: (3, 3),
        GPUMEM_RESOURCE: (6582 * MIB, 6582 * MIB),
        GPUCORES_RESOURCE: (42, 42),
    }
    assert held(world.team_b, sliced) == {
        GPU_RESOURCE: (1, 2),
        GPUMEM_RESOURCE: (2194 * MIB, 4388 * MIB),
        GPUCORES_RESOURCE: (14, 28),
    }
    assert held(world.team_a, world.a100_gpu) == a100_before  # other lines stay
    by_tenant = {c.tenant: c for c in result.shares}
    assert "0.86 MiB of GPU memory" in by_tenant["team-a"].rest
    assert "0.86% of a GPU" in by_tenant["team-a"].rest
    assert SyncOutbox.objects.count() >= outbox_before + 2  # pushed after commit
    event = AuditEvent.objects.get(action="flavor.moved_to_vgpu")
    assert event.after["tenants"]["team-a"]["rest"]


@pytest.mark.parametrize(
    ("version", "memory", "field", "words"),
    [
        ("", T4_MIB, "flavor", "HAMi was not found"),
        ("2.5.1", T4_MIB, "flavor", "older than 2.7.0"),
        ("2.7.0", None, "gpu_memory_mib", "give the memory of one of t4-shared's GPUs"),
    ],
)
def test_moving_to_vgpu_is_refused_without_hami_or_the_gpus_memory(
    world, sliced, version, memory, field, words
):
    world.a100.hami_version = version
    world.a100.save(update_fields=["hami_version"])
    before = (held(world.team_a, sliced), held(world.team_b, sliced))
    with pytest.raises(ValidationFailed) as refused:
        flavor_vgpu_convert(flavor=sliced, gpu_memory_mib=memory, actor=world.admin)
    assert words in " ".join(refused.value.fields[field])
    sliced.refresh_from_db()
    assert (sliced.kind, sliced.time_slicing_replicas) == (FlavorKind.GPU, 7)
    assert (held(world.team_a, sliced), held(world.team_b, sliced)) == before
    assert not AuditEvent.objects.filter(action="flavor.moved_to_vgpu").exists()


def test_the_django_admin_moves_a_flavor_once_its_gpu_memory_is_set(world, sliced, client):
    world.a100.hami_version = "2.10.0"
    world.a100.save(update_fields=["hami_version"])
    client.force_login(world.admin)
    action = {"action": "move_to_vgpu", "_selected_action": [sliced.pk]}
    page = client.post("/admin/quotas/resourceflavor/", action, follow=True).content.decode()
    assert "memory of one of t4-shared's GPUs" in unescape(page)  # not set yet: refused
    sliced.refresh_from_db()
    assert sliced.kind == FlavorKind.GPU
    ResourceFlavor.objects.filter(pk=sliced.pk).update(gpu_memory_mib=T4_MIB)
    page = client.post("/admin/quotas/resourceflavor/", action, follow=True).content.decode()
    assert "4-shared now gives vGPU shares; 2 tenants moved" in unescape(page)
    assert held(world.team_a, sliced)[GPUMEM_RESOURCE] == (6582 * MIB, 6582 * MIB)


def test_the_command_moves_a_flavor_and_says_what_each_tenant_holds(world, sliced):
    from io import StringIO

    from django.core.management import CommandError, call_command

    world.a100.hami_version = "2.10.0"
    world.a100.save(update_fields=["hami_version"])
    with pytest.raises(CommandError, match="not a platform admin"):
        call_command(
            "flavor_to_vgpu", "--cluster", "demo-a100", "--flavor", "t4-shared",
            "--gpu-memory-mib", "15360", "--actor", world.alice.username,
        )  # fmt: skip
    out = StringIO()
    call_command(
        "flavor_to_vgpu", "--cluster", "demo-a100", "--flavor", "t4-shared",
        "--gpu-memory-mib", "15360", "--actor", world.admin.username, stdout=out,
    )  # fmt: skip
    assert "team-a: limit 3 vGPUs, 6.43 GiB of GPU memory, 42% of a GPU" in out.getvalue()


# --- tiers ------------------------------------------------------------------------------------


def test_a_tier_on_a_vgpu_flavor_gives_its_gpus_worth_of_memory_and_compute(world, t4v):
    from quotas.models import TierTemplate
    from quotas.services import quota_set_create_from_tier

    tier = TierTemplate.objects.create(
        name="t4-one", display_name="One T4", gpus_guaranteed=0, gpus_limit=1,
        cpu_guaranteed=0, cpu_limit=0, memory_guaranteed=0, memory_limit=0,
        storage_bytes=0, max_running_jobs=1, max_queued_jobs=1, max_pods=4, max_pvcs=1,
    )  # fmt: skip
    quota_set_create_from_tier(
        tenant=world.team_c, cluster=world.a100, tier=tier, actor=world.admin, gpu_flavor=t4v
    )
    assert held(world.team_c, t4v) == {
        GPU_RESOURCE: (0, 10),
        GPUMEM_RESOURCE: (0, T4_MIB * MIB),
        GPUCORES_RESOURCE: (0, 100),
    }
    world.a100.hami_version = "2.6.0"
    world.a100.save(update_fields=["hami_version"])
    t4v.refresh_from_db()
    with pytest.raises(ValidationFailed, match=r"older than 2\.7\.0"):
        quota_set_create_from_tier(
            tenant=world.team_b, cluster=world.a100, tier=tier, actor=world.admin, gpu_flavor=t4v
        )
    assert held(world.team_b, t4v) == {}


# --- the same rules as other flavors: department caps ----------------------------------------


def test_a_department_caps_its_teams_gpu_memory_in_gib(world, t4v):
    from quotas.services import SchedulingQuotas
    from tenants.models import Tenant
    from tenants.services import tenant_create

    department = tenant_create(slug="labs", display_name="Labs", actor=world.admin)
    Tenant.objects.filter(pk__in=[world.team_b.pk, world.team_c.pk]).update(parent=department)
    quota_set_write(
        tenant=department,
        cluster=world.a100,
        actor=world.admin,
        items=[
            QuotaItem(t4v, GPU_RESOURCE, Decimal(0), Decimal(10)),
            QuotaItem(t4v, GPUMEM_RESOURCE, Decimal(0), Decimal(15 * GIB)),
            QuotaItem(t4v, GPUCORES_RESOURCE, Decimal(0), Decimal(100)),
        ],
        scheduling=SchedulingQuotas(),
    )
    world.team_b.refresh_from_db()
    team_c = [
        QuotaItem(q.flavor, q.resource, q.guaranteed, q.limit)
        for q in Quota.objects.filter(quota_set__tenant=world.team_c, quota_set__cluster=world.a100)
    ]
    quota_set_write(
        tenant=world.team_c,
        cluster=world.a100,
        actor=world.admin,
        items=[
            *team_c,
            QuotaItem(t4v, GPU_RESOURCE, Decimal(4), Decimal(4)),
            QuotaItem(t4v, GPUMEM_RESOURCE, Decimal(9 * GIB), Decimal(9 * GIB)),
            QuotaItem(t4v, GPUCORES_RESOURCE, Decimal(60), Decimal(60)),
        ],
        scheduling=SchedulingQuotas(),
    )
    with pytest.raises(ValidationFailed) as refused:
        file(world, world.team_b, world.bob, vgpus="4", memory="7", cores="40")
    message = refused.value.fields["items[1].limit"][0]
    assert "the department labs caps its teams at 15 GiB" in message
    assert "add up to 16 GiB" in message
    assert held(world.team_b, t4v) == {}
