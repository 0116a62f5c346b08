"""R23: an isolation level per tenant, set by request. It decides which flavors the tenant's
quotas may be on (a time-sliced tenant asking for whole A100s is refused with the rule), is
checked at submit and again at approval, and shows with the seed's three layers."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from approvals.models import QuotaChangeRequest
from approvals.services import quota_request_approve, quota_request_create
from core.errors import Conflict, ValidationFailed
from quotas.choices import CPU_RESOURCE, GPU_RESOURCE, FlavorKind
from quotas.isolation import ALLOWED, LAYERS, FlavorIsolation, flavor_isolation
from quotas.models import FlavorResource, ResourceFlavor
from quotas.services import QuotaItem
from tenants.choices import IsolationLevel
from tenants.models import AuditEvent, Tenant
from tests.approvals.conftest import URL, body, database_state

pytestmark = pytest.mark.django_db


def shared_flavor(cluster, name: str = "a100-shared", replicas: int = 4) -> ResourceFlavor:
    """A time-sliced A100 flavor: 4 GPUs, each advertised ``replicas`` times."""
    flavor = ResourceFlavor.objects.create(
        cluster=cluster,
        name=name,
        kind=FlavorKind.GPU,
        gpu_model="NVIDIA A100-SXM4-80GB",
        time_slicing_replicas=replicas,
        gpu_weight=Decimal("0.25"),
    )
    FlavorResource.objects.create(
        flavor=flavor, resource=GPU_RESOURCE, capacity=Decimal(4 * replicas)
    )
    return flavor


def at_level(tenant: Tenant, level: str) -> None:
    Tenant.objects.filter(pk=tenant.pk).update(isolation_level=level)
    tenant.refresh_from_db()


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# --- the rule, without a database -------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "taints", "replicas", "expected"),
    [
        ("gpu", [], None, FlavorIsolation.WHOLE_GPU),
        ("gpu", [], 4, FlavorIsolation.TIME_SLICED),
        ("mig", [], None, FlavorIsolation.MIG),
        ("gpu", [{"key": "dedicated", "value": "bank", "effect": "NoSchedule"}], None, "dedicated"),
        ("cpu", [], None, FlavorIsolation.NONE),
        ("storage", [], None, FlavorIsolation.NONE),
    ],
)
def test_what_a_flavor_gives(kind, taints, replicas, expected):
    assert (
        flavor_isolation(kind=kind, node_taints=taints, time_slicing_replicas=replicas) == expected
    )


def test_every_level_has_the_seeds_three_layers_and_some_gpu_flavor():
    assert set(LAYERS) == set(IsolationLevel.values) == set(ALLOWED)
    for level, layers in LAYERS.items():
        assert layers.fault and layers.performance and layers.security, level
        assert ALLOWED[level], level
    # The seed's table: MIG beats time slices on performance; physical partitions beat all.
    assert LAYERS[IsolationLevel.MIG].performance == "high"
    assert LAYERS[IsolationLevel.TIME_SLICED].performance == "medium"
    assert LAYERS[IsolationLevel.DEDICATED].security == "very high"
    assert FlavorIsolation.WHOLE_GPU not in ALLOWED[IsolationLevel.TIME_SLICED]


# --- at submit --------------------------------------------------------------------------------


def test_a_time_sliced_tenant_asking_for_whole_a100s_is_refused_with_the_rule(world):
    at_level(world.team_a, IsolationLevel.TIME_SLICED)
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        quota_request_create(
            tenant=world.team_a,
            cluster=world.a100,
            requester=world.alice,
            reason="more",
            items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(8), Decimal(10))],
        )
    message = refused.value.fields["items[0].flavor"][0]
    assert "a100-80gb gives whole GPUs" in message
    assert "time-sliced GPU share" in message
    assert "only time-sliced GPU shares" in message
    assert database_state() == before


def test_a_time_sliced_tenant_gets_shares_and_may_lower_whole_gpus_to_zero(world):
    shared = shared_flavor(world.a100)
    at_level(world.team_a, IsolationLevel.TIME_SLICED)
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="inference on shares",
        items=[
            QuotaItem(shared, GPU_RESOURCE, Decimal(2), Decimal(4)),
            QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(0), Decimal(0)),
            QuotaItem(world.a100_gpu, CPU_RESOURCE, Decimal(0), Decimal(0)),
        ],
        submit=True,
    )
    request.refresh_from_db()
    assert request.status == "pending"


def test_cpu_and_storage_fit_every_level(world):
    cpu = ResourceFlavor.objects.create(cluster=world.a100, name="cpu-general", kind="cpu")
    FlavorResource.objects.create(flavor=cpu, resource=CPU_RESOURCE, capacity=Decimal(64))
    at_level(world.team_a, IsolationLevel.DEDICATED)
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="a build box",
        items=[QuotaItem(cpu, CPU_RESOURCE, Decimal(4), Decimal(8))],
    )
    assert request.items.count() == 1


def test_a_new_level_is_refused_while_quotas_elsewhere_break_it_naming_each(world):
    """team-a holds whole A100s on demo-a100 and whole H100s on demo-h100: a move to MIG
    instances is refused, each line named with its cluster."""
    before = database_state()
    with pytest.raises(ValidationFailed) as refused:
        quota_request_create(
            tenant=world.team_a,
            cluster=world.h100,
            requester=world.alice,
            reason="production inference needs MIG",
            items=[QuotaItem(world.h100_mig, "nvidia.com/mig-1g.10gb", Decimal(2), Decimal(4))],
            isolation_level=IsolationLevel.MIG,
        )
    messages = refused.value.fields["isolation_level"]
    assert any("a100-80gb" in m and "demo-a100" in m and "lower it to 0" in m for m in messages)
    assert any("h100-80gb" in m and "demo-h100" in m for m in messages)
    assert "items[0].flavor" not in refused.value.fields  # MIG fits the level asked for
    assert database_state() == before


def test_asking_for_the_level_in_force_changes_nothing(world):
    with pytest.raises(ValidationFailed) as refused:
        quota_request_create(
            tenant=world.team_a,
            cluster=world.a100,
            requester=world.alice,
            reason="same",
            items=[],
            isolation_level=IsolationLevel.WHOLE_GPU,
        )
    assert "already at whole gpu" in refused.value.fields["isolation_level"][0]


# --- at approval ------------------------------------------------------------------------------


def test_an_approved_level_change_sets_the_tenant_and_is_audited(world):
    request = quota_request_create(
        tenant=world.team_c,
        cluster=world.a100,
        requester=world.admin,
        reason="dev and test only",
        items=[],
        isolation_level=IsolationLevel.NAMESPACE,
        submit=True,
    )
    assert request.isolation_level == IsolationLevel.NAMESPACE
    quota_request_approve(request=request, approver=_other_admin())
    world.team_c.refresh_from_db()
    assert world.team_c.isolation_level == IsolationLevel.NAMESPACE
    event = AuditEvent.objects.get(action="tenant.isolation_level_changed")
    assert event.before == {"isolation_level": "whole-gpu"}
    assert event.after["isolation_level"] == "namespace"


def test_approval_checks_the_level_again(world):
    """Filed at whole GPU; by approval the tenant moved to time-sliced shares: 409 naming
    the line, nothing applied."""
    request = quota_request_create(
        tenant=world.team_a,
        cluster=world.a100,
        requester=world.alice,
        reason="more",
        items=[QuotaItem(world.a100_gpu, GPU_RESOURCE, Decimal(8), Decimal(10))],
        submit=True,
    )
    at_level(world.team_a, IsolationLevel.TIME_SLICED)
    before = database_state()
    with pytest.raises(Conflict) as refused:
        quota_request_approve(request=request, approver=world.admin)
    assert "a100-80gb gives whole GPUs" in refused.value.fields["items[0].flavor"][0]
    assert database_state() == before
    assert QuotaChangeRequest.objects.get(pk=request.pk).status == "pending"


def _other_admin():
    from tests.factories import UserFactory

    return UserFactory(username="admin2", is_platform_admin=True, is_staff=True)


# --- API --------------------------------------------------------------------------------------


def test_api_refuses_whole_a100s_for_a_time_sliced_tenant_naming_the_field(world, api_as):
    at_level(world.team_a, IsolationLevel.TIME_SLICED)
    before = database_state()
    response = api_as(world.alice).post(URL, body(), format="json")
    assert response.status_code == 400
    assert "time-sliced GPU shares" in response.json()["fields"]["items[0].flavor"][0]
    assert database_state() == before


def test_api_refuses_an_unknown_level_naming_the_field(world, api_as):
    response = api_as(world.alice).post(URL, body(isolation_level="bare-metal"), format="json")
    assert response.status_code == 400
    assert "isolation_level" in response.json()["fields"]


def test_api_files_a_level_change_and_the_tenant_shows_it_once_approved(world, api_as):
    filed = api_as(world.bob).post(
        URL,
        {
            "tenant": "team-b",
            "cluster": "demo-a100",
            "reason": "internal teams",
            "isolation_level": "namespace",
            "submit": True,
        },
        format="json",
    )
    assert filed.status_code == 201, filed.json()
    assert filed.json()["isolation_level"] == "namespace"
    checked = api_as(world.bob).post(
        f"{URL}validate/",
        {"tenant": "team-b", "cluster": "demo-a100", "reason": "x", "isolation_level": "mig"},
        format="json",
    )
    assert checked.status_code == 200
    assert checked.json()["valid"] is False
    assert "isolation_level" in checked.json()["errors"]
    approved = api_as(world.admin).post(f"{URL}{filed.json()['id']}/approve/", {}, format="json")
    assert approved.status_code == 200, approved.json()
    tenant = api_as(world.bob).get("/api/v1/tenants/team-b/").json()
    assert tenant["isolation_level"] == "namespace"


def test_the_tenant_api_does_not_change_the_level_directly(world, api_as):
    response = api_as(world.admin).patch(
        "/api/v1/tenants/team-a/", {"isolation_level": "dedicated"}, format="json"
    )
    assert response.status_code == 400
    world.team_a.refresh_from_db()
    assert world.team_a.isolation_level == IsolationLevel.WHOLE_GPU


# --- pages ------------------------------------------------------------------------------------


def test_the_tenant_page_shows_the_level_with_its_three_layers(world, client):
    at_level(world.team_a, IsolationLevel.MIG)
    client.force_login(world.carol)
    page = client.get("/tenants/team-a/")
    html = page.content.decode()
    assert 'data-isolation-level="mig"' in html
    words = text_of(html)
    assert "Level: MIG instance" in words
    assert "Fault isolation Performance isolation Security isolation" in words
    assert "high high high" in words
    assert "its quotas may be on MIG instances, and on CPU and storage" in words


def test_a_lead_asks_for_a_level_on_the_request_form_and_a_refusal_names_the_rule(world, client):
    client.force_login(world.alice)
    form = client.get("/tenants/team-a/requests/new/?cluster=demo-a100")
    assert 'name="isolation_level"' in form.content.decode()
    refused = client.post(
        "/tenants/team-a/requests/new/?cluster=demo-a100",
        {
            "isolation_level": "time-sliced",
            "reason": "inference",
            "action": "submit",
            # The rows as in force: only the level changes.
            **{"items-0-guaranteed": "6", "items-0-limit": "10"},
            **{"items-1-guaranteed": "48", "items-1-limit": "80"},
            **{"items-2-guaranteed": "384Gi", "items-2-limit": "640Gi"},
        },
    )
    assert refused.status_code == 200
    words = text_of(refused.content.decode())
    assert "a100-80gb gives whole GPUs" in words
    assert not QuotaChangeRequest.objects.filter(isolation_level="time-sliced").exists()


def test_a_time_sliced_flavor_reaches_the_device_plugins_config(world):
    """The flavor a time-sliced tenant holds is what the compiler shares: the loader carries
    its replicas, and the cluster-wide objects get the device plugin's time-slicing config."""
    from quotas.kube.compiler import compile_cluster_wide
    from quotas.loader import cluster_spec

    shared_flavor(world.a100, replicas=4)
    objects = compile_cluster_wide(cluster_spec(world.a100), [])
    configmaps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert [list(c["data"]) for c in configmaps] == [["a100-shared"]]
    assert "replicas: 4" in configmaps[0]["data"]["a100-shared"]


def test_a_flavor_shared_by_fewer_than_two_is_refused_by_the_database(world):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        shared_flavor(world.a100, replicas=1)


def test_django_admin_shows_the_level_but_does_not_edit_it(world, client):
    client.force_login(world.admin)
    page = client.get(f"/admin/tenants/tenant/{world.team_a.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Whole GPU" in html
    assert 'name="isolation_level"' not in html


def test_a_lead_files_a_level_change_on_the_form(world, client):
    client.force_login(world.bob)
    posted = client.post(
        "/tenants/team-b/requests/new/?cluster=demo-a100",
        {
            "isolation_level": "namespace",
            "reason": "development only",
            "action": "submit",
            **{"items-0-guaranteed": "4", "items-0-limit": "6"},
            **{"items-1-guaranteed": "32", "items-1-limit": "48"},
            **{"items-2-guaranteed": "256Gi", "items-2-limit": "384Gi"},
        },
    )
    assert posted.status_code == 302
    request = QuotaChangeRequest.objects.get(tenant=world.team_b, isolation_level="namespace")
    assert request.status == "pending"
    assert not request.items.exists()
    detail = text_of(client.get(posted["Location"]).content.decode())
    assert "Isolation level to Namespace and cgroup sharing" in detail


def test_the_request_form_offers_only_the_flavors_the_level_allows(world, client):
    """A lab on time-sliced shares (team-a) opens the form for demo-h100: it offers the shared
    flavor, never the MIG flavor it may not hold; the whole H100s it holds already stay, to be
    lowered. At whole GPU (team-a as the seed has it) the MIG flavor is offered again."""
    shared_flavor(world.h100, name="h100-shared")
    at_level(world.team_a, IsolationLevel.TIME_SLICED)
    client.force_login(world.alice)
    form = "/tenants/team-a/requests/new/?cluster=demo-h100"

    offered = set(re.findall(r'data-flavor="([^"]+)"', client.get(form).content.decode()))
    assert "h100-shared" in offered
    assert world.h100_mig.name not in offered
    assert "h100-80gb" in offered  # held: a row to lower it to 0

    at_level(world.team_a, IsolationLevel.WHOLE_GPU)
    offered = set(re.findall(r'data-flavor="([^"]+)"', client.get(form).content.decode()))
    assert world.h100_mig.name in offered and "h100-shared" not in offered
