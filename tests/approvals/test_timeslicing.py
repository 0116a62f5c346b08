"""R25: time-sliced shares by percentage. The seed's T4 split 30 / 30 / 40 over three teams,
with 10 shares per GPU, becomes 3, 3 and 4 shares; a percentage that is not a whole number of
shares is refused with the nearest valid values; the shares granted to all tenants never
exceed what the GPUs give, at submit and again at approval."""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import (
    approval_policy_update,
    quota_request_approve,
    quota_request_create,
    request_items_parse,
)
from core.errors import Conflict, ValidationFailed
from quotas.choices import GPU_RESOURCE, FlavorKind
from quotas.models import FlavorResource, Quota, ResourceFlavor
from quotas.services import QuotaItem
from tenants.choices import IsolationLevel, MembershipRole
from tenants.models import Tenant, User
from tenants.services import membership_set
from tests.approvals.conftest import URL, database_state
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def t4_flavor(cluster, *, gpus: int = 1, replicas: int = 10) -> ResourceFlavor:
    """A time-sliced T4 flavor: ``gpus`` T4s, each advertised ``replicas`` times."""
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name="t4-shared",
        kind=FlavorKind.GPU,
        gpu_model="Tesla T4",
        time_slicing_replicas=replicas,
        gpu_weight=Decimal("0.1"),
        node_labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
    )
    FlavorResource.objects.create(
        flavor=flavor, resource=GPU_RESOURCE, capacity=Decimal(gpus * replicas)
    )
    return flavor


def time_sliced(*tenants: Tenant) -> None:
    for tenant in tenants:
        Tenant.objects.filter(pk=tenant.pk).update(isolation_level=IsolationLevel.TIME_SLICED)
        tenant.refresh_from_db()


def shares_of(tenant: Tenant, flavor: ResourceFlavor) -> tuple[Decimal, Decimal]:
    quota = Quota.objects.get(quota_set__tenant=tenant, flavor=flavor, resource=GPU_RESOURCE)
    return quota.guaranteed, quota.limit


def percent_item(guaranteed: str, limit: str | None = None) -> dict[str, str]:
    return {
        "flavor": "t4-shared",
        "resource": GPU_RESOURCE,
        "guaranteed": guaranteed,
        "limit": limit or guaranteed,
    }


def lead_of(world, tenant: Tenant):
    """The tenant's lead (team-c has none in the world: dora becomes it)."""
    if tenant.slug == "team-a":
        return world.alice
    if tenant.slug == "team-b":
        return world.bob
    dora = User.objects.filter(username="dora").first()
    if dora is None:
        dora = UserFactory(username="dora")
        membership_set(tenant=tenant, user=dora, role=MembershipRole.LEAD, actor=world.admin)
    return dora


def file_percent(world, tenant, guaranteed: str, limit: str | None = None):
    return quota_request_create(
        tenant=tenant,
        cluster=world.a100,
        requester=lead_of(world, tenant),
        reason="notebooks on a shared T4",
        items=request_items_parse(cluster=world.a100, raw_items=[percent_item(guaranteed, limit)]),
        submit=True,
    )


@pytest.fixture(autouse=True)
def one_approver(world):
    """A share is a small slice of the cluster, but of a small flavor: one approval each."""
    approval_policy_update(actor=None, two_approvers_above_capacity_fraction=Decimal(1))


@pytest.fixture
def t4(world):
    flavor = t4_flavor(world.a100)
    time_sliced(world.team_a, world.team_b, world.team_c)
    return flavor


# --- services -----------------------------------------------------------------------------


def test_the_seeds_30_30_40_split_becomes_3_3_and_4_shares(world, t4):
    for tenant, percent in ((world.team_a, "30%"), (world.team_b, "30%"), (world.team_c, "40%")):
        request = file_percent(world, tenant, percent)
        quota_request_approve(request=request, approver=world.admin, comment="the seed's split")
    assert shares_of(world.team_a, t4) == (Decimal(3), Decimal(3))
    assert shares_of(world.team_b, t4) == (Decimal(3), Decimal(3))
    assert shares_of(world.team_c, t4) == (Decimal(4), Decimal(4))


def test_a_bare_number_is_shares_and_percent_may_pass_one_gpu(world):
    flavor = t4_flavor(world.a100, gpus=4)
    time_sliced(world.team_a)
    request = file_percent(world, world.team_a, "120%", "20")
    assert [(i.guaranteed, i.limit) for i in request.items.all()] == [(Decimal(12), Decimal(20))]
    assert flavor.time_slicing_replicas == 10


@pytest.mark.parametrize(
    ("replicas", "asked", "nearest"),
    [
        (10, "35%", "30% (3 shares) or 40% (4 shares)"),
        (4, "30%", "25% (1 share) or 50% (2 shares)"),
        (4, "10%", "0% (0 shares) or 25% (1 share)"),
        (3, "50%", "33.33% (1 share) or 66.67% (2 shares)"),
    ],
)
def test_a_percent_that_is_not_whole_shares_is_refused_with_the_nearest(
    world, replicas, asked, nearest
):
    t4_flavor(world.a100, replicas=replicas)
    time_sliced(world.team_a)
    with pytest.raises(ValidationFailed) as refused:
        file_percent(world, world.team_a, asked)
    message = refused.value.fields["items[0].guaranteed"][0]
    assert f"{asked} of a GPU is not a whole number of shares" in message
    assert f"t4-shared gives {replicas} shares per GPU" in message
    assert f"the nearest valid values are {nearest}" in message


def test_a_third_of_a_gpu_is_accepted_as_the_pages_write_it(world):
    t4_flavor(world.a100, gpus=4, replicas=3)
    time_sliced(world.team_a)
    request = file_percent(world, world.team_a, "33.33%", "66.67%")
    assert [(i.guaranteed, i.limit) for i in request.items.all()] == [(Decimal(1), Decimal(2))]


def test_a_percent_on_whole_gpus_is_refused(world):
    with pytest.raises(ValidationFailed) as refused:
        request_items_parse(
            cluster=world.a100,
            raw_items=[{"flavor": "a100-80gb", "resource": GPU_RESOURCE, "guaranteed": "50%",
                        "limit": "8"}],
        )  # fmt: skip
    assert (
        "only for the GPUs of a time-sliced flavor"
        in refused.value.fields["items[0].guaranteed"][0]
    )


def test_shares_past_what_the_gpus_give_are_refused_naming_flavor_total_and_capacity(world, t4):
    for tenant, percent in ((world.team_a, "30%"), (world.team_b, "30%")):
        quota_request_approve(
            request=file_percent(world, tenant, percent),
            approver=world.admin,
            comment="",
        )
    lead_of(world, world.team_c)  # her membership pushes team-c's sets: before the snapshot
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        file_percent(world, world.team_c, "50%")
    message = refused.value.fields["items[0].guaranteed"][0]
    assert "time-sliced flavor t4-shared" in message
    assert "would total 11 shares (110% of a GPU)" in message
    assert "5 here, 6 to other tenants" in message
    assert "above the 10 shares its 1 GPU give at 10 shares per GPU" in message
    assert database_state() == before


def test_even_a_cluster_that_overcommits_guarantees_keeps_shares_within_the_gpus(world, t4):
    world.a100.allow_guarantee_overcommit = True
    world.a100.save(update_fields=["allow_guarantee_overcommit"])
    quota_request_approve(
        request=file_percent(world, world.team_a, "60%"),
        approver=world.admin,
        comment="",
    )
    with pytest.raises(ValidationFailed) as refused:
        file_percent(world, world.team_b, "50%")
    assert "11 shares (110% of a GPU)" in refused.value.fields["items[0].guaranteed"][0]


def test_approval_checks_the_shares_again(world, t4):
    """Both filed while they fit; once the first is approved the second would pass the GPU."""
    first = file_percent(world, world.team_a, "60%")
    second = file_percent(world, world.team_b, "50%")
    quota_request_approve(request=first, approver=world.admin, comment="")
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=second, approver=world.admin, comment="")
    assert "above the 10 shares its 1 GPU give" in str(refused.value)
    assert not Quota.objects.filter(quota_set__tenant=world.team_b, flavor=t4).exists()


def test_lowering_a_share_below_what_others_hold_is_fine(world, t4):
    quota_request_approve(
        request=file_percent(world, world.team_a, "60%"),
        approver=world.admin,
        comment="",
    )
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="give some back",
        items=[QuotaItem(t4, GPU_RESOURCE, Decimal(5), Decimal(5))],
        submit=True,
    )
    quota_request_approve(request=request, approver=world.admin, comment="")
    assert shares_of(world.team_a, t4) == (Decimal(5), Decimal(5))


# --- API ----------------------------------------------------------------------------------


def body_for(tenant: str, guaranteed: str, limit: str | None = None) -> dict:
    return {
        "tenant": tenant,
        "cluster": "demo-a100",
        "reason": "notebooks on a shared T4",
        "items": [percent_item(guaranteed, limit)],
    }


def test_api_takes_percent_and_answers_in_shares(world, t4, api_as):
    response = api_as(world.alice).post(URL, body_for("team-a", "30%"), format="json")
    assert response.status_code == 201, response.json()
    item = response.json()["items"][0]
    assert (item["guaranteed"], item["limit"]) == ("3", "3")


def test_api_refuses_a_percent_off_the_shares_naming_the_field(world, t4, api_as):
    before = database_state()
    response = api_as(world.alice).post(URL, body_for("team-a", "30%", "35%"), format="json")
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert "30% (3 shares) or 40% (4 shares)" in fields["items[0].limit"][0]
    assert database_state() == before


def test_api_refuses_shares_past_the_gpus_naming_the_total(world, t4, api_as):
    quota_request_approve(
        request=file_percent(world, world.team_b, "60%"),
        approver=world.admin,
        comment="",
    )
    before = database_state()
    response = api_as(world.alice).post(URL, body_for("team-a", "50%"), format="json")
    assert response.status_code == 400
    message = response.json()["fields"]["items[0].guaranteed"][0]
    assert "11 shares (110% of a GPU)" in message
    assert "10 shares its 1 GPU give" in message
    assert database_state() == before


def test_api_shows_a_tenants_shares_as_percent_of_a_gpu(world, t4, api_as):
    quota_request_approve(
        request=file_percent(world, world.team_a, "30%", "50%"),
        approver=world.admin,
        comment="",
    )
    response = api_as(world.carol).get("/api/v1/tenants/team-a/quotas/")
    assert response.status_code == 200
    (a100,) = [qs for qs in response.json()["results"] if qs["cluster"] == "demo-a100"]
    (shared,) = [i for i in a100["items"] if i["flavor"] == "t4-shared"]
    assert shared["shares_per_gpu"] == 10
    assert (shared["guaranteed"], shared["limit"]) == ("3", "5")
    assert (shared["guaranteed_percent_of_gpu"], shared["limit_percent_of_gpu"]) == (30, 50)
    whole = next(i for i in a100["items"] if i["flavor"] == "a100-80gb")
    assert whole["shares_per_gpu"] is None and whole["guaranteed_percent_of_gpu"] is None


# --- pages --------------------------------------------------------------------------------

FORM = "/tenants/team-a/requests/new/?cluster=demo-a100"


def words(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def form_values(html: str) -> dict[str, str]:
    """The request form's rows as they come, and the index of the t4-shared row."""
    values = dict(re.findall(r'name="(items-\d+-\w+)"(?: value="([^"]*)")?', html))
    return {k: v for k, v in values.items() if v}


def t4_row(html: str) -> str:
    row = html.split('data-flavor="t4-shared"', 1)[1]
    return re.search(r'name="(items-\d+)-guaranteed"', row).group(1)


def test_the_request_form_takes_percent_for_time_sliced_shares(world, t4, client):
    client.force_login(world.alice)
    page = client.get(FORM).content.decode()
    said = words(page)
    assert "Time-sliced: 10 shares per GPU, 10% of a GPU each" in said
    assert "Type shares (3) or a percentage of a GPU (30%)" in said
    assert "shares a GPU's time, not its memory" in said
    row = t4_row(page)
    posted = client.post(
        FORM,
        {
            **form_values(page),
            f"{row}-guaranteed": "30%",
            f"{row}-limit": "40%",
            "reason": "notebooks",
            "action": "submit",
        },
    )
    assert posted.status_code == 302, words(posted.content.decode())[:2000]
    (item,) = QuotaChangeRequest.objects.get(tenant=world.team_a, cluster=world.a100).items.all()
    assert (item.flavor.name, item.guaranteed, item.limit) == ("t4-shared", 3, 4)


def test_the_request_form_names_the_nearest_valid_percentages(world, t4, client):
    client.force_login(world.alice)
    page = client.get(FORM).content.decode()
    row = t4_row(page)
    refused = client.post(
        FORM,
        {
            **form_values(page),
            f"{row}-guaranteed": "35%",
            f"{row}-limit": "40%",
            "reason": "notebooks",
            "action": "submit",
        },
    )
    assert refused.status_code == 200
    assert "the nearest valid values are 30% (3 shares) or 40% (4 shares)" in words(
        refused.content.decode()
    )
    assert not QuotaChangeRequest.objects.filter(tenant=world.team_a, cluster=world.a100).exists()


def test_tenant_and_cluster_pages_show_shares_as_percent_and_say_memory_is_shared(
    world, t4, client
):
    for tenant, percent in ((world.team_a, "30%"), (world.team_b, "30%"), (world.team_c, "40%")):
        quota_request_approve(
            request=file_percent(world, tenant, percent), approver=world.admin, comment=""
        )
    client.force_login(world.carol)
    tenant_page = words(client.get("/tenants/team-a/").content.decode())
    assert "3 shares (30% of a GPU)" in tenant_page
    assert "t4-shared is time-sliced : 10 shares per GPU, 10% of a GPU each" in tenant_page
    assert "every tenant on the GPU sees its whole memory" in tenant_page
    client.force_login(world.admin)
    cluster_page = client.get("/clusters/demo-a100/").content.decode()
    row = words(cluster_page.split('data-flavor="t4-shared"', 1)[1].split("</tr>", 1)[0])
    assert "10 shares (100% of a GPU)" in row  # capacity
    assert "1 GPU, time-sliced at 10 shares per GPU" in row
    assert row.count("10 shares (100% of a GPU)") == 2  # capacity and guaranteed to tenants
    assert "0 shares (0% of a GPU)" in row  # free
    assert "every tenant on the GPU sees its whole memory" in words(cluster_page)


def test_the_request_page_shows_the_change_in_shares_and_percent(world, t4, client):
    request = file_percent(world, world.team_a, "30%", "50%")
    client.force_login(world.admin)
    page = words(client.get(f"/requests/{request.pk}/").content.decode())
    assert "0 shares (0% of a GPU) → 3 shares (30% of a GPU)" in page
    assert "0 shares (0% of a GPU) → 5 shares (50% of a GPU)" in page
    assert "7 shares (70% of a GPU) of 10 shares (100% of a GPU)" in page  # free after approval


def test_api_cluster_detail_counts_a_time_sliced_flavor_in_shares(world, t4, api_as):
    quota_request_approve(
        request=file_percent(world, world.team_a, "30%"), approver=world.admin, comment=""
    )
    body = api_as(world.alice).get("/api/v1/clusters/demo-a100/").json()
    (shared,) = [a for a in body["allocations"] if a["flavor"] == "t4-shared"]
    assert (shared["capacity"], shared["guaranteed"], shared["free"]) == ("10", "3", "7")
    assert shared["shares_per_gpu"] == 10
    listed = api_as(world.alice).get("/api/v1/flavors/", {"cluster": "demo-a100"}).json()
    flavors = {f["name"]: f for f in listed["results"]}
    assert flavors["t4-shared"]["time_slicing_replicas"] == 10
    assert flavors["a100-80gb"]["time_slicing_replicas"] is None


def test_the_admin_console_counts_the_t4_in_shares(world, t4, client):
    quota_request_approve(
        request=file_percent(world, world.team_a, "30%"), approver=world.admin, comment=""
    )
    client.force_login(world.admin)
    page = client.get("/console/").content.decode()
    section = page.split('data-cluster="demo-a100"', 1)[1].split("</section>", 1)[0]
    row = words(section.split("t4-shared", 1)[1].split("</tr>", 1)[0])
    assert "10 shares (100% of a GPU) 3 shares (30% of a GPU) 7 shares (70% of a GPU)" in row
